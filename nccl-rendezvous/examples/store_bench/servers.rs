//! The servers under test, each in a child process of its own so that the
//! threads, resident memory and CPU time read from `/proc/<pid>` are the
//! server's alone: this crate's `TcpStoreServer` (this binary, run as
//! `store_bench serve`) and torch's c10d `TCPStore` (`torch_server.py`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use nccl_rendezvous::{
    C10dStore, C10dStoreOptions, GatePriority, Store, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};

/// The secret of the bench's own server (every client of it authenticates).
pub const SECRET: &[u8] = b"store-bench-secret";
/// Selects the child role of this binary.
pub const SERVE_ARG: &str = "serve";
/// The child role's flag for `GatePriority::Idle`.
pub const IDLE_GATE_ARG: &str = "--gate-idle";
/// The child role's flag for a server without a secret (its clients, raw
/// ones among them, speak the protocol unsealed).
pub const PLAIN_ARG: &str = "--plain";
const TORCH_SERVER: &str = include_str!("torch_server.py");

/// Which server a child process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// This crate's `TcpStoreServer`, clients `TcpStore` with a secret.
    Ours,
    /// torch's `TCPStore` (libuv), clients `C10dStore` (no authentication).
    Torch,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ours => "nccl-rendezvous TcpStoreServer",
            Kind::Torch => "torch TCPStore (libuv)",
        }
    }
}

/// Whether `python3 -c 'import torch'` works here.
pub fn torch_available() -> bool {
    Command::new("python3")
        .args(["-c", "import torch.distributed"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The child role: serves until stdin closes, after printing the port;
/// its gate under `SCHED_IDLE` when `idle_gate`, without a secret when
/// `plain`.
pub fn serve(idle_gate: bool, plain: bool) -> Result<(), Box<dyn std::error::Error>> {
    let gate = match idle_gate {
        true => GatePriority::Idle,
        false => GatePriority::Lowered,
    };
    let mut options = TcpStoreServerOptions::default()
        .with_max_connections(65536)
        .with_gate_priority(gate);
    if !plain {
        options = options.with_secret(SECRET.to_vec());
    }
    let server = TcpStoreServer::bind("127.0.0.1:0", options)?;
    println!("{}", server.local_addr().port());
    std::io::stdout().flush()?;
    // Returns at end of input: the parent closed our stdin or exited.
    let mut rest = String::new();
    while std::io::stdin().read_line(&mut rest)? > 0 {}
    drop(server);
    Ok(())
}

/// What `/proc/<pid>` says of a process at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub threads: u64,
    pub rss_kib: u64,
    /// User plus system CPU time so far.
    pub cpu: Duration,
}

/// A server child process; dropping it closes its stdin and reaps it.
pub struct ServerProcess {
    pub kind: Kind,
    pub port: u16,
    /// Ours, without a secret.
    plain: bool,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl ServerProcess {
    /// Starts a server of `kind` (ours with its gate under `SCHED_IDLE`
    /// when `idle_gate`) and waits for its port.
    pub fn start(kind: Kind, idle_gate: bool) -> Result<Self, String> {
        Self::start_with(kind, idle_gate, false)
    }

    /// Starts our server without a secret, for raw clients.
    pub fn start_plain() -> Result<Self, String> {
        Self::start_with(Kind::Ours, false, true)
    }

    fn start_with(kind: Kind, idle_gate: bool, plain: bool) -> Result<Self, String> {
        let mut command = match kind {
            Kind::Ours => {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let mut command = Command::new(exe);
                command.arg(SERVE_ARG);
                if idle_gate {
                    command.arg(IDLE_GATE_ARG);
                }
                if plain {
                    command.arg(PLAIN_ARG);
                }
                command
            }
            Kind::Torch => {
                let mut command = Command::new("python3");
                command.args(["-c", TORCH_SERVER]);
                command
            }
        };
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the {} process: {e}", kind.name()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("the server's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let port = line
            .trim()
            .parse()
            .map_err(|_| format!("the {} printed {line:?}, not a port", kind.name()))?;
        Ok(ServerProcess {
            kind,
            port,
            plain,
            child,
            stdin,
        })
    }

    /// The server's threads, resident memory and CPU time now.
    pub fn sample(&self) -> Sample {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces, in parens):
        // utime and stime are the 14th and 15th fields of the line.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let ticks: Vec<u64> = after_name
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|n| n.parse().ok())
            .collect();
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        let cpu_ticks: u64 = ticks.iter().sum();
        Sample {
            threads: field("Threads:"),
            rss_kib: field("VmRSS:"),
            cpu: Duration::from_secs_f64(cpu_ticks as f64 / per_second as f64),
        }
    }

    /// A client of this server: one connection, opened now.
    pub fn client(&self) -> Result<Box<dyn Store>, String> {
        let patience = Duration::from_secs(60);
        match self.kind {
            Kind::Ours => {
                let mut options = TcpStoreOptions::default();
                if !self.plain {
                    options = options.with_secret(SECRET.to_vec());
                }
                let options = options
                    .with_timeout(patience)
                    .with_connect_timeout(patience)
                    .with_io_margin(patience);
                TcpStore::connect("127.0.0.1", self.port, options)
                    .map(|store| Box::new(store) as Box<dyn Store>)
                    .map_err(|e| e.to_string())
            }
            Kind::Torch => {
                let options = C10dStoreOptions::default()
                    .with_timeout(patience)
                    .with_connect_timeout(patience)
                    .with_io_margin(patience);
                C10dStore::connect_with("127.0.0.1", self.port, options)
                    .map(|store| Box::new(store) as Box<dyn Store>)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
