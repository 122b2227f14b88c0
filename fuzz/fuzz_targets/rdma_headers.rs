//! What a peer sends hpc-rdma before any data: frame headers (tcp, mpi), remote keys
//! and verbs endpoints. The first byte picks the decoder, the rest is its input.
//! Decoding never panics; a remote key that decodes re-encodes to the same key.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            let _ = hpc_rdma::fuzz::wire_header(rest);
        }
        1 => {
            if let Ok(key) = hpc_rdma::fuzz::remote_key(rest) {
                let again = hpc_rdma::fuzz::remote_key(&key.to_bytes()).expect("a key re-encodes");
                assert_eq!(format!("{key:?}"), format!("{again:?}"));
            }
        }
        _ => {
            let _ = hpc_rdma::fuzz::verbs_endpoint(rest);
        }
    }
});
