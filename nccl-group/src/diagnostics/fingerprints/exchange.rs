//! The mismatch check's own thread: publishes this rank's fingerprints,
//! reads the other ranks', compares them and moves the verified mark (the
//! protocol is the parent module's).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Instant;

use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Scope;

use super::{
    COMPARE_INTERVAL, Chunk, Fingerprints, MAX_CHUNK_RUNS, PUBLISH_INTERVAL, QUEUE_CAPACITY, Run,
    STORE_RETRY, State, WAIT_SLICE, extend,
};
use crate::diagnostics::analysis::{Divergence, Issued, first_divergence};

/// Starts the exchange of `fingerprints` through `store` under `scope`
/// (`<group>/<generation>/fingerprints`); `on_verdict` is called once, on
/// the thread, if the ranks' collectives diverge, and the thread ends,
/// leaving its chunks for the other ranks to find the divergence too.
/// Otherwise it ends when [`Fingerprints::close`] is called, deleting the
/// chunks every rank has verified past.
///
/// # Errors
/// The thread could not be started.
pub(crate) fn spawn(
    fingerprints: Arc<Fingerprints>,
    store: Arc<dyn Store>,
    scope: Scope,
    on_verdict: Box<dyn FnOnce(Box<Divergence>) + Send>,
) -> std::io::Result<()> {
    let exchange = Exchange::new(fingerprints, store, scope);
    std::thread::Builder::new()
        .name("nccl-group-fingerprints".to_string())
        .spawn(move || exchange.run(on_verdict))
        .map(drop)
}

/// What this rank knows of one rank's collectives.
#[derive(Default)]
struct Known {
    /// Its collectives from the verified mark on (the first run may begin
    /// before it).
    runs: VecDeque<Run>,
    /// One past its last known collective.
    end: u64,
    /// Its next chunk to read (other ranks only).
    next_chunk: u64,
    /// Its verified mark, as its last chunk read said.
    verified: u64,
}

struct Exchange {
    shared: Arc<Fingerprints>,
    store: Arc<dyn Store>,
    scope: Scope,
    /// The queue last taken, emptied: swapped for the full one, so that the
    /// issuing threads push into a vector that keeps its capacity.
    spare: Vec<Issued>,
    /// Taken from the queue, waiting for an earlier collective another
    /// thread has yet to push.
    early: BTreeMap<u64, Issued>,
    /// Runs to publish in this rank's next chunk.
    outbox: Vec<Run>,
    /// This rank's next chunk's number.
    chunk: u64,
    /// This rank's chunks in the store: (number, one past its last
    /// collective).
    published: VecDeque<(u64, u64)>,
    /// Every rank's collectives, this one's included.
    ranks: Vec<Known>,
    /// Every collective below this was issued alike by every rank.
    verified: u64,
    last_publish: Instant,
    last_compare: Instant,
}

impl Exchange {
    fn new(shared: Arc<Fingerprints>, store: Arc<dyn Store>, scope: Scope) -> Self {
        let now = Instant::now();
        let ranks = (0..shared.world_size).map(|_| Known::default()).collect();
        Self {
            shared,
            store,
            scope,
            spare: Vec::with_capacity(QUEUE_CAPACITY),
            early: BTreeMap::new(),
            outbox: Vec::new(),
            chunk: 0,
            published: VecDeque::new(),
            ranks,
            verified: 0,
            last_publish: now,
            last_compare: now,
        }
    }

    fn key(&self, rank: usize, chunk: u64) -> String {
        self.scope.clone().index(rank as u64).key(chunk)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state()
    }

    fn mine(&self) -> &Known {
        &self.ranks[self.shared.rank]
    }

    fn run(mut self, on_verdict: Box<dyn FnOnce(Box<Divergence>) + Send>) {
        while let Some(urgent) = self.wait_for_work() {
            match self.step(urgent) {
                Ok(None) => self.lock().store_error = None,
                Ok(Some(divergence)) => {
                    self.lock().divergence = Some(divergence.clone());
                    self.shared.changed.notify_all();
                    on_verdict(divergence);
                    // The chunks stay: the other ranks read them to find
                    // the same divergence.
                    return;
                }
                Err(error) => {
                    // Retried: waiters see the error only if their wait
                    // ends before the store answers again.
                    self.lock().store_error = Some(error);
                    std::thread::sleep(STORE_RETRY);
                }
            }
        }
        self.delete_verified();
        self.leave();
    }

    /// This rank's part in the clean-up once its group ended: its chunks
    /// that a slower rank may still read stay, listed under `<rank>/left`;
    /// the last rank to leave (`closed` counts them) deletes every rank's.
    fn leave(&mut self) {
        let rank = self.shared.rank;
        let left = |rank: usize| self.scope.clone().index(rank as u64).key("left");
        let chunks: Vec<u64> = self.published.iter().map(|&(chunk, _)| chunk).collect();
        let listed = serde_json::to_vec(&chunks)
            .ok()
            .is_some_and(|value| self.store.set(&left(rank), &value).is_ok());
        let closed = self.scope.key("closed");
        if !listed || self.store.add(&closed, 1).ok() != Some(self.ranks.len() as i64) {
            return;
        }
        for rank in 0..self.ranks.len() {
            let chunks = match self.store.try_get(&left(rank)) {
                Ok(Some(bytes)) => serde_json::from_slice::<Vec<u64>>(&bytes).unwrap_or_default(),
                _ => Vec::new(),
            };
            for chunk in chunks {
                let _ = self.store.delete(&self.key(rank, chunk));
            }
            let _ = self.store.delete(&left(rank));
        }
        let _ = self.store.delete(&closed);
    }

    /// Waits until there is something to do, and takes the queue: `None`
    /// once the group ended, else whether a host read waits for a verdict.
    fn wait_for_work(&mut self) -> Option<bool> {
        let shared = Arc::clone(&self.shared);
        let mut state = shared.state();
        loop {
            if state.closed {
                return None;
            }
            let urgent = state.waiters > 0 && state.wanted > self.verified;
            let live = state.failed_until.is_none();
            let queued = !state.queued.is_empty() || !self.outbox.is_empty();
            let unverified = self.mine().end > self.verified || !self.early.is_empty();
            let publish_due = live && queued && self.last_publish.elapsed() >= PUBLISH_INTERVAL;
            let compare_due = live && unverified && self.last_compare.elapsed() >= COMPARE_INTERVAL;
            if urgent || publish_due || compare_due {
                std::mem::swap(&mut state.queued, &mut self.spare);
                drop(state);
                self.take();
                return Some(urgent);
            }
            let until_due = match (live, queued, unverified) {
                (true, true, _) => {
                    Some(PUBLISH_INTERVAL.saturating_sub(self.last_publish.elapsed()))
                }
                (true, false, true) => {
                    Some(COMPARE_INTERVAL.saturating_sub(self.last_compare.elapsed()))
                }
                // Idle, or a failed group's: a push or a read wakes it.
                _ => None,
            };
            state = match until_due {
                Some(due) => {
                    shared
                        .changed
                        .wait_timeout(state, due)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Moves the queued fingerprints (in `spare`) to this rank's runs and
    /// outbox, in order of their collectives: those pushed in order go
    /// straight on, the others wait in `early` for the ones before them.
    fn take(&mut self) {
        let mut spare = std::mem::take(&mut self.spare);
        for issued in spare.drain(..) {
            if self.early.is_empty() && issued.collective_seq == self.mine().end {
                self.append_mine(issued);
            } else {
                self.early.insert(issued.collective_seq, issued);
            }
        }
        self.spare = spare;
        loop {
            let next = self.mine().end;
            let Some(issued) = self.early.remove(&next) else {
                break;
            };
            self.append_mine(issued);
        }
    }

    /// Appends this rank's next collective to its runs and its outbox.
    fn append_mine(&mut self, issued: Issued) {
        if let Some(run) = extend(self.outbox.last_mut(), issued.clone()) {
            self.outbox.push(run);
        }
        let mine = &mut self.ranks[self.shared.rank];
        mine.end += 1;
        if let Some(run) = extend(mine.runs.back_mut(), issued) {
            mine.runs.push_back(run);
        }
    }

    /// One round: publish, read, compare, clean up.
    fn step(&mut self, urgent: bool) -> Result<Option<Box<Divergence>>, String> {
        self.publish()?;
        self.read(urgent)?;
        let verdict = self.compare();
        self.delete_verified();
        Ok(verdict)
    }

    /// Publishes the outbox, in chunks of at most [`MAX_CHUNK_RUNS`] runs
    /// (a store that failed for a while leaves a long outbox, and the
    /// store bounds its values).
    fn publish(&mut self) -> Result<(), String> {
        while !self.outbox.is_empty() {
            let runs: Vec<Run> = self
                .outbox
                .drain(..self.outbox.len().min(MAX_CHUNK_RUNS))
                .collect();
            let chunk = Chunk {
                verified: self.verified,
                runs,
            };
            let end = chunk.runs.last().map_or(0, Run::end);
            let stored = serde_json::to_vec(&chunk)
                .map_err(|error| error.to_string())
                .and_then(|value| {
                    self.store
                        .set(&self.key(self.shared.rank, self.chunk), &value)
                        .map_err(|error| error.to_string())
                });
            if let Err(error) = stored {
                // Kept for the next round, under the same number.
                self.outbox.splice(0..0, chunk.runs);
                return Err(format!(
                    "publishing this rank's fingerprints failed: {error}"
                ));
            }
            self.published.push_back((self.chunk, end));
            self.chunk += 1;
        }
        self.last_publish = Instant::now();
        Ok(())
    }

    /// Reads the other ranks' new chunks; when a host read waits, first
    /// waits (one slice) for the chunks of the ranks behind what it wants.
    fn read(&mut self, urgent: bool) -> Result<(), String> {
        let wanted = self.lock().wanted;
        let others: Vec<usize> = (0..self.ranks.len())
            .filter(|&rank| rank != self.shared.rank)
            .collect();
        let lagging: Vec<usize> = others
            .iter()
            .copied()
            .filter(|&rank| self.ranks[rank].end < wanted)
            .collect();
        if urgent && !lagging.is_empty() {
            let keys: Vec<String> = lagging
                .iter()
                .map(|&rank| self.key(rank, self.ranks[rank].next_chunk))
                .collect();
            let names: Vec<&str> = keys.iter().map(String::as_str).collect();
            match self.store.wait(&names, WAIT_SLICE) {
                Ok(()) => {}
                Err(error) if error.is_timeout() => {}
                Err(error) => {
                    return Err(format!(
                        "reading the other ranks' fingerprints failed: {error}"
                    ));
                }
            }
        }
        for rank in others {
            loop {
                let key = self.key(rank, self.ranks[rank].next_chunk);
                let bytes = match self.store.try_get(&key) {
                    Ok(Some(bytes)) => bytes,
                    Ok(None) => break,
                    Err(error) => {
                        return Err(format!(
                            "reading rank {rank}'s fingerprints failed: {error}"
                        ));
                    }
                };
                let chunk: Chunk = serde_json::from_slice(&bytes).map_err(|error| {
                    format!("rank {rank}'s fingerprints under {key} did not parse: {error}")
                })?;
                let known = &mut self.ranks[rank];
                for run in &chunk.runs {
                    if run.issued.collective_seq != known.end || run.len == 0 {
                        return Err(format!(
                            "rank {rank}'s fingerprints under {key} are not its next collectives: \
                             expected a run from #{}, got {} from #{}",
                            known.end, run.len, run.issued.collective_seq
                        ));
                    }
                    known.end = run.end();
                }
                known.next_chunk += 1;
                known.verified = chunk.verified;
                known.runs.extend(chunk.runs);
            }
        }
        self.last_compare = Instant::now();
        let behind: Vec<usize> = (0..self.ranks.len())
            .filter(|&rank| self.ranks[rank].end < wanted)
            .collect();
        self.lock().lagging = behind;
        Ok(())
    }

    /// Compares every rank's collectives from the verified mark to the
    /// last one every rank published, moving the mark; the first
    /// collective they did not issue alike, if any.
    fn compare(&mut self) -> Option<Box<Divergence>> {
        let upto = self.ranks.iter().map(|known| known.end).min().unwrap_or(0);
        let start = self.verified;
        let mut verdict = None;
        while self.verified < upto {
            let seq = self.verified;
            // Every rank's run holding `seq`: each has runs up to `upto`.
            let Some(fronts) = self
                .ranks
                .iter()
                .map(|known| known.runs.front())
                .collect::<Option<Vec<&Run>>>()
            else {
                break;
            };
            let Some(first) = fronts.first() else { break };
            if fronts
                .iter()
                .any(|run| !first.issued.differences(&run.issued).is_empty())
            {
                let by_rank = fronts
                    .iter()
                    .enumerate()
                    .map(|(rank, run)| {
                        let issued = Issued {
                            collective_seq: seq,
                            ..run.issued.clone()
                        };
                        (rank, vec![issued])
                    })
                    .collect();
                verdict = first_divergence(&by_rank).map(Box::new);
                break;
            }
            let step = fronts
                .iter()
                .map(|run| run.end() - seq)
                .min()
                .unwrap_or(1)
                .min(upto - seq);
            self.verified = seq + step;
            for known in &mut self.ranks {
                while known
                    .runs
                    .front()
                    .is_some_and(|run| run.end() <= self.verified)
                {
                    known.runs.pop_front();
                }
            }
        }
        if self.verified > start {
            self.lock().verified = self.verified;
            self.shared.changed.notify_all();
        }
        verdict
    }

    /// Deletes this rank's chunks that every rank has verified past.
    fn delete_verified(&mut self) {
        let everywhere = self
            .ranks
            .iter()
            .enumerate()
            .map(|(rank, known)| match rank == self.shared.rank {
                true => self.verified,
                false => known.verified,
            })
            .min()
            .unwrap_or(0);
        while let Some(&(chunk, end)) = self.published.front() {
            if end > everywhere {
                break;
            }
            let _ = self.store.delete(&self.key(self.shared.rank, chunk));
            self.published.pop_front();
        }
    }
}
