//! `RendezvousConfig::from_vars` over the environments a real torchrun
//! gives its workers: `torchrun --standalone --nproc-per-node 2
//! --no-python` runs a shell that writes its environment, and both
//! workers' variables must read as ranks 0 and 1 of 2 of one torchrun run.
//!
//! Skips when `torchrun` is not on `PATH` (fails instead with
//! `NCCL_TEST_REQUIRE_TORCHRUN=1`). With `NCCL_RECORD_LAUNCH_ENVS=<dir>`
//! it also writes each worker's launch variables there as a fixture for
//! `launch_envs/` (add a `# source:` line naming where it was recorded).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nccl_rendezvous::{Launcher, RendezvousConfig};
use nccl_test_support::processes::{spawn_captured, wait_children};

/// The hang guard of a torchrun run (it starts and ends two workers): only
/// one that hangs outlasts it, however loaded the machine.
const DEADLINE: Duration = Duration::from_secs(120);

/// torchrun on `PATH`, or `None` after saying the test is skipped; fails
/// instead where `NCCL_TEST_REQUIRE_TORCHRUN=1` demands torchrun.
fn torchrun_or_skip() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join("torchrun"))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("NCCL_TEST_REQUIRE_TORCHRUN").is_none_or(|v| v != "1"),
            "NCCL_TEST_REQUIRE_TORCHRUN=1 but torchrun is not on PATH"
        );
        eprintln!("skipped: torchrun is not on PATH");
    }
    found
}

/// The variables `env -0` wrote to `file`.
fn read_env(file: &Path) -> HashMap<String, String> {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    String::from_utf8_lossy(&bytes)
        .split('\0')
        .filter_map(|entry| entry.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether `name` is one the launch reading looks at, or one torchrun sets
/// for its workers: what a fixture keeps.
fn launch_variable(name: &str) -> bool {
    [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ]
    .contains(&name)
        || [
            "TORCHELASTIC_",
            "SLURM_",
            "OMPI_",
            "PMI",
            "MPI_LOCAL",
            "NCCL_RS_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

fn record(dir: &Path, rank: usize, vars: &HashMap<String, String>, c: &RendezvousConfig) {
    let mut names: Vec<&String> = vars.keys().filter(|k| launch_variable(k)).collect();
    names.sort();
    let mut text = format!(
        "# source: recorded by nccl-rendezvous/tests/launch_env_torchrun.rs\n\
         # what: torchrun --standalone --nproc-per-node 2 --no-python, worker {rank}\n\
         # launch: torchrun\n\
         # expect: rank={rank} world=2 local_rank={rank} local_world=2 node=0 namespace={}\n",
        c.namespace
    );
    for name in names {
        text.push_str(&format!("{name}={}\n", vars[name]));
    }
    let file = dir.join(format!("torchrun_standalone_rank{rank}.env"));
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

#[test]
fn a_real_torchrun_launch_reads_as_torchrun() {
    let Some(torchrun) = torchrun_or_skip() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let mut torchrun = Command::new(torchrun);
    torchrun
        .args([
            "--standalone",
            "--nproc-per-node",
            "2",
            "--no-python",
            "sh",
            "-c",
            "env -0 > \"$ENV_DUMP_DIR/rank$RANK\"",
        ])
        .env("ENV_DUMP_DIR", out.path());
    finish_within_deadline(&mut torchrun, "torchrun --standalone of env dumps");

    let record_dir = std::env::var_os("NCCL_RECORD_LAUNCH_ENVS").map(PathBuf::from);
    let mut namespaces = Vec::new();
    for rank in 0..2 {
        let vars = read_env(&out.path().join(format!("rank{rank}")));
        let c = RendezvousConfig::from_vars(|n| vars.get(n).cloned())
            .unwrap_or_else(|e| panic!("worker {rank}: {e}"));
        assert_eq!(c.launcher, Launcher::Torchrun, "worker {rank}");
        let place = (c.rank, c.world_size, c.local_rank);
        assert_eq!(place, (rank, 2, rank), "worker {rank}");
        let node = (c.local_world_size, c.node_rank);
        assert_eq!(node, (Some(2), Some(0)), "worker {rank}");
        let run_id = &vars["TORCHELASTIC_RUN_ID"];
        assert!(c.namespace.starts_with("torchrun"), "{}", c.namespace);
        if let Some(dir) = &record_dir {
            record(dir, rank, &vars, &c);
        }
        namespaces.push((c.namespace, run_id.clone()));
    }
    assert_eq!(namespaces[0], namespaces[1], "both workers, one namespace");
}

/// Runs torchrun (`what`), which must exit successfully; past [`DEADLINE`]
/// it is killed and the test fails.
fn finish_within_deadline(torchrun: &mut Command, what: &str) {
    let ended = wait_children(vec![spawn_captured(torchrun)], DEADLINE, Duration::ZERO).remove(0);
    let status = ended.status.map_or_else(
        || format!("still running after {DEADLINE:?}, killed"),
        |status| status.to_string(),
    );
    assert!(
        ended.succeeded(),
        "{what}: {status}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        ended.stdout,
        ended.stderr
    );
}

/// A free TCP port on loopback, for torchrun's static rendezvous.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `torchrun <mode_args> --nproc-per-node 2 --no-python` over this
/// test binary's [`torchrun_store_worker`], bounded by [`DEADLINE`].
fn run_workers(torchrun: &Path, mode_args: &[String]) {
    let exe = std::env::current_exe().unwrap();
    let mut torchrun = Command::new(torchrun);
    torchrun
        .args(mode_args)
        .args(["--nproc-per-node", "2", "--no-python"])
        .arg(exe)
        .args([
            "--exact",
            "torchrun_store_worker",
            "--ignored",
            "--nocapture",
        ]);
    finish_within_deadline(&mut torchrun, &format!("torchrun {mode_args:?}"));
}

/// Under a real torchrun, static and `--standalone` rendezvous alike, both
/// workers join the agent's c10d store (rank 0 does not try to bind
/// `MASTER_PORT`, which the agent holds) and meet there: see
/// [`torchrun_store_worker`].
#[test]
fn real_torchrun_workers_meet_on_the_agent_store() {
    let Some(torchrun) = torchrun_or_skip() else {
        return;
    };
    let port = free_port().to_string();
    let static_rendezvous = ["--master-addr", "127.0.0.1", "--master-port", &port];
    run_workers(&torchrun, &static_rendezvous.map(String::from));
    run_workers(&torchrun, &["--standalone".to_owned()]);
}

/// One torchrun worker, started by
/// [`real_torchrun_workers_meet_on_the_agent_store`] (ignored otherwise):
/// reads the launch, joins the agent's store, writes its rank, reads the
/// other's, counts both in, and exits non-zero on any mismatch.
#[test]
#[ignore = "a torchrun worker: run by real_torchrun_workers_meet_on_the_agent_store"]
fn torchrun_store_worker() {
    let config = RendezvousConfig::from_env().expect("reading torchrun's variables");
    assert_eq!(config.launcher, Launcher::Torchrun);
    assert!(
        matches!(config.store, nccl_rendezvous::StoreSpec::TorchAgent { .. }),
        "{}",
        config.store
    );
    let store = config.connect().expect("joining the agent's store");
    let me = config.rank;
    let peer = 1 - me;
    store
        .set(&format!("rank{me}"), me.to_string().as_bytes())
        .unwrap();
    let seen = store.get(&format!("rank{peer}"), DEADLINE).unwrap();
    assert_eq!(seen, peer.to_string().as_bytes());
    let arrived = store.add("arrived", 1).unwrap();
    assert!((1..=2).contains(&arrived), "{arrived}");
    store.wait(&["rank0", "rank1"], DEADLINE).unwrap();
}
