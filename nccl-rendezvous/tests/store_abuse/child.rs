//! A server in a child process (this test binary running `child_server`),
//! so that its resident memory, threads and CPU time, read from
//! `/proc/<pid>`, are the server's own while the tests' clients and
//! attackers run here.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::Duration;

use nccl_rendezvous::{TcpStoreServer, TcpStoreServerOptions};

/// Selects the child role, and carries its server's settings.
const ROLE_VAR: &str = "NCCL_ABUSE_CHILD_SERVER";
const ADDR_LINE: &str = "CHILD_SERVER_ADDR=";

/// The settings a child server can be given (its defaults otherwise).
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// The secret every client must hold.
    pub secret: Option<&'static str>,
    /// `TcpStoreServerOptions::max_in_flight_bytes`.
    pub max_in_flight_bytes: Option<usize>,
    /// `TcpStoreServerOptions::max_value_len`.
    pub max_value_len: Option<usize>,
}

impl Settings {
    fn encode(self) -> String {
        let mut fields = Vec::new();
        if let Some(secret) = self.secret {
            fields.push(format!("secret={secret}"));
        }
        if let Some(bytes) = self.max_in_flight_bytes {
            fields.push(format!("max_in_flight_bytes={bytes}"));
        }
        if let Some(bytes) = self.max_value_len {
            fields.push(format!("max_value_len={bytes}"));
        }
        fields.join(",")
    }

    fn options(spec: &str) -> TcpStoreServerOptions {
        let mut options = TcpStoreServerOptions::default();
        for (name, value) in spec.split(',').filter_map(|kv| kv.split_once('=')) {
            let number = || value.parse::<usize>().unwrap();
            options = match name {
                "secret" => options.with_secret(value.as_bytes().to_vec()),
                "max_in_flight_bytes" => options.with_max_in_flight_bytes(number()),
                "max_value_len" => options.with_max_value_len(number()),
                other => panic!("unknown child server setting {other:?}"),
            };
        }
        options
    }
}

/// The child's side: serves until its stdin closes. Returns at once when
/// this binary is not running as a child.
pub fn serve_if_child() {
    let Ok(spec) = std::env::var(ROLE_VAR) else {
        return;
    };
    let server = TcpStoreServer::bind("127.0.0.1:0", Settings::options(&spec)).unwrap();
    println!("{ADDR_LINE}{}", server.local_addr());
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(server);
}

/// What `/proc/<pid>` says of the child.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub rss_bytes: usize,
    pub threads: usize,
    /// User plus system CPU time so far.
    pub cpu: Duration,
}

/// A running child server; dropping it ends the child.
pub struct ChildServer {
    child: Child,
    stdin: Option<ChildStdin>,
    pub addr: SocketAddr,
}

impl ChildServer {
    /// Starts a child server with `settings` and waits for its address.
    pub fn start(settings: Settings) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, settings.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the child server");
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = lines
            .by_ref()
            .map_while(Result::ok)
            // The harness may have printed the test's name on the line first.
            .find_map(|line| line.split_once(ADDR_LINE).map(|(_, addr)| addr.to_owned()))
            .expect("the child server's address")
            .parse()
            .unwrap();
        // Keep reading what the child prints, so that it never blocks on a
        // full pipe.
        thread::spawn(move || lines.for_each(drop));
        ChildServer { child, stdin, addr }
    }

    /// The child's resident memory, threads and CPU time now.
    pub fn sample(&self) -> Sample {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| -> usize {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap()
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // utime and stime: the 14th and 15th fields, the 12th and 13th
        // after the command name (in parentheses, possibly with spaces).
        let (_, after_name) = stat.rsplit_once(')').unwrap();
        let ticks: u64 = after_name
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        let per_second = rustix::param::clock_ticks_per_second();
        Sample {
            rss_bytes: field("VmRSS:") << 10,
            threads: field("Threads:"),
            cpu: Duration::from_secs_f64(ticks as f64 / per_second as f64),
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
