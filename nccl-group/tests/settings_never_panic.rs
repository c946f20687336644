//! Every duration option of the stores, tried at its boundary values (0,
//! 1 ms, 1 s, `u32::MAX` and `u64::MAX` seconds, `Duration::MAX`): each is
//! accepted and works, or is refused with an error naming it; none panics,
//! in the caller or in a server thread. Then the launch variables and the
//! flight recorder's capacity at their bounds.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use nccl_group::recorder::MAX_RECORDER_CAPACITY;
use nccl_group::{
    FileStore, GroupError, GroupOptions, InProcessStore, ProcessGroup, RendezvousConfig, Store,
    StoreError, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions,
};

const BOUNDARIES: [Duration; 6] = [
    Duration::ZERO,
    Duration::from_millis(1),
    Duration::from_secs(1),
    Duration::from_secs(u32::MAX as u64),
    Duration::from_secs(u64::MAX),
    Duration::MAX,
];

/// Runs `f`, failing the test if it panics.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| panic!("{what} panicked"))
}

/// An error refusing option `what`, by name.
fn assert_names(err: &StoreError, what: &str) {
    match err {
        StoreError::InvalidArgument { what: named, .. } => assert_eq!(*named, what, "{err}"),
        other => panic!("expected {what} to be refused by name, got {other:?}"),
    }
}

/// A set and a get on `store` work (a server thread that panicked would
/// have closed the connection instead).
fn round_trip(store: &dyn Store, what: &str) {
    store
        .set("k", b"v")
        .unwrap_or_else(|e| panic!("{what}: set failed: {e}"));
    let got = store.get("k", Duration::from_secs(5));
    assert_eq!(
        got.unwrap_or_else(|e| panic!("{what}: get failed: {e}")),
        b"v"
    );
}

#[test]
fn server_io_timeout_is_used_or_refused_by_name() {
    for io_timeout in BOUNDARIES {
        let what = format!("io_timeout {io_timeout:?}");
        no_panic(&what, || {
            let opts = TcpStoreServerOptions::default().with_io_timeout(io_timeout);
            match TcpStoreServer::bind("127.0.0.1:0", opts) {
                Err(e) => assert_names(&e, "io_timeout"),
                // 0 counts as 1 ms, too short for a dependable round trip.
                Ok(_) if io_timeout < Duration::from_secs(1) => {}
                Ok(server) => {
                    let client =
                        TcpStore::connect_to(server.connect_addr(), TcpStoreOptions::default())
                            .unwrap_or_else(|e| panic!("{what}: connect failed: {e}"));
                    round_trip(&client, &what);
                    drop(client);
                    drop(server);
                }
            }
        });
    }
    let err = TcpStoreServer::bind(
        "127.0.0.1:0",
        TcpStoreServerOptions::default().with_io_timeout(Duration::MAX),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("io_timeout") && err.to_string().contains("at most 10 years"),
        "{err}"
    );
}

#[test]
fn client_durations_are_used_or_refused_by_name() {
    let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default()).unwrap();
    type Setter = fn(TcpStoreOptions, Duration) -> TcpStoreOptions;
    let options: [(&str, Setter); 3] = [
        ("timeout", TcpStoreOptions::with_timeout),
        ("connect_timeout", TcpStoreOptions::with_connect_timeout),
        ("io_margin", TcpStoreOptions::with_io_margin),
    ];
    for (name, set) in options {
        for value in BOUNDARIES {
            let what = format!("{name} {value:?}");
            no_panic(&what, || {
                let opts = set(TcpStoreOptions::default(), value);
                match TcpStore::connect_to(server.connect_addr(), opts) {
                    Ok(store) => round_trip(&store, &what),
                    Err(e @ StoreError::InvalidArgument { .. }) => assert_names(&e, name),
                    // A zero connect timeout may give up before connecting.
                    Err(StoreError::Connect { .. }) if value.is_zero() => {}
                    Err(e) => panic!("{what}: unexpected error {e}"),
                }
            });
        }
    }
}

#[test]
fn file_store_durations_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    for value in BOUNDARIES {
        let what = format!("file store durations {value:?}");
        no_panic(&what, || {
            let store = FileStore::open(dir.path(), value)
                .unwrap()
                .with_lock_timeout(value.max(Duration::from_secs(1)))
                .with_poll_interval(value);
            round_trip(&store, &what);
            assert_eq!(store.default_timeout(), value);
        });
    }
}

#[test]
fn launch_variables_at_their_bounds_never_panic() {
    let numbers = [
        "0",
        "1",
        "2147483647",
        "2147483648",
        "4294967295",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
    ];
    for name in [
        "WORLD_SIZE",
        "SLURM_NTASKS",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NCCL_RS_STORE_TIMEOUT_SECS",
    ] {
        for value in numbers {
            let what = format!("{name}={value}");
            let vars = [
                ("RANK", "0"),
                ("WORLD_SIZE", "2147483647"),
                ("NCCL_RS_STORE", "file:/tmp/x"),
                (name, value),
            ];
            let read = no_panic(&what, || {
                RendezvousConfig::from_vars(|n| {
                    vars.iter()
                        .rev()
                        .find(|(k, _)| *k == n)
                        .map(|(_, v)| v.to_string())
                })
            });
            match read {
                Ok(c) => assert!(c.world_size <= i32::MAX as usize && c.rank < c.world_size),
                Err(StoreError::Config { var, .. }) => {
                    assert!(var == name || var == "WORLD_SIZE", "{what}: named {var}")
                }
                Err(e) => panic!("{what}: unexpected error {e}"),
            }
        }
    }
}

#[test]
fn a_huge_recorder_capacity_is_refused_by_name() {
    for capacity in [MAX_RECORDER_CAPACITY + 1, usize::MAX] {
        let what = format!("recorder_capacity {capacity}");
        let made = no_panic(&what, || {
            ProcessGroup::new(
                "huge-recorder",
                0,
                1,
                Arc::new(InProcessStore::new()),
                "in-process",
                GroupOptions::default().with_recorder_capacity(capacity),
            )
        });
        match made {
            Err(GroupError::InvalidArgument {
                argument, given, ..
            }) => {
                assert_eq!(argument, "recorder_capacity");
                assert_eq!(given, capacity.to_string());
            }
            other => panic!("{what}: expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn group_durations_at_their_bounds_never_panic() {
    for duration in BOUNDARIES {
        let what = format!("a group with every timeout {duration:?}");
        no_panic(&what, || {
            let options = GroupOptions::default()
                .with_timeout(duration)
                .with_op_timeout(duration)
                .with_abort_timeout(duration)
                .with_dump_dir(None);
            let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
            let group = ProcessGroup::new("bounds", 0, 1, store, "in-process", options)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let handle = group.with_op_timeout(duration);
            assert_eq!(handle.op_timeout(), duration);
            assert_eq!(group.pending_operations(), 0);
            // Abort twice: the second finds the group no longer live. A
            // zero abort timeout may report the abort as stalled, by design.
            for aborted in [group.abort(), handle.abort()] {
                match aborted {
                    Ok(()) | Err(GroupError::AbortStalled { .. }) => {}
                    Err(e) => panic!("{what}: abort: {e}"),
                }
            }
            assert!(matches!(group.destroy(), Err(GroupError::Aborted { .. })));
        });
    }
}
