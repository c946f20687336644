//! `nccl-launch`: start N ranks of a program on this host the torchrun way
//! (see the crate docs), restart them on a failure when asked, and exit
//! with the last attempt's status.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};
use nccl_launch::{Job, Launch, Placement, Streams, WaitPolicy};

/// Start N ranks of PROGRAM on this host, as torchrun does: RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and
/// TORCHELASTIC_RESTART_COUNT are set for each.
///
/// With a GPU per rank, rank r uses GPU r; with fewer, every rank runs on GPU 0
/// as a simulated host of its own (NCCL_HOSTID, sockets on loopback), which
/// tests world size N on one GPU (host cost and results only: its GPU time and
/// bandwidth mean nothing). PROGRAM runs itself, as under torchrun --no-python:
/// give `python3 train.py` for a script.
///
/// Each output line is prefixed with its rank (or goes to files under
/// --log-dir). The first rank to fail ends the others (SIGKILL, each by its
/// PID); with --max-restarts N every rank is then started again, up to N
/// times, with the next TORCHELASTIC_RESTART_COUNT. The launcher's status
/// is the last attempt's: its first failure's (128 + N for signal N), 124
/// past --timeout (none unless given, as torchrun), 2 when it cannot
/// start.
///
/// SIGTERM and SIGINT are forwarded to every rank (each runs in a process
/// group of its own); ranks still running --grace-period seconds later, or
/// at a second signal, are ended with SIGKILL, and the status is 128 + the
/// signal (no restart follows). Each rank gets SIGKILL if the launcher
/// dies, so none outlives it.
#[derive(Parser, Debug)]
#[command(name = "nccl-launch", version)]
struct Cli {
    /// Number of ranks (processes).
    #[arg(
        short = 'n',
        long = "nproc",
        visible_alias = "nproc-per-node",
        alias = "nproc_per_node",
        value_name = "N",
        value_parser = parse_ranks
    )]
    nproc: usize,
    /// Where the ranks run: a GPU each (`gpus`), all on GPU 0 as simulated
    /// hosts (`simulated`), or `auto`: `gpus` when there is a GPU per rank.
    #[arg(long, value_enum, default_value_t = Hosts::Auto)]
    hosts: Hosts,
    /// MASTER_ADDR for every rank.
    #[arg(long, alias = "master_addr", default_value = "127.0.0.1")]
    master_addr: String,
    /// MASTER_PORT for every rank (default: a free port, a fresh one for
    /// each restart).
    #[arg(long, alias = "master_port")]
    master_port: Option<u16>,
    /// Restarts of every rank after a rank fails (torchrun's).
    #[arg(
        long,
        alias = "max_restarts",
        value_name = "N",
        default_value_t = 0,
        value_parser = parse_restarts,
        allow_hyphen_values = true
    )]
    max_restarts: usize,
    /// A rank that fails does not end the others: for elastic programs
    /// whose survivors go on without it (`nccl-perf --inject`). The launch
    /// still fails, and restarts, once every rank has ended.
    #[arg(long, alias = "keep_going")]
    keep_going: bool,
    /// Write each rank's output to DIR/run_<k>/attempt_<n>/<rank>/stdout.log
    /// and stderr.log (run_<k>: a fresh folder for each launch; n: the
    /// restart count), instead of the console.
    #[arg(long, alias = "log_dir", value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// With --log-dir, the streams also shown on the console: 0 neither
    /// (the default), 1 stdout, 2 stderr, 3 both (torchrun's).
    #[arg(short = 't', long, value_name = "STREAMS", requires = "log_dir")]
    tee: Option<Streams>,
    /// Seconds the whole launch may take, every restart together; 0 or
    /// unset for no bound.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Seconds the ranks get to exit after a forwarded SIGTERM or SIGINT
    /// before SIGKILL.
    #[arg(
        long,
        alias = "grace_period",
        default_value_t = nccl_launch::DEFAULT_GRACE_PERIOD.as_secs(),
        value_name = "SECS"
    )]
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

/// What nccl-launch does with one of torchrun's flags that has no setting
/// of its own.
enum Support {
    /// Taken, and it changes nothing: what nccl-launch always does.
    Always,
    /// Taken with one of these values (what nccl-launch always does),
    /// refused with any other.
    Only(&'static [&'static str]),
    /// Refused.
    Not,
}

/// One of torchrun's flags that has no setting of its own here.
struct TorchrunFlag {
    long: &'static str,
    short: Option<char>,
    takes_value: bool,
    support: Support,
    /// Why, or what to use instead.
    note: &'static str,
}

impl TorchrunFlag {
    const fn new(
        long: &'static str,
        short: Option<char>,
        takes_value: bool,
        support: Support,
        note: &'static str,
    ) -> Self {
        Self {
            long,
            short,
            takes_value,
            support,
            note,
        }
    }
}

/// Why torchrun's rendezvous flags are refused.
const STATIC_RENDEZVOUS: &str = "the ranks meet at --master-addr:--master-port";

/// torchrun's flags (torch 2.x) beyond those of [`Cli`]: taken for command
/// lines written for torchrun, or refused with the reason.
///
/// Columns: the long name, the short one, whether it takes a value, what
/// nccl-launch does with it, and why.
#[rustfmt::skip]
const TORCHRUN_FLAGS: [TorchrunFlag; 20] = {
    use Support::{Always, Not, Only};
    [
        TorchrunFlag::new("standalone", None, false, Always, "every launch is standalone, on this host"),
        TorchrunFlag::new("no-python", None, false, Always, "PROGRAM always runs itself"),
        TorchrunFlag::new("nnodes", None, true, Only(&["1", "1:1"]), "nccl-launch runs on one host"),
        TorchrunFlag::new("node-rank", None, true, Only(&["0"]), "nccl-launch runs on one host"),
        TorchrunFlag::new("rdzv-backend", None, true, Not, STATIC_RENDEZVOUS),
        TorchrunFlag::new("rdzv-endpoint", None, true, Not, STATIC_RENDEZVOUS),
        TorchrunFlag::new("rdzv-id", None, true, Not, STATIC_RENDEZVOUS),
        TorchrunFlag::new("rdzv-conf", None, true, Not, STATIC_RENDEZVOUS),
        TorchrunFlag::new("monitor-interval", None, true, Not, "the ranks are watched every 5 ms"),
        TorchrunFlag::new("start-method", None, true, Not, "every rank is a process of its own"),
        TorchrunFlag::new("event-log-handler", None, true, Not, "the launcher's events go to its stderr"),
        TorchrunFlag::new("role", None, true, Not, "every rank has the one role"),
        TorchrunFlag::new("module", Some('m'), false, Not, "give `python3 -m MODULE` as PROGRAM"),
        TorchrunFlag::new("run-path", None, false, Not, "give `python3 SCRIPT` as PROGRAM"),
        TorchrunFlag::new("redirects", Some('r'), true, Not, "--log-dir takes both streams, --tee shows some"),
        TorchrunFlag::new("local-ranks-filter", None, true, Not, "every rank's output is shown or logged"),
        TorchrunFlag::new("local-addr", None, true, Not, "the ranks use MASTER_ADDR"),
        TorchrunFlag::new("logs-specs", None, true, Not, "the log layout is --log-dir's"),
        TorchrunFlag::new("numa-binding", None, true, Not, "bind in PROGRAM, or run it under numactl"),
        TorchrunFlag::new("signals-to-handle", None, true, Not, "SIGTERM and SIGINT are forwarded"),
    ]
};

/// The id of a torchrun flag's argument: its name, not a field of [`Cli`].
fn flag_id(flag: &TorchrunFlag) -> String {
    format!("torchrun-{}", flag.long)
}

/// `--help`'s section on torchrun's flags, from [`TORCHRUN_FLAGS`].
fn torchrun_help() -> String {
    let list = |wanted: fn(&Support) -> bool| {
        TORCHRUN_FLAGS
            .iter()
            .filter(|flag| wanted(&flag.support))
            .map(|flag| {
                let short = flag.short.map(|c| format!("-{c}, ")).unwrap_or_default();
                let value = match flag.support {
                    Support::Only(values) => format!(" {}", values.join("|")),
                    _ => String::new(),
                };
                format!("    {short}--{}{value}: {}", flag.long, flag.note)
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "torchrun's flags:\n  \
         Every flag above also takes torchrun's underscore spelling (--nproc_per_node=2, \
         --master_port, --max_restarts, --log_dir).\n  \
         Taken for torchrun's command lines, changing nothing (what nccl-launch always does):\n\
         {}\n  \
         Not supported (refused, naming the flag):\n{}",
        list(|support| !matches!(support, Support::Not)),
        list(|support| matches!(support, Support::Not)),
    )
}

/// The command line: [`Cli`] and torchrun's flags of [`TORCHRUN_FLAGS`]
/// (hidden; `--help` lists them in a section of their own).
fn command() -> clap::Command {
    let mut command = Cli::command().after_help(torchrun_help());
    for flag in &TORCHRUN_FLAGS {
        let mut arg = Arg::new(flag_id(flag))
            .long(flag.long)
            .alias(flag.long.replace('-', "_"))
            .hide(true);
        if let Some(short) = flag.short {
            arg = arg.short(short);
        }
        arg = if flag.takes_value {
            arg.action(ArgAction::Set).allow_hyphen_values(true)
        } else {
            arg.action(ArgAction::SetTrue)
        };
        command = command.arg(arg);
    }
    command
}

/// Refuses the torchrun flags given that nccl-launch does not take, or
/// takes with other values only.
fn check_torchrun_flags(matches: &ArgMatches) -> Result<(), String> {
    for flag in &TORCHRUN_FLAGS {
        let id = flag_id(flag);
        let given = if flag.takes_value {
            matches.get_one::<String>(&id).cloned()
        } else {
            matches.get_flag(&id).then(String::new)
        };
        let Some(value) = given else { continue };
        match flag.support {
            Support::Always => {}
            Support::Only(values) if values.contains(&value.trim()) => {}
            Support::Only(values) => {
                return Err(format!(
                    "invalid --{}: expected {} ({}), got {value:?}",
                    flag.long,
                    values.join(" or "),
                    flag.note
                ));
            }
            Support::Not => {
                return Err(format!(
                    "torchrun's --{} is not supported by nccl-launch: {} (see --help)",
                    flag.long, flag.note
                ));
            }
        }
    }
    Ok(())
}

/// `-n`'s value: a number of ranks (torchrun's `gpu`, `auto`, `cpu` and
/// `xpu` are named as unsupported).
fn parse_ranks(value: &str) -> Result<usize, String> {
    value.trim().parse().map_err(|_| {
        format!(
            "expected a number of ranks, got {value:?} (torchrun's `auto`, `gpu`, `cpu` and \
             `xpu` are not supported: give the number)"
        )
    })
}

/// `--max-restarts`' value: a count of 0 or more.
fn parse_restarts(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of restarts, 0 or more, got {value:?}"))
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    if let Err(message) = check_torchrun_flags(&matches) {
        eprintln!("nccl-launch: {message}");
        return ExitCode::from(2);
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let launch = match Launch::new(cli.nproc) {
        Ok(launch) => launch,
        Err(error) => return usage_error(&error),
    };
    let mut launch = launch.with_placement(cli.hosts.into());
    if let Some(gpus) = visible_gpus() {
        launch = launch.with_visible_gpus(gpus);
    }
    launch = launch
        .with_master_addr(cli.master_addr)
        .with_timeout(
            cli.timeout
                .filter(|&secs| secs > 0)
                .map(Duration::from_secs),
        )
        .with_max_restarts(cli.max_restarts)
        .with_wait_policy(if cli.keep_going {
            WaitPolicy::All
        } else {
            WaitPolicy::FailFast
        })
        .with_forward_signals(true)
        .with_grace_period(Duration::from_secs(cli.grace_period));
    if let Some(port) = cli.master_port {
        launch = launch.with_master_port(port);
    }
    if let Some(dir) = cli.log_dir {
        launch = launch.with_log_dir(dir, cli.tee.unwrap_or_default());
    }
    let outcome = match launch.run(&cli.program, &cli.args, |job| announce(job, &cli.program)) {
        Ok(outcome) => outcome,
        Err(error) => return usage_error(&error),
    };
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

/// Says where an attempt's ranks run.
fn announce(job: &Job, program: &OsString) {
    let hosts = match job.placement() {
        Placement::SimulatedHosts => {
            "simulated hosts on GPU 0 (NCCL_HOSTID=simhost<rank>, sockets on loopback)"
        }
        _ => "one GPU per rank",
    };
    let restart = match job.restart_count() {
        0 => String::new(),
        count => format!(" (restart {count})"),
    };
    let logs = job
        .log_dir()
        .map(|dir| format!("; output in {}", dir.display()))
        .unwrap_or_default();
    eprintln!(
        "nccl-launch: {} rank(s) of {}{restart}: {hosts}; MASTER_PORT={}{logs}",
        job.world_size(),
        program.to_string_lossy(),
        job.master_port()
    );
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
