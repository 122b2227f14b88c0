//! Loom models of the board: every interleaving (up to the preemption bound)
//! of its rings, staging slots and doorbells, with loom checking each slot's
//! accesses and reporting a lost wake-up as a deadlock (its futex has no
//! timeout). The argument they check is in `SLEEP.md`.
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib -p hpc-comm loom`.

use super::*;
use loom::sync::Arc;

fn desc(kind: u32, tag: u64, addr: u64) -> Desc {
    Desc {
        kind,
        sig: 0,
        tag,
        addr,
        len: 8,
    }
}

/// Six descriptors through a ring of four: the producer finds it full and
/// retries, the consumer sees each entry whole, in order, once.
#[test]
fn loom_ring_wraps_in_order() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let board = Arc::new(Board::in_memory(2));
        let p = board.clone();
        let t = loom::thread::spawn(move || {
            for i in 0..6u64 {
                while !p.push(0, 1, desc(RTS, i, i * 10)) {
                    loom::thread::yield_now();
                }
            }
        });
        for i in 0..6u64 {
            loop {
                if let Some(d) = board.pop(0, 1) {
                    assert_eq!(d, desc(RTS, i, i * 10));
                    break;
                }
                loom::thread::yield_now();
            }
        }
        t.join().unwrap();
        assert!(board.pop(0, 1).is_none());
    });
}

/// The staging protocol with one slot: the owner writes the slot, announces
/// it (`DATA`), and writes it again only after the reader's `FREE`; the reader
/// copies it out between the two. Loom reports any access to the slot that
/// these descriptors do not order.
#[test]
fn loom_staging_slot_is_reused_only_after_free() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let board = Arc::new(Board::in_memory(2));
        let owner = board.clone();
        let t = loom::thread::spawn(move || {
            for i in 0..2u8 {
                if i > 0 {
                    // The slot comes back before it is written again.
                    loop {
                        match owner.pop(1, 0) {
                            Some(d) => {
                                assert_eq!(d.kind, FREE);
                                break;
                            }
                            None => loom::thread::yield_now(),
                        }
                    }
                }
                let bytes = [i + 1; 8];
                // SAFETY: rank 0's slot 0, free (first use, or after FREE).
                unsafe { owner.stage_write(0, 0, bytes.as_ptr(), 8) };
                assert!(owner.push(0, 1, desc(DATA, u64::from(i), 0)));
            }
        });
        for i in 0..2u8 {
            let d = loop {
                if let Some(d) = board.pop(0, 1) {
                    break d;
                }
                loom::thread::yield_now();
            };
            assert_eq!((d.kind, d.tag), (DATA, u64::from(i)));
            let mut got = [0u8; 8];
            // SAFETY: announced by the DATA just popped, not handed back yet.
            unsafe { board.stage_read(0, 0, got.as_mut_ptr(), 8) };
            assert_eq!(got, [i + 1; 8]);
            assert!(board.push(1, 0, desc(FREE, 0, 1)));
        }
        t.join().unwrap();
    });
}

/// A thread sleeping on its doorbell (`Board::sleep`, as `wait` does) is
/// woken by a peer that pushes a descriptor and rings, whatever the
/// interleaving: it looks at the ring after reading the doorbell, and sleeps
/// only if the doorbell has not moved since.
#[test]
fn loom_doorbell_wakes_a_sleeping_waiter() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let board = Arc::new(Board::in_memory(2));
        let peer = board.clone();
        let t = loom::thread::spawn(move || {
            assert!(peer.push(0, 1, desc(RTS, 1, 0)));
            peer.ring(1);
        });
        loop {
            let seen = board.doorbell(1).load(Ordering::SeqCst);
            if board.pop(0, 1).is_some() {
                break;
            }
            board.sleep(1, seen, Duration::from_secs(3600));
        }
        t.join().unwrap();
    });
}

/// An eager agent asleep on its own bell is woken by a peer's ring while no
/// application thread waits, and by the last waiter leaving `wait` when the
/// ring came while one did (it stood aside then).
#[test]
fn loom_agent_is_woken_by_a_ring_or_by_the_waiter_leaving() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let board = Arc::new(Board::in_memory(2));
        board.set_agent_eager(1, true);
        let app = board.clone();
        // The application is in `wait` while the peer rings, then leaves.
        let guard_taken = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let g2 = guard_taken.clone();
        let a = loom::thread::spawn(move || {
            let guard = app.enter_wait(1);
            g2.store(true, Ordering::SeqCst);
            loom::thread::yield_now();
            drop(guard);
        });
        let peer = board.clone();
        let p = loom::thread::spawn(move || {
            assert!(peer.push(0, 1, desc(RTS, 1, 0)));
            peer.ring(1);
        });
        // The agent (this thread): stands aside while someone waits, takes the
        // descriptor otherwise, sleeps on its bell in between.
        loop {
            let seen = board.doorbell(1).load(Ordering::SeqCst);
            if !board.someone_waits(1) && board.pop(0, 1).is_some() {
                break;
            }
            board.agent_sleep(1, seen, Duration::from_secs(3600));
        }
        a.join().unwrap();
        p.join().unwrap();
        let _ = guard_taken.load(Ordering::SeqCst);
    });
}

/// An idle agent (`set_agent_idle`) is woken by whoever posts work after it
/// went idle (`agent_idle` then `wake_agent`, as `Host::start` does), and
/// looks for work after raising the flag, so work posted before is not
/// missed either. The work queue stands for the executor's, behind its lock.
#[test]
fn loom_idle_agent_sees_work_posted_around_its_sleep() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let board = Arc::new(Board::in_memory(1));
        let work = Arc::new(loom::sync::Mutex::new(0u32));
        let (poster, w) = (board.clone(), work.clone());
        let t = loom::thread::spawn(move || {
            let mut q = w.lock().unwrap();
            *q += 1;
            if poster.agent_idle(0) {
                poster.wake_agent(0);
            }
            drop(q);
        });
        loop {
            let seen = board.doorbell(0).load(Ordering::SeqCst);
            if *work.lock().unwrap() > 0 {
                break;
            }
            board.set_agent_idle(0, true);
            if *work.lock().unwrap() > 0 {
                board.set_agent_idle(0, false);
                continue;
            }
            board.agent_sleep(0, seen, Duration::from_secs(3600));
            board.set_agent_idle(0, false);
        }
        t.join().unwrap();
    });
}

/// A rank records failures while another reads its records, one more than
/// it keeps, so that the first record is rewritten: the reader takes a
/// record whole, of the collective it asks for, or none (never one
/// collective's number with another's fields); and a rank that sees a
/// peer's mark of leaving sees the descriptor it pushed before.
#[test]
fn loom_a_failure_record_is_read_whole() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    let lost = |seq: u32| Failure::Lost { peer: seq };
    let last = FAIL_RECORDS as u32;
    b.check(move || {
        let board = Arc::new(Board::in_memory(2));
        let w = board.clone();
        let first = Failure::Mismatch {
            peer: 1,
            ours: 0x11,
            theirs: 0x22,
        };
        let t = loom::thread::spawn(move || {
            w.mark_failed(0, 0, first);
            for seq in 1..=last {
                w.mark_failed(0, seq, lost(seq));
            }
            assert!(w.push(0, 1, desc(FIN, 1, 0)));
            w.mark_left(0);
        });
        if let Some(got) = board.failed(0, 0) {
            assert_eq!(got, first);
        }
        if let Some(got) = board.failed(0, last) {
            assert_eq!(got, lost(last));
        }
        if board.has_left(0) {
            assert_eq!(board.pop(0, 1), Some(desc(FIN, 1, 0)));
        }
        t.join().unwrap();
        assert_eq!(board.failed(0, 0), None, "replaced");
        assert_eq!(board.failed(0, last), Some(lost(last)));
    });
}

/// A sender withdraws two messages whose records collide (the second finds
/// the first's record held, so it raises the doubt word), then reuses their
/// buffer, while the receiver reads the buffer and asks about both: a
/// receiver that read the reused memory never finds a message kept, in any
/// interleaving: the collision is never an overwrite that loses one, and a
/// record freed by the receiver between the two withdrawals is taken again.
/// (The fences that make the withdrawals visible after the read are not what
/// this model can show: loom takes every `SeqCst` access as seeing the
/// latest value, so it passes without the receiver's fence too.)
#[test]
fn loom_a_read_of_reused_memory_finds_its_withdrawal() {
    const REUSED: u32 = 9;
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    let (first, second) = (3, 3 + WITHDRAWALS as u32);
    b.check(move || {
        let board = Arc::new(Board::in_memory(2));
        let buffer = Arc::new(AtomicU32::new(1));
        let (w, buf) = (board.clone(), buffer.clone());
        let t = loom::thread::spawn(move || {
            w.withdraw(0, 1, first);
            w.withdraw(0, 1, second);
            buf.store(REUSED, Ordering::Relaxed);
        });
        let read = buffer.load(Ordering::Relaxed);
        let got = [
            board.take_withdrawal(0, 1, second),
            board.take_withdrawal(0, 1, first),
        ];
        if read == REUSED {
            assert!(!got.contains(&Withdrawal::Kept), "{got:?}");
        }
        t.join().unwrap();
    });
}
