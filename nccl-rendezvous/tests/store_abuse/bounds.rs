//! The server's own memory and CPU time under attack, read from a child
//! process that runs nothing but the server: unauthenticated floods, a
//! 12 M-key `wait`, frames whose fields do not add up to their length, and
//! a parked `wait` for 131072 keys while others write.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use nccl_rendezvous::{Store, StoreError, TcpStore, TcpStoreOptions};

use crate::child::{ChildServer, Settings};
use crate::wire::{
    PATIENCE, SET, answers_until_closed, client_options, session_connect, wait_frame,
};

const SECRET: &str = "memory-bounds";

fn secret_options() -> TcpStoreOptions {
    client_options().with_secret(SECRET.as_bytes().to_vec())
}

/// Connects to `addr`, announces a `frame`-byte frame and sends `body`, as
/// far as the server takes it; returns the connection, kept open.
fn announce_frame(mut stream: TcpStream, frame: u32, body: &[u8]) -> TcpStream {
    stream.set_write_timeout(Some(PATIENCE)).unwrap();
    let _ = stream
        .write_all(&frame.to_be_bytes())
        .and_then(|()| stream.write_all(body));
    stream
}

#[test]
fn unauthenticated_floods_and_a_12m_key_wait_cost_the_server_little_memory() {
    const ATTACKERS: usize = 24;
    const FRAME: u32 = 64 << 20;
    const RSS_GROWTH_BOUND: usize = 16 << 20;
    let server = ChildServer::start(Settings {
        secret: Some(SECRET),
    });
    let addr = server.addr;
    let probe = TcpStore::connect_to(addr, secret_options()).unwrap();
    let attacker = TcpStore::connect_to(addr, secret_options()).unwrap();
    probe.set("warm", b"up").unwrap();
    let before = server.sample();
    // Each announces 64 MiB and sends its first MiB: what the server does
    // with a frame is decided by then.
    let body = vec![0x5a_u8; 1 << 20];
    let attacking = AtomicBool::new(true);
    let (probes, grown, waited) = thread::scope(|s| {
        let prober = s.spawn(|| {
            let mut probes = 0u32;
            while attacking.load(Ordering::Relaxed) || probes < 5 {
                probe.set("probe", &probes.to_be_bytes()).unwrap();
                let got = probe.get("probe", PATIENCE).unwrap();
                assert_eq!(got, probes.to_be_bytes());
                probes += 1;
            }
            probes
        });
        let floods: Vec<_> = (0..ATTACKERS)
            .map(|_| s.spawn(|| announce_frame(TcpStream::connect(addr).unwrap(), FRAME, &body)))
            .collect();
        let floods: Vec<TcpStream> = floods.into_iter().map(|f| f.join().unwrap()).collect();
        let grown = server.sample().rss_bytes.saturating_sub(before.rss_bytes);
        drop(floods);
        // 12 M one-byte keys: what the 57 MiB `wait` named.
        let keys = vec!["k"; 12_000_000];
        let waited = attacker.wait(&keys, Duration::from_secs(60));
        attacking.store(false, Ordering::Relaxed);
        (prober.join().unwrap(), grown, waited)
    });
    let err = waited.unwrap_err();
    assert!(matches!(err, StoreError::OverLimit { .. }), "{err:?}");
    assert!(err.to_string().contains("max_keys_per_request"), "{err}");
    assert!(
        grown < RSS_GROWTH_BOUND,
        "the server's resident memory grew by {} KiB under {ATTACKERS} unauthenticated 64 MiB \
         frames",
        grown >> 10
    );
    assert!(probes >= 5, "another client was served throughout");
    assert_eq!(attacker.try_get("warm").unwrap().unwrap(), b"up");
}

#[test]
fn frames_whose_fields_do_not_add_up_to_their_length_cost_the_server_no_memory() {
    const ATTACKERS: usize = 24;
    const FRAME: usize = 12 << 20;
    const RSS_GROWTH_BOUND: usize = 24 << 20;
    let server = ChildServer::start(Settings::default());
    let before = server.sample();
    // A SET whose key and value pass every limit (1 byte, 1 KiB), in a
    // frame that declares 12 MiB: the rest is junk, all of it sent but its
    // last byte.
    let mut body = vec![SET, 0, 0, 0, 1, b'k'];
    body.extend(1024u32.to_be_bytes());
    body.resize(FRAME - 1, 0x5a);
    let attackers: Vec<TcpStream> = thread::scope(|s| {
        let handles: Vec<_> = (0..ATTACKERS)
            .map(|_| {
                let body = &body;
                s.spawn(move || announce_frame(session_connect(server.addr), FRAME as u32, body))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let grown = server.sample().rss_bytes.saturating_sub(before.rss_bytes);
    assert!(
        grown < RSS_GROWTH_BOUND,
        "the server's resident memory grew by {} MiB under {ATTACKERS} frames of 12 MiB whose \
         fields take 1 KiB",
        grown >> 20
    );
    for mut attacker in attackers {
        let answers = answers_until_closed(&mut attacker);
        assert!(answers.len() <= 1, "at most a refusal: {answers:02x?}");
    }
    let store = TcpStore::connect_to(server.addr, client_options()).unwrap();
    store.set("after", b"served").unwrap();
}

/// Waits for 131072 keys of 24 bytes each (3.5 MiB of keys) on a raw
/// connection to `addr`; returns the connection, its request parked.
pub fn park_a_131072_key_wait(addr: SocketAddr) -> TcpStream {
    let keys: Vec<String> = (0..131_072).map(|i| format!("never/set/{i:014}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut raw = session_connect(addr);
    raw.write_all(&wait_frame(&keys, Duration::from_secs(600)))
        .unwrap();
    raw
}

#[test]
fn a_parked_131072_key_wait_costs_the_server_no_cpu_when_others_write() {
    const SETS: usize = 500;
    // 1 ms of the server's CPU a set: far above what a set costs (tens of
    // µs), far below what scanning 131072 keys on every write costs.
    const CPU_BOUND: Duration = Duration::from_millis(SETS as u64);
    let server = ChildServer::start(Settings::default());
    let waiter = park_a_131072_key_wait(server.addr);
    let store = TcpStore::connect_to(server.addr, client_options()).unwrap();
    // Let the server take the whole request in before counting.
    thread::sleep(Duration::from_millis(500));
    store.set("settled", b"").unwrap();
    let before = server.sample();
    for i in 0..SETS {
        store.set(&format!("other/{i}"), b"value").unwrap();
    }
    let spent = server.sample().cpu.saturating_sub(before.cpu);
    assert!(
        spent < CPU_BOUND,
        "{SETS} sets of other keys cost the server {spent:?} of CPU with a 131072-key wait parked"
    );
    drop(waiter);
}

#[test]
fn idle_connections_hold_no_thread_of_their_own() {
    const CLIENTS: usize = 256;
    let server = ChildServer::start(Settings::default());
    let first = TcpStore::connect_to(server.addr, client_options()).unwrap();
    first.set("first", b"in").unwrap();
    let before = server.sample().threads;
    let stores: Vec<TcpStore> = (0..CLIENTS)
        .map(|_| TcpStore::connect_to(server.addr, client_options()).unwrap())
        .collect();
    for store in &stores {
        store.add("joined", 1).unwrap();
    }
    let after = server.sample().threads;
    assert_eq!(
        after,
        before,
        "the server's threads with 1 and with {} connections",
        CLIENTS + 1
    );
}
