//! Fuzzes both sides of the TCP store's handshake: arbitrary bytes as a
//! client's frames to the server, and as a server's answers to a client,
//! with and without a secret. Nothing may panic, and no input may pass for
//! a peer holding the secret (see `nccl_rendezvous::fuzzing::handshake`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = nccl_rendezvous::fuzzing::handshake(data) {
        panic!("{broken}");
    }
});
