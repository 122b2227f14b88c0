//! Loom models of the completion hand-off: a waiting thread (running the real
//! `wait_begin`/`wait_poll` with its own progress) against a progress thread of
//! another backend delivering at the same time. Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release --lib -p hpc-rdma loom`.

use super::*;
use loom::sync::atomic::AtomicBool;

/// Waits for `op` the way `Transport::wait_timeout` does, with `progress` as the
/// waiter's own progress. Once `other_done` is seen set, the result must appear
/// within the next round: no wake-up is lost.
fn wait(s: &Shared, op: OpId, other_done: &AtomicBool, mut progress: impl FnMut()) -> Completion {
    let (first, mut seen) = s.wait_begin(op).unwrap();
    if let Some(c) = first {
        return c;
    }
    let mut after_done = 0;
    loop {
        if let Some(c) = s.wait_poll(op, &mut seen, &mut progress).unwrap() {
            return c;
        }
        if other_done.load(Ordering::SeqCst) {
            after_done += 1;
            assert!(after_done < 2, "delivered but not seen: a lost wake-up");
        }
        loom::thread::yield_now();
    }
}

/// Checks `model` under loom with at most `bound` preemptions, each execution
/// on a fresh table of rank 0 of 2.
fn check(bound: usize, model: impl Fn(Arc<Shared>) + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.check(move || model(Shared::new(0, 2)));
}

/// Runs `f` on another thread with its own handle of `s`, then sets the returned
/// flag (the `other_done` of [`wait`]).
fn then_done(
    s: &Arc<Shared>,
    f: impl FnOnce(&Shared) + Send + 'static,
) -> (Arc<AtomicBool>, loom::thread::JoinHandle<()>) {
    let done = Arc::new(AtomicBool::new(false));
    let (s2, done2) = (s.clone(), done.clone());
    let t = loom::thread::spawn(move || {
        f(&s2);
        done2.store(true, Ordering::SeqCst);
    });
    (done, t)
}

/// A waiter's own progress that delivers what `mine` holds (from peer 1, tag 5)
/// on its first call.
fn delivering<'a>(s: &'a Shared, mine: &'a mut Option<Vec<u8>>) -> impl FnMut() + 'a {
    move || {
        if let Some(m) = mine.take() {
            s.deliver(1, 5, m);
        }
    }
}

/// The receive is completed by another thread (e.g. the tcp reader) while this
/// one is anywhere in its wait: it is found, exactly once.
#[test]
fn loom_wait_sees_a_delivery_from_another_thread() {
    check(3, |s| {
        let op = s.post_recv(1, 5);
        let (done, t) = then_done(&s, |s| s.deliver(1, 5, vec![42]));
        let c = wait(&s, op, &done, || {});
        assert_eq!(c.result.unwrap().into_bytes(), vec![42]);
        assert!(s.take(op).is_err(), "completed once, not also in the table");
        t.join().unwrap();
    });
}

/// Two receives of one tag; the waiter's own progress delivers one message (the
/// shm ring's path, handed straight back) while another thread delivers the
/// other (the table's path). Each receive gets one message, in posting order,
/// none is lost or duplicated, and the hand-off never crosses threads.
#[test]
fn loom_handoff_and_table_split_two_messages() {
    check(2, |s| {
        let first = s.post_recv(1, 5);
        let second = s.post_recv(1, 5);
        // This thread waits for nothing: its delivery must go to the table.
        let (done, t) = then_done(&s, |s| s.deliver(1, 5, vec![2]));
        let mut mine = Some(vec![1u8]);
        let a = wait(&s, first, &done, delivering(&s, &mut mine));
        t.join().unwrap();
        // If the first receive was satisfied before this thread's progress ran,
        // its message is delivered by a later progress call.
        if let Some(m) = mine.take() {
            s.deliver(1, 5, m);
        }
        let b = s
            .wait_begin(second)
            .unwrap()
            .0
            .expect("both were delivered");
        let (a, b) = (
            a.result.unwrap().into_bytes(),
            b.result.unwrap().into_bytes(),
        );
        let mut both = [a[0], b[0]];
        both.sort();
        assert_eq!(both, [1, 2], "each message once");
        assert!(s.take(first).is_err() && s.take(second).is_err());
        assert!(s.drain().is_empty(), "nothing left behind");
    });
}

/// The receive in a peer's slot is completed by the waiting thread's own
/// delivery without the lock, while another thread declares the peer lost (which
/// empties the slot under the lock): it completes exactly once, with the message
/// or with `PeerLost`, and nothing is left pending or in the table.
#[test]
fn loom_slot_completes_once_against_a_loss() {
    check(3, |s| {
        let op = s.post_recv(1, 5);
        assert_eq!(s.pending_count(), 1, "a receive in the slot is pending");
        let (done, t) = then_done(&s, |s| s.fail_peer(1, "gone"));
        let mut mine = Some(vec![7u8]);
        let c = wait(&s, op, &done, delivering(&s, &mut mine));
        t.join().unwrap();
        match c.result {
            Ok(p) => assert_eq!(p.into_bytes(), vec![7]),
            Err(Error::PeerLost { rank: 1, .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        assert!(s.take(op).is_err(), "completed once");
        assert_eq!(s.pending_count(), 0);
        assert!(s.drain().is_empty(), "nothing left behind");
    });
}

/// A receive posted by one thread and awaited by another, whose own progress
/// delivers two messages: first one of another tag, then the receive's. The
/// receive gets its own tag's message, never the other (the waiter reads the
/// slot's tag without the lock, so it must see the tag stored with the id).
#[test]
fn loom_slot_tag_is_seen_with_its_receive() {
    check(3, |s| {
        // An earlier receive of tag 5 leaves its tag in the slot.
        let first = s.post_recv(1, 5);
        s.deliver(1, 5, vec![1]);
        assert!(s.take(first).unwrap().is_some());
        let mailbox = std::sync::Arc::new(loom::sync::atomic::AtomicU64::new(0));
        let (s2, m2) = (s.clone(), mailbox.clone());
        let t = loom::thread::spawn(move || {
            let op = s2.post_recv(1, 6);
            // Relaxed on purpose: only the slot's own ordering may carry the tag.
            m2.store(op.0, Ordering::Relaxed);
        });
        let op = loop {
            match mailbox.load(Ordering::Relaxed) {
                0 => loom::thread::yield_now(),
                id => break OpId(id),
            }
        };
        let mut msgs = vec![vec![66u8], vec![55u8]];
        let mut tags = vec![6u64, 5];
        let s3 = s.clone();
        // Waits without a first look at the table (which would order this thread
        // after the post through the lock): progress first, as `wait_poll` does.
        let got = loop {
            let c = s.progress_for(op, || {
                if let (Some(m), Some(t)) = (msgs.pop(), tags.pop()) {
                    s3.deliver(1, t, m);
                }
            });
            if let Some(c) = c {
                break c;
            }
            if msgs.is_empty() {
                break s.take(op).unwrap().expect("delivered");
            }
        };
        assert_eq!(
            got.result.unwrap().into_bytes(),
            vec![66],
            "tag 6's message"
        );
        t.join().unwrap();
    });
}
