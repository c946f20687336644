//! `cargo xtask`: the project's automation, one module per task.

mod bindgen;
mod ci;
#[cfg(test)]
mod doc_pages;
mod fuzz;
mod gpu_bundle;
mod host_profile;
mod launchers;
mod manifests;
mod nccl_tests_compare;
mod packaged;
mod public_api;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Parser, Subcommand};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Project automation for the NCCL workspace"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Regenerate nccl-sys's bindings from the pinned nccl.h (or --check them).
    Bindgen(bindgen::Args),
    /// Run every check CI runs: fmt, the MSRV and feature checks, clippy,
    /// tests, bindgen --check, docs, the consumer crates, the public-API
    /// check, cargo package and a consumer of the packages.
    Ci(ci::Args),
    /// Fuzz the TCP store's frame decoding or handshake with cargo-fuzz for a bounded
    /// time (needs `cargo install cargo-fuzz`; not part of ci).
    Fuzz(fuzz::Args),
    /// Build the GPU test and bench binaries (optimised, stripped) with a
    /// run.sh into target/gpu-bundle/ for the GPU machine.
    GpuBundle(gpu_bundle::Args),
    /// Run world-cost at world size 1 against a CUDA driver and an NCCL that do
    /// nothing (built with cc into target/host-profile/): each layer's own host
    /// code, on a machine without a GPU; --perf records it, --calls counts its
    /// driver and NCCL calls, --evict-kib has NCCL evict the caches each call,
    /// --gpu-behind-ms has the driver's GPU run behind.
    HostProfile(host_profile::Args),
    /// Start nccl-rendezvous's launch_check example under mpirun, srun and
    /// sbatch (a one-host Slurm cluster it starts and stops) and check that
    /// every rank agrees on the launch (CI runs it after `ci`).
    Launchers(launchers::Args),
    /// Set nccl-tests' and nccl-perf's JSON documents of one nccl-tests.sh run
    /// side by side: per operation and size, both times, their ratio and the target.
    NcclTestsCompare(nccl_tests_compare::Args),
    /// Write each publishable crate's public API to `api/<crate>.txt` (or
    /// --check it, or --count a type's inherent functions).
    PublicApi(public_api::Args),
}

/// The workspace root (the parent of this crate's folder).
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// Cargo (the one running `cargo xtask`, which names itself in $CARGO) as a
/// command in the workspace root, with its name for messages.
fn cargo_command() -> (OsString, Command) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command.current_dir(workspace_root());
    (cargo, command)
}

/// Runs cargo (as [`cargo_command`]) with `args` and the variables `env`.
///
/// # Errors
/// Cargo could not be started, or exited with a failure status.
fn run_cargo(args: &[OsString], env: &[(&'static str, OsString)]) -> Result<()> {
    let (cargo, mut command) = cargo_command();
    let status = command
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .status()
        .map_err(|e| format!("could not run {}: {e}", cargo.to_string_lossy()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("exited with {status}").into())
    }
}

/// Compiles the C file `source` with `cc` into the shared library
/// `library`, whose soname is `soname`.
///
/// # Errors
/// `cc` could not be started, or failed.
fn compile_shared_library(source: &Path, library: &Path, soname: &str) -> Result<()> {
    let status = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC"])
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-o")
        .arg(library)
        .arg(source)
        .status()
        .map_err(|e| format!("could not run cc to build {}: {e}", library.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cc` failed building {} ({status})", library.display()).into())
    }
}

/// The first `program` in `$PATH`, if any.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Bindgen(args) => bindgen::run(args),
        Task::Ci(args) => ci::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::GpuBundle(args) => gpu_bundle::run(args),
        Task::HostProfile(args) => host_profile::run(args),
        Task::Launchers(args) => launchers::run(args),
        Task::NcclTestsCompare(args) => nccl_tests_compare::run(args),
        Task::PublicApi(args) => public_api::run(args),
    };
    if let Err(error) = result {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}
