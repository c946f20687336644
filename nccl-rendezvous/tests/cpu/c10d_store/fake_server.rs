//! A minimal c10d TCPStore server, written for these tests from torch's
//! `TCPStoreBackend.cpp` (the legacy server) and `TCPStoreLibUvBackend.cpp`
//! (the libuv one), for the queries `C10dStore` sends: VALIDATE, PING, SET,
//! COMPARE_SET, GET, ADD, CHECK, WAIT, DELETE_KEY and CANCEL_WAIT. It
//! parses the bytes itself (not with the client's code), so the client is
//! checked against the protocol, not against itself.
//!
//! Like torch's servers it applies each query under one lock and answers a
//! WAIT when the last awaited key is set, from the setter's thread. Its
//! knobs: which server it imitates ([`Backend`]), [`FakeServer::kill`] (every
//! connection closed at once, as when the process dies), a silent mode (it
//! reads queries and answers none) and a racing cancel (CANCEL_WAIT answered
//! by a late STOP_WAITING, then WAIT_CANCELED).

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

/// Which of torch's servers to imitate where they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `LibUVStoreDaemon`: GET of an absent key answers an empty value;
    /// COMPARE_SET wakes the key's waiters, even when it leaves the key
    /// absent.
    Libuv,
    /// `TCPStoreMasterDaemon`: GET of an absent key closes the connection
    /// (`std::unordered_map::at` throws); COMPARE_SET wakes no one.
    Legacy,
}

const VALIDATE: u8 = 0;
const SET: u8 = 1;
const COMPARE_SET: u8 = 2;
const GET: u8 = 3;
const ADD: u8 = 4;
const CHECK: u8 = 5;
const WAIT: u8 = 6;
const DELETE_KEY: u8 = 8;
const CANCEL_WAIT: u8 = 12;
const PING: u8 = 13;
const MAGIC: [u8; 4] = [0xCE, 0xF7, 0x85, 0x3C];
const STOP_WAITING: u8 = 0;
const WAIT_CANCELED: u8 = 1;

struct Waiter {
    conn: u64,
    stream: TcpStream,
    awaiting: HashSet<Vec<u8>>,
}

#[derive(Default)]
struct State {
    keys: HashMap<Vec<u8>, Vec<u8>>,
    waiters: Vec<Waiter>,
    /// Every connection, to close them all on `kill`.
    conns: Vec<TcpStream>,
    /// Every query byte received after the handshake (VALIDATE and the
    /// PING right after it), in order.
    queries: Vec<u8>,
}

struct Shared {
    backend: Backend,
    state: Mutex<State>,
    stop: AtomicBool,
    silent: AtomicBool,
    racing_cancel: AtomicBool,
    next_conn: AtomicU64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake server on 127.0.0.1; stops (closing every connection)
/// when dropped.
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl FakeServer {
    /// A server on an ephemeral port of 127.0.0.1.
    pub fn start(backend: Backend) -> FakeServer {
        Self::start_on(backend, 0)
    }

    /// A server on `port` of 127.0.0.1.
    pub fn start_on(backend: Backend, port: u16) -> FakeServer {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the fake server");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the fake server's address");
        let shared = Arc::new(Shared {
            backend,
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            silent: AtomicBool::new(false),
            racing_cancel: AtomicBool::new(false),
            next_conn: AtomicU64::new(0),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = thread::spawn(move || accept_loop(&listener, &accepting));
        FakeServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops answering (queries are still read); `false` answers again.
    pub fn set_silent(&self, silent: bool) {
        self.shared.silent.store(silent, Ordering::SeqCst);
    }

    /// Answers CANCEL_WAIT with STOP_WAITING then WAIT_CANCELED, as torch's
    /// servers do when the keys come just before the cancel.
    pub fn set_racing_cancel(&self, racing: bool) {
        self.shared.racing_cancel.store(racing, Ordering::SeqCst);
    }

    /// The value of `key`, read directly.
    pub fn value(&self, key: &str) -> Option<Vec<u8>> {
        let stored = format!("/{key}");
        self.shared.state().keys.get(stored.as_bytes()).cloned()
    }

    /// The query bytes received so far (handshakes excluded).
    pub fn queries(&self) -> Vec<u8> {
        self.shared.state().queries.clone()
    }

    /// How many connections were accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.shared.next_conn.load(Ordering::SeqCst)
    }

    /// Stops accepting and closes every connection, as a process that dies.
    pub fn kill(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.join().expect("the acceptor thread");
        }
        for conn in self.shared.state().conns.drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let conn = shared.next_conn.fetch_add(1, Ordering::SeqCst);
                if let Ok(clone) = stream.try_clone() {
                    shared.state().conns.push(clone);
                }
                let serving = Arc::clone(shared);
                thread::spawn(move || {
                    // A read error or an unknown query ends the connection,
                    // as both of torch's servers do.
                    let _ = serve(stream, conn, &serving);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
}

fn read_u8(s: &mut TcpStream) -> io::Result<u8> {
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    Ok(b[0])
}

fn read_u64(s: &mut TcpStream) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_vec(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let len = read_u64(s)?;
    if len > 16 << 20 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too long"));
    }
    let mut v = vec![0u8; len as usize];
    s.read_exact(&mut v)?;
    Ok(v)
}

fn read_keys(s: &mut TcpStream) -> io::Result<Vec<Vec<u8>>> {
    let n = read_u64(s)?;
    (0..n).map(|_| read_vec(s)).collect()
}

fn with_len(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

fn closed(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_owned())
}

/// `std::stoll`'s reading of a counter: optional spaces and sign, then
/// digits; anything after them is ignored, no digit at all throws.
fn stoll(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?.trim_start();
    let sign_len = usize::from(text.starts_with(['+', '-']));
    let digits = text[sign_len..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    text[..sign_len + digits].parse().ok()
}

/// Answers the waiters of `key` whose last awaited key it was.
fn wake(state: &mut State, key: &[u8]) {
    state.waiters.retain_mut(|w| {
        if !w.awaiting.remove(key) || !w.awaiting.is_empty() {
            return true;
        }
        let _ = w.stream.write_all(&[STOP_WAITING]);
        false
    });
}

fn serve(mut s: TcpStream, conn: u64, shared: &Shared) -> io::Result<()> {
    if read_u8(&mut s)? != VALIDATE {
        return Err(closed("the first query is not VALIDATE"));
    }
    let mut magic = [0u8; 4];
    s.read_exact(&mut magic)?;
    if magic != MAGIC {
        return Err(closed("wrong magic number"));
    }
    // torch's client PINGs right after VALIDATE: part of the handshake.
    let mut handshake_ping = true;
    loop {
        let query = read_u8(&mut s)?;
        if query != PING {
            handshake_ping = false;
        }
        let reply: Vec<u8> = match query {
            PING => {
                let mut nonce = [0u8; 4];
                s.read_exact(&mut nonce)?;
                if !std::mem::take(&mut handshake_ping) {
                    shared.state().queries.push(query);
                }
                nonce.to_vec()
            }
            SET => {
                let key = read_vec(&mut s)?;
                let value = read_vec(&mut s)?;
                let mut state = shared.state();
                state.queries.push(query);
                state.keys.insert(key.clone(), value);
                wake(&mut state, &key);
                Vec::new()
            }
            COMPARE_SET => {
                let key = read_vec(&mut s)?;
                let expected = read_vec(&mut s)?;
                let desired = read_vec(&mut s)?;
                let mut state = shared.state();
                state.queries.push(query);
                let after = match state.keys.get_mut(&key) {
                    None if expected.is_empty() => {
                        state.keys.insert(key.clone(), desired.clone());
                        desired
                    }
                    None => expected,
                    Some(current) => {
                        if *current == expected {
                            *current = desired;
                        }
                        current.clone()
                    }
                };
                if shared.backend == Backend::Libuv {
                    wake(&mut state, &key);
                }
                with_len(&after)
            }
            GET => {
                let key = read_vec(&mut s)?;
                let mut state = shared.state();
                state.queries.push(query);
                match (state.keys.get(&key), shared.backend) {
                    (Some(value), _) => with_len(value),
                    (None, Backend::Libuv) => with_len(b""),
                    (None, Backend::Legacy) => return Err(closed("GET of an absent key")),
                }
            }
            ADD => {
                let key = read_vec(&mut s)?;
                let mut delta = [0u8; 8];
                s.read_exact(&mut delta)?;
                let mut sum = i64::from_le_bytes(delta);
                let mut state = shared.state();
                state.queries.push(query);
                if let Some(current) = state.keys.get(&key) {
                    let Some(old) = stoll(current) else {
                        return Err(closed("ADD to a value that is not an integer"));
                    };
                    sum = sum.wrapping_add(old);
                }
                state.keys.insert(key.clone(), sum.to_string().into_bytes());
                wake(&mut state, &key);
                sum.to_le_bytes().to_vec()
            }
            CHECK => {
                let keys = read_keys(&mut s)?;
                let mut state = shared.state();
                state.queries.push(query);
                let ready = keys.iter().all(|k| state.keys.contains_key(k));
                vec![if ready { 0 } else { 1 }]
            }
            WAIT => {
                let keys = read_keys(&mut s)?;
                let mut state = shared.state();
                state.queries.push(query);
                let awaiting: HashSet<Vec<u8>> = keys
                    .into_iter()
                    .filter(|k| !state.keys.contains_key(k))
                    .collect();
                if awaiting.is_empty() {
                    vec![STOP_WAITING]
                } else {
                    let stream = s.try_clone()?;
                    state.waiters.push(Waiter {
                        conn,
                        stream,
                        awaiting,
                    });
                    Vec::new()
                }
            }
            DELETE_KEY => {
                let key = read_vec(&mut s)?;
                let mut state = shared.state();
                state.queries.push(query);
                let removed = i64::from(state.keys.remove(&key).is_some());
                removed.to_le_bytes().to_vec()
            }
            CANCEL_WAIT => {
                let mut state = shared.state();
                state.queries.push(query);
                state.waiters.retain(|w| w.conn != conn);
                if shared.racing_cancel.load(Ordering::SeqCst) {
                    vec![STOP_WAITING, WAIT_CANCELED]
                } else {
                    vec![WAIT_CANCELED]
                }
            }
            _ => return Err(closed("unknown query")),
        };
        if !reply.is_empty() && !shared.silent.load(Ordering::SeqCst) {
            // Written under the lock, as a wake-up from another thread is.
            let _state = shared.state();
            s.write_all(&reply)?;
        }
    }
}
