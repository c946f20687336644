//! `from_vars` over hand-made variable sets: every launcher's sources and
//! how they are weighed (`launchers`), every check and message, and the
//! documentation table against the source table (`checks`).

mod checks;
mod launchers;

use std::collections::HashMap;

use crate::rendezvous::RendezvousConfig;
use crate::{Result, StoreError};

pub(super) fn cfg(vars: &[(&str, &str)]) -> Result<RendezvousConfig> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    RendezvousConfig::from_vars(|n| map.get(n).cloned())
}

pub(super) const BASE: [(&str, &str); 4] = [
    ("RANK", "1"),
    ("WORLD_SIZE", "4"),
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "29500"),
];

/// A Slurm job step's task variables: task 5 of 8, local 1 of 2 on node 2.
pub(super) const SRUN: [(&str, &str); 8] = [
    ("SLURM_JOB_ID", "4242"),
    ("SLURM_STEP_ID", "0"),
    ("SLURM_PROCID", "5"),
    ("SLURM_NTASKS", "8"),
    ("SLURM_LOCALID", "1"),
    ("SLURM_NODEID", "2"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x4)"),
    ("SLURM_STEP_NODELIST", "gpu[07-10]"),
];

pub(super) fn with(
    base: &[(&'static str, &'static str)],
    overrides: &[(&'static str, &'static str)],
    remove: &[&str],
) -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<_> = base
        .iter()
        .copied()
        .filter(|(k, _)| !remove.contains(k) && !overrides.iter().any(|(o, _)| o == k))
        .collect();
    v.extend_from_slice(overrides);
    v
}

pub(super) fn base(
    overrides: &[(&'static str, &'static str)],
    remove: &[&str],
) -> Vec<(&'static str, &'static str)> {
    with(&BASE, overrides, remove)
}

/// Variables to set and to remove on [`BASE`], then the variable the error
/// names and its message.
pub(super) type ErrorCase = (
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
    &'static str,
    &'static str,
);

pub(super) fn err(vars: &[(&str, &str)]) -> (String, String) {
    match cfg(vars).unwrap_err() {
        StoreError::Config { var, message } => (var, message),
        other => panic!("expected a config error, got {other:?}"),
    }
}
