//! Reading the launch environment (torchrun and Slurm conventions) and
//! connecting to the store it names.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::{
    DEFAULT_TIMEOUT, FileStore, Result, Store, StoreError, TcpStore, TcpStoreOptions,
    TcpStoreServerOptions,
};

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
}

/// Where this process stands in the job and how to reach the rendezvous
/// store, as read from the environment.
///
/// | variable | meaning | fallback |
/// |---|---|---|
/// | `RANK` | this process's rank, `0 <= RANK < WORLD_SIZE` | `SLURM_PROCID` |
/// | `WORLD_SIZE` | number of processes, `> 0` | `SLURM_NTASKS` |
/// | `LOCAL_RANK` | rank within this host | `SLURM_LOCALID`, then 0 |
/// | `MASTER_ADDR`, `MASTER_PORT` | rank 0's host and the store's port (TCP store only) | none |
/// | `NCCL_RS_STORE` | `tcp` (default) or `file:<directory>` | `tcp` |
/// | `NCCL_RS_STORE_TIMEOUT_SECS` | default store timeout, whole seconds `> 0` | 300 |
/// | `NCCL_RS_STORE_SECRET` | shared secret for the TCP store | none |
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

/// Parses a non-negative integer; `what` completes "is not ...".
fn parse_int(var: &str, raw: &str, what: &str) -> Result<usize> {
    raw.trim()
        .parse::<usize>()
        .map_err(|_| config_error(var, format!("{var}={raw:?} is not {what}")))
}

impl RendezvousConfig {
    /// A configuration built in code rather than read from the environment:
    /// `local_rank` 0, the default timeout ([`DEFAULT_TIMEOUT`]), no secret.
    /// Change the public fields to adjust.
    ///
    /// Fails with [`StoreError::Config`] when `world_size` is 0 or `rank` is
    /// not below it.
    pub fn new(rank: usize, world_size: usize, store: StoreSpec) -> Result<Self> {
        if world_size == 0 {
            return Err(config_error(
                "WORLD_SIZE",
                "world_size 0 is not a positive integer (the number of processes)".into(),
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
            store,
            timeout: DEFAULT_TIMEOUT,
            secret: None,
        })
    }

    /// Reads the configuration through `var`, which returns a variable's
    /// value or `None` when it is unset. [`RendezvousConfig::from_env`]
    /// passes the process environment; tests pass a map.
    ///
    /// Fails with [`StoreError::Config`] naming the variable, the value seen
    /// and the form expected, e.g. `RANK="abc" is not a non-negative integer`
    /// or `RANK=4 must be below WORLD_SIZE=4`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let first_of = |names: &[&'static str]| -> Option<(&'static str, String)> {
            names.iter().find_map(|n| var(n).map(|v| (*n, v)))
        };

        let Some((world_var, raw)) = first_of(&["WORLD_SIZE", "SLURM_NTASKS"]) else {
            return Err(config_error(
                "WORLD_SIZE",
                "WORLD_SIZE is not set (nor SLURM_NTASKS); launch with torchrun or srun, or set \
                 WORLD_SIZE to the number of processes in the job"
                    .into(),
            ));
        };
        let world_size = parse_int(
            world_var,
            &raw,
            "a positive integer (the number of processes)",
        )?;
        if world_size == 0 {
            return Err(config_error(
                world_var,
                format!("{world_var}={raw:?} is not a positive integer (the number of processes)"),
            ));
        }

        let Some((rank_var, raw)) = first_of(&["RANK", "SLURM_PROCID"]) else {
            return Err(config_error(
                "RANK",
                "RANK is not set (nor SLURM_PROCID); launch with torchrun or srun, or set RANK to \
                 this process's rank (0 <= RANK < WORLD_SIZE)"
                    .into(),
            ));
        };
        let rank = parse_int(rank_var, &raw, "a non-negative integer")?;
        if rank >= world_size {
            return Err(config_error(
                rank_var,
                format!("{rank_var}={rank} must be below {world_var}={world_size}"),
            ));
        }

        let local_rank = match first_of(&["LOCAL_RANK", "SLURM_LOCALID"]) {
            None => 0,
            Some((local_var, raw)) => {
                let local = parse_int(local_var, &raw, "a non-negative integer")?;
                if local >= world_size {
                    return Err(config_error(
                        local_var,
                        format!("{local_var}={local} must be below {world_var}={world_size}"),
                    ));
                }
                local
            }
        };

        let store = match var("NCCL_RS_STORE") {
            None => Self::tcp_spec(&var)?,
            Some(raw) if raw.trim().eq_ignore_ascii_case("tcp") => Self::tcp_spec(&var)?,
            Some(raw) => match raw.strip_prefix("file:") {
                Some(dir) if !dir.trim().is_empty() => StoreSpec::File {
                    dir: PathBuf::from(dir),
                },
                _ => {
                    return Err(config_error(
                        "NCCL_RS_STORE",
                        format!(
                            "NCCL_RS_STORE={raw:?} is not a store kind; expected \"tcp\" (the \
                             default) or \"file:<directory>\" with a directory every rank can see"
                        ),
                    ));
                }
            },
        };

        let timeout = match var("NCCL_RS_STORE_TIMEOUT_SECS") {
            None => DEFAULT_TIMEOUT,
            Some(raw) => {
                const WHAT: &str = "a positive whole number of seconds";
                let secs = raw
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| {
                        config_error(
                            "NCCL_RS_STORE_TIMEOUT_SECS",
                            format!(
                                "NCCL_RS_STORE_TIMEOUT_SECS={raw:?} is not {WHAT} (default 300)"
                            ),
                        )
                    })?;
                Duration::from_secs(secs)
            }
        };

        let secret = match var("NCCL_RS_STORE_SECRET") {
            None => None,
            Some(s) if s.is_empty() => {
                return Err(config_error(
                    "NCCL_RS_STORE_SECRET",
                    "NCCL_RS_STORE_SECRET is set but empty; unset it to run without \
                     authentication, or set the same non-empty secret on every rank"
                        .into(),
                ));
            }
            Some(s) => Some(s),
        };

        Ok(RendezvousConfig {
            rank,
            world_size,
            local_rank,
            store,
            timeout,
            secret,
        })
    }

    fn tcp_spec(var: &impl Fn(&str) -> Option<String>) -> Result<StoreSpec> {
        let addr = match var("MASTER_ADDR") {
            None => {
                return Err(config_error(
                    "MASTER_ADDR",
                    "MASTER_ADDR is not set; with the TCP store (NCCL_RS_STORE=tcp, the default) \
                     set it to the host name or IP address of rank 0's host (torchrun sets it), \
                     or use NCCL_RS_STORE=file:<directory>"
                        .into(),
                ));
            }
            Some(raw) => {
                let trimmed = raw.trim();
                let unbracketed = trimmed
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(trimmed);
                if unbracketed.is_empty() || unbracketed.contains(char::is_whitespace) {
                    return Err(config_error(
                        "MASTER_ADDR",
                        format!(
                            "MASTER_ADDR={raw:?} is not a host name or IP address (of rank 0's \
                             host)"
                        ),
                    ));
                }
                unbracketed.to_owned()
            }
        };
        let port = match var("MASTER_PORT") {
            None => {
                return Err(config_error(
                    "MASTER_PORT",
                    "MASTER_PORT is not set; with the TCP store set it to a free TCP port on \
                     rank 0's host (1-65535, e.g. 29500; torchrun sets it)"
                        .into(),
                ));
            }
            Some(raw) => raw
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    config_error(
                        "MASTER_PORT",
                        format!("MASTER_PORT={raw:?} is not a TCP port number (1-65535)"),
                    )
                })?,
        };
        Ok(StoreSpec::Tcp { addr, port })
    }

    /// [`RendezvousConfig::from_vars`] over this process's environment.
    /// A value that is not valid UTF-8 is read lossily (and then fails to
    /// parse with a message that shows it).
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Connects to the store this configuration names.
    ///
    /// With the TCP store, rank 0 starts the server on `MASTER_PORT` and
    /// keeps it alive as long as the returned store lives; it listens on
    /// `MASTER_ADDR` itself when that is a loopback address (a single-host
    /// job), otherwise on every interface (as torch does; set
    /// `NCCL_RS_STORE_SECRET` on shared networks). The other ranks connect as
    /// clients, retrying until the server is up or the timeout passes. With
    /// the file store, every rank opens the directory.
    pub fn connect(&self) -> Result<Box<dyn Store>> {
        match &self.store {
            StoreSpec::File { dir } => Ok(Box::new(FileStore::open(dir.clone(), self.timeout)?)),
            StoreSpec::Tcp { addr, port } => {
                let mut client = TcpStoreOptions::default()
                    .with_timeout(self.timeout)
                    .with_connect_timeout(self.timeout);
                let mut server = TcpStoreServerOptions::default();
                if let Some(secret) = &self.secret {
                    client = client.with_secret(secret.as_bytes());
                    server = server.with_secret(secret.as_bytes());
                }
                if self.rank == 0 {
                    let bind = bind_addr(addr, *port)?;
                    Ok(Box::new(TcpStore::host(bind, server, client)?))
                } else {
                    Ok(Box::new(TcpStore::connect(addr, *port, client)?))
                }
            }
        }
    }
}

/// Where rank 0 listens: `MASTER_ADDR` itself when it is loopback, otherwise
/// the unspecified address of its family.
fn bind_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            StoreError::io(
                format!("resolving MASTER_ADDR={host:?} to start the TCP store server"),
                e,
            )
        })?
        .collect();
    let Some(first) = resolved.first() else {
        return Err(StoreError::io(
            format!("resolving MASTER_ADDR={host:?} to start the TCP store server"),
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        ));
    };
    if resolved.iter().all(|a| a.ip().is_loopback()) {
        return Ok(*first);
    }
    let any = match first.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    Ok(SocketAddr::new(any, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<RendezvousConfig> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        RendezvousConfig::from_vars(|n| map.get(n).cloned())
    }

    const BASE: [(&str, &str); 4] = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];

    fn with(
        overrides: &[(&'static str, &'static str)],
        remove: &[&str],
    ) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = BASE
            .iter()
            .copied()
            .filter(|(k, _)| !remove.contains(k) && !overrides.iter().any(|(o, _)| o == k))
            .collect();
        v.extend_from_slice(overrides);
        v
    }

    fn err(vars: &[(&str, &str)]) -> (String, String) {
        match cfg(vars).unwrap_err() {
            StoreError::Config { var, message } => (var, message),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn happy_path_torchrun() {
        let c = cfg(&with(
            &[
                ("LOCAL_RANK", "1"),
                ("NCCL_RS_STORE_TIMEOUT_SECS", "42"),
                ("NCCL_RS_STORE_SECRET", "s3cret"),
            ],
            &[],
        ))
        .unwrap();
        assert_eq!(c.rank, 1);
        assert_eq!(c.world_size, 4);
        assert_eq!(c.local_rank, 1);
        assert_eq!(
            c.store,
            StoreSpec::Tcp {
                addr: "127.0.0.1".into(),
                port: 29500
            }
        );
        assert_eq!(c.timeout, Duration::from_secs(42));
        assert_eq!(c.secret.as_deref(), Some("s3cret"));
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("s3cret") && dbg.contains("<redacted>"),
            "{dbg}"
        );
    }

    #[test]
    fn defaults() {
        let c = cfg(&BASE).unwrap();
        assert_eq!(c.local_rank, 0);
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert_eq!(c.secret, None);
    }

    #[test]
    fn slurm_fallbacks() {
        let c = cfg(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!((c.rank, c.world_size, c.local_rank), (5, 8, 1));
        // torchrun's variables win over Slurm's.
        let c = cfg(&with(
            &[
                ("SLURM_PROCID", "7"),
                ("SLURM_NTASKS", "8"),
                ("LOCAL_RANK", "0"),
                ("SLURM_LOCALID", "3"),
            ],
            &[],
        ))
        .unwrap();
        assert_eq!((c.rank, c.world_size, c.local_rank), (1, 4, 0));
        // A Slurm value out of range is reported under its own name.
        let (var, msg) = err(&[
            ("SLURM_PROCID", "8"),
            ("SLURM_NTASKS", "8"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ]);
        assert_eq!(var, "SLURM_PROCID");
        assert_eq!(msg, "SLURM_PROCID=8 must be below SLURM_NTASKS=8");
    }

    #[test]
    fn file_store_needs_no_master_vars() {
        let c = cfg(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("NCCL_RS_STORE", "file:/shared/rdzv"),
        ])
        .unwrap();
        assert_eq!(
            c.store,
            StoreSpec::File {
                dir: "/shared/rdzv".into()
            }
        );
        let c = cfg(&with(
            &[("NCCL_RS_STORE", "TCP"), ("MASTER_ADDR", "[::1]")],
            &[],
        ))
        .unwrap();
        assert_eq!(
            c.store,
            StoreSpec::Tcp {
                addr: "::1".into(),
                port: 29500
            }
        );
    }

    #[test]
    fn rank_errors() {
        assert_eq!(
            err(&with(&[("RANK", "abc")], &[])),
            (
                "RANK".into(),
                "RANK=\"abc\" is not a non-negative integer".into()
            )
        );
        assert_eq!(
            err(&with(&[("RANK", "-1")], &[])).1,
            "RANK=\"-1\" is not a non-negative integer"
        );
        assert_eq!(
            err(&with(&[("RANK", "4")], &[])),
            ("RANK".into(), "RANK=4 must be below WORLD_SIZE=4".into())
        );
        let (var, msg) = err(&with(&[], &["RANK"]));
        assert_eq!(var, "RANK");
        assert!(msg.contains("RANK is not set (nor SLURM_PROCID)"), "{msg}");
    }

    #[test]
    fn world_size_errors() {
        let (var, msg) = err(&with(&[("WORLD_SIZE", "four")], &[]));
        assert_eq!(var, "WORLD_SIZE");
        assert!(
            msg.starts_with("WORLD_SIZE=\"four\" is not a positive integer"),
            "{msg}"
        );
        let (_, msg) = err(&with(&[("WORLD_SIZE", "0")], &[]));
        assert!(
            msg.starts_with("WORLD_SIZE=\"0\" is not a positive integer"),
            "{msg}"
        );
        let (var, msg) = err(&with(&[], &["WORLD_SIZE"]));
        assert_eq!(var, "WORLD_SIZE");
        assert!(
            msg.contains("WORLD_SIZE is not set (nor SLURM_NTASKS)"),
            "{msg}"
        );
        let (var, _) = err(&with(&[("SLURM_NTASKS", "x")], &["WORLD_SIZE"]));
        assert_eq!(var, "SLURM_NTASKS");
    }

    #[test]
    fn local_rank_errors() {
        assert_eq!(
            err(&with(&[("LOCAL_RANK", "x1")], &[])),
            (
                "LOCAL_RANK".into(),
                "LOCAL_RANK=\"x1\" is not a non-negative integer".into()
            )
        );
        assert_eq!(
            err(&with(&[("LOCAL_RANK", "4")], &[])).1,
            "LOCAL_RANK=4 must be below WORLD_SIZE=4"
        );
        assert_eq!(
            err(&with(&[("SLURM_LOCALID", "?")], &[])).1,
            "SLURM_LOCALID=\"?\" is not a non-negative integer"
        );
    }

    #[test]
    fn master_addr_errors() {
        let (var, msg) = err(&with(&[], &["MASTER_ADDR"]));
        assert_eq!(var, "MASTER_ADDR");
        assert!(msg.contains("MASTER_ADDR is not set"), "{msg}");
        let (var, msg) = err(&with(&[("MASTER_ADDR", " ")], &[]));
        assert_eq!(var, "MASTER_ADDR");
        assert!(
            msg.starts_with("MASTER_ADDR=\" \" is not a host name or IP address"),
            "{msg}"
        );
    }

    #[test]
    fn master_port_errors() {
        let (var, msg) = err(&with(&[], &["MASTER_PORT"]));
        assert_eq!(var, "MASTER_PORT");
        assert!(msg.contains("MASTER_PORT is not set"), "{msg}");
        for bad in ["http", "0", "65536", "-5"] {
            let (var, msg) = err(&with(&[("MASTER_PORT", bad)], &[]));
            assert_eq!(var, "MASTER_PORT");
            assert_eq!(
                msg,
                format!("MASTER_PORT={bad:?} is not a TCP port number (1-65535)")
            );
        }
    }

    #[test]
    fn store_kind_errors() {
        for bad in ["redis", "file:", "file", ""] {
            let (var, msg) = err(&with(&[("NCCL_RS_STORE", bad)], &[]));
            assert_eq!(var, "NCCL_RS_STORE");
            assert!(
                msg.starts_with(&format!(
                    "NCCL_RS_STORE={bad:?} is not a store kind; expected \"tcp\""
                )),
                "{msg}"
            );
        }
    }

    #[test]
    fn timeout_errors() {
        for bad in ["0", "ten", "1.5", "-3"] {
            let (var, msg) = err(&with(&[("NCCL_RS_STORE_TIMEOUT_SECS", bad)], &[]));
            assert_eq!(var, "NCCL_RS_STORE_TIMEOUT_SECS");
            assert!(
                msg.starts_with(&format!(
                    "NCCL_RS_STORE_TIMEOUT_SECS={bad:?} is not a positive whole number of seconds"
                )),
                "{msg}"
            );
        }
    }

    #[test]
    fn secret_errors() {
        let (var, msg) = err(&with(&[("NCCL_RS_STORE_SECRET", "")], &[]));
        assert_eq!(var, "NCCL_RS_STORE_SECRET");
        assert!(msg.contains("set but empty"), "{msg}");
    }

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
        assert!(RendezvousConfig::new(0, 0, dir).is_err());
    }

    #[test]
    fn bind_address_choice() {
        assert_eq!(
            bind_addr("127.0.0.1", 5).unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
        assert_eq!(bind_addr("::1", 5).unwrap(), "[::1]:5".parse().unwrap());
        assert_eq!(
            bind_addr("10.1.2.3", 5).unwrap(),
            "0.0.0.0:5".parse().unwrap()
        );
    }

    #[test]
    fn connect_file_store_from_config() {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("file:{}", dir.path().display());
        let map: HashMap<&str, String> = [
            ("RANK", "0".to_owned()),
            ("WORLD_SIZE", "1".to_owned()),
            ("NCCL_RS_STORE", spec),
            ("NCCL_RS_STORE_TIMEOUT_SECS", "3".to_owned()),
        ]
        .into_iter()
        .collect();
        let c = RendezvousConfig::from_vars(|n| map.get(n).cloned()).unwrap();
        let store = c.connect().unwrap();
        store.set("k", b"v").unwrap();
        assert_eq!(store.default_timeout(), Duration::from_secs(3));
        assert_eq!(store.get("k", Duration::from_millis(100)).unwrap(), b"v");
    }

    #[test]
    fn connect_tcp_rank0_hosts_and_rank1_joins() {
        // Port 0 is refused by from_vars, so pick a free port up front.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let vars = |rank: &'static str| {
            let port = port.to_string();
            move |n: &str| match n {
                "RANK" => Some(rank.to_owned()),
                "WORLD_SIZE" => Some("2".to_owned()),
                "MASTER_ADDR" => Some("127.0.0.1".to_owned()),
                "MASTER_PORT" => Some(port.clone()),
                "NCCL_RS_STORE_TIMEOUT_SECS" => Some("5".to_owned()),
                "NCCL_RS_STORE_SECRET" => Some("team".to_owned()),
                _ => None,
            }
        };
        let rank0 = RendezvousConfig::from_vars(vars("0"))
            .unwrap()
            .connect()
            .unwrap();
        let rank1 = RendezvousConfig::from_vars(vars("1"))
            .unwrap()
            .connect()
            .unwrap();
        rank0.set("uid", b"0xfeed").unwrap();
        assert_eq!(rank1.get("uid", Duration::from_secs(2)).unwrap(), b"0xfeed");
        assert_eq!(rank1.add("arrived", 1).unwrap(), 1);
        assert_eq!(rank0.add("arrived", 1).unwrap(), 2);
        drop(rank1);
        drop(rank0);
        // The server went with rank 0's store: the port is free again.
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
