//! The `Store` conformance suite (`nccl_rendezvous::conformance::conformance`)
//! on every store of nccl-group: in-process, file, and TCP (a client of a
//! separate server, and a client hosting its own).

use std::time::Duration;

use nccl_rendezvous::conformance::conformance;
use nccl_rendezvous::{
    FileStore, InProcessStore, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions,
};

/// Client options with timeouts that a loaded machine meets.
fn tcp_options() -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(5))
        .with_io_margin(Duration::from_secs(2))
}

#[test]
fn in_process_conformance() {
    conformance(&InProcessStore::new());
}

#[test]
fn file_conformance() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FileStore::open(dir.path(), Duration::from_secs(5)).expect("a file store");
    conformance(&store);
}

#[test]
fn tcp_conformance() {
    let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default())
        .expect("a server on 127.0.0.1");
    let client = TcpStore::connect_to(server.local_addr(), tcp_options()).expect("a client of it");
    conformance(&client);
}

#[test]
fn tcp_hosted_conformance() {
    let store = TcpStore::host(
        "127.0.0.1:0",
        TcpStoreServerOptions::default(),
        tcp_options(),
    )
    .expect("a client hosting its server");
    assert!(store.hosted_server().is_some());
    conformance(&store);
}

#[test]
fn tcp_conformance_with_four_serving_threads() {
    let options = TcpStoreServerOptions::default().with_serving_threads(4);
    let server = TcpStoreServer::bind("127.0.0.1:0", options).expect("a server on 127.0.0.1");
    let client = TcpStore::connect_to(server.local_addr(), tcp_options()).expect("a client of it");
    conformance(&client);
}
