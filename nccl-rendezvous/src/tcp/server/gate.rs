//! The gate: the loop that accepts connections, decides who gets a slot
//! (`admission`), runs every handshake, tells the refused why, and hands
//! each authenticated connection to the sessions loop. Floods of
//! connections that never authenticate cost this thread alone: the
//! sessions loop, serving the ranks, keeps its CPU.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll, Token, Waker};

use super::super::descriptors;
use super::super::wire::{Response, code};
use super::Shared;
use super::admission::{Admission, Slots, Source, same_host_unless_secret};
use super::conn::{Conn, Phase, Timer};
use super::core::{Budgets, Core, DRAIN_BEFORE_HANDSHAKE, FIRST_ID, Handler, LISTENER, Reactor};
use super::handshake::{Handshake, Step};
use super::options::GatePriority;

/// Connections accepted in one round before the others' events are
/// served: peers that reconnect as fast as they can must not keep the gate
/// accepting.
const ACCEPTS_PER_ROUND: usize = 64;
/// The most refused connections being told why at once; past it a refusal
/// is sent without waiting for the peer to read it (best effort).
const MAX_REFUSING: usize = 16;
/// How long a connection refused at once has to read why.
const REFUSAL_DRAIN: Duration = Duration::from_millis(200);
/// When accepting fails for want of descriptors, or for errors that repeat,
/// the gate tries again this much later.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// How much lower the gate's scheduling priority is than the sessions
/// loop's (a nice value).
#[cfg(target_os = "linux")]
const GATE_NICENESS: i32 = 10;

/// Lowers the calling thread's scheduling priority as `priority` says (on
/// Linux: its own nice value +10, or `SCHED_IDLE`), so that work for peers
/// that have not authenticated yields the CPU to the ranks' requests when
/// both want it.
///
/// Best effort: a system that refuses `SCHED_IDLE` gets the nice value, and one
/// that refuses that leaves the priority as it was.
pub(super) fn yield_to_sessions(priority: GatePriority) {
    #[cfg(target_os = "linux")]
    {
        if priority == GatePriority::Idle && schedule_idle().is_ok() {
            return;
        }
        use rustix::process::{getpriority_process, setpriority_process};
        let thread = Some(rustix::thread::gettid());
        // Nice values stop at 19, the lowest priority.
        let lowered = getpriority_process(thread).map(|nice| (nice + GATE_NICENESS).min(19));
        if lowered
            .and_then(|nice| setpriority_process(thread, nice))
            .is_err()
        {
            crate::trace::event!(
                debug,
                "store server: could not lower the gate thread's priority"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = priority;
}

/// Puts the calling thread under `SCHED_IDLE` (any thread may lower its
/// own policy so, without privileges).
#[cfg(target_os = "linux")]
fn schedule_idle() -> Result<(), thread_priority::Error> {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id,
    };
    set_thread_priority_and_policy(
        thread_native_id(),
        thread_priority::ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    )
}

/// Where authenticated connections go: each sessions loop's inbox and the
/// waker that tells it to look, taken in turn.
pub(super) struct Handoff {
    pub(super) shards: Vec<(Sender<Conn>, Arc<Waker>)>,
    pub(super) next: usize,
}

impl Handoff {
    /// Hands `conn` to the next sessions loop; gives it back when that
    /// loop is gone.
    fn send(&mut self, conn: Conn) -> Option<Conn> {
        let Some((inbox, waker)) = self.shards.get(self.next % self.shards.len().max(1)) else {
            return Some(conn);
        };
        self.next = self.next.wrapping_add(1);
        if let Err(refused) = inbox.send(conn) {
            return Some(refused.0);
        }
        if waker.wake().is_err() {
            crate::trace::event!(warn, "store server: could not wake a sessions loop");
        }
        None
    }
}

/// What the gate keeps beside its connections.
struct Gate {
    shared: Arc<Shared>,
    listener: Option<TcpListener>,
    slots: Slots,
    handoff: Handoff,
    /// A descriptor held back for the moment the process has none left:
    /// freed, it lets the gate accept a waiting client and tell it why.
    spare: Option<File>,
    refusing: usize,
    accept_retry: Option<Instant>,
    /// The last round stopped accepting with connections still waiting.
    accept_more: bool,
    /// Newcomers are left in the listen queue until a handshake slot
    /// frees or passes its deadline.
    holding_back: bool,
    /// Connections that finished their handshake this round, for the
    /// sessions loop.
    authenticated: Vec<usize>,
}

/// The gate's loop.
pub(super) struct GateLoop {
    core: Core,
    gate: Gate,
}

impl GateLoop {
    pub(super) fn new(
        shared: Arc<Shared>,
        poll: Poll,
        mut listener: TcpListener,
        lowered: Option<String>,
        handoff: Handoff,
    ) -> io::Result<Self> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let mut seed = [0u8; 8];
        // Any seed will do if the system has no random bytes to give: the
        // refusals are still spread, only predictably.
        let _ = getrandom::fill(&mut seed);
        let slots = Slots::new(
            shared.max_connections,
            lowered,
            &shared.options,
            shared.counts.clone(),
            u64::from_ne_bytes(seed),
        );
        Ok(GateLoop {
            core: Core::new(
                Arc::clone(&shared),
                poll,
                Arc::new(Budgets::unbounded()),
                (FIRST_ID, 1),
            ),
            gate: Gate {
                shared,
                listener: Some(listener),
                slots,
                handoff,
                spare: File::open("/dev/null").ok(),
                refusing: 0,
                accept_retry: None,
                accept_more: false,
                holding_back: false,
                authenticated: Vec::new(),
            },
        })
    }

    /// Accepts the connections waiting, up to a round's worth, unless the
    /// handshake slots are all taken by connections within their
    /// deadlines: then they wait in the listen queue, in order.
    fn accept_round(&mut self) {
        let mut failures = 0;
        for _ in 0..ACCEPTS_PER_ROUND {
            let Some(listener) = &self.gate.listener else {
                return;
            };
            let now = Instant::now();
            if self.gate.slots.must_hold_back(now) {
                self.gate.holding_back = true;
                self.gate.accept_retry = self.gate.slots.next_due(now);
                return;
            }
            self.gate.holding_back = false;
            match listener.accept() {
                Ok((stream, peer)) => {
                    failures = 0;
                    self.admit(stream, peer, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if descriptors::is_exhausted(&e) => return self.out_of_descriptors(now),
                // A connection reset before it was accepted, say: keep
                // serving, and try again soon if it goes on.
                Err(_) => {
                    failures += 1;
                    if failures >= 64 {
                        self.gate.accept_retry = Some(now + ACCEPT_RETRY);
                        return;
                    }
                }
            }
        }
        self.gate.accept_more = true;
    }

    /// With no descriptor left, frees the spare one to accept a waiting
    /// client and tell it why, instead of leaving it to time out in the
    /// backlog.
    fn out_of_descriptors(&mut self, now: Instant) {
        drop(self.gate.spare.take());
        if let Some(listener) = &self.gate.listener
            && let Ok((stream, _)) = listener.accept()
        {
            let message = format!(
                "the server has no file descriptor left for another connection ({}); raise the \
                 limit (ulimit -n) where the server runs, or close clients that are no longer \
                 needed",
                descriptors::exhausted_note()
            );
            self.refuse_at_accept(stream, code::TOO_MANY_CONNECTIONS, message, now);
        }
        self.gate.accept_retry = Some(now + ACCEPT_RETRY);
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr, now: Instant) {
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&self.core.shared);
        let options = &shared.options;
        if let Err(message) = same_host_unless_secret(peer, stream.local_addr(), options) {
            return self.refuse_at_accept(stream, code::AUTH, message, now);
        }
        let source = Source::of(peer);
        let (evict, waits) = match self.gate.slots.admit(source, now) {
            Admission::Refuse(message) => {
                return self.refuse_at_accept(stream, code::TOO_MANY_CONNECTIONS, message, now);
            }
            Admission::Admit { evict } => (evict, false),
            Admission::Wait => (None, true),
        };
        if let Some(victim) = evict {
            self.evict(victim);
        }
        let handshake_by = now + options.handshake_timeout.max(Duration::from_millis(1));
        // In the lobby it holds no slot, and nothing of it is read.
        let mut conn = Conn::new(stream, Phase::Handshake(Handshake::Hello), !waits);
        conn.set(Timer::Handshake, Some(handshake_by));
        if let Some(id) = self.core.adopt(conn) {
            if waits {
                self.gate.slots.wait(id, source);
            } else {
                self.gate.slots.enter(id, source, now);
            }
        }
    }

    /// Gives the newcomers in the lobby whose address has room (a
    /// connection of it done, gone, or past its deadline) their slots.
    fn admit_from_lobby(&mut self, now: Instant) {
        while let Some((id, source, evict)) = self.gate.slots.next_from_lobby(now) {
            if let Some(victim) = evict {
                self.evict(victim);
            }
            let Some(conn) = self.core.conns.get_mut(&id) else {
                continue;
            };
            conn.holds_slot = true;
            self.gate.slots.enter(id, source, now);
            self.serve(id);
        }
    }

    /// Tells a connection the server will not serve why, and closes it:
    /// after waiting a moment for what it sends first, when not too many
    /// are being refused at once.
    fn refuse_at_accept(&mut self, stream: TcpStream, code: u8, message: String, now: Instant) {
        crate::trace::event!(warn, %message, "store server: refusing a connection");
        let frame = Response::Error { code, message }.encode();
        if self.gate.refusing >= MAX_REFUSING {
            let _ = io::Write::write(&mut &stream, frame.as_bytes());
            return;
        }
        let Some(id) = self.core.add(stream, Phase::Closing { left: 0 }, false) else {
            return;
        };
        self.gate.refusing += 1;
        if let Some(conn) = self.core.conns.get_mut(&id) {
            conn.close_with(&frame, DRAIN_BEFORE_HANDSHAKE, now + REFUSAL_DRAIN);
        }
        self.serve(id);
    }

    /// Closes a connection still in its handshake to make room, telling it
    /// why (as far as its socket takes it at once).
    fn evict(&mut self, id: usize) {
        let message = self.gate.slots.eviction_notice();
        crate::trace::event!(warn, %message, "store server: dropping a connection in its handshake");
        if let Some(conn) = self.core.conns.get(&id) {
            let frame = Response::Error {
                code: code::TOO_MANY_CONNECTIONS,
                message,
            }
            .encode();
            let _ = io::Write::write(&mut &conn.stream, frame.as_bytes());
        }
        self.core.finish(id, &mut self.gate);
    }
}

impl Handler for Gate {
    /// The handshakes' frames, but none of a connection in the lobby.
    fn takes_frames(&self, conn: &Conn) -> bool {
        match conn.phase {
            Phase::Serving(_) => false,
            Phase::Handshake(_) => conn.holds_slot,
            Phase::Closing { .. } => true,
        }
    }

    fn on_frame(
        &mut self,
        core: &mut Core,
        conn: &mut Conn,
        id: usize,
        payload: Vec<u8>,
        now: Instant,
    ) {
        let answer_by = conn.deadline(Timer::Handshake).unwrap_or(now);
        let Phase::Handshake(handshake) = &mut conn.phase else {
            return;
        };
        let shared = Arc::clone(&core.shared);
        let secret = shared.options.secret.as_deref();
        match handshake.step(payload, secret, shared.limits.announced) {
            Step::Reply(frame) => {
                conn.queue(&frame, answer_by);
                self.slots.stepped(id, now);
            }
            Step::Done(frame, session) => {
                conn.queue(&frame, now + core.io_timeout());
                conn.phase = Phase::Serving(session);
                conn.set(Timer::Handshake, None);
                self.slots.promote(id);
                if self.holding_back {
                    self.accept_more = true;
                }
                // After this turn, the sessions loop takes it over.
                self.authenticated.push(id);
            }
            Step::Refuse(code, message) => core.refuse(conn, id, code, message, now, self),
        }
    }

    fn on_finish(&mut self, conn: Conn, id: usize) {
        let (phase, holds_slot) = (conn.phase, conn.holds_slot);
        drop(conn.stream);
        if self.slots.is_waiting(id) {
            self.slots.release(id);
            return;
        }
        if self.holding_back && holds_slot {
            self.accept_more = true;
        }
        match phase {
            // Authenticated, closed before the sessions loop took it.
            Phase::Serving(_) => {
                self.shared
                    .counts
                    .authenticated
                    .fetch_sub(1, Ordering::AcqRel);
            }
            _ if holds_slot => {
                self.slots.release(id);
            }
            _ => self.refusing = self.refusing.saturating_sub(1),
        }
    }
}

impl Reactor for GateLoop {
    fn core(&mut self) -> &mut Core {
        &mut self.core
    }

    fn on_token(&mut self, token: Token) {
        if token == LISTENER {
            self.accept_round();
        }
    }

    fn serve(&mut self, id: usize) {
        self.core.serve(id, &mut self.gate);
        self.hand_over_authenticated();
    }

    fn after_round(&mut self, now: Instant) {
        self.core.serve_again(&mut self.gate);
        if std::mem::take(&mut self.gate.accept_more) {
            self.accept_round();
        }
        if self.gate.accept_retry.is_some_and(|at| at <= now) {
            self.gate.accept_retry = None;
            self.accept_round();
        }
        self.core.fire_timers(now, &mut self.gate);
        self.admit_from_lobby(now);
        self.hand_over_authenticated();
        if self.gate.spare.is_none() {
            self.gate.spare = File::open("/dev/null").ok();
        }
    }

    fn wake_at(&self) -> (Option<Instant>, bool) {
        let lobby = (!self.gate.slots.lobby_is_empty())
            .then(|| self.gate.slots.next_due(Instant::now()))
            .flatten();
        let wake = [self.gate.accept_retry, lobby].into_iter().flatten().min();
        (wake, self.gate.accept_more)
    }

    fn begin_stop(&mut self, now: Instant) {
        if let Some(mut listener) = self.gate.listener.take() {
            let _ = self.core.poll.registry().deregister(&mut listener);
        }
        self.core.stopping = Some(now);
        let ids: Vec<usize> = self.core.conns.keys().copied().collect();
        for id in ids {
            self.core.finish(id, &mut self.gate);
        }
    }
}

impl GateLoop {
    /// Hands the connections that finished their handshake to the sessions
    /// loop (or closes them when it is gone).
    fn hand_over_authenticated(&mut self) {
        for id in std::mem::take(&mut self.gate.authenticated) {
            let Some(conn) = self.core.release(id) else {
                continue;
            };
            if let Some(refused) = self.gate.handoff.send(conn) {
                self.gate.on_finish(refused, id);
            }
        }
    }
}
