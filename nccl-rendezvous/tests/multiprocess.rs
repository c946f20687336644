//! Multi-process store tests.
//!
//! Each scenario's parent test spawns copies of this test binary, each
//! running one `child_*` test (`--exact NAME --nocapture`) with
//! `NCCL_GROUP_TEST_ROLE` set to select it; run normally (without the
//! variable), a `child_*` test returns at once. Sockets are on 127.0.0.1 only;
//! files are in temporary directories; every wait is bounded.

use std::collections::BTreeSet;
use std::time::Duration;

use nccl_rendezvous::{
    FileStore, RendezvousConfig, Store, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};
use nccl_test_support::processes::{free_port, spawn_child_test, wait_children};

const ROLE_VAR: &str = "NCCL_GROUP_TEST_ROLE";
const WORLD: usize = 4;
const ADDS_PER_RANK: usize = 25;
/// Hang guards, not performance claims: a store operation that must
/// succeed waits up to `OP_TIMEOUT` (another process may still be starting
/// on a loaded machine), and a child still running after `CHILD_DEADLINE`
/// is killed and fails the test.
const OP_TIMEOUT: Duration = Duration::from_secs(60);
const CHILD_DEADLINE: Duration = Duration::from_secs(180);
const SECRET: &str = "multi-process-secret";

/// Returns the child's environment accessor when this process runs `role`.
fn child_role(role: &str) -> Option<impl Fn(&str) -> String> {
    (std::env::var(ROLE_VAR).ok()? == role).then_some(|name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("child needs {name} in its environment"))
    })
}

/// Runs `WORLD` copies of this binary as `test`, rank `i` getting `RANK=i`
/// plus `env`, and asserts that all of them pass within the deadline.
fn run_children(test: &str, env: &[(&str, String)]) {
    let children = (0..WORLD)
        .map(|rank| {
            spawn_child_test(test, |command| {
                command
                    .env(ROLE_VAR, test)
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", WORLD.to_string())
                    .env("LOCAL_RANK", rank.to_string())
                    .env_remove("NCCL_RS_STORE_SECRET")
                    .env_remove("NCCL_RS_STORE")
                    .envs(env.iter().map(|(k, v)| (k, v)));
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (rank, ended) in wait_children(children, CHILD_DEADLINE, CHILD_DEADLINE)
        .into_iter()
        .enumerate()
    {
        let status = match ended.status {
            Some(status) => status.to_string(),
            None => format!("still running after {CHILD_DEADLINE:?}, killed"),
        };
        // Guard against a child that ran no test (a wrong name filters
        // everything out and still exits 0).
        let ran_one = ended.stdout.contains("test result: ok. 1 passed");
        if !ran_one || !ended.succeeded() {
            failures.push(format!(
                "rank {rank}: {status}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                ended.stdout, ended.stderr
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "child failures:\n{}",
        failures.join("\n")
    );
}

/// Each rank adds 1 to `counter` ADDS_PER_RANK times and records the values
/// the adds returned.
fn do_adds(store: &dyn Store, rank: usize) {
    let mut returned = Vec::new();
    for _ in 0..ADDS_PER_RANK {
        returned.push(store.add("counter", 1).unwrap().to_string());
    }
    store
        .set(&format!("returned/{rank}"), returned.join(",").as_bytes())
        .unwrap();
}

/// The final count is WORLD * ADDS_PER_RANK and every add returned a
/// distinct value: no update was lost or duplicated.
fn check_adds(store: &dyn Store) {
    let total = WORLD * ADDS_PER_RANK;
    assert_eq!(
        store.get("counter", OP_TIMEOUT).unwrap(),
        total.to_string().as_bytes()
    );
    let mut seen = BTreeSet::new();
    for rank in 0..WORLD {
        let list = store.get(&format!("returned/{rank}"), OP_TIMEOUT).unwrap();
        for v in String::from_utf8(list).unwrap().split(',') {
            assert!(seen.insert(v.parse::<usize>().unwrap()), "duplicate {v}");
        }
    }
    assert_eq!(seen, (1..=total).collect());
}

/// Each rank publishes a value, reads every other rank's with a timeout,
/// and checks it; then all meet so that rank 0 (which may host the store)
/// leaves last.
fn do_exchange(store: &dyn Store, rank: usize) {
    store
        .set(
            &format!("val/{rank}"),
            format!("hello from rank {rank}").as_bytes(),
        )
        .unwrap();
    for peer in 0..WORLD {
        let v = store.get(&format!("val/{peer}"), OP_TIMEOUT).unwrap();
        assert_eq!(v, format!("hello from rank {peer}").as_bytes());
    }
    // A key nobody sets times out, naming the key.
    let err = store
        .get(&format!("nobody/{rank}"), Duration::from_millis(100))
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(err.to_string().contains(&format!("nobody/{rank}")), "{err}");

    store.set(&format!("exit/{rank}"), b"").unwrap();
    if rank == 0 {
        let keys: Vec<String> = (1..WORLD).map(|r| format!("exit/{r}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        store.wait(&refs, OP_TIMEOUT).unwrap();
    }
    println!("rank {rank}: exchange ok");
}

/// When this process runs `role`: joins the store its environment names
/// and runs [`do_exchange`] on it.
fn exchange_as_child(role: &str) {
    if child_role(role).is_none() {
        return;
    }
    let config = RendezvousConfig::from_env().unwrap();
    let store = config.connect().unwrap();
    do_exchange(store.as_ref(), config.rank);
}

// --- TCP store --------------------------------------------------------------

#[test]
fn child_tcp_add() {
    let Some(env) = child_role("child_tcp_add") else {
        return;
    };
    let rank: usize = env("RANK").parse().unwrap();
    let opts = TcpStoreOptions::default()
        .with_timeout(OP_TIMEOUT)
        .with_connect_timeout(OP_TIMEOUT)
        .with_secret(SECRET);
    let store = TcpStore::connect("127.0.0.1", env("STORE_PORT").parse().unwrap(), opts).unwrap();
    do_adds(&store, rank);
}

#[test]
fn tcp_four_processes_add_to_one_counter() {
    let server = TcpStoreServer::bind(
        "127.0.0.1:0",
        TcpStoreServerOptions::default().with_secret(SECRET),
    )
    .unwrap();
    let port = server.local_addr().port();
    run_children("child_tcp_add", &[("STORE_PORT", port.to_string())]);
    let opts = TcpStoreOptions::default()
        .with_connect_timeout(OP_TIMEOUT)
        .with_secret(SECRET);
    let store = TcpStore::connect_to(server.local_addr(), opts).unwrap();
    check_adds(&store);
}

#[test]
fn child_tcp_exchange() {
    // Rank 0 hosts the server on MASTER_PORT; the others connect.
    exchange_as_child("child_tcp_exchange");
}

#[test]
fn tcp_ranks_exchange_values_with_rank0_hosting() {
    run_children(
        "child_tcp_exchange",
        &[
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", free_port().to_string()),
            ("NCCL_RS_STORE", "tcp".into()),
            (
                "NCCL_RS_STORE_TIMEOUT_SECS",
                OP_TIMEOUT.as_secs().to_string(),
            ),
            ("NCCL_RS_STORE_SECRET", SECRET.into()),
        ],
    );
}

// --- file store -------------------------------------------------------------

#[test]
fn child_file_add() {
    let Some(env) = child_role("child_file_add") else {
        return;
    };
    let rank: usize = env("RANK").parse().unwrap();
    let store = FileStore::open(env("STORE_DIR"), OP_TIMEOUT).unwrap();
    do_adds(&store, rank);
}

#[test]
fn file_four_processes_add_to_one_counter() {
    let dir = tempfile::tempdir().unwrap();
    // Opened first, so the children join its generation, and it reads
    // their counter after they have left (a store opened once every other
    // has closed starts a new generation, with none of the old keys).
    let store = FileStore::open(dir.path(), OP_TIMEOUT).unwrap();
    run_children(
        "child_file_add",
        &[("STORE_DIR", dir.path().display().to_string())],
    );
    check_adds(&store);
}

#[test]
fn child_file_exchange() {
    exchange_as_child("child_file_exchange");
}

#[test]
fn file_ranks_exchange_values() {
    let dir = tempfile::tempdir().unwrap();
    run_children(
        "child_file_exchange",
        &[
            ("NCCL_RS_STORE", format!("file:{}", dir.path().display())),
            ("NCCL_RS_NAMESPACE", "file-exchange".into()),
            (
                "NCCL_RS_STORE_TIMEOUT_SECS",
                OP_TIMEOUT.as_secs().to_string(),
            ),
        ],
    );
}
