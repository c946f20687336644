//! Who this run is: the key namespace that keeps one run's store keys from
//! another's (its forms are in docs/environment.md, "The key namespace"),
//! and the port a launcher's job id gives. The namespace is made of the
//! variables that name this attempt of this job: the same on every rank
//! of it, different for the next attempt.

use super::Vars;
use super::slurm::{JOB_ID_VARS, STEP_ID_VARS};
use super::store::STORE_VAR;
use crate::Result;
use crate::rendezvous::{Launcher, StoreSpec, config_error};

/// The variable that sets the namespace outright.
pub(super) const NAMESPACE_VAR: &str = "NCCL_RS_NAMESPACE";
/// The longest namespace: keys under it stay within the file store's limit
/// with room for the group's own.
pub(super) const MAX_NAMESPACE_LEN: usize = 48;
/// Open MPI's job id, by release: ORTE's (1.x to 4.x) and PRRTE's PMIx
/// namespace (5.x).
pub(super) const OPEN_MPI_JOB_ID_VARS: [&str; 3] = [
    "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_ess_jobid",
    "PMIX_NAMESPACE",
];
/// The lowest port [`derived_port`] gives, and how many it spreads over:
/// 15000 to 24999, as PyTorch Lightning derives one from `SLURM_JOB_ID`,
/// below Linux's ephemeral ports (32768 and up).
pub(super) const DERIVED_PORT_BASE: u16 = 15_000;
/// See [`DERIVED_PORT_BASE`].
pub(super) const DERIVED_PORT_SPAN: u16 = 10_000;

/// The 64-bit FNV-1a hash: small, fixed and the same on every host.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The port job `id` derives: `15000 + id % 10000` for a numeric id (so
/// 10000 consecutive jobs get distinct ports), the id's FNV-1a hash in
/// place of `id` otherwise.
pub(super) fn derived_port(id: &str) -> u16 {
    let id = id.trim();
    let number = id.parse::<u64>().unwrap_or_else(|_| fnv1a(id.bytes()));
    let offset = number % u64::from(DERIVED_PORT_SPAN);
    // `offset` is below 10000, so it fits, and the sum stays below 25000.
    DERIVED_PORT_BASE + u16::try_from(offset).unwrap_or(0)
}

fn plain(part: &str) -> bool {
    !part.is_empty()
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `launcher.part.part...`, or `launcher~hash` (see the module docs).
fn compose(launcher: &str, parts: &[String]) -> String {
    if parts.is_empty() {
        return launcher.to_owned();
    }
    let joined = format!("{launcher}.{}", parts.join("."));
    if parts.iter().all(|p| plain(p)) && joined.len() <= MAX_NAMESPACE_LEN {
        return joined;
    }
    let hash = fnv1a(parts.iter().flat_map(|p| p.bytes().chain([0x1f])));
    format!("{launcher}~{hash:016x}")
}

/// The key namespace of this run (see the module docs), meeting at
/// `store`: a file store, whose directory may outlive the run or serve
/// another at once, needs one that names the job, so without a launcher's
/// job id to derive it from (by hand, nccl-launch, mpiexec, an mpirun
/// without one) it must be set.
pub(super) fn namespace(vars: &Vars<'_>, launcher: Launcher, store: &StoreSpec) -> Result<String> {
    if let Some(raw) = vars.get(NAMESPACE_VAR) {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        if raw.is_empty() || raw.len() > MAX_NAMESPACE_LEN || !raw.bytes().all(allowed) {
            return Err(config_error(
                NAMESPACE_VAR,
                format!(
                    "{NAMESPACE_VAR}={raw:?} is not a key namespace; expected 1 to \
                     {MAX_NAMESPACE_LEN} characters of A-Z a-z 0-9 . _ - (the same on every \
                     rank, different for every run sharing a store)"
                ),
            ));
        }
        return Ok(raw);
    }
    let open_mpi_job = vars.first(&OPEN_MPI_JOB_ID_VARS);
    let names_no_job = match launcher {
        Launcher::Manual | Launcher::Pmi => true,
        Launcher::OpenMpi => open_mpi_job.is_none(),
        Launcher::Torchrun | Launcher::Slurm => false,
    };
    if names_no_job && let StoreSpec::File { dir } = store {
        return Err(config_error(
            NAMESPACE_VAR,
            format!(
                "{STORE_VAR}=file:{} needs {NAMESPACE_VAR}: no job id of a launcher names this \
                 run (launcher: {launcher}), so two runs sharing the directory would read each \
                 other's keys; set {NAMESPACE_VAR} to a name of this run, the \
                 same on every rank (1 to {MAX_NAMESPACE_LEN} of A-Z a-z 0-9 . _ -, e.g. \
                 NCCL_RS_NAMESPACE=train-20240501-1 in the script that starts the ranks)",
                dir.display()
            ),
        ));
    }
    let value = |names: &[&'static str], missing: &str| {
        vars.first(names)
            .map_or_else(|| missing.to_owned(), |(_, v)| v.trim().to_owned())
    };
    Ok(match launcher {
        Launcher::Torchrun => compose(
            "torchrun",
            &[
                value(&["TORCHELASTIC_RUN_ID"], ""),
                value(&["TORCHELASTIC_RESTART_COUNT"], "0"),
            ],
        ),
        Launcher::Slurm => compose(
            "slurm",
            &[
                value(&JOB_ID_VARS, ""),
                value(&STEP_ID_VARS, ""),
                value(&["SLURM_RESTART_COUNT"], "0"),
            ],
        ),
        Launcher::OpenMpi => match open_mpi_job {
            Some((_, id)) => compose("ompi", &[id.trim().to_owned()]),
            None => "ompi".to_owned(),
        },
        Launcher::Pmi => "pmi".to_owned(),
        Launcher::Manual => "manual".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ports_stay_in_range() {
        assert_eq!(derived_port("901593"), 16593);
        assert_eq!(derived_port("200505"), 15505);
        assert_eq!(derived_port("10000"), 15000);
        assert_eq!(derived_port(" 9999 "), 24999);
        for id in ["prterun-host-1234@1", "", "18446744073709551615", "x"] {
            let port = derived_port(id);
            assert!((15000..25000).contains(&port), "{id:?}: {port}");
            assert_eq!(port, derived_port(id), "deterministic");
        }
        assert_ne!(derived_port("prterun-a-1@1"), derived_port("prterun-a-2@1"));
    }

    #[test]
    fn namespaces_plain_or_hashed() {
        let s = |v: &[&str]| v.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            compose("slurm", &s(&["901593", "0", "0"])),
            "slurm.901593.0.0"
        );
        assert_eq!(compose("pmi", &[]), "pmi");
        let uuid = "c8f0b1a2-9d3e-4f5a-8b6c-7d8e9f0a1b2c";
        assert_eq!(
            compose("torchrun", &s(&[uuid, "3"])),
            format!("torchrun.{uuid}.3")
        );
        for odd in [
            s(&["job/1", "0"]),
            s(&["a.b", "0"]),
            s(&["", "0"]),
            s(&[&"x".repeat(60), "0"]),
        ] {
            let ns = compose("torchrun", &odd);
            assert!(
                ns.starts_with("torchrun~") && ns.len() == 25,
                "{odd:?}: {ns}"
            );
            assert!(!ns.contains('/'));
        }
        // The parts are kept apart in the hash.
        assert_ne!(
            compose("slurm", &s(&["1 2", "3"])),
            compose("slurm", &s(&["1", "2 3"]))
        );
    }
}
