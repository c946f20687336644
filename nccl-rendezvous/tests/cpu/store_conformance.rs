//! The `Store` conformance suite (`nccl_rendezvous::conformance::conformance`)
//! on every store of nccl-group: in-process, file, and TCP (a client of a
//! separate server, and a client hosting its own).

use std::time::Duration;

use nccl_rendezvous::conformance::conformance;
use nccl_rendezvous::{FileStore, InProcessStore, TcpStore, TcpStoreServerOptions};

use crate::{patient_tcp_options, server_and_patient_client};

/// The client's timeouts and I/O margin: only a hung server outlasts
/// them, however loaded the machine.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn in_process_conformance() {
    conformance(&InProcessStore::new());
}

#[test]
fn file_conformance() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FileStore::open(dir.path(), PATIENCE).expect("a file store");
    conformance(&store);
}

#[test]
fn tcp_conformance() {
    let (_server, client) = server_and_patient_client(TcpStoreServerOptions::default(), PATIENCE);
    conformance(&client);
}

#[test]
fn tcp_hosted_conformance() {
    let store = TcpStore::host(
        "127.0.0.1:0",
        TcpStoreServerOptions::default(),
        patient_tcp_options(PATIENCE),
    )
    .expect("a client hosting its server");
    assert!(store.hosted_server().is_some());
    conformance(&store);
}

#[test]
fn tcp_conformance_with_four_serving_threads() {
    let options = TcpStoreServerOptions::default().with_serving_threads(4);
    let (_server, client) = server_and_patient_client(options, PATIENCE);
    conformance(&client);
}
