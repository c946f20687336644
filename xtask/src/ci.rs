//! `cargo xtask ci [--skip-bindgen]`: every check CI runs, in order,
//! stopping at the first failure.
//!
//! 1. `cargo fmt --all -- --check`
//! 2. `cargo clippy --workspace --all-targets -- -D warnings`
//! 3. `cargo test --workspace`
//! 4. `cargo xtask bindgen --check` (in process; needs libclang and the
//!    pinned `nvidia-nccl-cu13` wheel, or `NCCL_INCLUDE_DIR`)
//! 5. `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`
//!
//! Fuzzing is not a step: it needs cargo-fuzz and a nightly toolchain (or
//! `RUSTC_BOOTSTRAP`). Run `cargo xtask fuzz [--seconds N]` by hand; CI runs
//! the fuzz target's entry point over 200k seeded inputs in `cargo test`.

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
    /// `cargo test` with these arguments, its libtest summaries added up.
    CargoTest { args: &'static [&'static str] },
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
            action: Action::CargoTest {
                args: &["test", "--workspace"],
            },
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
    let mut tests = TestTotals::default();
    for (index, step) in steps.into_iter().enumerate() {
        println!("==> {}", step.name);
        run_step(&step, &mut tests).map_err(|error| {
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
    // One closing line for the whole workspace: cargo's own output ends on
    // the last crate's doc tests, which may be none.
    println!(
        "ci: {} passed, {} failed, {} skipped",
        tests.passed, tests.failed, tests.ignored
    );
    Ok(())
}

/// The libtest summaries of one `cargo test` run, added up.
#[derive(Default, Debug, PartialEq, Eq)]
struct TestTotals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestTotals {
    /// Adds a `test result: ok. 3 passed; 0 failed; 1 ignored; ...` line.
    fn add_summary(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(label), Some(count)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            match label {
                "passed" => self.passed += count,
                "failed" => self.failed += count,
                "ignored" => self.ignored += count,
                _ => {}
            }
        }
    }
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

fn cargo_command() -> (OsString, Command) {
    // `cargo xtask` runs under cargo, which names itself in $CARGO.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command.current_dir(workspace_root());
    (cargo, command)
}

fn run_step(step: &Step, tests: &mut TestTotals) -> Result<()> {
    match &step.action {
        Action::BindgenCheck => bindgen::run(bindgen::Args { check: true }),
        Action::CargoTest { args } => {
            use std::io::BufRead;
            let (cargo, mut command) = cargo_command();
            let mut child = command
                .args(*args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("could not run {}: {e}", cargo.to_string_lossy()))?;
            let stdout = child.stdout.take().ok_or("cargo test has no stdout")?;
            for line in std::io::BufReader::new(stdout).lines() {
                let line = line?;
                println!("{line}");
                tests.add_summary(&line);
            }
            let status = child.wait()?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("exited with {status}").into())
            }
        }
        Action::Cargo { args, env } => {
            let (cargo, mut command) = cargo_command();
            let status = command
                .args(*args)
                .envs(env.iter().map(|(key, value)| (key, value)))
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

#[cfg(test)]
mod tests {
    use super::TestTotals;

    #[test]
    fn libtest_summaries_add_up() {
        let mut totals = TestTotals::default();
        totals.add_summary("test result: ok. 14 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.15s");
        totals.add_summary(
            "test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        totals.add_summary("running 3 tests");
        assert_eq!(
            totals,
            TestTotals {
                passed: 16,
                failed: 3,
                ignored: 1
            }
        );
    }
}
