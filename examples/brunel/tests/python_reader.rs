//! The Python reader of the spike file (`hpc-spiking`'s `python/hpc_spikes.py`, which the
//! examples' `read_spikes.py` beside it uses) against the Rust one (`hpc_spiking::spikes::decode_spikes`):
//! files the brunel binary wrote, and the same files damaged in each way the
//! format forbids, are accepted or refused by both alike; then the Python tests
//! (`tools/test_hpc_spikes.py`) run on the binary's files.
//!
//! Without `python3` the test says so and passes, unless `HPC_REQUIRE_PYTHON=1`
//! (set by `cargo xtask test`; set-up installs Python).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hpc_spiking::spikes::{decode_spikes, SpikeFileError};
use hpc_test_support::example;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// A change to a valid header that makes it invalid.
type Edit = fn(&mut serde_json::Value);

fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

/// The Python reader, in the `hpc-spiking` crate.
fn reader() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/hpc-spiking/python/hpc_spikes.py")
}

/// Whether `python3` runs ([`hpc_test_support::have_python`]).
fn have_python() -> bool {
    hpc_test_support::have_python("the Python spike reader's tests")
}

fn brunel(out: &Path, extra: &[&str]) {
    let model = ["--preset", "nest", "--order", "50", "--t-sim", "60"];
    example::succeeded(
        &example::command(BRUNEL, &model, out, extra)
            .output()
            .unwrap(),
    );
}

fn python(args: &[&std::ffi::OsStr], envs: &[(&str, &Path)]) -> Output {
    let mut c = Command::new("python3");
    // No __pycache__ in the source tree.
    c.args(args)
        .current_dir(tools())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A spike file with the header `h` and `records`.
fn spk(h: &[u8], records: &[(u32, u32)]) -> Vec<u8> {
    let mut b = b"HPCSPIKE".to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&(h.len() as u32).to_le_bytes());
    b.extend_from_slice(h);
    for &(t, id) in records {
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&id.to_le_bytes());
    }
    b
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario, step after step, whose asserts read best in order"
)]
fn python_reader_accepts_and_refuses_what_the_rust_reader_does() {
    if !have_python() {
        return;
    }
    let dir = hpc_test_support::TmpDir::new("brunel-python-reader", "files");
    brunel(&dir.join("run"), &[]);
    brunel(&dir.join("stopped"), &["--stop-at", "30"]);
    let good = std::fs::read(dir.join("run/spikes.spk")).unwrap();
    let f = decode_spikes(&good, false).unwrap();
    assert!(f.spikes.len() > 100, "a run with spikes");
    let n = f.n_neurons;
    let hlen = u32::from_le_bytes(good[12..16].try_into().unwrap()) as usize;
    let h = &good[16..16 + hlen];
    let body = &good[16 + hlen..];
    let with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = f.header.clone();
        edit(&mut v);
        spk(v.to_string().as_bytes(), &f.spikes)
    };
    let last = f.spikes.last().copied().unwrap();
    let limit = hpc_spiking::spikes::tick_limit(0.1, 60.0) as u32;

    // (file name, bytes, accepted?) — the expectation is written out, so that the
    // two readers cannot agree on a wrong answer.
    let mut cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("good.spk", good.clone(), true),
        ("header-only.spk", spk(h, &[]), true),
        ("last-tick.spk", spk(h, &[(1, 0), (limit, n - 1)]), true),
        ("empty.spk", Vec::new(), false),
        ("short.spk", good[..10].to_vec(), false),
        ("magic.spk", [b"HPCSPIKX", &good[8..]].concat(), false),
        (
            "version.spk",
            [&good[..8], &2u32.to_le_bytes(), &good[12..]].concat(),
            false,
        ),
        ("header-cut.spk", good[..16 + hlen - 1].to_vec(), false),
        ("record-cut.spk", good[..good.len() - 3].to_vec(), false),
        (
            "record-cut.spk.partial",
            good[..good.len() - 3].to_vec(),
            true,
        ),
        ("id-n.spk", spk(h, &[(1, 0), (2, n)]), false),
        ("id-huge.spk", spk(h, &[(1, u32::MAX)]), false),
        ("unsorted.spk", spk(h, &[(5, 0), (4, 1)]), false),
        ("id-unsorted.spk", spk(h, &[(5, 2), (5, 1)]), false),
        ("duplicate.spk", spk(h, &[(5, 2), (5, 2)]), false),
        ("late.spk", spk(h, &[(1, 0), (limit + 1, 0)]), false),
        ("late-huge.spk", spk(h, &[(u32::MAX, 0)]), false),
        ("not-json.spk", spk(b"{\"n_neurons\": 3", &[]), false),
        ("not-object.spk", spk(b"[1]", &[]), false),
        ("nan.spk", spk(b"{\"n_neurons\": NaN}", &[]), false),
        (
            "deep.spk",
            spk(&[b"[".repeat(3000), b"]".repeat(3000)].concat(), &[]),
            false,
        ),
    ];
    let edits: Vec<(&str, Edit)> = vec![
        ("no-n.spk", |v| v["n_neurons"] = serde_json::json!(null)),
        ("float-n.spk", |v| v["n_neurons"] = serde_json::json!(250.0)),
        ("big-n.spk", |v| {
            v["n_neurons"] = serde_json::json!(1u64 << 32)
        }),
        ("zero-dt.spk", |v| v["dt_ms"] = serde_json::json!(0)),
        ("no-t-sim.spk", |v| v["t_sim_ms"] = serde_json::json!("60")),
        ("negative-t-sim.spk", |v| {
            v["t_sim_ms"] = serde_json::json!(-1.0)
        }),
        ("no-populations.spk", |v| {
            v["populations"] = serde_json::json!({})
        }),
        ("population-gap.spk", |v| {
            v["populations"][1]["first"] = serde_json::json!(201)
        }),
        ("population-short.spk", |v| {
            v["populations"][1]["count"] = serde_json::json!(49)
        }),
        ("population-name.spk", |v| {
            v["populations"][0]["name"] = serde_json::json!(7)
        }),
        ("shorter-run.spk", |v| {
            v["t_sim_ms"] = serde_json::json!(10.0)
        }),
    ];
    // Where Python's json module is laxer than serde_json: the Python reader
    // refuses what the Rust one refuses.
    let extra = |x: &str| {
        let h = std::str::from_utf8(h).unwrap();
        let h = format!("{},\"x\":{x}}}", &h[..h.len() - 1]);
        spk(h.as_bytes(), &f.spikes)
    };
    let nested = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
    cases.extend([
        ("float-inf.spk", extra("1e400"), false),
        ("int-big.spk", extra(&format!("1{}", "0".repeat(30))), true),
        (
            "int-inf.spk",
            extra(&format!("1{}", "0".repeat(400))),
            false,
        ),
        ("surrogate.spk", extra(r#""\ud800""#), false),
        ("surrogate-pair.spk", extra(r#""\ud83d\ude00""#), true),
        ("depth-127.spk", extra(&nested(126)), true),
        ("depth-128.spk", extra(&nested(127)), false),
    ]);
    // `-0` is a float to serde_json (-0.0), an integer 0 to Python's json: an id
    // range or a neuron count written so is refused by both, a time taken by both.
    let raw = |text: &str| spk(text.as_bytes(), &[(1, 0)]);
    cases.extend([
        (
            "first-minus-zero.spk",
            raw(r#"{"n_neurons":3,"dt_ms":0.1,"t_sim_ms":60,"populations":[{"name":"a","first":-0,"count":3}]}"#),
            false,
        ),
        (
            "n-minus-zero.spk",
            spk(br#"{"n_neurons":-0,"dt_ms":0.1,"t_sim_ms":60,"populations":[]}"#, &[]),
            false,
        ),
        (
            "t-sim-minus-zero.spk",
            spk(br#"{"n_neurons":3,"dt_ms":0.1,"t_sim_ms":-0,"populations":[{"name":"a","first":0,"count":3}]}"#, &[(1, 0)]),
            true,
        ),
        // Tick 0, which no run writes: both readers took it (pass 19).
        ("tick-0.spk", spk(h, &[(0, 0), (1, 0)]), false),
        ("tick-0-after.spk", spk(h, &[(1, 0), (0, 0)]), false),
    ]);
    for (name, edit) in &edits {
        cases.push((name, with(edit), false));
    }
    // A neuron of the run that spikes after the end of the shortened run: refused
    // above for that reason, not another.
    assert!(last.0 > hpc_spiking::spikes::tick_limit(0.1, 10.0) as u32);
    // Every damaged body of the real run: one flipped bit in a neuron id's top byte.
    let mut flipped = good.clone();
    flipped[16 + hlen + 8 * (body.len() / 16) + 7] ^= 0x80;
    cases.push(("flipped-id.spk", flipped, false));

    let files = dir.join("cases");
    std::fs::create_dir_all(&files).unwrap();
    for (name, bytes, accepted) in &cases {
        let path = files.join(name);
        std::fs::write(&path, bytes).unwrap();
        let rust = decode_spikes(bytes, name.ends_with(".partial"));
        assert_eq!(rust.is_ok(), *accepted, "Rust reader on {name}: {rust:?}");
        let o = python(&[reader().as_os_str(), path.as_os_str()], &[]);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        match &rust {
            Ok(f) => {
                assert_eq!(o.status.code(), Some(0), "Python refused {name}: {err}");
                let want = format!(
                    "valid, {} spikes of {} neurons",
                    f.spikes.len(),
                    f.n_neurons
                );
                assert!(out.contains(&want), "{name}: {out} (want {want})");
            }
            Err(e) => {
                assert_eq!(
                    o.status.code(),
                    Some(1),
                    "Python on {name} (Rust: {e}): {out}{err}"
                );
                assert!(!err.contains("Traceback"), "{name}: {err}");
                assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
                // Both readers name the same problem of the records.
                if let SpikeFileError::NeuronId { index, .. }
                | SpikeFileError::Unsorted { index, .. }
                | SpikeFileError::IdOrder { index, .. }
                | SpikeFileError::TickZero { index, .. }
                | SpikeFileError::AfterEnd { index, .. } = e
                {
                    assert!(
                        err.contains(&format!("record {index} ")),
                        "{name}: {err} ({e})"
                    );
                }
                let first_words = e.to_string();
                let first_words = first_words.split(' ').take(3).collect::<Vec<_>>().join(" ");
                assert!(err.contains(&first_words), "{name}: Python {err}, Rust {e}");
            }
        }
    }

    // The Python tests, with the binary's complete and stopped runs.
    let o = python(
        &[
            "-m".as_ref(),
            "unittest".as_ref(),
            "-v".as_ref(),
            "test_hpc_spikes".as_ref(),
        ],
        &[("SPIKES_FROM_RUST", &dir)],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("{err}");
    assert!(o.status.success(), "the Python tests failed:\n{err}");
    // The tests of the binary's files ran (they skip where no directory is given).
    assert!(
        err.contains("test_a_stopped_run_leaves_a_readable_partial_file")
            && !err.contains("names no directory"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
