//! `heal-cost`: how long a group is down after it loses a rank, from the
//! rank's death to the survivors' first correct all_reduce, for one way of
//! going on:
//!
//! | mode | what the survivors do |
//! |---|---|
//! | `shrink` | [`ProcessGroup::heal`]: agree, shrink the revoked communicators (where NCCL can; else it re-creates) |
//! | `recreate` | `heal` with `HealOptions::with_shrink(false)`: agree, then fresh communicators under the new generation (torchft's way) |
//! | `full` | no agreement: drop the failed group and create a new one of the survivors under a new name, ranks known in advance (a restart of the group without the processes' start) |
//!
//! Run it as every rank: `nccl-launch -n 4 heal-cost --mode shrink`. The
//! last rank is lost after `--warmup` all_reduces, writing the time in
//! the launch folder (`NCCL_LAUNCH_DIR`: same host, same clock): with
//! `--fault exit` it exits (a death: NCCL's peers see its sockets close);
//! with `--fault stop` it stops itself (a hang: the survivors' operation
//! runs to `--op-timeout-ms`, and a heal can shrink), and rank 0
//! continues it once done, when it exits. The others run all_reduces of
//! 1024 f32 (each result read and checked) until one fails, go on as the
//! mode says, and time the first correct all_reduce. Rank 0 prints the phases in ms (`detect`: death to the
//! error; `heal`: the error to a new group; `first`: its first
//! all_reduce; `total`) and one JSON line, also appended to `--json FILE`.
//! Each launch measures one death: repeat launches for a spread.
//!
//! ```text
//! heal-cost --mode shrink|recreate|full [--fault exit|stop] [--tell] [--no-ras]
//!           [--warmup 20] [--op-timeout-ms 3000] [--json FILE]
//! ```

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use cudarc::driver::CudaStream;
use nccl_core::{Device, ReduceOp};
use nccl_group::store::{RendezvousConfig, Store};
use nccl_group::{GroupError, GroupOptions, HealOptions, ProcessGroup};
use nccl_tensor::Tensor;

const LEN: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Shrink,
    Recreate,
    Full,
}

/// How the last rank is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Fault {
    /// It exits between operations.
    Exit,
    /// It stops (SIGSTOP) between operations.
    Stop,
}

#[derive(Parser, Debug)]
#[command(about = "Time from a lost rank to the survivors' first correct all_reduce")]
struct Args {
    /// How the survivors go on.
    #[arg(long, value_enum)]
    mode: Mode,
    /// How the last rank is lost.
    #[arg(long, value_enum, default_value_t = Fault::Exit)]
    fault: Fault,
    /// The failure does not ask NCCL's RAS service for its view
    /// (`GroupOptions::with_ras_report(false)`), which waits up to about
    /// a second for a dead process.
    #[arg(long)]
    no_ras: bool,
    /// All_reduces before the last rank is lost.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// The group's operation timeout, in ms.
    #[arg(long, default_value_t = 3000)]
    op_timeout_ms: u64,
    /// The survivors are told who is lost (`HealOptions::with_suspects`,
    /// as a launcher that saw the exit would): the heal skips the
    /// failure's exchange of reports.
    #[arg(long)]
    tell: bool,
    /// Append rank 0's JSON line to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Microseconds since the Unix epoch: comparable across the processes of
/// one host.
fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// One all_reduce of `value` from every member, read back and checked
/// against `sum`.
fn all_reduce(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    value: f32,
    sum: f32,
) -> Result<(), GroupError> {
    let tensor = Tensor::from_host(stream, &vec![value; LEN], &[LEN])?;
    let tensor = group
        .all_reduce(tensor, ReduceOp::Sum, stream)
        .map_err(|refusal| refusal.error)?
        .wait()?;
    let got = tensor.to_vec(stream)?;
    if got.iter().all(|&v| v == sum) {
        Ok(())
    } else {
        Err(GroupError::InvalidArgument {
            argument: "all_reduce result",
            expected: sum.to_string(),
            given: format!("{:?}", &got[..4]),
        })
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let config = RendezvousConfig::from_env()?;
    let (rank, world) = (config.rank, config.world_size);
    if world < 2 {
        return Err(Box::new(GroupError::InvalidArgument {
            argument: "WORLD_SIZE",
            expected: "2 or more ranks (one of them is lost)".to_string(),
            given: world.to_string(),
        }));
    }
    let dir = std::env::var_os("NCCL_LAUNCH_DIR")
        .map(PathBuf::from)
        .ok_or_else(|| GroupError::InvalidArgument {
            argument: "NCCL_LAUNCH_DIR",
            expected: "the launch folder nccl-launch sets".to_string(),
            given: "nothing".to_string(),
        })?;
    let store: Arc<dyn Store> = Arc::from(config.connect()?);
    let options = GroupOptions::default()
        .with_timeout(Duration::from_secs(60))
        .with_op_timeout(Duration::from_millis(args.op_timeout_ms))
        .with_ras_report(!args.no_ras)
        .without_dump_dir();
    let address = config.store.to_string();
    let group = ProcessGroup::builder("heal-cost")
        .rank(rank)
        .world_size(world)
        .store(Arc::clone(&store))
        .store_address(address.clone())
        .options(options.clone())
        .build()?;
    let stream = Device::new(config.local_rank)?.new_stream()?;
    let mine = (rank + 1) as f32;
    let sum = (world * (world + 1) / 2) as f32;
    for _ in 0..args.warmup {
        all_reduce(&group, &stream, mine, sum)?;
    }
    let died_file = dir.join("heal-cost-died");
    let stopped_file = dir.join("heal-cost-stopped-pid");
    if rank == world - 1 {
        if args.fault == Fault::Stop {
            std::fs::write(&stopped_file, std::process::id().to_string())?;
        }
        std::fs::write(&died_file, now_us().to_string())?;
        if args.fault == Fault::Stop {
            signal(&std::process::id().to_string(), "-STOP")?;
        }
        std::process::exit(0);
    }
    while all_reduce(&group, &stream, mine, sum).is_ok() {}
    let failed = now_us();
    let survivors_sum = sum - world as f32;
    let (next, path) = match args.mode {
        Mode::Shrink | Mode::Recreate => {
            let healed = group.heal(
                &HealOptions::new()
                    .with_timeout(Duration::from_secs(60))
                    .with_shrink(args.mode == Mode::Shrink)
                    .with_suspects(if args.tell {
                        vec![world - 1]
                    } else {
                        Vec::new()
                    }),
            )?;
            let path = format!("{:?}", healed.path());
            (healed.into_group(), path)
        }
        Mode::Full => {
            drop(group);
            let next = ProcessGroup::builder("heal-cost-full")
                .rank(rank)
                .world_size(world - 1)
                .store(store)
                .store_address(address)
                .options(options)
                .build()?;
            (next, "a new group".to_string())
        }
    };
    let healed = now_us();
    all_reduce(&next, &stream, mine, survivors_sum)?;
    let first = now_us();
    let died: u128 = std::fs::read_to_string(&died_file)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(failed);
    let ms = |from: u128, to: u128| to.saturating_sub(from) as f64 / 1000.0;
    if rank == 0 {
        let nccl = nccl_core::version().map_or_else(|e| e.to_string(), |v| v.to_string());
        let line = serde_json::json!({
            "tool": "heal-cost",
            "mode": format!("{:?}", args.mode).to_lowercase(),
            "told": args.tell,
            "fault": format!("{:?}", args.fault).to_lowercase(),
            "ras": !args.no_ras,
            "world": world,
            "nccl": nccl,
            "detect_ms": ms(died, failed),
            "heal_ms": ms(failed, healed),
            "first_ms": ms(healed, first),
            "total_ms": ms(died, first),
            "path": path,
        });
        println!(
            "heal-cost {:?} after {:?} world {world} -> {} (NCCL {nccl}): detect {:.1} ms, heal {:.1} ms, first all_reduce {:.1} ms, total {:.1} ms",
            args.mode,
            args.fault,
            world - 1,
            ms(died, failed),
            ms(failed, healed),
            ms(healed, first),
            ms(died, first)
        );
        println!("heal-cost path: {path}");
        println!("{line}");
        if let Some(path) = &args.json {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            writeln!(file, "{line}")?;
        }
    }
    next.destroy()?;
    if rank == 0 && args.fault == Fault::Stop {
        signal(std::fs::read_to_string(&stopped_file)?.trim(), "-CONT")?;
    }
    Ok(())
}

/// Sends `signal` (`-STOP`, `-CONT`) to process `pid` with kill(1).
fn signal(pid: &str, signal: &str) -> Result<(), Box<dyn std::error::Error>> {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill {signal} {pid}: {status}").into())
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "heal-cost: error: {error}");
            ExitCode::FAILURE
        }
    }
}
