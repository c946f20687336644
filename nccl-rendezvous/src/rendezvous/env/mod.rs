//! Reading the launch variables of torchrun, Slurm, Open MPI and PMI
//! launchers into a [`RendezvousConfig`].
//!
//! * `sources`: the table of where each quantity is read and how its
//!   sources are weighed;
//! * `numbering`: the quantities read and checked against each other;
//! * `store`: the store, rank 0's address and port, timeout and secret;
//! * `export`: the other way, the variables a launcher sets for a place;
//! * `identity`: the key namespace and the ports job ids give;
//! * `slurm` and `hostlist`: what only Slurm's variables tell.

mod export;
mod hostlist;
mod identity;
mod numbering;
mod slurm;
mod sources;
mod store;
#[cfg(test)]
mod tests;

use super::{Launcher, RendezvousConfig, config_error};
use crate::Result;
use numbering::Numbering;
use sources::Sources;

/// The most processes NCCL accepts: its rank counts are C `int`s.
pub(super) const MAX_WORLD_SIZE: usize = i32::MAX as usize;

/// The launch variables, read through a function that returns a
/// variable's value or `None` when it is unset.
pub(super) struct Vars<'f>(&'f dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }

    fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The first of `names` that is set, with its value.
    fn first(&self, names: &[&'static str]) -> Option<(&'static str, String)> {
        names
            .iter()
            .find_map(|name| self.get(name).map(|value| (*name, value)))
    }
}

/// Parses a non-negative integer no greater than `max`; `what` completes
/// "is not ...".
fn parse_int(var: &str, raw: &str, what: &str, max: usize) -> Result<usize> {
    let digits = raw.trim();
    match digits.parse::<usize>() {
        Ok(value) if value <= max => Ok(value),
        Err(_) if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) => {
            Err(config_error(var, format!("{var}={raw:?} is not {what}")))
        }
        _ => Err(config_error(
            var,
            format!("{var}={raw:?} is above {max}, the most processes NCCL accepts"),
        )),
    }
}

impl RendezvousConfig {
    /// Reads the configuration through `var`, which returns a variable's
    /// value or `None` when it is unset.
    ///
    /// [`RendezvousConfig::from_env`] passes the process environment; tests
    /// pass a map. The variables, the order they are read in and what a
    /// conflict gives are in the table of [`RendezvousConfig`].
    ///
    /// Fails with [`StoreError::Config`](crate::StoreError::Config)
    /// naming the variable, the value seen and the form expected, e.g.
    /// `RANK="abc" is not a non-negative integer`, `RANK=4 must be below
    /// WORLD_SIZE=4`, or, when two launchers' variables for one quantity
    /// are both set to different values, `RANK=1 and SLURM_PROCID=7
    /// disagree` (but a launcher nested in another renumbers legitimately:
    /// torchrun's workers, `TORCHELASTIC_RUN_ID` set, under srun or mpirun;
    /// mpirun or mpiexec inside a Slurm allocation).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let vars = Vars(&var);
        let sources = Sources::new(&vars);
        let numbering = Numbering::read(&sources)?;
        let launcher = sources.launcher().unwrap_or(Launcher::Manual);
        let store = store::spec(&vars, launcher, &numbering)?;
        let timeout = store::timeout(&vars)?;
        let secret = store::secret(&vars)?;
        let allow_unauthenticated_remote = store::allow_unauthenticated(&vars)?;
        let namespace = identity::namespace(&vars, launcher, &store)?;
        Ok(RendezvousConfig {
            rank: numbering.rank,
            world_size: numbering.world_size,
            local_rank: numbering.local_rank,
            local_world_size: numbering.local_world_size,
            node_rank: numbering.node_rank,
            launcher,
            namespace,
            store,
            timeout,
            secret,
            allow_unauthenticated_remote,
        })
    }

    /// [`RendezvousConfig::from_vars`] over this process's environment.
    ///
    /// A value that is not valid UTF-8 is read lossily (and then fails to parse
    /// with a message that shows it).
    pub fn from_env() -> Result<Self> {
        Self::from_vars(env_var)
    }

    /// The launcher whose rank or world size variables `var` shows, as
    /// [`RendezvousConfig::from_vars`] weighs them; `None` when there are
    /// none, and the process runs alone.
    ///
    /// A launch is `RANK` or `WORLD_SIZE` (torchrun, nccl-launch, or by
    /// hand), `OMPI_COMM_WORLD_RANK` or `OMPI_COMM_WORLD_SIZE` (Open MPI),
    /// `PMI_RANK`, `PMI_ID` or `PMI_SIZE` (MPICH, Intel MPI, Cray), or
    /// `SLURM_PROCID` or `SLURM_NTASKS` in a job step srun started. A
    /// Slurm batch script or an allocation's shell is no launch: it is one
    /// process, though Slurm sets `SLURM_PROCID=0` there too. Programs that
    /// also run alone use this to decide, so that they decide as
    /// `from_vars` reads.
    pub fn detect_launcher(var: impl Fn(&str) -> Option<String>) -> Option<Launcher> {
        Sources::new(&Vars(&var)).launcher()
    }

    /// [`RendezvousConfig::from_vars`] when
    /// [`RendezvousConfig::detect_launcher`] finds a launch, `Ok(None)`
    /// when it finds none.
    pub fn from_vars_if_launched(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        if Self::detect_launcher(&var).is_none() {
            return Ok(None);
        }
        Self::from_vars(var).map(Some)
    }

    /// [`RendezvousConfig::from_vars_if_launched`] over this process's
    /// environment: `Ok(None)` for a program started on its own.
    pub fn from_env_if_launched() -> Result<Option<Self>> {
        Self::from_vars_if_launched(env_var)
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}
