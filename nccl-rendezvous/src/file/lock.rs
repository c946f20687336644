//! `flock` locks on the store's lock files: held on an open file, and
//! released by the kernel when the holder closes it or dies, so a process
//! killed in the middle of a write never leaves a lock behind.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, SystemTime};

use rustix::fs::{FlockOperation, flock};
use rustix::io::Errno;

use crate::{Deadline, Result, StoreError};

/// Opens (creating it if needed) a lock file: each opening is its own lock
/// holder, even within one process.
pub(super) fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| StoreError::io(format!("opening the lock file {}", path.display()), e))
}

/// Tries `operation` (a non-blocking one) on `file`: `Ok(false)` when
/// another holder has it.
pub(super) fn try_flock(file: &File, path: &Path, operation: FlockOperation) -> Result<bool> {
    match flock(file, operation) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(Errno::INTR) => Ok(false),
        Err(errno) => Err(flock_error(path, errno)),
    }
}

fn flock_error(path: &Path, errno: Errno) -> StoreError {
    let unsupported = [Errno::NOLCK, Errno::OPNOTSUPP, Errno::NOSYS, Errno::INVAL];
    let context = if unsupported.contains(&errno) {
        format!(
            "locking {}: the filesystem does not support flock locks, which the file store \
             needs (Lustre: mount with the `flock` option; NFS: version 4, or v3 with lockd); \
             use another directory or the TCP store",
            path.display()
        )
    } else {
        format!("locking {}", path.display())
    };
    StoreError::io(context, io::Error::from(errno))
}

/// The exclusive lock on a lock file, held until dropped.
///
/// Its holder's record (`pid N`) stays in the file while it holds the
/// lock and is cleared when it releases it; a record found on taking the
/// lock is a holder's that died holding it, in the middle of a write
/// that may have left a temporary file ([`LockGuard::abandoned`]).
pub(super) struct LockGuard {
    // Closing the file releases the lock.
    file: File,
    /// The previous holder died holding the lock, and nobody has cleaned
    /// up after it yet: keep the record for the next holder.
    abandoned: bool,
}

impl LockGuard {
    /// Whether the previous holder died holding the lock (killed in the
    /// middle of a mutation) and nobody has cleaned up after it.
    pub(super) fn abandoned(&self) -> bool {
        self.abandoned
    }

    /// Says the holder cleaned up after the dead one, so the record goes
    /// at release.
    pub(super) fn cleaned_up(&mut self) {
        self.abandoned = false;
    }
}

impl Drop for LockGuard {
    /// Clears the record (unless a dead holder's is left to clean up
    /// after), then releases the lock by closing the file.
    fn drop(&mut self) {
        if !self.abandoned {
            let _ = self.file.set_len(0);
        }
    }
}

/// Takes the exclusive lock on `path`, retrying with a short backoff until
/// `timeout`; then fails with [`StoreError::Lock`].
///
/// Writes the holder's pid into the file, for a human looking for a hung holder
/// (and for the next holder: see [`LockGuard`]).
pub(super) fn lock_exclusive(path: &Path, timeout: Duration) -> Result<LockGuard> {
    let mut file = open_lock_file(path)?;
    let deadline = Deadline::after(timeout);
    let mut backoff = Duration::from_micros(200);
    loop {
        if try_flock(&file, path, FlockOperation::NonBlockingLockExclusive)? {
            let abandoned = file.metadata().is_ok_and(|m| m.len() > 0);
            let _ = file.set_len(0);
            let _ = file.rewind();
            let _ = writeln!(file, "pid {}", std::process::id());
            return Ok(LockGuard { file, abandoned });
        }
        let Some(left) = deadline.remaining() else {
            return Err(StoreError::Lock {
                path: PathBuf::from(path),
                waited: deadline.elapsed(),
                age: held_for(&file),
            });
        };
        thread::sleep(backoff.min(left));
        backoff = (backoff * 2).min(Duration::from_millis(5));
    }
}

/// How long ago the holder wrote its pid: how long it has held the lock.
fn held_for(file: &File) -> Option<Duration> {
    let modified = file.metadata().and_then(|m| m.modified()).ok()?;
    SystemTime::now().duration_since(modified).ok()
}
