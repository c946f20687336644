//! The rendezvous configuration: which store the ranks meet at
//! ([`StoreSpec`]), where this process stands in the job and which
//! launcher started it ([`RendezvousConfig`], [`Launcher`]).
//!
//! `env` reads it from the launch environment (torchrun, Slurm, Open MPI
//! and PMI conventions); `connect` connects to the store it names, scoped
//! to the run's key namespace.

mod connect;
mod env;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::{DEFAULT_TIMEOUT, Result, StoreError};

/// Which store the ranks meet at.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// The TCP store; rank 0 hosts the server at `addr:port`
    /// (`NCCL_RS_STORE=tcp`, the default, with `MASTER_ADDR`, `MASTER_PORT`).
    Tcp {
        /// Host name or IP address of rank 0 (`MASTER_ADDR`).
        addr: String,
        /// Port of the server (`MASTER_PORT`).
        port: u16,
    },
    /// The file store in a shared directory (`NCCL_RS_STORE=file:<dir>`).
    File {
        /// The directory.
        dir: PathBuf,
    },
    /// The c10d TCPStore that torchrun's agent already serves at
    /// `addr:port`: every rank joins it as a [`C10dStore`](crate::C10dStore)
    /// client and none hosts (`TORCHELASTIC_USE_AGENT_STORE=True`, with
    /// `MASTER_ADDR` and `MASTER_PORT`, as torchrun sets them).
    TorchAgent {
        /// Host name or IP address of the agent's store (`MASTER_ADDR`).
        addr: String,
        /// Port of the agent's store (`MASTER_PORT`).
        port: u16,
    },
}

/// The store as a URL: `tcp://host:port`, `file:///dir` or
/// `c10d://host:port` (torchrun's agent store).
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Tcp { addr, port } => write!(f, "tcp://{}", host_port(addr, *port)),
            StoreSpec::File { dir } => write!(f, "file://{}", dir.display()),
            StoreSpec::TorchAgent { addr, port } => {
                write!(f, "c10d://{}", host_port(addr, *port))
            }
        }
    }
}

/// `host:port`, with an IPv6 address in brackets.
fn host_port(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

/// Which launcher started this process, as its variables show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Launcher {
    /// torchrun's agent (`TORCHELASTIC_RUN_ID` set).
    Torchrun,
    /// Slurm's srun: a task of a job step.
    Slurm,
    /// Open MPI's mpirun (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// A PMI launcher: MPICH's or Intel MPI's mpiexec (hydra), Cray's
    /// (`PMI_RANK`, `PMI_SIZE`).
    Pmi,
    /// None recognised: `RANK` and `WORLD_SIZE` given directly (by hand,
    /// by nccl-launch, or [`RendezvousConfig::new`] in code).
    Manual,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "srun",
            Launcher::OpenMpi => "Open MPI mpirun",
            Launcher::Pmi => "PMI mpiexec",
            Launcher::Manual => "none (RANK and WORLD_SIZE given directly)",
        })
    }
}

/// Where this process stands in the job and how to reach the rendezvous
/// store, as read from the launch environment of torchrun, Slurm's srun,
/// Open MPI's mpirun or a PMI launcher (MPICH's or Intel MPI's mpiexec):
///
#[doc = include_str!("launch_variables.md")]
///
/// ```
/// use nccl_rendezvous::{Launcher, RendezvousConfig, StoreSpec};
/// let env = [("RANK", "1"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "node0"), ("MASTER_PORT", "29500")];
/// let cfg = RendezvousConfig::from_vars(|name| {
///     env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
/// })?;
/// assert_eq!((cfg.rank, cfg.world_size, cfg.local_rank), (1, 4, 0));
/// assert_eq!(cfg.store, StoreSpec::Tcp { addr: "node0".into(), port: 29500 });
/// assert_eq!((cfg.launcher, cfg.namespace.as_str()), (Launcher::Manual, "manual"));
/// # Ok::<(), nccl_rendezvous::StoreError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RendezvousConfig {
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// This process's rank within its host.
    pub local_rank: usize,
    /// The number of processes on this host, `None` when the launcher did
    /// not say; `local_rank` is below it when known.
    pub local_world_size: Option<usize>,
    /// This host's index among the job's hosts (`GROUP_RANK`,
    /// `SLURM_NODEID`), `None` when the launcher did not say.
    pub node_rank: Option<usize>,
    /// The launcher whose variables these are.
    pub launcher: Launcher,
    /// The key namespace: [`RendezvousConfig::connect`] scopes every key
    /// under it (a [`PrefixStore`](crate::PrefixStore)), so runs
    /// sharing a store (a restarted torchrun job and the one it replaces, a
    /// requeued Slurm job, a reused file-store directory) never meet each
    /// other's keys.
    ///
    /// The same on every rank of one run. Non-empty, without `/`.
    pub namespace: String,
    /// The store to meet at.
    pub store: StoreSpec,
    /// The default timeout of store operations (and of connecting).
    pub timeout: Duration,
    /// The TCP store's shared secret.
    pub secret: Option<String>,
    /// Without a secret, let rank 0's TCP store server accept clients from
    /// other hosts (`NCCL_RS_STORE_ALLOW_UNAUTHENTICATED`); by default it
    /// accepts clients of its own host only.
    ///
    /// See
    /// [`TcpStoreServerOptions::allow_unauthenticated_remote`](crate::TcpStoreServerOptions::allow_unauthenticated_remote).
    pub allow_unauthenticated_remote: bool,
}

impl fmt::Debug for RendezvousConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RendezvousConfig")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("local_rank", &self.local_rank)
            .field("local_world_size", &self.local_world_size)
            .field("node_rank", &self.node_rank)
            .field("launcher", &self.launcher)
            .field("namespace", &self.namespace)
            .field("store", &self.store)
            .field("timeout", &self.timeout)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field(
                "allow_unauthenticated_remote",
                &self.allow_unauthenticated_remote,
            )
            .finish()
    }
}

fn config_error(var: &str, message: String) -> StoreError {
    StoreError::Config {
        var: var.to_owned(),
        message,
    }
}

impl RendezvousConfig {
    /// A configuration built in code rather than read from the environment:
    /// `local_rank` 0, `local_world_size` and `node_rank` unknown, launcher
    /// [`Launcher::Manual`], namespace `manual`, the default timeout
    /// ([`DEFAULT_TIMEOUT`]), no secret, clients of rank 0's host only.
    ///
    /// Change the public fields to adjust.
    ///
    /// Fails with [`StoreError::Config`] when `world_size` is 0 or above
    /// `i32::MAX` (the most ranks NCCL accepts), or `rank` is not below it.
    pub fn new(rank: usize, world_size: usize, store: StoreSpec) -> Result<Self> {
        if world_size == 0 {
            return Err(config_error(
                "WORLD_SIZE",
                "world_size 0 is not a positive integer (the number of processes)".into(),
            ));
        }
        if world_size > env::MAX_WORLD_SIZE {
            return Err(config_error(
                "WORLD_SIZE",
                format!(
                    "world_size {world_size} is above {}, the most processes NCCL accepts",
                    env::MAX_WORLD_SIZE
                ),
            ));
        }
        if rank >= world_size {
            return Err(config_error(
                "RANK",
                format!("rank {rank} must be below world_size {world_size}"),
            ));
        }
        Ok(RendezvousConfig {
            rank,
            world_size,
            local_rank: 0,
            local_world_size: None,
            node_rank: None,
            launcher: Launcher::Manual,
            namespace: "manual".to_owned(),
            store,
            timeout: DEFAULT_TIMEOUT,
            secret: None,
            allow_unauthenticated_remote: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_rank_and_world_size() {
        let dir = StoreSpec::File {
            dir: "/tmp/x".into(),
        };
        let c = RendezvousConfig::new(2, 3, dir.clone()).unwrap();
        assert_eq!((c.rank, c.world_size, c.local_rank), (2, 3, 0));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        let e = RendezvousConfig::new(3, 3, dir.clone()).unwrap_err();
        assert_eq!(e.to_string(), "rank 3 must be below world_size 3");
        assert!(RendezvousConfig::new(0, 0, dir.clone()).is_err());
        let e = RendezvousConfig::new(0, 1 << 31, dir).unwrap_err();
        assert_eq!(
            e.to_string(),
            "world_size 2147483648 is above 2147483647, the most processes NCCL accepts"
        );
    }
}
