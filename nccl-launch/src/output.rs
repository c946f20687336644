//! Forwarding a rank's output line by line, each line prefixed with the
//! rank, so the ranks' lines never mix mid-line.

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

/// A thread forwarding one pipe; its text (when kept) comes back once the
/// pipe closes.
pub(crate) struct Forwarder {
    done: Receiver<String>,
}

impl Forwarder {
    /// Forwards `pipe` to `sink`, each line prefixed with `prefix`; keeps a
    /// copy (without the prefixes) when `keep`.
    pub(crate) fn start(
        pipe: impl Read + Send + 'static,
        prefix: String,
        sink: Sink,
        keep: bool,
    ) -> Self {
        let (tx, done) = mpsc::channel();
        // A thread that cannot start leaves the pipe unread: the rank then
        // blocks once the pipe fills and the launch's deadline ends it.
        let _ = thread::Builder::new()
            .name(format!("{}output", prefix.trim()))
            .spawn(move || {
                let kept = forward(pipe, prefix.as_bytes(), sink, keep);
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

fn forward(pipe: impl Read, prefix: &[u8], sink: Sink, keep: bool) -> String {
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
        let _ = match sink {
            Sink::Stdout => write_line(&mut std::io::stdout().lock(), prefix, &line),
            Sink::Stderr => write_line(&mut std::io::stderr().lock(), prefix, &line),
        };
        if keep {
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
