//! The sessions loop: serves the requests of the connections the gate
//! hands over once authenticated. It opens and checks each request (its
//! tag, its stamp, its limits), runs it on the table, parks the `get`s and
//! `wait`s whose keys are missing and answers them when a write sets
//! their keys or their deadline passes, keeps the bytes in flight within
//! their bound, and answers every parked request when the server stops.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use mio::{Poll, Token};

use super::super::wire::{DecodeError, Request, RequestLimits, Response, Session, code};
use super::conn::{Conn, Phase, Timer};
use super::core::{Core, Handler, Reactor, WAKER};
use super::table::{Outcome, Table};
use super::{SHUTDOWN_GRACE, Shared};
use crate::memory::Quota;

/// Why a request is refused: the error frame's code and message.
type Refusal = (u8, String);

/// What the sessions loop keeps beside its connections.
struct Sessions {
    shared: Arc<Shared>,
    table: Table,
    in_flight_limit: usize,
    /// Connections waiting for room in the in-flight bytes.
    starved: VecDeque<usize>,
    /// Parked requests a write completed, with their answers.
    woken: Vec<(usize, Response)>,
    /// Connections the gate hands over.
    inbox: Receiver<Conn>,
}

/// The sessions loop.
pub(super) struct SessionsLoop {
    core: Core,
    sessions: Sessions,
}

impl SessionsLoop {
    pub(super) fn new(shared: Arc<Shared>, poll: Poll, inbox: Receiver<Conn>) -> Self {
        let options = &shared.options;
        let in_flight_limit = options.in_flight_limit();
        let quota = Quota {
            max_keys: options.max_stored_keys,
            max_bytes: options.max_stored_bytes,
        };
        let table = Table::new(quota, in_flight_limit / 2, options.max_wait);
        SessionsLoop {
            core: Core::new(Arc::clone(&shared), poll),
            sessions: Sessions {
                shared,
                table,
                in_flight_limit,
                starved: VecDeque::new(),
                woken: Vec::new(),
                inbox,
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

    /// Gives the connections waiting for room in the in-flight bytes their
    /// turn, as long as there is room.
    fn resume_starved(&mut self) {
        while self.in_flight() < self.sessions.in_flight_limit {
            let Some(id) = self.sessions.starved.pop_front() else {
                return;
            };
            if let Some(conn) = self.core.conns.get_mut(&id) {
                conn.starved = false;
                self.core.serve(id, &mut self.sessions);
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.core.held + self.sessions.table.parked_bytes()
    }
}

impl Sessions {
    /// Queues the answers of the parked requests the last request
    /// completed, and readies their connections.
    fn answer_woken(&mut self, core: &mut Core, answer_by: Instant) {
        for (id, response) in self.woken.drain(..) {
            let Some(conn) = core.conns.get_mut(&id) else {
                continue;
            };
            conn.parked = false;
            conn.set(Timer::Park, None);
            if let Phase::Serving(session) = &mut conn.phase {
                let frame = session.seal(response.encode());
                conn.queue(&frame, answer_by);
            }
            core.ready.push(id);
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
        let answer_by = now + io_timeout;
        let shared = Arc::clone(&self.shared);
        let request = match open(session, payload, busy, io_timeout, &shared.limits) {
            Ok(request) => request,
            Err((code, message)) => return core.refuse(conn, id, code, message, now, self),
        };
        match self.table.apply(id, request, now, &mut self.woken) {
            Outcome::Answer(response) => {
                let frame = session.seal(response.encode());
                conn.queue(&frame, answer_by);
            }
            Outcome::Parked(deadline) => {
                conn.parked = true;
                conn.set(Timer::Park, Some(deadline));
            }
            Outcome::Refuse(code, message) => core.refuse(conn, id, code, message, now, self),
        }
        self.answer_woken(core, answer_by);
    }

    /// No more of a request's frame is read while the in-flight bytes are
    /// full; a parked one is read on, to see its connection close.
    fn may_read(&mut self, core: &Core, conn: &mut Conn, id: usize) -> bool {
        let held = core.held.saturating_sub(conn.charged) + conn.footprint();
        let full = held + self.table.parked_bytes() >= self.in_flight_limit;
        if !full || conn.parked || conn.is_closing() {
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
            self.table.forget(id);
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

    /// A parked request gets its timeout answer; a frame still waiting for
    /// room when its time is up, its refusal.
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
                if let Some(response) = self.table.expire(id, now)
                    && let Phase::Serving(session) = &mut conn.phase
                {
                    let frame = session.seal(response.encode());
                    conn.queue(&frame, now + core.io_timeout());
                }
                conn.parked = false;
                conn.set(Timer::Park, None);
                true
            }
            Timer::Frame if conn.starved => {
                let message = format!(
                    "the server holds {} bytes for requests in progress, its \
                     max_in_flight_bytes of {}, and this request found no room for the rest of \
                     its frame within io_timeout; retry when the load has passed, or raise \
                     max_in_flight_bytes where the server starts",
                    core.held + self.table.parked_bytes(),
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
        (None, false)
    }

    /// Answers parked requests with an error, and closes every connection
    /// that has nothing left to send; the others get until the grace ends.
    fn begin_stop(&mut self, now: Instant) {
        self.take_handed_over();
        self.core.stopping = Some(now + SHUTDOWN_GRACE);
        let ids: Vec<usize> = self.core.conns.keys().copied().collect();
        for id in ids {
            let Some(conn) = self.core.conns.get_mut(&id) else {
                continue;
            };
            if conn.parked {
                self.sessions.table.forget(id);
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

impl SessionsLoop {
    /// Publishes the figures of [`TcpStoreServer::stats`](super::TcpStoreServer::stats)
    /// that only this loop knows.
    fn publish(&self) {
        let published = &self.core.shared.published;
        published
            .parked_requests
            .store(self.sessions.table.parked(), Ordering::Relaxed);
        published
            .in_flight_bytes
            .store(self.in_flight(), Ordering::Relaxed);
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
