//! What only Slurm's variables tell: whether this process is a task that
//! `srun` started, how many tasks its node runs, and where rank 0 is.

use super::hostlist::HostList;
use super::{Vars, parse_int};
use crate::Result;
use crate::rendezvous::config_error;

/// The step id variables, the current name first.
pub(super) const STEP_ID_VARS: [&str; 2] = ["SLURM_STEP_ID", "SLURM_STEPID"];
/// The job id variables, the current name first.
pub(super) const JOB_ID_VARS: [&str; 2] = ["SLURM_JOB_ID", "SLURM_JOBID"];
/// The node lists, in the order rank 0's host is looked for: the step's
/// own first (rank 0 is the step's task 0, on the step's first node), then
/// the lists a step shares with its job.
pub(super) const NODE_LIST_VARS: [&str; 3] = [
    "SLURM_STEP_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NODELIST",
];
/// The address of the host `srun` ran on: rank 0's host only when no node
/// list says better (`srun` may run on a login node).
pub(super) const LAUNCH_NODE_VAR: &str = "SLURM_LAUNCH_NODE_IPADDR";
/// The step's node index, which picks this node's entry of
/// [`TASKS_PER_NODE_VAR`].
pub(super) const NODE_ID_VAR: &str = "SLURM_NODEID";
/// The step's tasks per node, compressed (`2(x3),1`).
pub(super) const TASKS_PER_NODE_VAR: &str = "SLURM_STEP_TASKS_PER_NODE";

/// The highest id of a step that `srun` starts; above it are Slurm's
/// special steps (`SLURM_MAX_NORMAL_STEP_ID` in `slurm.h`).
const MAX_NORMAL_STEP_ID: u64 = 0xffff_fff0;

/// Whether this process is a task of a job step `srun` started: the step
/// id is the number of a normal step.
///
/// A batch script (`SLURM_STEP_ID=-5` or unset, by Slurm version), the
/// interactive step (`4294967290`) and an allocation's shell have Slurm's task
/// variables too, for one process that is not part of a launch.
pub(super) fn in_job_step(vars: &Vars<'_>) -> bool {
    vars.first(&STEP_ID_VARS)
        .and_then(|(_, raw)| raw.trim().parse::<u64>().ok())
        .is_some_and(|id| id <= MAX_NORMAL_STEP_ID)
}

/// A sentence for "not set" errors when Slurm's task variables are there
/// but this process is not a task `srun` started; empty otherwise.
pub(super) fn outside_step_hint(vars: &Vars<'_>) -> String {
    if in_job_step(vars) || !(vars.is_set("SLURM_PROCID") || vars.is_set("SLURM_NTASKS")) {
        return String::new();
    }
    let step = match vars.first(&STEP_ID_VARS) {
        Some((name, raw)) => format!("{name}={raw:?} is not a step srun started"),
        None => "SLURM_STEP_ID is not set".to_owned(),
    };
    format!(
        ". Slurm's task variables are set, but {step}: this is a batch script or an \
         allocation's shell, one process; start the program with srun"
    )
}

/// The count `tasks_per_node` (`SLURM_STEP_TASKS_PER_NODE`, e.g. `2(x3),1`:
/// two tasks on each of three nodes, then one) gives node `node`.
pub(super) fn tasks_on_node(tasks_per_node: &str, node: usize) -> Result<usize> {
    let var = TASKS_PER_NODE_VAR;
    let malformed = |problem: String| {
        config_error(
            var,
            format!(
                "{var}={tasks_per_node:?} is not a list of task counts per node such as \
                 2(x3),1: {problem}"
            ),
        )
    };
    // Every item is checked, not only those up to `node`: a malformed list
    // is an error wherever it is malformed.
    let mut first_node = 0usize;
    let mut found = None;
    for item in tasks_per_node.trim().split(',') {
        let (count, repeats) = match item.split_once("(x") {
            None => (item, "1"),
            Some((count, rest)) => match rest.strip_suffix(')') {
                Some(repeats) => (count, repeats),
                None => return Err(malformed(format!("{item:?} lacks its closing ')'"))),
            },
        };
        let parse = |digits: &str| {
            digits
                .parse::<usize>()
                .ok()
                .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| malformed(format!("{digits:?} in {item:?} is not a count")))
        };
        let (count, repeats) = (parse(count)?, parse(repeats)?);
        let next_first = first_node.saturating_add(repeats);
        if found.is_none() && node < next_first {
            found = Some(count);
        }
        first_node = next_first;
    }
    found.ok_or_else(|| {
        config_error(
            var,
            format!(
                "{var}={tasks_per_node:?} lists {first_node} nodes, but {NODE_ID_VAR}={node} \
             (nodes count from 0)"
            ),
        )
    })
}

/// Rank 0's host from Slurm's variables: the first host of the first node
/// list set (see [`NODE_LIST_VARS`]), else the launch node's address;
/// `None` when neither is set.
pub(super) fn rank0_host(vars: &Vars<'_>) -> Result<Option<String>> {
    if let Some((var, list)) = vars.first(&NODE_LIST_VARS) {
        let parsed = HostList::parse(&list).map_err(|e| {
            config_error(
                var,
                format!(
                    "{var}={list:?} is not a Slurm host list: {e}; expected host names and \
                     bracketed ranges such as node[01-04,7]"
                ),
            )
        })?;
        if let Some(first) = parsed.hosts().next() {
            return Ok(Some(first));
        }
    }
    Ok(vars
        .get(LAUNCH_NODE_VAR)
        .map(|raw| raw.trim().to_owned())
        .filter(|addr| !addr.is_empty()))
}

/// This node's task count, when the step says it and which node this is.
pub(super) fn local_tasks(vars: &Vars<'_>, max: usize) -> Result<Option<(String, usize)>> {
    let (Some(list), Some(node_raw)) = (vars.get(TASKS_PER_NODE_VAR), vars.get(NODE_ID_VAR)) else {
        return Ok(None);
    };
    let node = parse_int(NODE_ID_VAR, &node_raw, "a non-negative integer", max)?;
    let count = tasks_on_node(&list, node)?;
    Ok(Some((format!("{list:?} ({count} on node {node})"), count)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreError;

    fn message(e: StoreError) -> String {
        match e {
            StoreError::Config { var, message } => {
                assert_eq!(var, TASKS_PER_NODE_VAR);
                message
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn compressed_task_counts() {
        for (node, count) in [(0, 2), (2, 2), (3, 1)] {
            assert_eq!(tasks_on_node("2(x3),1", node).unwrap(), count);
        }
        assert_eq!(tasks_on_node("4", 0).unwrap(), 4);
        assert_eq!(tasks_on_node("1(x2)", 1).unwrap(), 1);
        let past = message(tasks_on_node("2(x3),1", 4).unwrap_err());
        assert!(past.contains("lists 4 nodes, but SLURM_NODEID=4"), "{past}");
        for bad in ["2(x", "2(x3", "x", "", "2(x-1)", "+2", "2,,1"] {
            let m = message(tasks_on_node(bad, 0).unwrap_err());
            assert!(
                m.starts_with(&format!("{TASKS_PER_NODE_VAR}={bad:?} is not")),
                "{m}"
            );
        }
    }

    #[test]
    fn job_steps_and_special_steps() {
        let step = |value: &'static str| {
            move |name: &str| (name == "SLURM_STEP_ID").then(|| value.to_owned())
        };
        for (value, launched) in [
            ("0", true),
            ("17", true),
            ("4294967280", true),
            ("-5", false),
            ("4294967290", false),
            ("4294967291", false),
            ("", false),
            ("batch", false),
        ] {
            let get = step(value);
            assert_eq!(in_job_step(&Vars(&get)), launched, "SLURM_STEP_ID={value}");
        }
    }
}
