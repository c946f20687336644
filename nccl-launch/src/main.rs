//! `nccl-launch`: start N ranks of a program on this host the torchrun way
//! (see the crate docs), and exit with the first failure's status.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use nccl_launch::{Launch, Placement, WaitPolicy};

/// Start N ranks of PROGRAM on this host, as torchrun does: RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT
/// are set for each. With a GPU per rank, rank r uses GPU r; with fewer,
/// every rank runs on GPU 0 as a simulated host of its own (NCCL_HOSTID,
/// sockets on loopback), which tests world size N on one GPU (host cost and
/// results only: its GPU time and bandwidth mean nothing).
///
/// Each output line is prefixed with its rank. The first rank to fail ends
/// the others (SIGKILL, each by its PID) and its status is the launcher's
/// (128 + N for signal N); past --timeout every rank still running is ended
/// and the status is 124.
///
/// SIGTERM and SIGINT are forwarded to every rank (each runs in a process
/// group of its own); ranks still running --grace-period seconds later, or
/// at a second signal, are ended with SIGKILL, and the status is 128 + the
/// signal. Each rank gets SIGKILL if the launcher dies, so none outlives it.
#[derive(Parser, Debug)]
#[command(name = "nccl-launch", version)]
struct Cli {
    /// Number of ranks (processes).
    #[arg(
        short = 'n',
        long = "nproc",
        alias = "nproc-per-node",
        value_name = "N"
    )]
    nproc: usize,
    /// Where the ranks run: a GPU each (`gpus`), all on GPU 0 as simulated
    /// hosts (`simulated`), or `auto`: `gpus` when there is a GPU per rank.
    #[arg(long, value_enum, default_value_t = Hosts::Auto)]
    hosts: Hosts,
    /// MASTER_ADDR for every rank.
    #[arg(long, default_value = "127.0.0.1")]
    master_addr: String,
    /// MASTER_PORT for every rank (default: a free port).
    #[arg(long)]
    master_port: Option<u16>,
    /// Seconds the whole launch may take; 0 for no bound.
    #[arg(long, default_value_t = nccl_launch::DEFAULT_TIMEOUT.as_secs(), value_name = "SECS")]
    timeout: u64,
    /// Seconds the ranks get to exit after a forwarded SIGTERM or SIGINT
    /// before SIGKILL.
    #[arg(long, default_value_t = nccl_launch::DEFAULT_GRACE_PERIOD.as_secs(), value_name = "SECS")]
    grace_period: u64,
    /// The program to run as every rank.
    #[arg(required = true)]
    program: OsString,
    /// Its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Hosts {
    Auto,
    Gpus,
    Simulated,
}

impl From<Hosts> for Placement {
    fn from(hosts: Hosts) -> Self {
        match hosts {
            Hosts::Auto => Placement::Auto,
            Hosts::Gpus => Placement::Gpus,
            Hosts::Simulated => Placement::SimulatedHosts,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let launch = match Launch::new(cli.nproc) {
        Ok(launch) => launch,
        Err(error) => return usage_error(&error),
    };
    let mut launch = launch.placement(cli.hosts.into());
    if let Some(gpus) = visible_gpus() {
        launch = launch.visible_gpus(gpus);
    }
    launch = launch
        .master_addr(cli.master_addr)
        .timeout((cli.timeout > 0).then(|| Duration::from_secs(cli.timeout)))
        .forward_signals(true)
        .grace_period(Duration::from_secs(cli.grace_period));
    if let Some(port) = cli.master_port {
        launch = launch.master_port(port);
    }
    let job = match launch.spawn(&cli.program, &cli.args) {
        Ok(job) => job,
        Err(error) => return usage_error(&error),
    };
    let hosts = match job.placement() {
        Placement::SimulatedHosts => {
            "simulated hosts on GPU 0 (NCCL_HOSTID=simhost<rank>, sockets on loopback)"
        }
        _ => "one GPU per rank",
    };
    eprintln!(
        "nccl-launch: {} rank(s) of {}: {hosts}; MASTER_PORT={}",
        job.world_size(),
        cli.program.to_string_lossy(),
        job.master_port()
    );
    let outcome = job.wait(WaitPolicy::FailFast);
    let code = outcome.exit_code();
    if code == 0 {
        eprintln!(
            "nccl-launch: all {} rank(s) exited 0 in {:.1?}",
            outcome.ranks.len(),
            outcome.elapsed
        );
    } else {
        eprintln!(
            "nccl-launch: exit status {code} after {:.1?}",
            outcome.elapsed
        );
    }
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The GPUs the CUDA driver shows this process (0 without a driver), for
/// `--hosts auto`.
#[cfg(feature = "count-gpus")]
fn visible_gpus() -> Option<usize> {
    if !nccl_core::cuda_driver_available() {
        return Some(0);
    }
    Some(nccl_core::Device::count().unwrap_or(0))
}

/// Built without `count-gpus`, the command cannot count: `--hosts auto`
/// is refused, naming the choices, and `--hosts gpus` is taken on trust.
#[cfg(not(feature = "count-gpus"))]
fn visible_gpus() -> Option<usize> {
    None
}

fn usage_error(error: &nccl_launch::LaunchError) -> ExitCode {
    let mut line = format!("nccl-launch: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("{line}");
    ExitCode::from(2)
}
