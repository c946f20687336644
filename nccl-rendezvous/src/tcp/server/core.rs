//! What the server's two event loops share: waiting on every socket at
//! once (epoll or kqueue, through `mio`), each connection's turn (send
//! what waits to go out, read what arrived, assemble frames, hand whole
//! ones to the loop's [`Handler`]), one heap for every connection's
//! deadline, and refusing a connection with an error frame. The gate
//! (`gate`) runs the handshakes, the sessions loop (`sessions`) the
//! requests; each is a [`Reactor`] that [`run`] drives.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::super::wire::{DecodeError, HANDSHAKE_MAX_FRAME, IncomingError, Response, Rules, code};
use super::Shared;
use super::budget::Budget;
use super::conn::{Conn, Phase, Timer};
use super::handshake::oversized;

/// The token of a loop's waker; the gate's listener has its own.
pub(super) const WAKER: Token = Token(0);
pub(super) const LISTENER: Token = Token(1);
/// The first connection id; ids below are the tokens above.
pub(super) const FIRST_ID: usize = 2;

/// Reads (of up to [`READ_CHUNK`] bytes) one connection gets per turn
/// before the others have theirs.
const READS_PER_TURN: usize = 16;
/// The most a connection's socket is read at once.
pub(super) const READ_CHUNK: usize = 64 << 10;
/// What a connection refused in its handshake may still send before it is
/// closed (its HELLO, say).
pub(super) const DRAIN_BEFORE_HANDSHAKE: usize = 4 << 10;
/// The same after the handshake: a real client's oversized request, not
/// an attacker's stream.
const DRAIN_AFTER_HANDSHAKE: usize = 4 << 20;

/// What a loop does with its connections, beyond their turns.
pub(super) trait Handler {
    /// A whole frame from `conn`.
    fn on_frame(
        &mut self,
        core: &mut Core,
        conn: &mut Conn,
        id: usize,
        payload: Vec<u8>,
        now: Instant,
    );

    /// At the start of `conn`'s turn, after its output went: work it left
    /// waiting (a request waiting for room for its answer).
    fn on_turn(&mut self, _core: &mut Core, _conn: &mut Conn, _id: usize, _now: Instant) {}

    /// Whether this loop takes `conn`'s frames (the gate stops once the
    /// handshake is done: what follows is the sessions loop's).
    fn takes_frames(&self, _conn: &Conn) -> bool {
        true
    }

    /// How many bytes `conn` may read now (its share of the frames in
    /// flight, see [`readable`]); a loop that says none gives it its turn
    /// again later.
    fn read_room(&mut self, _core: &Core, _conn: &mut Conn, _id: usize) -> usize {
        READ_CHUNK
    }

    /// `conn` is refused or closes: its request, if parked, is forgotten.
    fn on_refuse(&mut self, _conn: &mut Conn, _id: usize) {}

    /// `conn` closes for good: dropping it closes its socket, before the
    /// counts that say it is gone change.
    fn on_finish(&mut self, conn: Conn, id: usize);

    /// A deadline of `conn` passed that need not close it (a parked
    /// request's, a frame waiting for room); false closes it.
    fn on_expired(
        &mut self,
        _core: &mut Core,
        _conn: &mut Conn,
        _id: usize,
        _timer: Timer,
        _now: Instant,
    ) -> bool {
        false
    }
}

/// The bytes in flight, each way.
#[derive(Debug)]
pub(super) struct Budgets {
    pub(super) input: Budget,
    pub(super) output: Budget,
}

impl Budgets {
    /// Budgets that never refuse.
    pub(super) fn unbounded() -> Self {
        Budgets {
            input: Budget::unbounded(),
            output: Budget::unbounded(),
        }
    }
}

/// A loop's connections and what it keeps for them.
pub(super) struct Core {
    pub(super) poll: Poll,
    pub(super) shared: Arc<Shared>,
    pub(super) conns: HashMap<usize, Conn>,
    next_id: usize,
    /// Ids go up by this much: loops that share a table give their
    /// connections ids apart.
    id_stride: usize,
    /// Each connection's next deadline, with the generation that tells a
    /// current entry from stale ones.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    scratch: Vec<u8>,
    /// Connections to serve in this round (answered parked requests).
    pub(super) ready: Vec<usize>,
    /// Connections with bytes left unread when their turn ended.
    again: Vec<usize>,
    /// The bytes connections hold, frames being read and answers not yet
    /// sent, as counted in each connection's `charged_in` and
    /// `charged_out`: this loop's, and those of the loops that share them.
    pub(super) budgets: Arc<Budgets>,
    /// When stopping: until when answers already on their way may still go.
    pub(super) stopping: Option<Instant>,
}

impl Core {
    /// A loop's core, counting its connections' bytes in `budgets`, its
    /// ids `first_id`, then every `id_stride`.
    pub(super) fn new(
        shared: Arc<Shared>,
        poll: Poll,
        budgets: Arc<Budgets>,
        (first_id, id_stride): (usize, usize),
    ) -> Self {
        Core {
            poll,
            shared,
            conns: HashMap::new(),
            next_id: first_id,
            id_stride: id_stride.max(1),
            timers: BinaryHeap::new(),
            scratch: vec![0; READ_CHUNK],
            ready: Vec::new(),
            again: Vec::new(),
            budgets,
            stopping: None,
        }
    }

    /// The bytes connections hold now, both ways.
    pub(super) fn held(&self) -> usize {
        self.budgets.input.total() + self.budgets.output.total()
    }

    /// Counts what `conn` holds now in place of what it was charged (or,
    /// when it goes, nothing).
    pub(super) fn charge(&self, conn: &mut Conn, going: bool) {
        let (input, output) = if going {
            (0, 0)
        } else {
            (conn.input_footprint(), conn.output_footprint())
        };
        self.budgets.input.charge(&mut conn.charged_in, input);
        self.budgets.output.charge(&mut conn.charged_out, output);
    }

    /// Marks connection `id` as hung up by its peer, as its event says.
    fn hung_up(&mut self, id: usize) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.peer_hung_up = true;
        }
    }

    /// The I/O timeout (0 counts as 1 ms).
    pub(super) fn io_timeout(&self) -> Duration {
        self.shared.options.io_timeout.max(Duration::from_millis(1))
    }

    /// Watches a new connection in `phase`; `None` when it cannot be
    /// watched (it is dropped).
    pub(super) fn add(
        &mut self,
        stream: TcpStream,
        phase: Phase,
        holds_slot: bool,
    ) -> Option<usize> {
        self.adopt(Conn::new(stream, phase, holds_slot))
    }

    /// Watches a connection (new, or handed over by the other loop): for
    /// reading, and for writing while it has output the socket did not take.
    pub(super) fn adopt(&mut self, mut conn: Conn) -> Option<usize> {
        let id = self.next_id;
        self.next_id += self.id_stride;
        conn.watching_writes = conn.has_output();
        let interest = interest(conn.watching_writes);
        self.poll
            .registry()
            .register(&mut conn.stream, Token(id), interest)
            .ok()?;
        conn.charged_in = 0;
        conn.charged_out = 0;
        conn.scheduled = (None, 0);
        self.conns.insert(id, conn);
        self.reschedule(id);
        Some(id)
    }

    /// Stops watching a connection and returns it, to close it or hand it
    /// over.
    pub(super) fn release(&mut self, id: usize) -> Option<Conn> {
        let mut conn = self.conns.remove(&id)?;
        self.charge(&mut conn, true);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        Some(conn)
    }

    /// Gives connection `id` its turn, then every connection it readied.
    pub(super) fn serve(&mut self, id: usize, handler: &mut impl Handler) {
        self.ready.push(id);
        while let Some(id) = self.ready.pop() {
            let Some(mut conn) = self.conns.remove(&id) else {
                continue;
            };
            let alive = self.turn(&mut conn, id, Instant::now(), handler);
            self.settle(conn, id, alive, handler);
        }
    }

    /// Gives the connections whose turn ended with bytes left theirs.
    pub(super) fn serve_again(&mut self, handler: &mut impl Handler) {
        for id in std::mem::take(&mut self.again) {
            self.serve(id, handler);
        }
    }

    /// Puts a connection back after its turn, or closes it.
    fn settle(&mut self, mut conn: Conn, id: usize, alive: bool, handler: &mut impl Handler) {
        // Writable events only while output waits: otherwise every answer
        // acknowledged would wake the loop for nothing.
        let reregistered = conn.has_output() == conn.watching_writes || {
            conn.watching_writes = conn.has_output();
            let interest = interest(conn.watching_writes);
            let registry = self.poll.registry();
            registry
                .reregister(&mut conn.stream, Token(id), interest)
                .is_ok()
        };
        if !alive || !reregistered || conn.is_done() {
            self.charge(&mut conn, true);
            return self.close(conn, id, handler);
        }
        self.charge(&mut conn, false);
        self.conns.insert(id, conn);
        self.reschedule(id);
    }

    /// Closes a connection out of the map for good.
    fn close(&mut self, mut conn: Conn, id: usize, handler: &mut impl Handler) {
        handler.on_refuse(&mut conn, id);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        handler.on_finish(conn, id);
    }

    /// Closes connection `id` for good.
    pub(super) fn finish(&mut self, id: usize, handler: &mut impl Handler) {
        if let Some(conn) = self.release(id) {
            self.close(conn, id, handler);
        }
    }

    /// Output, then input; false when the connection is gone.
    fn turn(
        &mut self,
        conn: &mut Conn,
        id: usize,
        now: Instant,
        handler: &mut impl Handler,
    ) -> bool {
        if conn.flush(now).is_err() {
            return false;
        }
        handler.on_turn(self, conn, id, now);
        if !conn.leftover.is_empty() && handler.takes_frames(conn) {
            let leftover = std::mem::take(&mut conn.leftover);
            self.take_in(conn, id, &leftover, now, handler);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let alive = self.read(conn, id, &mut scratch, now, handler);
        self.scratch = scratch;
        alive && conn.flush(now).is_ok()
    }

    /// Reads and takes in what arrived, for a turn's worth of reads.
    fn read(
        &mut self,
        conn: &mut Conn,
        id: usize,
        scratch: &mut [u8],
        now: Instant,
        handler: &mut impl Handler,
    ) -> bool {
        for _ in 0..READS_PER_TURN {
            if conn.peer_done || !handler.takes_frames(conn) {
                return true;
            }
            let n = handler.read_room(self, conn, id).min(scratch.len());
            if n == 0 {
                // Waiting for room, it reads nothing; a peer that hung up
                // will never be answered, and its bytes are freed now.
                if conn.peer_hung_up {
                    conn.peer_done = true;
                    return conn.is_closing() || conn.has_output();
                }
                return true;
            }
            match (&conn.stream).read(&mut scratch[..n]) {
                // The peer ended its side: a request parked or under way
                // has nobody to answer; an answer on its way still goes.
                Ok(0) => {
                    conn.peer_done = true;
                    return conn.is_closing() || conn.has_output();
                }
                Ok(n) => {
                    self.take_in(conn, id, &scratch[..n], now, handler);
                    self.charge(conn, false);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
            if conn.flush(now).is_err() {
                return false;
            }
        }
        self.again.push(id);
        true
    }

    /// Takes in bytes read from the connection.
    fn take_in(
        &mut self,
        conn: &mut Conn,
        id: usize,
        bytes: &[u8],
        now: Instant,
        handler: &mut impl Handler,
    ) {
        let shared = Arc::clone(&self.shared);
        let mut rest = bytes;
        while !rest.is_empty() {
            if !handler.takes_frames(conn) {
                conn.leftover.extend_from_slice(rest);
                return;
            }
            let seal = match &mut conn.phase {
                Phase::Closing { left } => {
                    *left = left.saturating_sub(rest.len());
                    return;
                }
                Phase::Serving(session) => Some(session.inbound_overhead()),
                Phase::Handshake(_) => None,
            };
            let rules = match seal {
                Some(seal) => Rules {
                    max: shared.frame_limit,
                    requests: Some((&shared.limits, seal)),
                },
                None => Rules {
                    max: HANDSHAKE_MAX_FRAME,
                    requests: None,
                },
            };
            if seal.is_some() && conn.incoming.is_idle() {
                conn.set(Timer::Frame, Some(now + self.io_timeout()));
            }
            match conn.incoming.push(rest, &rules) {
                Ok((taken, whole)) => {
                    rest = &rest[taken..];
                    if let Some(payload) = whole {
                        conn.set(Timer::Frame, None);
                        handler.on_frame(self, conn, id, payload, now);
                    }
                }
                Err(refused) => {
                    let (code, message) = refusal(refused, seal.is_some(), shared.frame_limit);
                    self.refuse(conn, id, code, message, now, handler);
                }
            }
        }
    }

    /// Refuses the connection's request (or handshake) with an error frame,
    /// sealed when its session is, and closes it once the frame is out.
    pub(super) fn refuse(
        &mut self,
        conn: &mut Conn,
        id: usize,
        code: u8,
        message: String,
        now: Instant,
        handler: &mut impl Handler,
    ) {
        crate::trace::event!(warn, code, %message, "store server: refusing a request and closing its connection");
        handler.on_refuse(conn, id);
        let refusal = Response::Error { code, message }.encode();
        let answer_by = now + self.io_timeout();
        match &mut conn.phase {
            Phase::Serving(session) => {
                let frame = session.seal(refusal);
                conn.close_with(&frame, DRAIN_AFTER_HANDSHAKE, answer_by);
            }
            Phase::Handshake(_) | Phase::Closing { .. } => {
                let by = conn.deadline(Timer::Handshake).unwrap_or(answer_by);
                conn.close_with(&refusal, DRAIN_BEFORE_HANDSHAKE, by);
            }
        }
    }

    /// Puts a connection's next deadline in the heap, when it changed.
    pub(super) fn reschedule(&mut self, id: usize) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let next = conn.next_deadline();
        let (scheduled, generation) = conn.scheduled;
        if next == scheduled {
            return;
        }
        conn.scheduled = (next, generation + 1);
        if let Some(at) = next {
            self.timers.push(Reverse((at, id, generation + 1)));
        }
        // Stale entries are skipped as they come up; rebuild when they
        // outnumber the live ones.
        if self.timers.len() > 2 * self.conns.len() + 64 {
            self.timers = self
                .conns
                .iter()
                .filter_map(|(&id, c)| c.scheduled.0.map(|at| Reverse((at, id, c.scheduled.1))))
                .collect();
        }
    }

    /// The next deadline of any connection.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Whether some connection has bytes waiting for another turn.
    pub(super) fn has_more(&self) -> bool {
        !self.again.is_empty()
    }

    /// Handles every deadline passed at `now`.
    pub(super) fn fire_timers(&mut self, now: Instant, handler: &mut impl Handler) {
        while let Some(&Reverse((at, id, generation))) = self.timers.peek() {
            if at > now {
                return;
            }
            self.timers.pop();
            let current = self
                .conns
                .get(&id)
                .is_some_and(|c| c.scheduled == (Some(at), generation));
            if current {
                self.expire(id, now, handler);
            }
        }
    }

    /// A deadline of connection `id` passed: the handler may keep it (a
    /// parked request's timeout answer); a handshake, frame, answer or
    /// drain that ran out of time closes it.
    fn expire(&mut self, id: usize, now: Instant, handler: &mut impl Handler) {
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        let alive = match conn.expired(now) {
            None => true,
            Some(timer) => handler.on_expired(self, &mut conn, id, timer, now),
        };
        self.settle(conn, id, alive, handler);
        if alive {
            self.serve(id, handler);
        }
    }
}

/// How many bytes `conn` may read now, at most a chunk, when its memory
/// may grow by `room` more: what its frame's buffer has spare, and a
/// growth (by doubling) within `room`.
pub(super) fn readable(conn: &Conn, room: usize) -> usize {
    let held = conn.incoming.held();
    let mut n = READ_CHUNK;
    while n > 0 && conn.incoming.held_after(n) > held.saturating_add(room) {
        n /= 2;
    }
    n
}

/// What a connection is watched for.
fn interest(writes: bool) -> Interest {
    if writes {
        Interest::READABLE | Interest::WRITABLE
    } else {
        Interest::READABLE
    }
}

/// The refusal of a frame refused before it was whole.
fn refusal(refused: IncomingError, serving: bool, frame_limit: usize) -> (u8, String) {
    match refused {
        IncomingError::TooLarge(len) if serving => (
            code::TOO_LARGE,
            format!(
                "frame of {len} bytes exceeds this server's maximum frame size of {frame_limit} \
                 bytes"
            ),
        ),
        IncomingError::TooLarge(len) => (code::TOO_LARGE, oversized(len)),
        IncomingError::Refused(DecodeError::OverLimit(detail)) => (code::LIMIT, detail),
        IncomingError::Refused(e) => (code::PROTOCOL, format!("malformed request: {e}")),
    }
}

/// One of the server's loops, as [`run`] drives it.
pub(super) trait Reactor {
    fn core(&mut self) -> &mut Core;
    /// An event on a token that is no connection's (the waker, the
    /// listener).
    fn on_token(&mut self, token: Token);
    /// Gives connection `id` its turn.
    fn serve(&mut self, id: usize);
    /// After each round: deadlines, deferred work.
    fn after_round(&mut self, now: Instant);
    /// When the loop must wake besides its connections' deadlines, and
    /// whether it has work for right now.
    fn wake_at(&self) -> (Option<Instant>, bool);
    /// Starts stopping: the server is being dropped.
    fn begin_stop(&mut self, now: Instant);
}

/// Runs a loop until it has stopped and its grace ended or its
/// connections closed.
pub(super) fn run(reactor: &mut impl Reactor) {
    let mut events = Events::with_capacity(1024);
    loop {
        let now = Instant::now();
        let core = reactor.core();
        if core
            .stopping
            .is_some_and(|until| core.conns.is_empty() || now >= until)
        {
            return;
        }
        let deadline = core.next_deadline();
        let (extra, busy) = reactor.wake_at();
        let timeout = if busy || reactor.core().has_more() {
            Some(Duration::ZERO)
        } else {
            [deadline, extra, reactor.core().stopping]
                .into_iter()
                .flatten()
                .min()
                .map(|at| at.saturating_duration_since(now))
        };
        if let Err(e) = reactor.core().poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            crate::trace::event!(error, error = %e, "store server: an event loop cannot wait on its sockets; stopping");
            return;
        }
        for event in events.iter() {
            match event.token() {
                Token(id) if id >= FIRST_ID => {
                    if event.is_read_closed() || event.is_error() {
                        reactor.core().hung_up(id);
                    }
                    reactor.serve(id)
                }
                token => reactor.on_token(token),
            }
        }
        let now = Instant::now();
        let stop = reactor.core().shared.stop.load(Ordering::Acquire);
        if stop && reactor.core().stopping.is_none() {
            reactor.begin_stop(now);
        }
        reactor.after_round(now);
    }
}
