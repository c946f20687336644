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
//! # No authentication
//!
//! c10d's TCPStore has none: any process that reaches the port can read
//! and write every key. This client therefore has no secret either
//! (`NCCL_RS_STORE_SECRET` is refused with the agent's store); keep the
//! port on a trusted network, as torch's documentation asks.
//!
//! # How each operation maps onto c10d's queries
//!
//! | [`Store`](crate::store::Store) call | queries |
//! |---|---|
//! | `set` | SET, then PING: SET has no reply, and the echo proves it was applied before `set` returns |
//! | `get` | CHECK; while absent, WAIT (cancelled with CANCEL_WAIT at the deadline) and CHECK again; then GET |
//! | `try_get` | CHECK, then GET if set |
//! | `compare_set` | COMPARE_SET (and CHECK when `expected == new`) |
//! | `add` | CHECK and GET (to refuse a non-integer or an overflow), then ADD |
//! | `wait` | as `get`, without the GET; on a timeout, one CHECK per key to name those missing |
//! | `delete` | DELETE_KEY |
//!
//! Every reply is bounded: a `get` or `wait` by its timeout (then the wait
//! is cancelled as torch's own client does), every other reply by the I/O
//! margin ([`C10dStoreOptions::io_margin`]). A server that closes the
//! connection fails the call at once with
//! [`StoreError::ConnectionClosed`](crate::store::StoreError::ConnectionClosed).
//!
//! # Where c10d's semantics differ from `Store`'s
//!
//! * **`compare_set`'s `swapped`.** c10d's COMPARE_SET answers only the
//!   value the key holds afterwards, so `swapped` is `true` whenever that
//!   value is `new`: also when another caller had already stored the same
//!   bytes. Of several callers offering the same value at once, all report
//!   `swapped` (the store's suite checks that exactly one does: c10d cannot
//!   meet it). Elect a leader with distinct values (e.g. each rank's own
//!   id) and compare `current` with your own.
//! * **"Absent" is an empty expected value.** c10d has no way to say "the
//!   key must be absent" but an empty `expected`, so `expected: None` and
//!   `Some(b"")` are the same request: a key holding an empty value counts
//!   as absent (it is swapped where [`Store`](crate::store::Store) says it
//!   is present), and `Some(b"")` on an absent key stores `new`. When the
//!   key is absent and a non-empty value was expected, c10d answers the
//!   expected value itself; the client reads that as `current: None`.
//! * **`add`** checks the stored value before adding, but not atomically
//!   with the ADD: a non-integer written between the two makes torch's
//!   server close the connection
//!   ([`StoreError::ConnectionClosed`](crate::store::StoreError::ConnectionClosed)),
//!   and an overflow in between wraps. Counters written by `add`, here or
//!   by Python, never hit either.
//! * **Limits.** Keys of at most 8 KiB, values of at most 8 MiB and at most
//!   128 Ki keys per `wait` (torch's libuv server closes the connection on
//!   more); refused before sending with
//!   [`StoreError::InvalidArgument`](crate::store::StoreError::InvalidArgument).
//! * **A key deleted while it is read** (between the CHECK and the GET):
//!   the legacy server closes the connection, the libuv one answers an
//!   empty value.
//! * **Wake-ups.** The legacy server does not wake waiters of a key that
//!   COMPARE_SET creates; a `get` or `wait` on such a key returns once
//!   something else sets it, or times out.
//!
//! ```no_run
//! use nccl_group::{C10dStore, Store};
//! use std::time::Duration;
//!
//! // Under torchrun: the agent's store.
//! let store = C10dStore::connect("127.0.0.1", 29500, Duration::from_secs(60))?;
//! store.set("from_rust", b"hello")?;
//! let value = store.get("from_python", Duration::from_secs(10))?;
//! # Ok::<(), nccl_group::StoreError>(())
//! ```

mod client;
mod connection;
mod options;
mod wire;

pub use client::C10dStore;
pub use options::C10dStoreOptions;
