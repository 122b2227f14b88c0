//! The statistics of a run's spikes as an application makes them.

use hpc_spiking::spikes::{Recorder, RECORDER_BYTES_PER_NEURON};

/// `Recorder::new(u32::MAX)` aborted the process on its allocation of 120 GB
/// (as `hpc_spike_report::stats::analyse` did before it checked): refused by
/// name where the memory is not there.
#[test]
fn a_recorder_beyond_the_memory_available_is_refused() {
    let need = u64::from(u32::MAX) * RECORDER_BYTES_PER_NEURON;
    if hpc_io::read::mem_available().is_none_or(|a| a >= need) {
        eprintln!("skipped: {need} bytes are available here");
        return;
    }
    let e = Recorder::new(u32::MAX).unwrap_err().to_string();
    assert!(
        e.contains("4294967295 neurons") && e.contains("MemAvailable"),
        "{e}"
    );
    let e = Recorder::after(u32::MAX, 7).unwrap_err().to_string();
    assert!(e.contains("4294967295 neurons"), "{e}");
    // What fits is made as before.
    let mut r = Recorder::new(3).unwrap();
    r.add(&[(1, 0), (4, 0), (9, 0)]).unwrap();
    assert_eq!(r.stats(1.0).spikes, 3);
}

/// `SpikeWriter::with_header("")` wrote `.partial` into the current directory,
/// and a directory's name was taken: both failed only at `finish`, after the
/// run. They are refused before the file is made.
#[test]
fn a_spike_file_named_by_no_file_or_a_directory_is_refused_at_once() {
    use hpc_spiking::spikes::SpikeWriter;
    let d = hpc_test_support::TmpDir::new("hpc-spiking", "no-file");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::env::set_current_dir(&d).unwrap();
    let header = r#"{"n_neurons":1,"dt_ms":0.1,"t_sim_ms":1,"populations":[{"name":"a","first":0,"count":1}]}"#;
    for bad in ["", "/", "sub", "sub/..", "sub/."] {
        let e = SpikeWriter::with_header(std::path::Path::new(bad), header);
        assert!(e.is_err(), "{bad:?}");
    }
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["sub"], "{left:?}");
    assert_eq!(std::fs::read_dir(d.join("sub")).unwrap().count(), 0);
}

/// A spike file or a checkpoint directory whose path is longer than any the
/// system takes is refused with the path cut (`hpc_io::message::path`):
/// the spike writer's refusal of its header and the restart's refusal of
/// its directory quoted it whole, messages of 100 KB.
#[test]
fn a_path_longer_than_any_is_cut_in_the_refusals() {
    use hpc_spiking::spikes::SpikeWriter;
    let long = std::env::temp_dir().join("x".repeat(100_000));
    let errors = [
        format!(
            "{:#}",
            SpikeWriter::with_header(&long, r#"{"dt_ms":0.1,"t_sim_ms":1,"n_neurons":2}"#)
                .err()
                .unwrap()
        ),
        format!(
            "{:#}",
            hpc_spiking::checkpoint::open_with::<serde_json::Value>(&long, "m")
                .err()
                .unwrap()
        ),
    ];
    for e in errors {
        assert!(
            e.len() < 1000 && e.contains("more characters"),
            "{} bytes: {e:.300}",
            e.len()
        );
    }
}

/// Two `SpikeWriter`s given one path at once (two runs of a library's
/// caller, one output): the second removed the first's `.partial` and made
/// its own, and the first to finish renamed the other's data as its output
/// and said nothing (the other failed at its end). The second is refused
/// while the first writes, and a writer whose `.partial` was replaced
/// renames nothing.
#[test]
fn a_second_writer_of_one_spike_file_is_refused_and_nothing_is_taken() {
    use hpc_spiking::spikes::{partial_path, read_spikes, SpikeWriter};
    let d = hpc_test_support::TmpDir::new("hpc-spiking", "two-writers");
    let out = d.join("spikes.spk");
    let header = r#"{"n_neurons":4,"dt_ms":0.1,"t_sim_ms":10,"populations":[{"name":"a","first":0,"count":4}]}"#;
    let mut first = SpikeWriter::with_header(&out, header).unwrap();
    first.append(&[(1, 1)]).unwrap();
    let e = format!(
        "{:#}",
        SpikeWriter::with_header(&out, header)
            .err()
            .expect("refused")
    );
    assert!(e.contains("another writer is writing it"), "{e}");
    first.append(&[(2, 3)]).unwrap();
    first.finish().unwrap();
    assert_eq!(read_spikes(&out).unwrap().spikes, vec![(1, 1), (2, 3)]);
    // Once it has finished, the name is free again; a writer whose
    // `.partial` someone replaced renames nothing.
    let second = SpikeWriter::with_header(&out, header).unwrap();
    std::fs::remove_file(partial_path(&out)).unwrap();
    std::fs::write(partial_path(&out), b"not this writer's").unwrap();
    let e = format!("{:#}", second.finish().unwrap_err());
    assert!(e.contains("no longer the file this writer wrote"), "{e}");
    assert_eq!(read_spikes(&out).unwrap().spikes, vec![(1, 1), (2, 3)]);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A spike given twice (in one call, or at the tick its neuron last spiked
/// at, in a later one) was counted twice: the neuron's rate doubled and an
/// interval of 0 entered its CV, where the spike file refuses the same
/// records. It is refused as the file's reader refuses it, nothing added.
#[test]
fn a_spike_given_twice_is_refused_not_counted_twice() {
    use hpc_spiking::spikes::SpikeFileError;
    let mut r = Recorder::new(2).unwrap();
    let e = r.add(&[(5, 0), (5, 0)]).unwrap_err();
    assert!(
        matches!(
            e,
            SpikeFileError::IdOrder {
                index: 1,
                tick: 5,
                id: 0,
                ..
            }
        ),
        "{e}"
    );
    assert!(r.add(&[(5, 1), (5, 0)]).is_err());
    assert_eq!(r.stats(1.0).spikes, 0);
    r.add(&[(5, 0), (5, 1), (6, 0)]).unwrap();
    let e = r.add(&[(6, 0)]).unwrap_err();
    assert!(e.to_string().contains("each spike once"), "{e}");
    r.add(&[(6, 1), (7, 0)]).unwrap();
    assert_eq!(
        (r.stats(1.0).spikes, r.spikes_of(0..1), r.spikes_of(1..2)),
        (5, 3, 2)
    );
}
