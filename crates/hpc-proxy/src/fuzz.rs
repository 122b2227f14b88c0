//! Entry points for fuzzing what the proxy reads from a rank's memory: each
//! takes arbitrary bytes and returns a `Result`, never panicking.

use hpc_collectives::{BufferId, Step};

/// What the proxy makes of a `SUBMIT` descriptor's blob from rank `rank`
/// of `size`: `Ok` with the schedule's step count if it would run it. A blob
/// it accepts yields a schedule whose every region lies inside the buffer
/// lengths the blob claims or the schedule's scratch (the proxy checks each
/// region again before touching memory; this says the two agree).
pub fn proxy_submit(bytes: &[u8], rank: usize, size: usize) -> Result<usize, String> {
    let (blob, sched) =
        crate::parse_submit(bytes, rank, size).map_err(|c| format!("refused: {c:?}"))?;
    let mut steps = 0;
    for round in &sched.rounds {
        for step in &round.steps {
            steps += 1;
            let regions = match *step {
                Step::Send { region, .. } | Step::Recv { region, .. } => vec![region],
                Step::Copy { src, dst } | Step::Reduce { src, dst, .. } => vec![src, dst],
            };
            for r in regions {
                let len = match r.buf {
                    BufferId::Send => blob.send_len,
                    BufferId::Recv => blob.recv_len,
                    BufferId::Scratch => sched.scratch_bytes,
                };
                assert!(
                    r.offset.checked_add(r.len).is_some_and(|end| end <= len),
                    "region {r} outside its buffer of {len} bytes in an accepted blob"
                );
            }
        }
    }
    Ok(steps)
}

/// The kind of a descriptor word and the code of an answer, as the proxy
/// and the ranks read them: `Ok` for a known kind.
pub fn proxy_words(kind: u32, code: u64) -> Result<(), String> {
    let _ = crate::protocol::Code::from_wire(code);
    crate::protocol::Kind::from_wire(kind)
        .map(|_| ())
        .ok_or_else(|| format!("unknown kind {kind}"))
}

/// What the proxy in DPU placement makes of a request message from rank
/// `rank` of `size`: `Ok` with the schedule's step count for a submit it
/// would run (`Ok(0)` for a cancel, a detach, an open or a point-to-point
/// message whose span checks pass, or that has none). An accepted
/// submit's schedule lies inside the spans it claims (checked here again).
pub fn dpu_request(bytes: &[u8], rank: usize, size: usize) -> Result<usize, String> {
    crate::dpu::fuzz_request(bytes, rank, size)
}

/// What a rank makes of its DPU-placed proxy's answer to an ask (which
/// ranks' parts of a collective it has not received): the ranks named,
/// or why the bytes are none.
pub fn dpu_waiting(bytes: &[u8]) -> Result<Vec<usize>, String> {
    crate::dpu::fuzz_waiting(bytes)
}

/// A blob as a rank encodes it (for seeding the corpus).
pub fn encode_submit(
    coll: &hpc_collectives::Collective,
    send_len: usize,
    recv_len: usize,
) -> Vec<u8> {
    crate::encode_blob(coll, send_len, recv_len)
}
