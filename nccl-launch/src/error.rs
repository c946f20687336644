//! The launcher's errors.

use std::ffi::OsString;

/// Why a launch could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// A setting out of range.
    #[error("invalid {argument}: expected {expected}, got {given}")]
    InvalidArgument {
        /// What was set.
        argument: &'static str,
        /// What it may be.
        expected: String,
        /// What it was.
        given: String,
    },
    /// A rank's process could not be started.
    #[error("could not start rank {rank} ({program:?})")]
    Spawn {
        /// The rank.
        rank: usize,
        /// The program.
        program: OsString,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Something the launch needs from the system failed.
    #[error("could not {what}")]
    Io {
        /// What the launch was doing.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}
