//! store_bench: what the TCP store server costs and how fast it answers,
//! next to torch's c10d `TCPStore` (libuv backend) where torch is
//! installed. Prints markdown tables.
//!
//! ```text
//! cargo run --release -p nccl-rendezvous --example store_bench -- \
//!     [--idle 10000] [--clients 64] [--rounds 300] [--phase-secs 3] [--flood-rate 500] \
//!     [--attackers-nice 19 | --attackers-idle] [--attackers-cpu N] [--gate-idle] [--no-torch]
//! ```
//!
//! Each server runs in a child process of its own, so that its threads,
//! resident memory and CPU time (`/proc/<pid>/status` and `stat`) are its
//! alone; the clients are threads of this process. Three sections:
//!
//! 1. `--idle` authenticated connections held open and idle: the server's
//!    threads and resident memory before and after.
//! 2. `--clients` clients, each with one connection, doing `--rounds`
//!    rounds of `set`, `get` and `add` at once: p50 and p99 per operation.
//!    torch's server is driven by this crate's `C10dStore` (torch's
//!    protocol: a `set` is SET and PING, an `add` CHECK, GET and ADD).
//! 3. This crate's server only: 4 probe clients doing `set` and `get` for
//!    `--phase-secs` idle, then as long under the attacks of
//!    `tests/store_abuse/bounds.rs` (24 threads opening unauthenticated
//!    connections that announce 64 MiB frames and send their first MiB,
//!    and a client asking to wait for 12 M keys every 10 ms), first paced
//!    at `--flood-rate` connections a second, then as fast as the
//!    attackers go: the probes' p99 under attack over their idle p99.
//!    The attackers run on the same cores as the server and the probes,
//!    so an attack the server takes faster also costs the probes more of
//!    their own CPU: the paced row compares servers under the same load.
//!    `--attackers-nice N` runs the attacking threads at nice N (19: the
//!    lowest priority), standing in for attackers on other machines, whose
//!    CPU the probes would not share. `--attackers-idle` runs them under
//!    Linux's `SCHED_IDLE` instead (they get a CPU only when nothing else
//!    wants it). `--gate-idle` starts this crate's server with
//!    `GatePriority::Idle` (its gate under `SCHED_IDLE`). `--attackers-cpu
//!    N` keeps the attacking threads on CPU N and everything else (the
//!    probes, the server's process) off it: attackers on a machine of
//!    their own, as far as one host can stand in for that.
//!
//! 4. This crate's server only, without a secret and with its default
//!    `max_in_flight_bytes` (256 MiB), facing heavy clients of its own
//!    protocol (`heavy`): 600 clients waiting for one key that never read
//!    the 2 MiB value a write then gives them, beside 8 ranks reading it,
//!    and 300 ranks reading it; the server's resident memory against that
//!    bound. Then 4 probes for `--phase-secs` idle, then as long beside a
//!    client that holds all the bytes in flight it can (40 unread answers
//!    of 8 MiB and 40 frames of 1 MiB sent but their last byte), three
//!    times in turn: the probes' p99 over their idle p99, and the medians.
//!
//! Without torch (`python3 -c 'import torch'` fails) its rows are replaced
//! by the line `torch: not installed here, skipped`.

mod heavy;
mod load;
mod servers;

use std::process::ExitCode;
use std::time::Duration;

use load::{Attack, Latencies, Phase};
use servers::{Kind, ServerProcess};

struct Args {
    idle: usize,
    clients: usize,
    rounds: usize,
    phase: Duration,
    flood_rate: f64,
    attackers_nice: Option<i32>,
    attackers_idle: bool,
    attackers_cpu: Option<usize>,
    idle_gate: bool,
    torch: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        idle: 10_000,
        clients: 64,
        rounds: 300,
        phase: Duration::from_secs(3),
        flood_rate: 500.0,
        attackers_nice: None,
        attackers_idle: false,
        attackers_cpu: None,
        idle_gate: false,
        torch: true,
    };
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match arg.as_str() {
            "--idle" => parsed.idle = number("--idle")?,
            "--clients" => parsed.clients = number("--clients")?.max(1),
            "--rounds" => parsed.rounds = number("--rounds")?.max(1),
            "--phase-secs" => parsed.phase = Duration::from_secs(number("--phase-secs")? as u64),
            "--flood-rate" => parsed.flood_rate = number("--flood-rate")?.max(1) as f64,
            "--attackers-nice" => {
                parsed.attackers_nice = Some(number("--attackers-nice")?.min(19) as i32)
            }
            "--attackers-idle" => parsed.attackers_idle = true,
            "--attackers-cpu" => parsed.attackers_cpu = Some(number("--attackers-cpu")?),
            "--gate-idle" => parsed.idle_gate = true,
            "--no-torch" => parsed.torch = false,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some(servers::SERVE_ARG) {
        let flags: Vec<String> = args.collect();
        let idle_gate = flags.iter().any(|arg| arg == servers::IDLE_GATE_ARG);
        let plain = flags.iter().any(|arg| arg == servers::PLAIN_ARG);
        return match servers::serve(idle_gate, plain) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("store_bench serve: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = match parse_args(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("store_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn raise_descriptor_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

fn run(args: &Args) -> Result<(), String> {
    if let Some(cpu) = args.attackers_cpu {
        // Inherited by every thread and server process started from here.
        load::pin_thread(|c| c != cpu);
    }
    let limit = raise_descriptor_limit();
    let kinds = if !args.torch {
        println!("torch: not asked for (--no-torch), skipped\n");
        vec![Kind::Ours]
    } else if servers::torch_available() {
        vec![Kind::Ours, Kind::Torch]
    } else {
        println!("torch: not installed here, skipped\n");
        vec![Kind::Ours]
    };
    println!(
        "{} CPU(s), RLIMIT_NOFILE {limit}\n",
        std::thread::available_parallelism().map_or(0, usize::from)
    );

    println!("### {} idle authenticated connections\n", args.idle);
    println!(
        "| server | connections | threads before | threads after | RSS before (MiB) | RSS after \
         (MiB) | RSS per connection (KiB) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut stopped_notes = Vec::new();
    for &kind in &kinds {
        let server = ServerProcess::start(kind, args.idle_gate)?;
        let idle = load::idle_connections(&server, args.idle)?;
        let grown = idle.after.rss_kib.saturating_sub(idle.before.rss_kib);
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2} |",
            kind.name(),
            idle.opened,
            idle.before.threads,
            idle.after.threads,
            mib(idle.before.rss_kib),
            mib(idle.after.rss_kib),
            grown as f64 / idle.opened.max(1) as f64
        );
        stopped_notes.extend(idle.stopped.map(|why| {
            format!(
                "{}: stopped at {} connections: {why}",
                kind.name(),
                idle.opened
            )
        }));
    }
    for note in stopped_notes {
        println!("\n{note}");
    }

    println!(
        "\n### {} clients, {} rounds of set, get and add each\n",
        args.clients, args.rounds
    );
    println!("| server | op | p50 (µs) | p99 (µs) | ops/s (all three) |");
    println!("|---|---|---|---|---|");
    for &kind in &kinds {
        let server = ServerProcess::start(kind, args.idle_gate)?;
        let mut mixed = load::mixed_clients(&server, args.clients, args.rounds)?;
        let total = mixed.set.len() + mixed.get.len() + mixed.add.len();
        let rate = total as f64 / mixed.wall.as_secs_f64();
        for (op, times) in [
            ("set", &mut mixed.set),
            ("get", &mut mixed.get),
            ("add", &mut mixed.add),
        ] {
            println!(
                "| {} | {op} | {:.0} | {:.0} | {rate:.0} |",
                kind.name(),
                micros(times.quantile(0.5)),
                micros(times.quantile(0.99))
            );
        }
    }

    println!(
        "\n### Other clients under attack ({} s a phase, {})\n",
        args.phase.as_secs(),
        Kind::Ours.name()
    );
    let server = ServerProcess::start(Kind::Ours, args.idle_gate)?;
    let attack = |rate| Attack {
        flooders: 24,
        wait_keys: 12_000_000,
        rate,
        nice: args.attackers_nice,
        idle: args.attackers_idle,
        cpu: args.attackers_cpu,
    };
    let mut idle = load::probe_phase(&server, 4, args.phase, None)?;
    let paced = attack(Some(args.flood_rate));
    let mut paced = load::probe_phase(&server, 4, args.phase, Some(&paced))?;
    let mut unpaced = load::probe_phase(&server, 4, args.phase, Some(&attack(None)))?;
    println!(
        "| phase | flood connections/s | probe rounds (set + get) | p50 (µs) | p99 (µs) | p99 / \
         idle p99 | server CPU (s) | server RSS max (MiB) | server threads max |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let idle_p99 = idle.probes.quantile(0.99);
    let paced_name = format!("flood at {:.0}/s + 12 M-key wait", args.flood_rate);
    for (name, phase) in [
        ("idle", &mut idle),
        (paced_name.as_str(), &mut paced),
        ("flood at full speed + 12 M-key wait", &mut unpaced),
    ] {
        print_phase(name, phase, idle_p99, args.phase);
    }
    heavy::run(args.phase)
}

fn print_phase(name: &str, phase: &mut Phase, idle_p99: Duration, length: Duration) {
    let probes: &mut Latencies = &mut phase.probes;
    let p99 = probes.quantile(0.99);
    println!(
        "| {name} | {:.0} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {} |",
        phase.floods as f64 / length.as_secs_f64(),
        probes.len(),
        micros(probes.quantile(0.5)),
        micros(p99),
        p99.as_secs_f64() / idle_p99.as_secs_f64().max(1e-9),
        phase.cpu.as_secs_f64(),
        mib(phase.max_rss_kib),
        phase.max_threads
    );
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
