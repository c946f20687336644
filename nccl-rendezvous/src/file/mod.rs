//! A store in a directory of a filesystem every rank sees: keys as files,
//! mutations under a `flock` lock (`lock`), and a generation per job
//! (`generation`).

mod generation;
mod lock;

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, SystemTime};

use generation::{LOCK_NAME, Membership};

use super::{
    CompareSet, DEFAULT_TIMEOUT, Deadline, Result, Store, StoreError, add_decision,
    compare_set_decision, error::show_key,
};

/// The longest key the file store accepts, in bytes: keys are hex-encoded
/// into file names (two characters a byte), and file names are limited to
/// 255 bytes on common filesystems.
pub const MAX_FILE_KEY_LEN: usize = 120;

const KEY_PREFIX: &str = "k_";
const TMP_PREFIX: &str = ".tmp-";

/// A store kept in a directory of a shared filesystem (NFS, Lustre, a local
/// disk for processes of one host).
///
/// Each key is a file named `k_<hex of the key>`, so any key is safe as a
/// file name. Writes are atomic: the value is written to a temporary file in
/// the same directory, then renamed over the key's file. Mutations (`set`,
/// `add`, `compare_set`, `delete`) hold an exclusive `flock` lock on
/// `.lock` for the few microseconds they take, so they are atomic with
/// respect to each other across processes; the kernel releases the lock
/// of a process that dies, so a rank killed in the middle of a write never
/// holds up the others, and the next writer removes the temporary file
/// that write left (the lock file keeps a holder's pid until it releases
/// it, so a dead holder shows). Blocking reads poll with a short sleep.
///
/// # One generation per job
///
/// Every open store (all its clones together) is a member of the
/// directory's current generation, whose keys live in `gen-<n>/`. A store
/// that opens while no other store is open on the directory, in any
/// process, starts a new generation: the files of a job that finished or
/// crashed are never read by the next one, and are removed. The last store
/// of a generation to close removes its files. So every rank of a job must
/// open the store before any rank closes it, as a rendezvous does (each
/// waits for the others); and a job whose processes still run (hung, not
/// crashed) shares its generation with a new job on the same directory:
/// give each job its own key namespace (`NCCL_RS_NAMESPACE`, or the
/// launcher's job id, as [`RendezvousConfig`](crate::RendezvousConfig)
/// does).
///
/// The filesystem must support `flock` (local filesystems and NFS do;
/// Lustre with its `flock` mount option); otherwise opening fails with an
/// error saying so.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    membership: Arc<Membership>,
    timeout: Duration,
    lock_timeout: Duration,
    poll_interval: Duration,
}

impl FileStore {
    /// Opens (creating it if needed) the store in `dir`, with `timeout` as
    /// the default timeout and the lock timeout, joining the directory's
    /// live generation or starting a new one (see the type's docs).
    pub fn open(dir: impl Into<PathBuf>, timeout: Duration) -> Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| {
            StoreError::io(
                format!(
                    "creating the file store directory {} (it must be writable by every rank)",
                    dir.display()
                ),
                e,
            )
        })?;
        let membership = Arc::new(Membership::join(&dir, timeout)?);
        Ok(FileStore {
            dir,
            membership,
            timeout,
            lock_timeout: timeout,
            poll_interval: Duration::from_millis(20),
        })
    }

    /// [`FileStore::open`] with the default timeout ([`DEFAULT_TIMEOUT`]).
    pub fn open_default(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::open(dir, DEFAULT_TIMEOUT)
    }

    /// How long a mutation waits for the lock before failing with
    /// [`StoreError::Lock`] (default: the store's timeout).
    ///
    /// Only a live holder (stopped or hung in the middle of a write) can make
    /// it wait.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The longest sleep between two polls of a blocking read (default
    /// 20 ms; polls start at 1 ms and back off to this).
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory's generation this store belongs to (1 for the first
    /// job on the directory); its keys are in `gen-<generation>/`.
    pub fn generation(&self) -> u64 {
        self.membership.generation()
    }

    fn describe(&self) -> String {
        format!("file store in {}", self.dir.display())
    }

    fn key_path(&self, key: &str) -> Result<PathBuf> {
        if key.len() > MAX_FILE_KEY_LEN {
            return Err(StoreError::InvalidArgument {
                what: "file store key",
                given: show_key(key),
                expected: format!(
                    "at most {MAX_FILE_KEY_LEN} bytes (keys are hex-encoded into file names, \
                     which are limited to 255 bytes); use a shorter key or the TCP store"
                ),
            });
        }
        let mut name = String::with_capacity(KEY_PREFIX.len() + 2 * key.len());
        name.push_str(KEY_PREFIX);
        for b in key.bytes() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            name.push(char::from(HEX[usize::from(b >> 4)]));
            name.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Ok(self.membership.data_dir().join(name))
    }

    fn read(&self, key: &str, path: &Path) -> Result<Option<Vec<u8>>> {
        match fs::read(path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(
                format!("reading key {} from {}", show_key(key), path.display()),
                e,
            )),
        }
    }

    /// Writes `value` to a temporary file in the store's directory and
    /// renames it over `path`.
    fn write_atomic(&self, key: &str, path: &Path, value: &[u8]) -> Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = self.membership.data_dir().join(format!(
            "{TMP_PREFIX}{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| f.write_all(value))
            .and_then(|()| fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            StoreError::io(
                format!("writing key {} to {}", show_key(key), path.display()),
                e,
            )
        })
    }

    /// Runs `f` under the store's lock (waiting at most the lock timeout),
    /// first removing the temporary files of a writer that died holding
    /// it.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut guard = lock::lock_exclusive(&self.dir.join(LOCK_NAME), self.lock_timeout)?;
        if guard.abandoned() && self.remove_temporaries() {
            guard.cleaned_up();
        }
        f()
    }

    /// Removes the temporary files in the generation's directory; says
    /// whether it could list them all.
    ///
    /// Only under the lock: every write happens under it (and renames or
    /// removes its temporary before releasing it), so any temporary its holder
    /// sees is a dead writer's. A writer that lost its lock (an NFS lease that
    /// expired while it was stopped) then finds its temporary gone, and its
    /// write fails instead of landing late.
    fn remove_temporaries(&self) -> bool {
        let Ok(entries) = fs::read_dir(self.membership.data_dir()) else {
            return false;
        };
        for entry in entries {
            let Ok(entry) = entry else {
                return false;
            };
            if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(TMP_PREFIX.as_bytes())
            {
                let _ = fs::remove_file(entry.path());
            }
        }
        true
    }

    /// Polls until `ready` returns `Some`, or the deadline.
    fn poll<T>(
        &self,
        timeout: Duration,
        mut ready: impl FnMut() -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let deadline = Deadline::after(timeout);
        let mut sleep = Duration::from_millis(1);
        loop {
            if let Some(v) = ready()? {
                return Ok(Some(v));
            }
            let Some(left) = deadline.remaining() else {
                return Ok(None);
            };
            thread::sleep(sleep.min(left));
            sleep = (sleep * 2).min(self.poll_interval);
        }
    }

    fn timeout_error(&self, op: &'static str, keys: Vec<String>, waited: Duration) -> StoreError {
        StoreError::Timeout {
            op,
            keys,
            store: self.describe(),
            waited,
        }
    }
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let path = self.key_path(key)?;
        self.locked(|| self.write_atomic(key, &path, value))
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let path = self.key_path(key)?;
        let start = Deadline::after(timeout);
        self.poll(timeout, || self.read(key, &path))?
            .ok_or_else(|| self.timeout_error("get", vec![key.to_owned()], start.elapsed()))
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.key_path(key)?;
        self.read(key, &path)
    }

    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet> {
        let path = self.key_path(key)?;
        self.locked(|| {
            let current = self.read(key, &path)?;
            let outcome = compare_set_decision(current.as_deref(), expected, new);
            if outcome.swapped {
                self.write_atomic(key, &path, new)?;
            }
            Ok(outcome)
        })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let path = self.key_path(key)?;
        self.locked(|| {
            let current = self.read(key, &path)?;
            let value = add_decision(current.as_deref(), delta)
                .map_err(|e| e.into_store_error(key, delta, self.describe()))?;
            self.write_atomic(key, &path, value.to_string().as_bytes())?;
            Ok(value)
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let paths = keys
            .iter()
            .map(|k| self.key_path(k))
            .collect::<Result<Vec<_>>>()?;
        let start = Deadline::after(timeout);
        let exists = |p: &PathBuf| -> Result<bool> {
            p.try_exists()
                .map_err(|e| StoreError::io(format!("checking {}", p.display()), e))
        };
        let all = self.poll(timeout, || {
            for p in &paths {
                if !exists(p)? {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })?;
        if all.is_some() {
            return Ok(());
        }
        let mut missing = Vec::new();
        for (key, path) in keys.iter().zip(&paths) {
            if !exists(path)? {
                missing.push((*key).to_owned());
            }
        }
        if missing.is_empty() {
            // Everything arrived right at the deadline.
            return Ok(());
        }
        Err(self.timeout_error("wait", missing, start.elapsed()))
    }

    fn delete(&self, key: &str) -> Result<bool> {
        let path = self.key_path(key)?;
        self.locked(|| match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::io(
                format!("deleting key {} ({})", show_key(key), path.display()),
                e,
            )),
        })
    }

    fn default_timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_handles_on_one_directory_share_keys() {
        let dir = tempfile::tempdir().unwrap();
        let a = FileStore::open(dir.path(), Duration::from_secs(5)).unwrap();
        let b = FileStore::open(dir.path(), Duration::from_secs(5)).unwrap();
        a.set("k", b"v").unwrap();
        assert_eq!(b.get("k", Duration::from_millis(100)).unwrap(), b"v");
        assert_eq!(b.add("n", 2).unwrap(), 2);
        assert_eq!(a.add("n", 3).unwrap(), 5);
    }

    #[test]
    fn key_names_are_hex_encoded_and_no_temp_files_are_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path().join("nested/dir"), Duration::from_secs(5)).unwrap();
        store.set("../x", b"1").unwrap();
        store.add("c", 1).unwrap();
        let names = |path: &Path| {
            let mut names: Vec<String> = fs::read_dir(path)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(store.generation(), 1);
        assert_eq!(
            names(store.dir()),
            [".alive", ".generation", ".lock", "gen-1"]
        );
        assert_eq!(names(&store.dir().join("gen-1")), ["k_2e2e2f78", "k_63"]);
        assert!(!dir.path().join("x").exists());
    }

    #[test]
    fn a_new_job_never_sees_a_finished_jobs_keys_and_the_last_to_leave_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let open = || FileStore::open(dir.path(), Duration::from_secs(5)).unwrap();
        let (rank0, rank1) = (open(), open());
        let clone = rank0.clone();
        rank0.set("uid", b"job-1").unwrap();
        assert_eq!(rank1.try_get("uid").unwrap().unwrap(), b"job-1");
        assert_eq!((rank0.generation(), rank1.generation()), (1, 1));
        drop(rank0);
        // A clone and another handle keep the generation alive.
        assert_eq!(clone.try_get("uid").unwrap().unwrap(), b"job-1");
        drop(clone);
        assert_eq!(rank1.try_get("uid").unwrap().unwrap(), b"job-1");
        drop(rank1);
        assert!(
            !dir.path().join("gen-1").exists(),
            "the last to leave cleans up"
        );

        let next = open();
        assert_eq!(next.generation(), 2);
        assert_eq!(next.try_get("uid").unwrap(), None);
    }

    #[test]
    fn long_keys_are_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path(), Duration::from_secs(5)).unwrap();
        let key = "k".repeat(MAX_FILE_KEY_LEN + 1);
        let err = store.set(&key, b"v").unwrap_err();
        assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err:?}");
        assert!(err.to_string().contains("at most 120 bytes"), "{err}");
        store.set(&"k".repeat(MAX_FILE_KEY_LEN), b"v").unwrap();
    }

    #[test]
    fn a_held_lock_times_out_naming_the_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path(), Duration::from_secs(5))
            .unwrap()
            .with_lock_timeout(Duration::from_millis(150));
        // Another holder (its own open file, as another process would have).
        let held =
            lock::lock_exclusive(&dir.path().join(LOCK_NAME), Duration::from_secs(1)).unwrap();
        let err = store.add("c", 1).unwrap_err();
        assert!(matches!(err, StoreError::Lock { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(".lock")
                && msg.contains("a live process holds it")
                && msg.contains("held for"),
            "{msg}"
        );
        // Reads do not need the lock.
        assert_eq!(store.try_get("c").unwrap(), None);
        drop(held);
        assert_eq!(store.add("c", 1).unwrap(), 1);
    }

    #[test]
    fn the_next_writer_removes_what_a_dead_holder_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path(), Duration::from_secs(5)).unwrap();
        store.set("k", b"1").unwrap();
        let lock_file = dir.path().join(LOCK_NAME);
        assert_eq!(
            fs::read(&lock_file).unwrap(),
            b"",
            "a released lock has no holder"
        );
        // A writer killed in the middle of its write: its record stays in
        // the lock file, its temporary in the generation's directory.
        let left = store
            .membership
            .data_dir()
            .join(format!("{TMP_PREFIX}99-0-0"));
        fs::write(&left, vec![0; 1024]).unwrap();
        fs::write(&lock_file, "pid 99\n").unwrap();
        assert_eq!(
            store.try_get("k").unwrap().unwrap(),
            b"1",
            "reads take no lock"
        );
        assert!(left.exists());
        store.set("k", b"2").unwrap();
        assert!(!left.exists(), "the next writer removed the temporary");
        assert_eq!(fs::read(&lock_file).unwrap(), b"");
        assert_eq!(store.try_get("k").unwrap().unwrap(), b"2");
    }

    #[test]
    fn a_dead_holders_record_waits_for_a_writer_of_the_generation() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path(), Duration::from_secs(5)).unwrap();
        let lock_file = dir.path().join(LOCK_NAME);
        let left = store
            .membership
            .data_dir()
            .join(format!("{TMP_PREFIX}99-0-0"));
        fs::write(&left, b"partial").unwrap();
        fs::write(&lock_file, "pid 99\n").unwrap();
        // Joining and leaving take the lock too, but do not clean up: the
        // record stays for the generation's next writer.
        drop(FileStore::open(dir.path(), Duration::from_secs(5)).unwrap());
        assert!(fs::read(&lock_file).unwrap().starts_with(b"pid "));
        assert!(left.exists());
        store.add("n", 1).unwrap();
        assert!(!left.exists());
        assert_eq!(fs::read(&lock_file).unwrap(), b"");
    }

    #[test]
    fn unwritable_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        fs::write(&file, b"").unwrap();
        let err = FileStore::open(file.join("sub"), Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("file store directory"), "{err}");
    }
}
