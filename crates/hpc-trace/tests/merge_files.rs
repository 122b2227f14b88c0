//! The merge of trace files as another program or a hand left them.

/// A finished trace file of `rank` of a job of `size` ranks named `job`.
fn file(rank: usize, job: &str, size: usize) -> String {
    let end =
        serde_json::json!({"rank": rank, "label": null, "events": 0, "size": size, "job": job});
    format!(
        r#"{{"hpcTrace":{{"version":1,"pid":{},"host":"h","boot_id":"b","realtime_ns":1,"monotonic_ns":1}},"traceEvents":[],"hpcEnd":{end}}}"#,
        100 + rank
    )
}

/// Two files' job ids of 100,000 characters made a refusal of 200 KB, and a
/// file's string of 100,000 characters was quoted whole by the parser's
/// message: each value is cut.
#[test]
fn values_of_trace_files_are_cut_in_the_refusals() {
    let dir = hpc_test_support::TmpDir::unmade("hpc-trace", "merge-cut");
    let (a, b) = ("a".repeat(100_000), "b".repeat(100_000));
    let cases = [
        (
            vec![
                ("rank-0.json", file(0, &a, 2)),
                ("rank-1.json", file(1, &b, 2)),
            ],
            "more than one job",
        ),
        (
            vec![("rank-0.json", format!("{{\"hpcTrace\": \"{a}\"}}"))],
            "not a trace file",
        ),
    ];
    for (files, said) in cases {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
        assert!(
            e.contains(said) && e.len() < 1000,
            "{} bytes: {}",
            e.len(),
            &e[..300]
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A trace directory whose path is longer than any the system takes is
/// refused with the path cut (`hpc_io::message::path`), by the merge and by
/// the recorder: both quoted it whole, a message of 100 KB.
#[test]
fn a_directory_longer_than_any_path_is_cut_in_the_refusals() {
    let dir = std::env::temp_dir().join("x".repeat(100_000));
    let errors = [
        hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string(),
        hpc_trace::TraceLayer::create(&dir).unwrap_err().to_string(),
    ];
    for e in errors {
        assert!(
            e.len() < 1000 && e.contains("more characters"),
            "{} bytes: {e:.300}",
            e.len()
        );
    }
}

/// The folder of a job that still runs: the merge said of a rank's unfinished
/// file that its process "was killed or failed to write it", and to remove it.
/// A file that a process of this machine holds open (this test's own, its
/// header still in the process's buffer: the file empty) is said to be still
/// written; once closed, it is unfinished, as before.
#[test]
fn a_file_a_running_process_writes_is_said_to_be_unfinished_yet() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "merge-live");
    let pid = std::process::id();
    let part = dir.join(format!("pid-{pid}.json.part"));
    let open = std::fs::File::create(&part).unwrap();
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "is not finished yet: its process (pid {pid}) still runs on this machine"
        )) && !e.contains("remove it"),
        "{e}"
    );
    drop(open);
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("was never finished"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hostile-user pass 18 noted: of several unfinished files (a job whose ranks
/// were all killed) the merge named one; removed, the next was met. All are
/// named, the first in full, at most `OTHERS_NAMED` others and then a count.
#[test]
fn every_unfinished_file_is_named() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "merge-parts");
    // Pids no process of this machine has (above the kernel's largest).
    for n in 0..3 {
        std::fs::write(dir.join(format!("pid-{}.json.part", 4_194_400 + n)), "").unwrap();
    }
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    let shown = |n: u32| {
        dir.join(format!("pid-{}.json.part", 4_194_400 + n))
            .display()
            .to_string()
    };
    assert!(
        e.starts_with(&format!("{} was never finished", shown(0)))
            && e.contains(&format!(
                "; so were {}, {}; no process finished its file: there is nothing to merge",
                shown(1),
                shown(2)
            )),
        "{e}"
    );
    for n in 3..20 {
        std::fs::write(dir.join(format!("pid-{}.json.part", 4_194_400 + n)), "").unwrap();
    }
    // Beside finished files (a job stopped after its ranks 0 and 1 ended):
    // these are what removing the unfinished ones leaves to merge.
    for r in 0..2 {
        std::fs::write(dir.join(format!("rank-{r}.json")), file(r, "j", 22)).unwrap();
    }
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains(&shown(8))
            && !e.contains(&shown(9))
            && e.contains(" and 11 more; remove them to merge the 2 finished files"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hostile pass 21: a process file that is a FIFO or a device (a link to
/// `/dev/zero`) was refused naming it twice ("d/rank-1.json: d/rank-1.json is
/// a FIFO, not a regular file"). Named once, without waiting for a writer.
#[test]
fn a_process_file_that_cannot_be_read_is_named_once() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "merge-fifo");
    std::fs::write(dir.join("rank-0.json"), file(0, "j", 2)).unwrap();
    let one = dir.join("rank-1.json");
    hpc_test_support::mkfifo(&one);
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    let shown = hpc_io::message::path(&one).to_string();
    assert!(e.contains("is a FIFO, not a regular file"), "{e}");
    assert_eq!(e.matches(&shown).count(), 1, "{e}");
    std::fs::remove_file(&one).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &one).unwrap();
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("is a character device"), "{e}");
    assert_eq!(e.matches(&shown).count(), 1, "{e}");
}

/// A folder whose files sum to more than the machine's memory could merge
/// (16 bytes a byte of JSON) is refused by the library before any file is
/// read, naming the files, their folder and the memory: the files were read
/// and parsed whole whatever their sum, and the merge ended killed for its
/// memory without a word (the `hpc trace merge` command checked it; a program
/// calling `merge_dir` did not). Sparse files: nothing is written to disk.
#[test]
fn a_folder_beyond_the_memory_is_refused_before_it_is_read() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "merge-memory");
    let available = hpc_io::read::mem_available().expect("MemAvailable");
    let each = 1u64 << 30;
    let n = available / each / hpc_trace::merge::MEMORY_PER_TRACE_BYTE + 2;
    for r in 0..n {
        std::fs::File::create(dir.join(format!("rank-{r}.json")))
            .unwrap()
            .set_len(each)
            .unwrap();
    }
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err();
    assert!(
        matches!(e, hpc_trace::merge::MergeError::Memory { .. }),
        "{e}"
    );
    let text = e.to_string();
    for part in [
        format!("merging the {n} trace file(s) of "),
        format!("({n}.0 GiB) would need about"),
        "of memory, but".to_string(),
        "is available (MemAvailable)".to_string(),
    ] {
        assert!(text.contains(&part), "{text}");
    }
}
