//! `RendezvousConfig::from_vars` over variable sets recorded from real
//! srun, mpirun, mpiexec and torchrun launches (`launch_envs/*.env`, each
//! citing where it was recorded), and over the mixes of them that a nested
//! or mistaken launch gives.
//!
//! A fixture is `NAME=VALUE` lines and `#` lines: `# source:` (at least
//! one: the page it was copied from, or the test that recorded it), `#
//! what:` (what was run), `# launch: slurm|torchrun|openmpi|pmi|
//! manual|none` (what `detect_launcher` must say), and either `# expect:
//! key=value ...` (rank, world, local_rank, local_world, node, addr, port,
//! namespace) or `# error: VAR | start of the message`.

use std::collections::HashMap;
use std::path::PathBuf;

use nccl_rendezvous::{Launcher, RendezvousConfig, StoreError, StoreSpec};

struct Fixture {
    name: String,
    vars: HashMap<String, String>,
    headers: Vec<(String, String)>,
}

impl Fixture {
    fn load(name: &str) -> Fixture {
        let path = dir().join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut vars = HashMap::new();
        let mut headers = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(header) = line.strip_prefix("# ") {
                let (key, value) = header
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("{name}: header {line:?} is not `# key: value`"));
                headers.push((key.to_owned(), value.to_owned()));
            } else {
                let (key, value) = line
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{name}: line {line:?} is not NAME=VALUE"));
                vars.insert(key.to_owned(), value.to_owned());
            }
        }
        Fixture {
            name: name.to_owned(),
            vars,
            headers,
        }
    }

    fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The variables, with `changes` applied (`None` removes one).
    fn with(&self, changes: &[(&str, Option<&str>)]) -> HashMap<String, String> {
        let mut vars = self.vars.clone();
        for (key, value) in changes {
            match value {
                Some(value) => vars.insert((*key).to_owned(), (*value).to_owned()),
                None => vars.remove(*key),
            };
        }
        vars
    }
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/launch_envs")
}

fn read(vars: &HashMap<String, String>) -> Result<RendezvousConfig, StoreError> {
    RendezvousConfig::from_vars(|n| vars.get(n).cloned())
}

fn config_error(result: Result<RendezvousConfig, StoreError>) -> (String, String) {
    match result {
        Err(StoreError::Config { var, message }) => (var, message),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

fn launcher_name(launcher: Option<Launcher>) -> &'static str {
    match launcher {
        None => "none",
        Some(Launcher::Torchrun) => "torchrun",
        Some(Launcher::Slurm) => "slurm",
        Some(Launcher::OpenMpi) => "openmpi",
        Some(Launcher::Pmi) => "pmi",
        Some(Launcher::Manual) => "manual",
        Some(other) => panic!("a launcher this test does not know: {other:?}"),
    }
}

/// The facts `# expect:` names, as the configuration gives them.
fn facts(c: &RendezvousConfig) -> HashMap<&'static str, String> {
    let optional = |v: Option<usize>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    let mut facts = HashMap::from([
        ("rank", c.rank.to_string()),
        ("world", c.world_size.to_string()),
        ("local_rank", c.local_rank.to_string()),
        ("local_world", optional(c.local_world_size)),
        ("node", optional(c.node_rank)),
        ("namespace", c.namespace.clone()),
    ]);
    if let StoreSpec::Tcp { addr, port } = &c.store {
        facts.insert("addr", addr.clone());
        facts.insert("port", port.to_string());
    }
    facts
}

fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .expect("the launch_envs folder")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".env"))
        .collect();
    names.sort();
    names
}

#[test]
fn every_recorded_launch_reads_as_expected() {
    let names = fixture_names();
    assert!(names.len() >= 7, "fixtures: {names:?}");
    for name in names {
        let f = Fixture::load(&name);
        assert!(
            f.headers
                .iter()
                .any(|(k, v)| k == "source" && !v.trim().is_empty()),
            "{name}: cites no source"
        );
        let launch = f
            .header("launch")
            .unwrap_or_else(|| panic!("{name}: no `# launch:`"));
        let detected = RendezvousConfig::detect_launcher(|n| f.vars.get(n).cloned());
        assert_eq!(launcher_name(detected), launch, "{name}: detect_launcher");
        match (f.header("expect"), f.header("error")) {
            (Some(expect), None) => {
                let c = read(&f.vars).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(launcher_name(Some(c.launcher)), launch, "{name}");
                let got = facts(&c);
                for pair in expect.split_whitespace() {
                    let (key, value) = pair.split_once('=').expect("key=value");
                    assert_eq!(
                        got.get(key).map(String::as_str),
                        Some(value),
                        "{name}: {key}"
                    );
                }
            }
            (None, Some(error)) => {
                let (var, start) = error.split_once(" | ").expect("VAR | message");
                let (got_var, message) = config_error(read(&f.vars));
                assert_eq!(got_var, var, "{name}: {message}");
                assert!(message.starts_with(start), "{name}: {message}");
            }
            _ => panic!(
                "{}: needs exactly one of `# expect:` and `# error:`",
                f.name
            ),
        }
    }
}

#[test]
fn the_same_launch_agrees_on_every_rank() {
    // Every task of the recorded srun step: the same namespace and store,
    // each its own rank.
    let f = Fixture::load("srun_one_node_four_tasks.env");
    let mut seen = Vec::new();
    for task in 0..4 {
        let task = task.to_string();
        let c = read(&f.with(&[
            ("SLURM_PROCID", Some(&task)),
            ("SLURM_LOCALID", Some(&task)),
        ]))
        .unwrap();
        assert_eq!(c.rank.to_string(), task);
        seen.push((c.namespace, c.store));
    }
    seen.dedup();
    assert_eq!(seen.len(), 1, "{seen:?}");
}

#[test]
fn mistaken_and_nested_mixes() {
    let srun = Fixture::load("srun_one_node_four_tasks.env");
    // A stale RANK exported in the shell that ran srun.
    let (var, message) = config_error(read(&srun.with(&[("RANK", Some("0"))])));
    assert_eq!(var, "RANK");
    assert_eq!(
        message,
        "RANK=0 and SLURM_PROCID=1 disagree: torchrun's and Slurm's launch variables are both \
         set; unset one of them, or make them equal"
    );
    // The recorded torchrun worker started by that srun task: torchrun's
    // numbering and store, whatever Slurm's says.
    let worker = Fixture::load("torchrun_worker_two_nodes.env");
    let mut nested = srun.vars.clone();
    nested.extend(worker.vars.clone());
    let c = read(&nested).unwrap();
    assert_eq!(
        (c.launcher, c.rank, c.world_size),
        (Launcher::Torchrun, 1, 2)
    );
    assert_eq!(c.namespace, "torchrun.none.0");
    // Without TORCHELASTIC_RUN_ID the same mix is a mistake.
    nested.remove("TORCHELASTIC_RUN_ID");
    let (var, message) = config_error(read(&nested));
    assert_eq!(var, "WORLD_SIZE");
    assert!(
        message.starts_with("WORLD_SIZE=2 and SLURM_NTASKS=4 disagree"),
        "{message}"
    );
    // The recorded mpirun ranks inside that Slurm step: mpirun renumbers.
    let mpirun = Fixture::load("ompi_mpirun_three_ranks.env");
    let mut in_allocation = srun.vars.clone();
    in_allocation.extend(mpirun.vars.clone());
    in_allocation.insert("MASTER_PORT".into(), "29500".into());
    let c = read(&in_allocation).unwrap();
    assert_eq!(
        (c.launcher, c.rank, c.world_size),
        (Launcher::OpenMpi, 1, 3)
    );
    assert!(matches!(c.store, StoreSpec::Tcp { ref addr, .. } if addr == "127.0.0.1"));
}

#[test]
fn the_recorded_batch_job_as_one_of_its_steps_would_see_it() {
    // The same job's variables inside a step srun started: a four-node
    // list, so rank 0's host is the list's first and the port the job's.
    let batch = Fixture::load("sbatch_batch_script.env");
    let c = read(&batch.with(&[("SLURM_STEP_ID", Some("0"))])).unwrap();
    assert_eq!((c.launcher, c.rank, c.world_size), (Launcher::Slurm, 0, 4));
    assert_eq!(
        c.store,
        StoreSpec::Tcp {
            addr: "gnode10".into(),
            port: 15505
        }
    );
    assert_eq!(c.namespace, "slurm.200505.0.0");
    // A requeued run of the job meets none of the first run's keys.
    let requeued = read(&batch.with(&[
        ("SLURM_STEP_ID", Some("0")),
        ("SLURM_RESTART_COUNT", Some("1")),
    ]))
    .unwrap();
    assert_eq!(requeued.namespace, "slurm.200505.0.1");
}
