use super::sys::no_such_process;
use super::*;

#[test]
fn ring_hands_over_every_entry_between_threads_in_order() {
    use std::sync::Arc;
    let b = Arc::new(Board::unlinked("board-spsc", 2));
    const N: u64 = 200_000;
    let producer = {
        let b = b.clone();
        std::thread::spawn(move || {
            for i in 0..N {
                let d = Desc {
                    kind: DATA,
                    sig: (i as u32).wrapping_mul(0x9e37_79b9),
                    tag: i,
                    addr: !i,
                    len: i.wrapping_mul(0x9e37_79b9),
                };
                while !b.push(0, 1, d) {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let mut next = 0;
    while next < N {
        match b.pop(0, 1) {
            Some(d) => {
                // Every field of every entry, in order: no torn or stale entry.
                assert_eq!((d.kind, d.tag, d.addr), (DATA, next, !next));
                assert_eq!(d.sig, (next as u32).wrapping_mul(0x9e37_79b9));
                assert_eq!(d.len, next.wrapping_mul(0x9e37_79b9));
                next += 1;
            }
            None => std::hint::spin_loop(),
        }
    }
    producer.join().unwrap();
    assert!(b.pop(0, 1).is_none());
}

/// A board of more ranks than its bytes can count panicked on the overflow
/// after making its file, and one the system refuses to size (`EFBIG`) left
/// its empty file behind.
#[test]
fn a_board_that_cannot_be_made_leaves_no_file() {
    let dir = std::env::temp_dir().join(format!("hpc-board-unmade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    for size in [usize::MAX, 1 << 32, 1 << 20] {
        let p = dir.join(format!("b{size}"));
        let e = Board::create(&p, size)
            .err()
            .expect("a board of too many ranks");
        assert!(!p.exists(), "{size}: {e}: the file was left behind");
    }
    let e = Board::create(&dir.join("b"), usize::MAX).err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("18446744073709551615 ranks"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_board_file_is_only_for_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let p = std::env::temp_dir().join(format!("hpc-board-mode-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let _b = Board::create(&p, 2).unwrap();
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    std::fs::remove_file(&p).unwrap();
    assert_eq!(mode, 0o600, "{mode:o}");
}

#[test]
fn ring_push_pop_wraps_and_fills() {
    let p = std::env::temp_dir().join(format!("hpc-board-test-{}", std::process::id()));
    let b = Board::create(&p, 2).unwrap();
    let o = Board::open(&p, 2).unwrap();
    std::fs::remove_file(&p).unwrap();
    for round in 0..3u64 {
        for i in 0..RING_CAP {
            let d = Desc {
                kind: RTS,
                sig: u32::MAX - i as u32,
                tag: round * 100 + i,
                addr: i,
                len: 7,
            };
            assert!(b.push(0, 1, d));
        }
        assert!(!b.push(
            0,
            1,
            Desc {
                kind: FIN,
                sig: 0,
                tag: 0,
                addr: 0,
                len: 0
            }
        ));
        for i in 0..RING_CAP {
            let d = o.pop(0, 1).unwrap();
            assert_eq!(
                (d.kind, d.sig, d.tag),
                (RTS, u32::MAX - i as u32, round * 100 + i)
            );
        }
        assert!(o.pop(0, 1).is_none());
    }
    b.set_pid(1, 42);
    assert_eq!(o.pid(1), 42);
    let seen = o.doorbell(1).load(Ordering::SeqCst);
    b.ring(1);
    // Returns at once: the doorbell moved.
    o.sleep(1, seen, Duration::from_secs(5));
}

#[test]
fn agent_stands_aside_while_the_application_waits() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let b = Arc::new(Board::unlinked("board-agent", 1));
    b.set_agent_eager(0, true);
    let woke = Arc::new(AtomicBool::new(false));
    let guard = b.enter_wait(0);
    let seen = b.doorbell(0).load(Ordering::SeqCst);
    let agent = {
        let (b, woke) = (b.clone(), woke.clone());
        std::thread::spawn(move || {
            let woken = b.agent_sleep(0, seen, Duration::from_secs(60));
            woke.store(true, Ordering::SeqCst);
            woken
        })
    };
    // Rings while the application waits do not wake the agent...
    for _ in 0..5 {
        b.ring(0);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !woke.load(Ordering::SeqCst),
        "agent woke while the application waited"
    );
    // ...leaving `wait` does.
    drop(guard);
    assert!(agent.join().unwrap(), "woken, not timed out");
    // With nobody waiting, a ring that came before the sleep is not missed.
    let seen = b.doorbell(0).load(Ordering::SeqCst);
    b.ring(0);
    assert!(b.agent_sleep(0, seen, Duration::from_secs(60)));
}

/// Whether an agent sleep of at most 0.6 s on `b` was woken (rather than
/// timed out) when `ring` ran 50 ms after the agent announced it.
fn agent_sleep_with(b: &std::sync::Arc<Board>, ring: impl FnOnce(&Board)) -> bool {
    let seen = b.doorbell(0).load(Ordering::SeqCst);
    let agent = {
        let b = b.clone();
        std::thread::spawn(move || b.agent_sleep(0, seen, Duration::from_millis(600)))
    };
    // Until the agent announced its sleep (a ring before that is seen anyway).
    while b.agent_sleeping(0).load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(50));
    ring(b);
    agent.join().unwrap()
}

#[test]
fn which_rings_wake_the_agent() {
    use std::sync::Arc;
    let b = Arc::new(Board::unlinked("board-wake", 1));
    // A lazy agent: no ring wakes it, though the doorbell moves.
    b.set_agent_eager(0, false);
    let before = b.doorbell(0).load(Ordering::SeqCst);
    assert!(!agent_sleep_with(&b, |b| b.ring(0)));
    assert_ne!(b.doorbell(0).load(Ordering::SeqCst), before);
    b.want_agent(0, true);
    assert!(!agent_sleep_with(&b, |b| b.ring_quietly(0)));
    // An eager one: a loud ring wakes it, a quiet one only while it is wanted.
    b.set_agent_eager(0, true);
    assert!(agent_sleep_with(&b, |b| b.ring(0)));
    assert!(agent_sleep_with(&b, |b| b.ring_quietly(0)));
    b.want_agent(0, false);
    assert!(!agent_sleep_with(&b, |b| b.ring_quietly(0)));
    // An explicit wake always does (shutdown).
    b.set_agent_eager(0, false);
    assert!(agent_sleep_with(&b, |b| b.wake_agent(0)));
}

#[test]
fn cma_reads_own_memory_and_detects_dead_pids() {
    let src = vec![5u8; 1000];
    let mut dst = vec![0u8; 1000];
    // SAFETY: `dst` is a valid, unaliased buffer of 1000 bytes.
    unsafe {
        cma_read(
            std::process::id(),
            src.as_ptr() as u64,
            dst.as_mut_ptr(),
            1000,
        )
    }
    .unwrap();
    assert_eq!(src, dst);
    assert!(!pid_dead(std::process::id()));
    assert!(pid_dead(u32::MAX - 1));
}

#[test]
fn the_kernel_answers_when_proc_cannot() {
    assert!(!no_such_process(std::process::id()));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    // A zombie until reaped: dead for `pid_dead`, still a process for kill.
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(pid_dead(pid));
    child.wait().unwrap();
    assert!(pid_dead(pid) && no_such_process(pid));
    // A pid beyond pid_t is no process it can ask about.
    assert!(!no_such_process(u32::MAX));
}

#[test]
fn futex_times_out_returns_early_and_wakes_every_waiter() {
    use std::sync::Arc;
    let word = AtomicU32::new(7);
    let t = std::time::Instant::now();
    assert!(
        !futex_wait(&word, 7, Duration::from_millis(20)),
        "a timeout says so"
    );
    assert!(t.elapsed() >= Duration::from_millis(15));
    // The word moved already: back at once, not a timeout.
    assert!(futex_wait(&word, 8, Duration::from_secs(60)));
    let word = Arc::new(AtomicU32::new(0));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let w = word.clone();
            std::thread::spawn(move || {
                while w.load(Ordering::SeqCst) == 0 {
                    futex_wait(&w, 0, Duration::from_secs(30));
                }
                std::time::Instant::now()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let woke_at = std::time::Instant::now();
    word.store(1, Ordering::SeqCst);
    futex_wake(&word);
    for w in waiters {
        // One wake reaches all three long before their 30 s timeout.
        assert!(w.join().unwrap() - woke_at < Duration::from_secs(5));
    }
}

/// A rank's marks stay in its own slot, beside its neighbours' words: a
/// failure record reads back for its collective only, the last
/// `FAIL_RECORDS` of them, and the mark of leaving is the rank's alone.
#[test]
fn failure_records_and_marks_of_leaving_are_a_rank_s_own() {
    let b = Board::unlinked("board-marks", 3);
    let m = Failure::Mismatch {
        peer: 2,
        ours: u32::MAX,
        theirs: 0x1234,
    };
    assert_eq!(b.failed(1, 5), None, "a fresh board records nothing");
    b.mark_failed(1, 5, m);
    assert_eq!(b.failed(1, 5), Some(m));
    assert_eq!(b.failed(1, 6), None, "another collective");
    assert_eq!((b.failed(0, 5), b.failed(2, 5)), (None, None));
    b.mark_failed(1, u32::MAX, Failure::Lost { peer: 0 });
    b.mark_failed(1, 0, Failure::Left { peer: 2 });
    assert_eq!(b.failed(1, 5), Some(m), "kept beside later ones");
    assert_eq!(b.failed(1, u32::MAX), Some(Failure::Lost { peer: 0 }));
    assert_eq!(b.failed(1, 0), Some(Failure::Left { peer: 2 }));
    for seq in 10..FAIL_RECORDS as u32 + 8 {
        b.mark_failed(1, seq, Failure::Lost { peer: seq });
    }
    assert_eq!(b.failed(1, 5), None, "the oldest replaced");
    assert_eq!(b.failed(1, 11), Some(Failure::Lost { peer: 11 }));
    let count = Failure::Count {
        sender: 2,
        receiver: 0,
    };
    b.mark_failed(0, 7, count);
    assert_eq!(b.failed(0, 7), Some(count), "a count reads back as one");
    assert!(!(0..3).any(|r| b.has_left(r)));
    b.mark_left(2);
    assert_eq!(
        (0..3).map(|r| b.has_left(r)).collect::<Vec<_>>(),
        [false, false, true]
    );
    // The neighbours' words are untouched.
    assert_eq!((b.pid(2), b.doorbell(2).load(Ordering::Relaxed)), (0, 0));
    assert_eq!(
        (b.pid(0), b.failed(0, 11), b.failed(2, 11)),
        (0, None, None)
    );
}

/// The board's methods are public API now (hpc-comm and hpc-proxy call them):
/// a rank number past the board's size is a panic, never a word outside the
/// mapping, in release builds too.
#[test]
fn a_rank_past_the_boards_size_panics_instead_of_reaching_outside_it() {
    let b = Board::unlinked("board-bounds", 2);
    let past = |f: &dyn Fn()| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .expect_err("a rank past the size must panic")
    };
    // Slots: the last rank's slot works, the next ones panic.
    b.set_pid(1, 7);
    assert_eq!(b.pid(1), 7);
    let e = past(&|| {
        b.pid(1 << 40);
    });
    let msg = e.downcast_ref::<String>().map(String::as_str).unwrap_or("");
    assert!(msg.contains("outside the board"), "{msg}");
    past(&|| b.set_pid(1 << 36, 1));
    past(&|| b.mark_left(1 << 30));
    // Rings: a destination past the size.
    let d = Desc {
        kind: RTS,
        sig: 0,
        tag: 1,
        addr: 2,
        len: 3,
    };
    past(&|| {
        b.push(0, 1 << 30, d);
    });
    past(&|| {
        b.pop(1 << 30, 0);
    });
    // The board still works after the refusals.
    assert!(b.push(0, 1, d));
    assert_eq!(b.pop(0, 1), Some(d));
}

/// The proxy opens the board for the slot count its environment names
/// (`HPC_COLL_PROXY_SLOTS`): `18446744073709551615` overflowed the board's size
/// (a panic, "attempt to multiply with overflow"). A size no board can have is
/// no board's; a missing board is named.
#[test]
fn a_board_is_opened_only_for_a_size_it_can_have() {
    let p = std::env::temp_dir().join(format!("hpc-board-huge-size-{}", std::process::id()));
    std::fs::write(&p, b"not a board").unwrap();
    for size in [usize::MAX, 1 << 40, 0] {
        let e = Board::open(&p, size).err().expect("opened").to_string();
        assert!(e.contains(&format!("is not for {size} ranks")), "{e}");
    }
    std::fs::remove_file(&p).unwrap();
    let e = Board::open(&p, 2).err().expect("opened").to_string();
    assert!(e.contains(&p.display().to_string()), "{e}");
}

/// Every refusal of `Board::create` and `Board::open` names the board, cut
/// when its path is longer than any the system takes: a board that exists
/// already was refused as "File exists (os error 17)" and nothing more, and
/// a path of 100,000 characters was quoted whole by `open` (a line of
/// 100 KB) and not at all by `create`.
#[test]
fn every_refusal_of_a_board_names_it_cut() {
    let p = std::env::temp_dir().join(format!("hpc-board-named-{}", std::process::id()));
    std::fs::write(&p, b"not a board").unwrap();
    let shown = p.display().to_string();
    let e = Board::create(&p, 2)
        .err()
        .expect("made over a file")
        .to_string();
    assert!(e.contains(&shown) && e.contains("exists"), "{e}");
    assert!(p.exists(), "an existing file was removed");
    let e = Board::open(&p, 0).err().expect("opened").to_string();
    assert!(e.contains(&shown), "{e}");
    std::fs::remove_file(&p).unwrap();
    let long = std::env::temp_dir().join("x".repeat(100_000));
    for e in [
        Board::create(&long, 2).err().expect("made"),
        Board::open(&long, 2).err().expect("opened"),
    ] {
        let e = e.to_string();
        assert!(e.len() < 1000, "{} bytes: {:.200}", e.len(), e);
        assert!(
            e.contains("xxxxxxxx") && e.contains("more characters"),
            "{e}"
        );
    }
}

/// A withdrawn message's record outlives any number of later failures of
/// its sender: withdrawals shared a rank's four failure records with its
/// failed collectives, and four more failures before the receiver looked
/// overwrote it (the receiver then took the sender's reused memory as the
/// message, `Ok`). It is taken once, by its receiver; records of other
/// pairs are apart; a withdrawal that finds its record held by one not taken
/// yet overwrites nothing and makes the receiver doubt every message up to
/// its number that has no record (an error, never a wrong `Ok`).
#[test]
fn a_withdrawal_is_kept_apart_from_failures_until_its_receiver_takes_it() {
    let b = Board::unlinked("board-withdraw", 3);
    b.withdraw(0, 1, 7);
    for seq in 0..2 * FAIL_RECORDS as u32 {
        b.mark_failed(0, seq, Failure::Lost { peer: 2 });
    }
    for other in 1..=2 * WITHDRAWALS as u32 {
        b.withdraw(0, 2, other);
    }
    b.withdraw(2, 1, 7);
    assert_eq!(
        b.take_withdrawal(0, 1, 8),
        Withdrawal::Kept,
        "another message"
    );
    assert_eq!(b.take_withdrawal(0, 1, 7), Withdrawal::Withdrawn);
    assert_eq!(b.take_withdrawal(0, 1, 7), Withdrawal::Kept, "taken once");
    assert_eq!(
        b.take_withdrawal(2, 1, 7),
        Withdrawal::Withdrawn,
        "its own pair"
    );
    assert_eq!(b.take_withdrawal(1, 0, 7), Withdrawal::Kept);

    // Record 7 % WITHDRAWALS held, not taken: the next withdrawal of that
    // record overwrites nothing and raises the doubt.
    let w = WITHDRAWALS as u32;
    b.withdraw(0, 1, 7);
    b.withdraw(0, 1, 7 + w);
    b.withdraw(0, 1, 8);
    assert_eq!(
        b.take_withdrawal(0, 1, 5),
        Withdrawal::Unknown { up_to: 7 + w },
        "an older message with no record is doubted"
    );
    assert_eq!(b.take_withdrawal(0, 1, 7), Withdrawal::Withdrawn);
    assert_eq!(b.take_withdrawal(0, 1, 8), Withdrawal::Withdrawn);
    assert_eq!(
        b.take_withdrawal(0, 1, 7 + w),
        Withdrawal::Unknown { up_to: 7 + w },
        "the one withdrawn without a record is not taken for a message"
    );
    assert_eq!(
        b.take_withdrawal(0, 1, 8 + w),
        Withdrawal::Kept,
        "a later one"
    );
    // Message numbers wrap: 1 comes after u32::MAX.
    b.withdraw(1, 0, u32::MAX);
    b.withdraw(1, 0, u32::MAX - w);
    assert_eq!(
        b.take_withdrawal(1, 0, 1),
        Withdrawal::Kept,
        "a number given after the doubt's, across the wrap"
    );
    // The rings beside the records still carry their descriptors.
    let d = Desc {
        kind: RTS,
        sig: 9,
        tag: 1,
        addr: 2,
        len: 3,
    };
    assert!(b.push(0, 1, d));
    assert_eq!(b.pop(0, 1), Some(d));
}

/// A failure record replaced by a later one is not taken for "no failure":
/// a rank that reads the buffer of a collective whose record is gone learns
/// that it may have failed (`forgotten`), from the first collective (number
/// 0) on, across the numbers' wrap; later collectives and other ranks are
/// not doubted.
#[test]
fn a_failure_whose_record_was_replaced_is_not_taken_for_none() {
    let b = Board::unlinked("board-forgotten", 2);
    let lost = Failure::Lost { peer: 1 };
    assert!(!b.forgotten(0, 0), "a fresh board forgets nothing");
    for seq in 0..FAIL_RECORDS as u32 {
        b.mark_failed(0, seq, lost);
    }
    assert!(!b.forgotten(0, 0), "every record kept");
    b.mark_failed(0, 4, lost);
    assert_eq!(b.failed(0, 0), None, "the first record replaced");
    assert!(b.forgotten(0, 0), "collective 0 may have failed");
    assert!(!b.forgotten(0, 1) && !b.forgotten(0, 5), "kept, or later");
    assert!(!b.forgotten(1, 0), "another rank's");
    // Numbers wrap: u32::MAX is before 0.
    for seq in [
        u32::MAX - 4,
        u32::MAX - 3,
        u32::MAX - 2,
        u32::MAX - 1,
        u32::MAX,
    ] {
        b.mark_failed(1, seq, lost);
    }
    assert!(b.forgotten(1, u32::MAX - 4));
    assert!(!b.forgotten(1, 0), "given after the wrap");
}
