//! `cargo xtask host-profile [--perf] [--calls] [--evict-kib N] [--gpu-behind-ms N]
//! [-- WORLD_COST_ARGS]`: the host code of an operation, on a machine without a GPU.
//!
//! Builds a CUDA driver and an NCCL that do nothing ([`FAKE_CUDA`],
//! [`FAKE_NCCL`]: every call succeeds at once, "device" memory is host
//! memory) into `target/host-profile/`, then runs the benches' `world-cost`
//! at world size 1 against them: every layer's own host code with the
//! driver's and NCCL's costs taken out, which is what a change to the issue
//! path moves. With `--perf`, under `perf record --call-graph dwarf`
//! (`perf report -i target/host-profile/perf.data` reads it). With
//! `--calls`, the fakes count the calls of each of their functions
//! ([`COUNTS_H`]) and the counts are printed after the run: the driver and
//! NCCL calls each layer makes per operation. With `--evict-kib N`, each
//! of the fake NCCL's collectives writes N KiB of its own first, to evict
//! the caller's data from the caches as a real NCCL's enqueue is assumed
//! to at world size 2 and more: each layer then pays for the cache lines
//! it touches per operation. With `--gpu-behind-ms N` the fake driver's
//! "GPU" runs N ms behind: an event is complete only after a synchronize,
//! which first sleeps N ms, so each of world-cost's rounds runs with its
//! operations pending after a wait, as at world size 2 and more on one
//! shared GPU. The figures are this machine's; the
//! GPU machine's `world-cost` adds the driver's calls (an event record, a
//! capture query) and NCCL's to them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, compile_shared_library, on_path, run_cargo, workspace_root};

/// The fake driver's source: the functions the issue path calls.
const FAKE_CUDA: &str = include_str!("host_profile/fake_cuda.c");
/// The fake NCCL's source.
const FAKE_NCCL: &str = include_str!("host_profile/fake_nccl.c");
/// The call counting both fakes include (`--calls`).
const COUNTS_H: &str = include_str!("host_profile/counts.h");

/// Where the libraries, the bench's build and perf's data go.
const OUT_DIR: &str = "target/host-profile";

#[derive(clap::Args)]
pub struct Args {
    /// Record the run with `perf record --call-graph dwarf` (perf must be on the PATH).
    #[arg(long)]
    perf: bool,

    /// Count the fake driver's and NCCL's calls, function by function, and print the counts
    /// after the run (give one layer to read them as calls per operation).
    #[arg(long)]
    calls: bool,

    /// KiB the fake NCCL writes in each collective, to evict the caller's data from the caches
    /// as a real NCCL's enqueue is assumed to (0: none; at most 1048576, 1 GiB).
    #[arg(
        long,
        value_name = "KIB",
        default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=MAX_EVICT_KIB)
    )]
    evict_kib: u32,

    /// Milliseconds the fake driver's "GPU" runs behind: each synchronize sleeps that long, and
    /// an event is complete only after a synchronize (0: none, every event complete at once; at
    /// most 10000).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=MAX_BEHIND_MS)
    )]
    gpu_behind_ms: u32,

    /// Arguments for world-cost (default: every layer, 7 rounds of 3000 calls).
    #[arg(last = true, value_name = "WORLD_COST_ARGS")]
    world_cost_args: Vec<OsString>,
}

/// The most `--evict-kib` takes: 1 GiB, more than any cache.
const MAX_EVICT_KIB: i64 = 1 << 20;

/// The most `--gpu-behind-ms` takes: 10 s.
const MAX_BEHIND_MS: i64 = 10_000;

/// world-cost's arguments when none are given: enough calls per round
/// that a round is milliseconds, not microseconds.
const DEFAULT_ARGS: [&str; 6] = ["--iters", "3000", "--rounds", "7", "--warmup", "300"];

/// The arguments world-cost gets: `given`, or [`DEFAULT_ARGS`].
fn world_cost_args(given: &[OsString]) -> Vec<OsString> {
    if given.is_empty() {
        DEFAULT_ARGS.iter().map(OsString::from).collect()
    } else {
        given.to_vec()
    }
}

/// The fake driver and NCCL built into `out`, with the `counts.h` both
/// include beside them: `(libcuda.so.1, libnccl.so.2)`.
fn build_fakes(out: &Path) -> Result<(PathBuf, PathBuf)> {
    std::fs::write(out.join("counts.h"), COUNTS_H)?;
    let build = |name: &str, source: &str| -> Result<PathBuf> {
        let source_path = out.join(format!("{name}.c"));
        std::fs::write(&source_path, source)?;
        let library = out.join(name);
        compile_shared_library(&source_path, &library, name)?;
        Ok(library)
    };
    Ok((
        build("libcuda.so.1", FAKE_CUDA)?,
        build("libnccl.so.2", FAKE_NCCL)?,
    ))
}

pub fn run(args: Args) -> Result<()> {
    let root = workspace_root();
    let out = root.join(OUT_DIR);
    std::fs::create_dir_all(&out)?;
    let (cuda, nccl) = build_fakes(&out)?;
    // cudarc looks for `libcuda.so` first.
    let link = out.join("libcuda.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&cuda, &link)?;
    let target_dir = out.join("build");
    let mut build: Vec<OsString> = ["build", "--release", "-p", "benches", "--bin", "world-cost"]
        .map(OsString::from)
        .to_vec();
    build.extend(["--target-dir".into(), target_dir.clone().into()]);
    // Line tables only: perf places samples by source line; the code is
    // release's.
    run_cargo(
        &build,
        &[("CARGO_PROFILE_RELEASE_DEBUG", "line-tables-only".into())],
    )
    .map_err(|e| format!("building world-cost failed: {e}"))?;
    let bench = target_dir.join("release/world-cost");
    let mut command = if args.perf {
        let perf = on_path("perf").ok_or("--perf: perf is not on the PATH")?;
        let mut command = Command::new(perf);
        command
            .args(["record", "--call-graph", "dwarf,16384", "-F", "2000", "-o"])
            .arg(out.join("perf.data"))
            .arg(&bench);
        command
    } else {
        Command::new(&bench)
    };
    command
        .args(world_cost_args(&args.world_cost_args))
        .env("LD_LIBRARY_PATH", &out)
        .env("NCCL_LIBRARY", &nccl)
        .env("HOST_PROFILE_EVICT_KIB", args.evict_kib.to_string())
        .env("HOST_PROFILE_GPU_BEHIND_MS", args.gpu_behind_ms.to_string())
        .current_dir(&root);
    let counts = out.join("calls");
    if args.calls {
        let _ = std::fs::remove_dir_all(&counts);
        std::fs::create_dir_all(&counts)?;
        command.env("HOST_PROFILE_CALLS", &counts);
    }
    println!(
        "==> world-cost on the do-nothing driver and NCCL of {} ({} KiB evicted per collective, \
         the GPU {} ms behind)",
        out.display(),
        args.evict_kib,
        args.gpu_behind_ms
    );
    let status = command
        .status()
        .map_err(|e| format!("could not run {}: {e}", bench.display()))?;
    if args.perf {
        println!(
            "==> perf report -i {} --no-children --sort sym",
            out.join("perf.data").display()
        );
    }
    if args.calls {
        print_counts(&counts)?;
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("world-cost exited with {status}").into())
    }
}

/// Prints the counts the fakes wrote to `folder` (`--calls`), most called
/// first, per library.
fn print_counts(folder: &Path) -> Result<()> {
    for library in ["libcuda", "libnccl"] {
        let path = folder.join(format!("{library}.txt"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("--calls: no counts in {}: {e}", path.display()))?;
        println!("==> {library}: calls over the whole run (warm-up and set-up included)");
        for (name, calls) in sorted_counts(&text)? {
            println!("  {calls:>12}  {name}");
        }
    }
    Ok(())
}

/// The "name count" lines of a fake's counts, most called first.
fn sorted_counts(text: &str) -> Result<Vec<(&str, u64)>> {
    let mut counts = text
        .lines()
        .map(|line| {
            let parse = || {
                let (name, calls) = line.split_once(' ')?;
                Some((name, calls.parse::<u64>().ok()?))
            };
            parse().ok_or_else(|| format!("--calls: expected `name count`, got `{line}`"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_cost_gets_the_defaults_only_when_given_nothing() {
        assert_eq!(world_cost_args(&[]), DEFAULT_ARGS.map(OsString::from));
        let given = [OsString::from("--layers"), OsString::from("tensor")];
        assert_eq!(world_cost_args(&given), given);
    }

    /// `Args` as the command line gives it.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn the_eviction_and_the_delay_are_off_by_default_and_bounded() {
        use clap::Parser;
        let parse = |given: &[&str]| Cli::try_parse_from([&["host-profile"], given].concat());
        let defaults = parse(&[]).unwrap().args;
        assert_eq!((defaults.evict_kib, defaults.gpu_behind_ms), (0, 0));
        // Each option's largest value is taken; one past it is refused, naming both.
        type Read = fn(&Args) -> u32;
        let options: [(&str, i64, Read); 2] = [
            ("--evict-kib", MAX_EVICT_KIB, |args| args.evict_kib),
            ("--gpu-behind-ms", MAX_BEHIND_MS, |args| args.gpu_behind_ms),
        ];
        for (option, most, read) in options {
            assert_eq!(
                i64::from(read(&parse(&[option, &most.to_string()]).unwrap().args)),
                most
            );
            let past = (most + 1).to_string();
            let Err(error) = parse(&[option, &past]) else {
                panic!("{option} {past} was taken");
            };
            let error = error.to_string();
            assert!(error.contains(&past) && error.contains(option), "{error}");
        }
    }

    #[test]
    fn counts_come_most_called_first_and_a_bad_line_is_named() {
        let counts =
            sorted_counts("cuInit 1\ncuEventRecord 300\ncuStreamIsCapturing 300\n").unwrap();
        assert_eq!(
            counts,
            [
                ("cuEventRecord", 300),
                ("cuStreamIsCapturing", 300),
                ("cuInit", 1)
            ]
        );
        let error = sorted_counts("cuInit one").unwrap_err().to_string();
        assert!(error.contains("`cuInit one`"), "{error}");
    }

    #[test]
    fn the_fakes_compile_into_libraries() {
        let out = std::env::temp_dir().join(format!("xtask-host-profile-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let (cuda, nccl) = build_fakes(&out).unwrap();
        for library in [cuda, nccl] {
            assert!(
                std::fs::metadata(&library).unwrap().len() > 0,
                "{}",
                library.display()
            );
        }
        std::fs::remove_dir_all(&out).unwrap();
    }
}
