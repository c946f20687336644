//! `cargo xtask gpu-bundle`: build everything the GPU machine runs, here.
//!
//! The GPU machine has no Rust toolchain, so this builds, in the `gpu-test`
//! profile (release code, no whole-program link per binary), every GPU
//! integration test target (`gpu`, `gpu_*`) in the workspace
//! (with nccl-group's `nvtx` feature),
//! every bench target (in the bench profile, which inherits the release
//! profile's whole-program optimisation), every binary of the `benches`,
//! `nccl-group` (`nccl-frtrace`), `nccl-launch` and `nccl-perf` packages
//! (those of `benches` and `nccl-perf`, which time the layers, in the
//! release profile), the `torchrun_*` examples and the examples the
//! bundle's scripts run (`c10d_interop`, `launch_check`); strips them into
//! `target/gpu-bundle/bin/<package>-<target>` and writes
//! `target/gpu-bundle/run.sh`, which runs them there (the `ranks_*` tests
//! and the `torchrun_*` examples also as every rank of an `nccl-launch` of
//! 2 and 4 ranks) and ends with one line `N passed, N failed, N skipped`.
//! It also copies a snapshot of nccl-tests' source to
//! `target/gpu-bundle/nccl-tests-src` (`nccl_tests`), which nccl-tests.sh
//! builds there to run next to nccl-perf, and, where apt-get is at hand,
//! Debian's Open MPI packages to `target/gpu-bundle/openmpi` (`openmpi`),
//! which mpirun.sh unpacks there. The consumer crates that have GPU tests
//! (`candle-like`, which links the CUDA driver as candle does) are built
//! too, outside the workspace, against a link stub of the driver
//! (`cuda_stub`); run.sh runs them like the workspace's.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{Result, on_path, workspace_root};

mod cuda_stub;
mod nccl_tests;
mod openmpi;

/// The bundle is carried to the GPU machine with a 64 MiB limit.
const MAX_BUNDLE_BYTES: u64 = 60 * 1024 * 1024;

/// The packages whose binaries (`nccl-perf`, `nccl-launch`, ...) go into
/// the bundle.
const TOOL_PACKAGES: [&str; 4] = ["benches", "nccl-group", "nccl-launch", "nccl-perf"];

/// The tool packages whose binaries time the layers (`nccl-perf`,
/// `world-cost`, and `group-soak` beside it): built in the release
/// profile, whole-program optimised as `cargo run --release -p nccl-perf`
/// builds them, so they time that code.
const TIMING_PACKAGES: [&str; 2] = ["benches", "nccl-perf"];

/// The profile of everything else: release code without a whole-program
/// link for each binary (the workspace's `Cargo.toml` defines it).
const TEST_PROFILE: &str = "gpu-test";

/// The profile the tool `package` is built in ([`TIMING_PACKAGES`]).
fn tool_profile(package: &str) -> &'static str {
    if TIMING_PACKAGES.contains(&package) {
        "release"
    } else {
        TEST_PROFILE
    }
}

/// Examples with this prefix read torchrun's variables: run.sh launches
/// them as every rank of a world of several.
const LAUNCHED_EXAMPLE_PREFIX: &str = "torchrun_";

/// Examples a bundled script runs (interop.sh: `c10d_interop`; mpirun.sh:
/// `launch_check`), bundled like tools: run.sh does not launch them.
const SCRIPT_EXAMPLES: [&str; 2] = ["c10d_interop", "launch_check"];

/// The consumer crates of `xtask/consumers/` whose GPU tests go into the
/// bundle.
const GPU_CONSUMERS: [&str; 1] = ["candle-like"];

/// Whether the integration test target `name` is a GPU test: a crate's
/// `tests/gpu/main.rs` (target `gpu`), or one that must stand alone
/// (`gpu_*`: it starts copies of itself, or sets a global allocator).
fn is_gpu_test(name: &str) -> bool {
    name == "gpu" || name.starts_with("gpu_")
}

/// Whether the example `name` goes into the bundle.
fn bundled_example(name: &str) -> bool {
    name.starts_with(LAUNCHED_EXAMPLE_PREFIX) || SCRIPT_EXAMPLES.contains(&name)
}

#[derive(clap::Args)]
pub struct Args {
    /// NVIDIA/nccl-tests for nccl-tests.sh: a git repository's folder
    /// (bare or not) or a git URL (cloned, HEAD only), whose HEAD the
    /// bundle carries [default: $NCCL_TESTS_GIT; without either, no
    /// nccl-tests]
    #[arg(long, value_name = "GIT_DIR_OR_URL")]
    nccl_tests: Option<String>,
}

/// What a bundled binary is, which decides how run.sh treats it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// A GPU integration test (`gpu`, `gpu_*`): run by run.sh.
    Test,
    /// A criterion bench: run by `run.sh --bench`.
    Bench,
    /// A binary of a tool package, or an example a bundled script runs:
    /// bundled for use by hand and by the scripts (and `nccl-launch`, which
    /// run.sh uses).
    Tool,
    /// A `torchrun_*` example: run.sh launches it at world sizes 2 and 4.
    Example,
}

/// One executable cargo built.
#[derive(Debug)]
struct Artifact {
    package: String,
    target: String,
    role: Role,
    executable: PathBuf,
}

impl Artifact {
    fn bundle_name(&self) -> String {
        format!("{}-{}", self.package, self.target)
    }
}

/// The features the GPU tests are built with: nccl-group's NVTX ranges,
/// so the runs that time operations on the GPU (`gpu_timing`) go through
/// them too, as a profiled program's would.
const GPU_TEST_FEATURES: &str = "nccl-group/nvtx";

/// The parts of `cargo metadata` this task needs.
struct Workspace {
    target_dir: PathBuf,
    /// Package name by manifest path.
    packages: BTreeMap<PathBuf, String>,
    has_gpu_tests: bool,
    has_benches: bool,
    /// Tool packages that have binaries.
    tool_packages: Vec<&'static str>,
    /// Packages that have bundled examples.
    example_packages: Vec<String>,
    /// The features bundled examples require (`required-features`), as
    /// (package, feature): their package's build turns them on.
    example_features: Vec<(String, String)>,
}

pub fn run(args: Args) -> Result<()> {
    let root = workspace_root();
    let snapshot = nccl_tests::locate(args.nccl_tests, &root.join("target"))?;
    let mut workspace = workspace(&root)?;

    let mut artifacts = Vec::new();
    if workspace.has_gpu_tests {
        println!(
            "==> cargo test --workspace --profile {TEST_PROFILE} --no-run --test 'gpu*' --features {GPU_TEST_FEATURES}"
        );
        artifacts.extend(
            build(
                &root,
                &workspace,
                &[],
                &[
                    "test",
                    "--workspace",
                    "--profile",
                    TEST_PROFILE,
                    "--no-run",
                    "--test",
                    "gpu*",
                    "--features",
                    GPU_TEST_FEATURES,
                ],
            )?
            .into_iter()
            .filter(|a| a.role == Role::Test && is_gpu_test(&a.target)),
        );
    } else {
        println!("==> no gpu test targets in the workspace yet");
    }
    if workspace.has_benches {
        // The bench profile, which inherits the release profile's
        // whole-program optimisation: the benches time the layers.
        println!("==> cargo bench --workspace --no-run --bench '*'");
        artifacts.extend(
            build(
                &root,
                &workspace,
                &[],
                &["bench", "--workspace", "--no-run", "--bench", "*"],
            )?
            .into_iter()
            .filter(|a| a.role == Role::Bench),
        );
    } else {
        println!("==> no bench targets in the workspace yet");
    }
    for package in &workspace.tool_packages {
        let profile = tool_profile(package);
        println!("==> cargo build -p {package} --profile {profile} --bins");
        artifacts.extend(
            build(
                &root,
                &workspace,
                &[],
                &["build", "-p", package, "--profile", profile, "--bins"],
            )?
            .into_iter()
            .filter(|a| a.role == Role::Tool && a.package == *package),
        );
    }
    for package in &workspace.example_packages {
        let example_features = workspace
            .example_features
            .iter()
            .filter(|(of, _)| of == package)
            .map(|(_, feature)| feature.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "build",
            "-p",
            package,
            "--profile",
            TEST_PROFILE,
            "--examples",
        ];
        if !example_features.is_empty() {
            args.extend(["--features", &example_features]);
        }
        println!("==> cargo {}", args.join(" "));
        artifacts.extend(
            build(&root, &workspace, &[], &args)?
                .into_iter()
                .filter(|a| a.role == Role::Example && bundled_example(&a.target))
                .map(|mut a| {
                    if !a.target.starts_with(LAUNCHED_EXAMPLE_PREFIX) {
                        a.role = Role::Tool;
                    }
                    a
                }),
        );
    }

    for consumer in GPU_CONSUMERS {
        artifacts.extend(build_consumer(&root, &mut workspace, consumer)?);
    }

    let bundle = workspace.target_dir.join("gpu-bundle");
    write_bundle(&bundle, artifacts, snapshot.as_deref())
}

/// Builds the GPU tests of the consumer crate `xtask/consumers/<name>` in
/// the workspace's target folder, linked against a stub of the CUDA
/// driver ([`cuda_stub`]) that cudarc's build script finds through
/// `CUDA_ROOT`.
fn build_consumer(root: &Path, workspace: &mut Workspace, name: &str) -> Result<Vec<Artifact>> {
    let manifest = root.join("xtask/consumers").join(name).join("Cargo.toml");
    let metadata = metadata(root, &[OsStr::new("--manifest-path"), manifest.as_os_str()])?;
    let canonical = manifest.canonicalize().ok();
    let mut cudarc_dir = None;
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let (Some(package_name), Some(package_manifest)) =
            (package["name"].as_str(), package["manifest_path"].as_str())
        else {
            continue;
        };
        let package_manifest = PathBuf::from(package_manifest);
        if package_name == "cudarc" {
            cudarc_dir = package_manifest.parent().map(Path::to_path_buf);
        } else if package_manifest.canonicalize().ok() == canonical {
            workspace
                .packages
                .insert(package_manifest, package_name.to_string());
        }
    }
    let cudarc_dir =
        cudarc_dir.ok_or_else(|| format!("{} does not depend on cudarc", manifest.display()))?;
    let stub = workspace.target_dir.join("cuda-link-stub");
    cuda_stub::write(&cudarc_dir, &stub)?;
    let manifest_arg = manifest.to_string_lossy().into_owned();
    let target_arg = workspace.target_dir.to_string_lossy().into_owned();
    println!(
        "==> cargo test --release --no-run --test 'gpu*' --manifest-path xtask/consumers/{name}/Cargo.toml (CUDA_ROOT={})",
        stub.display()
    );
    Ok(build(
        root,
        workspace,
        &[("CUDA_ROOT", stub.as_os_str())],
        &[
            "test",
            "--release",
            "--no-run",
            "--test",
            "gpu*",
            "--manifest-path",
            &manifest_arg,
            "--target-dir",
            &target_arg,
        ],
    )?
    .into_iter()
    .filter(|a| a.role == Role::Test && is_gpu_test(&a.target))
    .collect())
}

/// `cargo metadata --format-version 1` with `args`, as JSON.
fn metadata(root: &Path, args: &[&OsStr]) -> Result<Value> {
    let output = Command::new(cargo_binary())
        .args(["metadata", "--format-version", "1"])
        .args(args)
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed ({})", output.status).into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// Reads `cargo metadata` for the workspace members' names and targets.
fn workspace(root: &Path) -> Result<Workspace> {
    let metadata = metadata(root, &[OsStr::new("--no-deps")])?;
    let target_dir = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata gave no target_directory")?
        .into();
    let mut workspace = Workspace {
        target_dir,
        packages: BTreeMap::new(),
        has_gpu_tests: false,
        has_benches: false,
        tool_packages: Vec::new(),
        example_packages: Vec::new(),
        example_features: Vec::new(),
    };
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(manifest)) =
            (package["name"].as_str(), package["manifest_path"].as_str())
        else {
            return Err("cargo metadata gave a package without name or manifest_path".into());
        };
        workspace.packages.insert(manifest.into(), name.to_string());
        for target in package["targets"].as_array().into_iter().flatten() {
            let target_name = target["name"].as_str().unwrap_or_default();
            let is = |kind: &str| has_kind(target, kind);
            workspace.has_gpu_tests |= is("test") && is_gpu_test(target_name);
            workspace.has_benches |= is("bench");
            if is("bin")
                && let Some(tool) = TOOL_PACKAGES.iter().find(|&&tool| tool == name)
                && !workspace.tool_packages.contains(tool)
            {
                workspace.tool_packages.push(tool);
            }
            if is("example")
                && bundled_example(target_name)
                && !workspace.example_packages.iter().any(|p| p == name)
            {
                workspace.example_packages.push(name.to_string());
            }
            if is("example") && bundled_example(target_name) {
                for feature in target["required-features"].as_array().into_iter().flatten() {
                    let feature = (
                        name.to_string(),
                        feature.as_str().unwrap_or_default().to_string(),
                    );
                    if !workspace.example_features.contains(&feature) {
                        workspace.example_features.push(feature);
                    }
                }
            }
        }
    }
    Ok(workspace)
}

fn has_kind(target: &Value, kind: &str) -> bool {
    target["kind"]
        .as_array()
        .is_some_and(|kinds| kinds.iter().any(|k| k.as_str() == Some(kind)))
}

/// `$CARGO` when run by cargo (as `cargo xtask` is), else `cargo`.
fn cargo_binary() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Runs cargo with `--message-format=json` and returns every executable of
/// a package of `workspace.packages` it reports, with the role its target
/// kind gives it; `env` is added to cargo's environment.
fn build(
    root: &Path,
    workspace: &Workspace,
    env: &[(&str, &OsStr)],
    args: &[&str],
) -> Result<Vec<Artifact>> {
    let command = format!("cargo {}", args.join(" "));
    let mut child = Command::new(cargo_binary())
        .args(args)
        .envs(env.iter().copied())
        .arg("--message-format=json")
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not run `{command}`: {e}"))?;
    let stdout = child.stdout.take().ok_or("cargo has no stdout")?;
    let mut artifacts = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            // Not JSON (a build script or test harness printing): pass it on.
            println!("{line}");
            continue;
        };
        match message["reason"].as_str() {
            Some("compiler-message") => {
                if let Some(rendered) = message["message"]["rendered"].as_str() {
                    eprint!("{rendered}");
                }
            }
            Some("compiler-artifact") => {
                if let Some(artifact) = artifact(workspace, &message) {
                    artifacts.push(artifact);
                }
            }
            _ => {}
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("`{command}` failed ({status})").into());
    }
    Ok(artifacts)
}

fn artifact(workspace: &Workspace, message: &Value) -> Option<Artifact> {
    let executable = message["executable"].as_str()?;
    let package = workspace
        .packages
        .get(Path::new(message["manifest_path"].as_str()?))?
        .clone();
    let target = &message["target"];
    let role = if has_kind(target, "test") {
        Role::Test
    } else if has_kind(target, "bench") {
        Role::Bench
    } else if has_kind(target, "bin") && message["profile"]["test"] == Value::Bool(false) {
        Role::Tool
    } else if has_kind(target, "example") && message["profile"]["test"] == Value::Bool(false) {
        Role::Example
    } else {
        return None;
    };
    Some(Artifact {
        package,
        target: target["name"].as_str()?.to_string(),
        role,
        executable: executable.into(),
    })
}

/// Replaces `bundle` with the stripped binaries, run.sh, the scripts and
/// the source of the nccl-tests `snapshot` (if any); fails if the result
/// is too big to carry to the GPU machine.
fn write_bundle(
    bundle: &Path,
    mut artifacts: Vec<Artifact>,
    snapshot: Option<&Path>,
) -> Result<()> {
    artifacts.sort_by_key(Artifact::bundle_name);
    for pair in artifacts.windows(2) {
        if pair[0].bundle_name() == pair[1].bundle_name() {
            return Err(format!(
                "two binaries would both be bundled as bin/{}: {} and {}; rename one target",
                pair[0].bundle_name(),
                pair[0].executable.display(),
                pair[1].executable.display()
            )
            .into());
        }
    }

    if bundle.exists() {
        std::fs::remove_dir_all(bundle)
            .map_err(|e| format!("could not clear {}: {e}", bundle.display()))?;
    }
    let bin = bundle.join("bin");
    std::fs::create_dir_all(&bin)?;
    let strip = on_path("strip");
    if strip.is_none() {
        println!("==> strip is not on PATH: copying binaries unstripped");
    }
    for artifact in &artifacts {
        let dest = bin.join(artifact.bundle_name());
        std::fs::copy(&artifact.executable, &dest).map_err(|e| {
            format!(
                "could not copy {} to {}: {e}",
                artifact.executable.display(),
                dest.display()
            )
        })?;
        if let Some(strip) = &strip {
            let status = Command::new(strip).arg(&dest).status()?;
            if !status.success() {
                return Err(format!("`strip {}` failed ({status})", dest.display()).into());
            }
        }
    }

    let names = |role: Role| -> Vec<String> {
        artifacts
            .iter()
            .filter(|a| a.role == role)
            .map(Artifact::bundle_name)
            .collect()
    };
    let (tests, benches, tools, examples) = (
        names(Role::Test),
        names(Role::Bench),
        names(Role::Tool),
        names(Role::Example),
    );
    let run_sh = bundle.join("run.sh");
    std::fs::write(&run_sh, render_run_sh(&tests, &benches, &tools, &examples))?;
    set_executable(&run_sh)?;
    let mut total = std::fs::metadata(&run_sh)?.len();
    for (name, contents) in SCRIPTS {
        let path = bundle.join(name);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder)?;
        }
        std::fs::write(&path, contents)?;
        set_executable(&path)?;
        total += contents.len() as u64;
    }
    match snapshot {
        Some(snapshot) => {
            let bytes = nccl_tests::copy_source(snapshot, bundle)?;
            println!(
                "==> {}: nccl-tests' source from {}, {:.1} MiB",
                nccl_tests::SOURCE_FOLDER,
                snapshot.display(),
                bytes as f64 / (1024.0 * 1024.0)
            );
            total += bytes;
        }
        None => println!(
            "==> warning: no nccl-tests (--nccl-tests GIT_DIR_OR_URL or ${}): nccl-tests.sh will stop saying so",
            nccl_tests::SNAPSHOT_ENV
        ),
    }
    if let Some(bytes) = openmpi::fetch(bundle)? {
        println!(
            "==> {}/: Debian's Open MPI packages for mpirun.sh, {:.1} MiB",
            openmpi::FOLDER,
            bytes as f64 / (1024.0 * 1024.0)
        );
        total += bytes;
    }
    let unpacked = artifacts
        .iter()
        .map(|a| std::fs::metadata(bin.join(a.bundle_name())).map(|m| m.len()))
        .sum::<std::io::Result<u64>>()?;
    println!(
        "==> {}: {} test, {} bench, {} tool and {} example binaries, {:.1} MiB unpacked",
        bundle.display(),
        tests.len(),
        benches.len(),
        tools.len(),
        examples.len(),
        unpacked as f64 / (1024.0 * 1024.0)
    );
    for artifact in &artifacts {
        let size = std::fs::metadata(bin.join(artifact.bundle_name()))?.len();
        println!(
            "    bin/{:<40} {:>6.1} MiB",
            artifact.bundle_name(),
            size as f64 / (1024.0 * 1024.0)
        );
    }
    if tests.is_empty() {
        println!("==> warning: no gpu tests yet: run.sh will report that no test ran");
    }
    total += pack_binaries(bundle)?;
    let mib = total as f64 / (1024.0 * 1024.0);
    println!("==> bin.tar.gz: the binaries packed; the bundle is {mib:.1} MiB to carry");
    if total > MAX_BUNDLE_BYTES {
        return Err(format!(
            "the GPU bundle is {mib:.1} MiB, over the 60 MiB limit (the GPU machine takes at most 64 MiB): \
             drop debug info or split the bundle"
        )
        .into());
    }
    println!(
        "==> run it on the GPU machine as {}/run.sh [--bench] [filter...]",
        bundle.display()
    );
    Ok(())
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> Result<()> {
    Ok(())
}

/// A bash array body: each name single-quoted.
fn bash_words(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("'{}'", name.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn render_run_sh(
    tests: &[String],
    benches: &[String],
    tools: &[String],
    examples: &[String],
) -> String {
    RUN_SH
        .replace("@TESTS@", &bash_words(tests))
        .replace("@BENCHES@", &bash_words(benches))
        .replace("@TOOLS@", &bash_words(tools))
        .replace("@EXAMPLES@", &bash_words(examples))
}

/// The scripts the bundle carries as they are, by path in the bundle:
/// * perf.sh: the measurement recipe of docs/measurements/README.md for a machine of any
///   size (the GPUs' topology, nccl-perf against raw NCCL for the group and
///   the tensor layer from 8 B to 4 GiB with JSON and plots, the soak), so
///   a multi-GPU run is one command;
/// * world.sh: the world-size-N figures (world-cost next to
///   torch.distributed at world sizes 1, 2 and 4, group-soak at 2);
/// * perf-procs.sh: nccl-perf as every process of `nccl-launch -n 2` and
///   `-n 4` and of torchrun, every layer and collective, with a pass/fail
///   and #wrong summary;
/// * nccl-tests.sh: builds nccl-tests from nccl-tests-src/ and runs it and
///   nccl-perf's raw layer with the same flags, each writing its JSON
///   document per operation (`cargo xtask nccl-tests-compare` sets them
///   side by side here);
/// * scripts/torch_world_cost.py: torch.distributed's side of world.sh;
/// * heal.sh: the recovery figures (`nccl-perf --inject` with each `--heal` at world sizes 4
///   and 8, a warm spare's `--grow-spare` to each, and torch.distributed.shrink_group's
///   through scripts/torch_heal_cost.py);
/// * soak.sh: the slow-rank soak (`nccl-perf --soak` with `--stall`: a rank that is slow
///   but alive must never fail the group), which a call may start in the background;
/// * interop.sh: nccl-rendezvous's C10dStore against a real torch TCPStore
///   (scripts/c10d_interop.py with the `c10d_interop` example), and real
///   torchrun launches of the `torchrun_all_reduce` example joining the
///   agent's store.
/// * mpirun.sh: Open MPI's mpirun, unpacked from the bundle's packages
///   ([`openmpi`]), starting `launch_check`, then the `torchrun_all_reduce`
///   example and nccl-perf as every rank of 2 and 4 simulated hosts;
/// * bundle-bin.sh: sourced by every script: unpacks bin.tar.gz once;
/// * perf-rows.sh: sourced by perf-procs.sh and mpirun.sh: counts nccl-perf's
///   table rows and those with #wrong > 0;
/// * steps.sh: sourced by interop.sh and mpirun.sh: prints and counts each
///   step's PASS: or FAIL: line.
const SCRIPTS: [(&str, &str); 14] = [
    ("bundle-bin.sh", include_str!("gpu_bundle/bundle-bin.sh")),
    ("perf-rows.sh", include_str!("gpu_bundle/perf-rows.sh")),
    ("steps.sh", include_str!("gpu_bundle/steps.sh")),
    ("mpirun.sh", include_str!("gpu_bundle/mpirun.sh")),
    ("perf.sh", include_str!("gpu_bundle/perf.sh")),
    ("world.sh", include_str!("gpu_bundle/world.sh")),
    ("perf-procs.sh", include_str!("gpu_bundle/perf-procs.sh")),
    ("nccl-tests.sh", include_str!("gpu_bundle/nccl-tests.sh")),
    (
        "scripts/torch_world_cost.py",
        include_str!("../../benches/scripts/torch_world_cost.py"),
    ),
    ("heal.sh", include_str!("gpu_bundle/heal.sh")),
    ("soak.sh", include_str!("gpu_bundle/soak.sh")),
    (
        "scripts/torch_heal_cost.py",
        include_str!("../../benches/scripts/torch_heal_cost.py"),
    ),
    ("interop.sh", include_str!("gpu_bundle/interop.sh")),
    (
        "scripts/c10d_interop.py",
        include_str!("../../nccl-rendezvous/tests/torch/c10d_interop.py"),
    ),
];

/// Packs `bundle`/bin into `bundle`/bin.tar.gz and removes the folder: the
/// scripts unpack it on the GPU machine (bundle-bin.sh). Returns the
/// archive's size.
fn pack_binaries(bundle: &Path) -> Result<u64> {
    let archive = bundle.join("bin.tar.gz");
    let status = Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(bundle)
        .arg("bin")
        .status()
        .map_err(|e| format!("could not run tar to pack {}/bin: {e}", bundle.display()))?;
    if !status.success() {
        return Err(format!("`tar czf {}` failed ({status})", archive.display()).into());
    }
    std::fs::remove_dir_all(bundle.join("bin"))?;
    Ok(std::fs::metadata(&archive)?.len())
}

/// run.sh: runs on the GPU machine (bash, no Rust toolchain there).
const RUN_SH: &str = include_str!("gpu_bundle/run.sh");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crates_gpu_binary_and_the_stand_alone_ones_are_gpu_tests() {
        for name in ["gpu", "gpu_alloc", "gpu_group_faults_processes"] {
            assert!(is_gpu_test(name), "{name}");
        }
        for name in ["cpu", "gpus", "launch", "store_memory_bounds"] {
            assert!(!is_gpu_test(name), "{name}");
        }
    }
}
