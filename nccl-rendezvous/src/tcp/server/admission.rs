//! Who gets a slot. Without a secret, only clients of this host (unless
//! told otherwise). Then the slots: connections still in their handshake
//! may take only some of them (the rest are kept for authenticated
//! sessions), few from any one address, fewer at random as they fill up
//! (as sshd's `MaxStartups`). Each step of a handshake has a short
//! deadline (the client's `HELLO` from accept, its `PROOF` from the
//! server's `HELLO`); a connection past it gives way to a newcomer when
//! the slots are full, picked at random among those past theirs (within
//! the newcomer's address when that address has all it may have), so an
//! attacker can neither hold a slot by staying silent nor aim at a rank's
//! handshake, which finishes within its deadlines. A newcomer from an
//! address that has all its slots waits, first in first out, for one of
//! them to pass its deadline, and the gate stops accepting while every
//! handshake slot is taken and none has passed its deadline: peers that
//! reconnect as soon as they are dropped take their turn behind the ranks
//! that came first instead of racing them for each freed slot.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::TcpStoreServerOptions;

/// Whether a client at `peer` may start a handshake: always with a secret
/// (it must then prove it holds it) or when told to take anyone; otherwise
/// only from this host (loopback, or the address it connected to, which a
/// client on another host cannot have).
pub(super) fn same_host_unless_secret(
    peer: SocketAddr,
    local: io::Result<SocketAddr>,
    opts: &TcpStoreServerOptions,
) -> Result<(), String> {
    if opts.secret.is_some() || opts.allow_unauthenticated_remote {
        return Ok(());
    }
    let peer_ip = peer.ip().to_canonical();
    let same_host =
        peer_ip.is_loopback() || local.is_ok_and(|local| local.ip().to_canonical() == peer_ip);
    if same_host {
        return Ok(());
    }
    crate::trace::event!(warn, %peer, "store server: refusing a client from another host: no secret is set");
    Err(format!(
        "this server has no secret, so it accepts clients of its own host only, and this client \
         connects from {peer_ip}; set the same NCCL_RS_STORE_SECRET on every rank \
         (TcpStoreServerOptions::with_secret and TcpStoreOptions::with_secret), or, on a network \
         where everyone who can reach the port may read and write every key, set \
         NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1 where the server starts \
         (TcpStoreServerOptions::with_unauthenticated_remote)"
    ))
}

/// Where a connection comes from, as the per-address cap counts: an IPv4
/// address, or an IPv6 /64 network (what one host is commonly given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Source(IpAddr);

impl Source {
    pub(super) fn of(peer: SocketAddr) -> Self {
        Source(match peer.ip().to_canonical() {
            IpAddr::V6(ip) => {
                let network = u128::from(ip) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(network))
            }
            v4 => v4,
        })
    }
}

/// The live counts of the connections holding a slot, shared with the
/// server's handle and the sessions loop.
#[derive(Debug, Clone, Default)]
pub(super) struct Counts {
    pub(super) authenticated: Arc<AtomicUsize>,
    pub(super) handshaking: Arc<AtomicUsize>,
}

/// What to do with a new connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admission {
    /// Serve it; first close this connection still in its handshake, to
    /// make room.
    Admit { evict: Option<usize> },
    /// Hold it, unread, until a connection of its address passes a
    /// deadline ([`Slots::next_from_lobby`]).
    Wait,
    /// Refuse it with this message.
    Refuse(String),
}

/// At most this share of new connections is refused at random, when the
/// handshaking slots are all but full.
const MAX_EARLY_DROP: f64 = 0.5;
/// How long each step of a handshake may take before its connection may
/// give way to a newcomer (or half the handshake timeout): an honest step
/// is a round trip and an HMAC.
const STEP_DEADLINE: Duration = Duration::from_millis(500);

/// A connection in its handshake.
#[derive(Debug, Clone, Copy)]
struct Handshaking {
    source: Source,
    /// When its current step is due.
    due: Instant,
}

/// The server's slots: how many are taken, by whom, and who is next to go.
#[derive(Debug)]
pub(super) struct Slots {
    max_connections: usize,
    /// Why `max_connections` is below the option, for refusals.
    lowered: Option<String>,
    max_handshaking: usize,
    per_source: usize,
    step: Duration,
    /// The connections holding a slot, as the server's handle reads them:
    /// authenticated (counted up here, down by the sessions loop as they
    /// close), and in their handshake (as many as `handshaking` holds).
    counts: Counts,
    handshaking: HashMap<usize, Handshaking>,
    by_source: HashMap<Source, usize>,
    /// Newcomers from addresses that have all their slots, in the order
    /// they came, per address.
    lobby: HashMap<Source, VecDeque<usize>>,
    waiting: HashSet<usize>,
    rng: u64,
}

impl Slots {
    /// The slots of a server of `max_connections` (already fitted to the
    /// descriptor limit, `lowered` saying why when it was lowered), with
    /// `options`' bounds on handshakes, keeping `counts`.
    ///
    /// `seed` seeds the random refusals and evictions.
    pub(super) fn new(
        max_connections: usize,
        lowered: Option<String>,
        options: &TcpStoreServerOptions,
        counts: Counts,
        seed: u64,
    ) -> Self {
        Slots {
            max_connections,
            lowered,
            max_handshaking: options.max_unauthenticated.min(max_connections / 2).max(1),
            per_source: options.max_unauthenticated_per_address,
            step: STEP_DEADLINE.min(options.handshake_timeout / 2),
            counts,
            handshaking: HashMap::new(),
            by_source: HashMap::new(),
            lobby: HashMap::new(),
            waiting: HashSet::new(),
            // A zero state would stay zero.
            rng: seed | 1,
        }
    }

    /// Connections holding a slot.
    fn open(&self) -> usize {
        self.counts.authenticated.load(Ordering::Acquire) + self.handshaking.len()
    }

    /// Whether the gate should leave newcomers in the listen queue: every
    /// handshake slot is taken and none has passed its step's deadline.
    ///
    /// Then the queue keeps their order, and reconnecting peers do not race the
    /// ranks ahead of them for each slot that frees.
    pub(super) fn must_hold_back(&mut self, now: Instant) -> bool {
        self.handshaking.len() >= self.max_handshaking && self.past_due(None, now).is_none()
    }

    /// When the next handshake step after `now` falls due (then a slot may
    /// be taken).
    pub(super) fn next_due(&self, now: Instant) -> Option<Instant> {
        self.handshaking
            .values()
            .map(|h| h.due)
            .filter(|&due| due > now)
            .min()
    }

    /// Decides on a new connection from `source`, at `now`.
    ///
    /// Changes nothing: the caller closes the connection to evict (then
    /// [`Slots::release`]) and [`Slots::enter`]s the newcomer, or puts it in
    /// the lobby ([`Slots::wait`]).
    pub(super) fn admit(&mut self, source: Source, now: Instant) -> Admission {
        let handshaking = self.handshaking.len();
        let from_source = self.by_source.get(&source).copied().unwrap_or(0);
        if from_source >= self.per_source {
            // Those already waiting for this address go first.
            let queued = self.lobby.get(&source).map_or(0, VecDeque::len);
            if queued == 0
                && let Some(victim) = self.past_due(Some(source), now)
            {
                return Admission::Admit {
                    evict: Some(victim),
                };
            }
            if queued < self.per_source && self.waiting.len() < self.max_handshaking {
                return Admission::Wait;
            }
            return Admission::Refuse(format!(
                "{from_source} connections from {} are still in their handshake, this server's \
                 max_unauthenticated_per_address, and {queued} more wait for one of them to \
                 finish or pass its deadline",
                source.0
            ));
        }
        let start = self.max_handshaking / 2;
        if handshaking >= start && handshaking < self.max_handshaking {
            let fill = (handshaking - start + 1) as f64 / (self.max_handshaking - start) as f64;
            if self.uniform() < MAX_EARLY_DROP * fill {
                return Admission::Refuse(format!(
                    "{handshaking} connections are still in their handshake, over half this \
                     server's max_unauthenticated of {}, so new ones are refused at random",
                    self.max_handshaking
                ));
            }
        }
        let needs_room = handshaking >= self.max_handshaking || self.open() >= self.max_connections;
        if !needs_room {
            return Admission::Admit { evict: None };
        }
        if let Some(victim) = self.past_due(None, now) {
            return Admission::Admit {
                evict: Some(victim),
            };
        }
        Admission::Refuse(if handshaking >= self.max_handshaking {
            format!(
                "{handshaking} connections are still in their handshake, this server's \
                 max_unauthenticated, none of them past its deadline"
            )
        } else {
            let max = self.max_connections;
            let mut message = format!(
                "the server already has {max} client connections open, its max_connections limit"
            );
            match &self.lowered {
                Some(why) => message.push_str(&format!(" ({why})")),
                None => message.push_str(
                    "; close clients that are no longer needed, or raise max_connections on the \
                     server",
                ),
            }
            message
        })
    }

    /// The message an evicted connection is closed with.
    pub(super) fn eviction_notice(&self) -> String {
        format!(
            "this connection did not take its handshake's next step in time ({:?}) when the \
             server needed its slot for a newer one ({} in their handshake, max_unauthenticated \
             {}; {} open, max_connections {})",
            self.step,
            self.handshaking.len(),
            self.max_handshaking,
            self.open(),
            self.max_connections
        )
    }

    /// A connection in its handshake (from `source`, when given) whose step
    /// is overdue at `now`, picked at random among them.
    fn past_due(&mut self, source: Option<Source>, now: Instant) -> Option<usize> {
        let mut picked = None;
        let mut seen = 0u64;
        let due: Vec<usize> = self
            .handshaking
            .iter()
            .filter(|(_, h)| h.due <= now && source.is_none_or(|s| s == h.source))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            // Reservoir sampling: each of the `seen` so far kept with
            // chance 1 / seen.
            seen += 1;
            if self.uniform() * (seen as f64) < 1.0 {
                picked = Some(id);
            }
        }
        picked
    }

    /// The admitted connection `id`, from `source`, starts its handshake:
    /// its `HELLO` is due a step from `now`.
    pub(super) fn enter(&mut self, id: usize, source: Source, now: Instant) {
        self.handshaking.insert(
            id,
            Handshaking {
                source,
                due: now + self.step,
            },
        );
        self.counts.handshaking.fetch_add(1, Ordering::AcqRel);
        *self.by_source.entry(source).or_default() += 1;
    }

    /// Connection `id` got the server's `HELLO` at `now`: its `PROOF` is
    /// due a step later.
    pub(super) fn stepped(&mut self, id: usize, now: Instant) {
        if let Some(handshaking) = self.handshaking.get_mut(&id) {
            handshaking.due = now + self.step;
        }
    }

    /// Newcomer `id` from `source` waits in the lobby.
    pub(super) fn wait(&mut self, id: usize, source: Source) {
        self.lobby.entry(source).or_default().push_back(id);
        self.waiting.insert(id);
    }

    /// Whether connection `id` waits in the lobby.
    pub(super) fn is_waiting(&self, id: usize) -> bool {
        self.waiting.contains(&id)
    }

    /// The first newcomer in the lobby whose address now has room (a
    /// connection of it done, gone, or past its deadline: the one to
    /// evict), taken out of the lobby; the caller evicts, then enters it.
    pub(super) fn next_from_lobby(
        &mut self,
        now: Instant,
    ) -> Option<(usize, Source, Option<usize>)> {
        let sources: Vec<Source> = self.lobby.keys().copied().collect();
        for source in sources {
            let full = self.by_source.get(&source).copied().unwrap_or(0) >= self.per_source;
            let evict = if full {
                match self.past_due(Some(source), now) {
                    Some(victim) => Some(victim),
                    None => continue,
                }
            } else {
                None
            };
            let queue = self.lobby.get_mut(&source)?;
            let id = queue.pop_front()?;
            if queue.is_empty() {
                self.lobby.remove(&source);
            }
            self.waiting.remove(&id);
            return Some((id, source, evict));
        }
        None
    }

    /// Whether anyone waits in the lobby.
    pub(super) fn lobby_is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Connection `id` finished its handshake: it keeps its slot, as an
    /// authenticated connection.
    pub(super) fn promote(&mut self, id: usize) {
        if self.release(id) {
            self.counts.authenticated.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Connection `id`, in its handshake or in the lobby, closed; whether
    /// it held a slot.
    pub(super) fn release(&mut self, id: usize) -> bool {
        if self.waiting.remove(&id) {
            self.lobby.retain(|_, queue| {
                queue.retain(|&other| other != id);
                !queue.is_empty()
            });
            return false;
        }
        let Some(Handshaking { source, .. }) = self.handshaking.remove(&id) else {
            return false;
        };
        self.counts.handshaking.fetch_sub(1, Ordering::AcqRel);
        if let Some(count) = self.by_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                self.by_source.remove(&source);
            }
        }
        true
    }

    /// A number in `[0, 1)` (xorshift64*).
    fn uniform(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_secret_only_this_host_is_admitted() {
        let opts = TcpStoreServerOptions::default();
        let local: SocketAddr = "10.0.0.5:29500".parse().unwrap();
        for peer in [
            "127.0.0.1:4000",
            "127.8.9.10:4000",
            "[::1]:4000",
            "[::ffff:127.0.0.1]:4000",
            "10.0.0.5:4000",
        ] {
            assert_eq!(
                same_host_unless_secret(peer.parse().unwrap(), Ok(local), &opts),
                Ok(()),
                "{peer}"
            );
        }
        let message = same_host_unless_secret("10.0.0.6:4000".parse().unwrap(), Ok(local), &opts)
            .unwrap_err();
        assert!(
            message.contains("10.0.0.6")
                && message.contains("NCCL_RS_STORE_SECRET")
                && message.contains("NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1"),
            "{message}"
        );
        // A local address that cannot be read admits loopback only.
        let unknown = || Err(io::Error::other("no local address"));
        let host_address = "10.0.0.5:4000".parse().unwrap();
        assert!(same_host_unless_secret(host_address, unknown(), &opts).is_err());
        // With a secret (proved in the handshake) or the opt-in: anyone.
        let remote: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let with_secret = TcpStoreServerOptions::default().with_secret(b"s".to_vec());
        assert_eq!(
            same_host_unless_secret(remote, unknown(), &with_secret),
            Ok(())
        );
        let opted_in = TcpStoreServerOptions::default().with_unauthenticated_remote(true);
        assert_eq!(
            same_host_unless_secret(remote, unknown(), &opted_in),
            Ok(())
        );
    }

    fn source(text: &str) -> Source {
        Source::of(format!("{text}:1000").parse().unwrap())
    }

    fn slots(max_connections: usize, handshaking: usize, per_source: usize) -> Slots {
        let options = TcpStoreServerOptions::default()
            .with_max_unauthenticated(handshaking)
            .with_max_unauthenticated_per_address(per_source);
        Slots::new(max_connections, None, &options, Counts::default(), 42)
    }

    #[test]
    fn one_address_gets_at_most_its_share_of_handshakes_the_rest_waits_its_turn() {
        let mut slots = slots(100, 40, 2);
        let now = Instant::now();
        let (a, b) = (source("192.0.2.1"), source("192.0.2.2"));
        for id in 0..2 {
            assert_eq!(slots.admit(a, now), Admission::Admit { evict: None });
            slots.enter(id, a, now);
        }
        // A third from the address waits for one of them, in order; past
        // its lobby's share, it is refused.
        for id in 10..12 {
            assert_eq!(slots.admit(a, now), Admission::Wait);
            slots.wait(id, a);
        }
        let Admission::Refuse(message) = slots.admit(a, now) else {
            panic!("a fifth from one address")
        };
        assert!(
            message.contains("max_unauthenticated_per_address"),
            "{message}"
        );
        assert_eq!(slots.admit(b, now), Admission::Admit { evict: None });
        assert_eq!(slots.next_from_lobby(now), None);
        // Done with its handshake, a connection no longer counts against its
        // address: the first in the lobby takes its place.
        slots.promote(0);
        assert_eq!(slots.next_from_lobby(now), Some((10, a, None)));
        slots.enter(10, a, now);
        assert_eq!((slots.open(), slots.handshaking.len()), (3, 2));
        assert_eq!(slots.counts.handshaking.load(Ordering::Acquire), 2);
        // Past its step's deadline, one of the address's gives way.
        let later = now + STEP_DEADLINE;
        let Some((11, _, Some(victim))) = slots.next_from_lobby(later) else {
            panic!("the second in the lobby takes an overdue slot")
        };
        assert!([1, 10].contains(&victim), "{victim}");
        // IPv6 counts by /64.
        assert_eq!(source("[2001:db8::1]"), source("[2001:db8::2:3]"));
        assert_ne!(source("[2001:db8::1]"), source("[2001:db8:0:1::1]"));
    }

    #[test]
    fn full_handshake_slots_make_room_by_a_random_one_past_its_step() {
        let mut slots = slots(100, 4, 100);
        let start = Instant::now();
        let from = source("192.0.2.9");
        for id in 0..4 {
            slots.enter(id, from, start + Duration::from_millis(id as u64));
        }
        assert!(slots.must_hold_back(start));
        let Admission::Refuse(message) = slots.admit(from, start) else {
            panic!("no one is past its deadline")
        };
        assert!(message.contains("max_unauthenticated"), "{message}");
        // One that took its first step in time is not due until a step
        // after it: the others give way, each as likely.
        slots.stepped(3, start + STEP_DEADLINE);
        let later = start + STEP_DEADLINE + Duration::from_millis(3);
        assert!(!slots.must_hold_back(later));
        let mut picked = [0; 4];
        for _ in 0..300 {
            let Admission::Admit {
                evict: Some(victim),
            } = slots.admit(from, later)
            else {
                panic!("an overdue one gives way")
            };
            picked[victim] += 1;
        }
        assert_eq!(picked[3], 0, "{picked:?}");
        assert!(picked[..3].iter().all(|&n| n > 50), "{picked:?}");
    }

    #[test]
    fn authenticated_sessions_keep_the_slots_handshakes_may_not_take() {
        // 8 connections: at most 4 in their handshake at once.
        let mut slots = slots(8, 256, 100);
        let now = Instant::now();
        let from = source("192.0.2.3");
        for id in 0..8 {
            slots.enter(id, from, now);
            slots.promote(id);
        }
        let Admission::Refuse(message) = slots.admit(from, now) else {
            panic!("over max_connections")
        };
        assert!(message.contains("8 client connections"), "{message}");
        // The sessions loop counts a closed one down.
        slots.counts.authenticated.fetch_sub(1, Ordering::AcqRel);
        assert_eq!(slots.admit(from, now), Admission::Admit { evict: None });
        assert_eq!(slots.max_handshaking, 4);
    }

    #[test]
    fn past_half_the_handshake_slots_newcomers_are_refused_at_random() {
        let mut slots = slots(1000, 100, 1000);
        let now = Instant::now();
        let from = source("192.0.2.4");
        let refused_at = |slots: &mut Slots| {
            (0..1000)
                .filter(|_| matches!(slots.admit(from, now), Admission::Refuse(_)))
                .count()
        };
        for id in 0..50 {
            slots.enter(id, from, now);
        }
        let at_half = refused_at(&mut slots);
        for id in 50..99 {
            slots.enter(id, from, now);
        }
        let nearly_full = refused_at(&mut slots);
        assert!(at_half < 60, "{at_half} of 1000 refused at half");
        assert!(
            (400..600).contains(&nearly_full),
            "{nearly_full} of 1000 refused nearly full"
        );
    }
}
