//! The file trigger of on-demand dumps: a group watches
//! `<dump dir>/`[`REQUEST_FILE`](super::REQUEST_FILE), and each change of
//! it is one request.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How often a group looks at its request file (one `stat` each time).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies one version of the request file.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(file: &Path) -> Option<Stamp> {
    let metadata = std::fs::metadata(file).ok()?;
    Some(Stamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
    })
}

struct Watch {
    next_look: Instant,
    seen: Option<Stamp>,
}

/// Watches one group's request file.
pub(crate) struct RequestWatch {
    file: Option<PathBuf>,
    state: Mutex<Watch>,
}

impl RequestWatch {
    /// Watches `dir`'s request file (nothing, without a dump folder).
    ///
    /// A file already there now is not a request.
    pub(crate) fn new(dir: Option<&Path>, now: Instant) -> Self {
        let file = dir.map(|dir| dir.join(super::REQUEST_FILE));
        let seen = file.as_deref().and_then(stamp);
        Self {
            file,
            state: Mutex::new(Watch {
                next_look: now,
                seen,
            }),
        }
    }

    /// The label of a new request, if the file changed since the last
    /// look (at most one look per [`POLL_INTERVAL`]).
    pub(crate) fn poll(&self, now: Instant) -> Option<String> {
        let file = self.file.as_deref()?;
        let mut watch = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if now < watch.next_look {
            return None;
        }
        watch.next_look = now + POLL_INTERVAL;
        let current = stamp(file);
        if current == watch.seen {
            return None;
        }
        watch.seen = current;
        current?;
        let text = std::fs::read_to_string(file).unwrap_or_default();
        Some(text.lines().next().unwrap_or_default().trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_of_the_file_is_one_request_and_an_old_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(super::super::REQUEST_FILE);
        std::fs::write(&file, "left over\n").unwrap();
        let start = Instant::now();
        let watch = RequestWatch::new(Some(dir.path()), start);
        // The injected clock: each look is one interval after the last.
        let mut now = start;
        let mut look = || {
            now += POLL_INTERVAL;
            watch.poll(now)
        };
        assert_eq!(look(), None, "a file from before the group");
        std::fs::write(&file, "before-restart\nignored\n").unwrap();
        assert_eq!(look().as_deref(), Some("before-restart"));
        assert_eq!(look(), None, "served once");
        std::fs::remove_file(&file).unwrap();
        assert_eq!(look(), None);
        std::fs::write(&file, "").unwrap();
        assert_eq!(look().as_deref(), Some(""), "an empty request");
        // Between looks the file is not even looked at.
        std::fs::write(&file, "again, longer").unwrap();
        assert_eq!(watch.poll(now), None);
        assert_eq!(
            watch.poll(now + POLL_INTERVAL).as_deref(),
            Some("again, longer")
        );
        assert_eq!(RequestWatch::new(None, start).poll(now), None);
    }
}
