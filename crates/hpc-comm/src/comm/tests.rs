use super::board_file::{BoardName, BOARD_PREFIX};
use super::*;

#[test]
fn engine_names_parse_in_any_case_and_errors_list_the_engines() {
    for e in Engine::ALL {
        let upper = e.name().to_ascii_uppercase();
        let title = format!("{}{}", &upper[..1], &e.name()[1..]);
        for text in [
            e.name().to_string(),
            upper,
            title,
            format!(" {} ", e.name()),
        ] {
            assert_eq!(text.parse::<Engine>().unwrap(), *e, "{text:?}");
        }
    }
    let msg = "fast".parse::<Engine>().unwrap_err().to_string();
    assert!(msg.contains("\"fast\""), "{msg}");
    assert!(msg.contains("inline, thread, proxy"), "{msg}");
    assert!("".parse::<Engine>().is_err());
    assert!("threads".parse::<Engine>().is_err());
}

/// An engine's name of 100,000 characters (`hpc selftest --collectives`) was
/// quoted whole in the refusal.
#[test]
fn a_long_engine_name_is_quoted_cut() {
    let long = "x"
        .repeat(100_000)
        .parse::<Engine>()
        .unwrap_err()
        .to_string();
    assert!(
        long.len() < 200 && long.contains("99960 more"),
        "{}",
        long.len()
    );
}

#[test]
fn remove_boards_of_removes_that_process_s_boards_only() {
    // Pids that no process has (above the kernel's pid_max).
    let (dead, other) = (429_496_729u32, 4_294_967_293u32);
    let mine = [
        format!("/dev/shm/{BOARD_PREFIX}{dead}-0-1"),
        format!("/dev/shm/{BOARD_PREFIX}{dead}-3-ff"),
    ];
    // A pid whose digits start the same, and an unrelated file.
    let keep = [
        format!("/dev/shm/{BOARD_PREFIX}{dead}4-0-1"),
        format!("/dev/shm/{BOARD_PREFIX}{other}-0-1"),
    ];
    for f in mine.iter().chain(&keep) {
        std::fs::write(f, b"x").unwrap();
    }
    assert_eq!(remove_boards_of(dead), 2);
    for f in &mine {
        assert!(!std::path::Path::new(f).exists(), "{f}");
    }
    for f in &keep {
        assert!(std::path::Path::new(f).exists(), "{f}");
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(remove_boards_of(dead), 0);
}

#[test]
fn a_board_name_is_removed_when_dropped_or_unlinked() {
    let p = std::env::temp_dir().join(format!("hpc-board-name-{}", std::process::id()));
    std::fs::write(&p, b"x").unwrap();
    drop(BoardName(Some(p.clone())));
    assert!(!p.exists());
    std::fs::write(&p, b"x").unwrap();
    let mut n = BoardName(Some(p.clone()));
    n.unlink();
    assert!(!p.exists());
    std::fs::write(&p, b"y").unwrap();
    drop(n); // already unlinked: a file of the same name made later stays
    assert!(p.exists());
    std::fs::remove_file(&p).unwrap();
}

/// `Comm::world_rank` of a rank beyond the communicator panics, as its
/// documentation says, naming the rank and the size (it said "index out of
/// bounds: the len is 1 but the index is 5").
#[test]
fn world_rank_beyond_the_communicator_names_the_rank() {
    let w = hpc_runtime::World::init().unwrap();
    let c = Comm::new(&w, Engine::Inline).unwrap();
    assert_eq!(c.world_rank(0), w.rank());
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.world_rank(5))).unwrap_err();
    let m = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(
        m,
        "world_rank(5): 5 is not a rank of this communicator of 1 ranks"
    );
}

/// A large message to this rank itself (beyond the staging slots) went by
/// its address: a blocking send waited for its own receive until the
/// timeout, returned, and let its buffer go while the message stayed
/// queued; the later receive copied from the freed buffer (a crash, or
/// another allocation's bytes). It is copied when sent now: the send
/// completes at once and the receive gets the message as it was.
#[test]
fn a_large_message_to_itself_is_copied_when_sent() {
    let w = hpc_runtime::World::init().unwrap();
    for engine in [Engine::Inline, Engine::Thread] {
        let mut opts = CommOptions::new(engine);
        opts.timeout = Some(Duration::from_millis(500));
        let comm = Comm::with_options(&w, opts).unwrap();
        let n = 8 << 20;
        {
            let sent = vec![1u8; n];
            comm.send(&sent, 0, 3)
                .unwrap_or_else(|e| panic!("{engine:?}: {e}"));
        }
        // Memory the freed buffer's pages may go to.
        let other = vec![9u8; n];
        let mut got = vec![0u8; n];
        comm.recv(&mut got, 0, 3).unwrap();
        assert!(got.iter().all(|&b| b == 1), "{engine:?}");
        drop(other);
    }
}

/// A spin beyond a second is refused by name, as `HPC_SPIN_US` is bounded:
/// any `Duration` was taken (`Duration::MAX` polled for ever where the
/// ranks wait, and the proxy, given it in microseconds, refused it at its
/// start naming its own variable). The most is taken.
#[test]
fn a_spin_beyond_the_most_is_refused_by_name() {
    let w = hpc_runtime::World::init().unwrap();
    for spin in [MAX_SPIN + Duration::from_nanos(1), Duration::MAX] {
        let mut opts = CommOptions::new(Engine::Inline);
        opts.spin = Some(spin);
        let e = Comm::with_options(&w, opts).unwrap_err();
        assert!(
            matches!(&e, Error::Argument(m) if m.starts_with("hpc_comm::CommOptions::spin = ")
                && m.contains("at most 1s")),
            "{e}"
        );
    }
    let mut opts = CommOptions::new(Engine::Inline);
    opts.spin = Some(MAX_SPIN);
    Comm::with_options(&w, opts).unwrap();
}
