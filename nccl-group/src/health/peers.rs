//! What the ranks of a failed group tell each other through the store:
//! how far each got and its last collectives ([`PeerReport`]), from which
//! a failure names the ranks that lag and the first collective the ranks
//! did not issue alike ([`divergence`]).
//!
//! Each failing rank publishes its report under
//! `<group>/<generation>/progress/<rank>` and reads every other rank's,
//! within a bound in all; ranks that do not answer are left out (and
//! count as lagging).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::diagnostics::analysis::{Divergence, Issued, first_divergence};
use crate::diagnostics::recorder::records::{OpRecord, PeerProgress};
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Scope;

/// How many of its last collectives a failing rank publishes (about 100
/// bytes each).
pub(crate) const REPORTED_COLLECTIVES: usize = 128;

/// One rank's report after a failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PeerReport {
    /// How far it got.
    pub(crate) progress: PeerProgress,
    /// Its last collectives (at most [`REPORTED_COLLECTIVES`]), oldest
    /// first.
    pub(crate) collectives: Vec<Issued>,
}

impl PeerReport {
    /// `progress` and the last collectives of `records` (oldest first).
    pub(crate) fn new(progress: PeerProgress, records: &[OpRecord]) -> Self {
        let mut collectives: Vec<Issued> = records
            .iter()
            .rev()
            .filter_map(Issued::from_record)
            .take(REPORTED_COLLECTIVES)
            .collect();
        collectives.reverse();
        Self {
            progress,
            collectives,
        }
    }
}

/// Publishes this rank's report.
///
/// A store that fails leaves the others without it; they count this rank as
/// silent, which is the truth as they see it. Each report's key is its rank in
/// `scope`, the generation's [`PROGRESS`](crate::protocols::PROGRESS) scope.
pub(crate) fn publish(store: &dyn Store, scope: &Scope, mine: &PeerReport) {
    if let Ok(bytes) = serde_json::to_vec(mine) {
        let _ = store.set(&scope.key(mine.progress.rank), &bytes);
    }
}

/// `mine` and the reports of every other rank of `0..world_size` that
/// answer within `wait` in all (then those already there), in rank order.
pub(crate) fn gather(
    store: &dyn Store,
    scope: &Scope,
    mine: PeerReport,
    world_size: usize,
    wait: Duration,
) -> Vec<PeerReport> {
    let deadline = Instant::now() + wait;
    let me = mine.progress.rank;
    let mut reports = vec![mine];
    for rank in (0..world_size).filter(|&r| r != me) {
        // Waiting while time is left, then only reading what is there, so
        // a silent rank does not hide the ranks after it; once the store
        // fails (each further request could take its own timeouts), the
        // ranks not asked count as silent.
        let key = scope.key(rank);
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = match left.is_zero() {
            true => store.try_get(&key),
            false => store.get(&key, left).map(Some),
        };
        match answer {
            Ok(bytes) => reports
                .extend(bytes.and_then(|bytes| serde_json::from_slice::<PeerReport>(&bytes).ok())),
            Err(error) if error.is_timeout() => {}
            Err(_) => break,
        }
    }
    reports.sort_by_key(|report| report.progress.rank);
    reports
}

/// The first collective that the ranks of `reports` did not issue alike,
/// among those every one of them issued: a rank whose records end
/// earlier lags (the failure names it as lagging) rather than diverges.
pub(crate) fn divergence(reports: &[PeerReport]) -> Option<Divergence> {
    let common = reports
        .iter()
        .map(|report| report.collectives.last().map(|i| i.collective_seq))
        .min()??;
    let by_rank: BTreeMap<usize, Vec<Issued>> = reports
        .iter()
        .map(|report| {
            let issued = report
                .collectives
                .iter()
                .filter(|issued| issued.collective_seq <= common)
                .cloned()
                .collect();
            (report.progress.rank, issued)
        })
        .collect();
    first_divergence(&by_rank)
}

#[cfg(test)]
mod tests;
