//! The `hpc run` coordinator's wire protocol (`hpc_runtime::wire`): any bytes a
//! peer can send, as a message body and as a length-prefixed stream.
//!
//! Properties: decoding never panics and never allocates beyond the input; a
//! message that decodes re-encodes to bytes that decode to the same message.

#![no_main]

use hpc_runtime::wire::{read_msg, Msg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = Msg::decode(data) {
        let again = Msg::decode(&msg.encode()).expect("a decoded message re-encodes");
        assert_eq!(msg, again);
    }
    // The same bytes as a stream of length-prefixed frames, read until the first error.
    let mut stream = data;
    for _ in 0..64 {
        if read_msg(&mut stream).is_err() {
            break;
        }
    }
});
