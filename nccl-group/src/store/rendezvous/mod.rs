//! The rendezvous configuration: which store the ranks meet at
//! ([`StoreSpec`]) and where this process stands in the job
//! ([`RendezvousConfig`]).
//!
//! `env` reads it from the launch environment (torchrun and Slurm
//! conventions); `connect` connects to the store it names.

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

/// Where this process stands in the job and how to reach the rendezvous
/// store, as read from the environment.
///
/// | variable | meaning | fallback |
/// |---|---|---|
/// | `RANK` | this process's rank, `0 <= RANK < WORLD_SIZE` | `SLURM_PROCID` |
/// | `WORLD_SIZE` | number of processes, `0 < WORLD_SIZE <= 2147483647` (NCCL's `int`) | `SLURM_NTASKS` |
/// | `LOCAL_RANK` | rank within this host, below `LOCAL_WORLD_SIZE` when set | `SLURM_LOCALID`, then 0 |
/// | `LOCAL_WORLD_SIZE` | processes on this host, `0 < LOCAL_WORLD_SIZE <= WORLD_SIZE` | none (unknown) |
/// | `MASTER_ADDR`, `MASTER_PORT` | rank 0's host and the store's port (TCP store), or the address of torchrun's agent store | none |
/// | `NCCL_RS_STORE` | `tcp` (default) or `file:<directory>` | `tcp` |
/// | `TORCHELASTIC_USE_AGENT_STORE` | `True` (torchrun's spelling; also `true`, `1`): join the c10d store torchrun's agent serves at `MASTER_ADDR:MASTER_PORT` instead of hosting one ([`StoreSpec::TorchAgent`]); ignored with `NCCL_RS_STORE=file:` | false |
/// | `NCCL_RS_STORE_TIMEOUT_SECS` | default store timeout, whole seconds `> 0` | 300 |
/// | `NCCL_RS_STORE_SECRET` | shared secret for the TCP store (refused with torchrun's agent store: c10d has no authentication) | none |
///
/// When a torchrun variable and its Slurm fallback (`RANK` and
/// `SLURM_PROCID`, `WORLD_SIZE` and `SLURM_NTASKS`, `LOCAL_RANK` and
/// `SLURM_LOCALID`) are both set, their values must be equal: a mismatch is
/// an error naming both rather than a silent choice.
///
/// ```
/// use nccl_group::{RendezvousConfig, StoreSpec};
/// let env = [("RANK", "1"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "node0"), ("MASTER_PORT", "29500")];
/// let cfg = RendezvousConfig::from_vars(|name| {
///     env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
/// })?;
/// assert_eq!((cfg.rank, cfg.world_size, cfg.local_rank), (1, 4, 0));
/// assert_eq!(cfg.store, StoreSpec::Tcp { addr: "node0".into(), port: 29500 });
/// # Ok::<(), nccl_group::StoreError>(())
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
    /// The number of processes on this host (`LOCAL_WORLD_SIZE`), `None`
    /// when the launcher did not say; `local_rank` is below it when known.
    pub local_world_size: Option<usize>,
    /// The store to meet at.
    pub store: StoreSpec,
    /// The default timeout of store operations (and of connecting).
    pub timeout: Duration,
    /// The TCP store's shared secret.
    pub secret: Option<String>,
}

impl fmt::Debug for RendezvousConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RendezvousConfig")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("local_rank", &self.local_rank)
            .field("local_world_size", &self.local_world_size)
            .field("store", &self.store)
            .field("timeout", &self.timeout)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

fn config_error(var: &str, message: String) -> StoreError {
    StoreError::Config {
        var: var.to_owned(),
        message,
    }
}

/// The TCP store's address read as torchrun's agent store when
/// `TORCHELASTIC_USE_AGENT_STORE` is true (torchrun writes `True`; `true`
/// and `1` are accepted too): the agent already serves a c10d TCPStore
/// there, which every rank joins instead of rank 0 hosting one. A file
/// store is kept as it is.
fn torch_agent_store(var: &impl Fn(&str) -> Option<String>, store: StoreSpec) -> Result<StoreSpec> {
    const NAME: &str = "TORCHELASTIC_USE_AGENT_STORE";
    let Some(raw) = var(NAME) else {
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

impl RendezvousConfig {
    /// A configuration built in code rather than read from the environment:
    /// `local_rank` 0, `local_world_size` unknown, the default timeout
    /// ([`DEFAULT_TIMEOUT`]), no secret. Change the public fields to adjust.
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
            store,
            timeout: DEFAULT_TIMEOUT,
            secret: None,
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
