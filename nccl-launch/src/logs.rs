//! Each rank's output in files (`--log-dir`), and which of its streams
//! also go to the console (`--tee`).
//!
//! A launch with a log folder `DIR` writes to `DIR/run_<k>`, the first
//! `k` from 0 not yet taken (so a launch never writes into another's
//! files); in it each attempt has `attempt_<n>` (`n` its
//! `TORCHELASTIC_RESTART_COUNT`), and in that each rank a folder named by
//! its global rank holding `stdout.log` and `stderr.log`. torchrun's
//! layout is the same but for the run folder's name and its folders by
//! local rank (every simulated host is local rank 0).

use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::LaunchError;

/// The most run folders one log folder holds.
const MAX_RUNS: usize = 1_000_000;

/// Which of a rank's two streams (torchrun's `--tee` values: 0 to 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Streams {
    /// Neither (`0`).
    #[default]
    Neither,
    /// Standard output (`1`).
    Stdout,
    /// Standard error (`2`).
    Stderr,
    /// Both (`3`).
    Both,
}

impl Streams {
    /// Whether standard output is one of them.
    pub fn stdout(self) -> bool {
        matches!(self, Streams::Stdout | Streams::Both)
    }

    /// Whether standard error is one of them.
    pub fn stderr(self) -> bool {
        matches!(self, Streams::Stderr | Streams::Both)
    }
}

impl FromStr for Streams {
    type Err = LaunchError;

    /// torchrun's number for the streams: `0` (neither), `1` (stdout),
    /// `2` (stderr) or `3` (both).
    ///
    /// Its per-rank form (`0:1,1:2`) is refused: the same streams go for every
    /// rank.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "0" => Ok(Streams::Neither),
            "1" => Ok(Streams::Stdout),
            "2" => Ok(Streams::Stderr),
            "3" => Ok(Streams::Both),
            _ => Err(LaunchError::InvalidArgument {
                argument: "streams",
                expected: "0 (neither), 1 (stdout), 2 (stderr) or 3 (both), the same for every \
                           rank"
                    .to_string(),
                given: format!("{value:?}"),
            }),
        }
    }
}

/// Creates a fresh run folder in `base` (and `base` itself if need be):
/// `base/run_<k>`, the first `k` not yet taken.
pub(crate) fn new_run_dir(base: &Path) -> Result<PathBuf, LaunchError> {
    fs::create_dir_all(base).map_err(|source| LaunchError::Io {
        what: format!("create the log folder {}", base.display()),
        source,
    })?;
    for k in 0..MAX_RUNS {
        let run = base.join(format!("run_{k}"));
        match fs::create_dir(&run) {
            Ok(()) => return Ok(run),
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(LaunchError::Io {
                    what: format!("create the run folder {}", run.display()),
                    source,
                });
            }
        }
    }
    Err(LaunchError::InvalidArgument {
        argument: "log folder",
        expected: format!("a folder with fewer than {MAX_RUNS} run folders"),
        given: format!("{}, which has them all", base.display()),
    })
}

/// Creates the folder of attempt `restart_count` in the run folder `run`;
/// refused if it exists, so no log is ever overwritten.
pub(crate) fn new_attempt_dir(run: &Path, restart_count: usize) -> Result<PathBuf, LaunchError> {
    let attempt = run.join(format!("attempt_{restart_count}"));
    fs::create_dir(&attempt).map_err(|source| LaunchError::Io {
        what: format!("create the attempt's log folder {}", attempt.display()),
        source,
    })?;
    Ok(attempt)
}

/// A rank's two log files in the attempt folder `attempt`, created new:
/// `<rank>/stdout.log` and `<rank>/stderr.log`.
pub(crate) fn rank_files(attempt: &Path, rank: usize) -> Result<[File; 2], LaunchError> {
    let folder = attempt.join(rank.to_string());
    fs::create_dir(&folder).map_err(|source| LaunchError::Io {
        what: format!("create rank {rank}'s log folder {}", folder.display()),
        source,
    })?;
    let create = |name: &str| {
        let path = folder.join(name);
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| LaunchError::Io {
                what: format!("create rank {rank}'s log {}", path.display()),
                source,
            })
    };
    Ok([create("stdout.log")?, create("stderr.log")?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_or_log_that_exists_is_refused_and_left_as_it_was() {
        let base = tempfile::tempdir().expect("a folder");
        let run = new_run_dir(base.path()).expect("a run folder");
        assert_eq!(run, base.path().join("run_0"));
        let attempt = new_attempt_dir(&run, 0).expect("an attempt folder");
        let logged = attempt.join("0/stdout.log");
        drop(rank_files(&attempt, 0).expect("rank 0's logs"));
        fs::write(&logged, "kept\n").expect("write a log");
        let again = new_attempt_dir(&run, 0).expect_err("the attempt folder exists");
        assert!(
            again
                .to_string()
                .starts_with("could not create the attempt's log folder"),
            "{again}"
        );
        let again = rank_files(&attempt, 0).expect_err("rank 0's folder exists");
        assert!(
            again
                .to_string()
                .starts_with("could not create rank 0's log folder"),
            "{again}"
        );
        assert_eq!(fs::read_to_string(&logged).expect("read the log"), "kept\n");
        assert_eq!(
            new_run_dir(base.path()).expect("a second run folder"),
            base.path().join("run_1")
        );
    }

    #[test]
    fn streams_are_torchruns_numbers_and_nothing_else() {
        let parsed: Vec<Streams> = ["0", "1", "2", "3"]
            .iter()
            .map(|value| value.parse().expect("a torchrun number"))
            .collect();
        assert_eq!(
            parsed,
            [
                Streams::Neither,
                Streams::Stdout,
                Streams::Stderr,
                Streams::Both
            ]
        );
        assert!(Streams::Both.stdout() && Streams::Both.stderr());
        assert!(!Streams::Stdout.stderr() && !Streams::Stderr.stdout());
        for bad in ["4", "-1", "0:1,1:2", ""] {
            let error = bad.parse::<Streams>().expect_err("not 0 to 3");
            assert!(
                error
                    .to_string()
                    .contains("expected 0 (neither), 1 (stdout), 2 (stderr) or 3 (both)"),
                "{error}"
            );
        }
    }
}
