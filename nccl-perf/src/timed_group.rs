//! What the recovery, grow and soak measurements share (`--inject`,
//! `--grow-spare`, `--soak`): the process group they time and its flags, its checked
//! all_reduce, the clock they compare across processes, the values the
//! ranks share through the launch's store, and the files rank 0 writes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cudarc::driver::CudaStream;
use nccl_core::ReduceOp;
use nccl_group::{GroupError, GroupOptions, ProcessGroup};
use nccl_tensor::Tensor;

use crate::cli::{Args, DataTypeArg};
use crate::collective::Collective;
use crate::error::BenchError;
use crate::layer::LayerKind;
use crate::world::LaunchMeeting;

/// The group a measurement times, from the flags: checked before any GPU
/// work.
pub(crate) struct TimedGroup {
    /// The group layer of `--layer`.
    pub(crate) layer: LayerKind,
    /// Elements of each all_reduce (`-b` bytes of f32).
    pub(crate) count: usize,
    /// The group's options: `--group-comms`, `--group-mismatch-check`,
    /// the layer's stream mode and `--op-timeout-ms`.
    pub(crate) options: GroupOptions,
}

impl TimedGroup {
    /// The group `args` ask for, for the measurement `flag` names in its
    /// messages (`--inject exit@3:20`).
    ///
    /// # Errors
    /// [`BenchError::Usage`] naming the flag, what it must be and what it
    /// was: another collective than all_reduce, not exactly one group
    /// layer, another data type than float.
    pub(crate) fn new(args: &Args, flag: &str) -> Result<Self, BenchError> {
        let usage = |text: String| Err(BenchError::Usage(format!("{flag}: {text}")));
        let names = |names: Vec<&str>| names.join(", ");
        let collectives = args.collectives();
        if collectives != [Collective::AllReduce] {
            return usage(format!(
                "expected the all_reduce collective (the time runs to the first correct \
                 all_reduce); got {}",
                names(collectives.iter().map(|c| c.name()).collect())
            ));
        }
        let layers = args.layers();
        let chosen = match layers[..] {
            [layer] => layer.stream_mode().map(|mode| (layer, mode)),
            _ => None,
        };
        let Some((layer, stream_mode)) = chosen else {
            return usage(format!(
                "expected one group layer (--layer group or group-caller); got {}",
                names(layers.iter().map(|layer| layer.name()).collect())
            ));
        };
        if args.datatype != DataTypeArg::FLOAT {
            return usage(
                "expected -d float (the sums are checked in f32); got another type".to_string(),
            );
        }
        let count = usize::try_from(args.min_bytes / 4)
            .unwrap_or(usize::MAX)
            .max(1);
        let mut options = args
            .group_options()
            .without_dump_dir()
            .with_stream_mode(stream_mode);
        if let Some(ms) = args.op_timeout_ms {
            options = options.with_op_timeout(Duration::from_millis(ms));
        }
        Ok(Self {
            layer,
            count,
            options,
        })
    }
}

/// The loaded NCCL's version, or why there is none, for a report.
pub(crate) fn nccl_text() -> String {
    nccl_core::version().map_or_else(|error| error.to_string(), |v| v.to_string())
}

/// The group's communicators (`--group-comms`) as a report names them.
pub(crate) fn comms_name(args: &Args) -> String {
    format!("{:?}", args.group_comms.comm_mode()).to_lowercase()
}

/// The rank of `ranks` whose `total` is longest, with its times: the one
/// the group waited for.
pub(crate) fn slowest<P: Copy>(
    ranks: &[(usize, P)],
    total: impl Fn(&P) -> f64,
) -> Option<(usize, P)> {
    ranks
        .iter()
        .copied()
        .max_by(|a, b| total(&a.1).total_cmp(&total(&b.1)))
}

/// Microseconds since the Unix epoch: comparable across the processes of
/// one host.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// Milliseconds from `from` to `to` (microsecond stamps), 0 when `to` is
/// earlier.
pub(crate) fn ms_between(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1000.0
}

/// One all_reduce of `value` from every member over `count` elements, read
/// back: `Ok(true)` when every element is `sum`, `Ok(false)` when one is
/// not (a wrong result given as a success), the group's error otherwise.
pub(crate) fn all_reduce(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    (count, value, sum): (usize, f32, f32),
) -> Result<bool, GroupError> {
    let tensor = Tensor::from_host(stream, &vec![value; count], &[count])?;
    let tensor = group
        .all_reduce(tensor, ReduceOp::Sum, stream)
        .map_err(|refusal| refusal.error)?
        .wait()?;
    Ok(tensor.to_vec(stream)?.iter().all(|&got| got == sum))
}

/// The error for a result that came back wrong as a success.
pub(crate) fn wrong(when: &str) -> BenchError {
    BenchError::WrongResult(format!(
        "an all_reduce {when} returned a wrong result as a success: expected every element to be the \
         ranks' sum"
    ))
}

/// What `rank` shared under `key` (`what`, for the message), read by
/// another process: `rank` itself keeps the value it shared (asked here,
/// it would be refused as sharing in another's stead).
pub(crate) fn shared_by(
    meeting: &LaunchMeeting,
    rank: usize,
    key: &str,
    what: &str,
) -> Result<Vec<u8>, BenchError> {
    meeting.share_from(rank, key, || {
        Err::<Vec<u8>, _>(BenchError::Usage(format!("only rank {rank} shares {what}")))
    })
}

/// Every process's `N` times (`what`, for the message), for rank 0: each
/// process publishes its own under `name` and goes on; rank 0 waits for
/// them all and gets them in rank order, its own included (`None` on the
/// others).
///
/// # Errors
/// The store's, naming the processes whose times did not come; a process
/// that shared another count of times.
pub(crate) fn gather_times<const N: usize>(
    meeting: &LaunchMeeting,
    name: &str,
    what: &str,
    times: [f64; N],
) -> Result<Option<Vec<[f64; N]>>, BenchError> {
    let Some(all) = meeting.gather(0, name, &f64s_bytes(&times))? else {
        return Ok(None);
    };
    let times = all
        .iter()
        .enumerate()
        .map(|(rank, bytes)| f64s_of(rank, what, bytes));
    times.collect::<Result<Vec<_>, _>>().map(Some)
}

/// The microsecond stamp `rank` shared as little-endian `bytes` (`what`,
/// for the message).
pub(crate) fn stamp_of(rank: usize, what: &str, bytes: &[u8]) -> Result<u64, BenchError> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| {
        BenchError::Usage(format!(
            "rank {rank} shared {what} as {} bytes; expected 8 (a little-endian microsecond \
             count): start every rank with the same nccl-perf",
            bytes.len()
        ))
    })?;
    Ok(u64::from_le_bytes(bytes))
}

/// The `f64`s `rank` shared as little-endian `bytes`, `N` of them (`what`,
/// for the message).
pub(crate) fn f64s_of<const N: usize>(
    rank: usize,
    what: &str,
    bytes: &[u8],
) -> Result<[f64; N], BenchError> {
    let refuse = || {
        BenchError::Usage(format!(
            "rank {rank} shared {} bytes of {what}, expected {} ({N} f64): start every rank with \
             the same nccl-perf",
            bytes.len(),
            N * 8
        ))
    };
    if bytes.len() != N * 8 {
        return Err(refuse());
    }
    let mut values = [0.0; N];
    for (value, chunk) in values.iter_mut().zip(bytes.chunks_exact(8)) {
        *value = f64::from_le_bytes(chunk.try_into().map_err(|_| refuse())?);
    }
    Ok(values)
}

/// `values` as [`f64s_of`] reads them back.
pub(crate) fn f64s_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Rank 0's files for the run's JSON object, opened before the run so
/// that a path it cannot write fails at once, not after the measurement.
pub(crate) struct Outputs {
    /// `-J FILE`: the object alone.
    pub(crate) file: Option<(PathBuf, File)>,
    /// `--json FILE`: the object appended as a line.
    pub(crate) json: Option<(PathBuf, File)>,
}

impl Outputs {
    /// The files `args` names, on rank 0 (none on the others).
    ///
    /// # Errors
    /// [`BenchError::Io`] naming a file that cannot be opened for writing.
    pub(crate) fn open(args: &Args, rank: usize) -> Result<Self, BenchError> {
        let open = |path: &Option<PathBuf>, append: bool| -> Result<_, BenchError> {
            let Some(path) = path.as_ref().filter(|_| rank == 0) else {
                return Ok(None);
            };
            let mut options = OpenOptions::new();
            match append {
                true => options.create(true).append(true),
                false => options.create(true).write(true).truncate(true),
            };
            let file = options.open(path).map_err(|source| BenchError::Io {
                what: path.display().to_string(),
                source,
            })?;
            Ok(Some((path.clone(), file)))
        };
        Ok(Self {
            file: open(&args.output_file, false)?,
            json: open(&args.json, true)?,
        })
    }

    /// Prints `lines` and then `json`, and writes `json` to the files.
    ///
    /// # Errors
    /// [`BenchError::Io`] naming what could not be written.
    pub(crate) fn report(
        self,
        lines: &[String],
        json: &serde_json::Value,
    ) -> Result<(), BenchError> {
        let io = |what: String| move |source| BenchError::Io { what, source };
        let json_line = json.to_string();
        let mut out = std::io::stdout().lock();
        for line in lines.iter().chain([&json_line]) {
            writeln!(out, "{line}").map_err(io("the standard output".into()))?;
        }
        for (path, mut file) in [self.file, self.json].into_iter().flatten() {
            writeln!(file, "{json}").map_err(io(path.display().to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
