//! Output: nccl-tests' table on stdout and one JSON object per row.

use std::io::{self, Write};

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
    /// Separate send and receive buffers.
    pub out_of_place: Measurement,
    /// One buffer.
    pub in_place: Measurement,
}

impl Row {
    /// The measurement of `mode`.
    pub fn measurement(&self, mode: Mode) -> &Measurement {
        match mode {
            Mode::OutOfPlace => &self.out_of_place,
            Mode::InPlace => &self.in_place,
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

/// The three column-header lines of nccl-tests' table.
pub fn table_header() -> [String; 3] {
    let e = "";
    [
        format!(
            "# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}           out-of-place                       in-place          "
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} ",
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong"
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} ",
            "(B)",
            "(elements)",
            e,
            e,
            e,
            "(us)",
            "(GB/s)",
            "(GB/s)",
            e,
            "(us)",
            "(GB/s)",
            "(GB/s)",
            e
        ),
    ]
}

/// One row in nccl-tests' layout.
pub fn table_row(row: &Row) -> String {
    let mut line = format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        row.size, row.count, row.dtype, row.redop, row.root
    );
    for mode in Mode::BOTH {
        let m = row.measurement(mode);
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
        .flat_map(|r| [r.out_of_place.busbw, r.in_place.busbw])
        .collect();
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Where rows go: the table on stdout and, optionally, JSON lines to a file.
pub struct Reporter<W: Write> {
    out: W,
    json: Option<Box<dyn Write>>,
}

impl<W: Write> Reporter<W> {
    /// A reporter writing the table to `out` and JSON lines to `json`.
    pub fn new(out: W, json: Option<Box<dyn Write>>) -> Self {
        Self { out, json }
    }

    /// Writes one comment or header line.
    ///
    /// # Errors
    /// Writing failed.
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "{text}")?;
        self.out.flush()
    }

    /// Writes one row to the table and the JSON file.
    ///
    /// # Errors
    /// Writing failed.
    pub fn row(&mut self, row: &Row) -> io::Result<()> {
        self.line(&table_row(row))?;
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
            out_of_place: oop,
            in_place: ip,
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
        let [top, names, units] = table_header();
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
        let table = String::from_utf8(table).unwrap();
        assert_eq!(table.lines().count(), 3);
        assert!(table.starts_with("# hello\n           8"));
        let json = String::from_utf8(json.lock().unwrap().clone()).unwrap();
        assert_eq!(json.lines().count(), 2);
        assert!(
            json.lines()
                .all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok())
        );
    }
}
