//! nccl-rendezvous' CPU tests that need no process of their own, one
//! module per concern. The tests that start copies of this crate's test
//! binaries (`multiprocess`, `netns_hosts`, `store_abuse`,
//! `store_descriptors`, `store_file_crash`, `launch_env_torchrun`) are
//! binaries of their own.

mod c10d_store;
mod launch_env;
mod launch_env_namespace;
mod store_cas_counter;
mod store_conformance;
mod store_security;

use std::time::Duration;

use nccl_rendezvous::{TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions};

/// TCP client options whose every time limit (timeout, connect timeout,
/// I/O margin) is `patience`: only a hung server outlasts them, however
/// loaded the machine.
fn patient_tcp_options(patience: Duration) -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_timeout(patience)
        .with_connect_timeout(patience)
        .with_io_margin(patience)
}

/// A TCP server on 127.0.0.1 with `options`, and a client of it with
/// [`patient_tcp_options`] of `patience`.
fn server_and_patient_client(
    options: TcpStoreServerOptions,
    patience: Duration,
) -> (TcpStoreServer, TcpStore) {
    let server = TcpStoreServer::bind("127.0.0.1:0", options).expect("a server on 127.0.0.1");
    let client = TcpStore::connect_to(server.local_addr(), patient_tcp_options(patience))
        .expect("a client of it");
    (server, client)
}
