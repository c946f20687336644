//! The watchdog thread: the process-wide registry of watched groups, and
//! the loop that ticks each live one every [`INTERVAL`].

use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};
use std::time::Instant;

use super::INTERVAL;

/// A group the watchdog looks after.
pub trait Watched: Send + Sync {
    /// Checks the group once (with the group's own reference, so a failure
    /// it finds can finish on a thread of its own).
    fn tick(self: Arc<Self>, now: Instant);

    /// Serves what was asked of the group from outside the process (a
    /// flight-recorder dump), after each tick.
    ///
    /// None by default.
    fn serve_requests(self: Arc<Self>, _now: Instant) {}
}

struct Registry {
    groups: Mutex<Vec<Weak<dyn Watched>>>,
    added: Condvar,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();
/// Whether the watchdog thread started (tried once per process).
static THREAD: OnceLock<bool> = OnceLock::new();

/// Puts `group` under the process's watchdog (starting its thread on first
/// use).
///
/// The watchdog drops the registration once the group is gone.
///
/// # Errors
/// The operating system refused to start the watchdog thread (now or at
/// the first try in this process).
pub fn watch(group: Weak<dyn Watched>) -> std::io::Result<()> {
    let registry = REGISTRY.get_or_init(|| Registry {
        groups: Mutex::new(Vec::new()),
        added: Condvar::new(),
    });
    let started = *THREAD.get_or_init(|| {
        std::thread::Builder::new()
            .name("nccl-group-watchdog".into())
            .spawn(move || run(registry))
            .is_ok()
    });
    if !started {
        return Err(std::io::Error::other(
            "the process could not start the nccl-group watchdog thread",
        ));
    }
    registry
        .groups
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(group);
    registry.added.notify_one();
    Ok(())
}

/// The watchdog thread: ticks every live group each interval; sleeps on
/// the condition variable while there is none.
fn run(registry: &'static Registry) {
    loop {
        let live: Vec<Arc<dyn Watched>> = {
            let mut groups = registry
                .groups
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            groups.retain(|group| group.strong_count() > 0);
            while groups.is_empty() {
                groups = registry
                    .added
                    .wait(groups)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            groups.iter().filter_map(Weak::upgrade).collect()
        };
        let now = Instant::now();
        for group in &live {
            // A panic in one group's tick (a user's store, say) must not
            // end the watching of every group.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Arc::clone(group).tick(now);
                Arc::clone(group).serve_requests(now);
            }));
        }
        // The groups are released before sleeping, so a group dropped by
        // its owner is not kept alive by the watchdog.
        drop(live);
        std::thread::sleep(INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_test_support::within;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    struct Counting {
        ticks: AtomicUsize,
    }

    impl Watched for Counting {
        fn tick(self: Arc<Self>, _now: Instant) {
            self.ticks.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Hang guard of the waits below: only a watchdog that never ticks,
    /// or never lets go, outlasts it.
    const PATIENCE: Duration = Duration::from_secs(60);

    #[test]
    fn the_watchdog_ticks_live_groups_and_forgets_dropped_ones() {
        let group = Arc::new(Counting {
            ticks: AtomicUsize::new(0),
        });
        let weak: Weak<dyn Watched> = Arc::downgrade(&(Arc::clone(&group) as Arc<dyn Watched>));
        watch(weak).unwrap();
        let ticked = Arc::clone(&group);
        within("three ticks of the watchdog", PATIENCE, move || {
            while ticked.ticks.load(Ordering::SeqCst) < 3 {
                std::thread::sleep(INTERVAL);
            }
        });
        // The watchdog holds only a weak reference, and only while ticking.
        let held = Arc::downgrade(&group);
        within(
            "the watchdog letting go of the group",
            PATIENCE,
            move || {
                while held.strong_count() > 1 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
        );
    }
}
