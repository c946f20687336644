//! The attacks a review found against the thread-per-connection server:
//! an abandoned `wait` that lived on while others wrote, a `wait` naming
//! tens of MiB of keys, unauthenticated peers that reconnect as soon as
//! they are dropped to keep every slot, and frames in progress holding
//! memory without a server-wide bound.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nccl_rendezvous::{Store, TcpStore, TcpStoreServerOptions};
use rustix::net::{AddressFamily, SocketType, bind, connect, socket};

use crate::bounds::park_a_131072_key_wait;
use crate::wire::{
    CODE_LIMIT, PATIENCE, answers_until_closed, assert_connections_return_to, assert_serves,
    bind as bind_server, client_options, connect as connect_client, eventually, expect_refusal,
    get_frame, session_connect, set_frame,
};

#[test]
fn an_abandoned_wait_is_reaped_while_others_write() {
    let server = bind_server(TcpStoreServerOptions::default());
    // Releasing 131072 parked keys is the heaviest thing a server does: on
    // a machine loaded many times over (CPU tests beside busy loops) the
    // writer's first answers can take longer than the other tests' bound,
    // so this one waits longer; it checks that the wait is reaped at all.
    let patience = PATIENCE * 3;
    let writer = TcpStore::connect_to(
        server.local_addr(),
        client_options().with_io_margin(patience),
    )
    .expect("a good client connects");
    let waiter = park_a_131072_key_wait(server.local_addr());
    assert_connections_return_to(&server, 2);
    drop(waiter);
    // Writes without a pause: the waiter's connection is noticed gone all
    // the same.
    let start = Instant::now();
    let mut writes = 0u64;
    while server.num_connections() > 1 {
        assert!(
            start.elapsed() < patience,
            "the abandoned wait still holds its connection after {writes} writes"
        );
        writer.set(&format!("busy/{}", writes % 64), b"x").unwrap();
        writes += 1;
    }
}

#[test]
fn a_wait_naming_more_key_bytes_than_allowed_is_refused_from_its_first_bytes() {
    let server = bind_server(TcpStoreServerOptions::default());
    // 131072 keys of 40 bytes: 5 MiB of keys, over the 4 MiB a request
    // may name. Only the first 4.5 MiB of the frame are sent.
    let mut payload = vec![0x07];
    payload.extend(600_000u64.to_be_bytes());
    payload.extend(131_072u32.to_be_bytes());
    for i in 0..131_072u32 {
        payload.extend(40u32.to_be_bytes());
        payload.extend(format!("{i:040}").as_bytes());
    }
    let mut raw = session_connect(server.local_addr());
    raw.set_write_timeout(Some(PATIENCE)).unwrap();
    let sent = 4 + (9 << 19);
    let mut frame = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    frame.extend(&payload[..sent - 4]);
    let _ = raw.write_all(&frame);
    let message = expect_refusal(&mut raw, CODE_LIMIT);
    assert!(
        message.contains("max_key_bytes_per_request"),
        "the refusal names the setting: {message}"
    );
    assert_serves(&server);
}

/// A connection to `server` from the local address `from`.
fn connect_from(from: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    bind(&fd, &SocketAddr::new(from, 0))?;
    connect(&fd, &server)?;
    Ok(TcpStream::from(fd))
}

/// Silent peers, `per_address` from each of `addresses`, that reconnect
/// the moment the server drops them, for as long as `attacking`.
fn reconnecting_peers<'scope>(
    s: &'scope thread::Scope<'scope, '_>,
    server: SocketAddr,
    addresses: &[IpAddr],
    per_address: usize,
    attacking: &'scope AtomicBool,
) {
    for &from in addresses {
        for _ in 0..per_address {
            s.spawn(move || {
                while attacking.load(Ordering::Relaxed) {
                    let Ok(mut stream) = connect_from(from, server) else {
                        thread::sleep(Duration::from_millis(1));
                        continue;
                    };
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                    let mut buf = [0u8; 512];
                    while attacking.load(Ordering::Relaxed) {
                        match stream.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                }
            });
        }
    }
}

/// The secret the ranks of [`ranks_joining`] hold and the peers do not.
const RANKS_SECRET: &[u8] = b"ranks-only";

/// How many of `ranks` ranks, one after another from 127.0.0.1 with
/// [`RANKS_SECRET`], get into a server of `options` and that secret, and
/// write, while silent peers, `per_address` from each of `addresses`,
/// reconnect to it as soon as they are dropped; and the most connections
/// it had open meanwhile.
fn ranks_joining(
    options: TcpStoreServerOptions,
    ranks: usize,
    (addresses, per_address): (&[IpAddr], usize),
) -> (usize, usize) {
    let server = bind_server(options.with_secret(RANKS_SECRET.to_vec()));
    let attacking = AtomicBool::new(true);
    thread::scope(|s| {
        let addr = server.local_addr();
        reconnecting_peers(s, addr, addresses, per_address, &attacking);
        // The peers hold every slot they can before the ranks come.
        thread::sleep(Duration::from_millis(500));
        let client = client_options().with_secret(RANKS_SECRET.to_vec());
        let mut joined = 0;
        let mut most_open = 0;
        for rank in 0..ranks {
            let store = TcpStore::connect_to(server.local_addr(), client.clone());
            if store
                .and_then(|s| s.set(&format!("rank/{rank}"), b"in"))
                .is_ok()
            {
                joined += 1;
            }
            most_open = most_open.max(server.num_connections());
        }
        attacking.store(false, Ordering::Relaxed);
        (joined, most_open)
    })
}

fn loopback(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, host))
}

#[test]
fn unauthenticated_peers_that_reconnect_at_once_leave_room_for_ranks() {
    const MAX: usize = 64;
    const RANKS: usize = 10;
    // Silent peers from two addresses of their own.
    let peers = [loopback(2), loopback(3)];
    let options = TcpStoreServerOptions::default().with_max_connections(MAX);
    let (joined, most_open) = ranks_joining(options, RANKS, (&peers, 40));
    assert_eq!(
        joined, RANKS,
        "ranks that got in past the reconnecting peers"
    );
    assert!(most_open <= MAX, "{most_open} connections open");
}

#[test]
fn silent_peers_on_the_ranks_own_address_keep_no_rank_out() {
    const RANKS: usize = 5;
    // The address's 8 handshake slots and 4 more peers waiting for them,
    // all from the address the ranks connect from; default options.
    let (joined, _) = ranks_joining(
        TcpStoreServerOptions::default(),
        RANKS,
        (&[loopback(1)], 12),
    );
    assert_eq!(
        joined, RANKS,
        "ranks that got in past peers of their address"
    );
}

#[test]
fn silent_peers_from_more_addresses_than_the_slots_hold_keep_no_rank_out() {
    const SLOTS: usize = 32;
    const RANKS: usize = 5;
    // 8 peers from each of 8 addresses: twice the handshake slots, from
    // more than slots / 8 addresses, so the per-address cap alone leaves
    // no slot free.
    let addresses: Vec<IpAddr> = (2..10).map(loopback).collect();
    let options = TcpStoreServerOptions::default().with_max_unauthenticated(SLOTS);
    let (joined, _) = ranks_joining(options, RANKS, (&addresses, 8));
    assert_eq!(joined, RANKS, "ranks that got in past peers of 8 addresses");
}

#[test]
fn frames_in_progress_hold_at_most_the_in_flight_bytes() {
    const HOLDERS: usize = 5;
    const VALUE: usize = 256 << 10;
    const SENT: usize = 200 << 10;
    const HEAD: usize = 4 + 10;
    // Frames of at most about 512 KiB (a compare_set of two values); the
    // bytes in flight are raised to eight of them, a quarter for frames
    // being read, half of that a pool for frames past each connection's
    // small floor.
    let server = bind_server(
        TcpStoreServerOptions::default()
            .with_max_value_len(VALUE)
            .with_max_keys_per_request(16)
            .with_max_key_bytes_per_request(1024)
            .with_max_in_flight_bytes(1 << 20)
            .with_io_timeout(Duration::from_secs(2)),
    );
    let limit = (1usize << 20).max(8 * server.max_frame_size());
    let (frames, pool) = (limit / 4, limit / 8);
    let addr = server.local_addr();
    // The head of a SET of a 256 KiB value, within every limit, then 200
    // KiB of the value.
    let mut frame = (10 + VALUE as u32).to_be_bytes().to_vec();
    frame.extend([crate::wire::SET, 0, 0, 0, 1, b'k']);
    frame.extend((VALUE as u32).to_be_bytes());
    frame.resize(HEAD + SENT, 0x5a);
    let in_flight_reaches = |bytes: usize| {
        eventually(&format!("{bytes} bytes in flight"), || {
            server.stats().in_flight_bytes >= bytes
        });
    };
    // The victim's frame begins first: its head is taken in, its
    // io_timeout runs. Then holders fill the bytes in flight with frames
    // that never end, and the victim's value finds no room.
    let mut victim = session_connect(addr);
    victim.write_all(&frame[..HEAD]).unwrap();
    in_flight_reaches(HEAD - 4);
    let mut holders: Vec<TcpStream> = (0..HOLDERS)
        .map(|_| {
            let mut raw = session_connect(addr);
            raw.write_all(&frame).unwrap();
            raw
        })
        .collect();
    // The pool is full once no holder can grow its buffer (by doubling)
    // within what is left.
    in_flight_reaches(pool - VALUE / 2);
    victim.write_all(&frame[HEAD..]).unwrap();
    // However long they stay, the server holds no more than its budget
    // for frames being read.
    let mut most = 0;
    for _ in 0..50 {
        most = most.max(server.stats().in_flight_bytes);
        thread::sleep(Duration::from_millis(5));
    }
    assert!(
        most <= frames,
        "{most} bytes in flight, {frames} for frames"
    );
    // The victim's io_timeout ends first, its frame still short of room:
    // it is refused, naming the limit. The holders' frames are closed at
    // theirs.
    let refusal = answers_until_closed(&mut victim);
    let refusal = String::from_utf8_lossy(refusal.first().expect("a refusal")).into_owned();
    assert!(refusal.contains("max_in_flight_bytes"), "{refusal}");
    for holder in &mut holders {
        answers_until_closed(holder);
    }
    assert_connections_return_to(&server, 0);
    eventually("no byte in flight", || server.stats().in_flight_bytes == 0);
    assert_serves(&server);
}

#[test]
fn clients_holding_all_the_bytes_in_flight_they_can_hold_up_no_small_request() {
    const UNREAD: usize = 40;
    const SHORT: usize = 40;
    const VALUE: usize = 8 << 20;
    // A SET frame of 1 MiB: its opcode, key ("held") and value.
    const SHORT_VALUE: usize = (1 << 20) - 13;
    // Nothing is cut short by a deadline here: io_timeout is far away.
    let server = bind_server(
        TcpStoreServerOptions::default()
            .with_io_timeout(Duration::from_secs(600))
            .with_serving_threads(2),
    );
    let addr = server.local_addr();
    let honest = connect_client(&server);
    honest.set("big", &vec![0x42; VALUE]).unwrap();
    // Answers of 8 MiB never read, and 1 MiB frames sent but their last
    // byte.
    let unread: Vec<TcpStream> = (0..UNREAD)
        .map(|_| {
            let mut raw = session_connect(addr);
            raw.write_all(&get_frame("big", PATIENCE)).unwrap();
            raw
        })
        .collect();
    let short: Vec<TcpStream> = thread::scope(|s| {
        let senders: Vec<_> = (0..SHORT)
            .map(|_| {
                s.spawn(move || {
                    let frame = set_frame("held", &vec![0x17; SHORT_VALUE]);
                    let mut raw = session_connect(addr);
                    raw.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
                    let _ = raw.write_all(&frame[..frame.len() - 1]);
                    raw
                })
            })
            .collect();
        senders.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eventually("the attackers hold 48 MiB", || {
        server.stats().in_flight_bytes >= 48 << 20
    });
    // Small requests of clients old and new are served all the same.
    for round in 0..20u32 {
        honest.set("small", &round.to_be_bytes()).unwrap();
        assert_eq!(honest.get("small", PATIENCE).unwrap(), round.to_be_bytes());
    }
    assert_serves(&server);
    // Gone, the attackers' bytes are freed at once, not at their deadline.
    drop(unread);
    drop(short);
    eventually("no byte in flight", || server.stats().in_flight_bytes == 0);
    assert_connections_return_to(&server, 1);
}
