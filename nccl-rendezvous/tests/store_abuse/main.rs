//! The TCP store server under abuse (CPU only, 127.0.0.1): many concurrent
//! clients, garbage and truncated frames, oversized length prefixes,
//! slow-loris clients, clients that vanish mid-request, and more connections
//! than the server allows. In every case the server keeps serving good
//! clients and its connection count returns to its baseline.
//!
//! Random inputs come from a seeded xorshift generator, so every run sends
//! the same bytes.

mod attacks;
mod bounds;
mod child;
mod wire;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nccl_rendezvous::fuzzing;
use nccl_rendezvous::{Store, StoreError, TcpStore, TcpStoreServer, TcpStoreServerOptions};
use wire::{
    CODE_PROTOCOL, CODE_TOO_LARGE, CODE_TOO_MANY_CONNECTIONS, PATIENCE, RESP_OK, Rng, SET,
    answers_until_closed, assert_connections_return_to, assert_serves, assert_serves_then_closes,
    assert_settles_to, bind, client_options, connect, expect_refusal, frame, get_frame, handshake,
    raw_connect, session_connect, set_frame, wait_frame,
};

/// The child server of `child::ChildServer`: runs only when this binary
/// is started as one.
#[test]
fn child_server() {
    child::serve_if_child();
}

#[test]
fn sixty_four_concurrent_clients_are_all_served_correctly() {
    const CLIENTS: usize = 64;
    const ADDS: usize = 10;
    // Four serving threads: the clients' connections are spread over them,
    // and every wait below is completed by writes served on the others.
    let server = bind(TcpStoreServerOptions::default().with_serving_threads(4));
    let stores: Vec<TcpStore> = (0..CLIENTS).map(|_| connect(&server)).collect();
    // One connection per client: each is used by one thread at a time.
    assert_eq!(server.num_connections(), CLIENTS);
    let start = Barrier::new(CLIENTS);
    let results: Vec<(Vec<i64>, bool)> = thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    store
                        .set(&format!("client/{i}"), format!("value-{i}").as_bytes())
                        .unwrap();
                    let counts: Vec<i64> = (0..ADDS)
                        .map(|_| store.add("counter", 1).unwrap())
                        .collect();
                    // A blocking get of a key another client sets.
                    let next = (i + 1) % CLIENTS;
                    let value = store.get(&format!("client/{next}"), PATIENCE).unwrap();
                    assert_eq!(value, format!("value-{next}").as_bytes());
                    let keys: Vec<String> = (0..CLIENTS).map(|j| format!("client/{j}")).collect();
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    store.wait(&keys, PATIENCE).unwrap();
                    let me = i.to_string();
                    let leader = store.compare_set("leader", None, me.as_bytes()).unwrap();
                    (counts, leader.swapped)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every add saw a distinct value: 1..=CLIENTS*ADDS, each exactly once.
    let mut counts: Vec<i64> = results
        .iter()
        .flat_map(|(c, _)| c.iter().copied())
        .collect();
    counts.sort_unstable();
    let expected: Vec<i64> = (1..=(CLIENTS * ADDS) as i64).collect();
    assert_eq!(counts, expected);
    assert_eq!(
        results.iter().filter(|(_, won)| *won).count(),
        1,
        "one compare_set winner"
    );
    let total = stores[0].get("counter", PATIENCE).unwrap();
    assert_eq!(total, (CLIENTS * ADDS).to_string().as_bytes());
    assert_eq!(
        server.num_connections(),
        CLIENTS,
        "no connection was added or lost"
    );
    drop(stores);
    assert_connections_return_to(&server, 0);
}

#[test]
fn garbage_and_truncated_frames_do_not_disturb_good_clients() {
    const ABUSERS: u64 = 4;
    const SOCKETS_EACH: usize = 40;
    // Room for every abuser's handshakes at once from this one address:
    // what the server makes of their bytes is under test, not admission.
    let server = bind(
        TcpStoreServerOptions::default()
            .with_max_frame_size(64 << 10)
            .with_io_timeout(Duration::from_millis(500))
            .with_max_unauthenticated_per_address(256),
    );
    let addr = server.local_addr();
    let samples = fuzzing::sample_frames();
    let abusing = AtomicBool::new(true);
    let good_ops = AtomicU64::new(0);
    let good = connect(&server);
    thread::scope(|s| {
        for worker in 0..2 {
            let (good, abusing, good_ops) = (&good, &abusing, &good_ops);
            s.spawn(move || {
                let mut round = 0u64;
                while abusing.load(Ordering::Relaxed) || round < 5 {
                    let key = format!("good/{worker}");
                    good.set(&key, round.to_string().as_bytes()).unwrap();
                    assert_eq!(
                        good.get(&key, PATIENCE).unwrap(),
                        round.to_string().as_bytes()
                    );
                    good.add("good/count", 1).unwrap();
                    good_ops.fetch_add(1, Ordering::Relaxed);
                    round += 1;
                }
            });
        }
        let abusers: Vec<_> = (0..ABUSERS)
            .map(|seed| {
                let samples = &samples;
                s.spawn(move || {
                    let mut rng = Rng::new(seed + 1);
                    let mut unknown_opcode_refusals = 0;
                    for _ in 0..SOCKETS_EACH {
                        let mut raw = raw_connect(addr);
                        // Before the handshake or after it.
                        if rng.below(2) == 0 {
                            handshake(&mut raw);
                        }
                        let sample = &samples[rng.below(samples.len())];
                        match rng.below(5) {
                            // Random bytes, then gone.
                            0 => {
                                let n = rng.below(300);
                                let _ = raw.write_all(&rng.bytes(n));
                            }
                            // Random bytes, then wait for the server's verdict.
                            1 => {
                                let n = rng.below(300);
                                let _ = raw.write_all(&rng.bytes(n));
                                let _ = raw.shutdown(Shutdown::Write);
                                answers_until_closed(&mut raw);
                            }
                            // A valid frame cut short, then gone.
                            2 => {
                                let cut = rng.below(sample.len());
                                let _ = raw.write_all(&sample[..cut]);
                            }
                            // A valid frame with a few bytes changed.
                            3 => {
                                let mut bytes = sample.clone();
                                for _ in 0..=rng.below(3) {
                                    let at = rng.below(bytes.len());
                                    bytes[at] = rng.byte();
                                }
                                let _ = raw.write_all(&bytes);
                                let _ = raw.shutdown(Shutdown::Write);
                                answers_until_closed(&mut raw);
                            }
                            // A whole frame with an opcode no request has.
                            _ => {
                                let opcode = 0x0a + rng.below(0xf6) as u8;
                                let mut payload = vec![opcode];
                                let n = rng.below(40);
                                payload.extend(rng.bytes(n));
                                raw.write_all(&frame(&payload)).unwrap();
                                let message = expect_refusal(&mut raw, CODE_PROTOCOL);
                                assert!(
                                    message.contains(&format!(
                                        "unknown request opcode 0x{opcode:02x}"
                                    )),
                                    "{message}"
                                );
                                unknown_opcode_refusals += 1;
                            }
                        }
                    }
                    unknown_opcode_refusals
                })
            })
            .collect();
        // The good clients stop even if an abuser failed.
        let joined: Vec<_> = abusers.into_iter().map(|h| h.join()).collect();
        abusing.store(false, Ordering::Relaxed);
        let refusals: usize = joined.into_iter().map(|r| r.unwrap()).sum();
        assert!(
            refusals > 0,
            "the seeds exercise the unknown-opcode refusal"
        );
    });
    let ops = good_ops.load(Ordering::Relaxed);
    assert!(
        ops >= 10,
        "good clients were served throughout ({ops} rounds)"
    );
    assert_eq!(
        good.get("good/count", PATIENCE).unwrap(),
        ops.to_string().as_bytes()
    );
    assert_serves_then_closes(&server, good);
}

#[test]
fn oversized_length_prefixes_are_refused_and_the_maximum_itself_is_accepted() {
    const MAX: usize = 4096;
    let server = bind(TcpStoreServerOptions::default().with_max_frame_size(MAX));
    let addr = server.local_addr();

    // Many at once: each announces far more than the maximum.
    let claims = [u32::MAX, 0x8000_0000, 1 << 20, MAX as u32 + 1];
    let mut raws: Vec<(u32, TcpStream)> = (0..100)
        .map(|i| {
            let claim = claims[i % claims.len()];
            let mut raw = session_connect(addr);
            raw.write_all(&claim.to_be_bytes()).unwrap();
            // Some send a little of the body too.
            if i % 2 == 1 {
                raw.write_all(&[0x02; 100]).unwrap();
            }
            (claim, raw)
        })
        .collect();
    for (claim, raw) in &mut raws {
        let message = expect_refusal(raw, CODE_TOO_LARGE);
        assert!(
            message.contains(&claim.to_string()) && message.contains(&MAX.to_string()),
            "the refusal names the claimed length and the maximum: {message}"
        );
    }
    drop(raws);

    // A frame of exactly the maximum is accepted: SET's payload is the
    // opcode, the key's length and bytes, and the value's length and bytes.
    let value = vec![7u8; MAX - 1 - 4 - 4 - 4];
    let edge = set_frame("edge", &value);
    assert_eq!(edge.len(), 4 + MAX);
    let mut raw = session_connect(addr);
    raw.write_all(&edge).unwrap();
    raw.shutdown(Shutdown::Write).unwrap();
    let answers = answers_until_closed(&mut raw);
    assert_eq!(
        answers,
        vec![vec![RESP_OK]],
        "a frame of exactly max_frame_size is served"
    );
    let store = connect(&server);
    assert_eq!(store.get("edge", PATIENCE).unwrap(), value);

    assert_serves_then_closes(&server, store);
}

#[test]
fn slow_loris_clients_are_disconnected_after_io_timeout() {
    let io_timeout = Duration::from_millis(300);
    // Room for all 16 stalled handshakes from this one address: the
    // deadlines are under test here, not the admission.
    let server = bind(
        TcpStoreServerOptions::default()
            .with_io_timeout(io_timeout)
            .with_handshake_timeout(io_timeout)
            .with_max_unauthenticated_per_address(64),
    );
    let addr = server.local_addr();
    let good = connect(&server);
    good.set("good", b"before").unwrap();

    let silent: Vec<TcpStream> = (0..8).map(|_| raw_connect(addr)).collect();
    let partial_header: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut raw = raw_connect(addr);
            raw.write_all(&[0, 0]).unwrap();
            raw
        })
        .collect();
    let partial_body: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut raw = session_connect(addr);
            raw.write_all(&[0, 0, 0, 100]).unwrap();
            // A SET's opcode and key, within the limits: nothing to refuse
            // yet, just bytes that stop coming.
            raw.write_all(&[SET, 0, 0, 0, 1, b'k']).unwrap();
            raw
        })
        .collect();

    let good_idle_since = thread::scope(|s| {
        // Dribblers: a SET of a 990-byte value, whose head is sent whole
        // (nothing to refuse in it), then a byte of the value every third
        // of io_timeout, so every single read makes progress; only a
        // deadline for the whole frame stops them.
        let dribblers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || {
                    let mut raw = session_connect(addr);
                    raw.write_all(&1000u32.to_be_bytes()).unwrap();
                    raw.write_all(&[SET, 0, 0, 0, 1, b'k', 0, 0, 0x03, 0xde])
                        .unwrap();
                    let start = Instant::now();
                    for sent in 0..990 {
                        thread::sleep(io_timeout / 3);
                        if raw.write_all(&[0]).is_err() {
                            return (start.elapsed(), sent);
                        }
                        assert!(
                            start.elapsed() < PATIENCE,
                            "a dribbler was never disconnected"
                        );
                    }
                    panic!("a dribbler sent its whole 990-byte value");
                })
            })
            .collect();
        // Good clients are served meanwhile: the one already connected and
        // a new one.
        good.set("good", b"during").unwrap();
        let good_idle_since = Instant::now();
        assert_serves(&server);
        for dribbler in dribblers {
            let (after, sent) = dribbler.join().unwrap();
            assert!(sent < 990, "cut after {after:?} and {sent} bytes");
        }
        good_idle_since
    });

    for mut raw in silent.into_iter().chain(partial_header).chain(partial_body) {
        let answers = answers_until_closed(&mut raw);
        assert!(
            answers.is_empty(),
            "a stalled client gets no answer: {answers:02x?}"
        );
    }

    // A connection idle between frames is not a slow loris: the good
    // client's pooled connection stays open well past io_timeout. (The
    // client does not reconnect: a closed pooled connection would fail the
    // next call.)
    let idle_for = io_timeout * 3;
    thread::sleep(idle_for.saturating_sub(good_idle_since.elapsed()));
    assert_eq!(good.get("good", PATIENCE).unwrap(), b"during");
    assert_connections_return_to(&server, 1);
    drop(good);
    assert_connections_return_to(&server, 0);
}

#[test]
fn clients_that_vanish_mid_request_free_their_connections() {
    let server = bind(TcpStoreServerOptions::default());
    let addr = server.local_addr();
    let good = connect(&server);
    good.set("good", b"1").unwrap();
    assert_eq!(server.num_connections(), 1);

    // Half a frame, then gone; and a whole SET followed by half a frame.
    for i in 0..16 {
        let whole = set_frame(&format!("vanish/set/{i}"), b"applied");
        let mut raw = session_connect(addr);
        raw.write_all(&whole[..whole.len() / 2]).unwrap();
        let mut raw = session_connect(addr);
        raw.write_all(&whole).unwrap();
        let next = set_frame("vanish/never", b"x");
        raw.write_all(&next[..7]).unwrap();
    }
    assert_settles_to(&server, 1);
    for i in 0..16 {
        let value = good.try_get(&format!("vanish/set/{i}")).unwrap();
        assert_eq!(
            value.as_deref(),
            Some(&b"applied"[..]),
            "the whole SET before the cut took effect"
        );
    }
    assert_eq!(
        good.try_get("vanish/never").unwrap(),
        None,
        "a cut frame has no effect"
    );

    // Blocking GETs and WAITs for keys nobody sets, then gone.
    let mut blocked: Vec<TcpStream> = Vec::new();
    for i in 0..16 {
        let mut raw = session_connect(addr);
        raw.write_all(&get_frame(
            &format!("vanish/get/{i}"),
            Duration::from_secs(600),
        ))
        .unwrap();
        blocked.push(raw);
        let mut raw = session_connect(addr);
        raw.write_all(&wait_frame(
            &["vanish/wait/a", &format!("vanish/wait/{i}")],
            Duration::from_secs(600),
        ))
        .unwrap();
        blocked.push(raw);
    }
    assert_connections_return_to(&server, 1 + blocked.len());
    // The good client is served while they block.
    assert_eq!(good.add("good/count", 1).unwrap(), 1);
    drop(blocked);
    assert_connections_return_to(&server, 1);

    // Nothing of the vanished waiters lingers: the keys work normally.
    good.set("vanish/get/0", b"late").unwrap();
    assert_eq!(good.get("vanish/get/0", PATIENCE).unwrap(), b"late");
    good.set("vanish/wait/a", b"").unwrap();
    good.set("vanish/wait/0", b"").unwrap();
    good.wait(&["vanish/wait/a", "vanish/wait/0"], PATIENCE)
        .unwrap();
    assert_serves_then_closes(&server, good);
}

#[test]
fn connections_over_max_connections_are_refused_with_a_clear_error() {
    const MAX: usize = 8;
    let server = bind(TcpStoreServerOptions::default().with_max_connections(MAX));
    let addr = server.local_addr();
    let mut stores: Vec<TcpStore> = (0..MAX).map(|_| connect(&server)).collect();
    assert_eq!(server.num_connections(), MAX);

    // A client over the limit retries with backoff until its connect
    // timeout, then fails with an error that names the limit.
    let connect_timeout = Duration::from_millis(500);
    let err = TcpStore::connect_to(addr, client_options().with_connect_timeout(connect_timeout))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::TooManyConnections { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&addr.to_string())
            && message.contains(&format!("{MAX} client connections"))
            && message.contains("max_connections"),
        "{message}"
    );

    // Raw connections over the limit, silent or speaking first, are each
    // refused with the error frame; the count never goes over the limit.
    for i in 0..20 {
        let mut raw = raw_connect(addr);
        if i % 2 == 0 {
            let _ = raw.write_all(&set_frame("over/limit", b"x"));
        }
        let message = expect_refusal(&mut raw, CODE_TOO_MANY_CONNECTIONS);
        assert!(message.contains("max_connections"), "{message}");
        assert!(server.num_connections() <= MAX);
    }
    assert_eq!(
        stores[0].try_get("over/limit").unwrap(),
        None,
        "a refused client's request never runs"
    );

    // The clients already connected keep being served.
    for store in &stores {
        store.add("connected", 1).unwrap();
    }
    assert_eq!(
        stores[0].get("connected", PATIENCE).unwrap(),
        MAX.to_string().as_bytes()
    );

    // A slot freed while a client retries is taken by it.
    let again = thread::scope(|s| {
        let waiting = s.spawn(|| connect(&server));
        thread::sleep(Duration::from_millis(200));
        stores.pop();
        waiting.join().unwrap()
    });
    assert_eq!(again.add("connected", 1).unwrap(), MAX as i64 + 1);
    assert_eq!(server.num_connections(), MAX);
    drop(again);
    drop(stores);
    assert_connections_return_to(&server, 0);
}

#[test]
fn bind_rejects_zero_max_connections() {
    let err = TcpStoreServer::bind(
        "127.0.0.1:0",
        TcpStoreServerOptions::default().with_max_connections(0),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidArgument {
                what: "max_connections",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("at least 1"), "{err}");
}

#[test]
fn frame_decoding_survives_200k_random_truncated_and_mutated_inputs() {
    const INPUTS: usize = 200_000;
    let samples = fuzzing::sample_frames();
    // Every sample is one frame that decodes (the leading byte is the
    // reader's piece size), and all of them in a row are read one by one.
    for sample in &samples {
        let input = [&[3u8][..], sample].concat();
        let report = fuzzing::decode_frame(&input).unwrap();
        assert_eq!(report.frames, 1, "{sample:02x?}");
        assert!(report.requests + report.responses >= 1, "{sample:02x?}");
    }
    let all = [vec![0u8], samples.concat()].concat();
    assert_eq!(fuzzing::decode_frame(&all).unwrap().frames, samples.len());

    let mut rng = Rng::new(2026);
    let mut total = fuzzing::Report::default();
    for _ in 0..INPUTS {
        let mut input = vec![rng.byte()];
        let sample = &samples[rng.below(samples.len())];
        match rng.below(4) {
            0 => {
                let n = rng.below(64);
                input.extend(rng.bytes(n));
            }
            1 => input.extend_from_slice(&sample[..rng.below(sample.len() + 1)]),
            2 => {
                input.extend_from_slice(sample);
                mutate(&mut rng, &mut input);
            }
            _ => {
                for _ in 0..2 + rng.below(2) {
                    input.extend_from_slice(&samples[rng.below(samples.len())]);
                }
                mutate(&mut rng, &mut input);
            }
        }
        let report =
            fuzzing::decode_frame(&input).unwrap_or_else(|e| panic!("{e}; input {input:02x?}"));
        total.frames += report.frames;
        total.requests += report.requests;
        total.responses += report.responses;
    }
    // The inputs reach past the frame reader into both decoders.
    assert!(total.frames > INPUTS / 4, "{total:?}");
    assert!(
        total.requests > INPUTS / 20 && total.responses > INPUTS / 20,
        "{total:?}"
    );
}

/// Changes one to four things in `input` (never its first, control byte).
fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..=rng.below(4) {
        let at = 1 + rng.below(input.len());
        match rng.below(5) {
            0 if at < input.len() => input[at] ^= 1 << rng.below(8),
            1 if at < input.len() => input[at] = rng.byte(),
            2 => input.insert(at, rng.byte()),
            3 if at < input.len() => {
                input.remove(at);
            }
            _ => {
                // A length field's extremes.
                let extreme = [0u32, 1, 0x7fff_ffff, u32::MAX, 1025][rng.below(5)].to_be_bytes();
                let end = (at + 4).min(input.len());
                input.splice(at..end, extreme);
            }
        }
    }
}
