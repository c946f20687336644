//! A joining process's launch configuration: without a launcher it needs
//! no numbering, and from a configuration of rank 0 it joins a group whose
//! TCP store another process hosts, as a client.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::*;
use crate::generations::grow::options::GrowOptions;
use crate::generations::heal::tests::options;
use crate::generations::recovery::Recovery;
use nccl_rendezvous::{
    PrefixStore, Store, StoreSpec, TcpStore, TcpStoreOptions, TcpStoreServerOptions,
};

/// Longer than any wait here that must end: a hang guard.
const PATIENCE: Duration = Duration::from_secs(60);

/// A lookup of `vars`, as `RendezvousConfig::from_vars` takes one.
fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    move |name| vars.get(name).cloned()
}

#[test]
fn a_joiner_without_a_launcher_needs_no_rank_or_world_size() {
    let config = joining_config(lookup(&[("MASTER_ADDR", "node0"), ("MASTER_PORT", "29500")]))
        .expect("the store's variables suffice");
    assert_eq!((config.rank, config.world_size), (0, 1));
    assert_eq!(
        config.store,
        StoreSpec::Tcp {
            addr: "node0".to_string(),
            port: 29500
        }
    );
}

#[test]
fn a_joiner_a_launcher_started_keeps_the_launchers_variables() {
    let vars = [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("LOCAL_RANK", "0"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "job7"),
    ];
    let config = joining_config(lookup(&vars)).expect("a torchrun worker's variables");
    assert_eq!(config.namespace, "torchrun.job7.0");
    let error = joining_config(lookup(&[("RANK", "x"), ("WORLD_SIZE", "1")]))
        .expect_err("a malformed RANK is still refused");
    assert!(error.to_string().contains("RANK"), "{error}");
}

#[test]
fn a_joiner_configured_as_rank_0_joins_the_hosted_store_as_a_client() {
    let host = TcpStore::host(
        "127.0.0.1:0",
        TcpStoreServerOptions::default(),
        TcpStoreOptions::default(),
    )
    .expect("a TCP store on a free port");
    let port = host
        .hosted_server()
        .expect("hosted here")
        .local_addr()
        .port();
    // The group's ranks meet under the namespace a configuration without
    // a launcher gives ("manual"), as `ProcessGroup::from_env` ranks would.
    let store: Arc<dyn Store> =
        Arc::new(PrefixStore::new(host, "manual").expect("a valid namespace"));
    let groups = crate::generations::heal::tests::world_on(&store, "tcp-grow", 2);
    let port = port.to_string();
    let config = joining_config(lookup(&[
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", port.as_str()),
    ]))
    .expect("the store's variables");
    assert_eq!(config.rank, 0, "a configuration whose rank would host the store");
    let (grown, joined) = thread::scope(|scope| {
        let joiner = scope.spawn(|| {
            ProcessGroup::builder("tcp-grow")
                .config(&config)
                .options(options())
                .join_grown(PATIENCE)
        });
        while groups[0].pending_joins().expect("read") == 0 {
            assert!(!joiner.is_finished(), "the joiner ended without a ticket");
            thread::yield_now();
        }
        let growing: Vec<_> = groups
            .iter()
            .map(|group| scope.spawn(|| group.grow(1, &GrowOptions::new())))
            .collect();
        let grown: Vec<_> = growing
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect();
        (grown, joiner.join().expect("no panic"))
    });
    for grown in grown {
        assert_eq!(grown.expect("grown").group().world_size(), 3);
    }
    let joined = joined.expect("joined as a client");
    assert_eq!((joined.rank(), joined.world_size()), (2, 3));
}
