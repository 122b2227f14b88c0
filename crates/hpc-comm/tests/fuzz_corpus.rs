//! The checked-in corpus of the `proxy_descriptor` fuzz target (`fuzz/`) is what
//! ranks post today: each file is a rank, a size and a blob as `Comm` encodes
//! it, and the proxy accepts it. `HPC_WRITE_CORPUS=1` rewrites the files after
//! a change of the blob's encoding.

use hpc_comm::{Collective, DataType, ReduceOp};

/// (file, rank, size, collective, send bytes, receive bytes)
fn cases() -> Vec<(&'static str, u8, u8, Collective, usize, usize)> {
    let f32s = DataType::F32;
    vec![
        ("barrier", 0, 2, Collective::Barrier, 0, 0),
        (
            "allreduce",
            1,
            4,
            Collective::Allreduce {
                count: 256,
                dtype: f32s,
                op: ReduceOp::Sum,
            },
            1024,
            1024,
        ),
        (
            "allgatherv",
            2,
            3,
            Collective::Allgatherv {
                counts: vec![1, 5, 2],
                dtype: DataType::I64,
            },
            16,
            64,
        ),
        (
            "alltoall",
            0,
            4,
            Collective::Alltoall {
                count: 8,
                dtype: DataType::U8,
            },
            32,
            32,
        ),
        (
            "bcast",
            3,
            5,
            Collective::Broadcast {
                root: 2,
                count: 100,
                dtype: DataType::F64,
            },
            0,
            800,
        ),
    ]
}

#[test]
fn the_proxy_descriptor_corpus_is_what_ranks_post() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/proxy_descriptor");
    let write = std::env::var("HPC_WRITE_CORPUS").as_deref() == Ok("1");
    for (name, rank, size, coll, send, recv) in cases() {
        let blob = hpc_comm::fuzz::encode_submit(&coll, send, recv);
        // The fuzz target's framing: rank, size - 1, blob.
        let mut input = vec![rank, size - 1];
        input.extend_from_slice(&blob);
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &input).unwrap();
        }
        let on_disk = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (HPC_WRITE_CORPUS=1 writes it)", path.display()));
        assert_eq!(
            on_disk, input,
            "{name}: stale corpus file (HPC_WRITE_CORPUS=1)"
        );
        let steps = hpc_comm::fuzz::proxy_submit(&blob, rank.into(), size.into())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            steps > 0 || matches!(coll, Collective::Barrier) && size == 1,
            "{name}"
        );
        // Cut short, it is refused, not misread.
        assert!(
            hpc_comm::fuzz::proxy_submit(&blob[..blob.len() / 2], rank.into(), size.into())
                .is_err()
        );
    }
}
