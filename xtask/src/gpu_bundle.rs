//! `cargo xtask gpu-bundle`: build everything the GPU machine runs, here.
//!
//! The GPU machine has no Rust toolchain, so this builds, in release mode,
//! every integration test target named `gpu_*` in the workspace, every bench
//! target and every binary of the `benches` package; strips them into
//! `target/gpu-bundle/bin/<package>-<target>` and writes
//! `target/gpu-bundle/run.sh`, which runs them there and ends with one line
//! `N passed, N failed, N skipped`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{Result, workspace_root};

/// The bundle is carried to the GPU machine with a 64 MiB limit.
const MAX_BUNDLE_BYTES: u64 = 60 * 1024 * 1024;

/// The package whose binaries (e.g. `nccl-perf`) go into the bundle.
const BENCHES_PACKAGE: &str = "benches";

#[derive(clap::Args)]
pub struct Args {}

/// What a bundled binary is, which decides how run.sh treats it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// A `gpu_*` integration test: run by run.sh.
    Test,
    /// A criterion bench: run by `run.sh --bench`.
    Bench,
    /// A binary of the benches package: bundled for use by hand.
    Tool,
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

/// The parts of `cargo metadata` this task needs.
struct Workspace {
    target_dir: PathBuf,
    /// Package name by manifest path.
    packages: BTreeMap<PathBuf, String>,
    has_gpu_tests: bool,
    has_benches: bool,
    has_bench_bins: bool,
}

pub fn run(_args: Args) -> Result<()> {
    let root = workspace_root();
    let workspace = workspace(&root)?;

    let mut artifacts = Vec::new();
    if workspace.has_gpu_tests {
        println!("==> cargo test --workspace --release --no-run --test 'gpu_*'");
        artifacts.extend(
            build(
                &root,
                &workspace,
                &[
                    "test",
                    "--workspace",
                    "--release",
                    "--no-run",
                    "--test",
                    "gpu_*",
                ],
            )?
            .into_iter()
            .filter(|a| a.role == Role::Test && a.target.starts_with("gpu_")),
        );
    } else {
        println!("==> no gpu_* test targets in the workspace yet");
    }
    if workspace.has_benches {
        println!("==> cargo bench --workspace --no-run --bench '*'");
        artifacts.extend(
            build(
                &root,
                &workspace,
                &["bench", "--workspace", "--no-run", "--bench", "*"],
            )?
            .into_iter()
            .filter(|a| a.role == Role::Bench),
        );
    } else {
        println!("==> no bench targets in the workspace yet");
    }
    if workspace.has_bench_bins {
        println!("==> cargo build -p {BENCHES_PACKAGE} --release --bins");
        artifacts.extend(
            build(
                &root,
                &workspace,
                &["build", "-p", BENCHES_PACKAGE, "--release", "--bins"],
            )?
            .into_iter()
            .filter(|a| a.role == Role::Tool && a.package == BENCHES_PACKAGE),
        );
    } else {
        println!("==> no binaries in the {BENCHES_PACKAGE} package yet");
    }

    let bundle = workspace.target_dir.join("gpu-bundle");
    write_bundle(&bundle, artifacts)
}

/// Reads `cargo metadata` for the workspace members' names and targets.
fn workspace(root: &Path) -> Result<Workspace> {
    let output = Command::new(cargo_binary())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed ({})", output.status).into());
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let target_dir = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata gave no target_directory")?
        .into();
    let mut workspace = Workspace {
        target_dir,
        packages: BTreeMap::new(),
        has_gpu_tests: false,
        has_benches: false,
        has_bench_bins: false,
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
            workspace.has_gpu_tests |= is("test") && target_name.starts_with("gpu_");
            workspace.has_benches |= is("bench");
            workspace.has_bench_bins |= is("bin") && name == BENCHES_PACKAGE;
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
/// a workspace member it reports, with the role its target kind gives it.
fn build(root: &Path, workspace: &Workspace, args: &[&str]) -> Result<Vec<Artifact>> {
    let command = format!("cargo {}", args.join(" "));
    let mut child = Command::new(cargo_binary())
        .args(args)
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

/// Replaces `bundle` with the stripped binaries and run.sh; fails if the
/// result is too big to carry to the GPU machine.
fn write_bundle(bundle: &Path, mut artifacts: Vec<Artifact>) -> Result<()> {
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
    let (tests, benches, tools) = (names(Role::Test), names(Role::Bench), names(Role::Tool));
    let run_sh = bundle.join("run.sh");
    std::fs::write(&run_sh, render_run_sh(&tests, &benches, &tools))?;
    set_executable(&run_sh)?;
    let perf_sh = bundle.join("perf.sh");
    std::fs::write(&perf_sh, PERF_SH)?;
    set_executable(&perf_sh)?;

    let mut total = 0;
    for entry in std::fs::read_dir(&bin)? {
        total += entry?.metadata()?.len();
    }
    total += std::fs::metadata(&run_sh)?.len() + std::fs::metadata(&perf_sh)?.len();
    let mib = total as f64 / (1024.0 * 1024.0);
    println!(
        "==> {}: {} test, {} bench and {} tool binaries, {mib:.1} MiB",
        bundle.display(),
        tests.len(),
        benches.len(),
        tools.len()
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
        println!("==> warning: no gpu_* tests yet: run.sh will report that no test ran");
    }
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

/// The first `program` in `$PATH`, if any.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
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

fn render_run_sh(tests: &[String], benches: &[String], tools: &[String]) -> String {
    RUN_SH
        .replace("@TESTS@", &bash_words(tests))
        .replace("@BENCHES@", &bash_words(benches))
        .replace("@TOOLS@", &bash_words(tools))
}

/// perf.sh: the measurement recipe of the README for a machine of any size
/// (the GPUs' topology, nccl-perf against raw NCCL for the group and the
/// tensor layer from 8 B to 4 GiB with JSON and plots, the soak), so a
/// multi-GPU run is one command.
const PERF_SH: &str = r#"#!/usr/bin/env bash
# The measurement run, on the GPU machine:
#   perf.sh [OUT_DIR]      (default: $OUT/perf, or ./perf)
# Writes topology.txt; raw-group, raw-group-caller, raw-group-blocking (the
# group on blocking communicators) and raw-tensor as .txt, .jsonl and .svg;
# and soak.txt. Ends with one line naming what failed, if anything.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-${OUT:-.}/perf}"
mkdir -p -- "$out"
export NCCL_NVLS_ENABLE=0
{ nvidia-smi -L; nvidia-smi topo -m; } >"$out/topology.txt" 2>&1
failed=()
for run in raw,group: raw,group-caller: raw,group:blocking raw,tensor:; do
    layers="${run%%:*}"
    comms="${run#*:}"
    name="${layers/,/-}${comms:+-$comms}"
    echo "==> nccl-perf --compare $layers ${comms:+--group-comms $comms }-b 8 -e 4G -f 2 -c 1"
    "$here/bin/benches-nccl-perf" --compare "$layers" ${comms:+--group-comms "$comms"} \
        -b 8 -e 4G -f 2 -c 1 --json "$out/$name.jsonl" --plot "$out/$name.svg" \
        >"$out/$name.txt" 2>&1 || failed+=("nccl-perf $name")
    grep -E '^# (Collective|Median ratio|Out of bounds)' "$out/$name.txt"
done
echo "==> group-soak"
"$here/bin/benches-group-soak" >"$out/soak.txt" 2>&1 || failed+=("group-soak")
tail -1 "$out/soak.txt"
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "perf.sh: all ran; results in $out"
else
    echo "perf.sh: failed: ${failed[*]}; results in $out"
    exit 1
fi
"#;

/// run.sh: runs on the GPU machine (bash, no Rust toolchain there).
const RUN_SH: &str = r#"#!/usr/bin/env bash
# Generated by `cargo xtask gpu-bundle`: runs the bundled GPU tests on the GPU
# machine. Copy target/gpu-bundle/ there and run, from any folder:
#
#   run.sh [--bench] [filter...]
#
# * Every gpu_* test binary in bin/ runs with NCCL_TEST_REQUIRE_GPU=1 (a test
#   that cannot find the GPUs it needs fails instead of skipping) and
#   --test-threads=1 --nocapture (output as it happens, so a log cut off by
#   a timeout still shows what the hung test printed). NCCL_NVLS_ENABLE=0
#   stays exported: multicast must stay off on that machine.
# * GPUs are counted with `nvidia-smi -L` (0 without nvidia-smi; at most as
#   many as CUDA_VISIBLE_DEVICES names when it is set). With fewer than 2,
#   tests whose names contain `multi_gpu` are skipped by name, each listed.
# * Filters (and any other arguments) go to every binary: libtest name
#   filters, or criterion filters with --bench. With --bench the criterion
#   benches run too, after the tests.
# * GPU_TEST_TIMEOUT (seconds, default 540; 0 for none) bounds each test
#   binary; one that runs over counts as failed.
# * With $OUT set, the whole log is also written to $OUT/gpu-tests.log.
#
# Counting: passed and failed come from each binary's libtest `test result:`
# line. A passing test whose output has a line starting with `SKIP:` counts as
# skipped, not passed; so do tests skipped by name and ignored tests. A
# binary that ends without a `test result:` line (a crash, a timeout) counts
# as one failure (its tests are not counted); one that exits non-zero after
# a result line with no failures (a crash at exit) counts as one more.
# Each bench binary counts as one test, passed if it exits 0.
# The last line is `N passed, N failed, N skipped`; the exit status is
# non-zero if anything failed or if no test ran at all.
set -uo pipefail

HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
BIN="$HERE/bin"
# bin/<package>-<target>, by role.
TESTS=(@TESTS@)
BENCHES=(@BENCHES@)
TOOLS=(@TOOLS@) # bundled for use by hand; run.sh does not run them

export NCCL_TEST_REQUIRE_GPU=1
export NCCL_NVLS_ENABLE=0
tmp="" # scratch folder of main(), removed on exit

usage() {
    sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

count_gpus() {
    local n=0
    if command -v nvidia-smi >/dev/null 2>&1; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    fi
    n=${n:-0}
    if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
        local -a visible=()
        IFS=',' read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"
        if ((${#visible[@]} < n)); then
            n=${#visible[@]}
        fi
    fi
    echo "$n"
}

# Names of the tests that passed although they printed a line starting with
# `SKIP:`, from a libtest log run with --nocapture and --test-threads=1 (a
# test's output follows `test NAME ... ` on the same or later lines).
reported_skips() {
    awk '
        /^test result: / { done = 1 }
        done { next }
        /^test .* \.\.\. / {
            current = substr($0, 6); rest = current
            sub(/ \.\.\. .*$/, "", current); sub(/^.* \.\.\. /, "", rest)
            if (rest ~ /^SKIP:/) skip[current] = 1
            next
        }
        /^failures:$/ { failures_list = 1; next }
        /^successes:$/ { failures_list = 0; next }
        failures_list && /^    [^ ]/ { failed[substr($0, 5)] = 1 }
        /^SKIP:/ && current != "" { skip[current] = 1 }
        END { for (name in skip) if (!(name in failed)) print name }
    ' "$1" | LC_ALL=C sort
}

run_limited() {
    local limit="${GPU_TEST_TIMEOUT:-540}"
    if [[ "$limit" != 0 ]] && command -v timeout >/dev/null 2>&1; then
        timeout --kill-after=10 "$limit" "$@"
    else
        "$@"
    fi
}

main() {
    local run_benches=0 arg
    local -a args=()
    for arg in "$@"; do
        if [[ "$arg" == --bench ]]; then
            run_benches=1
        else
            args+=("$arg")
        fi
    done

    tmp=$(mktemp -d)
    trap 'rm -rf -- "$tmp"' EXIT

    local passed=0 failed=0 skipped=0 ngpu
    ngpu=$(count_gpus)
    echo "==> $(date -u +%FT%TZ) $(hostname): $ngpu GPU(s); NCCL_TEST_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0; ${#TESTS[@]} test binaries, ${#BENCHES[@]} bench binaries"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>&1 | sed 's/^/    /'
        # How the GPUs are linked (NVLink, PCIe): the context of every
        # multi-GPU figure.
        if [[ "$ngpu" -gt 1 ]]; then
            nvidia-smi topo -m 2>&1 | sed 's/^/    /'
        fi
    fi

    local name exe rc result p f i n test
    local -a tests skip_args names
    for name in ${TESTS[@]+"${TESTS[@]}"}; do
        exe="$BIN/$name"
        echo
        echo "==> $name"
        if ! "$exe" --list --format terse ${args[@]+"${args[@]}"} >"$tmp/list" 2>&1; then
            cat "$tmp/list"
            echo "FAIL: $name: could not list its tests"
            failed=$((failed + 1))
            continue
        fi
        mapfile -t tests < <(sed -n 's/: test$//p' "$tmp/list")
        n=${#tests[@]}
        skip_args=()
        if ((ngpu < 2)); then
            for test in ${tests[@]+"${tests[@]}"}; do
                if [[ "$test" == *multi_gpu* ]]; then
                    echo "SKIP (needs 2+ GPUs, found $ngpu): $test"
                    skipped=$((skipped + 1))
                    n=$((n - 1))
                fi
            done
            skip_args=(--skip multi_gpu)
        fi
        if ((n == 0)); then
            echo "    nothing to run in $name"
            continue
        fi

        run_limited "$exe" --test-threads=1 --nocapture ${skip_args[@]+"${skip_args[@]}"} \
            ${args[@]+"${args[@]}"} 2>&1 | tee "$tmp/out"
        rc=${PIPESTATUS[0]}

        result=$(grep -E '^test result: ' "$tmp/out" | tail -n 1)
        if [[ -z "$result" ]]; then
            echo
            if ((rc == 124 || rc == 137)); then
                echo "FAIL: $name: timed out (GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-540}s) before its test result line"
            else
                echo "FAIL: $name: exited with status $rc without a test result line"
            fi
            failed=$((failed + 1))
            continue
        fi
        p=$(sed -E 's/.* ([0-9]+) passed;.*/\1/' <<<"$result")
        f=$(sed -E 's/.* ([0-9]+) failed;.*/\1/' <<<"$result")
        i=$(sed -E 's/.* ([0-9]+) ignored;.*/\1/' <<<"$result")
        mapfile -t names < <(reported_skips "$tmp/out")
        for test in ${names[@]+"${names[@]}"}; do
            echo "SKIP (reported by the test): $test"
        done
        if ((${#names[@]} > p)); then
            names=("${names[@]:0:p}")
        fi
        passed=$((passed + p - ${#names[@]}))
        failed=$((failed + f))
        skipped=$((skipped + i + ${#names[@]}))
        if ((rc != 0 && f == 0)); then
            echo "FAIL: $name: exited with status $rc although no test failed"
            failed=$((failed + 1))
        fi
    done

    if ((run_benches)); then
        if ((${#BENCHES[@]} == 0)); then
            echo
            echo "==> --bench: no bench binaries in this bundle"
        fi
        for name in ${BENCHES[@]+"${BENCHES[@]}"}; do
            echo
            echo "==> $name --bench"
            "$BIN/$name" --bench ${args[@]+"${args[@]}"} 2>&1
            rc=$?
            if ((rc == 0)); then
                passed=$((passed + 1))
            else
                echo "FAIL: $name: bench exited with status $rc"
                failed=$((failed + 1))
            fi
        done
    fi

    echo
    if ((passed + failed == 0)); then
        echo "FAIL: no test ran"
    fi
    echo "$passed passed, $failed failed, $skipped skipped"
    ((failed == 0 && passed + failed > 0))
}

case "${1:-}" in
-h | --help)
    usage
    exit 0
    ;;
esac

if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    main "$@" 2>&1 | tee "$OUT/gpu-tests.log"
    exit "${PIPESTATUS[0]}"
fi
main "$@"
"#;
