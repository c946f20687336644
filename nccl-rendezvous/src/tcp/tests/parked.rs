//! Blocking `get`s and `wait`s: parked on the server, answered by the
//! write that completes them (on any serving thread), at the server's
//! `max_wait` (the client asks again), or with an error when the server
//! stops; dropped when their client goes away.

use std::io::Write;
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use super::super::wire::{Request, Response};
use super::{PATIENCE, client, eventually, raw_plain_session, read_raw_frame, server, server_with};
use crate::tcp::{TcpStore, TcpStoreServerOptions, TcpStoreServerStats};
use crate::{Store, StoreError};

#[test]
fn a_waiting_client_that_disconnects_frees_its_slot_and_its_parked_request() {
    let server = server();
    let mut raw = raw_plain_session(server.local_addr());
    let get = Request::Get {
        key: "never".into(),
        timeout: Duration::from_secs(600),
    }
    .encode();
    raw.write_all(get.as_bytes()).unwrap();
    eventually("the get is parked", || server.stats().parked_requests == 1);
    assert_eq!(server.num_connections(), 1);
    drop(raw);
    eventually("the slot and the request are freed", || {
        server.stats() == TcpStoreServerStats::default()
    });
}

#[test]
fn the_server_cuts_waits_at_its_max_wait_and_the_client_asks_again() {
    let server =
        server_with(TcpStoreServerOptions::default().with_max_wait(Duration::from_millis(50)));
    // A raw get for 600 s is answered at the server's limit.
    let mut raw = raw_plain_session(server.local_addr());
    let get = Request::Get {
        key: "late".into(),
        timeout: Duration::from_secs(600),
    };
    raw.write_all(get.encode().as_bytes()).unwrap();
    let answer = read_raw_frame(&mut raw).expect("an answer at max_wait");
    assert!(
        matches!(Response::decode(&answer), Ok(Response::Timeout { ref missing, .. }) if missing == &["late"]),
        "{answer:02x?}"
    );
    // A client's get outlives several of the server's cuts.
    let store = client(&server);
    let writer = client(&server);
    thread::scope(|s| {
        let waiter = s.spawn(|| store.get("late", PATIENCE));
        thread::sleep(Duration::from_millis(300));
        writer.set("late", b"still wanted").unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), b"still wanted");
    });
}

#[test]
fn parked_requests_are_answered_and_reaped_across_serving_threads() {
    const CLIENTS: usize = 8;
    let server = server_with(TcpStoreServerOptions::default().with_serving_threads(3));
    let stores: Vec<TcpStore> = (0..CLIENTS).map(|_| client(&server)).collect();
    let all = client(&server);
    let keys: Vec<String> = (0..CLIENTS).map(|i| format!("key/{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    thread::scope(|s| {
        // Each client's connection is served by one of the three threads;
        // each waits for the next client's key, and one for all of them.
        let waiters: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let store = &stores[i];
                s.spawn(move || store.get(&format!("key/{}", (i + 1) % CLIENTS), PATIENCE))
            })
            .collect();
        eventually("every get is parked", || {
            server.stats().parked_requests == CLIENTS
        });
        let everything = s.spawn(|| all.wait(&keys, PATIENCE));
        for (i, store) in stores.iter().enumerate() {
            store
                .set(&format!("key/{i}"), i.to_string().as_bytes())
                .unwrap();
        }
        for (i, waiter) in waiters.into_iter().enumerate() {
            let want = ((i + 1) % CLIENTS).to_string();
            assert_eq!(waiter.join().unwrap().unwrap(), want.as_bytes());
        }
        everything.join().unwrap().unwrap();
    });
    // A parked request times out on its own thread, and one whose client
    // goes away is dropped, whichever thread wrote last.
    let err = stores[0]
        .get("never", Duration::from_millis(50))
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    let mut raw = raw_plain_session(server.local_addr());
    let get = Request::Get {
        key: "never".into(),
        timeout: Duration::from_secs(600),
    };
    raw.write_all(get.encode().as_bytes()).unwrap();
    eventually("the raw get is parked", || {
        server.stats().parked_requests == 1
    });
    drop(raw);
    eventually("the raw get is dropped", || {
        server.stats().parked_requests == 0
    });
    drop((stores, all));
    eventually("every connection is closed", || {
        server.num_connections() == 0
    });
}

#[test]
fn server_dropped_while_client_waits_gives_an_error_quickly() {
    let server = server();
    let addr = server.local_addr();
    let store = client(&server);
    let waiter = thread::spawn(move || store.get("never", Duration::from_secs(600)));
    eventually("the get is parked", || server.stats().parked_requests == 1);
    drop(server);
    // The waiter is told at once: it never reaches its own timeout.
    let err = waiter.join().unwrap().unwrap_err();
    assert!(
        matches!(err, StoreError::ConnectionClosed { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    // The port is released.
    TcpListener::bind(addr).unwrap();
}
