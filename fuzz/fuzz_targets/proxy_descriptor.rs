//! What the collectives proxy reads from a rank: a `SUBMIT` descriptor's blob
//! (the collective, its buffers' addresses and lengths, shared-buffer
//! references), decoded, checked against the collective and scheduled, and the
//! descriptor and answer words. The first byte picks the rank, the second the
//! communicator size (1 to 16), the rest is the blob. Decoding never panics,
//! and a blob the proxy accepts yields a schedule inside the buffers it claims.

#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((rank, size, rest)) = common::rank_size_rest(data) else {
        return;
    };
    let _ = hpc_comm::fuzz::proxy_submit(rest, rank, size);
    if let [a, b, c, d, e, f, g, h, i, j, k, l, ..] = *rest {
        let kind = u32::from_le_bytes([a, b, c, d]);
        let code = u64::from_le_bytes([e, f, g, h, i, j, k, l]);
        let _ = hpc_comm::fuzz::proxy_words(kind, code);
    }
});
