//! A brunel checkpoint whose files pass `hpc-checkpoint`'s verification (sizes and
//! checksums are right) but whose contents are arbitrary: the restart path must
//! refuse what does not fit the model, naming the file, and never panic or index out
//! of bounds.
//!
//! Input: `[ranks-1 (mod 3)] [spikes counted] ([len u16 LE] [payload])* [spike file]`:
//! one payload per rank, the rest is the checkpoint's spike file.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use brunel::checkpoint;
use brunel::network::Block;
use brunel::params::{Model, Params, Preset};
use hpc_checkpoint::Checkpoints;
use libfuzzer_sys::fuzz_target;

const STEP: u64 = 300;

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        Model::new(Params {
            order: 10,
            t_sim: 40.0,
            ..Params::preset(Preset::Nest)
        })
        .expect("a valid small model")
    })
}

fn scratch() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("hpc-fuzz-brunel-ckpt-{}", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let model = model();
    let ranks = 1 + (data[0] % 3) as usize;
    let counted = u64::from(data[1]);
    let mut rest = &data[2..];
    let mut payloads = Vec::new();
    for _ in 0..ranks {
        if rest.len() < 2 {
            return;
        }
        let len = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        payloads.push(&rest[2..2 + len]);
        rest = &rest[2 + len..];
    }
    let root = scratch();
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("scratch directory");
    let set = Checkpoints::new(&root);
    let mut entries = Vec::new();
    for (r, p) in payloads.iter().enumerate() {
        entries.push(
            set.write_rank(STEP, r as u32, ranks as u32, p)
                .expect("write a rank file"),
        );
    }
    let spk = root.join("spikes.in");
    std::fs::write(&spk, rest).expect("write the spike file");
    hpc_spiking::checkpoint::commit_run(
        &set,
        &model.params,
        STEP,
        ranks,
        entries,
        Some((&spk, counted)),
    )
    .expect("commit");

    if let Ok(r) = checkpoint::open(&root) {
        if checkpoint::check_model(&r, model).is_ok() {
            for (parts, i) in [(1u32, 0u32), (2, 1), (3, 2)] {
                if let Ok(st) = checkpoint::read(&r, model, Block::part(model.n, parts, i)) {
                    let n = Block::part(model.n, parts, i).len as usize;
                    assert_eq!(st.v.len(), n);
                    assert_eq!(st.ring.len(), n * model.delay_steps as usize);
                }
            }
            if let Ok(Some(spikes)) = checkpoint::spikes_of(&r.checkpoint, model.n, r.meta.spikes) {
                assert!(spikes.iter().all(|&(_, id)| id < model.n));
                assert_eq!(spikes.len() as u64, counted);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
});
