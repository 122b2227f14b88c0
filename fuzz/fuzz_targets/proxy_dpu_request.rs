//! What the collectives proxy in DPU placement reads from a rank: a request
//! message (sequence number, then the collective, its options and the remote
//! keys and spans of its send and receive memory), decoded, its keys and
//! spans checked and the collective scheduled. The first byte picks the rank,
//! the second the communicator size (1 to 16), the rest is the message.
//! Decoding never panics, and a request the proxy accepts yields a schedule
//! inside the spans it claims. The same bytes read as the proxy's answer to
//! an ask (the ranks whose parts it has not received) never panic either.

#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((rank, size, rest)) = common::rank_size_rest(data) else {
        return;
    };
    let _ = hpc_comm::fuzz::dpu_request(rest, rank, size);
    let _ = hpc_comm::fuzz::dpu_waiting(rest);
});
