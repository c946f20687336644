//! A store in a directory of a filesystem every rank sees.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, SystemTime};

use super::{
    CompareSet, DEFAULT_TIMEOUT, Deadline, Result, Store, StoreError, add_decision,
    compare_set_decision, error::show_key,
};

/// The longest key the file store accepts, in bytes: keys are hex-encoded
/// into file names (two characters a byte), and file names are limited to
/// 255 bytes on common filesystems.
pub const MAX_FILE_KEY_LEN: usize = 120;

const KEY_PREFIX: &str = "k_";
const LOCK_NAME: &str = ".lock";
const TMP_PREFIX: &str = ".tmp-";

/// A store kept in a directory of a shared filesystem (NFS, Lustre, a local
/// disk for processes of one host).
///
/// Each key is a file named `k_<hex of the key>`, so any key is safe as a
/// file name. Writes are atomic: the value is written to a temporary file in
/// the same directory, then renamed over the key's file. Mutations (`set`,
/// `add`, `compare_set`, `delete`) hold an exclusive lock file (`.lock`,
/// created with `create_new`) for the few microseconds they take, so they
/// are atomic with respect to each other across processes. Blocking reads
/// poll with a short sleep.
///
/// Use a fresh directory for every job: keys left by an earlier job would be
/// seen by the next one.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    timeout: Duration,
    lock_timeout: Duration,
    poll_interval: Duration,
}

impl FileStore {
    /// Opens (creating it if needed) the store in `dir`, with `timeout` as
    /// the default timeout and the lock timeout.
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
        Ok(FileStore {
            dir,
            timeout,
            lock_timeout: timeout,
            poll_interval: Duration::from_millis(20),
        })
    }

    /// [`FileStore::open`] with the default timeout ([`DEFAULT_TIMEOUT`]).
    pub fn open_default(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::open(dir, DEFAULT_TIMEOUT)
    }

    /// How long a mutation waits for the lock file before failing with
    /// [`StoreError::Lock`] (default: the store's timeout).
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
        Ok(self.dir.join(name))
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
        let tmp = self.dir.join(format!(
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

    /// Takes the store's lock file, waiting at most the lock timeout.
    fn lock(&self) -> Result<LockGuard> {
        let path = self.dir.join(LOCK_NAME);
        let deadline = Deadline::after(self.lock_timeout);
        let mut backoff = Duration::from_micros(200);
        loop {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    // For humans who find a stale lock: who held it.
                    let _ = writeln!(f, "pid {}", std::process::id());
                    return Ok(LockGuard {
                        path,
                        released: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(StoreError::io(
                        format!("creating the lock file {}", path.display()),
                        e,
                    ));
                }
            }
            let Some(left) = deadline.remaining() else {
                let age = fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok());
                return Err(StoreError::Lock {
                    path,
                    waited: deadline.elapsed(),
                    age,
                });
            };
            thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(Duration::from_millis(10));
        }
    }

    /// Runs `f` under the lock and releases it, reporting a failed release.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let guard = self.lock()?;
        let out = f();
        let released = guard.release();
        let out = out?;
        released?;
        Ok(out)
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

/// Holds the lock file; removes it on release or drop.
struct LockGuard {
    path: PathBuf,
    released: bool,
}

impl LockGuard {
    fn release(mut self) -> Result<()> {
        self.released = true;
        fs::remove_file(&self.path).map_err(|e| {
            StoreError::io(
                format!(
                    "removing the lock file {} (other ranks will time out on it; delete it by hand)",
                    self.path.display()
                ),
                e,
            )
        })
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            let _ = fs::remove_file(&self.path);
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
    use std::time::Instant;

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
        let mut names: Vec<String> = fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["k_2e2e2f78", "k_63"]);
        assert!(!dir.path().join("x").exists());
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
        fs::write(dir.path().join(LOCK_NAME), b"pid 1\n").unwrap();
        let t0 = Instant::now();
        let err = store.add("c", 1).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(3));
        assert!(matches!(err, StoreError::Lock { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(".lock") && msg.contains("delete the lock file"),
            "{msg}"
        );
        // Reads do not need the lock.
        assert_eq!(store.try_get("c").unwrap(), None);
        fs::remove_file(dir.path().join(LOCK_NAME)).unwrap();
        assert_eq!(store.add("c", 1).unwrap(), 1);
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
