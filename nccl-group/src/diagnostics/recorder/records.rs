//! What the flight recorder keeps and a dump holds: each operation's
//! record ([`OpRecord`], [`OpState`], [`OpDescription`]), every rank's
//! progress ([`PeerProgress`], [`lagging_ranks`]) and the dump itself
//! ([`FlightDump`]), with their JSON form, which they read back
//! (`serde_json::from_str::<FlightDump>`) as they wrote it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

#[cfg(feature = "cuda")]
use nccl_core::DataType;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::devices::DeviceList;
use crate::diagnostics::analysis::Divergence;
use crate::diagnostics::ras::RasReport;

/// What became of a recorded operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpState {
    /// Enqueued; the watchdog has not yet seen it finish.
    Pending,
    /// Its end event completed on every device (and, once the group has
    /// failed, a check of the communicators found no error after that).
    Completed,
    /// Its end event completed, but the group failed before a check of
    /// its communicators followed: it may have ended because a peer died,
    /// over partial data.
    ///
    /// Work the GPU ran on its results is suspect.
    Suspect,
    /// The group failed (timeout, asynchronous error, abort) before it finished.
    Failed,
}

/// `pending`, `completed`, `suspect`, `failed`: the name a dump writes.
impl std::fmt::Display for OpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OpState::Pending => "pending",
            OpState::Completed => "completed",
            OpState::Suspect => "suspect",
            OpState::Failed => "failed",
        })
    }
}

/// What an operation did, as recorded before it was enqueued.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDescription {
    /// The operation (`"all_reduce"`, `"send"`, ...).
    pub op: &'static str,
    /// Its element type (`None` for barrier and custom operations without one).
    pub dtype: Option<DataType>,
    /// Elements of the (first) input on each device.
    pub count: usize,
    /// Elements of the (first) output on each device.
    pub output_count: usize,
    /// The reduction, as nccl-tests names it (`"sum"`, `"premulsum"`, ...).
    pub reduction: Option<&'static str>,
    /// The root of broadcast and reduce, the peer rank of send and recv.
    pub peer: Option<usize>,
    /// How long it may run before the watchdog fails the group.
    pub timeout: Duration,
    /// The local devices it ran on, in call order.
    pub devices: DeviceList,
    /// Whether every rank issues it (a collective) or only a pair (send, recv).
    pub collective: bool,
}

/// One recorded operation.
///
/// Its names are `Cow`s: the recorder borrows the operation's and the
/// reduction's static names (recording allocates nothing), a dump read
/// back owns them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRecord {
    /// The operation's number among every operation of this process on
    /// the group (collectives and point-to-point), from 0.
    pub seq: u64,
    /// Its number among the group's collectives, from 0: the same number
    /// on every rank for the same collective (`None` for send and recv,
    /// which only two ranks issue).
    pub collective_seq: Option<u64>,
    /// Its number among this process's point-to-point operations on the
    /// group (send, recv and batches of them), from 0 (`None` for a
    /// collective).
    ///
    /// Every operation has one of the two numbers.
    pub p2p_seq: Option<u64>,
    /// The operation (`"all_reduce"`, `"send"`, ...).
    pub op: Cow<'static, str>,
    /// The element type, as nccl-tests names it (`"float"`,
    /// [`DataType::short_name`](nccl_core::DataType::short_name); `None`
    /// for barrier and custom operations without one): a name, so a dump
    /// reads back without nccl-core.
    #[serde(default)]
    pub dtype: Option<Cow<'static, str>>,
    /// Elements of the (first) input on each device.
    pub count: usize,
    /// Elements of the (first) output on each device.
    pub output_count: usize,
    /// The reduction, as nccl-tests names it (`"sum"`, ...).
    pub reduction: Option<Cow<'static, str>>,
    /// The root of broadcast and reduce, the peer rank of send and recv.
    pub peer: Option<usize>,
    /// How long it could run before the watchdog would fail the group (in
    /// the JSON: `timeout_ms`).
    #[serde(
        rename = "timeout_ms",
        serialize_with = "serialize_millis",
        deserialize_with = "deserialize_millis"
    )]
    pub timeout: Duration,
    /// The operating system's id of the thread that issued it (Linux's
    /// thread id, as `top -H` and `gdb` show it; 0 where it is unknown).
    ///
    /// [`FlightDump::threads`] names it.
    pub thread: u64,
    /// The local devices, in call order.
    #[serde(
        serialize_with = "serialize_devices",
        deserialize_with = "deserialize_devices"
    )]
    pub devices: DeviceList,
    /// When it was enqueued: microseconds since the records' epoch
    /// ([`FlightDump::epoch_unix_us`]).
    pub enqueued_us: u64,
    /// When the watchdog saw it finish (or fail), on the same clock.
    pub finished_us: Option<u64>,
    /// How long it ran on the GPU, from an event recorded just before its
    /// enqueue to its end event, the longest of its devices (in the JSON:
    /// `gpu_duration_us`, fractional microseconds): with
    /// [`GroupOptions::gpu_timing`](crate::GroupOptions::gpu_timing) on,
    /// once it completed; `None` otherwise, and for operations captured in
    /// a CUDA graph.
    #[serde(
        default,
        rename = "gpu_duration_us",
        serialize_with = "serialize_micros",
        deserialize_with = "deserialize_micros"
    )]
    pub gpu_duration: Option<Duration>,
    /// What became of it.
    pub state: OpState,
}

#[cfg(test)]
impl OpRecord {
    /// The tests' failed operation: all_reduce #57 (collective
    /// `collective_seq`) of 1024 floats, summed, on device 0, with a 5 s
    /// timeout.
    pub(crate) fn sample(collective_seq: u64) -> Self {
        Self {
            seq: 57,
            collective_seq: Some(collective_seq),
            p2p_seq: None,
            op: "all_reduce".into(),
            dtype: Some("float".into()),
            count: 1024,
            output_count: 1024,
            reduction: Some("sum".into()),
            peer: None,
            timeout: Duration::from_secs(5),
            thread: 0,
            devices: DeviceList::one(0).expect("device 0"),
            enqueued_us: 10,
            finished_us: None,
            gpu_duration: None,
            state: OpState::Failed,
        }
    }
}

fn serialize_divergence<S: Serializer>(
    divergence: &Option<Divergence>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct WithMessage<'a> {
        #[serde(flatten)]
        divergence: &'a Divergence,
        message: String,
    }
    divergence
        .as_ref()
        .map(|divergence| WithMessage {
            divergence,
            message: divergence.to_string(),
        })
        .serialize(s)
}

fn serialize_devices<S: Serializer>(devices: &DeviceList, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(devices.iter())
}

fn deserialize_devices<'de, D: Deserializer<'de>>(d: D) -> Result<DeviceList, D::Error> {
    let ordinals = Vec::<usize>::deserialize(d)?;
    DeviceList::checked(ordinals.into_iter()).map_err(|(expected, given)| {
        D::Error::custom(format!("devices: expected {expected}, given {given}"))
    })
}

/// Whole milliseconds of `duration` (saturating), as dumps write timeouts.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn serialize_millis<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(millis(*duration))
}

fn deserialize_millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

fn serialize_micros<S: Serializer>(duration: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    duration
        .map(|duration| duration.as_nanos() as f64 / 1e3)
        .serialize(s)
}

/// Fractional microseconds back to a duration, to the nanosecond (which
/// reads back what [`serialize_micros`] wrote exactly).
fn deserialize_micros<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let Some(micros) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    if !(micros.is_finite() && micros >= 0.0) {
        return Err(D::Error::custom(format!(
            "gpu_duration_us: expected a non-negative number of microseconds, given {micros}"
        )));
    }
    Ok(Some(Duration::from_nanos((micros * 1e3).round() as u64)))
}

/// The name of this process's thread `thread` (an [`OpRecord::thread`]),
/// as the operating system has it (`/proc`), or `None` for a thread that
/// has ended or an id that is unknown.
pub fn thread_name(thread: u64) -> Option<String> {
    if thread == 0 {
        return None;
    }
    let name = std::fs::read_to_string(format!("/proc/self/task/{thread}/comm")).ok()?;
    Some(name.trim_end_matches('\n').to_string())
}

/// How far one rank got, as it reported through the store after a timeout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PeerProgress {
    /// The rank.
    pub rank: usize,
    /// The last collective it enqueued (`None`: none yet).
    pub last_enqueued: Option<u64>,
    /// The last collective it saw complete (`None`: none yet).
    pub last_completed: Option<u64>,
}

/// A snapshot of the flight recorder, with the context to read it.
///
/// What a dump file (`rank<r>.json`) holds, written by [`FlightDump::to_json`]
/// and read back by [`FlightDump::from_json`] (or any serde reader): a
/// tool reads every field the recorder wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlightDump {
    /// The group's name.
    pub group: String,
    /// The group instance's generation (see `Membership` in the testing module).
    pub generation: u64,
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// Why the dump was taken (`"on request"`, the failure's message, ...).
    pub reason: String,
    /// The moment the records' times count from, in microseconds since the
    /// Unix epoch (one for every recorder of the process).
    pub epoch_unix_us: u64,
    /// When the dump was taken, on the records' clock.
    pub dumped_us: u64,
    /// This process's id.
    pub pid: u32,
    /// The loaded libnccl's version (`None`: none was loaded).
    pub nccl_version: Option<String>,
    /// The last collective this process enqueued.
    pub last_enqueued: Option<u64>,
    /// The last collective this process saw complete.
    pub last_completed: Option<u64>,
    /// Every rank's progress as exchanged after a timeout (empty otherwise;
    /// a rank missing from it did not answer).
    pub peers: Vec<PeerProgress>,
    /// The ranks that had not enqueued the collective this process was
    /// stuck on, or did not answer: the likely culprits.
    pub lagging: Vec<usize>,
    /// After a failure, the first collective the ranks that answered did
    /// not issue alike ([`FailureDetails::divergence`](crate::FailureDetails::divergence);
    /// in the JSON with `message`, its text); `null` otherwise.
    #[serde(serialize_with = "serialize_divergence")]
    pub divergence: Option<Divergence>,
    /// After a failure, NCCL's RAS view of the job
    /// ([`FailureDetails::ras`](crate::FailureDetails::ras); in the JSON
    /// with `format`: `json`, `text` or `unavailable`); `null` when not
    /// asked.
    pub ras: Option<RasReport>,
    /// How many operations were recorded in all (older ones were overwritten).
    pub total_recorded: u64,
    /// The last operations, oldest first.
    pub ops: Vec<OpRecord>,
    /// The names of the threads that issued them, by [`OpRecord::thread`],
    /// as they were when the dump was taken (a thread that had ended by
    /// then is missing).
    pub threads: BTreeMap<u64, String>,
}

impl FlightDump {
    /// The names of the threads of `ops` that still run ([`thread_name`]).
    pub fn thread_names(ops: &[OpRecord]) -> BTreeMap<u64, String> {
        ops.iter()
            .map(|op| op.thread)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(|thread| Some((thread, thread_name(thread)?)))
            .collect()
    }

    /// The dump that `json` holds (a dump file's text, [`FlightDump::to_json`]'s
    /// output).
    ///
    /// # Errors
    /// JSON that is not a whole dump: the parser's message names the line,
    /// the column and the field that was missing or malformed.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The dump as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Every field serialises infallibly (numbers, strings, lists).
        serde_json::to_string_pretty(self).unwrap_or_else(|error| {
            format!("{{\"error\": \"the flight recorder dump did not serialise: {error}\"}}")
        })
    }
}

/// The ranks that had not enqueued collective `stuck` (by their reported
/// progress), or did not report at all, among `0..world_size` except `me`.
pub fn lagging_ranks(
    stuck: Option<u64>,
    peers: &[PeerProgress],
    world_size: usize,
    me: usize,
) -> Vec<usize> {
    (0..world_size)
        .filter(|&rank| rank != me)
        .filter(|&rank| match peers.iter().find(|p| p.rank == rank) {
            None => true,
            Some(peer) => match (stuck, peer.last_enqueued) {
                (Some(stuck), Some(enqueued)) => enqueued < stuck,
                (Some(_), None) => true,
                (None, _) => false,
            },
        })
        .collect()
}
