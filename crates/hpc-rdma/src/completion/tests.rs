//! Unit tests of the completion table and the buffer types.

use super::*;

/// The bytes of `op`'s completion, which must be in the table.
fn taken(s: &Shared, op: OpId) -> Vec<u8> {
    s.take(op)
        .unwrap()
        .expect("completed")
        .result
        .unwrap()
        .into_bytes()
}

#[test]
fn matching_is_fifo_per_peer_and_tag() {
    let s = Shared::new(0, 2);
    s.deliver(1, 5, vec![1]);
    s.deliver(1, 5, vec![2]);
    s.deliver(1, 6, vec![3]);
    let a = s.post_recv(1, 5);
    let b = s.post_recv(1, 6);
    let c = s.post_recv(1, 5);
    let d = s.post_recv(1, 5);
    assert_eq!(taken(&s, a), vec![1]);
    assert_eq!(taken(&s, b), vec![3]);
    assert_eq!(taken(&s, c), vec![2]);
    assert!(s.take(d).unwrap().is_none());
    s.deliver(1, 5, vec![4]);
    assert_eq!(taken(&s, d), vec![4]);
    assert!(s.take(d).is_err(), "taken twice");
}

#[test]
fn awaited_receive_is_handed_back_and_others_reach_the_table() {
    let s = Shared::new(0, 2);
    let other = Shared::new(0, 2);
    let a = s.post_recv(1, 5);
    let b = s.post_recv(1, 6);
    let o = other.post_recv(1, 5);
    assert_eq!(
        a, o,
        "same id in two transports: the handoff must tell them apart"
    );
    let got = s.progress_for(a, || {
        s.deliver(1, 6, vec![6]);
        other.deliver(1, 5, vec![9]);
        s.deliver(1, 5, vec![5]);
    });
    let got = got.expect("a was delivered during the call");
    assert_eq!(got.op, a);
    assert_eq!(got.result.unwrap().into_bytes(), vec![5]);
    assert!(s.take(a).is_err(), "handed back, so no longer in the table");
    assert_eq!(taken(&s, b), vec![6]);
    assert_eq!(taken(&other, o), vec![9]);
    // Outside the call nothing is awaited: a later delivery goes to the table.
    let c = s.post_recv(1, 5);
    assert!(s.progress_for(c, || {}).is_none());
    s.deliver(1, 5, vec![7]);
    assert_eq!(taken(&s, c), vec![7]);
}

#[test]
fn surely_pending_only_right_after_the_post_with_nothing_completed() {
    let s = Shared::new(0, 2);
    let a = s.post_recv(1, 5);
    assert!(s.surely_pending(a));
    assert!(!s.surely_pending(a), "the record is used once");
    let b = s.post_recv(1, 5);
    assert!(!s.surely_pending(a), "not the last posted receive");
    let c = s.post_recv(1, 6);
    s.deliver(1, 6, vec![1]);
    assert!(!s.surely_pending(c), "a completion happened since: look");
    s.deliver(1, 5, vec![2]);
    let d = s.post_recv(1, 7);
    let other = Shared::new(0, 2);
    assert!(!other.surely_pending(d), "another transport's id");
    // Completed at post (the message was already there): never "surely pending".
    s.deliver(1, 8, vec![3]);
    let e = s.post_recv(1, 8);
    assert!(!s.surely_pending(e));
    assert!(s.take(e).unwrap().is_some());
    let _ = b;
}

#[test]
fn lost_peer_fails_pending_and_new_ops() {
    let s = Shared::new(0, 3);
    let r = s.post_recv(1, 0);
    let other = s.post_recv(2, 0);
    s.fail_peer(1, "gone");
    assert!(matches!(
        s.take(r).unwrap().unwrap().result,
        Err(Error::PeerLost { rank: 1, .. })
    ));
    assert!(s.take(other).unwrap().is_none());
    assert!(s.begin(1, OpKind::Put).is_err());
    let late = s.post_recv(1, 0);
    assert!(s.take(late).unwrap().unwrap().result.is_err());
}

#[test]
fn lookup_checks_key_bounds_and_liveness() {
    let s = Shared::new(0, 1);
    let r = s.new_region(64).unwrap();
    let k = r.remote_key();
    assert!(s.lookup(k.id, k.key, 0, 64).is_ok());
    assert!(matches!(
        s.lookup(k.id, k.key ^ 1, 0, 1),
        Err(Error::BadKey(_))
    ));
    assert!(matches!(
        s.lookup(k.id, k.key, 60, 5),
        Err(Error::OutOfBounds { .. })
    ));
    drop(r);
    assert!(matches!(s.lookup(k.id, k.key, 0, 1), Err(Error::BadKey(_))));
}
