//! What the ranks of a failed group tell each other through the store:
//! how far each got and its last collectives ([`PeerReport`]), from which
//! a failure names the ranks that lag and the first collective the ranks
//! did not issue alike ([`divergence`]).
//!
//! Each failing rank publishes its report under
//! `<group>/<generation>/progress/<rank>` and reads every other rank's,
//! within a bound in all, or until every other rank has either answered
//! or is known gone; ranks that do not answer are left out (and count as
//! lagging).

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

/// How long the exchange waits for one rank's report before it asks again
/// whether that rank is known gone.
const GONE_POLL: Duration = Duration::from_millis(100);

/// `mine` and the reports of every other rank of `0..world_size` that
/// answer within `wait` in all (then those already there), in rank order.
///
/// A rank for which `gone` says true (its process is known to have exited)
/// counts as answered, absent: the exchange
/// ends as soon as every other rank has reported or is known gone, and
/// `wait` bounds it only when a rank is silent but not known gone (hung).
pub(crate) fn gather(
    store: &dyn Store,
    scope: &Scope,
    mine: PeerReport,
    world_size: usize,
    wait: Duration,
    gone: &dyn Fn(usize) -> bool,
) -> Vec<PeerReport> {
    let deadline = Instant::now() + wait;
    let me = mine.progress.rank;
    let mut reports = vec![mine];
    for rank in (0..world_size).filter(|&r| r != me) {
        match ask(store, &scope.key(rank), deadline, || gone(rank)) {
            Answer::Report(bytes) => {
                reports.extend(serde_json::from_slice::<PeerReport>(&bytes).ok())
            }
            Answer::Silent => {}
            // Once the store fails (each further request could take its own
            // timeouts), the ranks not asked count as silent.
            Answer::StoreFailed => break,
        }
    }
    reports.sort_by_key(|report| report.progress.rank);
    reports
}

/// What one rank's report key gave.
enum Answer {
    Report(Vec<u8>),
    /// Not there by the deadline, or its rank is known gone.
    Silent,
    StoreFailed,
}

/// The report at `key`, waited for until `deadline` in slices of
/// [`GONE_POLL`] between which `gone` is asked; after the deadline only
/// what is there, so a silent rank does not hide the ranks after it.
fn ask(store: &dyn Store, key: &str, deadline: Instant, gone: impl Fn() -> bool) -> Answer {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // A report published before its rank died still counts: read first.
        let answer = match left.is_zero() {
            true => store.try_get(key),
            false => store.get(key, left.min(GONE_POLL)).map(Some),
        };
        match answer {
            Ok(Some(bytes)) => return Answer::Report(bytes),
            Ok(None) => return Answer::Silent,
            Err(error) if error.is_timeout() => {
                if gone() {
                    return Answer::Silent;
                }
            }
            Err(_) => return Answer::StoreFailed,
        }
    }
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
