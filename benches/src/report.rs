//! Output: nccl-tests' table on stdout and one JSON object per row.
//!
//! The table keeps nccl-tests' columns. With `--compare A,B` it is B's
//! table with one more column, `ratio` (time B / time A, same size and
//! mode), at the end of each half: `time algbw busbw #wrong ratio` for
//! out-of-place, then the same for in-place. A mode a layer cannot issue
//! prints `N/A` in each of its columns, so every row has the same number of
//! whitespace-separated fields.

use std::io::{self, Write};

use indicatif::ProgressBar;
use serde::Serialize;

use crate::collective::Mode;

/// One timed mode of one row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
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

/// One line of the table: a size, out-of-place then in-place.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The collective (`all_reduce`).
    pub collective: &'static str,
    /// The layer that issued the calls (`raw`, `core`).
    pub layer: &'static str,
    /// The number of ranks.
    pub world_size: usize,
    /// The `size` column: bytes of the larger buffer.
    pub size: u64,
    /// The `count` column: the element count passed to NCCL.
    pub count: usize,
    /// The `type` column (`float`).
    #[serde(rename = "type")]
    pub dtype: &'static str,
    /// The `redop` column (`sum`, or `none`).
    pub redop: &'static str,
    /// The `root` column (-1 when the collective has none).
    pub root: i32,
    /// Separate send and receive buffers; `None` (`N/A`, JSON `null`) when
    /// the layer cannot issue this mode.
    pub out_of_place: Option<Measurement>,
    /// One buffer; `None` when the layer cannot issue this mode (the tensor
    /// layer's all_gather, reduce_scatter and all_to_all).
    pub in_place: Option<Measurement>,
    /// With `--compare`: this layer's time over the baseline's (B's rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<Ratio>,
    /// Graph replays per batch (`-G`); omitted when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub graph: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// `time / time of the baseline` for each mode, at the same size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// The layer divided by (A of `--compare A,B`).
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

    /// The row as one line of JSON (no newline).
    ///
    /// # Errors
    /// Only if serde_json fails, which it does not for this type.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

/// Formats `value` in `width` characters as nccl-tests does: two decimals
/// while they fit, then one, then none, then an exponent.
pub fn fixed_width(value: f64, width: usize) -> String {
    let mut power = 0usize;
    let mut bound = 1.0f64;
    while value >= bound && power < 40 {
        power += 1;
        bound *= 10.0;
    }
    if power + 2 < width {
        format!("{value:>width$.2}")
    } else if power + 1 < width {
        format!("{value:>width$.1}")
    } else if power < width + 1 {
        format!("{value:>width$.0}")
    } else if width >= 7 {
        format!("{:>width$}", c_exponent(value, 1))
    } else {
        format!("{:>width$}", c_exponent(value, 0))
    }
}

/// `value` in C's `%.{precision}e` form (`1.2e+06`).
fn c_exponent(value: f64, precision: usize) -> String {
    let text = format!("{value:.precision$e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text, // inf or NaN
    }
}

/// `value` in C's `%g` form: six significant digits, no trailing zeros,
/// an exponent below 1e-4 and from 1e6 on.
pub fn c_general(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "nan"
        } else if value > 0.0 {
            "inf"
        } else {
            "-inf"
        }
        .to_string();
    }
    let scientific = format!("{value:.5e}");
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let trim = |text: &str| {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text.to_string()
        }
    };
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exponent.abs())
    } else {
        let decimals = (5 - exponent).max(0) as usize;
        trim(&format!("{value:.decimals$}"))
    }
}

/// The three column-header lines of nccl-tests' table; with `ratio`, each
/// half ends in a `ratio` column too (`--compare`).
pub fn table_header(ratio: bool) -> [String; 3] {
    let e = "";
    let half = |time: &str, algbw: &str, busbw: &str, wrong: &str, ratio_name: &str| {
        let mut text = format!("  {time:>7}  {algbw:>6}  {busbw:>6}  {wrong:>6}");
        if ratio {
            text.push_str(&format!("  {ratio_name:>6}"));
        }
        text
    };
    let names = half("time", "algbw", "busbw", "#wrong", "ratio");
    let units = half("(us)", "(GB/s)", "(GB/s)", e, "(B/A)");
    let top = if ratio {
        format!(
            "# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}{:^41}{:^41} ",
            "out-of-place", "in-place"
        )
    } else {
        format!(
            "# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}           out-of-place                       in-place          "
        )
    };
    [
        top,
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{names}{names} ",
            "size", "count", "type", "redop", "root"
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{units}{units} ",
            "(B)", "(elements)", e, e, e
        ),
    ]
}

/// A ratio in the 6-character `ratio` column: three decimals below 10,
/// fewer above, `N/A` when there is none.
pub fn ratio_column(ratio: Option<f64>) -> String {
    match ratio {
        Some(value) if value.is_finite() && value >= 0.0 => {
            if value < 9.9995 {
                format!("{value:>6.3}")
            } else if value < 99.995 {
                format!("{value:>6.2}")
            } else if value < 999.95 {
                format!("{value:>6.1}")
            } else if value < 999_999.5 {
                format!("{value:>6.0}")
            } else {
                format!("{:>6}", c_exponent(value, 0))
            }
        }
        _ => format!("{:>6}", "N/A"),
    }
}

/// One row in nccl-tests' layout; with a ratio (`--compare`), each half
/// ends in the ratio column.
pub fn table_row(row: &Row) -> String {
    let mut line = format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        row.size, row.count, row.dtype, row.redop, row.root
    );
    for mode in Mode::BOTH {
        match row.measurement(mode) {
            Some(m) => {
                line.push_str(&format!(
                    "  {:>7}  {:>6}  {:>6}",
                    fixed_width(m.time_us, 7),
                    fixed_width(m.algbw, 6),
                    fixed_width(m.busbw, 6)
                ));
                match m.wrong {
                    Some(wrong) => line.push_str(&format!("  {:>6}", c_general(wrong as f64))),
                    None => line.push_str("    N/A"),
                }
            }
            None => line.push_str(&format!("  {0:>7}  {0:>6}  {0:>6}  {0:>6}", "N/A")),
        }
        if let Some(ratio) = &row.ratio {
            line.push_str("  ");
            line.push_str(&ratio_column(ratio.of(mode)));
        }
    }
    line
}

/// The summary lines after a collective's table.
pub fn table_footer(wrong: u64, avg_busbw: f64) -> [String; 2] {
    [
        format!(
            "# {:<20} : {} {}",
            "Out of bounds values",
            wrong,
            if wrong == 0 { "OK" } else { "FAILED" }
        ),
        format!("# {:<20} : {} ", "Avg bus bandwidth", c_general(avg_busbw)),
    ]
}

/// nccl-tests' average bus bandwidth: the mean of the busbw of every row,
/// out-of-place and in-place alike. 0 with no rows.
pub fn average_busbw(rows: &[Row]) -> f64 {
    let values: Vec<f64> = rows
        .iter()
        .flat_map(|r| [r.out_of_place, r.in_place])
        .flatten()
        .map(|m| m.busbw)
        .collect();
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Where rows go: the table on stdout and, optionally, JSON lines to a
/// file. Lines are written with the progress bar (if any) cleared from the
/// terminal, so the two never mix.
pub struct Reporter<W: Write> {
    out: W,
    json: Option<Box<dyn Write>>,
    progress: Option<ProgressBar>,
}

impl<W: Write> Reporter<W> {
    /// A reporter writing the table to `out` and JSON lines to `json`.
    pub fn new(out: W, json: Option<Box<dyn Write>>) -> Self {
        Self {
            out,
            json,
            progress: None,
        }
    }

    /// Clears `progress` from the terminal around every table line.
    pub fn with_progress(mut self, progress: ProgressBar) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Writes one comment or header line.
    ///
    /// # Errors
    /// Writing failed.
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        let out = &mut self.out;
        let mut write = || {
            writeln!(out, "{text}")?;
            out.flush()
        };
        match &self.progress {
            Some(progress) => progress.suspend(write),
            None => write(),
        }
    }

    /// Writes one row to the table and the JSON file.
    ///
    /// # Errors
    /// Writing failed.
    pub fn row(&mut self, row: &Row) -> io::Result<()> {
        self.line(&table_row(row))?;
        self.json_row(row)
    }

    /// Writes one row to the JSON file only (the baseline of `--compare`).
    ///
    /// # Errors
    /// Writing failed.
    pub fn json_row(&mut self, row: &Row) -> io::Result<()> {
        if let Some(json) = self.json.as_mut() {
            writeln!(json, "{}", row.to_json().map_err(io::Error::other)?)?;
            json.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
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
            ratio: None,
            graph: 0,
        }
    }

    fn m(time_us: f64, algbw: f64, busbw: f64, wrong: Option<u64>) -> Measurement {
        Measurement {
            time_us,
            algbw,
            busbw,
            wrong,
        }
    }

    #[test]
    fn header_matches_nccl_tests_byte_for_byte() {
        let [top, names, units] = table_header(false);
        assert_eq!(
            top,
            "#                                                              out-of-place                       in-place          "
        );
        assert_eq!(
            names,
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong "
        );
        assert_eq!(
            units,
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "
        );
    }

    #[test]
    fn rows_match_the_baselines() {
        // Lines of /work/shared/baselines/h200-1gpu.md (nccl-tests 2.19.6).
        assert_eq!(
            table_row(&row(
                8,
                2,
                "sum",
                -1,
                m(6.30, 0.00127, 0.0, Some(0)),
                m(0.31, 0.0258, 0.0, Some(0))
            )),
            "           8             2     float     sum      -1     6.30    0.00    0.00       0     0.31    0.03    0.00       0"
        );
        assert_eq!(
            table_row(&row(
                524288,
                131072,
                "sum",
                -1,
                m(6.36, 82.40, 0.0, Some(0)),
                m(0.42, 1255.3, 0.0, Some(0))
            )),
            "      524288        131072     float     sum      -1     6.36   82.40    0.00       0     0.42  1255.3    0.00       0"
        );
        assert_eq!(
            table_row(&row(
                536870912,
                134217728,
                "none",
                0,
                m(255.59, 2100.5, 2100.5, Some(0)),
                m(0.35, 1.53e6, 1.53e6, Some(0))
            )),
            "   536870912     134217728     float    none       0   255.59  2100.5  2100.5       0     0.35   2e+06   2e+06       0"
        );
        assert_eq!(
            table_row(&row(
                32,
                8,
                "none",
                -1,
                m(5.05, 0.01, 0.0, Some(0)),
                m(0.22, 0.14, 0.0, None)
            )),
            "          32             8     float    none      -1     5.05    0.01    0.00       0     0.22    0.14    0.00    N/A"
        );
        assert_eq!(
            table_row(&row(
                8,
                2,
                "sum",
                -1,
                m(1.0, 18711.0, 308023.0, Some(3)),
                m(0.1, 76164.4, 0.0, Some(1234567))
            )),
            "           8             2     float     sum      -1     1.00   18711  308023       3     0.10   76164    0.00  1.23457e+06"
        );
    }

    #[test]
    fn ratio_columns() {
        assert_eq!(ratio_column(Some(1.0)), " 1.000");
        assert_eq!(ratio_column(Some(0.98765)), " 0.988");
        assert_eq!(ratio_column(Some(9.9994)), " 9.999");
        assert_eq!(ratio_column(Some(9.9996)), " 10.00");
        assert_eq!(ratio_column(Some(42.125)), " 42.12");
        assert_eq!(ratio_column(Some(123.45)), " 123.5");
        assert_eq!(ratio_column(Some(12345.0)), " 12345");
        assert_eq!(ratio_column(Some(2.5e6)), " 2e+06");
        assert_eq!(ratio_column(None), "   N/A");
        assert_eq!(ratio_column(Some(f64::INFINITY)), "   N/A");
        assert_eq!(ratio_column(Some(f64::NAN)), "   N/A");
        for value in [0.0, 0.5, 3.0, 77.7, 512.0, 99999.0, 1e9] {
            assert_eq!(ratio_column(Some(value)).len(), 6, "{value}");
        }
    }

    #[test]
    fn compare_rows_and_header_stay_machine_readable() {
        let [top, names, units] = table_header(true);
        assert_eq!(
            names,
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong   ratio     time   algbw   busbw  #wrong   ratio "
        );
        assert_eq!(
            units,
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)           (B/A)     (us)  (GB/s)  (GB/s)           (B/A) "
        );
        assert_eq!(top.len(), names.len());
        assert!(top.contains("out-of-place") && top.contains("in-place"));

        let raw = Row {
            layer: "raw",
            ..row(
                8,
                2,
                "sum",
                -1,
                m(5.0, 0.0016, 0.0, Some(0)),
                m(0.2, 0.04, 0.0, Some(0)),
            )
        };
        let mut tensor = Row {
            layer: "tensor",
            ..row(
                8,
                2,
                "sum",
                -1,
                m(5.5, 0.00145, 0.0, Some(0)),
                m(0.5, 0.016, 0.0, Some(0)),
            )
        };
        tensor.ratio = Some(Ratio::between(&raw, &tensor));
        assert_eq!(
            table_row(&tensor),
            "           8             2     float     sum      -1     5.50    0.00    0.00       0   1.100     0.50    0.02    0.00       0   2.500"
        );
        // A mode the layer cannot issue: N/A in every column, same field count.
        let mut gather = Row {
            collective: "all_gather",
            layer: "tensor",
            in_place: None,
            ..row(
                32,
                8,
                "none",
                -1,
                m(6.0, 0.005, 0.0, Some(0)),
                m(0.3, 0.1, 0.0, Some(0)),
            )
        };
        let baseline = Row {
            layer: "raw",
            ..row(
                32,
                8,
                "none",
                -1,
                m(5.0, 0.006, 0.0, Some(0)),
                m(0.3, 0.1, 0.0, Some(0)),
            )
        };
        gather.ratio = Some(Ratio::between(&baseline, &gather));
        let line = table_row(&gather);
        assert_eq!(
            line,
            "          32             8     float    none      -1     6.00    0.01    0.00       0   1.200      N/A     N/A     N/A     N/A     N/A"
        );
        let fields = |text: &str| text.split_whitespace().count();
        assert_eq!(fields(&line), fields(&table_row(&tensor)));
        assert_eq!(fields(&line), fields(&names) - 1, "one header field is '#'");
        // Without --compare the table is nccl-tests' own.
        gather.ratio = None;
        assert_eq!(fields(&table_row(&gather)), 13);
        assert_eq!(average_busbw(&[gather]), 0.0);
    }

    #[test]
    fn fixed_width_numbers() {
        assert_eq!(fixed_width(0.0, 6), "  0.00");
        assert_eq!(fixed_width(0.999, 6), "  1.00");
        assert_eq!(fixed_width(340.88, 6), "340.88");
        assert_eq!(fixed_width(4593.7, 6), "4593.7");
        assert_eq!(fixed_width(99999.4, 6), " 99999");
        assert_eq!(fixed_width(420937.0, 6), "420937");
        assert_eq!(fixed_width(1.0e6, 6), " 1e+06");
        assert_eq!(fixed_width(66.12, 7), "  66.12");
        assert_eq!(fixed_width(12345.6, 7), "12345.6");
        assert_eq!(fixed_width(1234567.0, 7), "1234567");
        assert_eq!(fixed_width(12345678.0, 7), "1.2e+07");
    }

    #[test]
    fn general_numbers() {
        assert_eq!(c_general(0.0), "0");
        assert_eq!(c_general(3.0), "3");
        assert_eq!(c_general(1234.5), "1234.5");
        assert_eq!(c_general(0.5), "0.5");
        assert_eq!(c_general(123456.0), "123456");
        assert_eq!(c_general(1234567.0), "1.23457e+06");
        assert_eq!(c_general(0.0001), "0.0001");
        assert_eq!(c_general(0.00001234), "1.234e-05");
        assert_eq!(c_general(2.0 / 3.0), "0.666667");
        assert_eq!(c_general(999999.5), "1e+06");
    }

    #[test]
    fn footer_and_average() {
        let rows = [
            row(
                8,
                2,
                "sum",
                -1,
                m(1.0, 1.0, 2.0, Some(0)),
                m(1.0, 1.0, 4.0, Some(0)),
            ),
            row(
                16,
                4,
                "sum",
                -1,
                m(1.0, 1.0, 6.0, Some(0)),
                m(1.0, 1.0, 8.0, Some(0)),
            ),
        ];
        assert_eq!(average_busbw(&rows), 5.0);
        assert_eq!(average_busbw(&[]), 0.0);
        assert_eq!(
            table_footer(0, 5.0),
            [
                "# Out of bounds values : 0 OK".to_string(),
                "# Avg bus bandwidth    : 5 ".to_string()
            ]
        );
        assert_eq!(
            table_footer(2, 0.25)[0],
            "# Out of bounds values : 2 FAILED"
        );
    }

    #[test]
    fn json_rows() {
        let r = row(
            8,
            2,
            "sum",
            -1,
            m(6.5, 0.5, 0.0, Some(0)),
            m(0.25, 32.0, 0.0, None),
        );
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
        let mut table = Vec::new();
        let json = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().write(buf)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut reporter = Reporter::new(&mut table, Some(Box::new(Shared(json.clone()))));
        reporter.line("# hello").unwrap();
        reporter.row(&r).unwrap();
        reporter.row(&r).unwrap();
        reporter.json_row(&r).unwrap();
        let table = String::from_utf8(table).unwrap();
        assert_eq!(table.lines().count(), 3);
        assert!(table.starts_with("# hello\n           8"));
        let json = String::from_utf8(json.lock().unwrap().clone()).unwrap();
        assert_eq!(json.lines().count(), 3);
        assert!(
            json.lines()
                .all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok())
        );
    }
}
