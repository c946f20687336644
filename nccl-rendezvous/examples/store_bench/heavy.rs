//! Section 4: heavy clients of this crate's server, speaking its protocol
//! without a secret (so that raw connections can send requests and never
//! read the answers): many waiters on one key, and a client holding all
//! the bytes in flight it can beside honest ones.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use crate::load;
use crate::servers::{Kind, ServerProcess};

/// The value the waiters wait for.
const VALUE: usize = 2 << 20;
/// The server's `max_in_flight_bytes` (its default).
const IN_FLIGHT_BOUND: u64 = 256 << 20;
/// The holder's answers never read, and frames sent but their last byte.
const UNREAD_ANSWERS: usize = 40;
const UNREAD_VALUE: usize = 8 << 20;
const SHORT_FRAMES: usize = 40;
const SHORT_FRAME: usize = 1 << 20;
/// Idle and held phases, in turn.
const PHASE_PAIRS: usize = 3;

/// The protocol's version in `HELLO`, and the opcodes used here.
const VERSION: u16 = 6;
const HELLO: u8 = 0x01;
const SET: u8 = 0x02;
const GET: u8 = 0x03;
const RESP_HELLO: u8 = 0x80;
const RESP_ERROR: u8 = 0x9f;
const CODE_TOO_MANY_CONNECTIONS: u8 = 5;

pub fn run(phase: Duration) -> Result<(), String> {
    println!(
        "\n### Many waiters on one {} MiB value ({}, no secret, max_in_flight_bytes {} MiB)\n",
        VALUE >> 20,
        Kind::Ours.name(),
        IN_FLIGHT_BOUND >> 20
    );
    println!(
        "| waiters never reading | ranks reading | RSS before (MiB) | RSS max (MiB) | growth \
         (MiB) | growth / bound | ranks answered |"
    );
    println!("|---|---|---|---|---|---|---|");
    waiters_row(600, 8)?;
    waiters_row(0, 300)?;

    println!(
        "\n### A client holding all the bytes in flight it can, beside 4 probes ({} s a phase, \
         {}, no secret)\n",
        phase.as_secs(),
        Kind::Ours.name()
    );
    let server = ServerProcess::start_plain()?;
    let writer = server.client()?;
    writer
        .set("big", &vec![0x42; UNREAD_VALUE])
        .map_err(|e| e.to_string())?;
    println!(
        "| phase | flood connections/s | probe rounds (set + get) | p50 (µs) | p99 (µs) | p99 / \
         idle p99 | server CPU (s) | server RSS max (MiB) | server threads max |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let holding = format!(
        "{UNREAD_ANSWERS} unread answers of {} MiB + {SHORT_FRAMES} frames of {} MiB one byte \
         short",
        UNREAD_VALUE >> 20,
        SHORT_FRAME >> 20
    );
    // Idle and held phases in turn, so that what else runs on the machine
    // weighs on both alike; each held phase over the idle one before it,
    // and the medians of their p99s.
    let (mut idle_p99s, mut held_p99s) = (Vec::new(), Vec::new());
    for turn in 1..=PHASE_PAIRS {
        let mut idle = load::probe_phase(&server, 4, phase, None)?;
        let holder = hold_share(server.port)?;
        let mut held = load::probe_phase(&server, 4, phase, None)?;
        drop(holder);
        // The holder's bytes are freed before the next idle phase.
        std::thread::sleep(Duration::from_secs(1));
        let idle_p99 = idle.probes.quantile(0.99);
        held_p99s.push(held.probes.quantile(0.99));
        idle_p99s.push(idle_p99);
        let held_name = format!("{holding} ({turn})");
        let idle_name = format!("idle ({turn})");
        for (name, phase_seen) in [(idle_name, &mut idle), (held_name, &mut held)] {
            super::print_phase(&name, phase_seen, idle_p99, phase);
        }
    }
    let (idle, held) = (median(&mut idle_p99s), median(&mut held_p99s));
    println!(
        "\nMedian p99 of the {PHASE_PAIRS} idle phases {:.0} µs, of the {PHASE_PAIRS} held \
         phases {:.0} µs: {:.2} times.",
        super::micros(idle),
        super::micros(held),
        held.as_secs_f64() / idle.as_secs_f64().max(1e-9)
    );
    Ok(())
}

fn median(values: &mut [Duration]) -> Duration {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// One row: `unread` raw clients wait for the value and never read it,
/// `readers` ranks wait for it and read it; then a rank writes it.
fn waiters_row(unread: usize, readers: usize) -> Result<(), String> {
    let server = ServerProcess::start_plain()?;
    let writer = server.client()?;
    writer.set("warm", b"up").map_err(|e| e.to_string())?;
    let before = server.sample().rss_kib;
    let never_reading = (0..unread)
        .map(|_| {
            let mut raw = plain_session(server.port)?;
            raw.write_all(&get_frame("blob", Duration::from_secs(600)))?;
            Ok(raw)
        })
        .collect::<io::Result<Vec<TcpStream>>>()
        .map_err(|e| format!("a waiter that never reads: {e}"))?;
    let clients = (0..readers)
        .map(|_| server.client())
        .collect::<Result<Vec<_>, _>>()?;
    let value = vec![0x5a_u8; VALUE];
    let sampling = AtomicBool::new(true);
    let most = AtomicU64::new(before);
    let answered = thread::scope(|s| -> Result<usize, String> {
        s.spawn(|| {
            while sampling.load(Ordering::Relaxed) {
                most.fetch_max(server.sample().rss_kib, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(20));
            }
        });
        let reading: Vec<_> = clients
            .iter()
            .map(|client| s.spawn(|| client.get("blob", Duration::from_secs(60))))
            .collect();
        // Every request parked before the value comes.
        thread::sleep(Duration::from_millis(500));
        writer.set("blob", &value).map_err(|e| e.to_string())?;
        let answered = reading
            .into_iter()
            .map(|r| r.join())
            .filter(|r| matches!(r, Ok(Ok(got)) if *got == value))
            .count();
        // The unread answers have been queued (or wait for room) by now.
        thread::sleep(Duration::from_secs(1));
        sampling.store(false, Ordering::Relaxed);
        Ok(answered)
    })?;
    let most = most.load(Ordering::Relaxed);
    let grown = most.saturating_sub(before);
    println!(
        "| {unread} | {readers} | {:.1} | {:.1} | {:.1} | {:.2} | {answered} of {readers} |",
        super::mib(before),
        super::mib(most),
        super::mib(grown),
        (grown << 10) as f64 / IN_FLIGHT_BOUND as f64
    );
    drop(never_reading);
    Ok(())
}

/// Opens the holder's connections: answers of the big value never read,
/// and frames of 1 MiB sent but their last byte.
fn hold_share(port: u16) -> Result<Vec<TcpStream>, String> {
    let mut held = Vec::with_capacity(UNREAD_ANSWERS + SHORT_FRAMES);
    for _ in 0..UNREAD_ANSWERS {
        let mut raw = plain_session(port).map_err(|e| e.to_string())?;
        raw.write_all(&get_frame("big", Duration::from_secs(600)))
            .map_err(|e| e.to_string())?;
        held.push(raw);
    }
    // A SET frame of 1 MiB: its opcode, key ("held") and value.
    let frame = set_frame("held", &vec![0x17; SHORT_FRAME - 13]);
    let short = thread::scope(|s| {
        let senders: Vec<_> = (0..SHORT_FRAMES)
            .map(|_| {
                let frame = &frame;
                s.spawn(move || -> io::Result<TcpStream> {
                    let mut raw = plain_session(port)?;
                    raw.set_write_timeout(Some(Duration::from_secs(1)))?;
                    let _ = raw.write_all(&frame[..frame.len() - 1]);
                    Ok(raw)
                })
            })
            .collect();
        senders
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("panicked")))
            })
            .collect::<io::Result<Vec<_>>>()
    });
    held.extend(short.map_err(|e| e.to_string())?);
    thread::sleep(Duration::from_millis(500));
    Ok(held)
}

/// A connection that has done the handshake of a client without a
/// secret: frames after it are plain requests. Like a real client, it
/// tries again while the server has too many connections in their
/// handshake (for 30 s).
fn plain_session(port: u16) -> io::Result<TcpStream> {
    let start = std::time::Instant::now();
    loop {
        match plain_handshake(port) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && start.elapsed().as_secs() < 30 => {
                thread::sleep(Duration::from_millis(10));
            }
            done => return done,
        }
    }
}

/// One try of [`plain_session`]: `WouldBlock` when the server refused it
/// for too many connections in their handshake.
fn plain_handshake(port: u16) -> io::Result<TcpStream> {
    let mut raw = TcpStream::connect(("127.0.0.1", port))?;
    let mut hello = vec![HELLO];
    hello.extend_from_slice(b"NCRS");
    hello.extend_from_slice(&VERSION.to_be_bytes());
    hello.extend_from_slice(&[0x42; 32]);
    hello.push(0);
    raw.write_all(&frame(&hello))?;
    raw.set_read_timeout(Some(Duration::from_secs(30)))?;
    // The server's HELLO: its version, nonce, four limits and no proof.
    let mut answer = [0u8; 4 + 68];
    raw.read_exact(&mut answer)?;
    raw.set_read_timeout(None)?;
    if answer[4..6] == [RESP_ERROR, CODE_TOO_MANY_CONNECTIONS] {
        return Err(io::ErrorKind::WouldBlock.into());
    }
    if answer[4..7] != [RESP_HELLO, 0, VERSION as u8] {
        return Err(io::Error::other(format!(
            "the server did not answer HELLO: {:02x?}",
            &answer[4..]
        )));
    }
    Ok(raw)
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

fn field(bytes: &[u8]) -> Vec<u8> {
    frame(bytes)
}

fn get_frame(key: &str, timeout: Duration) -> Vec<u8> {
    let ms = (timeout.as_millis() as u64).to_be_bytes();
    frame(&[&[GET][..], &field(key.as_bytes()), &ms].concat())
}

fn set_frame(key: &str, value: &[u8]) -> Vec<u8> {
    frame(&[&[SET][..], &field(key.as_bytes()), &field(value)].concat())
}
