//! A client of torch's c10d `TCPStore` ([`C10dStore`]): how ranks join the
//! store that torchrun's agent already serves on `MASTER_ADDR:MASTER_PORT`
//! (`TORCHELASTIC_USE_AGENT_STORE=True`), and how a Rust rank shares keys
//! with Python ranks using `torch.distributed.TCPStore`.
//!
//! The wire format is in the `wire` module's docs; it was written from
//! torch's sources (`torch/csrc/distributed/c10d/TCPStore.cpp`,
//! `TCPStoreBackend.cpp`, `TCPStoreLibUvBackend.cpp`, `Utils.hpp`), and
//! works with both of torch's servers (libuv, the default, and the legacy
//! one).
//!
//!
//! [`C10dStore`]'s docs say how each operation maps onto c10d's queries and
//! where c10d's semantics differ from [`Store`](crate::Store)'s.
//!
//! Security: c10d's protocol has no authentication and no integrity check,
//! so this client has none either (nor takes a secret): anyone who reaches
//! the c10d store's port can read and write its keys. The README's security
//! section says what nccl-group's own TCP store protects instead.

mod client;
mod connection;
mod options;
mod wire;

pub use client::C10dStore;
pub use options::C10dStoreOptions;
