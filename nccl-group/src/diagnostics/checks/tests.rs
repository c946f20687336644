//! The collective check with threads as ranks over one in-process store:
//! each kind of mismatch at collective 57 of 120, a skipped collective, a
//! rank that never comes, a withdrawn collective, and the store's keys.

use std::borrow::Cow;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use nccl_rendezvous::InProcessStore;

/// The checks' scope of generation 0 of group `g`.
fn scope() -> Scope {
    Scope::path("g/0/checks").unwrap()
}

const WORLD: usize = 4;
const ISSUED: u64 = 120;
const ODD: usize = 3;
const AT: u64 = 57;
/// A liveness bound for the threads' waits, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

fn patient(_: u64) -> Duration {
    PATIENCE
}

fn op(op: &'static str, dtype: &'static str, count: usize) -> Issued {
    Issued {
        collective_seq: 0,
        op: Cow::Borrowed(op),
        dtype: Some(Cow::Borrowed(dtype)),
        count,
        root: None,
        reduction: (op == "all_reduce").then_some(Cow::Borrowed("sum")),
    }
}

fn all_reduce() -> Issued {
    op("all_reduce", "float", 1024)
}

/// The mixed sequence: all_reduce, all_gather, broadcast from 0, ...
fn mixed(n: u64) -> Issued {
    match n % 3 {
        0 => all_reduce(),
        1 => op("all_gather", "float", 256),
        _ => broadcast(0),
    }
}

/// How one rank's run of checks ended: the collective whose check
/// stopped it and why, or `None` when every check passed.
type Ended = Option<(u64, Stop<()>)>;

/// Every rank checks its own sequence (`sequence(rank)`) with a check
/// every `every` collectives, the check of collective `n` waiting at most
/// `wait(n)`; returns how each rank's run ended.
fn run(
    every: u32,
    wait: fn(u64) -> Duration,
    sequence: impl Fn(usize) -> Vec<Issued>,
) -> Vec<Ended> {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks: Vec<_> = (0..WORLD)
        .map(|rank| {
            let checker = Checker::new(every, scope(), rank, WORLD, Arc::clone(&store));
            let sequence = sequence(rank);
            thread::spawn(move || {
                for (n, issued) in (0..).zip(sequence) {
                    let deadline = Instant::now() + wait(n);
                    match checker.check(issued, deadline, &|| Ok(())) {
                        Ok(checked) => {
                            let seq = checked.seq;
                            checked.keep();
                            assert!(seq < ISSUED);
                        }
                        Err(stop) => return Some((checker.window().next - 1, stop)),
                    }
                }
                None
            })
        })
        .collect();
    ranks.into_iter().map(|rank| rank.join().unwrap()).collect()
}

fn broadcast(root: usize) -> Issued {
    Issued {
        root: Some(root),
        ..op("broadcast", "float", 64)
    }
}

/// Every rank issues `base(n)` as collective `n`, except that rank
/// [`ODD`] issues `instead` as collective [`AT`].
fn one_differs(base: fn(u64) -> Issued, instead: Issued) -> impl Fn(usize) -> Vec<Issued> {
    move |rank| {
        (0..ISSUED)
            .map(|n| match rank == ODD && n == AT {
                true => instead.clone(),
                false => base(n),
            })
            .collect()
    }
}

/// Every rank stopped at the same collective, at most `every - 1` after
/// [`AT`], with the same divergence at [`AT`]; returns its text.
fn every_rank_names_the_mismatch(ended: Vec<Ended>, every: u32) -> String {
    let mut texts = Vec::new();
    for (rank, ended) in ended.into_iter().enumerate() {
        let Some((
            seq,
            Stop::Mismatch {
                divergence,
                first,
                last,
            },
        )) = ended
        else {
            panic!("rank {rank}: {ended:?}");
        };
        assert!(
            (AT..AT + u64::from(every)).contains(&seq),
            "rank {rank}: {seq}"
        );
        assert_eq!((first, last), (seq + 1 - u64::from(every), seq));
        assert_eq!(divergence.collective_seq, AT);
        texts.push(divergence.to_string());
    }
    texts.dedup();
    assert_eq!(texts.len(), 1, "the ranks disagree: {texts:?}");
    texts.remove(0)
}

#[test]
fn each_kind_of_mismatch_stops_every_rank_by_collective_57_plus_k() {
    let steady = |_| all_reduce();
    let broadcasts = |_| broadcast(0);
    let cases = [
        (
            steady as fn(u64) -> Issued,
            op("all_reduce", "float", 1025),
            "element count",
        ),
        (steady, op("all_reduce", "int32", 1024), "data type"),
        (steady, broadcast(0), "operation"),
        (
            steady,
            Issued {
                reduction: Some(Cow::Borrowed("max")),
                ..all_reduce()
            },
            "reduction",
        ),
        (broadcasts, broadcast(1), "root"),
    ];
    for every in [1, 16] {
        for (base, instead, what) in &cases {
            let ended = run(every, patient, one_differs(*base, instead.clone()));
            let text = every_rank_names_the_mismatch(ended, every);
            assert!(
                text.starts_with(&format!(
                    "rank 3 issued {instead} as collective #57; ranks 0-2 issued "
                )),
                "{text}"
            );
            assert!(text.ends_with(&format!("(the {what} differs)")), "{text}");
        }
    }
    // The issue's example, word for word.
    let ended = run(
        1,
        patient,
        one_differs(steady, op("all_reduce", "float", 1025)),
    );
    assert_eq!(
        every_rank_names_the_mismatch(ended, 1),
        "rank 3 issued all_reduce(float x 1025, sum) as collective #57; ranks 0-2 issued \
         all_reduce(float x 1024, sum) (the element count differs)"
    );
}

#[test]
fn a_skipped_collective_is_named_where_the_operations_differ() {
    let skipping = |rank: usize| -> Vec<Issued> {
        (0..ISSUED)
            .filter(|&n| rank != ODD || n != AT)
            .map(mixed)
            .collect()
    };
    for every in [1, 16] {
        let text = every_rank_names_the_mismatch(run(every, patient, skipping), every);
        assert_eq!(
            text,
            "rank 3 issued all_gather(float x 256) as collective #57; ranks 0-2 issued \
             all_reduce(float x 1024, sum) (the operation differs)"
        );
    }
}

/// The same operation throughout: a skip only shows at the end, where the
/// others wait for a window that rank 3 never publishes. (With a check
/// every 16, 120 collectives end in a window that is never exchanged: the
/// check sees nothing, and the operation's timeout reports the lag.)
#[test]
fn a_rank_that_never_comes_is_named_when_the_wait_ends() {
    let short = |rank: usize| -> Vec<Issued> {
        let issued = if rank == ODD { ISSUED - 1 } else { ISSUED };
        (0..issued).map(|_| all_reduce()).collect()
    };
    // Only the last check, which rank 3 never comes to, waits briefly.
    let last_brief = |n| match n {
        119 => Duration::from_millis(300),
        _ => PATIENCE,
    };
    let ended = run(1, last_brief, short);
    assert!(ended[ODD].is_none(), "{:?}", ended[ODD]);
    for (rank, ended) in ended.into_iter().enumerate().filter(|&(r, _)| r != ODD) {
        match ended {
            Some((
                119,
                Stop::Incomplete {
                    first: 119,
                    last: 119,
                    absent,
                    error: None,
                    ..
                },
            )) => assert_eq!(absent, [ODD]),
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    assert!(run(16, patient, short).iter().all(Option::is_none));
}

#[test]
fn a_withdrawn_collective_gives_its_number_and_window_to_the_next() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let checker = Checker::new(4, scope(), rank, 2, Arc::clone(&store));
            thread::spawn(move || {
                let deadline = Instant::now() + PATIENCE;
                let check = |issued| checker.check(issued, deadline, &|| Ok::<(), ()>(()));
                let mut numbers = Vec::new();
                for n in 0..12u64 {
                    // Rank 1 withdraws collectives 5 (inside window 1) and
                    // 7 (the last of window 1, after its exchange) once,
                    // then issues what rank 0 issued.
                    // (What collective 7 first claimed was published with
                    // its window, so it must match: a local refusal.)
                    if rank == 1 && (n == 5 || n == 7) {
                        let refused = match n {
                            5 => op("reduce_scatter", "half", 3),
                            _ => mixed(n),
                        };
                        let withdrawn = check(refused)
                            .unwrap_or_else(|_| panic!("rank 1 withdraws collective {n}"));
                        numbers.push(withdrawn.seq);
                    }
                    let checked = check(mixed(n)).unwrap_or_else(|_| panic!("rank {rank}: {n}"));
                    numbers.push(checked.seq);
                    checked.keep();
                }
                numbers
            })
        })
        .collect();
    let numbers: Vec<Vec<u64>> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(numbers[0], (0..12).collect::<Vec<_>>());
    let mut expected: Vec<u64> = (0..12).collect();
    expected.insert(5, 5);
    expected.insert(8, 7);
    assert_eq!(numbers[1], expected);
}

/// Each rank deletes its key of a window once it has read the next: after
/// the last window, only that one is left.
#[test]
fn the_store_keeps_the_last_windows_only() {
    let store = Arc::new(InProcessStore::new());
    let shared: Arc<dyn Store> = Arc::clone(&store) as _;
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let checker = Checker::new(1, scope(), rank, 2, Arc::clone(&shared));
            thread::spawn(move || {
                let deadline = Instant::now() + PATIENCE;
                for n in 0..10 {
                    let checked = checker
                        .check(mixed(n), deadline, &|| Ok::<(), ()>(()))
                        .unwrap_or_else(|_| panic!("rank {rank}: {n}"));
                    checked.keep();
                }
            })
        })
        .collect();
    for rank in ranks {
        rank.join().unwrap();
    }
    for rank in 0..2 {
        let kept = |window: u64| {
            store
                .try_get(&format!("g/0/checks/{window}/{rank}"))
                .unwrap()
        };
        assert!((0..9).all(|window| kept(window).is_none()), "rank {rank}");
        assert!(kept(9).is_some(), "rank {rank}");
    }
}

#[test]
fn a_wait_ends_when_the_group_stops() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let checker = Checker::new(1, scope(), 0, 2, store);
    let stopped = checker
        .check(all_reduce(), Instant::now() + PATIENCE, &|| {
            Err("the group failed")
        })
        .err();
    assert!(
        matches!(stopped, Some(Stop::Closed("the group failed"))),
        "{stopped:?}"
    );
}
