//! The server's table: the entries, and the `get`s and `wait`s parked on
//! them until their keys are set. Parked requests are indexed by key, so
//! a write touches only the requests waiting for its key, however many
//! keys others wait for; each is parked for at most the server's
//! `max_wait`, and forgotten the moment its connection closes. Session
//! keys ([`SessionKeys`]) are deleted when their connection closes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::wire::{Request, Response, code};
use super::session_keys::SessionKeys;
use crate::AddError;
use crate::memory::{Entries, OverQuota, Quota};

/// A connection, as the table knows it.
pub(super) type Id = usize;

/// An answer to a request: a value, shared with the table and with every
/// other answer of it, or any other response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    Value(Arc<[u8]>),
    Other(Response),
}

/// What becomes of a request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Answered now.
    Answer(Answer),
    /// Parked until its keys are set, or until this instant.
    Parked(Instant),
    /// Refused with this code and message; the connection closes.
    Refuse(u8, String),
}

/// What [`Table::complete`] made of a parked request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Completion {
    /// Its answer: it is no longer parked.
    Answer(Answer),
    /// Its answer of this many bytes did not fit: it stays parked, ready.
    NoRoom,
    /// It is not parked, or misses a key again (deleted since).
    NotReady,
}

/// What a parked request is charged for each of its keys, beyond the
/// key's bytes: the key's shared allocation and its reference in the
/// request, the index's entry (with the map's spare capacity) and its
/// list of requests.
///
/// Measured with the server's resident memory (`store_abuse`'s parked-wait
/// bound).
const PER_KEY: usize = 224;
/// What a parked request is charged beyond its keys.
const PER_REQUEST: usize = 256;

/// A `get` or `wait` waiting for its keys.
#[derive(Debug)]
struct Parked {
    /// Its keys, each once, in the order named.
    keys: Vec<Arc<str>>,
    /// How many of them are absent now: kept exact as keys are written and
    /// deleted, so completing it never looks at its keys again.
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
    /// For each key a parked request names (present or absent), the
    /// requests naming it.
    watchers: HashMap<Arc<str>, Vec<Id>>,
    session_keys: SessionKeys,
    parked_bytes: usize,
    max_parked_bytes: usize,
    max_wait: Duration,
}

fn over_quota(OverQuota(detail): OverQuota) -> Outcome {
    Outcome::Refuse(code::LIMIT, detail)
}

/// The bytes of a `VALUE` answer's payload beyond the value: its opcode
/// and length.
const VALUE_HEAD: usize = 1 + 4;
/// What any answer without a value or a list of keys takes, at most.
const SMALL_ANSWER: usize = 16;

impl Answer {
    /// The bytes of its payload, unsealed.
    pub(super) fn len(&self) -> usize {
        match self {
            Answer::Value(value) => VALUE_HEAD + value.len(),
            Answer::Other(response) => response.encode().payload_len(),
        }
    }
}

impl Table {
    /// An empty table within `quota`, its parked requests charged at most
    /// `max_parked_bytes` and parked at most `max_wait` each.
    pub(super) fn new(quota: Quota, max_parked_bytes: usize, max_wait: Duration) -> Self {
        Table {
            entries: Entries::new(quota),
            parked: HashMap::new(),
            watchers: HashMap::new(),
            session_keys: SessionKeys::default(),
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

    /// The most bytes the answer to `request` would take now (its payload,
    /// unsealed): what the server must have room for before running it.
    pub(super) fn answer_len(&self, request: &Request) -> usize {
        let value = |key: &str| self.entries.get(key).map_or(0, <[u8]>::len);
        match request {
            Request::Get { key, .. } | Request::TryGet { key } => VALUE_HEAD + value(key),
            Request::CompareSet { key, new, .. } => {
                SMALL_ANSWER + VALUE_HEAD + value(key).max(new.len())
            }
            // A timeout names the keys still missing.
            Request::Wait { keys, .. } => {
                SMALL_ANSWER + keys.iter().map(|k| 4 + k.len()).sum::<usize>()
            }
            Request::Add { key, .. } => SMALL_ANSWER + value(key),
            _ => SMALL_ANSWER,
        }
    }

    /// Runs `request` from connection `id` at `now`.
    ///
    /// Parked requests that it completes (their last missing key written) go to
    /// `woken`, to be answered by [`Table::complete`].
    pub(super) fn apply(
        &mut self,
        id: Id,
        request: Request,
        now: Instant,
        woken: &mut Vec<Id>,
    ) -> Outcome {
        let answer = |response| Outcome::Answer(Answer::Other(response));
        match request {
            Request::Hello { .. } | Request::Proof(_) => Outcome::Refuse(
                code::PROTOCOL,
                "HELLO or PROOF after the handshake is done".to_owned(),
            ),
            Request::Set { key, value } => match self.put(&key, value, woken) {
                Ok(()) => answer(Response::Ok),
                Err(e) => over_quota(e),
            },
            Request::Get { key, timeout } => match self.entries.shared(&key) {
                Some(value) => Outcome::Answer(Answer::Value(value)),
                None => self.park(id, vec![key], true, timeout, now),
            },
            Request::TryGet { key } => match self.entries.shared(&key) {
                Some(value) => Outcome::Answer(Answer::Value(value)),
                None => answer(Response::NotFound),
            },
            Request::CompareSet { key, expected, new } => {
                let was = self.entries.contains(&key);
                match self.entries.compare_set(&key, expected.as_deref(), &new) {
                    Ok(outcome) => {
                        if outcome.swapped {
                            self.written(&key, was, woken);
                        }
                        answer(Response::CompareSet {
                            swapped: outcome.swapped,
                            current: outcome.current,
                        })
                    }
                    Err(e) => over_quota(e),
                }
            }
            Request::Add { key, delta } => {
                let was = self.entries.contains(&key);
                match self.entries.add(&key, delta) {
                    Ok(value) => {
                        self.written(&key, was, woken);
                        answer(Response::Int(value))
                    }
                    Err(AddError::NotAnInteger(v)) => answer(Response::NotAnInteger(v)),
                    Err(AddError::Overflow(v)) => answer(Response::Overflow(v)),
                    Err(AddError::OverQuota(detail)) => Outcome::Refuse(code::LIMIT, detail),
                }
            }
            Request::Wait { keys, timeout } => {
                if keys.iter().all(|k| self.entries.contains(k)) {
                    answer(Response::Ok)
                } else {
                    self.park(id, keys, false, timeout, now)
                }
            }
            Request::Delete { key } => {
                self.session_keys.release(&key);
                answer(Response::Bool(self.remove(&key)))
            }
            Request::SetSession { key, value, owner } => {
                if !self.session_keys.may_bind(&key, &owner) {
                    return answer(Response::Bool(false));
                }
                match self.put(&key, value, woken) {
                    Ok(()) => {
                        self.session_keys.bind(&key, id, owner);
                        answer(Response::Bool(true))
                    }
                    Err(e) => over_quota(e),
                }
            }
        }
    }

    /// Removes `key`; whether it was there.
    fn remove(&mut self, key: &str) -> bool {
        let existed = self.entries.remove(key);
        if existed {
            self.count_watchers(key, |parked| parked.missing += 1);
        }
        existed
    }

    /// Connection `id` closed: its session keys are deleted.
    pub(super) fn closed(&mut self, id: Id) {
        for key in self.session_keys.closed(id) {
            self.remove(&key);
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
            return Outcome::Answer(Answer::Other(Response::Timeout {
                missing: self.missing(keys.iter().map(String::as_str)),
                waited: Duration::ZERO,
            }));
        }
        let mut seen = HashSet::with_capacity(keys.len());
        let keys: Vec<&String> = keys.iter().filter(|k| seen.insert(k.as_str())).collect();
        let charge = PER_REQUEST + keys.iter().map(|k| k.len() + PER_KEY).sum::<usize>();
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
        let mut shared = Vec::with_capacity(keys.len());
        for key in keys {
            missing += usize::from(!self.entries.contains(key));
            let key = match self.watchers.get_key_value(key.as_str()) {
                Some((known, _)) => Arc::clone(known),
                None => Arc::from(key.as_str()),
            };
            self.watchers.entry(Arc::clone(&key)).or_default().push(id);
            shared.push(key);
        }
        self.parked_bytes += charge;
        self.parked.insert(
            id,
            Parked {
                keys: shared,
                missing,
                get,
                since: now,
                charge,
            },
        );
        Outcome::Parked(deadline)
    }

    /// `key` was written (`was` it there before): the requests that missed
    /// it count it, and those it completed go to `woken`.
    /// Puts `value` at `key`, waking the waiters it completes.
    fn put(&mut self, key: &str, value: Vec<u8>, woken: &mut Vec<Id>) -> Result<(), OverQuota> {
        let was = self.entries.contains(key);
        self.entries.put(key, value)?;
        self.written(key, was, woken);
        Ok(())
    }

    fn written(&mut self, key: &str, was: bool, woken: &mut Vec<Id>) {
        if was {
            return;
        }
        self.count_watchers(key, |parked| parked.missing -= 1);
        if let Some(ids) = self.watchers.get(key) {
            woken.extend(
                ids.iter()
                    .copied()
                    .filter(|id| self.parked.get(id).is_some_and(|p| p.missing == 0)),
            );
        }
    }

    /// Applies `change` to every request naming `key`.
    fn count_watchers(&mut self, key: &str, change: impl Fn(&mut Parked)) {
        let Some(ids) = self.watchers.get(key) else {
            return;
        };
        for id in ids {
            if let Some(parked) = self.parked.get_mut(id) {
                change(parked);
            }
        }
    }

    /// The answer of the parked request of `id` when none of its keys is
    /// missing and `fits(its length)`; it is then no longer parked.
    pub(super) fn complete(&mut self, id: Id, fits: impl FnOnce(usize) -> bool) -> Completion {
        let Some(parked) = self.parked.get(&id).filter(|p| p.missing == 0) else {
            return Completion::NotReady;
        };
        let answer = match (parked.get, parked.keys.first()) {
            (true, Some(key)) => match self.entries.shared(key) {
                Some(value) => Answer::Value(value),
                None => return Completion::NotReady,
            },
            _ => Answer::Other(Response::Ok),
        };
        if !fits(answer.len()) {
            return Completion::NoRoom;
        }
        self.forget(id);
        Completion::Answer(answer)
    }

    /// The answer to the parked request of `id`, whose time ran out at
    /// `now`; `None` when it has none.
    pub(super) fn expire(&mut self, id: Id, now: Instant) -> Option<Response> {
        let parked = self.parked.get(&id)?;
        let since = parked.since;
        let missing = self.missing(parked.keys.iter().map(|k| &**k));
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
            if let Some(ids) = self.watchers.get_mut(key) {
                if let Some(at) = ids.iter().position(|&other| other == id) {
                    ids.swap_remove(at);
                }
                if ids.is_empty() {
                    self.watchers.remove(key);
                }
            }
        }
        true
    }

    fn missing<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<String> {
        keys.filter(|k| !self.entries.contains(k))
            .map(str::to_owned)
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

    fn set(table: &mut Table, key: &str, woken: &mut Vec<Id>) {
        let request = Request::Set {
            key: key.into(),
            value: key.as_bytes().to_vec(),
        };
        let outcome = table.apply(0, request, Instant::now(), woken);
        assert_eq!(outcome, Outcome::Answer(Answer::Other(Response::Ok)));
    }

    fn delete(table: &mut Table, key: &str) {
        let request = Request::Delete { key: key.into() };
        let outcome = table.apply(0, request, Instant::now(), &mut Vec::new());
        assert_eq!(
            outcome,
            Outcome::Answer(Answer::Other(Response::Bool(true)))
        );
    }

    fn wait(keys: &[&str], secs: u64) -> Request {
        Request::Wait {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            timeout: Duration::from_secs(secs),
        }
    }

    fn complete(table: &mut Table, id: Id) -> Completion {
        table.complete(id, |_| true)
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
        assert_eq!(woken, vec![1]);
        assert_eq!(
            complete(&mut table, 1),
            Completion::Answer(Answer::Value(Arc::from(&b"a"[..])))
        );
        woken.clear();
        // Deleted before its other key comes: the wait waits for it again.
        delete(&mut table, "a");
        set(&mut table, "b", &mut woken);
        assert!(woken.is_empty());
        assert_eq!(complete(&mut table, 2), Completion::NotReady);
        set(&mut table, "a", &mut woken);
        assert_eq!(woken, vec![2]);
        assert_eq!(
            complete(&mut table, 2),
            Completion::Answer(Answer::Other(Response::Ok))
        );
        assert_eq!((table.parked(), table.parked_bytes()), (0, 0));
        assert!(table.watchers.is_empty());
    }

    #[test]
    fn a_woken_get_shares_its_value_and_waits_for_room_still_parked() {
        let mut table = table();
        let mut woken = Vec::new();
        let now = Instant::now();
        for id in 1..=3 {
            let get = Request::Get {
                key: "blob".into(),
                timeout: Duration::from_secs(5),
            };
            assert!(matches!(
                table.apply(id, get, now, &mut woken),
                Outcome::Parked(_)
            ));
        }
        set(&mut table, "blob", &mut woken);
        woken.sort_unstable();
        assert_eq!(woken, vec![1, 2, 3]);
        assert_eq!(table.complete(1, |len| len < 4), Completion::NoRoom);
        assert_eq!(table.parked(), 3);
        let answers: Vec<Arc<[u8]>> = (1..=3)
            .map(|id| match complete(&mut table, id) {
                Completion::Answer(Answer::Value(value)) => value,
                other => panic!("{other:?}"),
            })
            .collect();
        // One allocation: the table's own and every answer's.
        assert!(answers.iter().all(|value| Arc::ptr_eq(value, &answers[0])));
        assert_eq!(Arc::strong_count(&answers[0]), 4);
    }

    #[test]
    fn completing_a_wait_after_deletes_never_looks_at_its_keys_again() {
        // Deletes and writes of its keys keep the count exact: after any
        // sequence, it is ready exactly when all its keys are there.
        let mut table = table();
        let mut woken = Vec::new();
        let now = Instant::now();
        let keys = ["w/0", "w/1", "w/2"];
        assert!(matches!(
            table.apply(7, wait(&keys, 5), now, &mut woken),
            Outcome::Parked(_)
        ));
        set(&mut table, "w/0", &mut woken);
        set(&mut table, "w/1", &mut woken);
        for _ in 0..3 {
            delete(&mut table, "w/0");
            set(&mut table, "w/2", &mut woken);
            delete(&mut table, "w/2");
            set(&mut table, "w/0", &mut woken);
        }
        assert_eq!(table.parked.get(&7).map(|p| p.missing), Some(1));
        assert!(woken.is_empty());
        // Writing a present key again changes no count.
        set(&mut table, "w/0", &mut woken);
        set(&mut table, "w/2", &mut woken);
        assert_eq!(woken, vec![7]);
        assert_eq!(table.parked.get(&7).map(|p| p.missing), Some(0));
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
        assert!(table.watchers.is_empty() && table.parked_bytes() == 0);
        // No time to wait: answered at once.
        assert_eq!(
            table.apply(3, wait(&["x"], 0), now, &mut woken),
            Outcome::Answer(Answer::Other(Response::Timeout {
                missing: vec!["x".into()],
                waited: Duration::ZERO,
            }))
        );
    }

    #[test]
    fn parked_requests_are_refused_past_their_share_of_memory() {
        let quota = Quota {
            max_keys: 100,
            max_bytes: 1 << 20,
        };
        let mut table = Table::new(quota, 4000, Duration::from_secs(60));
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
