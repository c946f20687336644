//! The reports a failed group's ranks exchange: made from real records,
//! gathered through an in-process store by threads as ranks (one silent),
//! and the divergence found in them.

use crate::diagnostics::clock;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::DataType;

use super::*;
use crate::devices::DeviceList;
use crate::diagnostics::recorder::FlightRecorder;
use crate::diagnostics::recorder::records::{OpDescription, lagging_ranks};
use nccl_rendezvous::InProcessStore;

/// The records of a rank that issued `ops` (name, element count), with a
/// send between every two.
fn records(ops: &[(&'static str, usize)]) -> (PeerProgress, Vec<OpRecord>) {
    let recorder = FlightRecorder::new(4096);
    let now = Instant::now();
    for &(op, count) in ops {
        let description = |op, collective| OpDescription {
            op,
            dtype: Some(DataType::Float32),
            count,
            output_count: count,
            reduction: (op == "all_reduce").then_some("sum"),
            peer: None,
            timeout: Duration::from_secs(5),
            devices: DeviceList::one(0).unwrap(),
            collective,
        };
        recorder.record(&description(op, true), clock::nanos(now));
        recorder.record(&description("send", false), clock::nanos(now));
    }
    let (last_enqueued, last_completed) = recorder.progress();
    let progress = PeerProgress {
        rank: 0,
        last_enqueued,
        last_completed,
    };
    (progress, recorder.snapshot().0)
}

fn report(rank: usize, ops: &[(&'static str, usize)]) -> PeerReport {
    let (mut progress, records) = records(ops);
    progress.rank = rank;
    PeerReport::new(progress, &records)
}

/// 58 collectives (#0-#57), mixed; `count57` elements in #57.
fn stuck_at_57(count57: usize) -> Vec<(&'static str, usize)> {
    (0..58)
        .map(|n| match (n % 2, n) {
            (_, 57) => ("all_gather", count57),
            (0, _) => ("all_reduce", 1024),
            _ => ("all_gather", 256),
        })
        .collect()
}

#[test]
fn a_report_holds_the_last_collectives_only() {
    let long: Vec<(&'static str, usize)> = (0..300).map(|_| ("all_reduce", 8)).collect();
    let report = report(2, &long);
    assert_eq!(report.collectives.len(), REPORTED_COLLECTIVES);
    assert_eq!(report.collectives[0].collective_seq, 300 - 128);
    assert_eq!(report.collectives.last().unwrap().collective_seq, 299);
    assert_eq!(report.progress.last_enqueued, Some(299));
    let bytes = serde_json::to_vec(&report).unwrap();
    assert!(bytes.len() < 200 * REPORTED_COLLECTIVES, "{}", bytes.len());
    assert_eq!(
        serde_json::from_slice::<PeerReport>(&bytes).unwrap(),
        report
    );
}

#[test]
fn the_ranks_that_answer_name_the_divergence_and_a_silent_one_lags() {
    const WORLD: usize = 4;
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks: Vec<_> = (0..WORLD)
        .filter(|&rank| rank != 2) // rank 2 is stopped: it never answers
        .map(|rank| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let mine = report(rank, &stuck_at_57(if rank == 3 { 257 } else { 256 }));
                let scope = Scope::path("trainer/0/progress").unwrap();
                publish(&*store, &scope, &mine);
                let reports = gather(&*store, &scope, mine, WORLD, Duration::from_millis(500), &|_| false);
                (rank, reports)
            })
        })
        .collect();
    for handle in ranks {
        let (rank, reports) = handle.join().unwrap();
        let answered: Vec<usize> = reports.iter().map(|r| r.progress.rank).collect();
        assert_eq!(answered, [0, 1, 3], "rank {rank}");
        let peers: Vec<PeerProgress> = reports.iter().map(|r| r.progress.clone()).collect();
        assert_eq!(lagging_ranks(Some(57), &peers, WORLD, rank), [2]);
        let divergence = divergence(&reports).expect("rank 3 differs");
        assert_eq!(
            divergence.to_string(),
            "rank 3 issued all_gather(float x 257) as collective #57; ranks 0-1 issued \
             all_gather(float x 256) (the element count differs)"
        );
    }
}

/// The ranks each gather of a world of `world` ranks, each waiting up to an
/// hour, got, where `reporting` ranks publish and `gone` ranks are known
/// gone: `None` for a gather that had not ended after a minute, which it
/// would not unless it ended once every rank answered or was gone.
fn gathered_early(world: usize, reporting: &[usize], gone: &'static [usize]) -> Vec<Option<Vec<usize>>> {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let scope = Scope::path("trainer/0/progress").unwrap();
    let (sent, received) = mpsc::channel();
    for &rank in reporting {
        let (store, scope, sent) = (Arc::clone(&store), scope.clone(), sent.clone());
        thread::spawn(move || {
            let mine = report(rank, &stuck_at_57(256));
            publish(&*store, &scope, &mine);
            let hour = Duration::from_secs(3600);
            let reports = gather(&*store, &scope, mine, world, hour, &|r| gone.contains(&r));
            let _ = sent.send(reports.iter().map(|r| r.progress.rank).collect());
        });
    }
    (0..reporting.len())
        .map(|_| received.recv_timeout(Duration::from_secs(60)).ok())
        .collect()
}

#[test]
fn the_exchange_ends_once_every_rank_has_answered_or_is_known_gone() {
    let everyone = gathered_early(3, &[0, 1, 2], &[]);
    assert_eq!(everyone, vec![Some(vec![0, 1, 2]); 3]);
    let one_gone = gathered_early(4, &[0, 1, 3], &[2]);
    assert_eq!(one_gone, vec![Some(vec![0, 1, 3]); 3]);
    // A rank that published its report and then died still counts.
    let store = InProcessStore::new();
    let scope = Scope::path("trainer/0/progress").unwrap();
    publish(&store, &scope, &report(1, &stuck_at_57(256)));
    let mine = report(0, &stuck_at_57(256));
    let reports = gather(&store, &scope, mine, 2, Duration::from_secs(3600), &|_| true);
    assert_eq!(reports.iter().map(|r| r.progress.rank).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn a_skip_diverges_where_the_operations_differ_and_a_lag_does_not() {
    let mixed = |n: usize| match n % 3 {
        0 => ("all_reduce", 1024),
        1 => ("all_gather", 256),
        _ => ("broadcast", 64),
    };
    let all: Vec<_> = (0..58).map(mixed).collect();
    let skipped: Vec<_> = (0..59).filter(|&n| n != 57).map(mixed).collect();
    let reports = [report(0, &all), report(1, &all), report(3, &skipped)];
    assert_eq!(
        divergence(&reports)
            .expect("rank 3 skipped #57")
            .to_string(),
        "rank 3 issued all_gather(float x 256) as collective #57; ranks 0-1 issued \
         all_reduce(float x 1024, sum) (the operation differs)"
    );
    // A rank whose records end earlier (it lags, or skipped an operation
    // like the others) does not diverge: the failure names it as lagging.
    let behind: Vec<_> = (0..40).map(mixed).collect();
    let reports = [report(0, &all), report(1, &behind)];
    assert_eq!(divergence(&reports), None);
    assert_eq!(divergence(&[report(0, &all), report(1, &[])]), None);
    assert_eq!(divergence(&[]), None);
}
