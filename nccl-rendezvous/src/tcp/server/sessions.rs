//! The sessions loops: serve the requests of the connections the gate
//! hands over once authenticated, a few loops (shards) sharing one table.
//! Each opens and checks its connections' requests (tag, stamp, limits)
//! outside the table's lock, runs them on the table under it, parks the
//! `get`s and `wait`s whose keys are missing and answers them when a write
//! sets their keys (sending the answer to the shard that holds the
//! connection) or their deadline passes, keeps the bytes in flight within
//! their bound, and answers every parked request when the server stops.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mio::{Poll, Token, Waker};

use super::super::wire::{
    DecodeError, Request, RequestLimits, Response, Session, code, value_head,
};
use super::conn::{Chunk, Conn, Deferred, Phase, Timer};
use super::core::{Budgets, Core, FIRST_ID, Handler, READ_CHUNK, Reactor, WAKER, readable};
use super::table::{Answer, Completion, Outcome, Table};
use super::{SHUTDOWN_GRACE, Shared};

/// Why a request is refused: the error frame's code and message.
type Refusal = (u8, String);

/// How soon a shard looks again for room for its starved frames and
/// answers (room a shard frees does not wake the others).
const STARVED_RETRY: Duration = Duration::from_millis(10);

/// How a shard reaches another: the parked requests of its connections
/// that a write completed, and the waker that tells it to look.
#[derive(Clone)]
pub(super) struct Peer {
    pub(super) woken: Sender<usize>,
    pub(super) waker: Arc<Waker>,
}

/// What every shard shares.
#[derive(Clone)]
pub(super) struct Shards {
    pub(super) table: Arc<Mutex<Table>>,
    /// The bytes the shards' connections hold, each way.
    pub(super) budgets: Arc<Budgets>,
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
    /// Connections waiting for room in the bytes in flight: to read more of
    /// a frame, or for the answer of a request read whole.
    starved: VecDeque<usize>,
    /// Parked requests the last request completed.
    woken: Vec<usize>,
    /// This shard's completed parked requests whose answers found no room
    /// yet, oldest first.
    unsent: VecDeque<usize>,
    /// Connections the gate hands over.
    inbox: Receiver<Conn>,
    /// This shard's parked requests completed by writes on other shards.
    completed: Receiver<usize>,
    /// The budgets' freed room when those waiting for it last looked:
    /// they look again only once it changed.
    seen_freed: (u64, u64),
}

/// One sessions loop.
pub(super) struct SessionsLoop {
    core: Core,
    sessions: Sessions,
}

impl SessionsLoop {
    /// Shard `me` of `shards`, taking connections from `inbox` and
    /// completed parked requests from `completed`.
    pub(super) fn new(
        shared: Arc<Shared>,
        poll: Poll,
        shards: Shards,
        me: usize,
        (inbox, completed): (Receiver<Conn>, Receiver<usize>),
    ) -> Self {
        let ids = (FIRST_ID + me, shards.peers.len());
        SessionsLoop {
            core: Core::new(Arc::clone(&shared), poll, Arc::clone(&shards.budgets), ids),
            sessions: Sessions {
                shared,
                shards,
                me,
                starved: VecDeque::new(),
                woken: Vec::new(),
                unsent: VecDeque::new(),
                inbox,
                completed,
                seen_freed: (0, 0),
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

    /// Answers the parked requests of this shard that other shards' writes
    /// completed.
    fn take_completed(&mut self) {
        let now = Instant::now();
        while let Ok(id) = self.sessions.completed.try_recv() {
            self.sessions.deliver(&mut self.core, id, now);
        }
        self.serve_ready();
    }

    fn serve_ready(&mut self) {
        for id in std::mem::take(&mut self.core.ready) {
            self.core.serve(id, &mut self.sessions);
        }
    }

    /// Gives what waits for room in the bytes in flight its turn again:
    /// completed parked requests' answers first, oldest first, then the
    /// connections waiting to read or to run a request.
    fn resume_starved(&mut self) {
        let budgets = &self.core.budgets;
        let freed = (budgets.input.freed(), budgets.output.freed());
        if freed == self.sessions.seen_freed {
            return;
        }
        self.sessions.seen_freed = freed;
        let now = Instant::now();
        for id in std::mem::take(&mut self.sessions.unsent) {
            self.sessions.deliver(&mut self.core, id, now);
        }
        self.serve_ready();
        for id in std::mem::take(&mut self.sessions.starved) {
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

    /// Waits for room in the bytes in flight (once in the queue).
    fn starve(&mut self, conn: &mut Conn, id: usize) {
        if !conn.starved {
            conn.starved = true;
            self.starved.push_back(id);
        }
    }

    /// Sends the parked requests the last request completed to their
    /// shards: answered here for this shard's connections.
    fn answer_woken(&mut self, core: &mut Core, now: Instant) {
        for id in std::mem::take(&mut self.woken) {
            let owner = self.shards.owner(id);
            if owner == self.me {
                self.deliver(core, id, now);
            } else if let Some(peer) = self.shards.peers.get(owner)
                && peer.woken.send(id).is_ok()
                && peer.waker.wake().is_err()
            {
                crate::trace::event!(warn, "store server: could not wake a sessions loop");
            }
        }
    }

    /// Answers the completed parked request of connection `id`, parked on
    /// this shard, when its answer has room; otherwise it waits in
    /// `unsent`.
    fn deliver(&mut self, core: &mut Core, id: usize, now: Instant) {
        let Some(mut conn) = core.conns.remove(&id) else {
            return;
        };
        if conn.parked {
            let completion = {
                let mut table = self.table();
                table.complete(id, |len| has_room(core, &conn, len))
            };
            match completion {
                Completion::Answer(answer) => {
                    conn.parked = false;
                    conn.set(Timer::Park, None);
                    send(core, &mut conn, answer, now);
                    core.ready.push(id);
                }
                Completion::NoRoom => self.unsent.push_back(id),
                Completion::NotReady => {}
            }
        }
        core.conns.insert(id, conn);
        core.reschedule(id);
    }

    /// Runs a request read whole: on the table when its answer has room
    /// in the bytes in flight, or later (deferred, the connection waiting
    /// for room).
    fn run(
        &mut self,
        core: &mut Core,
        conn: &mut Conn,
        id: usize,
        deferred: Deferred,
        now: Instant,
    ) {
        let io_timeout = core.io_timeout();
        let mut woken = std::mem::take(&mut self.woken);
        let outcome = {
            let mut table = self.table();
            let needed = table.answer_len(&deferred.request);
            if has_room(core, conn, needed) {
                Some(table.apply(id, deferred.request, now, &mut woken))
            } else {
                conn.deferred = Some(deferred);
                None
            }
        };
        self.woken = woken;
        match outcome {
            None => {
                if conn.deadline(Timer::Frame).is_none() {
                    conn.set(Timer::Frame, Some(now + io_timeout));
                }
                self.starve(conn, id);
            }
            Some(Outcome::Answer(answer)) => {
                conn.set(Timer::Frame, None);
                send(core, conn, answer, now);
            }
            Some(Outcome::Parked(deadline)) => {
                conn.set(Timer::Frame, None);
                conn.parked = true;
                conn.set(Timer::Park, Some(deadline));
            }
            Some(Outcome::Refuse(code, message)) => core.refuse(conn, id, code, message, now, self),
        }
        core.charge(conn, false);
        self.answer_woken(core, now);
    }
}

/// Whether connection `conn` has room for an answer of `len` bytes
/// (unsealed payload) among the answers in flight.
fn has_room(core: &Core, conn: &Conn, len: usize) -> bool {
    let Phase::Serving(session) = &conn.phase else {
        return false;
    };
    let frame = 4 + len + session.outbound_overhead();
    core.budgets.output.room(conn.charged_out) >= frame
}

/// Queues `answer` on `conn`, to be taken within the I/O timeout; a value
/// goes out shared, not copied.
fn send(core: &Core, conn: &mut Conn, answer: Answer, now: Instant) {
    let answer_by = now + core.io_timeout();
    let Phase::Serving(session) = &mut conn.phase else {
        return;
    };
    match answer {
        Answer::Other(response) => {
            let frame = session.seal(response.encode());
            conn.queue(&frame, answer_by);
        }
        Answer::Value(value) => {
            let head = value_head(value.len(), session.outbound_overhead());
            let trailer = session.seal_split(&head[4..], &value);
            let chunks = vec![
                Chunk::Owned(head),
                Chunk::Shared(value),
                Chunk::Owned(trailer),
            ];
            conn.queue_chunks(chunks, answer_by);
        }
    }
    core.charge(conn, false);
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
        let busy = conn.parked || conn.has_output() || conn.deferred.is_some();
        let bytes = payload.capacity();
        let Phase::Serving(session) = &mut conn.phase else {
            return;
        };
        let io_timeout = core.io_timeout();
        let shared = Arc::clone(&self.shared);
        match open(session, payload, busy, io_timeout, &shared.limits) {
            Ok(request) => self.run(core, conn, id, Deferred { request, bytes }, now),
            Err((code, message)) => core.refuse(conn, id, code, message, now, self),
        }
    }

    /// A request waiting for room for its answer tries again.
    fn on_turn(&mut self, core: &mut Core, conn: &mut Conn, id: usize, now: Instant) {
        if let Some(deferred) = conn.deferred.take() {
            self.run(core, conn, id, deferred, now);
        }
    }

    /// A connection reads within its share of the frames in flight; one
    /// whose request waits for room for its answer reads nothing (its
    /// peer's hang-up is still seen).
    fn read_room(&mut self, core: &Core, conn: &mut Conn, id: usize) -> usize {
        if conn.is_closing() {
            return READ_CHUNK;
        }
        let room = if conn.deferred.is_some() {
            0
        } else {
            readable(conn, core.budgets.input.room(conn.charged_in))
        };
        if room == 0 {
            self.starve(conn, id);
        }
        room
    }

    fn on_refuse(&mut self, conn: &mut Conn, id: usize) {
        if conn.parked {
            self.table().forget(id);
            conn.parked = false;
        }
    }

    /// A connection closed: its session keys go with it (before its slot,
    /// so that whoever sees the slot free sees the keys gone).
    fn on_finish(&mut self, conn: Conn, id: usize) {
        self.table().closed(id);
        drop(conn);
        self.shared
            .counts
            .authenticated
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// A parked request gets its timeout answer (unless its answer is
    /// already on its way); a frame or a request still waiting for room
    /// when its time is up, its refusal.
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
                if let Some(response) = expired {
                    conn.parked = false;
                    send(core, conn, Answer::Other(response), now);
                }
                true
            }
            Timer::Frame if conn.starved => {
                let message = format!(
                    "the server holds {} bytes for requests in progress, its \
                     max_in_flight_bytes of {}, and this request found no room for the rest of \
                     its frame or for its answer within io_timeout; retry when the load has \
                     passed, or raise max_in_flight_bytes where the server starts",
                    self.in_flight(core),
                    self.shared.options.in_flight_limit()
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
            self.take_completed();
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
        let starved = !self.sessions.starved.is_empty() || !self.sessions.unsent.is_empty();
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
            if conn.parked || conn.deferred.is_some() {
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

/// Opens a sealed request (or takes a plain one), refuses one whose stamp
/// says its client no longer waits for it, and decodes it within the
/// limits.
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
    if let Some(why) = opened
        .stamp
        .and_then(|stamp| stamp.refusal(session.age(), io_timeout))
    {
        return Err((code::INTEGRITY, why));
    }
    Request::decode_within(&opened.body, limits).map_err(|e| match e {
        DecodeError::OverLimit(detail) => (code::LIMIT, detail),
        e => (code::PROTOCOL, format!("malformed request: {e}")),
    })
}
