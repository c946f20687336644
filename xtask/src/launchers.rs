//! `cargo xtask launchers`: the `launch_check` example of nccl-rendezvous
//! started by real launchers on this machine, on the CPU:
//!
//! 1. `mpirun --allow-run-as-root --oversubscribe -np 4` (Open MPI);
//! 2. `srun -N 1 -n 4`, on a Slurm cluster of this host alone that this
//!    task starts ([`slurm`]: munged, slurmctld and two slurmd, each a
//!    node of its own, from a generated slurm.conf in a temporary folder)
//!    and stops at the end, on failure too;
//! 3. `sbatch -N 1 -n 3` of a script that calls `srun` (`--wait`; the
//!    job's output file is read);
//! 4. `srun -N 2 --ntasks-per-node 2` over the two nodes (two slurmd of
//!    one host), with `MASTER_ADDR=127.0.0.1`: the node names are this
//!    host's, and no resolver knows them;
//! 5. `srun -N 1 -n 2` told to expect 2 nodes: it must fail, naming the
//!    disagreement, so that a check which cannot fail is never counted.
//!
//! Each launch runs under `timeout` and passes when it exits 0 and rank 0
//! printed `launch_check <launcher>: N ranks agree` (the fifth: when it
//! fails with the expected message). A launcher that is not installed, or
//! Slurm without root, is skipped with one line saying why; a cluster that
//! does not come up is a failure. Ends with `launchers: N passed, N failed,
//! N skipped` and fails when any check failed.

mod slurm;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use serde_json::Value;

use crate::{Result, on_path, workspace_root};

/// Every launch gets this long (`timeout`), then SIGKILL after
/// [`KILL_AFTER_SECS`] more.
const LAUNCH_TIMEOUT_SECS: u64 = 120;
const KILL_AFTER_SECS: u64 = 10;

/// `NCCL_RS_STORE_TIMEOUT_SECS` for the ranks: a rank that does not come
/// ends the others' waits well before [`LAUNCH_TIMEOUT_SECS`].
const STORE_TIMEOUT_SECS: &str = "60";

/// The variables `RendezvousConfig` reads, by prefix and by name: removed
/// from every launch's environment, so that only the launcher's own count
/// (CI itself may run inside a Slurm job, or under mpirun).
const LAUNCH_VAR_PREFIXES: [&str; 6] = [
    "SLURM_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "TORCHELASTIC_",
    "NCCL_RS_",
];
const LAUNCH_VARS: [&str; 9] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
];

#[derive(clap::Args)]
pub struct Args {}

/// What a launch must show to pass.
enum Expect {
    /// Exit 0, with rank 0's line for this launcher and world size.
    Agree {
        launcher: &'static str,
        ranks: usize,
    },
    /// Exit non-zero, with this disagreement named and no agreement line.
    Refuse(&'static str),
}

/// One launch of `launch_check`.
struct Launch {
    name: &'static str,
    /// The nodes it runs on: a Slurm launch needs that many up.
    nodes: usize,
    command: Vec<OsString>,
    env: Vec<(&'static str, &'static str)>,
    /// A file the launch writes its ranks' output to (sbatch's `-o`), read
    /// after it ends.
    output_file: Option<PathBuf>,
    expect: Expect,
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

impl Tally {
    fn skip(&mut self, name: &str, why: &str) {
        println!("SKIP: {name}: {why}");
        self.skipped += 1;
    }

    fn fail(&mut self, name: &str, why: &str) {
        println!("FAIL: {name}: {why}");
        self.failed += 1;
    }
}

pub fn run(_args: Args) -> Result<()> {
    let example = build_launch_check()?;
    let mut tally = Tally::default();

    let mpirun = Launch {
        name: "mpirun --oversubscribe -np 4",
        nodes: 1,
        command: command(
            &[
                "mpirun",
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                "4",
            ],
            &example,
            &["--launcher", "mpirun", "--world-size", "4", "--nodes", "1"],
        ),
        env: vec![],
        output_file: None,
        expect: Expect::Agree {
            launcher: "mpirun",
            ranks: 4,
        },
    };
    match on_path("mpirun") {
        Some(_) => run_launch(&mpirun, &[], &mut tally),
        None => tally.skip(
            mpirun.name,
            "mpirun is not installed (Debian: apt-get install openmpi-bin; .ci/run installs it as root)",
        ),
    }

    match slurm::unavailable() {
        Some(why) => {
            for name in SLURM_LAUNCH_NAMES {
                tally.skip(name, &why);
            }
        }
        None => run_on_slurm(&example, &mut tally)?,
    }

    println!(
        "launchers: {} passed, {} failed, {} skipped",
        tally.passed, tally.failed, tally.skipped
    );
    if tally.failed > 0 {
        return Err(format!("{} launcher check(s) failed", tally.failed).into());
    }
    Ok(())
}

/// The names of [`slurm_launches`], for skipping them all at once.
const SLURM_LAUNCH_NAMES: [&str; 4] = [
    "srun -N 1 -n 4",
    "sbatch -N 1 -n 3 (srun inside)",
    "srun -N 2 --ntasks-per-node 2",
    "srun -N 1 -n 2 expecting 2 nodes (must fail)",
];

/// The launches on the Slurm cluster; the batch script and its output go
/// in `dir`.
fn slurm_launches(example: &Path, dir: &Path) -> Result<Vec<Launch>> {
    let script = dir.join("launch_check.sbatch");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# One step of 3 tasks in a batch job: srun reads the job's allocation.\nexec srun '{}' --launcher srun --world-size 3 --nodes 1\n",
            example.display()
        ),
    )
    .map_err(|e| format!("could not write {}: {e}", script.display()))?;
    let output = dir.join("launch_check.sbatch.out");
    let mut sbatch = args(&["sbatch", "--wait", "-N", "1", "-n", "3", "-o"]);
    sbatch.extend([output.clone().into(), script.into()]);
    let [one_node, batch, two_nodes, refused] = SLURM_LAUNCH_NAMES;
    Ok(vec![
        Launch {
            name: one_node,
            nodes: 1,
            command: command(
                &["srun", "-N", "1", "-n", "4"],
                example,
                &["--launcher", "srun", "--world-size", "4", "--nodes", "1"],
            ),
            env: vec![],
            output_file: None,
            expect: Expect::Agree {
                launcher: "srun",
                ranks: 4,
            },
        },
        Launch {
            name: batch,
            nodes: 1,
            command: sbatch,
            env: vec![],
            output_file: Some(output),
            expect: Expect::Agree {
                launcher: "srun",
                ranks: 3,
            },
        },
        Launch {
            name: two_nodes,
            nodes: 2,
            command: command(
                &["srun", "-N", "2", "--ntasks-per-node", "2"],
                example,
                &["--launcher", "srun", "--world-size", "4", "--nodes", "2"],
            ),
            env: vec![("MASTER_ADDR", "127.0.0.1")],
            output_file: None,
            expect: Expect::Agree {
                launcher: "srun",
                ranks: 4,
            },
        },
        Launch {
            name: refused,
            nodes: 1,
            command: command(
                &["srun", "-N", "1", "-n", "2"],
                example,
                &["--launcher", "srun", "--nodes", "2"],
            ),
            env: vec![],
            output_file: None,
            expect: Expect::Refuse("the 2 ranks ran on 1 node(s), expected 2"),
        },
    ])
}

/// Starts the cluster, runs the Slurm launches on it and stops it (on
/// every path: the cluster's `Drop`).
fn run_on_slurm(example: &Path, tally: &mut Tally) -> Result<()> {
    let cluster = match slurm::Cluster::start() {
        Ok(cluster) => cluster,
        Err(error) => {
            println!("==> the Slurm cluster did not start: {error}");
            for name in SLURM_LAUNCH_NAMES {
                tally.fail(name, "the Slurm cluster did not start");
            }
            return Ok(());
        }
    };
    let failed_before = tally.failed;
    for launch in slurm_launches(example, cluster.dir())? {
        if launch.nodes > 1
            && let Some(why) = cluster.second_node_missing()
        {
            tally.skip(launch.name, why);
            continue;
        }
        run_launch(&launch, &cluster.env(), tally);
    }
    if tally.failed > failed_before {
        cluster.print_logs();
    }
    Ok(())
}

/// `launcher` with its arguments, then the example with its own.
fn command(launcher: &[&str], example: &Path, example_args: &[&str]) -> Vec<OsString> {
    let mut command = args(launcher);
    command.push(example.into());
    command.extend(args(example_args));
    command
}

fn args(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

/// The line rank 0 prints when the ranks agree (up to its details).
fn agreement_line(launcher: &str, ranks: usize) -> String {
    format!("launch_check {launcher}: {ranks} ranks agree")
}

/// Runs `launch` under `timeout` with the launch variables removed and
/// `cluster_env` and its own variables added; counts the outcome.
fn run_launch(launch: &Launch, cluster_env: &[(&str, OsString)], tally: &mut Tally) {
    println!("==> {}", shown(&launch.command));
    let mut command = Command::new("timeout");
    command
        .arg(format!("--kill-after={KILL_AFTER_SECS}"))
        .arg(LAUNCH_TIMEOUT_SECS.to_string())
        .args(&launch.command)
        .stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if LAUNCH_VARS.contains(&name_text.as_ref())
            || LAUNCH_VAR_PREFIXES.iter().any(|p| name_text.starts_with(p))
        {
            command.env_remove(&name);
        }
    }
    command
        .env("NCCL_RS_STORE_TIMEOUT_SECS", STORE_TIMEOUT_SECS)
        .envs(cluster_env.iter().map(|(k, v)| (k, v)))
        .envs(launch.env.iter().copied());
    let output = match command.output() {
        Ok(output) => output,
        Err(e) => return tally.fail(launch.name, &format!("could not run timeout: {e}")),
    };
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    if let Some(file) = &launch.output_file {
        match std::fs::read_to_string(file) {
            Ok(contents) => text.push_str(&contents),
            Err(e) => text.push_str(&format!("(no output file {}: {e})\n", file.display())),
        }
    }
    for line in text.lines() {
        println!("    {line}");
    }
    match verdict(&launch.expect, output.status, &text) {
        Ok(what) => {
            println!("PASS: {}: {what}", launch.name);
            tally.passed += 1;
        }
        Err(why) => tally.fail(launch.name, &why),
    }
}

/// Whether a launch that ended with `status` and printed `text` shows what
/// `expect` asks: `Ok` with what it showed, or `Err` with why not.
fn verdict(expect: &Expect, status: ExitStatus, text: &str) -> std::result::Result<String, String> {
    if matches!(status.code(), Some(124 | 137)) {
        return Err(format!(
            "still running after {LAUNCH_TIMEOUT_SECS} s, stopped by timeout ({status})"
        ));
    }
    match expect {
        Expect::Agree { launcher, ranks } => {
            let line = agreement_line(launcher, *ranks);
            if !status.success() {
                Err(format!("exited with {status}"))
            } else if !text.contains(&line) {
                Err(format!("exited 0 but printed no `{line}`"))
            } else {
                Ok(line)
            }
        }
        Expect::Refuse(message) => {
            if status.success() || text.contains("ranks agree") {
                Err(format!("{status}, but it had to fail naming `{message}`"))
            } else if !text.contains(message) {
                Err(format!("{status}, but without naming `{message}`"))
            } else {
                Ok(format!("refused, naming `{message}`"))
            }
        }
    }
}

/// A command line as a user would type it (arguments with spaces quoted).
fn shown(command: &[OsString]) -> String {
    command
        .iter()
        .map(|word| {
            let word = word.to_string_lossy();
            if word.contains(' ') {
                format!("'{word}'")
            } else {
                word.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Builds the example once (debug, as `cargo test` does) and returns its
/// path, as cargo reports it.
fn build_launch_check() -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let arguments = [
        "build",
        "-p",
        "nccl-rendezvous",
        "--example",
        "launch_check",
        "--message-format=json",
    ];
    println!("==> cargo {}", arguments[..5].join(" "));
    let output = Command::new(&cargo)
        .args(arguments)
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {}: {e}", cargo.to_string_lossy()))?;
    if !output.status.success() {
        return Err(format!(
            "building the launch_check example failed ({})",
            output.status
        )
        .into());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["target"]["name"] == "launch_check")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built the launch_check example but reported no executable".into())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    /// The status of a process that exited with `code`.
    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn an_agreement_passes_only_with_status_0_and_rank_0s_line() {
        let expect = Expect::Agree {
            launcher: "srun",
            ranks: 4,
        };
        let line = "launch_check srun: 4 ranks agree (1 node(s), namespace slurm.5.0.0)\n";
        assert_eq!(
            verdict(&expect, exited(0), line),
            Ok("launch_check srun: 4 ranks agree".to_owned())
        );
        let other = "launch_check srun: 3 ranks agree (1 node(s), namespace slurm.5.0.0)\n";
        for (status, text) in [(exited(1), line), (exited(0), other), (exited(0), "")] {
            assert!(
                verdict(&expect, status, text).is_err(),
                "{status}: {text:?}"
            );
        }
        let timed_out = verdict(&expect, exited(124), line).unwrap_err();
        assert!(timed_out.contains("stopped by timeout"), "{timed_out}");
    }

    #[test]
    fn a_refusal_passes_only_when_the_launch_fails_naming_it() {
        let expect = Expect::Refuse("the 2 ranks ran on 1 node(s), expected 2");
        let named = "launch_check: rank 0: the 2 ranks ran on 1 node(s), expected 2\n";
        assert!(verdict(&expect, exited(1), named).is_ok());
        for (status, text) in [
            (exited(0), named),
            (
                exited(1),
                "launch_check: rank 0: connecting to the store: refused\n",
            ),
            (exited(1), "launch_check srun: 2 ranks agree\n"),
        ] {
            assert!(
                verdict(&expect, status, text).is_err(),
                "{status}: {text:?}"
            );
        }
    }
}
