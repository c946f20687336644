//! The file store when a process dies (CPU only, temporary directories):
//! a writer killed while it holds the lock, or in the middle of its
//! writes, never delays the next writer beyond one lock retry; a job that
//! crashed leaves nothing a new job reads.
//!
//! Each scenario spawns a copy of this test binary running one `child_*`
//! test (selected by `NCCL_FILE_CRASH_ROLE`; run normally, a `child_*` test
//! returns at once) and kills it with SIGKILL.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nccl_rendezvous::{FileStore, Store};
use nccl_test_support::processes::{await_mark, publish};
use rustix::fs::{FlockOperation, flock};

const ROLE_VAR: &str = "NCCL_FILE_CRASH_ROLE";
const DIR_VAR: &str = "NCCL_FILE_CRASH_DIR";
const PATIENCE: Duration = Duration::from_secs(20);
/// A lock timeout the next writer would hit if the dead holder's lock
/// stayed: far above what the test allows it.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// One lock retry (the backoff tops out at 5 ms), with room for a loaded
/// machine.
const ONE_RETRY: Duration = Duration::from_millis(250);

/// The store directory when this process runs `role`.
fn child_dir(role: &str) -> Option<String> {
    (std::env::var(ROLE_VAR).ok()? == role).then(|| std::env::var(DIR_VAR).expect(DIR_VAR))
}

fn spawn(role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", role, "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, role)
        .env(DIR_VAR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning a child")
}

/// SIGKILLs `child` once it has published `mark` in `dir`.
fn kill_after_mark(mut child: Child, dir: &Path, mark: &str) {
    let marked = await_mark(dir, mark, PATIENCE);
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    assert!(marked.is_some(), "the child never published {mark}");
}

fn open(dir: &Path) -> FileStore {
    FileStore::open(dir, LOCK_TIMEOUT).expect("the file store")
}

/// Holds the store's lock, as a writer in the middle of a mutation does,
/// until it is killed.
#[test]
fn child_holds_the_lock() {
    let Some(dir) = child_dir("child_holds_the_lock") else {
        return;
    };
    let store = open(Path::new(&dir));
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(Path::new(&dir).join(".lock"))
        .unwrap();
    flock(&lock, FlockOperation::LockExclusive).unwrap();
    publish(Path::new(&dir), "locked", "1");
    std::thread::sleep(PATIENCE);
    drop(store);
}

/// Adds to a counter as fast as it can until it is killed.
#[test]
fn child_adds_forever() {
    let Some(dir) = child_dir("child_adds_forever") else {
        return;
    };
    let store = open(Path::new(&dir));
    for round in 0.. {
        store.add("count", 1).unwrap();
        if round == 20 {
            publish(Path::new(&dir), "adding", "1");
        }
    }
}

/// Publishes a unique id, then "crashes" (is killed).
#[test]
fn child_old_job() {
    let Some(dir) = child_dir("child_old_job") else {
        return;
    };
    let store = open(Path::new(&dir));
    store.set("uid", b"old-job-unique-id").unwrap();
    publish(
        Path::new(&dir),
        "published",
        &store.generation().to_string(),
    );
    std::thread::sleep(PATIENCE);
}

#[test]
fn a_writer_killed_holding_the_lock_never_delays_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for trial in 0..5 {
        let mark = dir.path().join("locked");
        let _ = std::fs::remove_file(&mark);
        kill_after_mark(
            spawn("child_holds_the_lock", dir.path()),
            dir.path(),
            "locked",
        );
        let start = Instant::now();
        assert_eq!(store.add("count", 1).unwrap(), trial + 1);
        let took = start.elapsed();
        assert!(
            took < ONE_RETRY,
            "trial {trial}: the next add waited {took:?}"
        );
    }
}

#[test]
fn a_writer_killed_mid_write_leaves_no_lock_and_no_torn_value() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for trial in 0..10 {
        let _ = std::fs::remove_file(dir.path().join("adding"));
        kill_after_mark(
            spawn("child_adds_forever", dir.path()),
            dir.path(),
            "adding",
        );
        let before = store.try_get("count").unwrap().expect("the child counted");
        let start = Instant::now();
        let after = store
            .add("count", 1)
            .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        let took = start.elapsed();
        assert!(
            took < ONE_RETRY,
            "trial {trial}: the next add waited {took:?}"
        );
        let before: i64 = std::str::from_utf8(&before).unwrap().parse().unwrap();
        assert_eq!(
            after,
            before + 1,
            "trial {trial}: every completed add counted once"
        );
    }
}

#[test]
fn a_crashed_jobs_files_never_reach_a_new_job() {
    let dir = tempfile::tempdir().unwrap();
    kill_after_mark(spawn("child_old_job", dir.path()), dir.path(), "published");
    let old_generation: u64 = std::fs::read_to_string(dir.path().join("published"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(dir.path().join(format!("gen-{old_generation}")).exists());

    // The new job: rank 1 opens first and waits; rank 0 publishes.
    let rank1 = open(dir.path());
    assert_eq!(rank1.generation(), old_generation + 1);
    assert_eq!(
        rank1.try_get("uid").unwrap(),
        None,
        "the old job's id leaked"
    );
    let rank0 = open(dir.path());
    assert_eq!(rank0.generation(), rank1.generation(), "the ranks split");
    rank0.set("uid", b"new-job-unique-id").unwrap();
    assert_eq!(rank1.get("uid", PATIENCE).unwrap(), b"new-job-unique-id");
    assert!(
        !dir.path().join(format!("gen-{old_generation}")).exists(),
        "the crashed job's files were removed"
    );
}
