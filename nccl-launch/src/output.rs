//! Forwarding a rank's output line by line: to the console, each line
//! prefixed with the rank so the ranks' lines never mix mid-line, to its
//! log file, or both.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Instant;

/// Which of the launcher's streams a rank's pipe goes to.
#[derive(Clone, Copy)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

/// Where one of a rank's pipes goes.
pub(crate) struct Route {
    /// The launcher's stream and the prefix of each line there, if any.
    pub(crate) console: Option<(Sink, String)>,
    /// Its log file (lines as the rank wrote them), if any.
    pub(crate) file: Option<File>,
    /// Whether a copy is kept for the rank's outcome.
    pub(crate) keep: bool,
}

/// A thread forwarding one pipe; its text (when kept) comes back once the
/// pipe closes.
pub(crate) struct Forwarder {
    done: Receiver<String>,
}

impl Forwarder {
    /// Forwards `pipe` along `route`; `name` names it in the thread's name
    /// and in messages (`rank 3 stdout`).
    pub(crate) fn start(pipe: impl Read + Send + 'static, name: String, route: Route) -> Self {
        let (tx, done) = mpsc::channel();
        // A thread that cannot start leaves the pipe unread: the rank then
        // blocks once the pipe fills (and a launch deadline, if any, ends
        // it).
        let _ = thread::Builder::new()
            .name(name.replace(' ', "-"))
            .spawn(move || {
                let kept = forward(pipe, &name, route);
                let _ = tx.send(kept);
            });
        Self { done }
    }

    /// The kept text, once the pipe has closed or `deadline` has passed
    /// (a process the rank left behind may hold its pipe open: what it
    /// writes then is still forwarded, but not waited for).
    pub(crate) fn finish(self, deadline: Instant) -> String {
        self.done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_default()
    }
}

fn forward(pipe: impl Read, name: &str, mut route: Route) -> String {
    let mut reader = BufReader::new(pipe);
    let mut kept = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        // A closed or full launcher output must not stop the rank: write
        // errors are ignored and reading goes on.
        let _ = match &route.console {
            Some((Sink::Stdout, prefix)) => {
                write_line(&mut std::io::stdout().lock(), prefix.as_bytes(), &line)
            }
            Some((Sink::Stderr, prefix)) => {
                write_line(&mut std::io::stderr().lock(), prefix.as_bytes(), &line)
            }
            None => Ok(()),
        };
        // Nor a full disk: the log stops, said once, and the rank goes on.
        if let Some(file) = &mut route.file
            && let Err(error) = file.write_all(&line)
        {
            eprintln!("nccl-launch: {name}'s log could not be written ({error}); it stops here");
            route.file = None;
        }
        if route.keep {
            kept.extend_from_slice(&line);
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn write_line(out: &mut impl Write, prefix: &[u8], line: &[u8]) -> std::io::Result<()> {
    out.write_all(prefix)?;
    out.write_all(line)?;
    out.flush()
}
