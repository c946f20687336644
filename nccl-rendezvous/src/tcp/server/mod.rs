//! The TCP store server: binding, its event loops' threads, and shutting
//! down. The gate (`gate`) accepts connections, decides who gets a slot
//! (`admission`) and runs the handshakes (`handshake`); the sessions loops
//! (`sessions`) serve authenticated connections, each its share, on one
//! table and its parked requests (`table`). What the loops share is in
//! `core` (one connection's state in `conn`), the settings in `options`.

mod admission;
mod budget;
mod conn;
mod core;
mod gate;
mod handshake;
mod options;
mod session_keys;
mod sessions;
mod table;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::descriptors;
use super::wire::RequestLimits;
use crate::memory::Quota;
use crate::{Result, StoreError};
use admission::Counts;
use budget::Budget;
use core::Budgets;
use gate::{GateLoop, Handoff};
use sessions::{Peer, SessionsLoop, Shards};
use table::Table;

#[cfg(feature = "fuzzing")]
pub(crate) use handshake::{Handshake, Step, oversized};
pub use options::{GatePriority, TcpStoreServerOptions};

/// What the sessions loop publishes for [`TcpStoreServer::stats`] after
/// each round of events.
#[derive(Debug, Default)]
struct Published {
    parked_requests: AtomicUsize,
    in_flight_bytes: AtomicUsize,
}

/// What the server's threads and its handle share.
struct Shared {
    options: TcpStoreServerOptions,
    limits: RequestLimits,
    /// `options.max_frame_size`, at most the largest request.
    frame_limit: usize,
    /// `options.max_connections`, lowered to fit the file descriptor limit.
    max_connections: usize,
    /// The connections holding a slot, counted as they come and go.
    counts: Counts,
    stop: AtomicBool,
    published: Published,
    /// The loops still running; each counts itself out as it ends.
    running: Mutex<usize>,
    running_changed: Condvar,
}

impl Shared {
    fn loop_ended(&self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        self.running_changed.notify_all();
    }
}

/// File descriptors kept for everything else the process does (the
/// loop's own among them, and connections being told they are refused).
const RESERVED_DESCRIPTORS: u64 = 64;
/// Descriptors one connection takes: its socket.
const DESCRIPTORS_PER_CONNECTION: u64 = 1;

/// `requested` connections, or fewer when the file descriptor limit (after
/// raising it to the hard limit) has no room for them; then also why.
fn fit_connections(requested: usize) -> (usize, Option<String>) {
    let Some(limit) = descriptors::raise_soft_limit() else {
        return (requested, None);
    };
    let room = limit.saturating_sub(RESERVED_DESCRIPTORS) / DESCRIPTORS_PER_CONNECTION;
    let room = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if room >= requested {
        return (requested, None);
    }
    crate::trace::event!(
        warn,
        requested,
        room,
        limit,
        "store server: max_connections lowered to fit RLIMIT_NOFILE"
    );
    let why = format!(
        "lowered from max_connections {requested} to fit this process's file descriptor limit \
         (RLIMIT_NOFILE {limit}, already raised to its hard limit: {DESCRIPTORS_PER_CONNECTION} \
         a connection, {RESERVED_DESCRIPTORS} kept for the rest); raise the hard limit (ulimit \
         -Hn) where the server runs for more"
    );
    (room, Some(why))
}

/// What a [`TcpStoreServer`] holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpStoreServerStats {
    /// Connections holding a slot, in their handshake or after it
    /// ([`TcpStoreServer::num_connections`]).
    pub connections: usize,
    /// Of those, the ones still in their handshake.
    pub unauthenticated: usize,
    /// `get`s and `wait`s waiting for their keys.
    pub parked_requests: usize,
    /// Bytes held for requests in progress: frames being read, answers
    /// not yet taken, parked requests
    /// ([`TcpStoreServerOptions::max_in_flight_bytes`] bounds them).
    pub in_flight_bytes: usize,
}

/// The server side of the TCP store: a listening socket and a fixed number
/// of threads, whatever the number of connections: a gate that accepts
/// connections and runs their handshakes, and a few loops that serve the
/// authenticated ones on one in-memory table
/// ([`TcpStoreServerOptions::serving_threads`]).
///
/// A flood of connections that never authenticate costs the gate alone.
///
/// A rank can host it in-process (see [`TcpStore::host`](super::TcpStore::host))
/// or a separate process can run it (see the `tcp_store_server` example).
/// Blocking `get`/`wait` requests are parked in the table and answered by
/// the write that sets their keys, or at their deadline; they hold no
/// thread and never hold up other clients.
///
/// Dropping the server (or calling [`TcpStoreServer::shutdown`]) stops
/// accepting, answers every parked request with an error, closes every
/// client connection (clients see an error at once, after any answer
/// already on its way) and releases the port; it waits a bounded time for
/// its threads and never hangs.
pub struct TcpStoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    wakers: Vec<Arc<mio::Waker>>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for TcpStoreServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStoreServer")
            .field("local_addr", &self.local_addr)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// How long a stopping server still sends the answers already on their
/// way; drop waits a second more for its thread.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

impl TcpStoreServer {
    /// Binds to `addr` (port 0 picks a free port; see
    /// [`TcpStoreServer::local_addr`]) and starts serving.
    ///
    /// Raises this process's soft file descriptor limit (`RLIMIT_NOFILE`)
    /// to its hard limit, and serves at most as many connections as it
    /// then allows ([`TcpStoreServer::max_connections`]).
    ///
    /// Fails with [`StoreError::Bind`] when the address cannot be bound, and
    /// with [`StoreError::InvalidArgument`] naming the setting for a
    /// `max_frame_size` under 64 bytes, an `io_timeout`,
    /// `handshake_timeout` or `max_wait` over 10 years, an empty secret, or
    /// a count or size limit of 0.
    pub fn bind(
        addr: impl ToSocketAddrs + fmt::Debug,
        options: TcpStoreServerOptions,
    ) -> Result<Self> {
        options.check()?;
        let shown = format!("{addr:?}").trim_matches('"').to_owned();
        let bind_error = |source| StoreError::Bind {
            addr: shown.clone(),
            source,
        };
        let listener = TcpListener::bind(addr).map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let starting =
            |e| StoreError::io(format!("starting the TCP store server on {local_addr}"), e);
        let (max_connections, lowered) = fit_connections(options.max_connections);
        let shared = Arc::new(Shared {
            limits: options.request_limits(),
            frame_limit: options.frame_limit(),
            max_connections,
            options,
            counts: Counts::default(),
            stop: AtomicBool::new(false),
            published: Published::default(),
            running: Mutex::new(0),
            running_changed: Condvar::new(),
        });
        // Each sessions loop serves its share of the authenticated
        // connections in parallel with the others; the table they share is
        // locked only to run a request on it.
        let shard_count = shared.options.serving_loops();
        let polls = (0..=shard_count)
            .map(|_| mio::Poll::new())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(starting)?;
        let wakers = polls
            .iter()
            .map(|poll| mio::Waker::new(poll.registry(), core::WAKER).map(Arc::new))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(starting)?;
        let (inboxes, handed_over): (Vec<_>, Vec<_>) =
            (0..shard_count).map(|_| mpsc::channel()).unzip();
        let (woken_senders, woken): (Vec<_>, Vec<_>) =
            (0..shard_count).map(|_| mpsc::channel()).unzip();
        // A quarter of the bytes in flight for frames being read, a
        // quarter for answers not yet sent, half for parked requests.
        let in_flight = shared.options.in_flight_limit();
        let budgets = Arc::new(Budgets {
            input: Budget::new(in_flight / 4, max_connections),
            output: Budget::new(in_flight / 4, max_connections),
        });
        let shard_wakers = &wakers[1..];
        let shards = Shards {
            table: Arc::new(Mutex::new(Table::new(
                Quota {
                    max_keys: shared.options.max_stored_keys,
                    max_bytes: shared.options.max_stored_bytes,
                },
                in_flight / 2,
                shared.options.max_wait,
            ))),
            budgets,
            peers: woken_senders
                .into_iter()
                .zip(shard_wakers)
                .map(|(woken, waker)| Peer {
                    woken,
                    waker: Arc::clone(waker),
                })
                .collect(),
        };
        let handoff = Handoff {
            shards: inboxes
                .into_iter()
                .zip(shard_wakers.iter().cloned())
                .collect(),
            next: 0,
        };
        let mut polls = polls.into_iter();
        let gate_poll = polls
            .next()
            .ok_or_else(|| starting(std::io::ErrorKind::Other.into()))?;
        let mut gate = GateLoop::new(
            Arc::clone(&shared),
            gate_poll,
            mio::net::TcpListener::from_std(listener),
            lowered,
            handoff,
        )
        .map_err(starting)?;
        let mut server = TcpStoreServer {
            local_addr,
            shared: Arc::clone(&shared),
            wakers,
            threads: Vec::with_capacity(shard_count + 1),
        };
        let port = local_addr.port();
        let priority = shared.options.gate_priority;
        server.spawn(format!("nccl-store-gate-{port}"), move || {
            gate::yield_to_sessions(priority);
            core::run(&mut gate)
        })?;
        let channels = handed_over.into_iter().zip(woken);
        for (me, (poll, channels)) in polls.zip(channels).enumerate() {
            let shards = shards.clone();
            let mut sessions = SessionsLoop::new(Arc::clone(&shared), poll, shards, me, channels);
            server.spawn(format!("nccl-store-{port}-{me}"), move || {
                core::run(&mut sessions)
            })?;
        }
        Ok(server)
    }

    /// The address the server listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// An address a client on this host can connect to: the bound address,
    /// or loopback when bound to the unspecified address (`0.0.0.0`, `::`).
    pub fn connect_addr(&self) -> SocketAddr {
        loopback_if_unspecified(self.local_addr)
    }

    /// How many client connections hold a slot now, in their handshake or
    /// after it (never more than [`TcpStoreServer::max_connections`];
    /// connections refused at once are not counted).
    pub fn num_connections(&self) -> usize {
        self.stats().connections
    }

    /// What the server holds now: connections (counted as they come and
    /// go), parked requests and bytes in flight (as of the serving loop's
    /// last round of events).
    pub fn stats(&self) -> TcpStoreServerStats {
        let published = &self.shared.published;
        let counts = &self.shared.counts;
        let unauthenticated = counts.handshaking.load(Ordering::Acquire);
        TcpStoreServerStats {
            connections: unauthenticated + counts.authenticated.load(Ordering::Acquire),
            unauthenticated,
            parked_requests: published.parked_requests.load(Ordering::Relaxed),
            in_flight_bytes: published.in_flight_bytes.load(Ordering::Relaxed),
        }
    }

    /// The most connections this server keeps open:
    /// [`TcpStoreServerOptions::max_connections`], lowered when the
    /// process's file descriptor limit has no room for that many.
    pub fn max_connections(&self) -> usize {
        self.shared.max_connections
    }

    /// The largest frame this server takes after the handshake:
    /// [`TcpStoreServerOptions::max_frame_size`], or the largest request the
    /// other limits allow when that is smaller or unset.
    pub fn max_frame_size(&self) -> usize {
        self.shared.frame_limit
    }

    /// Stops the server; the same as dropping it.
    pub fn shutdown(self) {
        drop(self);
    }

    /// Starts a loop's thread, counted as running until it ends.
    fn spawn(&mut self, name: String, run: impl FnOnce() + Send + 'static) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        *shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += 1;
        let spawned = thread::Builder::new().name(name).spawn(move || {
            run();
            shared.loop_ended();
        });
        match spawned {
            Ok(thread) => {
                self.threads.push(thread);
                Ok(())
            }
            Err(e) => {
                // Not started: not running. Dropping `self` stops the other.
                self.shared.loop_ended();
                Err(StoreError::io(
                    format!("starting the TCP store server on {}", self.local_addr),
                    e,
                ))
            }
        }
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for waker in &self.wakers {
            if waker.wake().is_err() {
                crate::trace::event!(
                    warn,
                    "store server: could not wake an event loop to stop it"
                );
            }
        }
        // The loops answer, close and release the port within their own
        // grace; wait a little longer for them, never forever.
        let running = self
            .shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let limit = SHUTDOWN_GRACE + Duration::from_secs(1);
        let (running, _) = self
            .shared
            .running_changed
            .wait_timeout_while(running, limit, |running| *running > 0)
            .unwrap_or_else(PoisonError::into_inner);
        if *running == 0 {
            drop(running);
            for thread in self.threads.drain(..) {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn loopback_if_unspecified(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}
