//! The file store when a process dies (CPU only, temporary directories):
//! a writer killed while it holds the lock, or in the middle of its
//! writes, leaves the lock free for the next writer's first try, and the
//! temporary file of its unfinished write is removed by the next writer;
//! a job that crashed leaves nothing a new job reads.
//!
//! Each scenario spawns a copy of this test binary running one `child_*`
//! test (selected by `NCCL_FILE_CRASH_ROLE`; run normally, a `child_*` test
//! returns at once) and kills it with SIGKILL.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nccl_rendezvous::{FileStore, Store};
use nccl_test_support::processes::{await_mark, publish};
use rustix::fs::{FlockOperation, flock};

const ROLE_VAR: &str = "NCCL_FILE_CRASH_ROLE";
const DIR_VAR: &str = "NCCL_FILE_CRASH_DIR";
const PATIENCE: Duration = Duration::from_secs(20);
/// The lock timeout of the children and of the test's own store.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// The values the killed writer writes: large enough that most kills land
/// in the middle of a write.
const LARGE_VALUE: usize = 8 << 20;

/// When this process runs `role`: runs `body` on the store directory and
/// the store opened in it.
fn as_child(role: &str, body: impl FnOnce(&Path, FileStore)) {
    if std::env::var(ROLE_VAR).is_ok_and(|running| running == role) {
        let dir = PathBuf::from(std::env::var(DIR_VAR).expect(DIR_VAR));
        body(&dir, open(&dir));
    }
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

/// Runs the child `role` on `dir` and SIGKILLs it once it has published
/// `mark` there (a `mark` left by an earlier run is removed first).
fn run_until_killed(role: &str, dir: &Path, mark: &str) {
    let _ = std::fs::remove_file(dir.join(mark));
    let mut child = spawn(role, dir);
    let marked = await_mark(dir, mark, PATIENCE);
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    assert!(marked.is_some(), "the child never published {mark}");
}

fn open(dir: &Path) -> FileStore {
    FileStore::open(dir, LOCK_TIMEOUT).expect("the file store")
}

/// A store in a new temporary directory (removed when it is dropped).
fn store_in_a_new_dir() -> (tempfile::TempDir, FileStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    (dir, store)
}

/// `store` as a writer that gives up unless it takes the lock at its
/// first try: a lock a dead holder kept would fail it.
fn first_try(store: &FileStore) -> FileStore {
    store.clone().with_lock_timeout(Duration::ZERO)
}

/// The temporary files in the directory of `store`'s generation.
fn temporaries(store: &FileStore) -> Vec<String> {
    let data = store.dir().join(format!("gen-{}", store.generation()));
    std::fs::read_dir(data)
        .expect("the generation's directory")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".tmp-"))
        .collect()
}

/// Holds the store's lock, as a writer in the middle of a mutation does,
/// until it is killed.
#[test]
fn child_holds_the_lock() {
    as_child("child_holds_the_lock", |dir, store| {
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(".lock"))
            .unwrap();
        flock(&lock, FlockOperation::LockExclusive).unwrap();
        publish(dir, "locked", "1");
        std::thread::sleep(PATIENCE);
        drop(store);
    });
}

/// Adds to a counter as fast as it can until it is killed.
#[test]
fn child_adds_forever() {
    as_child("child_adds_forever", |dir, store| {
        for round in 0.. {
            store.add("count", 1).unwrap();
            if round == 20 {
                publish(dir, "adding", "1");
            }
        }
    });
}

/// Writes large values as fast as it can until it is killed.
#[test]
fn child_sets_large_values_forever() {
    as_child("child_sets_large_values_forever", |dir, store| {
        // One buffer, so that the loop spends its time in the store's writes.
        let mut value = vec![0; LARGE_VALUE];
        for round in 0..usize::MAX {
            value[0] = round as u8;
            store.set("large", &value).unwrap();
            if round == 2 {
                publish(dir, "writing", "1");
            }
        }
    });
}

/// Publishes a unique id, then "crashes" (is killed).
#[test]
fn child_old_job() {
    as_child("child_old_job", |dir, store| {
        store.set("uid", b"old-job-unique-id").unwrap();
        publish(dir, "published", &store.generation().to_string());
        std::thread::sleep(PATIENCE);
    });
}

#[test]
fn a_writer_killed_holding_the_lock_never_delays_the_next_writer() {
    let (dir, store) = store_in_a_new_dir();
    for trial in 0..5 {
        run_until_killed("child_holds_the_lock", dir.path(), "locked");
        let added = first_try(&store).add("count", 1);
        assert_eq!(added.unwrap(), trial + 1, "trial {trial}");
    }
}

#[test]
fn a_writer_killed_mid_write_leaves_no_lock_and_no_torn_value() {
    let (dir, store) = store_in_a_new_dir();
    for trial in 0..10 {
        run_until_killed("child_adds_forever", dir.path(), "adding");
        let before = store.try_get("count").unwrap().expect("the child counted");
        let after = first_try(&store)
            .add("count", 1)
            .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        let before: i64 = std::str::from_utf8(&before).unwrap().parse().unwrap();
        assert_eq!(
            after,
            before + 1,
            "trial {trial}: every completed add counted once"
        );
    }
}

#[test]
fn the_next_writer_removes_the_temporary_of_a_writer_killed_mid_write() {
    let (dir, store) = store_in_a_new_dir();
    // About half the kills land in a write (the others in the rename that
    // frees the value it replaces): 16 trials all but ensure one does.
    let mut killed_mid_write = 0;
    for trial in 0..16 {
        run_until_killed("child_sets_large_values_forever", dir.path(), "writing");
        if !temporaries(&store).is_empty() {
            killed_mid_write += 1;
        }
        first_try(&store)
            .set("after", trial.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        assert_eq!(temporaries(&store), Vec::<String>::new(), "trial {trial}");
        let value = store.try_get("large").unwrap().expect("the child wrote");
        assert_eq!(value.len(), LARGE_VALUE, "trial {trial}: a torn value");
    }
    assert!(
        killed_mid_write > 0,
        "no kill landed in the middle of a write: the scenario never happened"
    );
}

#[test]
fn a_crashed_jobs_files_never_reach_a_new_job() {
    let dir = tempfile::tempdir().unwrap();
    run_until_killed("child_old_job", dir.path(), "published");
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
