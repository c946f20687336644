//! Checks a real launcher end to end, on the CPU: started as every rank of
//! a launch (`srun`, `srun` inside an `sbatch` script, `mpirun`, torchrun,
//! or `RANK`/`WORLD_SIZE` by hand), each process reads its place with
//! `RendezvousConfig::from_env`, connects the store (rank 0 hosts the TCP
//! store), meets the others at a barrier and gathers every rank's view of
//! the launch (rank, world size, local rank, local world size, node rank,
//! launcher, namespace). Every rank then checks that the views agree:
//!
//! * one launcher, one world size (the number of ranks that met) and one
//!   key namespace;
//! * the ranks are 0..n, each held by one process (a rank claimed twice
//!   fails at once);
//! * on each node (its node rank, or its host name where the launcher
//!   gives none) the local ranks are 0..k, each once, and every local
//!   world size given is k; node ranks are given by every rank or by none,
//!   and are 0..m;
//! * what the command line expects: `--launcher srun|mpirun|torchrun|mpiexec|manual`,
//!   `--world-size N`, `--nodes N`.
//!
//! Rank 0 then prints `launch_check <launcher>: N ranks agree (...)` and
//! leaves last (it hosts the store). A disagreement ends every rank with
//! status 1 and a line naming it; bad arguments give status 2.
//!
//! ```text
//! cargo build -p nccl-rendezvous --example launch_check
//! mpirun --oversubscribe -np 4 target/debug/examples/launch_check --launcher mpirun --nodes 1
//! srun -N 2 --ntasks-per-node 2 target/debug/examples/launch_check --launcher srun --nodes 2
//! ```
//!
//! `NCCL_RS_STORE_TIMEOUT_SECS` bounds every wait (default 300).
//! `cargo xtask launchers` runs it under Slurm and Open MPI.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use nccl_rendezvous::meet::Meeting;
use nccl_rendezvous::{Launcher, RendezvousConfig, Store};
use serde::{Deserialize, Serialize};

/// The launchers by the name `--launcher` takes and the summary line shows.
const LAUNCHERS: [(&str, Launcher); 5] = [
    ("srun", Launcher::Slurm),
    ("mpirun", Launcher::OpenMpi),
    ("torchrun", Launcher::Torchrun),
    ("mpiexec", Launcher::Pmi),
    ("manual", Launcher::Manual),
];

const USAGE: &str = "usage: launch_check [--launcher srun|mpirun|torchrun|mpiexec|manual] \
                     [--world-size N] [--nodes N]  (started as every rank of a launch)";

fn launcher_name(launcher: Launcher) -> String {
    LAUNCHERS
        .iter()
        .find(|(_, known)| *known == launcher)
        .map_or_else(|| launcher.to_string(), |(name, _)| (*name).to_owned())
}

/// What the command line says the launch must be.
#[derive(Debug, Default)]
struct Expected {
    launcher: Option<String>,
    world_size: Option<usize>,
    nodes: Option<usize>,
}

impl Expected {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut expected = Expected::default();
        while let Some(flag) = args.next() {
            let mut value = || {
                args.next()
                    .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))
            };
            let count = |raw: String| {
                raw.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag} {raw:?} is not a positive count; {USAGE}"))
            };
            match flag.as_str() {
                "--launcher" => {
                    let name = value()?;
                    if !LAUNCHERS.iter().any(|(known, _)| *known == name) {
                        return Err(format!("--launcher {name:?} is not a launcher; {USAGE}"));
                    }
                    expected.launcher = Some(name);
                }
                "--world-size" => expected.world_size = Some(count(value()?)?),
                "--nodes" => expected.nodes = Some(count(value()?)?),
                _ => return Err(format!("unknown argument {flag:?}; {USAGE}")),
            }
        }
        Ok(expected)
    }
}

/// One rank's view of the launch, as it gathers it to the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct View {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    local_world_size: Option<usize>,
    node_rank: Option<usize>,
    launcher: String,
    namespace: String,
    host: String,
    pid: u32,
}

impl View {
    fn of(config: &RendezvousConfig) -> Result<Self, String> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_err(|e| format!("reading this host's name from /proc/sys/kernel/hostname: {e}"))?;
        Ok(View {
            rank: config.rank,
            world_size: config.world_size,
            local_rank: config.local_rank,
            local_world_size: config.local_world_size,
            node_rank: config.node_rank,
            launcher: launcher_name(config.launcher),
            namespace: config.namespace.clone(),
            host: host.trim().to_owned(),
            pid: std::process::id(),
        })
    }

    /// The node the view's rank runs on: its node rank, or its host.
    fn node(&self) -> String {
        match self.node_rank {
            Some(node) => format!("node {node}"),
            None => format!("host {}", self.host),
        }
    }
}

/// What every rank agreed on.
#[derive(Debug, PartialEq, Eq)]
struct Agreement {
    launcher: String,
    ranks: usize,
    nodes: usize,
    namespace: String,
}

/// Checks the gathered `views` (in rank order) against each other and
/// `expected`; the error names the first disagreement.
fn agree(views: &[View], expected: &Expected) -> Result<Agreement, String> {
    let first = views.first().ok_or("no rank's view was gathered")?;
    let ranks = views.len();
    let mut processes = BTreeMap::new();
    for (index, view) in views.iter().enumerate() {
        if view.rank != index {
            return Err(format!(
                "the view gathered as rank {index} is rank {}'s",
                view.rank
            ));
        }
        if view.world_size != ranks {
            return Err(format!(
                "rank {index} has world size {}, but {ranks} ranks met",
                view.world_size
            ));
        }
        for (what, mine, rank0) in [
            ("launcher", &view.launcher, &first.launcher),
            ("namespace", &view.namespace, &first.namespace),
        ] {
            if mine != rank0 {
                return Err(format!(
                    "rank {index} has {what} {mine:?}, rank 0 has {rank0:?}"
                ));
            }
        }
        if view.node_rank.is_some() != first.node_rank.is_some() {
            return Err(format!(
                "rank {index} has node rank {:?}, rank 0 has {:?}: a launcher gives every rank its node rank or none",
                view.node_rank, first.node_rank
            ));
        }
        if let Some(other) = processes.insert((view.host.as_str(), view.pid), index) {
            return Err(format!(
                "ranks {other} and {index} are one process (pid {} on {})",
                view.pid, view.host
            ));
        }
    }

    let mut nodes: BTreeMap<String, Vec<&View>> = BTreeMap::new();
    for view in views {
        nodes.entry(view.node()).or_default().push(view);
    }
    for (node, members) in &nodes {
        let local: BTreeSet<usize> = members.iter().map(|v| v.local_rank).collect();
        if local.len() != members.len() || local.iter().copied().ne(0..members.len()) {
            let ranks: Vec<_> = members.iter().map(|v| v.rank).collect();
            let locals: Vec<_> = members.iter().map(|v| v.local_rank).collect();
            return Err(format!(
                "{node} runs ranks {ranks:?} with local ranks {locals:?}; expected each of 0..{} once",
                members.len()
            ));
        }
        if let Some(view) = members
            .iter()
            .find(|v| v.local_world_size.is_some_and(|n| n != members.len()))
        {
            return Err(format!(
                "rank {} has local world size {:?}, but {} ranks met on {node}",
                view.rank,
                view.local_world_size,
                members.len()
            ));
        }
    }
    let node_ranks: BTreeSet<usize> = views.iter().filter_map(|v| v.node_rank).collect();
    if first.node_rank.is_some() && node_ranks.iter().copied().ne(0..node_ranks.len()) {
        return Err(format!(
            "the node ranks are {node_ranks:?}; expected 0..{}",
            node_ranks.len()
        ));
    }

    let agreement = Agreement {
        launcher: first.launcher.clone(),
        ranks,
        nodes: nodes.len(),
        namespace: first.namespace.clone(),
    };
    if let Some(launcher) = &expected.launcher
        && *launcher != agreement.launcher
    {
        return Err(format!(
            "the ranks were started by {}, expected {launcher}",
            agreement.launcher
        ));
    }
    if let Some(world_size) = expected.world_size
        && world_size != ranks
    {
        return Err(format!("{ranks} ranks met, expected {world_size}"));
    }
    if let Some(nodes) = expected.nodes
        && nodes != agreement.nodes
    {
        return Err(format!(
            "the {ranks} ranks ran on {} node(s), expected {nodes}",
            agreement.nodes
        ));
    }
    Ok(agreement)
}

/// `error` and its sources, such as the operating system's error under a
/// store's I/O error, on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Meets the other ranks and checks their views; returns the line rank 0
/// prints.
fn meet(
    meeting: &Meeting<Box<dyn Store>>,
    view: &View,
    expected: &Expected,
) -> Result<String, String> {
    let claims = meeting
        .store()
        .add(&format!("claim/{}", view.rank), 1)
        .map_err(|e| format!("claiming rank {}: {}", view.rank, chain(&e)))?;
    if claims > 1 {
        return Err(format!(
            "rank {} is held by {claims} processes; the launcher gave two processes one rank",
            view.rank
        ));
    }
    meeting
        .barrier("start")
        .map_err(|e| format!("at the barrier: {}", chain(&e)))?;
    let bytes = serde_json::to_vec(view).map_err(|e| format!("encoding this rank's view: {e}"))?;
    let views = meeting
        .all_gather("views", &bytes)
        .map_err(|e| format!("gathering the views: {}", chain(&e)))?
        .iter()
        .enumerate()
        .map(|(rank, bytes)| {
            serde_json::from_slice(bytes).map_err(|e| format!("rank {rank}'s view: {e}"))
        })
        .collect::<Result<Vec<View>, String>>()?;
    let agreement = agree(&views, expected)?;
    Ok(format!(
        "launch_check {}: {} ranks agree ({} node(s), namespace {})",
        agreement.launcher, agreement.ranks, agreement.nodes, agreement.namespace
    ))
}

/// This rank's part; `Some(line)` on rank 0.
fn run(expected: &Expected) -> Result<Option<String>, String> {
    let config = RendezvousConfig::from_env_if_launched()
        .map_err(|e| format!("reading the launch variables: {}", chain(&e)))?
        .ok_or_else(|| {
            "no launcher's variables are set: start every rank with srun, mpirun, torchrun, \
             or RANK and WORLD_SIZE"
                .to_owned()
        })?;
    let rank = config.rank;
    let view = View::of(&config)?;
    let store = config.connect().map_err(|e| {
        format!(
            "rank {rank}: connecting to the store {}: {}",
            config.store,
            chain(&e)
        )
    })?;
    let meeting = Meeting::new(store, rank, config.world_size)
        .map_err(|e| format!("rank {rank}: {}", chain(&e)))?;
    match meet(&meeting, &view, expected) {
        Ok(line) => {
            meeting
                .leave(0)
                .map_err(|e| format!("rank {rank}: leaving: {}", chain(&e)))?;
            Ok((rank == 0).then_some(line))
        }
        Err(message) => {
            let message = format!("rank {rank}: {message}");
            // The others stop waiting for this rank; their own errors follow.
            let _ = meeting.fail(&message, 1);
            Err(message)
        }
    }
}

fn main() -> ExitCode {
    let expected = match Expected::parse(std::env::args().skip(1)) {
        Ok(expected) => expected,
        Err(message) => {
            eprintln!("launch_check: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&expected) {
        Ok(line) => {
            if let Some(line) = line {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("launch_check: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `world` ranks of srun over nodes of `per_node` ranks each.
    fn srun(world: usize, per_node: usize) -> Vec<View> {
        (0..world)
            .map(|rank| View {
                rank,
                world_size: world,
                local_rank: rank % per_node,
                local_world_size: Some(per_node),
                node_rank: Some(rank / per_node),
                launcher: "srun".into(),
                namespace: "slurm.7.0.0".into(),
                host: "host".into(),
                pid: 100 + rank as u32,
            })
            .collect()
    }

    fn expected(launcher: &str, world_size: usize, nodes: usize) -> Expected {
        Expected {
            launcher: Some(launcher.into()),
            world_size: Some(world_size),
            nodes: Some(nodes),
        }
    }

    #[test]
    fn two_nodes_of_two_agree() {
        assert_eq!(
            agree(&srun(4, 2), &expected("srun", 4, 2)),
            Ok(Agreement {
                launcher: "srun".into(),
                ranks: 4,
                nodes: 2,
                namespace: "slurm.7.0.0".into()
            })
        );
    }

    #[test]
    fn ranks_without_node_ranks_are_grouped_by_host() {
        let mut views = srun(4, 2);
        for view in &mut views {
            view.node_rank = None;
            view.host = format!("host{}", view.rank / 2);
        }
        assert_eq!(agree(&views, &Expected::default()).unwrap().nodes, 2);
        views[2].host = "host0".into();
        assert_eq!(
            agree(&views, &Expected::default()).unwrap_err(),
            "host host0 runs ranks [0, 1, 2] with local ranks [0, 1, 0]; expected each of 0..3 once"
        );
    }

    /// A change to the views of a launch that agrees.
    type Change = fn(&mut Vec<View>);

    #[test]
    fn each_disagreement_is_named() {
        let cases: [(&str, Change); 8] = [
            ("the view gathered as rank 1 is rank 0's", |v| v[1].rank = 0),
            ("rank 3 has world size 3, but 4 ranks met", |v| {
                v[3].world_size = 3
            }),
            (
                "rank 2 has namespace \"slurm.8.0.0\", rank 0 has \"slurm.7.0.0\"",
                |v| v[2].namespace = "slurm.8.0.0".into(),
            ),
            ("rank 1 has launcher \"mpirun\", rank 0 has \"srun\"", |v| {
                v[1].launcher = "mpirun".into()
            }),
            ("ranks 0 and 3 are one process (pid 100 on host)", |v| {
                v[3].pid = 100
            }),
            (
                "node 1 runs ranks [2, 3] with local ranks [0, 0]; expected each of 0..2 once",
                |v| v[3].local_rank = 0,
            ),
            (
                "rank 0 has local world size Some(3), but 2 ranks met on node 0",
                |v| v[0].local_world_size = Some(3),
            ),
            ("the node ranks are {0, 2}; expected 0..2", |v| {
                v[2].node_rank = Some(2);
                v[3].node_rank = Some(2);
            }),
        ];
        for (message, change) in cases {
            let mut views = srun(4, 2);
            change(&mut views);
            assert_eq!(agree(&views, &Expected::default()).unwrap_err(), message);
        }
        let mut views = srun(4, 2);
        views[1].node_rank = None;
        assert!(
            agree(&views, &Expected::default())
                .unwrap_err()
                .starts_with("rank 1 has node rank None, rank 0 has Some(0)")
        );
    }

    #[test]
    fn expectations_are_checked() {
        let views = srun(4, 2);
        for (expect, message) in [
            (
                expected("mpirun", 4, 2),
                "the ranks were started by srun, expected mpirun",
            ),
            (expected("srun", 3, 2), "4 ranks met, expected 3"),
            (
                expected("srun", 4, 1),
                "the 4 ranks ran on 2 node(s), expected 1",
            ),
        ] {
            assert_eq!(agree(&views, &expect).unwrap_err(), message);
        }
    }

    #[test]
    fn arguments_are_parsed_or_refused_with_the_usage() {
        let parse = |args: &[&str]| Expected::parse(args.iter().map(|a| a.to_string()));
        let parsed = parse(&["--launcher", "mpirun", "--world-size", "4", "--nodes", "1"]).unwrap();
        assert_eq!(
            (parsed.launcher.as_deref(), parsed.world_size, parsed.nodes),
            (Some("mpirun"), Some(4), Some(1))
        );
        for (args, start) in [
            (
                &["--launcher", "slurm"][..],
                "--launcher \"slurm\" is not a launcher",
            ),
            (
                &["--nodes", "0"][..],
                "--nodes \"0\" is not a positive count",
            ),
            (&["--world-size"][..], "--world-size needs a value"),
            (&["-n", "4"][..], "unknown argument \"-n\""),
        ] {
            let message = parse(args).unwrap_err();
            assert!(message.starts_with(start), "{message}");
            assert!(message.contains(USAGE), "{message}");
        }
    }

    #[test]
    fn every_launcher_has_a_name() {
        for (name, launcher) in LAUNCHERS {
            assert_eq!(launcher_name(launcher), name);
        }
    }
}
