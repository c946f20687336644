//! The agreement among ranks played by threads, each with a store client
//! of its own, on the in-process store and on the TCP store (a server on
//! 127.0.0.1): every scenario of `scenarios` and `crashes` runs on both.
//! No test bounds how long anything takes: [`PATIENCE`] only keeps a
//! broken one from hanging, and each asserts outcomes.

mod crashes;
mod scenarios;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nccl_test_support::within;

use super::*;
use crate::{
    CompareSet, ErrorKind, InProcessStore, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};

/// How long a scenario may take before it fails: a hang guard, not a
/// bound on speed.
const PATIENCE: Duration = Duration::from_secs(120);

/// A timeout no scenario waits out: where the decision must come early
/// (every unsuspected rank came), it comes long before.
const LONG: Duration = Duration::from_secs(60);

/// A timeout scenarios wait out where the rule says the decision comes at
/// the deadline.
const SHORT: Duration = Duration::from_millis(300);

/// Where the ranks' stores come from.
enum Backend {
    /// One in-process store; "killing" it makes every client's calls fail.
    InProcess {
        store: Arc<InProcessStore>,
        dead: Arc<AtomicBool>,
    },
    /// A TCP server; killing it shuts it down.
    Tcp { server: Option<TcpStoreServer> },
}

impl Backend {
    fn in_process() -> Self {
        Backend::InProcess {
            store: Arc::new(InProcessStore::new()),
            dead: Arc::new(AtomicBool::new(false)),
        }
    }

    fn tcp() -> Self {
        let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default())
            .expect("a TCP store server on 127.0.0.1");
        Backend::Tcp {
            server: Some(server),
        }
    }

    /// A store for one rank: the shared one, or a client of its own.
    fn client(&self) -> Box<dyn Store> {
        match self {
            Backend::InProcess { store, dead } => Box::new(Faulty {
                inner: Box::new(Arc::clone(store)),
                dead: Arc::clone(dead),
                ops_left: None,
            }),
            Backend::Tcp { server } => {
                let server = server.as_ref().expect("a live server");
                let options = TcpStoreOptions::default()
                    .with_timeout(LONG)
                    .with_connect_timeout(Duration::from_secs(2))
                    .with_io_margin(Duration::from_secs(5));
                Box::new(TcpStore::connect_to(server.local_addr(), options).expect("a client"))
            }
        }
    }

    /// A client whose rank dies in its call after the first `ops`, with
    /// that call applied ([`Faulty`]).
    fn crashing_client(&self, ops: isize) -> Box<dyn Store> {
        Box::new(Faulty {
            inner: self.client(),
            dead: Arc::new(AtomicBool::new(false)),
            ops_left: Some(AtomicIsize::new(ops)),
        })
    }

    /// Kills the store under every client.
    fn kill(&mut self) {
        match self {
            Backend::InProcess { dead, .. } => dead.store(true, Ordering::SeqCst),
            Backend::Tcp { server } => drop(server.take()),
        }
    }
}

/// What a call on a dead [`Faulty`] store fails with.
const CRASHED: &str = "the store (or this rank) is dead";

/// A store whose calls fail once it is dead, or once its budget of calls
/// is spent: the call that spends it is applied, then fails (the rank
/// died with its last call done but unanswered), and every later one
/// fails unapplied.
struct Faulty {
    inner: Box<dyn Store>,
    dead: Arc<AtomicBool>,
    ops_left: Option<AtomicIsize>,
}

impl Faulty {
    /// Runs the call `op` (`run`) unless the store or its rank is dead.
    fn call<T>(&self, op: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
        self.alive(op)?;
        let Some(left) = &self.ops_left else {
            return run();
        };
        match left.fetch_sub(1, Ordering::SeqCst) {
            1.. => run(),
            0 => {
                let _unanswered = run();
                Err(Self::closed(op))
            }
            _ => Err(Self::closed(op)),
        }
    }

    /// Fails once the store is dead.
    fn alive(&self, op: &str) -> Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Self::closed(op));
        }
        Ok(())
    }

    fn closed(op: &str) -> StoreError {
        let context = format!("{op} on the test's store: {CRASHED}");
        StoreError::io(context, std::io::Error::other(CRASHED))
    }

    /// Waits in short slices, so that a store that dies ends the wait.
    fn sliced_wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let deadline = Deadline::after(timeout);
        loop {
            let slice = deadline
                .remaining()
                .map_or(Duration::ZERO, |left| left.min(Duration::from_millis(20)));
            match self.inner.wait(keys, slice) {
                Err(error) if error.is_timeout() && deadline.remaining().is_some() => {
                    self.alive("wait")?;
                }
                done => return done,
            }
        }
    }
}

impl Store for Faulty {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call("set", || self.inner.set(key, value))
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.call("get", || self.inner.get(key, timeout))
    }
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.call("try_get", || self.inner.try_get(key))
    }
    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet> {
        self.call("compare_set", || self.inner.compare_set(key, expected, new))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.call("add", || self.inner.add(key, delta))
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.call("wait", || self.sliced_wait(keys, timeout))
    }
    fn delete(&self, key: &str) -> Result<bool> {
        self.call("delete", || self.inner.delete(key))
    }
    fn default_timeout(&self) -> Duration {
        self.inner.default_timeout()
    }
}

/// One rank's part: its rank, its suspects, its store and options.
struct Rank {
    rank: usize,
    suspects: Vec<usize>,
    store: Box<dyn Store>,
    options: AgreeOptions,
}

impl Rank {
    fn new(backend: &Backend, rank: usize, suspects: &[usize], options: &AgreeOptions) -> Self {
        Rank {
            rank,
            suspects: suspects.to_vec(),
            store: backend.client(),
            options: options.clone(),
        }
    }

    fn agree(&self, generation: u64, world_size: usize) -> Result<Agreement> {
        agree_survivors(
            &*self.store,
            generation,
            self.rank,
            world_size,
            &self.suspects,
            &self.options,
        )
    }
}

/// Ranks `ranks` of a world, each suspecting `suspects`.
fn ranks(
    backend: &Backend,
    ranks: &[usize],
    suspects: &[usize],
    options: &AgreeOptions,
) -> Vec<Rank> {
    ranks
        .iter()
        .map(|&rank| Rank::new(backend, rank, suspects, options))
        .collect()
}

/// Runs `ranks` at once, each on a thread, and returns their outcomes in
/// the same order.
fn agree_all(ranks: &[Rank], generation: u64, world_size: usize) -> Vec<Result<Agreement>> {
    thread::scope(|scope| {
        let running: Vec<_> = ranks
            .iter()
            .map(|rank| scope.spawn(move || rank.agree(generation, world_size)))
            .collect();
        running
            .into_iter()
            .map(|rank| rank.join().expect("a rank's thread"))
            .collect()
    })
}

/// The agreements of `outcomes`, which must all be `Ok`.
fn agreements(outcomes: Vec<Result<Agreement>>) -> Vec<Agreement> {
    outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|error| panic!("a survivor failed: {error}")))
        .collect()
}

/// Asserts that every agreement holds the same decision, and that each
/// rank's new rank maps back to its old one; returns the first.
fn the_same(agreements: &[Agreement]) -> &Agreement {
    let first = &agreements[0];
    for agreement in agreements {
        assert_eq!(agreement.generation(), first.generation());
        assert_eq!(agreement.survivors(), first.survivors());
        assert_eq!(agreement.decided_by(), first.decided_by());
        assert_eq!(
            agreement.excluded().collect::<Vec<_>>(),
            first.excluded().collect::<Vec<_>>()
        );
        assert_eq!(
            agreement.old_rank_of(agreement.rank()),
            Some(agreement.previous_rank())
        );
    }
    first
}

/// Waits until `count` ranks have arrived at the agreement on
/// `generation` (its counter, read through `store`).
fn arrived(store: &dyn Store, generation: u64, count: i64) {
    let keys = Keys::new(generation);
    let start = Instant::now();
    // The counter first, then the records each claimed slot holds: a rank
    // claims its slot (the counter) before it writes its arrival there,
    // and a rank preempted in between would leave a gap that the deciding
    // rank, with no time to wait, reads as not arrived.
    let written = |store: &dyn Store| {
        let claimed = store
            .try_get(&keys.count)
            .expect("the counter")
            .and_then(|bytes| crate::parse_counter(&bytes))
            .unwrap_or(0);
        claimed >= count
            && (1..=count as u64)
                .all(|seq| store.try_get(&keys.entry(seq)).expect("a slot").is_some())
    };
    while !written(store) {
        assert!(start.elapsed() < PATIENCE, "{count} arrivals never came");
        thread::sleep(Duration::from_millis(5));
    }
}

fn suspected(by: &[usize]) -> ExclusionReason {
    ExclusionReason::Suspected { by: by.to_vec() }
}

fn exclusion(rank: usize, reason: ExclusionReason) -> Exclusion {
    Exclusion { rank, reason }
}

/// One test per scenario and store: `in_process::name` and `tcp::name`.
macro_rules! on_both_stores {
    ($($module:ident :: $scenario:ident),* $(,)?) => {
        mod in_process {
            $(#[test]
            fn $scenario() {
                super::run(stringify!($scenario), super::Backend::in_process, super::$module::$scenario);
            })*
        }
        mod tcp {
            $(#[test]
            fn $scenario() {
                super::run(stringify!($scenario), super::Backend::tcp, super::$module::$scenario);
            })*
        }
    };
}

/// Runs `scenario` on a fresh `backend` under the hang guard.
fn run(name: &str, backend: fn() -> Backend, scenario: fn(Backend)) {
    within(name, PATIENCE, move || scenario(backend()));
}

on_both_stores!(
    scenarios::every_rank_alive,
    scenarios::a_crashed_rank_that_the_others_suspect,
    scenarios::a_crashed_rank_that_nobody_suspects,
    scenarios::a_late_rank_is_excluded_and_disturbs_nothing,
    scenarios::a_suspected_rank_that_arrives_in_time_is_kept,
    scenarios::too_few_by_the_deadline,
    scenarios::a_suspected_rank_can_still_make_the_minimum,
    scenarios::two_heals_in_a_row,
    crashes::the_store_dies,
    crashes::a_rank_that_dies_at_any_step_leaves_one_decision,
    crashes::partial_writes_of_a_dead_rank,
);

#[test]
fn refusals_name_what_was_expected_and_given() {
    let store = InProcessStore::new();
    let options = AgreeOptions::new(LONG);
    let refused = |generation: u64, rank: usize, world: usize, suspects: &[usize], min: usize| {
        let options = options.clone().with_min_survivors(min);
        let error = agree_survivors(&store, generation, rank, world, suspects, &options)
            .expect_err("a refusal");
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        error.to_string()
    };
    let cases = [
        (
            refused(0, 4, 4, &[], 1),
            ["agreement place rank 4 of 4", "expected a rank below"],
        ),
        (
            refused(0, 0, 0, &[], 1),
            ["agreement place rank 0 of 0", "world size of 1 to"],
        ),
        (
            refused(0, 0, 4, &[4], 1),
            [
                "suspects [4] (rank 4)",
                "expected ranks below the world size 4",
            ],
        ),
        (
            refused(0, 0, 4, &[1, 1], 1),
            ["suspects [1, 1] (rank 1)", "expected each rank once"],
        ),
        (
            refused(0, 2, 4, &[2], 1),
            ["suspects [2] (rank 2)", "ranks other than this rank (2)"],
        ),
        (
            refused(0, 0, 4, &[], 0),
            ["min_survivors 0", "expected 1 to the world size 4"],
        ),
        (
            refused(0, 0, 4, &[], 5),
            ["min_survivors 5", "expected 1 to the world size 4"],
        ),
        (
            refused(0, 30, 40, &(0..20).chain([3]).collect::<Vec<_>>(), 1),
            [
                "suspects [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] and 5 more (rank 3)",
                "expected each rank once",
            ],
        ),
        (
            refused(u64::MAX, 0, 4, &[], 1),
            [
                "generation 18446744073709551615",
                "generation + 1 must exist",
            ],
        ),
    ];
    for (message, expect) in cases {
        for want in expect {
            assert!(message.contains(want), "{message}\nmissing: {want}");
        }
    }
    assert!(
        store.try_get("agree/0/arrivals").unwrap().is_none(),
        "a refused call writes nothing"
    );
    // Arguments that differ from the committed decision's.
    agree_survivors(&store, 0, 0, 1, &[], &options).unwrap();
    let error = agree_survivors(&store, 0, 0, 2, &[], &options).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "invalid world size 2: expected 1, the world size of the committed agreement on \
             generation 0"
        ),
        "{error}"
    );
    agree_survivors(&store, 1, 0, 2, &[1], &options).unwrap();
    let two = options.clone().with_min_survivors(2);
    let error = agree_survivors(&store, 1, 1, 2, &[], &two).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "invalid min_survivors 2: expected 1, the minimum of the committed agreement on \
             generation 1"
        ),
        "{error}"
    );
}
