//! The sessions loops: serve the requests of the connections the gate
//! hands over once authenticated, a few loops (shards) sharing one table.
//! Each opens and checks its connections' requests (tag, stamp, limits)
//! outside the table's lock, runs them on the table under it, parks the
//! `get`s and `wait`s whose keys are missing and answers them when a write
//! sets their keys (sending the answer to the shard that holds the
//! connection) or their deadline passes, keeps the bytes in flight within
//! their bound, and answers every parked request when the server stops.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mio::{Poll, Token, Waker};

use super::super::wire::{DecodeError, Request, RequestLimits, Response, Session, code};
use super::conn::{Conn, Phase, Timer};
use super::core::{Core, FIRST_ID, Handler, Reactor, WAKER};
use super::table::{Outcome, Table};
use super::{SHUTDOWN_GRACE, Shared};

/// Why a request is refused: the error frame's code and message.
type Refusal = (u8, String);

/// How soon a shard looks again for room for its starved frames (room a
/// shard frees does not wake the others).
const STARVED_RETRY: Duration = Duration::from_millis(10);

/// How a shard reaches another: answers for its parked requests, and the
/// waker that tells it to look.
#[derive(Clone)]
pub(super) struct Peer {
    pub(super) answers: Sender<(usize, Response)>,
    pub(super) waker: Arc<Waker>,
}

/// What every shard shares.
#[derive(Clone)]
pub(super) struct Shards {
    pub(super) table: Arc<Mutex<Table>>,
    /// The bytes the shards' connections hold.
    pub(super) held: Arc<AtomicUsize>,
    pub(super) peers: Vec<Peer>,
}

impl Shards {
    /// The shard that holds connection `id`.
    fn owner(&self, id: usize) -> usize {
        id.saturating_sub(FIRST_ID) % self.peers.len().max(1)
    }
}

/// What a shard keeps beside its connections.
struct Sessions {
    shared: Arc<Shared>,
    shards: Shards,
    me: usize,
    in_flight_limit: usize,
    /// Connections waiting for room in the in-flight bytes.
    starved: VecDeque<usize>,
    /// Parked requests a write completed, with their answers.
    woken: Vec<(usize, Response)>,
    /// Connections the gate hands over.
    inbox: Receiver<Conn>,
    /// Answers to this shard's parked requests, from writes on other shards.
    answers: Receiver<(usize, Response)>,
}

/// One sessions loop.
pub(super) struct SessionsLoop {
    core: Core,
    sessions: Sessions,
}

impl SessionsLoop {
    /// Shard `me` of `shards`, taking connections from `inbox` and
    /// answers from `answers`.
    pub(super) fn new(
        shared: Arc<Shared>,
        poll: Poll,
        shards: Shards,
        me: usize,
        (inbox, answers): (Receiver<Conn>, Receiver<(usize, Response)>),
    ) -> Self {
        let ids = (FIRST_ID + me, shards.peers.len());
        SessionsLoop {
            core: Core::new(Arc::clone(&shared), poll, Arc::clone(&shards.held), ids),
            sessions: Sessions {
                in_flight_limit: shared.options.in_flight_limit(),
                shared,
                shards,
                me,
                starved: VecDeque::new(),
                woken: Vec::new(),
                inbox,
                answers,
            },
        }
    }

    /// Takes the connections the gate handed over, and gives each its
    /// first turn (its handshake's last frame may still be on its way).
    fn take_handed_over(&mut self) {
        while let Ok(conn) = self.sessions.inbox.try_recv() {
            if self.core.stopping.is_some() {
                self.sessions.on_finish(conn, 0);
                continue;
            }
            if let Some(id) = self.core.adopt(conn) {
                self.core.serve(id, &mut self.sessions);
            }
        }
    }

    /// Queues the answers other shards' writes gave this shard's parked
    /// requests.
    fn take_answers(&mut self) {
        let now = Instant::now();
        while let Ok((id, response)) = self.sessions.answers.try_recv() {
            if deliver(&mut self.core, id, response, now) {
                self.core.serve(id, &mut self.sessions);
            }
        }
    }

    /// Gives the connections waiting for room in the in-flight bytes their
    /// turn, as long as there is room.
    fn resume_starved(&mut self) {
        while self.sessions.in_flight(&self.core) < self.sessions.in_flight_limit {
            let Some(id) = self.sessions.starved.pop_front() else {
                return;
            };
            if let Some(conn) = self.core.conns.get_mut(&id) {
                conn.starved = false;
                self.core.serve(id, &mut self.sessions);
            }
        }
    }

    /// Publishes the figures of [`TcpStoreServer::stats`](super::TcpStoreServer::stats)
    /// that the table holds.
    fn publish(&self) {
        let published = &self.core.shared.published;
        let parked = self.sessions.table().parked();
        published.parked_requests.store(parked, Ordering::Relaxed);
        published
            .in_flight_bytes
            .store(self.sessions.in_flight(&self.core), Ordering::Relaxed);
    }
}

/// Queues `response` for connection `id`, parked on this shard; whether
/// it was (it may have closed, or had its answer already).
fn deliver(core: &mut Core, id: usize, response: Response, now: Instant) -> bool {
    let answer_by = now + core.io_timeout();
    let Some(conn) = core.conns.get_mut(&id).filter(|conn| conn.parked) else {
        return false;
    };
    conn.parked = false;
    conn.set(Timer::Park, None);
    if let Phase::Serving(session) = &mut conn.phase {
        let frame = session.seal(response.encode());
        conn.queue(&frame, answer_by);
    }
    true
}

impl Sessions {
    fn table(&self) -> MutexGuard<'_, Table> {
        // The table is left consistent by every call, and none panics.
        self.shards
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The bytes held for requests in progress, on every shard.
    fn in_flight(&self, core: &Core) -> usize {
        core.held() + self.table().parked_bytes()
    }

    /// Sends the answers of the parked requests the last request
    /// completed: queued here for this shard's connections, to their shard
    /// for the others'.
    fn answer_woken(&mut self, core: &mut Core, now: Instant) {
        for (id, response) in self.woken.drain(..) {
            let owner = self.shards.owner(id);
            if owner == self.me {
                if deliver(core, id, response, now) {
                    core.ready.push(id);
                }
            } else if let Some(peer) = self.shards.peers.get(owner)
                && peer.answers.send((id, response)).is_ok()
                && peer.waker.wake().is_err()
            {
                crate::trace::event!(warn, "store server: could not wake a sessions loop");
            }
        }
    }
}

impl Handler for Sessions {
    fn on_frame(
        &mut self,
        core: &mut Core,
        conn: &mut Conn,
        id: usize,
        payload: Vec<u8>,
        now: Instant,
    ) {
        let busy = conn.parked || conn.has_output();
        let Phase::Serving(session) = &mut conn.phase else {
            return;
        };
        let io_timeout = core.io_timeout();
        let shared = Arc::clone(&self.shared);
        let request = match open(session, payload, busy, io_timeout, &shared.limits) {
            Ok(request) => request,
            Err((code, message)) => return core.refuse(conn, id, code, message, now, self),
        };
        let mut woken = std::mem::take(&mut self.woken);
        let outcome = self.table().apply(id, request, now, &mut woken);
        self.woken = woken;
        match outcome {
            Outcome::Answer(response) => {
                let frame = session.seal(response.encode());
                conn.queue(&frame, now + io_timeout);
            }
            Outcome::Parked(deadline) => {
                conn.parked = true;
                conn.set(Timer::Park, Some(deadline));
            }
            Outcome::Refuse(code, message) => core.refuse(conn, id, code, message, now, self),
        }
        self.answer_woken(core, now);
    }

    /// No more of a request's frame is read while the in-flight bytes are
    /// full; a parked one is read on, to see its connection close.
    fn may_read(&mut self, core: &Core, conn: &mut Conn, id: usize) -> bool {
        if conn.parked || conn.is_closing() {
            return true;
        }
        let held = core.held().saturating_sub(conn.charged) + conn.footprint();
        if held + self.table().parked_bytes() < self.in_flight_limit {
            return true;
        }
        if !conn.starved {
            conn.starved = true;
            self.starved.push_back(id);
        }
        false
    }

    fn on_refuse(&mut self, conn: &mut Conn, id: usize) {
        if conn.parked {
            self.table().forget(id);
            conn.parked = false;
        }
    }

    fn on_finish(&mut self, conn: Conn, _id: usize) {
        drop(conn);
        self.shared
            .counts
            .authenticated
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// A parked request gets its timeout answer (unless a write on another
    /// shard answered it first: that answer is on its way); a frame still
    /// waiting for room when its time is up, its refusal.
    fn on_expired(
        &mut self,
        core: &mut Core,
        conn: &mut Conn,
        id: usize,
        timer: Timer,
        now: Instant,
    ) -> bool {
        match timer {
            Timer::Park => {
                conn.set(Timer::Park, None);
                let expired = self.table().expire(id, now);
                if let Some(response) = expired
                    && let Phase::Serving(session) = &mut conn.phase
                {
                    conn.parked = false;
                    let frame = session.seal(response.encode());
                    conn.queue(&frame, now + core.io_timeout());
                }
                true
            }
            Timer::Frame if conn.starved => {
                let message = format!(
                    "the server holds {} bytes for requests in progress, its \
                     max_in_flight_bytes of {}, and this request found no room for the rest of \
                     its frame within io_timeout; retry when the load has passed, or raise \
                     max_in_flight_bytes where the server starts",
                    self.in_flight(core),
                    self.in_flight_limit
                );
                core.refuse(conn, id, code::LIMIT, message, now, self);
                true
            }
            _ => false,
        }
    }
}

impl Reactor for SessionsLoop {
    fn core(&mut self) -> &mut Core {
        &mut self.core
    }

    fn on_token(&mut self, token: Token) {
        if token == WAKER {
            self.take_handed_over();
            self.take_answers();
        }
    }

    fn serve(&mut self, id: usize) {
        self.core.serve(id, &mut self.sessions);
    }

    fn after_round(&mut self, now: Instant) {
        self.core.serve_again(&mut self.sessions);
        self.core.fire_timers(now, &mut self.sessions);
        self.resume_starved();
        self.publish();
    }

    fn wake_at(&self) -> (Option<Instant>, bool) {
        let starved = !self.sessions.starved.is_empty();
        (starved.then(|| Instant::now() + STARVED_RETRY), false)
    }

    /// Answers this shard's parked requests with an error, and closes every
    /// connection that has nothing left to send; the others get until the
    /// grace ends.
    fn begin_stop(&mut self, now: Instant) {
        self.take_handed_over();
        self.core.stopping = Some(now + SHUTDOWN_GRACE);
        let ids: Vec<usize> = self.core.conns.keys().copied().collect();
        for id in ids {
            let Some(conn) = self.core.conns.get_mut(&id) else {
                continue;
            };
            if conn.parked {
                self.sessions.table().forget(id);
                conn.parked = false;
                let refusal = Response::Error {
                    code: code::SHUTDOWN,
                    message: "the server is shutting down".to_owned(),
                };
                if let Phase::Serving(session) = &mut conn.phase {
                    let frame = session.seal(refusal.encode());
                    conn.close_with(&frame, 0, now + SHUTDOWN_GRACE);
                }
                self.core.serve(id, &mut self.sessions);
            } else if !conn.has_output() {
                self.core.finish(id, &mut self.sessions);
            }
        }
    }
}

/// Opens a sealed request (or takes a plain one), refuses one stamped too
/// long before it arrived, and decodes it within the limits.
fn open(
    session: &mut Session,
    payload: Vec<u8>,
    busy: bool,
    io_timeout: Duration,
    limits: &RequestLimits,
) -> Result<Request, Refusal> {
    if busy {
        return Err((
            code::PROTOCOL,
            "a request before the answer to the previous one: a connection carries one request \
             at a time"
                .to_owned(),
        ));
    }
    let opened = session.open(payload).map_err(|_| {
        (
            code::INTEGRITY,
            "a frame failed authentication (altered, replayed, reordered or injected on the way)"
                .to_owned(),
        )
    })?;
    if let Some(stamp) = opened.stamp {
        let lag = session.age().saturating_sub(stamp);
        if lag > io_timeout {
            return Err((
                code::INTEGRITY,
                format!(
                    "a request arrived {lag:?} late, more than this server's io_timeout of \
                     {io_timeout:?} after its client sent it: it was held back on the way (by a \
                     relay?) or stuck in the client, and was not applied"
                ),
            ));
        }
    }
    Request::decode_within(&opened.body, limits).map_err(|e| match e {
        DecodeError::OverLimit(detail) => (code::LIMIT, detail),
        e => (code::PROTOCOL, format!("malformed request: {e}")),
    })
}
