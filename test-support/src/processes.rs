//! Tests that run in several processes: copies of the test binary (or any
//! command) spawned as children and waited for under a hang guard, and the
//! marks ranks leave for each other in a folder they share.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often waits here look again.
const POLL: Duration = Duration::from_millis(5);

/// A port on 127.0.0.1 that was free a moment ago (for scenarios that must
/// name the port before any process starts).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// Reads `reader` to its end on a thread of its own (so a child never
/// blocks on a full pipe); the thread returns the text.
pub fn drain(mut reader: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = reader.read_to_string(&mut text);
        text
    })
}

/// The last `max` bytes of `text` (fewer, to start on a character).
pub fn tail(text: &str, max: usize) -> &str {
    let start = text.len().saturating_sub(max);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

/// One launched rank's output, as [`rank_outputs`] prints it.
pub struct RankOutput<'a> {
    /// The rank.
    pub rank: usize,
    /// How it ended, as the launcher says it.
    pub ending: String,
    /// Its standard output.
    pub stdout: &'a str,
    /// Its standard error.
    pub stderr: &'a str,
}

/// The last 3000 bytes of every rank's stdout and stderr, for a failure
/// message of a test that launched them.
pub fn rank_outputs<'a>(ranks: impl IntoIterator<Item = RankOutput<'a>>) -> String {
    ranks
        .into_iter()
        .map(|r| {
            format!(
                "\n----- rank {} ({}) stdout (end) -----\n{}\n----- rank {} stderr (end) -----\n{}",
                r.rank,
                r.ending,
                tail(r.stdout, 3000),
                r.rank,
                tail(r.stderr, 3000)
            )
        })
        .collect()
}

/// Microseconds since the Unix epoch (processes on one host share the clock).
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Writes `value` to `dir/name` atomically: readers never see part of it.
pub fn publish(dir: &Path, name: &str, value: &str) {
    let partial = dir.join(format!("{name}.partial"));
    std::fs::write(&partial, value).expect("write a mark in the shared folder");
    std::fs::rename(&partial, dir.join(name)).expect("publish the mark");
}

/// The contents of `dir/name` once some process published it, or `None`
/// after `timeout`.
pub fn await_mark(dir: &Path, name: &str, timeout: Duration) -> Option<String> {
    await_mark_while(dir, name, timeout, || true)
}

/// [`await_mark`], giving up at once when `publisher_runs` says the
/// process that would publish the mark is gone (a rank that failed before
/// it got there), instead of waiting out `timeout`.
pub fn await_mark_while(
    dir: &Path,
    name: &str,
    timeout: Duration,
    mut publisher_runs: impl FnMut() -> bool,
) -> Option<String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            return Some(text);
        }
        if Instant::now() >= deadline || !publisher_runs() {
            // A mark published just before its process ended still counts.
            return std::fs::read_to_string(dir.join(name)).ok();
        }
        thread::sleep(POLL);
    }
}

/// A child process, its output being read: a copy of this test binary
/// running one test ([`spawn_child_test`]) or any command
/// ([`spawn_captured`]).
pub struct ChildTest {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

impl ChildTest {
    /// Its process id (to send it a signal while it runs).
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

/// How a [`ChildTest`] ended.
#[derive(Debug)]
pub struct Ended {
    /// Its exit status; `None` if it was killed at the deadline (it hung).
    pub status: Option<ExitStatus>,
    /// Everything it printed to stdout.
    pub stdout: String,
    /// Everything it printed to stderr.
    pub stderr: String,
}

impl Ended {
    /// Whether it exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|status| status.success())
    }
}

/// Spawns this test binary running only the test `test` (`--exact`, its
/// output as it happens, one thread), with its stdin closed and the
/// environment `configure` sets.
pub fn spawn_child_test(test: &str, configure: impl FnOnce(&mut Command)) -> ChildTest {
    spawn_child_test_via(&[], test, configure)
}

/// [`spawn_child_test`] with the test binary and its arguments as the last
/// arguments of `wrapper` (e.g. `ip netns exec NAME`, which runs it in a
/// network namespace); an empty `wrapper` runs it directly.
pub fn spawn_child_test_via(
    wrapper: &[&str],
    test: &str,
    configure: impl FnOnce(&mut Command),
) -> ChildTest {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(exe);
            command
        }
        None => Command::new(exe),
    };
    command.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    configure(&mut command);
    spawn_captured(&mut command)
}

/// Spawns `command` with its stdin closed and its stdout and stderr read
/// (for [`wait_children`], which bounds how long it may run).
pub fn spawn_captured(command: &mut Command) -> ChildTest {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {command:?}: {e}"));
    let stdout = drain(child.stdout.take().expect("the child's stdout"));
    let stderr = drain(child.stderr.take().expect("the child's stderr"));
    ChildTest {
        child,
        stdout,
        stderr,
    }
}

/// Waits for every child, for at most `deadline`; once one fails, the
/// others get at most `grace` more (they may be blocked waiting for it).
/// Children still running then are killed. Returns how each ended, in
/// order.
pub fn wait_children(children: Vec<ChildTest>, deadline: Duration, grace: Duration) -> Vec<Ended> {
    let mut deadline = Instant::now() + deadline;
    let mut children: Vec<(ChildTest, Option<ExitStatus>)> =
        children.into_iter().map(|child| (child, None)).collect();
    loop {
        for (child, status) in &mut children {
            if status.is_none() {
                *status = child.child.try_wait().expect("try_wait on a child");
                if status.is_some_and(|s| !s.success()) {
                    deadline = deadline.min(Instant::now() + grace);
                }
            }
        }
        if children.iter().all(|(_, status)| status.is_some()) || Instant::now() >= deadline {
            break;
        }
        thread::sleep(POLL);
    }
    children
        .into_iter()
        .map(|(mut child, status)| {
            if status.is_none() {
                let _ = child.child.kill();
                let _ = child.child.wait();
            }
            Ended {
                status,
                stdout: child.stdout.join().unwrap_or_default(),
                stderr: child.stderr.join().unwrap_or_default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_wait_ends_with_its_publisher_and_still_reads_a_late_mark() {
        let dir = std::env::temp_dir().join(format!("nccl-rs-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut asked = 0;
        let gone = await_mark_while(&dir, "never", Duration::from_secs(3600), || {
            asked += 1;
            false
        });
        assert_eq!(gone, None);
        assert_eq!(
            asked, 1,
            "gave up at the first look after the publisher ended"
        );
        // Published, then its process ended: the mark counts.
        let mut published = false;
        let late = await_mark_while(&dir, "late", Duration::from_secs(3600), || {
            publish(&dir, "late", "here");
            published = true;
            false
        });
        assert!(published);
        assert_eq!(late.as_deref(), Some("here"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
