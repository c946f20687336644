//! `-J FILE`: nccl-tests' JSON document (version 3 of its schema, as its
//! `src/util.cu` writes it), next to the table: the command line, the
//! environment and the NCCL version; the run's configuration and devices;
//! one result per table row; the totals; the errors and the end time.
//!
//! With `-I 1` each mode of a result is followed by its per-iteration
//! report (`out_of_place_per_iter`, `in_place_per_iter`: the statistics,
//! `times_us` and, with several processes, `per_process_max_times_us`),
//! which nccl-tests' `tools/analyze_perf_json.py` reads.
//!
//! The keys, their order and their value forms are nccl-tests' (doubles
//! with six decimals, `"nan"` for NaN, booleans as the strings `"true"`
//! and `"false"`, the root as `printf("%6i")`, a mode without a
//! measurement as `null`); each result also names its `collective`, as
//! one nccl-perf run may cover several. Times are UTC.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::comments::Machine;
use super::{Measurement, Row, clock};
use crate::method::Step;
use crate::per_iter::PerIter;
use crate::runner::Plan;

/// nccl-tests' `JSON_FILE_VERSION`.
pub const SCHEMA_VERSION: u32 = 3;

/// How many `FILE.N` names are tried after `FILE` exists.
const MAX_PROBES: u32 = 1000;

/// A GPU as the document lists it under `config.devices`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonDevice {
    /// The rank.
    pub rank: usize,
    /// The process id.
    pub pid: u32,
    /// The host.
    pub hostname: String,
    /// The CUDA device ordinal.
    pub device: usize,
    /// The PCI address (`0000:04:00`).
    pub device_hex: String,
    /// The GPU's name.
    pub device_info: String,
}

/// Everything the document says before its results.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonHead {
    /// The command line, program first.
    pub args: Vec<String>,
    /// The environment, `NAME=value` each.
    pub env: Vec<String>,
    /// `ncclGetVersion`'s code (22803 for 2.28.3).
    pub nccl_version: u32,
    /// Threads: one per rank of this process.
    pub nthreads: usize,
    /// GPUs per thread.
    pub ngpus: usize,
    /// The smallest size.
    pub minimum_bytes: u64,
    /// The largest size (`-e`).
    pub maximum_bytes: u64,
    /// How sizes grow.
    pub step: Step,
    /// `-w`.
    pub warmup_iters: u32,
    /// `-n`.
    pub iterations: u32,
    /// `-m`.
    pub aggregated_iterations: u32,
    /// `-c`.
    pub validation: u32,
    /// `-G`.
    pub graph: u32,
    /// Whether `-z` is not 0.
    pub blocking: bool,
    /// `-p` (every rank initializes its own communicator here: true).
    pub parallel_init: bool,
    /// Whether times are CPU times (`-C 1`: the key is `cpu_time`).
    pub cpu_time: bool,
    /// `-I 1`.
    pub per_iter_timing: bool,
    /// `-K` (0 without `-I 1`).
    pub per_iter_skip: u32,
    /// The first GPU of each process, in rank order: nccl-tests lists one
    /// per process (`parseRankInfo` reads a process's first rank line),
    /// and its `analyze_perf_json.py` groups process rows by their hosts.
    pub devices: Vec<JsonDevice>,
}

impl JsonHead {
    /// The head of `plan`'s document on `machine`, with this process's
    /// command line and environment.
    pub fn new(plan: &Plan, machine: &Machine) -> Self {
        let version = machine.nccl_version;
        Self {
            args: std::env::args_os()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect(),
            env: std::env::vars_os()
                .map(|(name, value)| {
                    format!("{}={}", name.to_string_lossy(), value.to_string_lossy())
                })
                .collect(),
            nccl_version: version.major * 10_000 + version.minor * 100 + version.patch,
            nthreads: plan.threads,
            ngpus: plan.gpus_per_thread,
            minimum_bytes: plan.sizes.first().copied().unwrap_or(0),
            maximum_bytes: plan.method.capacity_bytes,
            step: plan.method.step,
            warmup_iters: plan.warmup,
            iterations: plan.iters,
            aggregated_iterations: plan.method.agg_iters,
            validation: plan.method.checks,
            graph: plan.graph,
            blocking: plan.method.blocking.waits(),
            parallel_init: true,
            cpu_time: plan.method.cpu_time,
            per_iter_timing: plan.method.per_iter.is_some(),
            per_iter_skip: plan.method.per_iter.unwrap_or(0),
            devices: machine
                .devices
                .iter()
                .step_by(plan.ranks_per_process().max(1))
                .map(|device| JsonDevice {
                    rank: device.rank,
                    pid: device.pid,
                    hostname: device.host.clone(),
                    device: device.ordinal,
                    device_hex: device.pci.clone(),
                    device_info: device.name.clone(),
                })
                .collect(),
        }
    }
}

/// An open `-J` document: its head is written, results are appended as
/// rows come, and [`JsonDocument::finish`] closes it (dropping it unfinished
/// closes it too, with an error saying the run stopped).
pub struct JsonDocument {
    file: BufWriter<File>,
    path: PathBuf,
    /// The key of each mode's time: `time`, or `cpu_time` with `-C 1`.
    time_key: &'static str,
    /// `-n`, each result's `actual_iterations`.
    iterations: u32,
    results: usize,
    wrong: u64,
    busbw: (f64, usize),
    finished: bool,
}

/// `value` as C's `%lf` writes it; NaN as nccl-tests' `"nan"` (and an
/// infinity likewise as a string, so the document stays JSON).
fn double(value: f64) -> String {
    if value.is_nan() {
        string("nan")
    } else if value.is_infinite() {
        string(if value > 0.0 { "inf" } else { "-inf" })
    } else {
        format!("{value:.6}")
    }
}

/// `text` as a JSON string.
fn string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

/// nccl-tests' booleans: the strings `"true"` and `"false"`.
fn boolean(value: bool) -> String {
    string(if value { "true" } else { "false" })
}

/// `values` as a JSON list of strings.
fn strings(values: &[String]) -> String {
    let items: Vec<String> = values.iter().map(|value| string(value)).collect();
    format!("[{}]", items.join(","))
}

/// The document up to the opening of its results list, with its start time.
pub fn head_text(head: &JsonHead, start_time: &str) -> String {
    let mut text = String::new();
    let step = match head.step {
        Step::Factor(factor) => format!("\"step_factor\":{factor}"),
        Step::Bytes(bytes) => format!("\"step_bytes\":{bytes}"),
    };
    let devices: Vec<String> = head
        .devices
        .iter()
        .map(|device| {
            format!(
                "{{\"rank\":{},\"group\":0,\"pid\":{},\"hostname\":{},\"device\":{},\"device_hex\":{},\"device_info\":{}}}",
                device.rank,
                device.pid,
                string(&device.hostname),
                device.device,
                string(&device.device_hex),
                string(&device.device_info)
            )
        })
        .collect();
    let _ = write!(
        text,
        "{{\"version\":{SCHEMA_VERSION},\"start_time\":{},\"args\":{},\"env\":{},\"nccl_version\":{},\
         \"config\":{{\"nthreads\":{},\"ngpus\":{},\"minimum_bytes\":{},\"maximum_bytes\":{},{step},\
         \"warmup_iters\":{},\"iterations\":{},\"aggregated_iterations\":{},\"validation\":{},\"graph\":{},\
         \"blocking_collectives\":{},\"per_iter_timing\":{},\"per_iter_skip\":{},\"parallel_init\":{},\
         \"devices\":[{}]}},\"results\":[",
        string(start_time),
        strings(&head.args),
        strings(&head.env),
        head.nccl_version,
        head.nthreads,
        head.ngpus,
        head.minimum_bytes,
        head.maximum_bytes,
        head.warmup_iters,
        head.iterations,
        head.aggregated_iterations,
        head.validation,
        head.graph,
        boolean(head.blocking),
        boolean(head.per_iter_timing),
        head.per_iter_skip,
        boolean(head.parallel_init),
        devices.join(",")
    );
    text
}

/// One mode of a result: its object, or `null` without a measurement.
fn mode_text(measurement: Option<&Measurement>, time_key: &str) -> String {
    match measurement {
        Some(m) => format!(
            "{{\"{time_key}\":{},\"alg_bw\":{},\"bus_bw\":{},\"nwrong\":{}}}",
            double(m.time_us),
            double(m.algbw),
            double(m.busbw),
            m.wrong
                .map_or_else(|| "null".to_string(), |wrong| double(wrong as f64))
        ),
        None => "null".to_string(),
    }
}

/// A mode's per-iteration report (`-I 1`), after the mode's object under
/// `key` (`out_of_place_per_iter`, `in_place_per_iter`), as nccl-tests'
/// `writePerIterReport` writes it: `,"key":{...}`, or nothing without one.
fn per_iter_text(key: &str, per_iter: Option<&PerIter>) -> String {
    let Some(report) = per_iter else {
        return String::new();
    };
    let list = |times: &[f64]| {
        let items: Vec<String> = times.iter().map(|&time| double(time)).collect();
        format!("[{}]", items.join(","))
    };
    let stats = &report.stats;
    let mut text = format!(
        ",\"{key}\":{{\"skipped_iterations\":{}",
        report.skipped_iterations
    );
    for (name, value) in [
        ("min_us", stats.min_us),
        ("max_us", stats.max_us),
        ("avg_us", stats.avg_us),
        ("p50_us", stats.p50_us),
        ("p95_us", stats.p95_us),
        ("p99_us", stats.p99_us),
        ("stdev_us", stats.stdev_us),
        ("cv_pct", stats.cv_pct),
    ] {
        let _ = write!(text, ",\"{name}\":{}", double(value));
    }
    let _ = write!(text, ",\"times_us\":{}", list(&report.times_us));
    if let Some(processes) = &report.per_process_max_times_us {
        let rows: Vec<String> = processes.iter().map(|times| list(times)).collect();
        let _ = write!(text, ",\"per_process_max_times_us\":[{}]", rows.join(","));
    }
    text.push('}');
    text
}

/// One result: a row of the table (`time_key` names its times;
/// `iterations` is `-n`), each mode followed by its per-iteration report
/// when it has one.
pub fn result_text(row: &Row, time_key: &str, iterations: u32) -> String {
    format!(
        "{{\"size\":{},\"count\":{},\"type\":{},\"redop\":{},\"root\":{},\"out_of_place\":{}{},\"in_place\":{}{},\
         \"actual_iterations\":{iterations},\"experiment_name\":\"\",\"collective\":{}}}",
        row.size,
        row.count,
        string(row.dtype),
        string(row.redop),
        string(&format!("{:6}", row.root)),
        mode_text(row.out_of_place.as_ref(), time_key),
        per_iter_text("out_of_place_per_iter", row.out_of_place_per_iter.as_ref()),
        mode_text(row.in_place.as_ref(), time_key),
        per_iter_text("in_place_per_iter", row.in_place_per_iter.as_ref()),
        string(row.collective)
    )
}

/// The end of the document after its results: the totals, `errors` and
/// the end time.
pub fn tail_text(wrong: u64, average_busbw: f64, errors: &[String], end_time: &str) -> String {
    format!(
        "],\"out_of_bounds\":{{\"count\":{wrong},\"okay\":{}}},\"average_bus_bandwidth\":{{\"bandwidth\":{},\
         \"okay\":\"unchecked\"}},\"errors\":{},\"end_time\":{}}}",
        boolean(wrong == 0),
        double(average_busbw),
        strings(errors),
        string(end_time)
    )
}

/// Creates `path` without replacing a file there, as nccl-tests does:
/// `path`, else `path.0`, `path.1`, ... The name used and the file.
fn create_new(path: &Path) -> io::Result<(PathBuf, File)> {
    let open = |candidate: &Path| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(candidate)
    };
    let mut candidate = path.to_path_buf();
    for probe in 0..=MAX_PROBES {
        match open(&candidate) {
            Ok(file) => return Ok((candidate, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && probe < MAX_PROBES => {
                let mut name = path.as_os_str().to_os_string();
                name.push(format!(".{probe}"));
                candidate = PathBuf::from(name);
            }
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{} and {MAX_PROBES} numbered names exist", path.display()),
    ))
}

impl JsonDocument {
    /// Creates the document at `path` (or the first free `path.N`) and
    /// writes its head.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(path: &Path, head: &JsonHead) -> io::Result<Self> {
        let (path, file) = create_new(path)?;
        let mut document = Self {
            file: BufWriter::new(file),
            path,
            time_key: if head.cpu_time { "cpu_time" } else { "time" },
            iterations: head.iterations,
            results: 0,
            wrong: 0,
            busbw: (0.0, 0),
            finished: false,
        };
        document
            .file
            .write_all(head_text(head, &clock::utc_now()).as_bytes())?;
        Ok(document)
    }

    /// Where the document is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `row` to the results.
    ///
    /// # Errors
    /// Writing failed.
    pub fn result(&mut self, row: &Row) -> io::Result<()> {
        if self.results > 0 {
            self.file.write_all(b",")?;
        }
        self.file
            .write_all(result_text(row, self.time_key, self.iterations).as_bytes())?;
        self.results += 1;
        for measurement in [&row.out_of_place, &row.in_place].into_iter().flatten() {
            self.wrong += measurement.wrong.unwrap_or(0);
            self.busbw.0 += measurement.busbw;
            self.busbw.1 += 1;
        }
        Ok(())
    }

    /// Closes the document with `errors` (empty after a good run).
    ///
    /// # Errors
    /// Writing failed.
    pub fn finish(&mut self, errors: &[String]) -> io::Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let average = if self.busbw.1 == 0 {
            0.0
        } else {
            self.busbw.0 / self.busbw.1 as f64
        };
        self.file
            .write_all(tail_text(self.wrong, average, errors, &clock::utc_now()).as_bytes())?;
        self.file.flush()
    }
}

impl Drop for JsonDocument {
    /// Closes a document the run did not finish, so the file stays valid
    /// JSON; a failure here cannot be reported (the run's own error is).
    fn drop(&mut self) {
        let _ = self.finish(&["nccl-perf stopped before the end of the run".to_string()]);
    }
}

#[cfg(test)]
mod tests;
