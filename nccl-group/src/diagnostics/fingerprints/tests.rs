//! The mismatch check with threads as ranks over one in-process store:
//! agreement, each kind of mismatch at collective 57 of 120 found by every
//! rank with or without a host read, pushes out of order, a rank that
//! never publishes, runs, and the store's keys once the group ends.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use nccl_rendezvous::InProcessStore;
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Scope;

const WORLD: usize = 4;
const ISSUED: u64 = 120;
const ODD: usize = 3;
const AT: u64 = 57;
/// A liveness bound for the waits, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

fn scope() -> Scope {
    Scope::path("g/0/fingerprints").unwrap()
}

fn op(op: &'static str, dtype: &'static str, count: usize, seq: u64) -> Issued {
    Issued {
        collective_seq: seq,
        op: Cow::Borrowed(op),
        dtype: Some(Cow::Borrowed(dtype)),
        count,
        root: None,
        reduction: (op == "all_reduce").then_some(Cow::Borrowed("sum")),
    }
}

/// The mixed sequence: three all_reduces, an all_gather, a broadcast
/// from 0, again.
fn mixed(seq: u64) -> Issued {
    match seq % 5 {
        0..=2 => op("all_reduce", "float", 1024, seq),
        3 => op("all_gather", "float", 256, seq),
        _ => Issued {
            root: Some(0),
            ..op("broadcast", "float", 64, seq)
        },
    }
}

/// One rank of `WORLD`: its check, and the divergences its thread
/// reported.
struct Rank {
    fingerprints: Arc<Fingerprints>,
    verdicts: Mutex<mpsc::Receiver<Box<Divergence>>>,
}

fn ranks(store: &Arc<dyn Store>) -> Vec<Rank> {
    (0..WORLD)
        .map(|rank| {
            let fingerprints = Arc::new(Fingerprints::new(rank, WORLD));
            let (tell, verdicts) = mpsc::channel();
            spawn(
                Arc::clone(&fingerprints),
                Arc::clone(store),
                scope(),
                Box::new(move |verdict| {
                    let _ = tell.send(verdict);
                }),
            )
            .unwrap();
            Rank {
                fingerprints,
                verdicts: Mutex::new(verdicts),
            }
        })
        .collect()
}

/// Every rank pushes its sequence (`sequence(rank, seq)`) and then waits
/// for the verdict of its last collective; returns each rank's result.
fn issue_and_read(
    ranks: &[Rank],
    sequence: impl Fn(usize, u64) -> Issued + Sync,
) -> Vec<Result<(), Stop<()>>> {
    thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| {
                let sequence = &sequence;
                s.spawn(move || {
                    for seq in 0..ISSUED {
                        r.fingerprints.push(sequence(rank, seq));
                    }
                    let deadline = Instant::now() + PATIENCE;
                    r.fingerprints
                        .await_verdict(ISSUED - 1, deadline, &|| Ok(()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn close(ranks: &[Rank]) {
    for rank in ranks {
        rank.fingerprints.close();
    }
}

/// Whether any chunk key of any rank is left in `store`, waiting (at most
/// the liveness bound) for the threads to delete theirs.
fn keys_left(store: &Arc<dyn Store>) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left: Vec<String> = (0..WORLD)
            .flat_map(|rank| {
                let keys = scope().index(rank as u64);
                (0..ISSUED)
                    .map(move |chunk| keys.key(chunk))
                    .chain([scope().index(rank as u64).key("left")])
            })
            .chain([scope().key("closed")])
            .filter(|key| store.try_get(key).unwrap().is_some())
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn ranks_that_issue_alike_are_verified_and_leave_no_keys() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    let results = issue_and_read(&ranks, |_, seq| mixed(seq));
    for (rank, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "rank {rank}: {result:?}");
        assert!(ranks[rank].fingerprints.agreed(ISSUED - 1));
        assert!(!ranks[rank].fingerprints.agreed(ISSUED));
        assert!(
            ranks[rank].verdicts.lock().unwrap().try_recv().is_err(),
            "no verdict"
        );
    }
    close(&ranks);
    assert_eq!(keys_left(&store), Vec::<String>::new());
}

/// What rank `ODD` makes of collective `AT`.
type Odd = fn(Issued) -> Issued;

/// Rank `ODD` issues collective `AT` as `odd` instead of `mixed(AT)`.
fn diverging(odd: Odd) -> impl Fn(usize, u64) -> Issued + Sync {
    move |rank, seq| match (rank, seq) {
        (ODD, AT) => odd(mixed(seq)),
        _ => mixed(seq),
    }
}

#[test]
fn every_kind_of_mismatch_is_found_by_every_rank_naming_the_rank_and_both_fingerprints() {
    let kinds: [(&str, Odd); 5] = [
        ("data type", |i| Issued {
            dtype: Some(Cow::Borrowed("int32")),
            ..i
        }),
        ("element count", |i| Issued { count: 1025, ..i }),
        ("operation", |i| Issued {
            op: Cow::Borrowed("all_gather"),
            ..i
        }),
        ("root", |_| Issued {
            root: Some(2),
            ..op("broadcast", "float", 64, AT)
        }),
        ("reduction", |i| Issued {
            reduction: Some(Cow::Borrowed("max")),
            ..i
        }),
    ];
    for (what, odd) in kinds {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
        let ranks = ranks(&store);
        // The root mismatch needs a broadcast at `AT` everywhere.
        let sequence = move |rank: usize, seq: u64| match (what, seq) {
            ("root", AT) if rank != ODD => Issued {
                root: Some(0),
                ..op("broadcast", "float", 64, seq)
            },
            _ => diverging(odd)(rank, seq),
        };
        let results = issue_and_read(&ranks, sequence);
        for (rank, result) in results.into_iter().enumerate() {
            let Err(Stop::Mismatch { divergence, .. }) = result else {
                panic!("{what}: rank {rank} got {result:?}");
            };
            assert_eq!(divergence.collective_seq, AT, "{what}");
            assert_eq!(divergence.others.len(), 1, "{what}: {divergence}");
            assert_eq!(divergence.others[0].rank, ODD, "{what}: {divergence}");
            let theirs = divergence.others[0]
                .issued
                .as_ref()
                .expect("rank 3 issued one");
            assert_eq!(divergence.expected.differences(theirs), vec![what]);
            let told = ranks[rank]
                .verdicts
                .lock()
                .unwrap()
                .recv_timeout(PATIENCE)
                .expect("a verdict");
            assert_eq!(told.collective_seq, AT);
            // Collectives before it were verified.
            assert!(ranks[rank].fingerprints.agreed(AT - 1));
            assert!(!ranks[rank].fingerprints.agreed(AT));
        }
        close(&ranks);
    }
}

#[test]
fn a_mismatch_no_host_read_asks_about_is_still_found() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    let odd = diverging(|i| Issued { count: 7, ..i });
    for (rank, r) in ranks.iter().enumerate() {
        for seq in 0..ISSUED {
            r.fingerprints.push(odd(rank, seq));
        }
    }
    for r in &ranks {
        match r.verdicts.lock().unwrap().recv_timeout(PATIENCE) {
            Ok(divergence) => assert_eq!(divergence.collective_seq, AT),
            other => panic!("expected the mismatch, got {other:?}"),
        }
    }
    close(&ranks);
}

#[test]
fn collectives_pushed_out_of_order_by_two_threads_are_verified() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    thread::scope(|s| {
        for r in &ranks {
            s.spawn(move || {
                // The odd collectives first, then the even ones.
                for seq in (1..ISSUED).step_by(2).chain((0..ISSUED).step_by(2)) {
                    r.fingerprints.push(mixed(seq));
                }
                let deadline = Instant::now() + PATIENCE;
                r.fingerprints
                    .await_verdict(ISSUED - 1, deadline, &|| Ok::<(), ()>(()))
                    .unwrap();
            });
        }
    });
    close(&ranks);
}

#[test]
fn a_rank_that_never_publishes_is_named_when_the_wait_ends() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    let results: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .enumerate()
            .filter(|&(rank, _)| rank != ODD)
            .map(|(_, r)| {
                s.spawn(move || {
                    for seq in 0..ISSUED {
                        r.fingerprints.push(mixed(seq));
                    }
                    // Long enough for the exchange to have looked at the
                    // store on a loaded machine; rank 3 never publishes.
                    let deadline = Instant::now() + Duration::from_secs(3);
                    r.fingerprints
                        .await_verdict(ISSUED - 1, deadline, &|| Ok::<(), ()>(()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        match result {
            Err(Stop::Incomplete { absent, error, .. }) => {
                assert_eq!(absent, vec![ODD]);
                assert_eq!(error, None);
            }
            other => panic!("expected rank {ODD} named, got {other:?}"),
        }
    }
    close(&ranks);
}

#[test]
fn a_waiter_stops_with_its_group() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    ranks[0].fingerprints.push(mixed(0));
    let result = ranks[0]
        .fingerprints
        .await_verdict(0, Instant::now() + PATIENCE, &|| Err("closed"));
    assert!(matches!(result, Err(Stop::Closed("closed"))), "{result:?}");
    close(&ranks);
}

#[test]
fn a_loop_of_one_collective_is_one_run() {
    let mut runs: Vec<Run> = Vec::new();
    for seq in 0..10 {
        let issued = match seq {
            7 => op("all_gather", "float", 1024, seq),
            _ => op("all_reduce", "float", 1024, seq),
        };
        if let Some(run) = extend(runs.last_mut(), issued) {
            runs.push(run);
        }
    }
    let shape: Vec<(u64, u64)> = runs
        .iter()
        .map(|run| (run.issued.collective_seq, run.len))
        .collect();
    assert_eq!(shape, vec![(0, 7), (7, 1), (8, 2)]);
    // A gap starts a run even with the same fingerprint.
    let mut last = runs.pop();
    let after_gap = extend(last.as_mut(), op("all_reduce", "float", 1024, 11));
    assert!(after_gap.is_some());
}

#[test]
fn a_rank_that_ends_first_leaves_what_the_others_still_need() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    for r in &ranks[1..] {
        r.fingerprints.push(mixed(0));
    }
    ranks[0].fingerprints.push(mixed(0));
    let patient = || Instant::now() + PATIENCE;
    ranks[0]
        .fingerprints
        .await_verdict(0, patient(), &|| Ok::<(), ()>(()))
        .expect("rank 0 verified collective 0");
    ranks[0].fingerprints.close();
    for r in &ranks[1..] {
        r.fingerprints
            .await_verdict(0, patient(), &|| Ok::<(), ()>(()))
            .expect("rank 0's chunk was still there");
    }
    close(&ranks);
    assert_eq!(keys_left(&store), Vec::<String>::new());
}

#[test]
fn a_clean_end_settles_every_collective_pushed() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    thread::scope(|s| {
        for r in &ranks {
            s.spawn(move || {
                for seq in 0..ISSUED {
                    r.fingerprints.push(mixed(seq));
                }
                r.fingerprints
                    .settle(Instant::now() + PATIENCE, &|| Ok::<(), ()>(()))
                    .expect("settled");
                assert!(r.fingerprints.agreed(ISSUED - 1));
            });
        }
    });
    close(&ranks);
}

#[test]
fn a_read_after_a_failure_finds_the_mismatch_behind_it_within_the_grace() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks = ranks(&store);
    // Every rank's fingerprints are out before rank 0's group fails (as
    // a peer's abort after its own check found the divergence).
    let odd = diverging(|i| Issued { count: 7, ..i });
    for (rank, r) in ranks.iter().enumerate() {
        for seq in 0..=AT {
            r.fingerprints.push(odd(rank, seq));
        }
    }
    for r in &ranks[1..] {
        let told = r.verdicts.lock().unwrap().recv_timeout(PATIENCE);
        assert_eq!(told.expect("a divergence").collective_seq, AT);
    }
    ranks[0].fingerprints.group_failed();
    // Within the grace, or the thread found it itself first.
    match ranks[0].fingerprints.failure_verdict(AT) {
        Some(Stop::Mismatch { divergence, .. }) => assert_eq!(divergence.collective_seq, AT),
        None => {
            let told = ranks[0].verdicts.lock().unwrap().try_recv();
            assert_eq!(told.expect("found by the thread").collective_seq, AT);
        }
        Some(other) => panic!("expected the mismatch, got {other:?}"),
    }
    // Verified before the divergence: nothing to wait for.
    assert!(ranks[0].fingerprints.failure_verdict(AT - 1).is_none());
    close(&ranks);
}

/// An in-process store that remembers the largest value set in it.
#[derive(Default)]
struct Largest {
    inner: InProcessStore,
    largest: std::sync::atomic::AtomicUsize,
}

impl Store for Largest {
    fn set(&self, key: &str, value: &[u8]) -> nccl_rendezvous::Result<()> {
        self.largest
            .fetch_max(value.len(), std::sync::atomic::Ordering::SeqCst);
        self.inner.set(key, value)
    }
    fn get(&self, key: &str, timeout: Duration) -> nccl_rendezvous::Result<Vec<u8>> {
        self.inner.get(key, timeout)
    }
    fn try_get(&self, key: &str) -> nccl_rendezvous::Result<Option<Vec<u8>>> {
        self.inner.try_get(key)
    }
    fn compare_set(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> nccl_rendezvous::Result<nccl_rendezvous::CompareSet> {
        self.inner.compare_set(key, expected, new)
    }
    fn add(&self, key: &str, delta: i64) -> nccl_rendezvous::Result<i64> {
        self.inner.add(key, delta)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> nccl_rendezvous::Result<()> {
        self.inner.wait(keys, timeout)
    }
    fn delete(&self, key: &str) -> nccl_rendezvous::Result<bool> {
        self.inner.delete(key)
    }
    fn default_timeout(&self) -> Duration {
        self.inner.default_timeout()
    }
}

#[test]
fn collectives_that_change_every_time_go_out_in_bounded_chunks() {
    let largest = Arc::new(Largest::default());
    let store: Arc<dyn Store> = Arc::clone(&largest) as Arc<dyn Store>;
    let ranks = ranks(&store);
    // Alternating fingerprints, one run each: three chunks' worth, queued
    // before the exchange thread takes them.
    let many = 3 * MAX_CHUNK_RUNS as u64;
    let alternating = |seq: u64| match seq % 2 {
        0 => op("all_reduce", "float", 1024, seq),
        _ => op("all_gather", "float", 1024, seq),
    };
    thread::scope(|s| {
        for r in &ranks {
            s.spawn(move || {
                for seq in 0..many {
                    r.fingerprints.push(alternating(seq));
                }
                r.fingerprints
                    .await_verdict(many - 1, Instant::now() + PATIENCE, &|| Ok::<(), ()>(()))
                    .expect("verified");
            });
        }
    });
    close(&ranks);
    let one_run = serde_json::to_vec(&Run {
        issued: alternating(many),
        len: 1,
    })
    .unwrap()
    .len();
    let largest = largest.largest.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        largest <= (MAX_CHUNK_RUNS + 1) * (one_run + 1),
        "a chunk of {largest} bytes, {one_run} a run"
    );
}
