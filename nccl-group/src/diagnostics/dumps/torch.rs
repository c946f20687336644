//! The dump in PyTorch's flight-recorder format (feature `torch-dumps`):
//! the pickled dictionary that `ProcessGroupNCCL` writes to
//! `TORCH_FR_DUMP_TEMP_FILE<rank>` and that `torchfrtrace`
//! (`torch.distributed.flight_recorder`) reads, schema version
//! [`VERSION`] (`c10d::FlightRecorder`'s `version_val`).
//!
//! The dictionary: `version`, `comm_lib_version` (the loaded NCCL's
//! version), `pg_config` (the group: `name`, `desc` `g<generation>`,
//! `ranks` as PyTorch writes them, `"[0, 1, 2, 3]"`), `pg_status`
//! (`last_enqueued_collective`, `last_started_collective` (always -1: the
//! recorder does not see starts), `last_completed_collective`; -1 for
//! none), `nccl_comm_state` (empty) and `entries`, one per record, oldest
//! first, with every key of PyTorch's entries:
//!
//! * `record_id` and `op_id`: [`OpRecord::seq`]; `pg_id`: 0 (one group
//!   per file); `process_group`: `(name, desc)`.
//! * `collective_seq_id` / `p2p_seq_id`: the record's own number
//!   ([`OpRecord::collective_seq`] or [`OpRecord::p2p_seq`]), and for the
//!   other one the last number of that kind issued before it, -1 for none.
//!   Numbers count from 0, as this crate's errors do (PyTorch's count from
//!   1): torchfrtrace's "collective sequence number 57" is the group's
//!   `collective #57`.
//! * `profiling_name`: `nccl:` and PyTorch's name of the operation
//!   (`nccl:all_reduce`, `nccl:send 0->1`, `nccl:all_reduce_barrier`);
//!   batches (`coalesced`, `batch_isend_irecv`) are `nccl:coalesced`, and
//!   operations PyTorch has no name for (custom ones, `graph_replay`)
//!   `nccl:coalesced <name>`, which torchfrtrace matches by name.
//! * `input_sizes` / `output_sizes`: one `[elements]` per local device
//!   ([`OpRecord::count`], [`OpRecord::output_count`]);
//!   `input_dtypes` / `output_dtypes`: PyTorch's names (`Float`).
//! * `state`: `completed` (suspect ones too), or `scheduled` (pending or
//!   failed: the recorder does not see starts); `retired`: no longer pending;
//!   `time_created_ns`, `time_discovered_completed_ns` (`None` unless
//!   completed), `time_discovered_started_ns` (`None`); `timeout_ms`;
//!   `is_p2p`; `frames` (empty: no stack traces); `thread_id` and
//!   `thread_name` ([`OpRecord::thread`], [`FlightDump::threads`]).
//! * `duration_ms`, right after `time_created_ns` as PyTorch puts it: the
//!   operation's GPU time in milliseconds (a float), where the group timed it
//!   ([`GroupOptions::gpu_timing`](crate::GroupOptions::gpu_timing),
//!   PyTorch's `TORCH_NCCL_ENABLE_TIMING`; [`OpRecord::gpu_duration`]);
//!   left out otherwise, as PyTorch leaves it out.
//!
//! One difference stays: PyTorch records tensor shapes, the recorder
//! element counts (a `[32, 32]` tensor is `[1024]` here), the same on
//! every rank, which is what torchfrtrace compares.

use std::collections::BTreeMap;

use nccl_core::DataType;
use serde::Serialize;

use super::DumpError;
use crate::diagnostics::recorder::records::{FlightDump, OpRecord, OpState, millis};

/// The version of PyTorch's flight-recorder schema that dumps follow.
pub const VERSION: &str = "2.10";

#[derive(Serialize)]
struct TorchDump<'a> {
    version: &'static str,
    comm_lib_version: &'a str,
    pg_config: BTreeMap<&'a str, PgConfig<'a>>,
    pg_status: BTreeMap<&'static str, PgStatus>,
    nccl_comm_state: BTreeMap<String, BTreeMap<String, String>>,
    entries: Vec<Entry<'a>>,
}

#[derive(Serialize)]
struct PgConfig<'a> {
    name: &'a str,
    desc: &'a str,
    ranks: String,
}

#[derive(Serialize)]
struct PgStatus {
    last_enqueued_collective: i64,
    last_started_collective: i64,
    last_completed_collective: i64,
}

#[derive(Serialize)]
struct Entry<'a> {
    record_id: u64,
    pg_id: u64,
    process_group: (&'a str, &'a str),
    collective_seq_id: i64,
    p2p_seq_id: i64,
    op_id: u64,
    profiling_name: String,
    time_created_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<f64>,
    timeout_ms: u64,
    input_sizes: Vec<Vec<usize>>,
    input_dtypes: Vec<&'static str>,
    output_sizes: Vec<Vec<usize>>,
    output_dtypes: Vec<&'static str>,
    state: &'static str,
    time_discovered_started_ns: Option<u64>,
    time_discovered_completed_ns: Option<u64>,
    retired: bool,
    is_p2p: bool,
    frames: Vec<()>,
    thread_id: String,
    thread_name: &'a str,
}

/// `n` as PyTorch's signed sequence numbers, -1 for none.
fn signed(n: Option<u64>) -> i64 {
    n.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// PyTorch's name of the element type nccl-tests calls `short_name`
/// (`float`: `Float`); `Undefined`, PyTorch's name for none, for a name
/// no NCCL type has.
fn torch_name(short_name: &str) -> &'static str {
    DataType::ALL
        .into_iter()
        .find(|dtype| dtype.short_name() == short_name)
        .map_or("Undefined", DataType::torch_name)
}

/// PyTorch's `profiling_name` of `record`, issued by rank `rank`.
fn profiling_name(record: &OpRecord, rank: usize) -> String {
    let peer = record.peer.map_or_else(String::new, |p| p.to_string());
    match &*record.op {
        "all_reduce" | "broadcast" | "reduce" | "all_gather" | "reduce_scatter" | "all_to_all"
        | "gather" | "scatter" => format!("nccl:{}", record.op),
        "all_to_all_single_split" => "nccl:all_to_all".to_string(),
        "barrier" => "nccl:all_reduce_barrier".to_string(),
        "send" => format!("nccl:send {rank}->{peer}"),
        "recv" => format!("nccl:recv {rank}<-{peer}"),
        "coalesced" | "batch_isend_irecv" => "nccl:coalesced".to_string(),
        other => format!("nccl:coalesced {other}"),
    }
}

/// PyTorch's `state` of a record: `completed` once its end event fired
/// (suspect or not: PyTorch's state knows no checks).
fn state(state: OpState) -> &'static str {
    match state {
        OpState::Completed | OpState::Suspect => "completed",
        OpState::Pending | OpState::Failed => "scheduled",
    }
}

fn entry<'a>(dump: &'a FlightDump, desc: &'a str, record: &OpRecord) -> Entry<'a> {
    // The other kind's last number before this record: every earlier
    // operation is a collective or a point-to-point one.
    let before = |own: u64| record.seq.checked_sub(own + 1);
    let (collective_seq_id, p2p_seq_id) = match (record.collective_seq, record.p2p_seq) {
        (Some(n), _) => (signed(Some(n)), signed(before(n))),
        (None, Some(n)) => (signed(before(n)), signed(Some(n))),
        (None, None) => (-1, -1),
    };
    let nanos = |us: u64| dump.epoch_unix_us.saturating_add(us).saturating_mul(1000);
    let devices = record.devices.len();
    let dtypes = record
        .dtype
        .as_deref()
        .map_or(Vec::new(), |dtype| vec![torch_name(dtype); devices]);
    Entry {
        record_id: record.seq,
        pg_id: 0,
        process_group: (&dump.group, desc),
        collective_seq_id,
        p2p_seq_id,
        op_id: record.seq,
        profiling_name: profiling_name(record, dump.rank),
        time_created_ns: nanos(record.enqueued_us),
        duration_ms: record
            .gpu_duration
            .map(|duration| duration.as_secs_f64() * 1e3),
        timeout_ms: millis(record.timeout),
        input_sizes: vec![vec![record.count]; devices],
        input_dtypes: dtypes.clone(),
        output_sizes: vec![vec![record.output_count]; devices],
        output_dtypes: dtypes,
        state: state(record.state),
        time_discovered_started_ns: None,
        time_discovered_completed_ns: record
            .finished_us
            .filter(|_| state(record.state) == "completed")
            .map(nanos),
        retired: record.state != OpState::Pending,
        is_p2p: record.collective_seq.is_none(),
        frames: Vec::new(),
        thread_id: record.thread.to_string(),
        thread_name: dump.threads.get(&record.thread).map_or("", String::as_str),
    }
}

/// `dump` as PyTorch's pickled flight-recorder dictionary (protocol 3,
/// which Python 3's `pickle.load` reads).
///
/// # Errors
/// [`DumpError::Torch`] if the encoder fails.
pub fn encode(dump: &FlightDump) -> Result<Vec<u8>, DumpError> {
    let desc = format!("g{}", dump.generation);
    let ranks: Vec<String> = (0..dump.world_size).map(|rank| rank.to_string()).collect();
    let torch = TorchDump {
        version: VERSION,
        comm_lib_version: dump.nccl_version.as_deref().unwrap_or(""),
        pg_config: BTreeMap::from([(
            dump.group.as_str(),
            PgConfig {
                name: &dump.group,
                desc: &desc,
                ranks: format!("[{}]", ranks.join(", ")),
            },
        )]),
        pg_status: BTreeMap::from([(
            "0",
            PgStatus {
                last_enqueued_collective: signed(dump.last_enqueued),
                last_started_collective: -1,
                last_completed_collective: signed(dump.last_completed),
            },
        )]),
        nccl_comm_state: BTreeMap::new(),
        entries: dump
            .ops
            .iter()
            .map(|record| entry(dump, &desc, record))
            .collect(),
    };
    serde_pickle::to_vec(&torch, serde_pickle::SerOptions::new())
        .map_err(|error| DumpError::Torch(error.to_string()))
}
