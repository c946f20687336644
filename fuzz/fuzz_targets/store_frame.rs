//! Fuzzes the TCP store's frame reader and its request and response
//! decoders: arbitrary bytes must never panic them, and whatever decodes
//! must encode back the same (see `nccl_rendezvous::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = nccl_rendezvous::fuzzing::decode_frame(data) {
        panic!("{broken}");
    }
});
