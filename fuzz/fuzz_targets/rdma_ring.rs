//! hpc-rdma's shared-memory ring as a consumer finds it: control block and data
//! written by a peer that may be broken or hostile. A pop never panics, never reads
//! outside the memory and never returns more payload than the ring holds.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_kind, _tag, payload))) = hpc_rdma::fuzz::ring_pop(data) {
        assert!(payload.len() <= data.len());
    }
});
