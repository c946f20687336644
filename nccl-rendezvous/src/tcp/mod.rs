//! The TCP store: a server one rank (or a separate process) hosts, and
//! clients with connect, read and write timeouts.
//!
//! See the `wire` module docs for the protocol and its handshake.

mod client;
mod descriptors;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod server;
mod wire;

pub use client::{TcpStore, TcpStoreOptions};
pub use server::{TcpStoreServer, TcpStoreServerOptions};

/// The default maximum frame size of the TCP store, on both ends: 64 MiB.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 64 << 20;

/// Shows a secret in `Debug` output without revealing it.
fn redacted(secret: Option<&[u8]>) -> &'static str {
    match secret {
        Some(_) => "Some(<redacted>)",
        None => "None",
    }
}

#[cfg(test)]
mod tests;
