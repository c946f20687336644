//! Who gets a slot. Without a secret, only clients of this host (unless
//! told otherwise). Then the slots: connections still in their handshake
//! may take only some of them (the rest are kept for authenticated
//! sessions), few from any one address, fewer at random as they fill up
//! (as sshd's `MaxStartups`), and the oldest gives way to a newcomer when
//! they are full, so that peers reconnecting as soon as they are dropped
//! cannot keep ranks out.

use std::collections::{HashMap, VecDeque};
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
    /// Refuse it with this message.
    Refuse(String),
}

/// At most this share of new connections is refused at random, when the
/// handshaking slots are all but full.
const MAX_EARLY_DROP: f64 = 0.5;
/// A connection in its handshake gives way to a newcomer only after this
/// long (or half the handshake timeout): an honest handshake takes a round
/// trip or two.
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

/// The server's slots: how many are taken, by whom, and who is next to go.
#[derive(Debug)]
pub(super) struct Slots {
    max_connections: usize,
    /// Why `max_connections` is below the option, for refusals.
    lowered: Option<String>,
    max_handshaking: usize,
    per_source: usize,
    evictable_after: Duration,
    /// The connections holding a slot, as the server's handle reads them:
    /// authenticated (counted up here, down by the sessions loop as they
    /// close), and in their handshake (as many as `handshaking` holds).
    counts: Counts,
    handshaking: HashMap<usize, (Source, Instant)>,
    /// Ids in the order they came (some no longer handshaking).
    arrivals: VecDeque<usize>,
    by_source: HashMap<Source, usize>,
    rng: u64,
}

impl Slots {
    /// The slots of a server of `max_connections` (already fitted to the
    /// descriptor limit, `lowered` saying why when it was lowered), with
    /// `options`' bounds on handshakes, keeping `counts`. `seed` seeds the
    /// random refusals.
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
            evictable_after: EVICTABLE_AFTER.min(options.handshake_timeout / 2),
            counts,
            handshaking: HashMap::new(),
            arrivals: VecDeque::new(),
            by_source: HashMap::new(),
            // A zero state would stay zero.
            rng: seed | 1,
        }
    }

    /// Connections holding a slot.
    fn open(&self) -> usize {
        self.counts.authenticated.load(Ordering::Acquire) + self.handshaking.len()
    }

    /// Decides on a new connection from `source`, at `now`. Changes
    /// nothing: the caller closes the connection to evict (then
    /// [`Slots::release`]) and [`Slots::enter`]s the newcomer.
    pub(super) fn admit(&mut self, source: Source, now: Instant) -> Admission {
        let handshaking = self.handshaking.len();
        let from_source = self.by_source.get(&source).copied().unwrap_or(0);
        if from_source >= self.per_source {
            return Admission::Refuse(format!(
                "{from_source} connections from {} are still in their handshake, this server's \
                 max_unauthenticated_per_address",
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
        if let Some(oldest) = self.oldest_evictable(now) {
            return Admission::Admit {
                evict: Some(oldest),
            };
        }
        Admission::Refuse(if handshaking >= self.max_handshaking {
            format!(
                "{handshaking} connections are still in their handshake, this server's \
                 max_unauthenticated, none of them long enough to give way"
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
            "this connection was still in its handshake when the server needed its slot for a \
             newer one ({} in their handshake, max_unauthenticated {}; {} open, max_connections \
             {})",
            self.handshaking.len(),
            self.max_handshaking,
            self.open(),
            self.max_connections
        )
    }

    /// The oldest connection in its handshake, if it has been there long
    /// enough to give way.
    fn oldest_evictable(&mut self, now: Instant) -> Option<usize> {
        while let Some(&id) = self.arrivals.front() {
            match self.handshaking.get(&id) {
                None => {
                    self.arrivals.pop_front();
                }
                Some(&(_, since)) => {
                    return (now.saturating_duration_since(since) >= self.evictable_after)
                        .then_some(id);
                }
            }
        }
        None
    }

    /// The admitted connection `id`, from `source`, starts its handshake.
    pub(super) fn enter(&mut self, id: usize, source: Source, now: Instant) {
        self.handshaking.insert(id, (source, now));
        self.counts.handshaking.fetch_add(1, Ordering::AcqRel);
        *self.by_source.entry(source).or_default() += 1;
        self.arrivals.push_back(id);
        if self.arrivals.len() > 2 * self.handshaking.len() + 64 {
            let handshaking = &self.handshaking;
            self.arrivals.retain(|id| handshaking.contains_key(id));
        }
    }

    /// Connection `id` finished its handshake: it keeps its slot, as an
    /// authenticated connection.
    pub(super) fn promote(&mut self, id: usize) {
        if self.release(id) {
            self.counts.authenticated.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Connection `id`, in its handshake, closed; whether it was.
    pub(super) fn release(&mut self, id: usize) -> bool {
        let Some((source, _)) = self.handshaking.remove(&id) else {
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
    fn one_address_gets_at_most_its_share_of_handshakes() {
        let mut slots = slots(100, 40, 2);
        let now = Instant::now();
        let (a, b) = (source("192.0.2.1"), source("192.0.2.2"));
        for id in 0..2 {
            assert_eq!(slots.admit(a, now), Admission::Admit { evict: None });
            slots.enter(id, a, now);
        }
        let Admission::Refuse(message) = slots.admit(a, now) else {
            panic!("a third from one address")
        };
        assert!(
            message.contains("max_unauthenticated_per_address"),
            "{message}"
        );
        assert_eq!(slots.admit(b, now), Admission::Admit { evict: None });
        // Done with its handshake, a connection no longer counts against its
        // address.
        slots.promote(0);
        assert_eq!(slots.admit(a, now), Admission::Admit { evict: None });
        assert_eq!((slots.open(), slots.handshaking.len()), (2, 1));
        assert_eq!(slots.counts.handshaking.load(Ordering::Acquire), 1);
        // IPv6 counts by /64.
        assert_eq!(source("[2001:db8::1]"), source("[2001:db8::2:3]"));
        assert_ne!(source("[2001:db8::1]"), source("[2001:db8:0:1::1]"));
    }

    #[test]
    fn full_handshake_slots_make_room_by_the_oldest_once_it_has_waited() {
        let mut slots = slots(100, 4, 100);
        let start = Instant::now();
        let from = source("192.0.2.9");
        for id in 0..4 {
            slots.enter(id, from, start);
        }
        let Admission::Refuse(message) = slots.admit(from, start) else {
            panic!("no one has waited long enough to give way")
        };
        assert!(message.contains("max_unauthenticated"), "{message}");
        let later = start + EVICTABLE_AFTER;
        assert_eq!(
            slots.admit(from, later),
            Admission::Admit { evict: Some(0) }
        );
        slots.release(0);
        slots.enter(4, from, later);
        assert_eq!(
            slots.admit(from, later),
            Admission::Admit { evict: Some(1) }
        );
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
