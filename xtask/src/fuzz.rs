//! `cargo xtask fuzz [--target NAME] [--seconds N]`: run a cargo-fuzz target
//! of `fuzz/` at the workspace root for a bounded time: `store_frame` (the
//! TCP store's frame reader and decoders, the default) or `store_handshake`
//! (both sides of its handshake).
//!
//! It runs `cargo fuzz run NAME -- -max_total_time=N` with a nightly
//! toolchain when rustup has one, and otherwise on this toolchain with
//! `RUSTC_BOOTSTRAP=1` (cargo-fuzz needs unstable compiler flags). It needs
//! cargo-fuzz (`cargo install cargo-fuzz`) and is not part of `cargo xtask
//! ci`: CI machines have neither a nightly toolchain nor cargo-fuzz, and the
//! CPU tests `frame_decoding_survives_200k_random_truncated_and_mutated_inputs`
//! and `handshake_fuzzing_never_authenticates_without_the_secret` run the
//! same entry points there. A failing input is saved under
//! `fuzz/artifacts/NAME/`.

use std::ffi::OsString;
use std::process::{Command, Stdio};

use crate::{Result, workspace_root};

/// The fuzz targets of `fuzz/`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Target {
    /// The TCP store's frame reader and decoders.
    #[value(name = "store_frame")]
    StoreFrame,
    /// Both sides of the TCP store's handshake.
    #[value(name = "store_handshake")]
    StoreHandshake,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::StoreFrame => "store_frame",
            Target::StoreHandshake => "store_handshake",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Which fuzz target to run.
    #[arg(long, value_enum, default_value_t = Target::StoreFrame)]
    target: Target,
    /// How long to fuzz, in seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
}

/// How cargo-fuzz gets the unstable compiler flags it needs.
#[derive(Debug, PartialEq, Eq)]
enum Toolchain {
    /// `rustup run <name> cargo ...`
    Nightly(String),
    /// This toolchain's cargo with `RUSTC_BOOTSTRAP=1`.
    Bootstrap,
}

pub fn run(args: Args) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    require_cargo_fuzz(&cargo)?;
    let toolchain = installed_toolchains()
        .and_then(|list| nightly_toolchain(&list))
        .map_or(Toolchain::Bootstrap, Toolchain::Nightly);
    let target = args.target.name();
    let fuzz_args = [
        "fuzz".to_owned(),
        "run".to_owned(),
        target.to_owned(),
        "--".to_owned(),
        format!("-max_total_time={}", args.seconds),
    ];
    let mut command = match &toolchain {
        Toolchain::Nightly(name) => {
            println!("==> rustup run {name} cargo {}", fuzz_args.join(" "));
            let mut command = Command::new("rustup");
            command.args(["run", name, "cargo"]);
            command
        }
        Toolchain::Bootstrap => {
            println!(
                "==> RUSTC_BOOTSTRAP=1 cargo {} (no nightly toolchain found by `rustup toolchain list`)",
                fuzz_args.join(" ")
            );
            let mut command = Command::new(&cargo);
            command.env("RUSTC_BOOTSTRAP", "1");
            command
        }
    };
    let status = command
        .args(&fuzz_args)
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("could not run cargo fuzz: {e}"))?;
    if status.success() {
        println!(
            "==> fuzzed {target} for {} s: no failing input",
            args.seconds
        );
        Ok(())
    } else {
        Err(format!(
            "cargo fuzz exited with {status}; a failing input, if it found one, is in \
             fuzz/artifacts/{target}/ (replay it with `cargo fuzz run {target} <file>`)"
        )
        .into())
    }
}

/// Fails with the install command when `cargo fuzz` is not available.
fn require_cargo_fuzz(cargo: &OsString) -> Result<()> {
    let probe = Command::new(cargo)
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match probe {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!(
            "cargo-fuzz is not installed (`cargo fuzz --version` exited with {status}); install \
             it with `cargo install cargo-fuzz`, then run `cargo xtask fuzz` again"
        )
        .into()),
        Err(e) => Err(format!(
            "could not run {} to look for cargo-fuzz: {e}",
            cargo.to_string_lossy()
        )
        .into()),
    }
}

/// `rustup toolchain list`, or `None` without rustup.
fn installed_toolchains() -> Option<String> {
    let output = Command::new("rustup")
        .args(["toolchain", "list"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The first nightly toolchain in `rustup toolchain list` output, by its
/// full name (e.g. `nightly-x86_64-unknown-linux-gnu`).
fn nightly_toolchain(list: &str) -> Option<String> {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .find(|name| name.starts_with("nightly"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::nightly_toolchain;

    #[test]
    fn finds_a_nightly_toolchain_by_its_full_name() {
        let list = "stable-x86_64-unknown-linux-gnu (active, default)\n\
                    nightly-2026-01-05-x86_64-unknown-linux-gnu\n\
                    1.95.0-x86_64-unknown-linux-gnu\n";
        assert_eq!(
            nightly_toolchain(list).as_deref(),
            Some("nightly-2026-01-05-x86_64-unknown-linux-gnu")
        );
        assert_eq!(
            nightly_toolchain("stable-x86_64-unknown-linux-gnu (default)\n"),
            None
        );
        assert_eq!(nightly_toolchain(""), None);
    }
}
