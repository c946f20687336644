//! Generations: which files belong to the job using the directory now.
//!
//! Every open store holds a shared `flock` on `.alive` for as long as it
//! lives, and the kernel drops it when its process exits or dies. A store
//! opening finds out under the mutation lock whether anyone still holds
//! one: if so, it joins their generation; if not, whatever the directory
//! holds is a finished or crashed job's, so it starts the next generation
//! (`.generation`, a number; keys in `gen-<n>/`) and removes the older
//! ones. The last store to close removes its generation's files.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

use super::lock::{lock_exclusive, open_lock_file, try_flock};
use crate::{Result, StoreError};

pub(super) const LOCK_NAME: &str = ".lock";
const ALIVE_NAME: &str = ".alive";
const GENERATION_NAME: &str = ".generation";
const GENERATION_PREFIX: &str = "gen-";

/// How long closing a store waits for the lock to clean up after itself;
/// past it the files stay for the next generation to remove.
const CLEANUP_WAIT: Duration = Duration::from_secs(1);

/// This process's membership in the directory's current generation.
#[derive(Debug)]
pub(super) struct Membership {
    dir: PathBuf,
    data_dir: PathBuf,
    generation: u64,
    /// Holds the shared lock on `.alive`; closed, it releases it.
    alive: Option<File>,
}

impl Membership {
    /// Joins the directory's live generation, or starts the next one when
    /// no open store holds it (waiting at most `lock_timeout` for the lock).
    pub(super) fn join(dir: &Path, lock_timeout: Duration) -> Result<Self> {
        let _decide = lock_exclusive(&dir.join(LOCK_NAME), lock_timeout)?;
        let alive_path = dir.join(ALIVE_NAME);
        let alive = open_lock_file(&alive_path)?;
        let generation = if try_flock(
            &alive,
            &alive_path,
            FlockOperation::NonBlockingLockExclusive,
        )? {
            // Nobody is here: every file is a finished or crashed job's.
            let next = read_generation(dir)?.map_or(1, |g| g.wrapping_add(1));
            write_generation(dir, next)?;
            remove_generations(dir, |g| g != next);
            next
        } else {
            read_generation(dir)?
                .ok_or_else(|| corrupt(dir, "a store is open on it, but it names no generation"))?
        };
        // Under the decision lock, so no newcomer sees the moment between
        // the exclusive lock and the shared one.
        if !try_flock(&alive, &alive_path, FlockOperation::NonBlockingLockShared)? {
            return Err(corrupt(
                dir,
                "another process holds its membership lock exclusively outside the store's lock",
            ));
        }
        let data_dir = generation_dir(dir, generation);
        fs::create_dir_all(&data_dir).map_err(|e| {
            StoreError::io(
                format!("creating the generation directory {}", data_dir.display()),
                e,
            )
        })?;
        Ok(Membership {
            dir: dir.to_owned(),
            data_dir,
            generation,
            alive: Some(alive),
        })
    }

    /// Where this generation's keys live.
    pub(super) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The generation's number (1 for the directory's first job).
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }
}

impl Drop for Membership {
    /// Leaves the generation; the last to leave removes its files.
    fn drop(&mut self) {
        let Ok(_decide) = lock_exclusive(&self.dir.join(LOCK_NAME), CLEANUP_WAIT) else {
            return;
        };
        drop(self.alive.take());
        let alive_path = self.dir.join(ALIVE_NAME);
        let Ok(alive) = open_lock_file(&alive_path) else {
            return;
        };
        if let Ok(true) = try_flock(
            &alive,
            &alive_path,
            FlockOperation::NonBlockingLockExclusive,
        ) {
            let _ = fs::remove_dir_all(&self.data_dir);
        }
    }
}

fn generation_dir(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{GENERATION_PREFIX}{generation}"))
}

fn corrupt(dir: &Path, why: &str) -> StoreError {
    StoreError::io(
        format!(
            "opening the file store in {}: {why}; remove the directory's contents once no job \
             uses it",
            dir.display()
        ),
        io::Error::new(io::ErrorKind::InvalidData, why.to_owned()),
    )
}

fn read_generation(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(GENERATION_NAME);
    match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            corrupt(
                dir,
                &format!("{} does not hold a generation number", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(format!("reading {}", path.display()), e)),
    }
}

/// Replaces `.generation` atomically: a reader never sees half a number.
fn write_generation(dir: &Path, generation: u64) -> Result<()> {
    let path = dir.join(GENERATION_NAME);
    let partial = dir.join(format!("{GENERATION_NAME}.{}", std::process::id()));
    fs::write(&partial, generation.to_string())
        .and_then(|()| fs::rename(&partial, &path))
        .map_err(|e| {
            let _ = fs::remove_file(&partial);
            StoreError::io(format!("writing {}", path.display()), e)
        })
}

/// Removes (best effort) the generation directories `remove` picks: a
/// crashed job's files, once nobody can use them.
fn remove_generations(dir: &Path, remove: impl Fn(u64) -> bool) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let number = name
            .to_str()
            .and_then(|n| n.strip_prefix(GENERATION_PREFIX))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number
            && remove(number)
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
