//! `cargo xtask ci [--skip-bindgen] [--only TEXT]`: every check CI runs,
//! in order, stopping at the first failure.
//!
//! 1. `cargo fmt --all -- --check`
//! 2. the manifest checks (in process, over `cargo metadata`): no locked
//!    dependency needs a newer Rust than the workspace's `rust-version`,
//!    every publishable crate over cudarc forwards cudarc's CUDA
//!    versions and linking modes, and every publishable crate has the
//!    fields of its registry page (description, license, repository,
//!    homepage, its docs.rs page as documentation)
//! 3. `cargo clippy --workspace --all-targets -- -D warnings`
//! 4. the same for the crates with a `tracing` feature, with it on (off,
//!    its macros expand to nothing, so step 3 never compiles the events),
//!    and nccl-group's other optional features (`async`, `metrics`, `nvtx`)
//!    on
//! 5. `cargo test --workspace` (the README's code blocks are nccl-group's
//!    doctests; with `NCCL_SYS_TEST_REAL_LIBRARY` and
//!    `NCCL_SYS_TEST_OLD_LIBRARY`, which `.ci/run` sets, nccl-sys and
//!    nccl-core also check the pinned and an older real libnccl), then
//!    nccl-group's unit tests with its optional features on
//! 6. `cargo xtask bindgen --check` (in process; needs libclang and the
//!    pinned `nvidia-nccl-cu13` wheel, or `NCCL_INCLUDE_DIR`)
//! 7. `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`
//! 8. `cargo check --all-targets` of each consumer crate in
//!    `xtask/consumers/` (outside the workspace, each picking cudarc's
//!    features its own way; one, `candle-like`, reduces memory it owns as
//!    candle does through the group's borrowed-memory operations, and its
//!    GPU test runs in the GPU bundle; another, `anyhow-like`, uses `?` on
//!    operations in `anyhow::Result` functions; another, `analysis-only`,
//!    reads dumps with nccl-group's `analysis` alone and no CUDA), in the
//!    workspace's target folder
//! 9. `cargo xtask public-api --check` (in process): each publishable
//!    crate's public API, from rustdoc's JSON, against its snapshot in
//!    `api/`, so that the surface changes only on purpose
//! 10. `cargo package` of every publishable crate, verified against the
//!     others' packages: `cargo package --workspace` would also package the
//!     `publish = false` crates, and cannot verify benches, which depends
//!     on one of them (test-support) that no registry, not even cargo's
//!     temporary one, has (cargo packages them in dependency order)
//! 11. `cargo build --offline --all-targets` of `xtask/consumers/packaged`,
//!     which depends on nccl-group and nccl-tensor by version, against the
//!     `.crate` files of step 10 (unpacked, patched in for crates.io's),
//!     not the workspace's folders: [`packaged`]
//!
//! Fuzzing is not a step: it needs cargo-fuzz and a nightly toolchain (or
//! `RUSTC_BOOTSTRAP`). Run `cargo xtask fuzz [--seconds N]` by hand; CI runs
//! the fuzz target's entry point over 200k seeded inputs in `cargo test`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::{
    Result, bindgen, cargo_command, manifests, packaged, public_api, run_cargo, workspace_root,
};

/// nccl-group's optional features besides its defaults, which steps 4
/// and 5 turn on: `tracing` compiles its events, `async` the waker thread,
/// `metrics` the recording of its metrics, `nvtx` its NVTX ranges (whose
/// build runs bindgen: libclang, as step 6 needs).
const GROUP_OPTIONAL_FEATURES: &str =
    "nccl-group/tracing,nccl-group/async,nccl-group/metrics,nccl-group/nvtx";

/// The consumer crates under `xtask/consumers/`, checked outside the
/// workspace.
const CONSUMERS: [&str; 5] = [
    "candle-linking",
    "cuda13-loading",
    "candle-like",
    "anyhow-like",
    "analysis-only",
];

#[derive(clap::Args)]
pub struct Args {
    /// Skip `cargo xtask bindgen --check` (for machines without libclang or
    /// the nvidia-nccl-cu13 wheel).
    #[arg(long)]
    skip_bindgen: bool,
    /// Run only the steps whose name contains TEXT (`--only package`: the
    /// packaging and the packaged consumer).
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
}

/// What one step runs.
enum Action {
    /// `cargo` with these arguments and extra environment variables.
    Cargo {
        args: Vec<OsString>,
        env: Vec<(&'static str, OsString)>,
    },
    /// `cargo test` with these arguments, its libtest summaries added up.
    CargoTest { args: &'static [&'static str] },
    /// `cargo xtask bindgen --check`, called in this process.
    BindgenCheck,
    /// The MSRV and cudarc-feature checks over `cargo metadata`.
    ManifestChecks,
    /// `cargo xtask public-api --check`, called in this process.
    PublicApiCheck,
    /// `cargo package -p ...` of every publishable member.
    Package,
    /// The packaged consumer, built against step `Package`'s `.crate` files.
    PackagedConsumer,
}

struct Step {
    /// The command as a user would type it (printed as `==> name`).
    name: String,
    action: Action,
}

pub fn run(args: Args) -> Result<()> {
    let mut steps = vec![
        Step {
            name: "cargo fmt --all -- --check".into(),
            action: cargo(&["fmt", "--all", "--", "--check"]),
        },
        Step {
            name: "manifest checks: MSRV of the locked dependencies, cudarc features forwarded, registry fields"
                .into(),
            action: Action::ManifestChecks,
        },
        Step {
            name: "cargo clippy --workspace --all-targets -- -D warnings".into(),
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
            name: format!("cargo clippy -p nccl-core -p nccl-tensor -p nccl-group -p benches --all-targets --features {GROUP_OPTIONAL_FEATURES} -- -D warnings"),
            action: cargo(&[
                "clippy",
                "-p",
                "nccl-core",
                "-p",
                "nccl-tensor",
                "-p",
                "nccl-group",
                "-p",
                "benches",
                "--all-targets",
                "--features",
                GROUP_OPTIONAL_FEATURES,
                "--",
                "-D",
                "warnings",
            ]),
        },
        Step {
            name: "cargo test --workspace".into(),
            action: Action::CargoTest {
                args: &["test", "--workspace"],
            },
        },
        Step {
            name: format!("cargo test -p nccl-group --lib --features {GROUP_OPTIONAL_FEATURES}"),
            action: Action::CargoTest {
                args: &["test", "-p", "nccl-group", "--lib", "--features", GROUP_OPTIONAL_FEATURES],
            },
        },
    ];
    if !args.skip_bindgen {
        steps.push(Step {
            name: "cargo xtask bindgen --check".into(),
            action: Action::BindgenCheck,
        });
    }
    steps.push(Step {
        name: "RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps".into(),
        action: Action::Cargo {
            args: os_strings(&["doc", "--workspace", "--no-deps"]),
            env: vec![("RUSTDOCFLAGS", rustdocflags())],
        },
    });
    let root = workspace_root();
    for consumer in CONSUMERS {
        let manifest = root
            .join("xtask/consumers")
            .join(consumer)
            .join("Cargo.toml");
        let mut args = os_strings(&["check", "--all-targets", "--manifest-path"]);
        args.push(manifest.into());
        // The workspace's target folder: the consumers add no folder of
        // their own, and share the dependencies that did not change.
        args.extend([OsString::from("--target-dir"), root.join("target").into()]);
        steps.push(Step {
            name: format!(
                "cargo check --all-targets --manifest-path xtask/consumers/{consumer}/Cargo.toml"
            ),
            action: Action::Cargo { args, env: vec![] },
        });
    }
    steps.push(Step {
        name: "cargo xtask public-api --check".into(),
        action: Action::PublicApiCheck,
    });
    steps.push(Step {
        name: "cargo package -p <each publishable crate>".into(),
        action: Action::Package,
    });
    steps.push(packaged_consumer_step());
    if let Some(only) = &args.only {
        steps = only_steps(steps, only)?;
    }

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
    if let Some(only) = &args.only {
        println!("==> ci passed ({total} steps, those naming {only:?})");
    } else if args.skip_bindgen {
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

fn os_strings(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn cargo(args: &[&str]) -> Action {
    Action::Cargo {
        args: os_strings(args),
        env: vec![],
    }
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

/// The MSRV and cudarc-feature checks: every problem found, or none.
fn manifest_checks() -> Result<()> {
    let metadata = manifests::load()?;
    let mut problems = manifests::msrv_violations(&metadata)?;
    problems.extend(manifests::forwarding_gaps(&metadata)?);
    problems.extend(manifests::missing_published_fields(&metadata)?);
    if problems.is_empty() {
        return Ok(());
    }
    for problem in &problems {
        eprintln!("error: {problem}");
    }
    Err(format!(
        "{} problem(s) in the manifests or Cargo.lock",
        problems.len()
    )
    .into())
}

/// `cargo package -p A -p B ...` of the publishable members, verified:
/// cargo builds each packaged crate against the others' packages.
fn package() -> Result<()> {
    let metadata = manifests::load()?;
    let names = manifests::publishable_members(&metadata)?;
    let target = target_directory(&metadata)?;
    forget_earlier_packages(&target, &names)?;
    let mut args = os_strings(&["package", "--target-dir"]);
    args.push(target.join(PACKAGE_TARGET).into_os_string());
    for name in &names {
        args.extend([OsString::from("-p"), OsString::from(name)]);
    }
    println!("cargo {}", args.join(" ".as_ref()).to_string_lossy());
    run_cargo(&args, &[])
}

/// The workspace's target folder, as `cargo metadata` names it.
fn target_directory(metadata: &serde_json::Value) -> Result<PathBuf> {
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata names no target_directory".into())
}

/// The step after `cargo package`: the packaged consumer.
fn packaged_consumer_step() -> Step {
    Step {
        name: format!(
            "cargo build --offline --all-targets --manifest-path xtask/consumers/{}/Cargo.toml against the packaged .crate files",
            packaged::CONSUMER
        ),
        action: Action::PackagedConsumer,
    }
}

/// The steps whose name contains `only`; none is an error naming them all.
fn only_steps(steps: Vec<Step>, only: &str) -> Result<Vec<Step>> {
    let names: Vec<String> = steps.iter().map(|step| step.name.clone()).collect();
    let chosen: Vec<Step> = steps
        .into_iter()
        .filter(|step| step.name.contains(only))
        .collect();
    if chosen.is_empty() {
        return Err(format!(
            "no ci step's name contains {only:?}; the steps are:\n  {}",
            names.join("\n  ")
        )
        .into());
    }
    Ok(chosen)
}

/// The target folder `cargo package` verifies in: its own, so that what it
/// compiles from its temporary registry never mixes with the workspace's
/// builds.
const PACKAGE_TARGET: &str = "package-verify";

/// Removes what earlier `cargo package` runs left of `names`. cargo
/// verifies each package against the others through a temporary registry
/// and treats a registry crate of an unchanged version as unchanged: it
/// reuses what it unpacked (cargo's home, `registry/{src,cache}/-<hash>`)
/// and compiled (`PACKAGE_TARGET`'s fingerprints and artifacts named after
/// the crate), so a second run on one machine would verify against the
/// first run's sources.
fn forget_earlier_packages(target: &Path, names: &[String]) -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let mut folders: Vec<PathBuf> = Vec::new();
    if let Some(home) = home {
        for kind in ["src", "cache"] {
            let Ok(registries) = std::fs::read_dir(home.join("registry").join(kind)) else {
                continue;
            };
            folders.extend(
                registries
                    .flatten()
                    .filter(|r| r.file_name().to_string_lossy().starts_with('-'))
                    .map(|r| r.path()),
            );
        }
    }
    let built = target.join(PACKAGE_TARGET).join("debug");
    folders.extend([
        built.join(".fingerprint"),
        built.join("deps"),
        built.join("build"),
    ]);
    // Artifacts use the crate name with `_`, fingerprints and sources with `-`.
    let stems: Vec<String> = names
        .iter()
        .flat_map(|name| {
            [
                name.clone(),
                name.replace('-', "_"),
                format!("lib{}", name.replace('-', "_")),
            ]
        })
        .collect();
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let ours = stems.iter().any(|stem| {
                file.strip_prefix(stem.as_str())
                    .is_some_and(|rest| rest.starts_with(['-', '.']))
            });
            if !ours {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| format!("could not remove {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

fn run_step(step: &Step, tests: &mut TestTotals) -> Result<()> {
    match &step.action {
        Action::BindgenCheck => bindgen::run(bindgen::Args { check: true }),
        Action::ManifestChecks => manifest_checks(),
        Action::PublicApiCheck => public_api::run(public_api::Args {
            check: true,
            count: None,
        }),
        Action::Package => package(),
        Action::PackagedConsumer => {
            let metadata = manifests::load()?;
            packaged::build(&target_directory(&metadata)?.join(PACKAGE_TARGET))
        }
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
        Action::Cargo { args, env } => run_cargo(args, env),
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, Step, TestTotals, only_steps};
    use crate::workspace_root;

    /// The analysis-only consumer (nccl-group with `analysis` alone)
    /// builds without CUDA: its dependency tree, as `cargo tree` resolves
    /// its features, has neither cudarc nor the crates over it.
    #[test]
    fn analysis_only_consumer_has_no_cuda_in_its_tree() {
        let manifest = workspace_root().join("xtask/consumers/analysis-only/Cargo.toml");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = std::process::Command::new(cargo)
            .args([
                "tree",
                "-e",
                "normal,build",
                "--prefix",
                "none",
                "--manifest-path",
            ])
            .arg(&manifest)
            .output()
            .expect("cargo runs");
        let tree = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "cargo tree: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let crates: Vec<&str> = tree
            .lines()
            .filter_map(|line| line.split(' ').next())
            .collect();
        assert!(crates.contains(&"nccl-group"), "{tree}");
        for cuda in ["cudarc", "nccl-sys", "nccl-core", "nccl-tensor"] {
            assert!(!crates.contains(&cuda), "{cuda} is in the tree:\n{tree}");
        }
    }

    fn named(name: &str) -> Step {
        Step {
            name: name.into(),
            action: Action::Package,
        }
    }

    #[test]
    fn only_keeps_the_steps_naming_the_text_in_order() {
        let steps = vec![
            named("cargo fmt --all -- --check"),
            named("cargo package -p <each publishable crate>"),
            named("cargo build ... against the packaged .crate files"),
        ];
        let chosen: Vec<String> = only_steps(steps, "package")
            .unwrap()
            .into_iter()
            .map(|step| step.name)
            .collect();
        assert_eq!(
            chosen,
            [
                "cargo package -p <each publishable crate>",
                "cargo build ... against the packaged .crate files"
            ]
        );
    }

    #[test]
    fn only_without_a_match_names_every_step() {
        let steps = vec![named("cargo fmt --all -- --check"), named("cargo doc")];
        let error = only_steps(steps, "bench").err().unwrap().to_string();
        assert_eq!(
            error,
            "no ci step's name contains \"bench\"; the steps are:\n  cargo fmt --all -- --check\n  cargo doc"
        );
    }

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
