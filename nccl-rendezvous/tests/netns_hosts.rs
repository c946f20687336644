//! Several hosts on one machine: network namespaces joined by veth pairs,
//! each with addresses of its own, so the TCP store's server and its
//! clients really are on different hosts as the server sees them.
//!
//! Root only (`ip netns add` needs it): without root, or where `ip netns`
//! cannot make a namespace, each test prints one `SKIP:` line naming why
//! and passes. Each test makes three namespaces with names of its own
//! (the process id and a counter: parallel tests and runs never collide)
//! and deletes them on every exit path, a failed assertion included:
//!
//! ```text
//!   server 10.77.1.1 ──── 10.77.1.2 rank
//!          10.77.2.1        10.77.3.2
//!              │                │
//!          10.77.2.2 ─ relay ─ 10.77.3.1
//! ```
//!
//! The processes in them are copies of this test binary running one
//! `child` test (`ip netns exec <namespace> <this binary> --exact child`),
//! the role chosen by `NCCL_RS_NETNS_ROLE`; run normally, without it,
//! `child` returns at once. Every wait is bounded.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nccl_rendezvous::{
    RendezvousConfig, Store, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions,
};
use nccl_test_support::processes::{
    ChildTest, await_mark, publish, spawn_child_test_via, wait_children,
};

const ROLE_VAR: &str = "NCCL_RS_NETNS_ROLE";
/// The folder the processes leave marks in (the file system is shared).
const MARKS_VAR: &str = "NCCL_RS_NETNS_MARKS";
const SECRET: &str = "netns-secret";
/// Every namespace has its own ports: this one is free in each.
const PORT: u16 = 29500;
const PATIENCE: Duration = Duration::from_secs(30);
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

/// The addresses of the drawing in the module docs.
const SERVER_TO_RANK: &str = "10.77.1.1";
const RANK_TO_SERVER: &str = "10.77.1.2";
const SERVER_TO_RELAY: &str = "10.77.2.1";
const RELAY_TO_SERVER: &str = "10.77.2.2";
const RELAY_TO_RANK: &str = "10.77.3.1";
const RANK_TO_RELAY: &str = "10.77.3.2";

/// Namespaces made by one test, deleted when it drops.
struct Hosts {
    /// `server`, `rank`, `relay`, with this test's prefix.
    names: Vec<String>,
    marks: tempfile::TempDir,
}

impl Hosts {
    /// The three hosts of the drawing, or `None` after printing why they
    /// cannot be made here.
    fn make(test: &str) -> Option<Hosts> {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        match std::fs::metadata("/proc/self").map(|m| m.uid()) {
            Ok(0) => {}
            Ok(uid) => {
                println!(
                    "SKIP: {test}: making network namespaces needs root, and this runs as uid {uid}"
                );
                return None;
            }
            Err(e) => {
                println!("SKIP: {test}: could not read this process's uid from /proc/self: {e}");
                return None;
            }
        }
        let prefix = format!(
            "nrs-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let mut hosts = Hosts {
            names: Vec::new(),
            marks: tempfile::tempdir().expect("a folder for the marks"),
        };
        for role in ["server", "rank", "relay"] {
            let name = format!("{prefix}-{role}");
            if let Err(why) = ip(&["netns", "add", &name]) {
                println!(
                    "SKIP: {test}: `ip netns add` cannot make a network namespace here: {why}"
                );
                return None;
            }
            hosts.names.push(name);
        }
        let [server, rank, relay] = [0, 1, 2].map(|i| hosts.names[i].clone());
        let links = [
            (&server, SERVER_TO_RANK, &rank, RANK_TO_SERVER),
            (&server, SERVER_TO_RELAY, &relay, RELAY_TO_SERVER),
            (&relay, RELAY_TO_RANK, &rank, RANK_TO_RELAY),
        ];
        for (index, (one, one_addr, other, other_addr)) in links.into_iter().enumerate() {
            // Both ends are `veth<index>`: unique within each namespace.
            let end = format!("veth{index}");
            let made = ip(&[
                "link", "add", &end, "netns", one, "type", "veth", "peer", "name", &end, "netns",
                other,
            ])
            .and_then(|()| {
                ip(&[
                    "-n",
                    one,
                    "addr",
                    "add",
                    &format!("{one_addr}/24"),
                    "dev",
                    &end,
                ])
            })
            .and_then(|()| {
                ip(&[
                    "-n",
                    other,
                    "addr",
                    "add",
                    &format!("{other_addr}/24"),
                    "dev",
                    &end,
                ])
            })
            .and_then(|()| ip(&["-n", one, "link", "set", &end, "up"]))
            .and_then(|()| ip(&["-n", other, "link", "set", &end, "up"]));
            if let Err(why) = made {
                println!("SKIP: {test}: could not join the namespaces with a veth pair: {why}");
                return None;
            }
        }
        for name in &hosts.names {
            if let Err(why) = ip(&["-n", name, "link", "set", "lo", "up"]) {
                println!("SKIP: {test}: could not bring up loopback in {name}: {why}");
                return None;
            }
        }
        Some(hosts)
    }

    fn server(&self) -> &str {
        &self.names[0]
    }

    fn rank(&self) -> &str {
        &self.names[1]
    }

    fn relay(&self) -> &str {
        &self.names[2]
    }

    fn marks(&self) -> &Path {
        self.marks.path()
    }

    /// Starts this binary's `child` test in namespace `host` as `role`,
    /// with `env`.
    fn spawn(&self, host: &str, role: &str, env: &[(&str, &str)]) -> ChildTest {
        spawn_child_test_via(&["ip", "netns", "exec", host], "child", |command| {
            command
                .env(ROLE_VAR, role)
                .env(MARKS_VAR, self.marks())
                .env_remove("NCCL_RS_STORE_SECRET")
                .env_remove("NCCL_RS_STORE_ALLOW_UNAUTHENTICATED")
                .envs(env.iter().copied());
        })
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// Runs `ip` with `args`; the error is its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("could not run ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Waits for `children`, asserting each passed its one test.
fn assert_all_pass(children: Vec<(&str, ChildTest)>) {
    let (labels, children): (Vec<&str>, Vec<ChildTest>) = children.into_iter().unzip();
    let mut failures = Vec::new();
    for (label, ended) in labels
        .iter()
        .zip(wait_children(children, CHILD_DEADLINE, PATIENCE))
    {
        print!("--- {label} ---\n{}{}", ended.stdout, ended.stderr);
        // A child that ran no test (a wrong name filters all out) exits 0.
        if !ended.succeeded() || !ended.stdout.contains("test result: ok. 1 passed") {
            failures.push(format!("{label}: {:?}", ended.status));
        }
    }
    assert!(failures.is_empty(), "children failed: {failures:?}");
}

/// The two ranks of a job, rank 0 on the server host and rank 1 on the
/// rank host, with `env` on both and `rank0_env` on rank 0.
fn two_ranks(hosts: &Hosts, expect: &str, env: &[(&str, &str)], rank0_env: &[(&str, &str)]) {
    let port = PORT.to_string();
    let common = [
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", SERVER_TO_RANK),
        ("MASTER_PORT", port.as_str()),
        ("NCCL_RS_STORE_TIMEOUT_SECS", "20"),
        ("NCCL_RS_NETNS_EXPECT", expect),
    ];
    let rank0: Vec<(&str, &str)> = [&common[..], &[("RANK", "0")], env, rank0_env].concat();
    let rank1: Vec<(&str, &str)> = [&common[..], &[("RANK", "1")], env].concat();
    let rank0 = hosts.spawn(hosts.server(), "rank", &rank0);
    let rank1 = hosts.spawn(hosts.rank(), "rank", &rank1);
    assert_all_pass(vec![
        ("rank 0 (server host)", rank0),
        ("rank 1 (rank host)", rank1),
    ]);
}

#[test]
fn without_a_secret_a_rank_of_another_host_is_refused_naming_both_fixes() {
    let Some(hosts) = Hosts::make("without_a_secret_a_rank_of_another_host_is_refused") else {
        return;
    };
    two_ranks(&hosts, "refused", &[], &[]);
}

#[test]
fn with_a_secret_ranks_of_two_hosts_set_get_and_wait() {
    let Some(hosts) = Hosts::make("with_a_secret_ranks_of_two_hosts_set_get_and_wait") else {
        return;
    };
    two_ranks(&hosts, "meets", &[("NCCL_RS_STORE_SECRET", SECRET)], &[]);
}

#[test]
fn with_unauthenticated_clients_allowed_on_the_server_ranks_of_two_hosts_meet() {
    let Some(hosts) = Hosts::make("with_unauthenticated_clients_allowed") else {
        return;
    };
    two_ranks(
        &hosts,
        "meets",
        &[],
        &[("NCCL_RS_STORE_ALLOW_UNAUTHENTICATED", "1")],
    );
}

#[test]
fn a_session_captured_between_hosts_and_replayed_reads_and_plants_nothing() {
    let Some(hosts) = Hosts::make("a_session_captured_between_hosts_and_replayed") else {
        return;
    };
    let marks = hosts.marks();
    let server = hosts.spawn(hosts.server(), "server", &[]);
    assert!(
        await_mark(marks, "server-up", PATIENCE).is_some(),
        "the server did not start"
    );
    let relay = hosts.spawn(hosts.relay(), "relay", &[]);
    assert!(
        await_mark(marks, "relay-up", PATIENCE).is_some(),
        "the relay did not start"
    );
    // The real session, through the relay: it plants the old id.
    let client = |action| hosts.spawn(hosts.rank(), "client", &[("NCCL_RS_NETNS_ACTION", action)]);
    assert_all_pass(vec![("client through the relay", client("stale"))]);
    // The job moves on to a new id, straight to the server.
    assert_all_pass(vec![("client setting the new id", client("fresh"))]);
    publish(marks, "fresh-set", "");
    assert_all_pass(vec![("relay replaying the session", relay)]);
    assert_all_pass(vec![("client checking the id", client("check"))]);
    publish(marks, "stop", "");
    assert_all_pass(vec![("server", server)]);
}

// --- the processes in the namespaces ---------------------------------------

/// What a replayed session must never show, and the value it must not
/// overwrite.
const STALE: &[u8] = b"stale-unique-id";
const FRESH: &[u8] = b"fresh-unique-id";

fn child_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("the child needs {name}"))
}

fn client_options() -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_secret(SECRET)
        .with_timeout(PATIENCE)
        .with_connect_timeout(PATIENCE)
}

#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        return;
    };
    let marks = PathBuf::from(child_env(MARKS_VAR));
    match role.as_str() {
        "rank" => rank(&marks),
        "server" => serve(&marks),
        "relay" => relay(&marks),
        "client" => client(&child_env("NCCL_RS_NETNS_ACTION")),
        other => panic!("{ROLE_VAR}={other:?} is no role"),
    }
}

/// A rank of `two_ranks`: rank 0 hosts the store through
/// `RendezvousConfig::connect`, rank 1 joins it from the other host.
fn rank(marks: &Path) {
    let config = RendezvousConfig::from_env().expect("the launch variables");
    let expect = child_env("NCCL_RS_NETNS_EXPECT");
    if expect == "refused" && config.rank == 1 {
        let error = config
            .connect()
            .map(|_| ())
            .expect_err("a client of another host without a secret must be refused");
        let message = error.to_string();
        println!("rank 1 refused: {message}");
        for part in [
            RANK_TO_SERVER,
            "NCCL_RS_STORE_SECRET",
            "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED",
        ] {
            assert!(
                message.contains(part),
                "the refusal does not name {part}: {message}"
            );
        }
        publish(marks, "rank1-done", "");
        return;
    }
    let store = config.connect().expect("rank 0 hosts, rank 1 joins");
    if expect == "refused" {
        // Rank 0 hosts the server until rank 1 has been refused.
        assert!(
            await_mark(marks, "rank1-done", PATIENCE).is_some(),
            "rank 1 never finished"
        );
        return;
    }
    let me = config.rank;
    store
        .set(
            &format!("hello/{me}"),
            format!("from host of rank {me}").as_bytes(),
        )
        .unwrap();
    store.wait(&["hello/0", "hello/1"], PATIENCE).unwrap();
    let other = 1 - me;
    assert_eq!(
        store.get(&format!("hello/{other}"), PATIENCE).unwrap(),
        format!("from host of rank {other}").as_bytes()
    );
    store.add("arrived", 1).unwrap();
    // Rank 0 hosts the store: it leaves last.
    if me == 1 {
        store.set("left/1", b"").unwrap();
    } else {
        store.wait(&["left/1"], PATIENCE).unwrap();
        assert_eq!(store.get("arrived", PATIENCE).unwrap(), b"2");
    }
    println!("rank {me}: met rank {other} across hosts");
}

/// The TCP store's server with the secret, on every address of the server
/// host, until the parent says stop.
fn serve(marks: &Path) {
    let options = TcpStoreServerOptions::default().with_secret(SECRET);
    let server = TcpStoreServer::bind(("0.0.0.0", PORT), options).expect("the server");
    publish(marks, "server-up", "");
    assert!(
        await_mark(marks, "stop", CHILD_DEADLINE).is_some(),
        "never told to stop"
    );
    server.shutdown();
}

/// Forwards one session from the rank host to the server, recording both
/// sides; then replays the client's side to the server from the relay
/// host, after the job has moved on to a new id.
fn relay(marks: &Path) {
    let listener = TcpListener::bind((RELAY_TO_RANK, PORT)).expect("the relay's port");
    publish(marks, "relay-up", "");
    let server: SocketAddr = format!("{SERVER_TO_RELAY}:{PORT}").parse().unwrap();
    let from_client = accept_within(&listener, PATIENCE);
    let to_server = TcpStream::connect(server).expect("the server from the relay host");
    let answers = {
        let (server, client) = (
            to_server.try_clone().unwrap(),
            from_client.try_clone().unwrap(),
        );
        thread::spawn(move || pump(server, client))
    };
    let client_bytes = pump(from_client, to_server);
    let server_bytes = answers.join().unwrap();
    assert!(
        !contains(&client_bytes, SECRET.as_bytes()) && !contains(&server_bytes, SECRET.as_bytes())
    );
    // Authenticated, not encrypted: the relay saw the value go by.
    assert!(contains(&client_bytes, STALE), "the relay saw no set");

    assert!(
        await_mark(marks, "fresh-set", PATIENCE).is_some(),
        "the new id never came"
    );
    for bytes in [&client_bytes[..], &client_bytes[..client_bytes.len() / 2]] {
        let answer = replay(server, bytes);
        assert!(!contains(&answer, FRESH), "the replay read the new id");
        assert!(
            contains(&answer, b"does not match"),
            "not refused: {answer:02x?}"
        );
    }
    println!(
        "relay: replayed {} captured bytes from {RELAY_TO_SERVER}: refused",
        client_bytes.len()
    );
}

/// The first client of `listener`, waited for at most `patience` (a
/// parent that failed sends none: the relay must end all the same).
fn accept_within(listener: &TcpListener, patience: Duration) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + patience;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                return stream;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("no client came to the relay: {e}"),
        }
    }
}

/// A client on the rank host: `stale` through the relay, `fresh` and
/// `check` straight to the server.
fn client(action: &str) {
    let direct = || TcpStore::connect(SERVER_TO_RANK, PORT, client_options()).unwrap();
    match action {
        "stale" => {
            let store = TcpStore::connect(RELAY_TO_RANK, PORT, client_options()).unwrap();
            store.set("uid", STALE).unwrap();
            assert_eq!(store.get("uid", PATIENCE).unwrap(), STALE);
        }
        "fresh" => direct().set("uid", FRESH).unwrap(),
        "check" => assert_eq!(
            direct().get("uid", PATIENCE).unwrap(),
            FRESH,
            "the replayed set planted the old id"
        ),
        other => panic!("NCCL_RS_NETNS_ACTION={other:?} is no action"),
    }
}

/// Copies `from` to `to` until `from` ends; returns what went through.
fn pump(mut from: TcpStream, mut to: TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 65536];
    from.set_read_timeout(Some(PATIENCE)).unwrap();
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    let _ = to.shutdown(Shutdown::Write);
    seen
}

/// Sends `bytes` to `server` as a client would; returns all it answers
/// until it closes.
fn replay(server: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(server).expect("the server, to replay to");
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
