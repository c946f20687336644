//! The server's table: the entries, and the `get`s and `wait`s parked on
//! them until their keys are set. Parked requests are indexed by key, so
//! a write touches only the requests waiting for its key, however many
//! keys others wait for; each is parked for at most the server's
//! `max_wait`, and forgotten the moment its connection closes.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::super::wire::{Request, Response, code};
use crate::AddError;
use crate::memory::{Entries, OverQuota, Quota};

/// A connection, as the table knows it.
pub(super) type Id = usize;

/// What becomes of a request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Answered now.
    Answer(Response),
    /// Parked until its keys are set, or until this instant.
    Parked(Instant),
    /// Refused with this code and message; the connection closes.
    Refuse(u8, String),
}

/// What a parked request is charged for each of its keys, beyond the
/// key's bytes (held twice: in the request and in the index): the
/// strings', the set's and the map's own bookkeeping.
const PER_KEY: usize = 96;
/// What a parked request is charged beyond its keys.
const PER_REQUEST: usize = 128;

/// A `get` or `wait` waiting for its keys.
#[derive(Debug)]
struct Parked {
    /// Its keys, each once, in the order named.
    keys: Vec<String>,
    /// How many of them it is registered for in the index: missing when
    /// last looked at.
    missing: usize,
    /// A `get` (answered with its key's value) rather than a `wait`.
    get: bool,
    since: Instant,
    /// Bytes charged to it.
    charge: usize,
}

/// The entries and the requests parked on them.
#[derive(Debug)]
pub(super) struct Table {
    entries: Entries,
    parked: HashMap<Id, Parked>,
    /// For each missing key, the requests waiting for it.
    waiting: HashMap<String, HashSet<Id>>,
    parked_bytes: usize,
    max_parked_bytes: usize,
    max_wait: Duration,
}

fn over_quota(OverQuota(detail): OverQuota) -> Outcome {
    Outcome::Refuse(code::LIMIT, detail)
}

impl Table {
    /// An empty table within `quota`, its parked requests charged at most
    /// `max_parked_bytes` and parked at most `max_wait` each.
    pub(super) fn new(quota: Quota, max_parked_bytes: usize, max_wait: Duration) -> Self {
        Table {
            entries: Entries::new(quota),
            parked: HashMap::new(),
            waiting: HashMap::new(),
            parked_bytes: 0,
            max_parked_bytes,
            max_wait,
        }
    }

    /// How many requests are parked.
    pub(super) fn parked(&self) -> usize {
        self.parked.len()
    }

    /// The bytes the parked requests are charged.
    pub(super) fn parked_bytes(&self) -> usize {
        self.parked_bytes
    }

    /// Runs `request` from connection `id` at `now`. Parked requests of
    /// other connections that it completes go to `woken` with their
    /// answers.
    pub(super) fn apply(
        &mut self,
        id: Id,
        request: Request,
        now: Instant,
        woken: &mut Vec<(Id, Response)>,
    ) -> Outcome {
        let answer = Outcome::Answer;
        match request {
            Request::Hello { .. } | Request::Proof(_) => Outcome::Refuse(
                code::PROTOCOL,
                "HELLO or PROOF after the handshake is done".to_owned(),
            ),
            Request::Set { key, value } => match self.entries.put(&key, value) {
                Ok(()) => {
                    self.wake(&key, woken);
                    answer(Response::Ok)
                }
                Err(e) => over_quota(e),
            },
            Request::Get { key, timeout } => match self.entries.get(&key) {
                Some(value) => answer(Response::Value(value.to_vec())),
                None => self.park(id, vec![key], true, timeout, now),
            },
            Request::TryGet { key } => answer(match self.entries.get(&key) {
                Some(value) => Response::Value(value.to_vec()),
                None => Response::NotFound,
            }),
            Request::CompareSet { key, expected, new } => {
                match self.entries.compare_set(&key, expected.as_deref(), &new) {
                    Ok(outcome) => {
                        if outcome.swapped {
                            self.wake(&key, woken);
                        }
                        answer(Response::CompareSet {
                            swapped: outcome.swapped,
                            current: outcome.current,
                        })
                    }
                    Err(e) => over_quota(e),
                }
            }
            Request::Add { key, delta } => match self.entries.add(&key, delta) {
                Ok(value) => {
                    self.wake(&key, woken);
                    answer(Response::Int(value))
                }
                Err(AddError::NotAnInteger(v)) => answer(Response::NotAnInteger(v)),
                Err(AddError::Overflow(v)) => answer(Response::Overflow(v)),
                Err(AddError::OverQuota(detail)) => Outcome::Refuse(code::LIMIT, detail),
            },
            Request::Wait { keys, timeout } => {
                let mut seen = HashSet::new();
                let keys: Vec<String> = keys
                    .into_iter()
                    .filter(|k| seen.insert(k.clone()))
                    .collect();
                if keys.iter().all(|k| self.entries.contains(k)) {
                    answer(Response::Ok)
                } else {
                    self.park(id, keys, false, timeout, now)
                }
            }
            Request::Delete { key } => answer(Response::Bool(self.entries.remove(&key))),
        }
    }

    /// Parks `keys` for `id` until `now + timeout` (at most `max_wait`),
    /// or answers at once when that is already past.
    fn park(
        &mut self,
        id: Id,
        keys: Vec<String>,
        get: bool,
        timeout: Duration,
        now: Instant,
    ) -> Outcome {
        let deadline = now.checked_add(timeout.min(self.max_wait)).unwrap_or(now);
        if deadline <= now {
            return Outcome::Answer(Response::Timeout {
                missing: self.missing(&keys),
                waited: Duration::ZERO,
            });
        }
        let charge = PER_REQUEST + keys.iter().map(|k| 2 * k.len() + PER_KEY).sum::<usize>();
        if self.parked_bytes + charge > self.max_parked_bytes {
            let what = if get { "get" } else { "wait" };
            return Outcome::Refuse(
                code::LIMIT,
                format!(
                    "this {what} would take {charge} bytes beside the {} bytes of the requests \
                     already waiting for keys, over the half of max_in_flight_bytes they may \
                     hold ({}); retry when fewer wait, or raise max_in_flight_bytes",
                    self.parked_bytes, self.max_parked_bytes
                ),
            );
        }
        let mut missing = 0;
        for key in keys.iter().filter(|k| !self.entries.contains(k)) {
            self.waiting.entry(key.clone()).or_default().insert(id);
            missing += 1;
        }
        self.parked_bytes += charge;
        self.parked.insert(
            id,
            Parked {
                keys,
                missing,
                get,
                since: now,
                charge,
            },
        );
        Outcome::Parked(deadline)
    }

    /// `key` was written: the requests waiting for it count it, and those
    /// with nothing left missing are answered.
    fn wake(&mut self, key: &str, woken: &mut Vec<(Id, Response)>) {
        let Some(ids) = self.waiting.remove(key) else {
            return;
        };
        for id in ids {
            let Some(parked) = self.parked.get_mut(&id) else {
                continue;
            };
            parked.missing -= 1;
            if parked.missing > 0 {
                continue;
            }
            // Every key it waited for was written; one may have been
            // deleted since.
            let absent: Vec<String> = parked
                .keys
                .iter()
                .filter(|k| !self.entries.contains(k))
                .cloned()
                .collect();
            if !absent.is_empty() {
                parked.missing = absent.len();
                for key in absent {
                    self.waiting.entry(key).or_default().insert(id);
                }
                continue;
            }
            let answer = if parked.get {
                let value = parked.keys.first().and_then(|k| self.entries.get(k));
                Response::Value(value.map(<[u8]>::to_vec).unwrap_or_default())
            } else {
                Response::Ok
            };
            self.forget(id);
            woken.push((id, answer));
        }
    }

    /// The answer to the parked request of `id`, whose time ran out at
    /// `now`; `None` when it has none.
    pub(super) fn expire(&mut self, id: Id, now: Instant) -> Option<Response> {
        let since = self.parked.get(&id)?.since;
        let missing = self.missing(&self.parked.get(&id)?.keys);
        self.forget(id);
        Some(Response::Timeout {
            missing,
            waited: now.saturating_duration_since(since),
        })
    }

    /// Forgets the parked request of `id` (answered, timed out, or its
    /// connection closed); whether it had one.
    pub(super) fn forget(&mut self, id: Id) -> bool {
        let Some(parked) = self.parked.remove(&id) else {
            return false;
        };
        self.parked_bytes -= parked.charge;
        for key in &parked.keys {
            if let Some(ids) = self.waiting.get_mut(key) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.waiting.remove(key);
                }
            }
        }
        true
    }

    fn missing(&self, keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter(|k| !self.entries.contains(k))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let quota = Quota {
            max_keys: 100,
            max_bytes: 1 << 20,
        };
        Table::new(quota, 1 << 20, Duration::from_secs(60))
    }

    fn set(table: &mut Table, key: &str, woken: &mut Vec<(Id, Response)>) {
        let request = Request::Set {
            key: key.into(),
            value: key.as_bytes().to_vec(),
        };
        let outcome = table.apply(0, request, Instant::now(), woken);
        assert_eq!(outcome, Outcome::Answer(Response::Ok));
    }

    fn wait(keys: &[&str], secs: u64) -> Request {
        Request::Wait {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            timeout: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_write_wakes_only_its_keys_waiters_once_all_their_keys_are_set() {
        let mut table = table();
        let mut woken = Vec::new();
        let now = Instant::now();
        let get = Request::Get {
            key: "a".into(),
            timeout: Duration::from_secs(5),
        };
        assert!(matches!(
            table.apply(1, get, now, &mut woken),
            Outcome::Parked(_)
        ));
        assert!(matches!(
            table.apply(2, wait(&["a", "b", "a"], 5), now, &mut woken),
            Outcome::Parked(_)
        ));
        assert_eq!(table.parked(), 2);
        set(&mut table, "c", &mut woken);
        assert!(woken.is_empty());
        set(&mut table, "a", &mut woken);
        assert_eq!(woken, vec![(1, Response::Value(b"a".to_vec()))]);
        woken.clear();
        // Deleted before its other key comes: the wait waits for it again.
        assert_eq!(
            table.apply(0, Request::Delete { key: "a".into() }, now, &mut woken),
            Outcome::Answer(Response::Bool(true))
        );
        set(&mut table, "b", &mut woken);
        assert!(woken.is_empty());
        set(&mut table, "a", &mut woken);
        assert_eq!(woken, vec![(2, Response::Ok)]);
        assert_eq!((table.parked(), table.parked_bytes()), (0, 0));
        assert!(table.waiting.is_empty());
    }

    #[test]
    fn a_parked_request_times_out_or_is_forgotten_without_a_trace() {
        let mut table = table();
        let mut woken = Vec::new();
        let now = Instant::now();
        let Outcome::Parked(deadline) = table.apply(1, wait(&["x", "y"], 5), now, &mut woken)
        else {
            panic!("parked")
        };
        assert_eq!(deadline, now + Duration::from_secs(5));
        set(&mut table, "y", &mut woken);
        assert_eq!(
            table.expire(1, deadline),
            Some(Response::Timeout {
                missing: vec!["x".into()],
                waited: Duration::from_secs(5),
            })
        );
        assert_eq!(table.expire(1, deadline), None);
        // The server's own limit cuts a longer wait; a closed connection's
        // wait leaves nothing behind.
        let Outcome::Parked(deadline) = table.apply(2, wait(&["x"], 3600), now, &mut woken) else {
            panic!("parked")
        };
        assert_eq!(deadline, now + Duration::from_secs(60));
        assert!(table.forget(2));
        assert!(table.waiting.is_empty() && table.parked_bytes() == 0);
        // No time to wait: answered at once.
        assert_eq!(
            table.apply(3, wait(&["x"], 0), now, &mut woken),
            Outcome::Answer(Response::Timeout {
                missing: vec!["x".into()],
                waited: Duration::ZERO,
            })
        );
    }

    #[test]
    fn parked_requests_are_refused_past_their_share_of_memory() {
        let quota = Quota {
            max_keys: 100,
            max_bytes: 1 << 20,
        };
        let mut table = Table::new(quota, 2000, Duration::from_secs(60));
        let mut woken = Vec::new();
        let now = Instant::now();
        let keys: Vec<String> = (0..10).map(|i| format!("key/{i}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert!(matches!(
            table.apply(1, wait(&keys, 5), now, &mut woken),
            Outcome::Parked(_)
        ));
        let Outcome::Refuse(code, message) = table.apply(2, wait(&keys, 5), now, &mut woken) else {
            panic!("a second wait over the share")
        };
        assert_eq!(code, code::LIMIT);
        assert!(message.contains("max_in_flight_bytes"), "{message}");
    }
}
