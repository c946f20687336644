//! One connection of an event loop: where it is (handshake, serving,
//! closing), the frame being assembled, the bytes waiting to go out, and
//! the deadlines it is under.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

use super::super::wire::{Frame, Incoming, Request, Session};
use super::handshake::Handshake;

/// Bytes waiting to go out: the connection's own, or a value shared with
/// the table and other answers.
pub(super) enum Chunk {
    Owned(Vec<u8>),
    Shared(Arc<[u8]>),
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Owned(bytes) => bytes,
            Chunk::Shared(bytes) => bytes,
        }
    }
}

/// A request read whole but not run yet: its answer found no room among
/// the bytes in flight.
pub(super) struct Deferred {
    pub(super) request: Request,
    /// The bytes of its frame, still counted as the connection's input.
    pub(super) bytes: usize,
}

/// Where a connection is.
pub(super) enum Phase {
    /// In its handshake (frames of at most 512 bytes, unsealed).
    Handshake(Handshake),
    /// Done with it: requests and answers, sealed when the session is.
    Serving(Box<Session>),
    /// An error frame is on its way out; then the write side is shut, and
    /// what the peer still sends is read and dropped, up to `left` bytes,
    /// so that closing with unread data does not reset the connection and
    /// destroy the error frame before the peer reads it.
    Closing { left: usize },
}

/// The deadlines a connection can be under, in the order they are
/// looked at when several have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Dropping what a refused peer still sends.
    Drain,
    /// The bytes waiting to go out.
    Write,
    /// The whole handshake, from accept.
    Handshake,
    /// The frame under way, from its first byte.
    Frame,
    /// A parked `get` or `wait`.
    Park,
}

const TIMERS: [Timer; 5] = [
    Timer::Drain,
    Timer::Write,
    Timer::Handshake,
    Timer::Frame,
    Timer::Park,
];

/// How long dropping what a refused peer still sends may take.
pub(super) const DRAIN_FOR: Duration = Duration::from_millis(500);

/// One connection.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) phase: Phase,
    pub(super) incoming: Incoming,
    /// Bytes read by a loop that does not take them (the gate, past the
    /// handshake), for the loop that does.
    pub(super) leftover: Vec<u8>,
    /// What waits to go out, the front chunk sent up to `out_at`.
    out: VecDeque<Chunk>,
    out_at: usize,
    /// The bytes of `out` not sent yet.
    out_left: usize,
    /// A request waiting for room for its answer.
    pub(super) deferred: Option<Deferred>,
    write_shut: bool,
    /// It ended its side (end of stream): close once the output is out.
    pub(super) peer_done: bool,
    /// Its loop was told the peer closed or reset (seen without reading:
    /// a connection waiting for room reads nothing).
    pub(super) peer_hung_up: bool,
    /// Its loop watches it for writing (it has output the socket did not
    /// take).
    pub(super) watching_writes: bool,
    /// It holds one of the server's slots (else it was refused at accept
    /// and is only being told why).
    pub(super) holds_slot: bool,
    /// Its request is parked in the table.
    pub(super) parked: bool,
    /// It waits in the loop's queue for room in the in-flight bytes.
    pub(super) starved: bool,
    /// The in-flight bytes the loop counts for it: frames being read, and
    /// answers not yet sent.
    pub(super) charged_in: usize,
    pub(super) charged_out: usize,
    deadlines: [Option<Instant>; TIMERS.len()],
    /// The deadline it has in the loop's timer heap, and the generation
    /// that tells that entry from stale ones.
    pub(super) scheduled: (Option<Instant>, u64),
}

impl Conn {
    pub(super) fn new(stream: TcpStream, phase: Phase, holds_slot: bool) -> Self {
        Conn {
            stream,
            phase,
            incoming: Incoming::default(),
            leftover: Vec::new(),
            out: VecDeque::new(),
            out_at: 0,
            out_left: 0,
            deferred: None,
            write_shut: false,
            peer_done: false,
            peer_hung_up: false,
            watching_writes: false,
            holds_slot,
            parked: false,
            starved: false,
            charged_in: 0,
            charged_out: 0,
            deadlines: [None; TIMERS.len()],
            scheduled: (None, 0),
        }
    }

    /// Sets (or with `None` clears) the deadline of `timer`.
    pub(super) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        // `TIMERS` lists every timer in declaration order.
        self.deadlines[timer as usize] = at;
    }

    /// The deadline of `timer`, if set.
    pub(super) fn deadline(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer as usize]
    }

    /// The earliest of its deadlines.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }

    /// Which deadline has passed at `now`, if any.
    pub(super) fn expired(&self, now: Instant) -> Option<Timer> {
        TIMERS
            .iter()
            .zip(&self.deadlines)
            .find(|(_, at)| at.is_some_and(|at| at <= now))
            .map(|(&timer, _)| timer)
    }

    /// The bytes it holds for its request: the frame under way, or the
    /// request waiting for room.
    pub(super) fn input_footprint(&self) -> usize {
        self.incoming.held()
            + self.leftover.capacity()
            + self.deferred.as_ref().map_or(0, |d| d.bytes)
    }

    /// The bytes of its answers not sent yet (a shared value counted in
    /// full: it fills the socket's buffers as much as an owned one).
    pub(super) fn output_footprint(&self) -> usize {
        self.out_left
    }

    pub(super) fn has_output(&self) -> bool {
        self.out_left > 0
    }

    pub(super) fn is_closing(&self) -> bool {
        matches!(self.phase, Phase::Closing { .. })
    }

    /// Queues `frame` to go out, all of it by `by`.
    pub(super) fn queue(&mut self, frame: &Frame, by: Instant) {
        self.queue_chunks(vec![Chunk::Owned(frame.as_bytes().to_vec())], by);
    }

    /// Queues a frame in pieces to go out, all of it by `by`.
    pub(super) fn queue_chunks(&mut self, chunks: Vec<Chunk>, by: Instant) {
        if !self.has_output() {
            self.out.clear();
            self.out_at = 0;
            self.set(Timer::Write, Some(by));
        }
        for chunk in chunks {
            self.out_left += chunk.bytes().len();
            self.out.push_back(chunk);
        }
    }

    /// Sends `frame` (an error) and closes: the frame under way is
    /// dropped, then up to `drain` bytes the peer still sends.
    pub(super) fn close_with(&mut self, frame: &Frame, drain: usize, by: Instant) {
        self.incoming = Incoming::default();
        self.deferred = None;
        self.phase = Phase::Closing { left: drain };
        for timer in [Timer::Handshake, Timer::Frame, Timer::Park] {
            self.set(timer, None);
        }
        self.queue(frame, by);
    }

    /// Writes what the socket takes now.
    ///
    /// Once all is out, the memory is freed, and a closing connection shuts its
    /// write side and starts draining. An error means the connection is gone.
    pub(super) fn flush(&mut self, now: Instant) -> io::Result<()> {
        while let Some(front) = self.out.front() {
            let rest = &front.bytes()[self.out_at..];
            if rest.is_empty() {
                self.out.pop_front();
                self.out_at = 0;
                continue;
            }
            match (&self.stream).write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_at += n;
                    self.out_left -= n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out = VecDeque::new();
        self.out_at = 0;
        self.set(Timer::Write, None);
        if self.is_closing() && !self.write_shut {
            self.write_shut = true;
            let _ = self.stream.shutdown(Shutdown::Write);
            self.set(Timer::Drain, Some(now + DRAIN_FOR));
        }
        Ok(())
    }

    /// Whether it is done: a closing connection once its refusal is out and
    /// its peer has ended its side or sent all it may; any other once its
    /// peer ended its side and nothing is left to send.
    pub(super) fn is_done(&self) -> bool {
        if self.has_output() {
            return false;
        }
        match self.phase {
            Phase::Closing { left } => self.write_shut && (left == 0 || self.peer_done),
            _ => self.peer_done,
        }
    }
}
