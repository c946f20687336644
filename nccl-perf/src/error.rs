//! Errors of `nccl-perf` (and the other bench binaries) and the exit
//! status each one gives.

use nccl_core::{ErrorChain, ResultCode};
use nccl_group::ErrorKind;

/// Every way a benchmark run can fail.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Something the run needs is missing on this machine: the CUDA
    /// driver, a GPU, or the NCCL library. Exit status 2.
    #[error("{0}")]
    Environment(String),
    /// Flags that cannot run together (e.g. a root past the last rank). Exit status 2.
    #[error("{0}")]
    Usage(String),
    /// A call through nccl-core failed, a raw NCCL result mapped to its
    /// error ([`nccl_core::check`]), or a CUDA driver call of the
    /// benchmark itself ([`nccl_core::Error::cuda`]).
    #[error(transparent)]
    Nccl(#[from] nccl_core::Error),
    /// A call through nccl-tensor failed (an argument check or NCCL's error).
    #[error(transparent)]
    Tensor(#[from] nccl_tensor::Error),
    /// A call of the group layer's `ProcessGroup` failed (its rendezvous,
    /// an argument check, NCCL, or an event sync), or destroying it did.
    /// The group's error is the `source()`.
    #[error("group layer")]
    Group(#[from] nccl_group::GroupError),
    /// The store the ranks of a launch meet at failed, or the launch's
    /// variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ...) are malformed
    /// (exit status 2 then: the message names the variable). The store's
    /// error is the `source()`.
    #[error("rendezvous store")]
    Store(#[from] nccl_group::StoreError),
    /// Capturing a layer's calls in a CUDA graph (`-G`) failed; why is the
    /// `source()`.
    #[error(
        "capturing {iters} {collective} call(s) of the {layer} layer in a CUDA graph (-G) failed"
    )]
    Capture {
        /// The layer whose calls were captured.
        layer: &'static str,
        /// The collective.
        collective: &'static str,
        /// Calls in the graph.
        iters: u32,
        /// What went wrong.
        source: Box<BenchError>,
    },
    /// Drawing the `--plot` file failed.
    #[error("cannot draw the plot {path}: {message}")]
    Plot {
        /// The SVG file.
        path: String,
        /// The plotting library's error.
        message: String,
    },
    /// The loaded libnccl lacks a function the raw layer calls.
    #[error(transparent)]
    MissingFunction(#[from] nccl_sys::MissingSymbol),
    /// Writing the JSON file or the table failed (the I/O error is the
    /// `source()`).
    #[error("cannot write {what}")]
    Io {
        /// The file or stream.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A rank failed; the message says which, the `source()` why.
    #[error("rank {rank} (GPU {gpu})")]
    Rank {
        /// The failing rank.
        rank: usize,
        /// Its GPU (the CUDA ordinal in its process).
        gpu: usize,
        /// What went wrong there.
        source: Box<BenchError>,
    },
    /// A call of one row of a table failed: `row` names it (collective,
    /// size, element type, reduction, root and mode), the `source()` why.
    #[error("{row}")]
    Row {
        /// The row and mode.
        row: String,
        /// What went wrong there.
        source: Box<BenchError>,
    },
    /// Another process of the launch failed (or found the launch
    /// unusable), and this one stopped; its exit status is that process's.
    #[error("{origin} failed: {message}")]
    Peer {
        /// Which process (`process 2`).
        origin: String,
        /// Its error, on one line.
        message: String,
        /// Its exit status.
        status: u8,
    },
    /// Ranks or processes of the launch did not come to a meeting in time.
    #[error(
        "{missing} did not reach {what} within {waited:?} (exited, stuck, or started with another \
         store or world size? check their output)"
    )]
    Absent {
        /// Who was missing (`rank 3`, `processes 1, 2`).
        missing: String,
        /// The meeting (`the barrier before a timed batch`).
        what: String,
        /// How long this one waited.
        waited: std::time::Duration,
    },
    /// The rows file given to `--report` cannot be read, or a line of it
    /// is not a row (the message names the line, what was expected and
    /// what was given). Exit status 2.
    #[error("--report {path}: {message}")]
    Rows {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// Every rank thread ended without reporting the rest of the run.
    #[error("the rank threads ended without reporting (a rank thread panicked?)")]
    Lost,
    /// An operation returned a wrong result as a success (`--inject`: the
    /// message says when). Exit status 1, as wrong results of a sweep.
    #[error("{0}")]
    WrongResult(String),
    /// `--soak`: the group failed while no rank was meant to be lost (a slow rank
    /// taken for a lost one, or any other error); `during` says when, the
    /// group's error is the `source()`. Exit status 1.
    #[error("--soak: the group failed {during}, while no rank was meant to be lost")]
    Soak {
        /// When (`at step 37 of 300, 74.1 s in`).
        during: String,
        /// The group's error.
        source: Box<nccl_group::GroupError>,
    },
    /// A layer's steady-state calls allocated on the Rust heap beyond its
    /// allowance (the message names the layers and the counts).
    #[error("steady-state heap allocations: {0}")]
    Allocations(String),
}

impl BenchError {
    /// The process exit status for this error: 2 for a missing driver, GPU
    /// or library and for unusable flags, 1 for a failed run.
    pub fn exit_code(&self) -> u8 {
        match self {
            BenchError::Environment(_)
            | BenchError::Usage(_)
            | BenchError::Rows { .. }
            | BenchError::Store(nccl_group::StoreError::Config { .. }) => 2,
            BenchError::Rank { source, .. }
            | BenchError::Capture { source, .. }
            | BenchError::Row { source, .. } => source.exit_code(),
            BenchError::Peer { status, .. } => *status,
            _ => 1,
        }
    }

    /// What kind of failure this is; a wrapped error of a library layer,
    /// a rank's or a capture's, answers its own `kind()`:
    ///
    /// | Variant | Kind |
    /// |---|---|
    /// | `Nccl`, `Tensor`, `Group`, `Store`, `Rank`, `Capture`, `Row`, `Soak` | the wrapped error's `kind()` |
    /// | `MissingFunction` | [`ErrorKind::MissingFunction`] |
    /// | `Environment` | [`ErrorKind::Unavailable`] |
    /// | `Usage`, `Rows` | [`ErrorKind::InvalidArgument`] |
    /// | `Io`, `Plot` | [`ErrorKind::Io`] |
    /// | `Peer` | [`ErrorKind::Aborted`] |
    /// | `Absent` | [`ErrorKind::Timeout`] |
    /// | `Lost`, `Allocations`, `WrongResult` | [`ErrorKind::Other`] |
    pub fn kind(&self) -> ErrorKind {
        match self {
            BenchError::Nccl(error) => error.kind().into(),
            BenchError::Tensor(error) => error.kind().into(),
            BenchError::Group(error) => error.kind(),
            BenchError::Soak { source, .. } => source.kind(),
            BenchError::Store(error) => error.kind().into(),
            BenchError::Rank { source, .. }
            | BenchError::Capture { source, .. }
            | BenchError::Row { source, .. } => source.kind(),
            BenchError::MissingFunction(_) => ErrorKind::MissingFunction,
            BenchError::Environment(_) => ErrorKind::Unavailable,
            BenchError::Usage(_) | BenchError::Rows { .. } => ErrorKind::InvalidArgument,
            BenchError::Io { .. } | BenchError::Plot { .. } => ErrorKind::Io,
            BenchError::Peer { .. } => ErrorKind::Aborted,
            BenchError::Absent { .. } => ErrorKind::Timeout,
            BenchError::Lost | BenchError::Allocations(_) | BenchError::WrongResult(_) => {
                ErrorKind::Other
            }
        }
    }

    /// The NCCL result code behind this error at any depth, else `None`.
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            BenchError::Nccl(error) => error.nccl_code(),
            BenchError::Tensor(error) => error.nccl_code(),
            BenchError::Group(error) => error.nccl_code(),
            BenchError::Soak { source, .. } => source.nccl_code(),
            BenchError::Rank { source, .. }
            | BenchError::Capture { source, .. }
            | BenchError::Row { source, .. } => source.nccl_code(),
            _ => None,
        }
    }

    /// True for every timeout at any depth, as
    /// [`GroupError::is_timeout`](nccl_group::GroupError::is_timeout) has it.
    pub fn is_timeout(&self) -> bool {
        match self {
            BenchError::Group(error) => error.is_timeout(),
            BenchError::Rank { source, .. }
            | BenchError::Capture { source, .. }
            | BenchError::Row { source, .. } => source.is_timeout(),
            _ => self.kind() == ErrorKind::Timeout,
        }
    }

    /// This error, said to have happened in `row` (see
    /// [`BenchError::Row`]); a stop because of another rank or process,
    /// or a missed meeting, is not the row's and stays as it is.
    pub fn in_row(self, row: impl FnOnce() -> String) -> Self {
        match self {
            BenchError::Peer { .. } | BenchError::Absent { .. } => self,
            source => BenchError::Row {
                row: row(),
                source: Box::new(source),
            },
        }
    }

    /// The message and those of its `source()` chain on a single line
    /// (joined by ": "; newlines in library messages become "; ").
    pub fn one_line(&self) -> String {
        ErrorChain(self)
            .to_string()
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Asserts that `error` is a timeout whose message starts with `start`
    /// (the timeout's length follows, and differs from run to run).
    pub(crate) fn assert_timeout_starting(error: &BenchError, start: &str) {
        assert!(error.is_timeout(), "{error}");
        assert!(error.to_string().starts_with(start), "{error}");
    }

    #[test]
    fn exit_codes_and_single_lines() {
        assert_eq!(BenchError::Environment("no GPU".into()).exit_code(), 2);
        assert_eq!(BenchError::Usage("bad root".into()).exit_code(), 2);
        assert_eq!(
            BenchError::WrongResult("after the heal".into()).exit_code(),
            1
        );
        let config = nccl_group::RendezvousConfig::from_vars(|name| {
            (name == "WORLD_SIZE").then(|| "two".to_string())
        })
        .unwrap_err();
        assert_eq!(BenchError::from(config).exit_code(), 2);
        let nested = BenchError::Rank {
            rank: 3,
            gpu: 3,
            source: Box::new(BenchError::Nccl(nccl_core::Error::Aborted)),
        };
        assert_eq!(nested.exit_code(), 1);
        assert_eq!(
            nested.one_line(),
            "rank 3 (GPU 3): the communicator was aborted; create a new one"
        );
        assert_eq!(nested.kind(), ErrorKind::Aborted);
        let capture = BenchError::Capture {
            layer: "tensor",
            collective: "all_reduce",
            iters: 20,
            source: Box::new(BenchError::Nccl(nccl_core::Error::Aborted)),
        };
        assert_eq!(capture.exit_code(), 1);
        assert!(
            capture.one_line().starts_with(
                "capturing 20 all_reduce call(s) of the tensor layer in a CUDA graph (-G) failed: "
            ),
            "{capture}"
        );
        assert_eq!(
            BenchError::Environment("a\nb\n\n c".into()).one_line(),
            "a; b; c"
        );
    }

    #[test]
    fn a_failed_call_names_its_row_unless_it_stopped_for_another() {
        let refused = nccl_core::Error::from_code("ncclReduce", ResultCode(4), None, None);
        let error = BenchError::Rank {
            rank: 0,
            gpu: 0,
            source: Box::new(
                BenchError::Nccl(refused)
                    .in_row(|| "reduce of 8 B (f8e4m3, avg, root 0), out of place".into()),
            ),
        };
        assert!(
            error
                .one_line()
                .starts_with("rank 0 (GPU 0): reduce of 8 B (f8e4m3, avg, root 0), out of place: ncclReduce failed"),
            "{}",
            error.one_line()
        );
        assert_eq!(error.kind(), ErrorKind::Nccl);
        assert_eq!(error.nccl_code(), Some(ResultCode(4)));
        assert_eq!(error.exit_code(), 1);
        assert_no_message_repeats(&error);
        let peer = BenchError::Peer {
            origin: "process 1".into(),
            message: "no GPU".into(),
            status: 2,
        };
        let stopped = peer.in_row(|| unreachable!("not the row's"));
        assert!(matches!(stopped, BenchError::Peer { .. }));
    }

    /// Walks the `source()` chain: no message may contain its source's.
    fn assert_no_message_repeats(error: &(dyn std::error::Error + 'static)) {
        let mut current = error;
        while let Some(source) = current.source() {
            let (outer, inner) = (current.to_string(), source.to_string());
            assert!(!outer.contains(&inner), "{outer:?} repeats {inner:?}");
            current = source;
        }
    }

    #[test]
    fn a_rank_or_capture_answers_as_its_innermost_error() {
        let timeout = nccl_core::Error::Timeout {
            operation: "ncclCommInitRankConfig",
            waited: std::time::Duration::from_secs(2),
        };
        let nested = nccl_group::GroupError::Tensor(nccl_tensor::Error::Core(timeout));
        let capture = BenchError::Capture {
            layer: "raw",
            collective: "all_reduce",
            iters: 20,
            source: Box::new(BenchError::Group(nested)),
        };
        let error = BenchError::Rank {
            rank: 1,
            gpu: 1,
            source: Box::new(capture),
        };
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(error.is_timeout());
        assert_eq!(error.nccl_code(), None);
        assert_no_message_repeats(&error);
        assert_eq!(
            error.one_line(),
            "rank 1 (GPU 1): capturing 20 all_reduce call(s) of the raw layer in a CUDA graph \
             (-G) failed: group layer: ncclCommInitRankConfig did not complete within 2s; the \
             communicator was aborted (are all ranks running and reachable?)"
        );

        let nccl = nccl_core::Error::from_code("ncclAllReduce", ResultCode(5), None, None);
        let error = BenchError::Rank {
            rank: 0,
            gpu: 0,
            source: Box::new(BenchError::Tensor(nccl_tensor::Error::Core(nccl))),
        };
        assert_eq!(error.kind(), ErrorKind::Nccl);
        assert_eq!(error.nccl_code(), Some(ResultCode(5)));
        assert!(!error.is_timeout());

        let store = BenchError::Store(nccl_group::StoreError::Timeout {
            op: "wait",
            keys: vec!["barrier".into()],
            store: "file store at /tmp/s".into(),
            waited: std::time::Duration::from_secs(1),
        });
        assert!(store.is_timeout());
        assert_no_message_repeats(&store);
    }

    #[test]
    fn another_process_failing_or_absent() {
        let peer = BenchError::Peer {
            origin: "process 2".into(),
            message: "-r 9 is not a rank".into(),
            status: 2,
        };
        assert_eq!(peer.one_line(), "process 2 failed: -r 9 is not a rank");
        assert_eq!((peer.exit_code(), peer.kind()), (2, ErrorKind::Aborted));
        let absent = BenchError::Absent {
            missing: "rank 3".into(),
            what: "the barrier before a timed batch".into(),
            waited: std::time::Duration::from_secs(300),
        };
        assert!(
            absent
                .one_line()
                .starts_with("rank 3 did not reach the barrier before a timed batch within 300s"),
            "{absent}"
        );
        assert_eq!(absent.exit_code(), 1);
        assert!(absent.is_timeout());
    }

    #[test]
    fn own_variants_have_their_kinds() {
        let io = BenchError::Io {
            what: "results.json".into(),
            source: std::io::Error::other("disk full"),
        };
        assert_eq!(io.kind(), ErrorKind::Io);
        assert_eq!(io.one_line(), "cannot write results.json: disk full");
        assert_no_message_repeats(&io);
        let kinds = [
            (
                BenchError::Environment("no GPU".into()),
                ErrorKind::Unavailable,
            ),
            (
                BenchError::Usage("bad root".into()),
                ErrorKind::InvalidArgument,
            ),
            (
                BenchError::Rows {
                    path: "rows.jsonl".into(),
                    message: "line 2: bad".into(),
                },
                ErrorKind::InvalidArgument,
            ),
            (BenchError::Lost, ErrorKind::Other),
            (BenchError::Allocations("3".into()), ErrorKind::Other),
            (
                BenchError::WrongResult("after the heal".into()),
                ErrorKind::Other,
            ),
            (
                BenchError::Plot {
                    path: "a.svg".into(),
                    message: "no font".into(),
                },
                ErrorKind::Io,
            ),
        ];
        for (error, kind) in kinds {
            assert_eq!(error.kind(), kind, "{error}");
            assert!(!error.is_timeout(), "{error}");
            assert_eq!(error.nccl_code(), None, "{error}");
        }
    }
}
