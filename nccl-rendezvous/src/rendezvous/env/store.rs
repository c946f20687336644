//! The store settings: which store (`NCCL_RS_STORE`), rank 0's address and
//! port for the TCP store (`MASTER_ADDR`, `MASTER_PORT`, or what the
//! launcher's variables give), the timeout and the shared secret.

use std::path::PathBuf;
use std::time::Duration;

use super::identity::{OPEN_MPI_JOB_ID_VARS, derived_port};
use super::numbering::Numbering;
use super::{Vars, slurm};
use crate::rendezvous::{Launcher, StoreSpec, config_error};
use crate::{DEFAULT_TIMEOUT, Result};

/// The loopback address rank 0 is at when every rank is on this host.
const LOOPBACK: &str = "127.0.0.1";

/// Which store the ranks meet at: `tcp` or `file:<dir>`.
pub(super) const STORE_VAR: &str = "NCCL_RS_STORE";
/// Whether the TCP store is torchrun's agent's.
pub(super) const AGENT_STORE_VAR: &str = "TORCHELASTIC_USE_AGENT_STORE";
/// Rank 0's (or the agent's) host.
pub(super) const MASTER_ADDR_VAR: &str = "MASTER_ADDR";
/// Rank 0's (or the agent's) port.
pub(super) const MASTER_PORT_VAR: &str = "MASTER_PORT";

/// The store `NCCL_RS_STORE` names (`tcp`, the default, or
/// `file:<absolute directory>`), whitespace around it ignored.
pub(super) fn spec(
    vars: &Vars<'_>,
    launcher: Launcher,
    numbering: &Numbering,
) -> Result<StoreSpec> {
    let Some(raw) = vars.get(STORE_VAR) else {
        return tcp(vars, launcher, numbering);
    };
    let value = raw.trim();
    if value.eq_ignore_ascii_case("tcp") {
        return tcp(vars, launcher, numbering);
    }
    match value
        .strip_prefix("file:")
        .map(|dir| PathBuf::from(dir.trim()))
    {
        Some(dir) if dir.is_absolute() => Ok(StoreSpec::File { dir }),
        Some(dir) if !dir.as_os_str().is_empty() => Err(config_error(
            STORE_VAR,
            format!(
                "{STORE_VAR}={raw:?} names the relative directory {dir:?}: ranks started in \
                 different working directories would not meet; give an absolute path, \
                 file:/<directory every rank sees>"
            ),
        )),
        _ => Err(config_error(
            STORE_VAR,
            format!(
                "{STORE_VAR}={raw:?} is not a store kind; expected \"tcp\" (the default) \
                 or \"file:<directory>\" with an absolute directory every rank can see"
            ),
        )),
    }
}

fn tcp(vars: &Vars<'_>, launcher: Launcher, numbering: &Numbering) -> Result<StoreSpec> {
    let tcp = StoreSpec::Tcp {
        addr: master_addr(vars, launcher, numbering)?,
        port: master_port(vars, launcher)?,
    };
    torch_agent_store(vars, tcp)
}

/// The TCP store's address read as torchrun's agent store when
/// `TORCHELASTIC_USE_AGENT_STORE` is true (torchrun writes `True`; `true`
/// and `1` are accepted too): the agent already serves a c10d TCPStore
/// there, which every rank joins instead of rank 0 hosting one.
///
/// A file store is kept as it is.
fn torch_agent_store(vars: &Vars<'_>, store: StoreSpec) -> Result<StoreSpec> {
    const NAME: &str = AGENT_STORE_VAR;
    let Some(raw) = vars.get(NAME) else {
        return Ok(store);
    };
    let value = raw.trim();
    let use_agent = if value.eq_ignore_ascii_case("true") || value == "1" {
        true
    } else if value.eq_ignore_ascii_case("false") || value == "0" || value.is_empty() {
        false
    } else {
        return Err(config_error(
            NAME,
            format!(
                "{NAME}={raw:?} is not a boolean; expected True (as torchrun sets it), true or 1 \
                 to join torchrun's agent store, or False, false, 0 or empty not to"
            ),
        ));
    };
    Ok(match store {
        StoreSpec::Tcp { addr, port } if use_agent => StoreSpec::TorchAgent { addr, port },
        other => other,
    })
}

/// Every rank is on this host: the launcher says how many processes this
/// host runs, and that is all of them.
fn single_host(numbering: &Numbering) -> bool {
    numbering.local_world_size == Some(numbering.world_size)
}

fn master_addr(vars: &Vars<'_>, launcher: Launcher, numbering: &Numbering) -> Result<String> {
    const VAR: &str = MASTER_ADDR_VAR;
    if let Some(raw) = vars.get(VAR) {
        let trimmed = raw.trim();
        let unbracketed = trimmed
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(trimmed);
        if unbracketed.is_empty() || unbracketed.contains(char::is_whitespace) {
            return Err(config_error(
                VAR,
                format!("{VAR}={raw:?} is not a host name or IP address (of rank 0's host)"),
            ));
        }
        return Ok(unbracketed.to_owned());
    }
    let derivable = matches!(
        launcher,
        Launcher::Slurm | Launcher::OpenMpi | Launcher::Pmi
    );
    if derivable && single_host(numbering) {
        return Ok(LOOPBACK.to_owned());
    }
    let not_set = |how: &str| config_error(VAR, format!("{VAR} is not set; {how}"));
    match launcher {
        Launcher::Slurm => slurm::rank0_host(vars)?.ok_or_else(|| {
            not_set(
                "under srun it is the first host of SLURM_STEP_NODELIST (or SLURM_NODELIST, \
                 SLURM_JOB_NODELIST, SLURM_LAUNCH_NODE_IPADDR), and none of them is set; set \
                 MASTER_ADDR to rank 0's host, or use NCCL_RS_STORE=file:<directory>",
            )
        }),
        Launcher::OpenMpi => Err(not_set(&format!(
            "mpirun placed the ranks on more than one host ({}), so rank 0's host is not known \
             here; pass it to every rank: mpirun -x MASTER_ADDR=<rank 0's host> -x \
             MASTER_PORT=<free port> ..., or use NCCL_RS_STORE=file:<directory every host sees>",
            hosts_note(numbering)
        ))),
        Launcher::Pmi => Err(not_set(&format!(
            "mpiexec placed the ranks on more than one host ({}), so rank 0's host is not known \
             here; pass it to every rank: mpiexec -genv MASTER_ADDR <rank 0's host> -genv \
             MASTER_PORT <free port> ..., or use NCCL_RS_STORE=file:<directory every host sees>",
            hosts_note(numbering)
        ))),
        Launcher::Torchrun | Launcher::Manual => Err(not_set(
            "with the TCP store (NCCL_RS_STORE=tcp, the default) set it to the host name or IP \
             address of rank 0's host (torchrun sets it), or use NCCL_RS_STORE=file:<directory>",
        )),
    }
}

/// Why the ranks are not all on this host, for messages.
fn hosts_note(numbering: &Numbering) -> String {
    match numbering.local_world_size {
        Some(local) => format!(
            "{local} of the {} ranks run on this host",
            numbering.world_size
        ),
        None => "the launcher does not say how many ranks run on this host".to_owned(),
    }
}

fn master_port(vars: &Vars<'_>, launcher: Launcher) -> Result<u16> {
    const VAR: &str = MASTER_PORT_VAR;
    if let Some(raw) = vars.get(VAR) {
        return raw
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                config_error(
                    VAR,
                    format!("{VAR}={raw:?} is not a TCP port number (1-65535)"),
                )
            });
    }
    let job_id = match launcher {
        Launcher::Slurm => vars.first(&slurm::JOB_ID_VARS),
        Launcher::OpenMpi => vars.first(&OPEN_MPI_JOB_ID_VARS),
        Launcher::Pmi | Launcher::Torchrun | Launcher::Manual => None,
    };
    if let Some((_, id)) = job_id {
        return Ok(derived_port(&id));
    }
    let how = match launcher {
        Launcher::Slurm => {
            "under srun it is derived from SLURM_JOB_ID, which is not set either; set \
             MASTER_PORT to a free TCP port on rank 0's host (1-65535, e.g. 29500)"
        }
        Launcher::OpenMpi => {
            "under mpirun it is derived from the job id (OMPI_MCA_ess_base_jobid, \
             OMPI_MCA_orte_ess_jobid or PMIX_NAMESPACE), and none is set; pass a free TCP \
             port on rank 0's host: mpirun -x MASTER_PORT=29500 ..."
        }
        Launcher::Pmi => {
            "mpiexec (PMI) sets no job id to derive one from; pass a free TCP port on rank 0's \
             host: mpiexec -genv MASTER_PORT 29500 ..."
        }
        Launcher::Torchrun | Launcher::Manual => {
            "with the TCP store set it to a free TCP port on rank 0's host (1-65535, e.g. \
             29500; torchrun sets it)"
        }
    };
    Err(config_error(VAR, format!("{VAR} is not set; {how}")))
}

/// `NCCL_RS_STORE_TIMEOUT_SECS`, whole seconds above 0 (default 300).
pub(super) fn timeout(vars: &Vars<'_>) -> Result<Duration> {
    const VAR: &str = "NCCL_RS_STORE_TIMEOUT_SECS";
    let Some(raw) = vars.get(VAR) else {
        return Ok(DEFAULT_TIMEOUT);
    };
    raw.trim()
        .parse::<u64>()
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .ok_or_else(|| {
            config_error(
                VAR,
                format!("{VAR}={raw:?} is not a positive whole number of seconds (default 300)"),
            )
        })
}

/// `NCCL_RS_STORE_SECRET`: unset, or not empty.
pub(super) fn secret(vars: &Vars<'_>) -> Result<Option<String>> {
    const VAR: &str = "NCCL_RS_STORE_SECRET";
    match vars.get(VAR) {
        Some(s) if s.is_empty() => Err(config_error(
            VAR,
            format!(
                "{VAR} is set but empty; unset it to run without authentication, or set the \
                 same non-empty secret on every rank"
            ),
        )),
        other => Ok(other),
    }
}

/// `NCCL_RS_STORE_ALLOW_UNAUTHENTICATED`: `1`, `true` or `True` lets rank
/// 0's server take clients of other hosts without a secret; `0`, `false`,
/// `False`, empty or unset: clients of its own host only.
pub(super) fn allow_unauthenticated(vars: &Vars<'_>) -> Result<bool> {
    const VAR: &str = "NCCL_RS_STORE_ALLOW_UNAUTHENTICATED";
    let Some(raw) = vars.get(VAR) else {
        return Ok(false);
    };
    match raw.trim() {
        "1" => Ok(true),
        "0" | "" => Ok(false),
        value if value.eq_ignore_ascii_case("true") => Ok(true),
        value if value.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(config_error(
            VAR,
            format!(
                "{VAR}={raw:?} is not a boolean; expected 1 or true to let rank 0's TCP store \
                 take clients of other hosts without a secret (anyone who reaches the port can \
                 then read and write every key), or 0, false or empty not to"
            ),
        )),
    }
}
