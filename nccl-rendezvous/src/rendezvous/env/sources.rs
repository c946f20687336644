//! The one table of where each launch quantity is read, and how the
//! sources of one quantity are weighed against each other.
//!
//! Each quantity has sources in order of precedence, grouped by the
//! launcher family that sets them. Of each live family the first source
//! set counts (later ones of the same family are older or rarer names);
//! the first family's value wins, and every other live family's value must
//! equal it. A family is not live when this process cannot be one of its
//! tasks (Slurm's outside a job step), or when a launcher nested inside it
//! renumbered the processes: [`Sources::new`] decides, by the rules of
//! docs/environment.md, "Nested launchers".

use super::{Vars, parse_int, slurm};
use crate::Result;
use crate::rendezvous::{Launcher, config_error};

/// The launcher families, in order of precedence: the innermost launcher
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    /// `RANK`, `WORLD_SIZE`, ...: torchrun's names, also set by hand or by
    /// nccl-launch.
    Torchrun,
    OpenMpi,
    Pmi,
    Slurm,
}

const FAMILIES: [Family; 4] = [
    Family::Torchrun,
    Family::OpenMpi,
    Family::Pmi,
    Family::Slurm,
];

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Torchrun => "torchrun",
            Family::OpenMpi => "Open MPI",
            Family::Pmi => "PMI",
            Family::Slurm => "Slurm",
        }
    }
}

/// How a source's value is read.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// A decimal count.
    Count,
    /// This node's entry of Slurm's compressed tasks-per-node list.
    SlurmTasksOnNode,
}

/// One variable a quantity is read from.
#[derive(Debug)]
pub(super) struct Source {
    pub(super) var: &'static str,
    pub(super) family: Family,
    form: Form,
}

const fn count(var: &'static str, family: Family) -> Source {
    Source {
        var,
        family,
        form: Form::Count,
    }
}

/// A launch quantity: its name in the documentation table, its sources in
/// order of precedence, and what its values are (completing "is not ...").
#[derive(Debug)]
pub(super) struct Quantity {
    pub(super) name: &'static str,
    pub(super) sources: &'static [Source],
    pub(super) what: &'static str,
}

use Family::{OpenMpi, Pmi, Slurm, Torchrun};

/// The number of processes.
pub(super) const WORLD_SIZE: Quantity = Quantity {
    name: "world size",
    sources: &[
        count("WORLD_SIZE", Torchrun),
        count("OMPI_COMM_WORLD_SIZE", OpenMpi),
        count("PMI_SIZE", Pmi),
        count("SLURM_NTASKS", Slurm),
    ],
    what: "a positive integer (the number of processes)",
};

/// This process's rank.
pub(super) const RANK: Quantity = Quantity {
    name: "rank",
    sources: &[
        count("RANK", Torchrun),
        count("OMPI_COMM_WORLD_RANK", OpenMpi),
        count("PMI_RANK", Pmi),
        count("PMI_ID", Pmi),
        count("SLURM_PROCID", Slurm),
    ],
    what: "a non-negative integer",
};

/// The number of processes on this host.
pub(super) const LOCAL_WORLD_SIZE: Quantity = Quantity {
    name: "local world size",
    sources: &[
        count("LOCAL_WORLD_SIZE", Torchrun),
        count("OMPI_COMM_WORLD_LOCAL_SIZE", OpenMpi),
        count("MPI_LOCALNRANKS", Pmi),
        count("PMI_LOCAL_SIZE", Pmi),
        Source {
            var: slurm::TASKS_PER_NODE_VAR,
            family: Slurm,
            form: Form::SlurmTasksOnNode,
        },
    ],
    what: "a positive integer",
};

/// This process's rank on its host.
pub(super) const LOCAL_RANK: Quantity = Quantity {
    name: "local rank",
    sources: &[
        count("LOCAL_RANK", Torchrun),
        count("OMPI_COMM_WORLD_LOCAL_RANK", OpenMpi),
        count("MPI_LOCALRANKID", Pmi),
        count("PMI_LOCAL_RANK", Pmi),
        count("SLURM_LOCALID", Slurm),
    ],
    what: "a non-negative integer",
};

/// This host's index among the job's hosts.
pub(super) const NODE_RANK: Quantity = Quantity {
    name: "node rank",
    sources: &[
        count("GROUP_RANK", Torchrun),
        count(slurm::NODE_ID_VAR, Slurm),
    ],
    what: "a non-negative integer",
};

impl Quantity {
    /// The quantity's variable in torchrun's names, which a launcher sets
    /// (`RANK`, `GROUP_RANK`, ...).
    pub(super) fn torchrun_var(&self) -> &'static str {
        self.sources
            .iter()
            .find(|source| source.family == Torchrun)
            .map_or(self.name, |source| source.var)
    }
}

/// Every quantity, in the order of the documentation table.
#[cfg(test)]
pub(super) const QUANTITIES: [&Quantity; 5] = [
    &RANK,
    &WORLD_SIZE,
    &LOCAL_RANK,
    &LOCAL_WORLD_SIZE,
    &NODE_RANK,
];

/// The variable that marks a process torchrun's agent started.
pub(super) const TORCHRUN_RUN_ID_VAR: &str = "TORCHELASTIC_RUN_ID";

/// A quantity's value and the variable it was read from.
#[derive(Debug, Clone)]
pub(super) struct Reading {
    pub(super) var: &'static str,
    pub(super) family: Family,
    pub(super) value: usize,
    /// The value as messages show it.
    pub(super) shown: String,
}

/// Whether a family's rank or world size variable is set: what makes the
/// family's launcher present (a local rank alone is no launch).
fn numbering_set(vars: &Vars<'_>, family: Family) -> bool {
    [&RANK, &WORLD_SIZE]
        .iter()
        .flat_map(|q| q.sources.iter())
        .any(|s| s.family == family && vars.is_set(s.var))
}

/// The launch variables, with the families that count in them.
pub(super) struct Sources<'v, 'f> {
    vars: &'v Vars<'f>,
    live: [bool; FAMILIES.len()],
}

impl<'v, 'f> Sources<'v, 'f> {
    /// Decides which families count: torchrun's always; no other under
    /// torchrun's agent (`TORCHELASTIC_RUN_ID` set), whose workers' numbers
    /// are its own; PMI's and Slurm's not under mpirun (Open MPI's
    /// numbering set); Slurm's only in a job step, and not beside a PMI
    /// numbering other than Slurm's own (mpiexec in an allocation).
    pub(super) fn new(vars: &'v Vars<'f>) -> Self {
        let set = |family: Family| numbering_set(vars, family);
        let torchrun_agent = vars.is_set(TORCHRUN_RUN_ID_VAR);
        let open_mpi = set(OpenMpi);
        let trimmed = |names: &[&'static str]| vars.first(names).map(|(_, v)| v.trim().to_owned());
        let pmi_is_slurms = trimmed(&["PMI_RANK", "PMI_ID"]) == trimmed(&["SLURM_PROCID"])
            && trimmed(&["PMI_SIZE"]) == trimmed(&["SLURM_NTASKS"]);
        let renumbered_slurm = open_mpi || (set(Pmi) && !pmi_is_slurms);
        Sources {
            vars,
            live: [
                true,
                !torchrun_agent,
                !torchrun_agent && !open_mpi,
                !torchrun_agent && !renumbered_slurm && slurm::in_job_step(vars),
            ],
        }
    }

    fn is_live(&self, family: Family) -> bool {
        FAMILIES
            .iter()
            .position(|f| *f == family)
            .is_some_and(|i| self.live[i])
    }

    /// The launcher whose variables define this launch: torchrun's agent
    /// when `TORCHELASTIC_RUN_ID` is set, else the first live launcher
    /// family with a rank or world size variable set, else
    /// [`Launcher::Manual`] when `RANK` or `WORLD_SIZE` is.
    ///
    /// Variables set by hand beside a launcher's must agree with them, so the
    /// launch is the launcher's; a PMI numbering beside a live Slurm one equals
    /// it, and is Slurm's own (`srun --mpi=pmi2`).
    pub(super) fn launcher(&self) -> Option<Launcher> {
        let has = |family: Family| self.is_live(family) && numbering_set(self.vars, family);
        let by_hand = has(Torchrun);
        if by_hand && self.vars.is_set(TORCHRUN_RUN_ID_VAR) {
            return Some(Launcher::Torchrun);
        }
        if has(OpenMpi) {
            Some(Launcher::OpenMpi)
        } else if has(Slurm) {
            Some(Launcher::Slurm)
        } else if has(Pmi) {
            Some(Launcher::Pmi)
        } else {
            by_hand.then_some(Launcher::Manual)
        }
    }

    /// The quantity's value: the first live family's, checked against
    /// every other live family's; `None` when no live source is set.
    ///
    /// Values above `max` are refused.
    pub(super) fn read(&self, quantity: &Quantity, max: usize) -> Result<Option<Reading>> {
        let mut readings = Vec::new();
        for family in FAMILIES {
            if !self.is_live(family) {
                continue;
            }
            let first_set = quantity
                .sources
                .iter()
                .filter(|s| s.family == family)
                .find_map(|s| self.vars.get(s.var).map(|raw| (s, raw)));
            if let Some((source, raw)) = first_set
                && let Some(reading) = self.reading(quantity, source, &raw, max)?
            {
                readings.push(reading);
            }
        }
        let Some((winner, others)) = readings.split_first() else {
            return Ok(None);
        };
        if let Some(other) = others.iter().find(|r| r.value != winner.value) {
            return Err(config_error(
                winner.var,
                format!(
                    "{}={} and {}={} disagree: {}'s and {}'s launch variables are both set; \
                     unset one of them, or make them equal",
                    winner.var,
                    winner.shown,
                    other.var,
                    other.shown,
                    winner.family.name(),
                    other.family.name()
                ),
            ));
        }
        Ok(Some(winner.clone()))
    }

    fn reading(
        &self,
        quantity: &Quantity,
        source: &Source,
        raw: &str,
        max: usize,
    ) -> Result<Option<Reading>> {
        let (shown, value) = match source.form {
            Form::Count => {
                let value = parse_int(source.var, raw, quantity.what, max)?;
                (value.to_string(), value)
            }
            Form::SlurmTasksOnNode => match slurm::local_tasks(self.vars, max)? {
                Some(found) => found,
                None => return Ok(None),
            },
        };
        Ok(Some(Reading {
            var: source.var,
            family: source.family,
            value,
            shown,
        }))
    }

    /// "RANK is not set (nor ...)": the quantity's first source, the others
    /// in order, and why Slurm's did not count when they are there.
    pub(super) fn not_set(&self, quantity: &Quantity, advice: &str) -> crate::StoreError {
        let (first, rest) = match quantity.sources.split_first() {
            Some((first, rest)) => (first.var, rest),
            None => (quantity.name, &[][..]),
        };
        let others: Vec<String> = rest
            .iter()
            .map(|s| match s.family {
                Slurm => format!("{} in a Slurm job step", s.var),
                _ => s.var.to_owned(),
            })
            .collect();
        config_error(
            first,
            format!(
                "{first} is not set (nor {}); {advice}{}",
                others.join(", "),
                slurm::outside_step_hint(self.vars)
            ),
        )
    }
}
