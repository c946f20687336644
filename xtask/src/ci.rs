//! `cargo xtask ci [--skip-bindgen]`: every check CI runs, in order,
//! stopping at the first failure.
//!
//! 1. `cargo fmt --all -- --check`
//! 2. `cargo clippy --workspace --all-targets -- -D warnings`
//! 3. `cargo test --workspace`
//! 4. `cargo xtask bindgen --check` (in process; needs libclang and the
//!    pinned `nvidia-nccl-cu13` wheel, or `NCCL_INCLUDE_DIR`)
//! 5. `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`

use std::ffi::OsString;
use std::process::Command;

use crate::{Result, bindgen, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// Skip `cargo xtask bindgen --check` (for machines without libclang or
    /// the nvidia-nccl-cu13 wheel).
    #[arg(long)]
    skip_bindgen: bool,
}

/// What one step runs.
enum Action {
    /// `cargo` with these arguments and extra environment variables.
    Cargo {
        args: &'static [&'static str],
        env: Vec<(&'static str, OsString)>,
    },
    /// `cargo xtask bindgen --check`, called in this process.
    BindgenCheck,
}

struct Step {
    /// The command as a user would type it (printed as `==> name`).
    name: &'static str,
    action: Action,
}

pub fn run(args: Args) -> Result<()> {
    let mut steps = vec![
        Step {
            name: "cargo fmt --all -- --check",
            action: cargo(&["fmt", "--all", "--", "--check"]),
        },
        Step {
            name: "cargo clippy --workspace --all-targets -- -D warnings",
            action: cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        },
        Step {
            name: "cargo test --workspace",
            action: cargo(&["test", "--workspace"]),
        },
    ];
    if !args.skip_bindgen {
        steps.push(Step {
            name: "cargo xtask bindgen --check",
            action: Action::BindgenCheck,
        });
    }
    steps.push(Step {
        name: "RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps",
        action: Action::Cargo {
            args: &["doc", "--workspace", "--no-deps"],
            env: vec![("RUSTDOCFLAGS", rustdocflags())],
        },
    });

    let total = steps.len();
    for (index, step) in steps.into_iter().enumerate() {
        println!("==> {}", step.name);
        run_step(&step).map_err(|error| {
            format!(
                "ci step {}/{total} `{}` failed: {error}",
                index + 1,
                step.name
            )
        })?;
    }
    if args.skip_bindgen {
        println!("==> ci passed ({total} steps; `cargo xtask bindgen --check` skipped)");
    } else {
        println!("==> ci passed ({total} steps)");
    }
    Ok(())
}

fn cargo(args: &'static [&'static str]) -> Action {
    Action::Cargo { args, env: vec![] }
}

/// `-D warnings`, after any flags the caller already set.
fn rustdocflags() -> OsString {
    let mut flags = std::env::var_os("RUSTDOCFLAGS").unwrap_or_default();
    if !flags.is_empty() {
        flags.push(" ");
    }
    flags.push("-D warnings");
    flags
}

fn run_step(step: &Step) -> Result<()> {
    match &step.action {
        Action::BindgenCheck => bindgen::run(bindgen::Args { check: true }),
        Action::Cargo { args, env } => {
            // `cargo xtask` runs under cargo, which names itself in $CARGO.
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(&cargo)
                .args(*args)
                .envs(env.iter().map(|(key, value)| (key, value)))
                .current_dir(workspace_root())
                .status()
                .map_err(|e| format!("could not run {}: {e}", cargo.to_string_lossy()))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("exited with {status}").into())
            }
        }
    }
}
