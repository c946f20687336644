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
pub use server::{GatePriority, TcpStoreServer, TcpStoreServerOptions, TcpStoreServerStats};

/// The default maximum frame size of a [`TcpStore`] client: 64 MiB, for
/// what it sends and what it accepts.
///
/// A server's default is the largest request its limits allow
/// ([`TcpStoreServerOptions::max_frame_size`]).
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
