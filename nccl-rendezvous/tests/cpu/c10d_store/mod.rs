//! `C10dStore` against a fake c10d TCPStore server (`fake_server`, written
//! from torch's sources) imitating both of torch's servers: the store
//! conformance suite where c10d's semantics allow it, what c10d's
//! compare-and-set gives instead, connecting and retrying, bounded waits
//! and replies, a server that dies mid-wait, many threads on one store,
//! and torchrun's agent store read from the environment. The same client
//! meets real torch on the GPU machine (`tests/torch/c10d_interop.py`).

mod fake_server;

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use fake_server::{Backend, FakeServer};
use nccl_rendezvous::conformance::{Section, conformance_except};
use nccl_rendezvous::{
    C10dStore, C10dStoreOptions, CompareSet, RendezvousConfig, Store, StoreError, StoreSpec,
};
use nccl_test_support::within;

const BACKENDS: [Backend; 2] = [Backend::Libuv, Backend::Legacy];

/// Query bytes, as the fake server records them.
const SET: u8 = 1;
const ADD: u8 = 4;
const WAIT: u8 = 6;
const PING: u8 = 13;

/// The timeouts of what must succeed, and the hang guard of what must
/// end: only a deadlock or a lost wake-up takes this long, however loaded
/// the machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// Timeouts a loaded machine meets.
fn options() -> C10dStoreOptions {
    C10dStoreOptions::default()
        .with_timeout(PATIENCE)
        .with_connect_timeout(PATIENCE)
        .with_io_margin(PATIENCE)
}

/// Returns once `server` has received `count` WAIT queries (each one a
/// waiter registered), failing the test past [`PATIENCE`].
fn await_waits(server: &FakeServer, count: usize) {
    let deadline = Instant::now() + PATIENCE;
    while server.queries().iter().filter(|&&q| q == WAIT).count() < count {
        assert!(
            Instant::now() < deadline,
            "the server never received {count} WAIT queries: {:?}",
            server.queries()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn client(server: &FakeServer) -> C10dStore {
    C10dStore::connect_with("127.0.0.1", server.port(), options()).expect("a client of the fake")
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("an ephemeral port")
        .port()
}

#[test]
fn conformance_except_compare_set_on_both_servers() {
    for backend in BACKENDS {
        let server = FakeServer::start(backend);
        // compare_set cannot tell this caller's swap from another's write
        // of the same value: `compare_set_as_c10d_gives_it` checks what it
        // does instead.
        conformance_except(&client(&server), &[Section::CompareSet]);
    }
}

#[test]
fn compare_set_as_c10d_gives_it() {
    let swapped_to = |value: &[u8]| CompareSet {
        swapped: true,
        current: Some(value.to_vec()),
    };
    let kept = |value: Option<&[u8]>| CompareSet {
        swapped: false,
        current: value.map(<[u8]>::to_vec),
    };
    for backend in BACKENDS {
        let server = FakeServer::start(backend);
        let store = client(&server);
        let cs = |key: &str, expected: Option<&[u8]>, new: &[u8]| {
            store.compare_set(key, expected, new).expect("compare_set")
        };
        // The cases c10d meets as `Store` documents them.
        assert_eq!(cs("cs", None, b"v1"), swapped_to(b"v1"), "{backend:?}");
        assert_eq!(cs("cs", None, b"zz"), kept(Some(b"v1")));
        assert_eq!(cs("cs", Some(b"v1"), b"v2"), swapped_to(b"v2"));
        assert_eq!(cs("cs", Some(b"v1"), b"v3"), kept(Some(b"v2")));
        assert_eq!(cs("cs", Some(b"v2"), b"v2"), swapped_to(b"v2"));
        assert_eq!(cs("absent", Some(b"e"), b"n"), kept(None));
        assert_eq!(cs("absent", Some(b"n"), b"n"), kept(None));
        assert_eq!(server.value("absent"), None, "the key stays absent");

        // Where c10d differs (module docs): the answer is only the value
        // afterwards, and "absent" is an empty expected value.
        assert_eq!(
            cs("cs", Some(b"v1"), b"v2"),
            swapped_to(b"v2"),
            "another caller's write of `new` reads as a swap"
        );
        store.set("empty", b"").unwrap();
        assert_eq!(
            cs("empty", None, b"x"),
            swapped_to(b"x"),
            "an empty value counts as absent"
        );
        assert_eq!(
            cs("absent-2", Some(b""), b"y"),
            swapped_to(b"y"),
            "an empty expected value swaps an absent key"
        );

        // Electing with distinct values: exactly one elector finds its own
        // value, as the module docs advise.
        let electors = 4;
        let start = Barrier::new(electors);
        let outcomes: Vec<(usize, CompareSet)> = thread::scope(|s| {
            let handles: Vec<_> = (0..electors)
                .map(|me| {
                    let (start, store) = (&start, &store);
                    s.spawn(move || {
                        start.wait();
                        let mine = me.to_string();
                        (
                            me,
                            store.compare_set("leader", None, mine.as_bytes()).unwrap(),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = outcomes
            .iter()
            .filter(|(_, o)| o.swapped)
            .map(|(me, _)| *me)
            .collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        let elected = server.value("leader").unwrap();
        assert_eq!(elected, winners[0].to_string().as_bytes());
        for (_, outcome) in &outcomes {
            assert_eq!(outcome.current.as_deref(), Some(&elected[..]));
        }
    }
}

#[test]
fn set_is_applied_before_it_returns() {
    let server = FakeServer::start(Backend::Libuv);
    let store = client(&server);
    store.set("k", b"v").unwrap();
    assert_eq!(server.value("k").as_deref(), Some(&b"v"[..]));
    assert_eq!(server.queries(), [SET, PING], "SET, then a PING round trip");
}

#[test]
fn add_refuses_text_and_overflow_without_sending_add() {
    for backend in BACKENDS {
        let server = FakeServer::start(backend);
        let store = client(&server);
        store.set("text", b"12abc").unwrap();
        let err = store.add("text", 1).unwrap_err();
        assert!(matches!(err, StoreError::NotAnInteger { .. }), "{err:?}");
        store.set("max", i64::MAX.to_string().as_bytes()).unwrap();
        let err = store.add("max", 1).unwrap_err();
        assert!(matches!(err, StoreError::Overflow { .. }), "{err:?}");
        assert!(!server.queries().contains(&ADD), "no ADD was sent");
        assert_eq!(store.add("n", 5).unwrap(), 5);
        assert_eq!(store.add("n", -7).unwrap(), -2);
        assert_eq!(server.value("n").as_deref(), Some(&b"-2"[..]));
    }
}

#[test]
fn limits_are_refused_before_sending() {
    let server = FakeServer::start(Backend::Libuv);
    let store = client(&server);
    // One byte over 8 KiB on the wire, with torch's "/" prefix.
    let long_key = "k".repeat(8 * 1024);
    let err = store.set(&long_key, b"v").unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("at most 8191 bytes"), "{err}");
    let big = vec![0u8; 8 * 1024 * 1024 + 1];
    let err = store.set("k", &big).unwrap_err();
    assert!(err.to_string().contains("of 8388609 bytes"), "{err}");
    let many = vec!["k"; 128 * 1024 + 1];
    let err = store.wait(&many, Duration::from_millis(10)).unwrap_err();
    assert!(err.to_string().contains("131073"), "{err}");
    assert!(server.queries().is_empty(), "nothing was sent");
    store
        .set(&"k".repeat(8 * 1024 - 1), b"at the limit")
        .unwrap();
}

#[test]
fn connect_retries_until_the_server_is_up() {
    // Before the server is up, its port closes two connections unanswered
    // (as a server that is still starting may): the client must retry
    // past both.
    let starting = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = starting.local_addr().unwrap().port();
    let started = thread::spawn(move || {
        for _ in 0..2 {
            drop(starting.accept().unwrap());
        }
        drop(starting);
        FakeServer::start_on(Backend::Libuv, port)
    });
    let store = C10dStore::connect("127.0.0.1", port, PATIENCE).unwrap();
    let server = started.join().unwrap();
    store.set("up", b"1").unwrap();
    assert_eq!(server.value("up").as_deref(), Some(&b"1"[..]));
    assert_eq!(store.default_timeout(), PATIENCE);
}

#[test]
fn connect_gives_up_after_its_timeout() {
    let port = free_port();
    let timeout = Duration::from_millis(500);
    let err = within("a connect to a closed port", PATIENCE, move || {
        C10dStore::connect("127.0.0.1", port, timeout).unwrap_err()
    });
    let StoreError::Connect {
        attempts,
        addr,
        waited,
        ..
    } = &err
    else {
        panic!("expected a connect error, got {err:?}");
    };
    assert!(*attempts > 1, "{err}");
    assert_eq!(*addr, format!("127.0.0.1:{port}"));
    assert!(*waited >= timeout, "{err}");
}

#[test]
fn a_server_that_accepts_but_never_answers_is_not_joined() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and keeps every connection open, reading nothing.
    let held = thread::spawn(move || {
        listener
            .incoming()
            .take(64)
            .filter_map(Result::ok)
            .collect::<Vec<_>>()
    });
    let opts = options()
        .with_connect_timeout(Duration::from_millis(600))
        .with_io_margin(Duration::from_millis(200));
    let err = within("a connect to a silent peer", PATIENCE, move || {
        C10dStore::connect_with("127.0.0.1", port, opts).unwrap_err()
    });
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
    drop(held);
}

#[test]
fn a_peer_that_is_not_c10d_is_a_protocol_error_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answering = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        thread::sleep(Duration::from_millis(500));
    });
    // A client that retried would find the port closed after the answer
    // and fail with a connect error, not this protocol error.
    let err = C10dStore::connect("127.0.0.1", port, Duration::from_secs(30)).unwrap_err();
    match &err {
        StoreError::Protocol { detail, .. } => assert!(detail.contains("PING"), "{err}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    answering.join().unwrap();
}

#[test]
fn a_server_that_dies_mid_wait_fails_the_wait_at_once() {
    for backend in BACKENDS {
        let mut server = FakeServer::start(backend);
        let store = client(&server);
        // Its timeout outlasts the hang guard: only the closed connection
        // can end it in time.
        let waiter = thread::spawn(move || store.get("never", 2 * PATIENCE));
        await_waits(&server, 1);
        server.kill();
        let result = within("a wait on a server that died", PATIENCE, move || {
            waiter.join().unwrap()
        });
        match result {
            Err(StoreError::ConnectionClosed { op, .. }) => assert!(op.contains("never"), "{op}"),
            other => panic!("expected the connection closed, got {other:?}"),
        }
    }
}

#[test]
fn a_silent_server_is_unresponsive_within_the_margin() {
    let server = FakeServer::start(Backend::Libuv);
    let opts = options().with_io_margin(Duration::from_millis(300));
    let store = C10dStore::connect_with("127.0.0.1", server.port(), opts).unwrap();
    server.set_silent(true);
    let (store, err) = within("a set on a silent server", PATIENCE, move || {
        let err = store.set("k", b"v").unwrap_err();
        (store, err)
    });
    match &err {
        StoreError::Unresponsive { waited, .. } => {
            assert_eq!(*waited, Duration::from_millis(300), "the margin: {err}");
        }
        other => panic!("expected the server unresponsive, got {other:?}"),
    }
    // The broken connection was dropped; a new one works once it answers.
    server.set_silent(false);
    store.set("k", b"again").unwrap();
    assert_eq!(server.value("k").as_deref(), Some(&b"again"[..]));
}

#[test]
fn a_spurious_wake_up_does_not_end_a_get() {
    // torch's libuv server wakes the waiters of a key that a compare_set
    // leaves absent.
    let server = FakeServer::start(Backend::Libuv);
    let store = client(&server);
    let value = thread::scope(|s| {
        let getter = s.spawn(|| store.get("late", PATIENCE));
        await_waits(&server, 1);
        let cs = store.compare_set("late", Some(b"x"), b"y").unwrap();
        assert_eq!(cs.current, None);
        // The woken get checked, found the key absent, and waits again.
        await_waits(&server, 2);
        store.set("late", b"real").unwrap();
        getter.join().unwrap()
    });
    assert_eq!(value.unwrap(), b"real");

    let timeout = Duration::from_millis(600);
    let err = thread::scope(|s| {
        let getter = s.spawn(|| store.get("never", timeout));
        thread::sleep(Duration::from_millis(100));
        store.compare_set("never", Some(b"x"), b"y").unwrap();
        getter.join().unwrap()
    })
    .unwrap_err();
    match &err {
        StoreError::Timeout { keys, waited, .. } => {
            assert_eq!(keys, &["never"]);
            assert!(*waited >= timeout, "{err}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_cancel_answered_after_a_late_wake_up_keeps_the_connection_in_step() {
    let server = FakeServer::start(Backend::Legacy);
    let store = client(&server);
    server.set_racing_cancel(true);
    let err = store
        .wait(&["a", "b"], Duration::from_millis(150))
        .unwrap_err();
    match &err {
        StoreError::Timeout { keys, .. } => assert_eq!(keys, &["a", "b"]),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The late STOP_WAITING and the WAIT_CANCELED were both read: the next
    // answers are in step.
    store.set("a", b"1").unwrap();
    assert_eq!(store.try_get("a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(store.add("n", 3).unwrap(), 3);
    assert_eq!(
        server.connections_accepted(),
        1,
        "no connection was dropped"
    );
}

#[test]
fn many_threads_share_one_store() {
    const THREADS: usize = 16;
    const ADDS: i64 = 25;
    let server = FakeServer::start(Backend::Libuv);
    let store = client(&server);
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for i in 0..THREADS {
            let (store, start) = (&store, &start);
            s.spawn(move || {
                start.wait();
                // Each thread reads a key the next one sets: some block in
                // `get` while others set.
                let next = (i + 1) % THREADS;
                store
                    .set(&format!("t{i}"), i.to_string().as_bytes())
                    .unwrap();
                let got = store.get(&format!("t{next}"), PATIENCE).unwrap();
                assert_eq!(got, next.to_string().as_bytes());
                for _ in 0..ADDS {
                    store.add("count", 1).unwrap();
                }
                let keys: Vec<String> = (0..THREADS).map(|j| format!("t{j}")).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                store.wait(&keys, PATIENCE).unwrap();
            });
        }
    });
    assert_eq!(store.add("count", 0).unwrap(), THREADS as i64 * ADDS);
}

fn agent_vars(port: u16, rank: &str, agent: &str) -> HashMap<&'static str, String> {
    [
        ("RANK", rank.to_owned()),
        ("WORLD_SIZE", "2".to_owned()),
        ("LOCAL_RANK", rank.to_owned()),
        ("MASTER_ADDR", "127.0.0.1".to_owned()),
        ("MASTER_PORT", port.to_string()),
        ("TORCHELASTIC_USE_AGENT_STORE", agent.to_owned()),
        ("NCCL_RS_STORE_TIMEOUT_SECS", PATIENCE.as_secs().to_string()),
    ]
    .into_iter()
    .collect()
}

fn config(vars: &HashMap<&'static str, String>) -> Result<RendezvousConfig, StoreError> {
    RendezvousConfig::from_vars(|name| vars.get(name).cloned())
}

#[test]
fn under_torchrun_every_rank_joins_the_agent_store() {
    // The agent's store is already on MASTER_PORT: rank 0 must join it, not
    // try to host one there.
    let agent = FakeServer::start(Backend::Libuv);
    let port = agent.port();
    let namespace = config(&agent_vars(port, "0", "True")).unwrap().namespace;
    let ranks: Vec<Box<dyn Store>> = ["0", "1"]
        .iter()
        .map(|rank| {
            let config = config(&agent_vars(port, rank, "True")).unwrap();
            assert_eq!(config.namespace, namespace, "one namespace for the attempt");
            assert_eq!(
                config.store,
                StoreSpec::TorchAgent {
                    addr: "127.0.0.1".into(),
                    port
                }
            );
            assert_eq!(config.store.to_string(), format!("c10d://127.0.0.1:{port}"));
            config.connect().expect("joining the agent's store")
        })
        .collect();
    ranks[0].set("uid", b"0xfeed").unwrap();
    assert_eq!(
        ranks[1].get("uid", Duration::from_secs(2)).unwrap(),
        b"0xfeed"
    );
    assert_eq!(ranks[1].add("arrived", 1).unwrap(), 1);
    assert_eq!(ranks[0].add("arrived", 1).unwrap(), 2);
    assert_eq!(ranks[0].default_timeout(), PATIENCE);
    // On the agent's store, the keys live under this attempt's namespace.
    let scoped = format!("{namespace}/arrived");
    assert_eq!(agent.value(&scoped).as_deref(), Some(&b"2"[..]));
}

#[test]
fn the_agent_store_variable_is_read_as_torch_and_people_write_it() {
    let port = 29_500;
    let agent = StoreSpec::TorchAgent {
        addr: "127.0.0.1".into(),
        port,
    };
    let tcp = StoreSpec::Tcp {
        addr: "127.0.0.1".into(),
        port,
    };
    for (value, expected) in [
        ("True", &agent),
        ("true", &agent),
        (" TRUE ", &agent),
        ("1", &agent),
        ("False", &tcp),
        ("0", &tcp),
        ("", &tcp),
    ] {
        let config = config(&agent_vars(port, "0", value)).unwrap();
        assert_eq!(
            &config.store, expected,
            "TORCHELASTIC_USE_AGENT_STORE={value:?}"
        );
    }
    let mut vars = agent_vars(port, "0", "yes");
    match config(&vars).unwrap_err() {
        StoreError::Config { var, message } => {
            assert_eq!(var, "TORCHELASTIC_USE_AGENT_STORE");
            assert!(message.starts_with("TORCHELASTIC_USE_AGENT_STORE=\"yes\" is not a boolean"));
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    // A file store is kept: the agent's address is not needed.
    vars.insert("TORCHELASTIC_USE_AGENT_STORE", "True".into());
    vars.insert("NCCL_RS_STORE", "file:/shared/rdzv".into());
    vars.insert("NCCL_RS_NAMESPACE", "agent-test".into());
    assert!(matches!(
        config(&vars).unwrap().store,
        StoreSpec::File { .. }
    ));
    // The agent's store has no authentication: a secret is refused.
    vars.remove("NCCL_RS_STORE");
    vars.insert("NCCL_RS_STORE_SECRET", "s3cret".into());
    match config(&vars).unwrap().connect() {
        Err(StoreError::Config { var, message }) => {
            assert_eq!(var, "NCCL_RS_STORE_SECRET");
            assert!(message.contains("no authentication"), "{message}");
        }
        Err(other) => panic!("expected a config error, got {other:?}"),
        Ok(_) => panic!("a secret with the agent store was accepted"),
    }
}
