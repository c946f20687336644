//! File descriptors: the process's limit (`RLIMIT_NOFILE`), raised to its
//! hard limit when the server starts, and telling "out of descriptors"
//! apart from other I/O errors so that it is reported as such.

use std::io;

use rustix::io::Errno;
use rustix::process::{Resource, getrlimit, setrlimit};

/// Whether `e` says the process (`EMFILE`) or the system (`ENFILE`) has no
/// file descriptor left.
pub(super) fn is_exhausted(e: &io::Error) -> bool {
    e.raw_os_error().is_some_and(|code| {
        code == Errno::MFILE.raw_os_error() || code == Errno::NFILE.raw_os_error()
    })
}

/// This process's soft `RLIMIT_NOFILE`, `None` when unlimited.
pub(super) fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one (best effort: a limit
/// that cannot be raised stays as it is) and returns the soft limit now in
/// force, `None` when unlimited.
pub(super) fn raise_soft_limit() -> Option<u64> {
    let mut limit = getrlimit(Resource::Nofile);
    // The soft limit never exceeds the hard one: unequal means raisable.
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            crate::trace::event!(
                debug,
                "store server: could not raise RLIMIT_NOFILE to its hard limit"
            );
        }
    }
    soft_limit()
}

/// The message of an error meaning this process ran out of descriptors.
pub(super) fn exhausted_note() -> String {
    match soft_limit() {
        Some(limit) => format!("this process's file descriptor limit (RLIMIT_NOFILE) is {limit}"),
        None => "this process has no file descriptor limit, so the system ran out".to_owned(),
    }
}
