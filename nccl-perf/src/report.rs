//! Output: nccl-tests' table on stdout, the comment lines around it, and
//! one JSON object per row.
//!
//! The table keeps nccl-tests' columns. With `--compare A,B` it is B's
//! table with one more column, `ratio` (time B / time A, same size and
//! mode), at the end of each half: `time algbw busbw #wrong ratio` for
//! out-of-place, then the same for in-place. A mode a layer cannot issue
//! prints `N/A` in each of its columns, so every row has the same number of
//! whitespace-separated fields.
//!
//! This module holds the rows ([`Row`], with their JSON form); `format`
//! prints numbers as nccl-tests' C code does, `clock` its timestamps,
//! `table` lays out the column headers, rows and footers, `comments`
//! writes the comment lines that describe the run, `nccl_tests_json`
//! writes nccl-tests' JSON document (`-J`), `reporter` sends lines to
//! stdout and rows to the JSON files, and `rows_file` reads `--json`'s rows
//! back (`--report`).

mod clock;
mod comments;
mod format;
mod nccl_tests_json;
mod reporter;
mod rows_file;
mod table;

use serde::{Deserialize, Serialize};

use crate::collective::Mode;
use crate::per_iter::PerIter;
pub use comments::{DeviceInfo, Machine, TableTitle, collective_header, table_heading};
#[cfg(feature = "plot")]
pub use format::c_general;
pub use reporter::Reporter;
pub use rows_file::read_rows;
pub use table::{Columns, collective_footer, wrong_elements};

/// One timed mode of one row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Time per operation in microseconds (averaged over the ranks).
    pub time_us: f64,
    /// Algorithm bandwidth in GB/s.
    pub algbw: f64,
    /// Bus bandwidth in GB/s.
    pub busbw: f64,
    /// Wrong elements summed over the ranks; `None` when not checked (`N/A`).
    pub wrong: Option<u64>,
}

/// One line of the table: a size, out-of-place then in-place; one line
/// of `--json`'s file, read back by `--report` ([`read_rows`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The collective (`all_reduce`).
    #[serde(deserialize_with = "rows_file::collective")]
    pub collective: &'static str,
    /// The layer that issued the calls (`raw`, `core`).
    #[serde(deserialize_with = "rows_file::layer")]
    pub layer: &'static str,
    /// The number of ranks.
    pub world_size: usize,
    /// The `size` column: bytes of the larger buffer.
    pub size: u64,
    /// The `count` column: the element count passed to NCCL.
    pub count: usize,
    /// The `type` column (`float`).
    #[serde(rename = "type", deserialize_with = "rows_file::dtype")]
    pub dtype: &'static str,
    /// The `redop` column (`sum`, or `none`).
    #[serde(deserialize_with = "rows_file::redop")]
    pub redop: &'static str,
    /// The `root` column (-1 when the collective has none).
    pub root: i32,
    /// Separate send and receive buffers; `None` (`N/A`, JSON `null`) when
    /// the layer cannot issue this mode.
    pub out_of_place: Option<Measurement>,
    /// One buffer; `None` when the layer cannot issue this mode (the tensor
    /// layer's all_gather, reduce_scatter and all_to_all).
    pub in_place: Option<Measurement>,
    /// `-I 1`: the out-of-place half's per-iteration report, under
    /// nccl-tests' name; omitted without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_place_per_iter: Option<PerIter>,
    /// `-I 1`: the in-place half's per-iteration report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_per_iter: Option<PerIter>,
    /// The times are the host's time to issue the calls (`-C 1`); omitted
    /// when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cpu_time: bool,
    /// With `--compare`: this layer's time over the baseline's (B's rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<Ratio>,
    /// Graph replays per batch (`-G`); omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// `time / time of the baseline` for each mode, at the same size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// The layer divided by (A of `--compare A,B`).
    #[serde(deserialize_with = "rows_file::layer")]
    pub baseline: &'static str,
    /// Out-of-place ratio; `None` when either layer has no time.
    pub out_of_place: Option<f64>,
    /// In-place ratio; `None` when either layer has no time.
    pub in_place: Option<f64>,
}

impl Ratio {
    /// The ratios of `subject` over `baseline`, mode by mode.
    pub fn between(baseline: &Row, subject: &Row) -> Self {
        let ratio = |mode| match (baseline.measurement(mode), subject.measurement(mode)) {
            (Some(a), Some(b)) if a.time_us > 0.0 && b.time_us.is_finite() => {
                Some(b.time_us / a.time_us)
            }
            _ => None,
        };
        Self {
            baseline: baseline.layer,
            out_of_place: ratio(Mode::OutOfPlace),
            in_place: ratio(Mode::InPlace),
        }
    }

    /// The ratio of `mode`.
    pub fn of(&self, mode: Mode) -> Option<f64> {
        match mode {
            Mode::OutOfPlace => self.out_of_place,
            Mode::InPlace => self.in_place,
        }
    }
}

impl Row {
    /// The measurement of `mode`, if the layer issued it.
    pub fn measurement(&self, mode: Mode) -> Option<&Measurement> {
        match mode {
            Mode::OutOfPlace => self.out_of_place.as_ref(),
            Mode::InPlace => self.in_place.as_ref(),
        }
    }

    /// The per-iteration report of `mode` (`-I 1`), if any.
    pub fn per_iter(&self, mode: Mode) -> Option<&PerIter> {
        match mode {
            Mode::OutOfPlace => self.out_of_place_per_iter.as_ref(),
            Mode::InPlace => self.in_place_per_iter.as_ref(),
        }
    }

    /// The row as one line of JSON (no newline).
    ///
    /// # Errors
    /// Only if serde_json fails, which it does not for this type.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

/// The rows and measurements the tests of the report and of what reads
/// rows (plot, redraw) are made of.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An all_reduce row of the core layer at world size 1.
    pub(crate) fn row(
        size: u64,
        count: usize,
        redop: &'static str,
        root: i32,
        oop: Measurement,
        ip: Measurement,
    ) -> Row {
        Row {
            collective: "all_reduce",
            layer: "core",
            world_size: 1,
            size,
            count,
            dtype: "float",
            redop,
            root,
            out_of_place: Some(oop),
            in_place: Some(ip),
            out_of_place_per_iter: None,
            in_place_per_iter: None,
            cpu_time: false,
            ratio: None,
            graph: 0,
        }
    }

    /// The 8-byte sum row (two floats, no root) with these two halves.
    pub(super) fn eight_byte_sum(oop: Measurement, ip: Measurement) -> Row {
        row(8, 2, "sum", -1, oop, ip)
    }

    /// The 8-byte sum row several tests write and read back: out of place
    /// checked (0 wrong), in place not.
    pub(super) fn sample_row() -> Row {
        eight_byte_sum(m(6.5, 0.5, 0.0, Some(0)), m(0.25, 32.0, 0.0, None))
    }

    /// A measurement.
    pub(crate) fn m(time_us: f64, algbw: f64, busbw: f64, wrong: Option<u64>) -> Measurement {
        Measurement {
            time_us,
            algbw,
            busbw,
            wrong,
        }
    }

    #[test]
    fn json_rows() {
        let r = sample_row();
        let value: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "collective": "all_reduce",
                "layer": "core",
                "world_size": 1,
                "size": 8,
                "count": 2,
                "type": "float",
                "redop": "sum",
                "root": -1,
                "out_of_place": {"time_us": 6.5, "algbw": 0.5, "busbw": 0.0, "wrong": 0},
                "in_place": {"time_us": 0.25, "algbw": 32.0, "busbw": 0.0, "wrong": null}
            })
        );
        // --compare: B's row names the baseline and both ratios; a mode the
        // layer cannot issue is null; -G adds the replay count.
        let baseline = Row {
            layer: "raw",
            ..r.clone()
        };
        let mut subject = Row {
            layer: "tensor",
            out_of_place: Some(m(13.0, 0.25, 0.0, Some(0))),
            in_place: None,
            graph: 100,
            ..r.clone()
        };
        subject.ratio = Some(Ratio::between(&baseline, &subject));
        let value: serde_json::Value = serde_json::from_str(&subject.to_json().unwrap()).unwrap();
        assert_eq!(value["layer"], "tensor");
        assert_eq!(value["graph"], 100);
        assert_eq!(value["in_place"], serde_json::Value::Null);
        assert_eq!(
            value["ratio"],
            serde_json::json!({"baseline": "raw", "out_of_place": 2.0, "in_place": null})
        );
        let value: serde_json::Value = serde_json::from_str(&baseline.to_json().unwrap()).unwrap();
        assert_eq!(value["layer"], "raw");
        assert!(value.get("ratio").is_none() && value.get("graph").is_none());
    }
}
