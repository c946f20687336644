//! Reading the launch variables (torchrun and Slurm conventions) into a
//! [`RendezvousConfig`]: every variable's parsing and its error message.

use std::path::PathBuf;
use std::time::Duration;

use super::{RendezvousConfig, StoreSpec, config_error};
use crate::store::{DEFAULT_TIMEOUT, Result};

/// The most processes NCCL accepts: its rank counts are C `int`s.
pub(super) const MAX_WORLD_SIZE: usize = i32::MAX as usize;

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

/// A launch variable read under its torchrun name or its Slurm name: the
/// torchrun one when both are set, and then they must agree, unless
/// torchrun's agent started this process (`TORCHELASTIC_RUN_ID` set:
/// torchrun under srun, whose workers' ranks are not Slurm's tasks').
struct Launch<'a> {
    torchrun: &'static str,
    slurm: &'static str,
    var: &'a dyn Fn(&str) -> Option<String>,
    under_torchrun_agent: bool,
}

impl Launch<'_> {
    /// The value (parsed as [`parse_int`] does) and the name it was read
    /// under, or `None` when neither is set.
    fn read(&self, what: &str, max: usize) -> Result<Option<(&'static str, usize)>> {
        let parse = |name: &'static str| -> Result<Option<usize>> {
            (self.var)(name)
                .map(|raw| parse_int(name, &raw, what, max))
                .transpose()
        };
        match (parse(self.torchrun)?, parse(self.slurm)?) {
            (Some(a), Some(b)) if a != b && !self.under_torchrun_agent => Err(config_error(
                self.torchrun,
                format!(
                    "{}={a} and {}={b} disagree: torchrun's and Slurm's launch variables are \
                     both set; unset one of them, or make them equal",
                    self.torchrun, self.slurm
                ),
            )),
            (Some(a), _) => Ok(Some((self.torchrun, a))),
            (None, Some(b)) => Ok(Some((self.slurm, b))),
            (None, None) => Ok(None),
        }
    }
}

impl RendezvousConfig {
    /// Reads the configuration through `var`, which returns a variable's
    /// value or `None` when it is unset. [`RendezvousConfig::from_env`]
    /// passes the process environment; tests pass a map.
    ///
    /// Fails with [`StoreError::Config`](crate::store::StoreError::Config)
    /// naming the variable, the value seen and the form expected, e.g.
    /// `RANK="abc" is not a non-negative integer`, `RANK=4 must be below
    /// WORLD_SIZE=4`, or, when a torchrun variable and its Slurm
    /// counterpart are both set to different values, `RANK=1 and
    /// SLURM_PROCID=7 disagree` (but for a process that torchrun's agent
    /// started, `TORCHELASTIC_RUN_ID` set: torchrun under srun gives its
    /// workers ranks of their own, and they win).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let under_torchrun_agent = var("TORCHELASTIC_RUN_ID").is_some();
        let launch = |torchrun, slurm| Launch {
            torchrun,
            slurm,
            var: &var,
            under_torchrun_agent,
        };

        const PROCESSES: &str = "a positive integer (the number of processes)";
        let Some((world_var, world_size)) =
            launch("WORLD_SIZE", "SLURM_NTASKS").read(PROCESSES, MAX_WORLD_SIZE)?
        else {
            return Err(config_error(
                "WORLD_SIZE",
                "WORLD_SIZE is not set (nor SLURM_NTASKS); launch with torchrun or srun, or set \
                 WORLD_SIZE to the number of processes in the job"
                    .into(),
            ));
        };
        if world_size == 0 {
            return Err(config_error(
                world_var,
                format!("{world_var}=\"0\" is not {PROCESSES}"),
            ));
        }

        const NON_NEGATIVE: &str = "a non-negative integer";
        let Some((rank_var, rank)) =
            launch("RANK", "SLURM_PROCID").read(NON_NEGATIVE, MAX_WORLD_SIZE)?
        else {
            return Err(config_error(
                "RANK",
                "RANK is not set (nor SLURM_PROCID); launch with torchrun or srun, or set RANK to \
                 this process's rank (0 <= RANK < WORLD_SIZE)"
                    .into(),
            ));
        };
        if rank >= world_size {
            return Err(config_error(
                rank_var,
                format!("{rank_var}={rank} must be below {world_var}={world_size}"),
            ));
        }

        let local_world_size = match var("LOCAL_WORLD_SIZE") {
            None => None,
            Some(raw) => {
                const NAME: &str = "LOCAL_WORLD_SIZE";
                let local = parse_int(NAME, &raw, "a positive integer", MAX_WORLD_SIZE)?;
                if local == 0 {
                    return Err(config_error(
                        NAME,
                        format!("{NAME}={raw:?} is not a positive integer"),
                    ));
                }
                if local > world_size {
                    return Err(config_error(
                        NAME,
                        format!("{NAME}={local} must not exceed {world_var}={world_size}"),
                    ));
                }
                Some(local)
            }
        };

        let local_rank =
            match launch("LOCAL_RANK", "SLURM_LOCALID").read(NON_NEGATIVE, MAX_WORLD_SIZE)? {
                None => 0,
                Some((local_var, local)) => {
                    let (bound_var, bound) = local_world_size
                        .map_or((world_var, world_size), |n| ("LOCAL_WORLD_SIZE", n));
                    if local >= bound {
                        return Err(config_error(
                            local_var,
                            format!("{local_var}={local} must be below {bound_var}={bound}"),
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
        let store = super::torch_agent_store(&var, store)?;

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
            local_world_size,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;
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
        // Both launchers' variables set: equal values are fine.
        let c = cfg(&with(
            &[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "4"),
                ("LOCAL_RANK", "0"),
                ("SLURM_LOCALID", "0"),
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
    fn conflicting_launchers_name_both_variables() {
        for (torchrun, slurm, (a, b)) in [
            ("RANK", "SLURM_PROCID", ("1", "7")),
            ("WORLD_SIZE", "SLURM_NTASKS", ("4", "8")),
            ("LOCAL_RANK", "SLURM_LOCALID", ("0", "3")),
        ] {
            let (var, msg) = err(&with(&[(torchrun, a), (slurm, b)], &[]));
            assert_eq!(var, torchrun);
            assert!(
                msg.starts_with(&format!("{torchrun}={a} and {slurm}={b} disagree")),
                "{msg}"
            );
        }
    }

    #[test]
    fn torchrun_under_srun_gives_its_workers_their_own_ranks() {
        // One Slurm task per node, torchrun starting 4 workers on each:
        // worker 5 is Slurm task 1 of 2.
        let vars = [
            ("TORCHELASTIC_RUN_ID", "job-7"),
            ("RANK", "5"),
            ("SLURM_PROCID", "1"),
            ("WORLD_SIZE", "8"),
            ("SLURM_NTASKS", "2"),
            ("LOCAL_RANK", "1"),
            ("SLURM_LOCALID", "0"),
        ];
        let c = cfg(&with(&vars, &[])).unwrap();
        assert_eq!((c.rank, c.world_size, c.local_rank), (5, 8, 1));
    }

    #[test]
    fn world_size_is_bounded_by_what_nccl_accepts() {
        assert!(cfg(&with(&[("WORLD_SIZE", "2147483647")], &[])).is_ok());
        for huge in [
            "2147483648",
            "9223372036854775808",
            "99999999999999999999999",
        ] {
            let (var, msg) = err(&with(&[("WORLD_SIZE", huge)], &[]));
            assert_eq!(var, "WORLD_SIZE");
            assert_eq!(
                msg,
                format!("WORLD_SIZE={huge:?} is above 2147483647, the most processes NCCL accepts")
            );
        }
        let (var, _) = err(&with(&[("RANK", "18446744073709551616")], &[]));
        assert_eq!(var, "RANK");
    }

    #[test]
    fn local_world_size_is_read_and_checked() {
        let c = cfg(&with(
            &[("LOCAL_WORLD_SIZE", "2"), ("LOCAL_RANK", "1")],
            &[],
        ))
        .unwrap();
        assert_eq!((c.local_rank, c.local_world_size), (1, Some(2)));
        assert_eq!(cfg(&BASE).unwrap().local_world_size, None);
        assert_eq!(
            err(&with(
                &[("LOCAL_WORLD_SIZE", "2"), ("LOCAL_RANK", "2")],
                &[]
            )),
            (
                "LOCAL_RANK".into(),
                "LOCAL_RANK=2 must be below LOCAL_WORLD_SIZE=2".into()
            )
        );
        assert_eq!(
            err(&with(&[("LOCAL_WORLD_SIZE", "5")], &[])),
            (
                "LOCAL_WORLD_SIZE".into(),
                "LOCAL_WORLD_SIZE=5 must not exceed WORLD_SIZE=4".into()
            )
        );
        for bad in ["0", "two"] {
            let (var, msg) = err(&with(&[("LOCAL_WORLD_SIZE", bad)], &[]));
            assert_eq!(var, "LOCAL_WORLD_SIZE");
            assert_eq!(
                msg,
                format!("LOCAL_WORLD_SIZE={bad:?} is not a positive integer")
            );
        }
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
}
