//! The server's own memory and CPU time under attack, read from a child
//! process that runs nothing but the server: unauthenticated floods, a
//! 12 M-key `wait`, frames whose fields do not add up to their length, a
//! parked `wait` for 131072 keys while others write or delete its keys,
//! waits filling their share, and 600 clients that never read the value
//! they wait for.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use nccl_rendezvous::{Store, StoreError, TcpStore, TcpStoreOptions};

use crate::child::{ChildServer, Settings};
use crate::wire::{
    PATIENCE, SET, answers_until_closed, client_options, get_frame, session_connect, wait_frame,
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
        ..Settings::default()
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

/// The most resident memory the child reaches over `samples` samples 20 ms
/// apart, beyond `before`.
fn growth_over(server: &ChildServer, before: usize, samples: usize) -> usize {
    (0..samples)
        .map(|_| {
            thread::sleep(Duration::from_millis(20));
            server.sample().rss_bytes.saturating_sub(before)
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn six_hundred_unread_gets_of_a_2_mib_value_stay_within_the_in_flight_bound() {
    const WAITERS: usize = 600;
    const VALUE: usize = 2 << 20;
    // Frames of about 4 MiB (a compare_set of two values): 32 MiB is the
    // least the server takes, eight of them.
    const BOUND: usize = 32 << 20;
    let server = ChildServer::start(Settings {
        max_in_flight_bytes: Some(BOUND),
        max_value_len: Some(VALUE),
        ..Settings::default()
    });
    let store = TcpStore::connect_to(server.addr, client_options()).unwrap();
    store.set("warm", b"up").unwrap();
    let before = server.sample().rss_bytes;
    // Clients that wait for the value and never read their answers.
    let waiters: Vec<TcpStream> = (0..WAITERS)
        .map(|_| {
            let mut raw = session_connect(server.addr);
            raw.write_all(&get_frame("blob", Duration::from_secs(600)))
                .unwrap();
            raw
        })
        .collect();
    // Let the server take every request in before the value comes.
    thread::sleep(Duration::from_millis(500));
    let value = vec![0x5a_u8; VALUE];
    store.set("blob", &value).unwrap();
    // Honest ranks get the value beside them, as room frees.
    let honest: Vec<Vec<u8>> = thread::scope(|s| {
        let readers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let reader = TcpStore::connect_to(server.addr, client_options()).unwrap();
                    reader.get("blob", PATIENCE).unwrap()
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert!(honest.iter().all(|got| *got == value));
    let grown = growth_over(&server, before, 25);
    assert!(
        grown <= BOUND,
        "the server's resident memory grew by {} MiB with {WAITERS} unread answers of a 2 MiB \
         value, over its max_in_flight_bytes of {} MiB",
        grown >> 20,
        BOUND >> 20
    );
    drop(waiters);
}

#[test]
fn waits_filling_their_share_cost_no_more_than_they_are_charged() {
    // Half of 32 MiB for parked requests: waits of 16384 keys of 24 bytes
    // until the server refuses one.
    const BOUND: usize = 32 << 20;
    const KEYS: usize = 16_384;
    let server = ChildServer::start(Settings {
        max_in_flight_bytes: Some(BOUND),
        max_value_len: Some(1 << 20),
        ..Settings::default()
    });
    let store = TcpStore::connect_to(server.addr, client_options()).unwrap();
    store.set("warm", b"up").unwrap();
    let before = server.sample().rss_bytes;
    let mut parked = Vec::new();
    let refusal = loop {
        assert!(parked.len() < 64, "the server never refused a wait");
        let keys: Vec<String> = (0..KEYS)
            .map(|i| format!("never/{:03}/{i:014}", parked.len()))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut raw = session_connect(server.addr);
        raw.write_all(&wait_frame(&keys, Duration::from_secs(600)))
            .unwrap();
        raw.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut first = [0u8; 5];
        match std::io::Read::read_exact(&mut raw, &mut first) {
            // Refused: an error frame.
            Ok(()) => break first,
            // Parked: no answer.
            Err(_) => parked.push(raw),
        }
    };
    assert_eq!(refusal[4], 0x9f, "an error frame: {refusal:02x?}");
    let grown = growth_over(&server, before, 10);
    assert!(
        grown <= BOUND / 2 + (4 << 20),
        "{} parked waits of {KEYS} keys took {} MiB of the server's memory, charged at most {} \
         MiB",
        parked.len(),
        grown >> 20,
        BOUND >> 21
    );
}

#[test]
fn deleting_and_setting_the_keys_of_a_parked_wait_never_rescans_it() {
    const KEYS: usize = 32_768;
    const ROUNDS: usize = 200;
    // 500 µs of the server's CPU a round of four requests: far above what
    // the requests cost, far below a scan of 32768 keys on each write.
    const CPU_BOUND: Duration = Duration::from_millis(ROUNDS as u64 / 2);
    let server = ChildServer::start(Settings::default());
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k/{i:06}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut waiter = session_connect(server.addr);
    waiter
        .write_all(&wait_frame(&key_refs, Duration::from_secs(600)))
        .unwrap();
    let store = TcpStore::connect_to(server.addr, client_options()).unwrap();
    thread::sleep(Duration::from_millis(300));
    // Every key but the first: the wait misses one.
    for key in &keys[1..] {
        store.set(key, b"").unwrap();
    }
    let before = server.sample();
    for _ in 0..ROUNDS {
        // Its last missing key arrives while another was deleted, both
        // ways round.
        store.delete(&keys[1]).unwrap();
        store.set(&keys[0], b"").unwrap();
        store.delete(&keys[0]).unwrap();
        store.set(&keys[1], b"").unwrap();
    }
    let spent = server.sample().cpu.saturating_sub(before.cpu);
    assert!(
        spent < CPU_BOUND,
        "{ROUNDS} rounds of deletes and sets of a {KEYS}-key wait's keys cost the server \
         {spent:?} of CPU"
    );
    // Still parked: its first key is missing.
    waiter
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(std::io::Read::read(&mut waiter, &mut [0u8; 1]).is_err());
}
