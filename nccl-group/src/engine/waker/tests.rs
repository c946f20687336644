//! The waker thread with fake operations (no GPU): each test owns its
//! registry, so its thread count and waiting futures are its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use super::{Settle, Wakers};

/// A fake operation the test settles.
#[derive(Default)]
struct FakeOp {
    settled: AtomicBool,
}

impl FakeOp {
    fn settle(&self) {
        self.settled.store(true, Ordering::SeqCst);
    }
}

impl Settle for FakeOp {
    fn is_settled(&self) -> bool {
        self.settled.load(Ordering::SeqCst)
    }
}

/// A waker that counts its wakes and lets a test wait for one.
#[derive(Default)]
struct Counter {
    wakes: Mutex<usize>,
    woken: Condvar,
}

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        *self.wakes.lock().unwrap() += 1;
        self.woken.notify_all();
    }
}

/// A liveness bound for a wake that must come, not a timing claim.
const LIVENESS: Duration = Duration::from_secs(60);

impl Counter {
    fn wakes(&self) -> usize {
        *self.wakes.lock().unwrap()
    }

    /// Waits until at least `count` wakes came (panics past [`LIVENESS`]).
    fn wait_for(&self, count: usize) {
        let wakes = self.wakes.lock().unwrap();
        let (wakes, timeout) = self
            .woken
            .wait_timeout_while(wakes, LIVENESS, |wakes| *wakes < count)
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "woken {} times, expected {count}",
            *wakes
        );
    }
}

fn counter() -> (Arc<Counter>, Waker) {
    let counter = Arc::new(Counter::default());
    let waker = Waker::from(Arc::clone(&counter));
    (counter, waker)
}

/// Fresh wakers with `op` registered, and the counter of its waker.
fn registered(op: Arc<dyn Settle>) -> (Wakers, Arc<Counter>) {
    let wakers = Wakers::new();
    let (counter, waker) = counter();
    wakers.register(wakers.next_id(), op, &waker).unwrap();
    (wakers, counter)
}

/// Asserts that no future waits any more. The waker thread removes a
/// future's registration under its lock before it wakes it, so once a
/// test has seen every wake it expects, the registry is empty: no wait.
fn assert_none_waiting(wakers: &Wakers) {
    assert_eq!(wakers.waiting(), 0, "futures still registered after their wakes");
}

#[test]
fn wakes_on_completion_and_forgets_the_future() {
    let op = Arc::new(FakeOp::default());
    let (wakers, counter) = registered(op.clone());
    assert_eq!(counter.wakes(), 0, "woken before the operation settled");
    op.settle();
    counter.wait_for(1);
    assert_none_waiting(&wakers);
    assert_eq!(counter.wakes(), 1);
}

#[test]
fn wakes_when_the_group_fails() {
    /// An operation still running on the GPU whose group failed.
    #[derive(Default)]
    struct FailingOp {
        failed: AtomicBool,
    }
    impl Settle for FailingOp {
        fn is_settled(&self) -> bool {
            self.failed.load(Ordering::SeqCst)
        }
    }
    let op = Arc::new(FailingOp::default());
    let (wakers, counter) = registered(op.clone());
    op.failed.store(true, Ordering::SeqCst);
    counter.wait_for(1);
    assert_none_waiting(&wakers);
}

#[test]
fn a_second_registration_replaces_the_waker() {
    let wakers = Wakers::new();
    let op = Arc::new(FakeOp::default());
    let (first, first_waker) = counter();
    let (second, second_waker) = counter();
    let id = wakers.next_id();
    wakers.register(id, op.clone(), &first_waker).unwrap();
    wakers.register(id, op.clone(), &second_waker).unwrap();
    assert_eq!(wakers.waiting(), 1);
    op.settle();
    second.wait_for(1);
    assert_none_waiting(&wakers);
    assert_eq!(first.wakes(), 0, "the replaced waker was woken");
}

#[test]
fn an_unregistered_future_is_not_woken() {
    let wakers = Wakers::new();
    let dropped = Arc::new(FakeOp::default());
    let kept = Arc::new(FakeOp::default());
    let (dropped_counter, dropped_waker) = counter();
    let (kept_counter, kept_waker) = counter();
    let dropped_id = wakers.next_id();
    wakers
        .register(dropped_id, dropped.clone(), &dropped_waker)
        .unwrap();
    wakers
        .register(wakers.next_id(), kept.clone(), &kept_waker)
        .unwrap();
    wakers.unregister(dropped_id);
    assert_eq!(wakers.waiting(), 1);
    dropped.settle();
    kept.settle();
    // The thread polls both in one round: once the kept one is woken, the
    // dropped one had its chance.
    kept_counter.wait_for(1);
    assert_none_waiting(&wakers);
    assert_eq!(dropped_counter.wakes(), 0);
}

#[test]
fn many_futures_share_one_thread() {
    const FUTURES: usize = 200;
    let wakers = Wakers::new();
    let ops: Vec<Arc<FakeOp>> = (0..FUTURES).map(|_| Arc::default()).collect();
    let woken = Arc::new(Counter::default());
    let waker = Waker::from(Arc::clone(&woken));
    for op in &ops {
        wakers
            .register(wakers.next_id(), op.clone(), &waker)
            .unwrap();
    }
    assert_eq!(wakers.threads(), 1);
    for op in &ops {
        op.settle();
    }
    woken.wait_for(FUTURES);
    assert_none_waiting(&wakers);
    // Waiting again after the thread parked starts no second one.
    let late = Arc::new(FakeOp::default());
    wakers
        .register(wakers.next_id(), late.clone(), &waker)
        .unwrap();
    late.settle();
    woken.wait_for(FUTURES + 1);
    assert_eq!(wakers.threads(), 1);
}

#[test]
fn the_process_registry_is_one() {
    let first: *const Wakers = super::wakers();
    assert!(std::ptr::eq(first, super::wakers()));
}
