//! nccl-tests' table: its column headers, one line per row, and the
//! footer lines after each collective's table.

use super::Row;
use super::format::{c_general, fixed_width, ratio_column};
use crate::collective::Mode;
use crate::layer::LayerKind;
use crate::timing::median;

/// The columns of a table beyond nccl-tests' default ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// Each half ends in a `ratio` column (`--compare`).
    pub ratio: bool,
    /// The time columns read `cputime` (`-C 1`).
    pub cpu_time: bool,
    /// Each row ends in a timestamp (`-S 1`).
    pub timestamps: bool,
}

/// The format of a row's timestamp, as the header's unit line shows it.
pub const TIMESTAMP_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// The three column-header lines of nccl-tests' table, with `columns`.
pub fn table_header(columns: &Columns) -> [String; 3] {
    let Columns {
        ratio,
        cpu_time,
        timestamps,
    } = *columns;
    let e = "";
    let time_name = if cpu_time { "cputime" } else { "time" };
    let half = |time: &str, algbw: &str, busbw: &str, wrong: &str, ratio_name: &str| {
        let mut text = format!("  {time:>7}  {algbw:>6}  {busbw:>6}  {wrong:>6}");
        if ratio {
            text.push_str(&format!("  {ratio_name:>6}"));
        }
        text
    };
    let names = half(time_name, "algbw", "busbw", "#wrong", "ratio");
    let units = half("(us)", "(GB/s)", "(GB/s)", e, "(B/A)");
    // nccl-tests' `%*s` after the halves: 19 wide with timestamps, else empty.
    let (stamp_name, stamp_unit) = if timestamps {
        (
            format!("{:>19}", "timestamp"),
            format!("{TIMESTAMP_FORMAT:>19}"),
        )
    } else {
        (String::new(), String::new())
    };
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
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{names}{names} {stamp_name}",
            "size", "count", "type", "redop", "root"
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{units}{units} {stamp_unit}",
            "(B)", "(elements)", e, e, e
        ),
    ]
}

/// `timestamp` (as [`TIMESTAMP_FORMAT`] shows it) in the 21-character
/// column nccl-tests ends a row with under `-S 1`.
pub fn timestamp_column(timestamp: &str) -> String {
    format!("{timestamp:>21}")
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

/// The comment lines after a `--compare` table: the baseline's average bus
/// bandwidth and the median ratio of each mode over the sizes.
pub fn compare_footer(a: LayerKind, b: LayerKind, baseline: &[Row], shown: &[Row]) -> [String; 2] {
    let median_ratio = |mode| {
        let ratios: Vec<f64> = shown
            .iter()
            .filter_map(|row| row.ratio.and_then(|r| r.of(mode)))
            .collect();
        median(&ratios).map_or_else(|| "N/A".to_string(), |r| format!("{r:.3}"))
    };
    [
        format!(
            "# {:<20} : {} ",
            format!("Avg bus bandwidth ({})", a.name()),
            c_general(average_busbw(baseline))
        ),
        format!(
            "# {:<20} : out-of-place {} in-place {}",
            format!("Median ratio {}/{}", b.name(), a.name()),
            median_ratio(Mode::OutOfPlace),
            median_ratio(Mode::InPlace)
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::tests::{m, row};
    use super::super::{Measurement, Ratio};
    use super::*;

    #[test]
    fn header_matches_nccl_tests_byte_for_byte() {
        let [top, names, units] = table_header(&Columns::default());
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
    fn cputime_and_timestamp_headers_as_nccl_tests_prints_them() {
        let [_, names, units] = table_header(&Columns {
            cpu_time: true,
            timestamps: true,
            ..Columns::default()
        });
        assert_eq!(
            names,
            "#       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong           timestamp"
        );
        assert_eq!(
            units,
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)           %Y-%m-%d %H:%M:%S"
        );
        assert_eq!(
            timestamp_column("2026-12-03 10:11:12"),
            "  2026-12-03 10:11:12"
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
    fn compare_rows_and_header_stay_machine_readable() {
        let [top, names, units] = table_header(&Columns {
            ratio: true,
            ..Columns::default()
        });
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
    fn compare_footer_lines() {
        let m = |time_us| Measurement {
            time_us,
            algbw: 1.0,
            busbw: 2.0,
            wrong: Some(0),
        };
        let row = |layer, oop, ip: Option<f64>| Row {
            collective: "all_reduce",
            layer,
            world_size: 2,
            size: 8,
            count: 2,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place: Some(m(oop)),
            in_place: ip.map(m),
            ratio: None,
            graph: 0,
        };
        let raw = vec![row("raw", 2.0, Some(1.0)), row("raw", 4.0, Some(1.0))];
        let mut tensor = vec![row("tensor", 3.0, None), row("tensor", 4.0, None)];
        for (b, a) in tensor.iter_mut().zip(&raw) {
            b.ratio = Some(Ratio::between(a, b));
        }
        let [avg, ratio] = compare_footer(LayerKind::Raw, LayerKind::Tensor, &raw, &tensor);
        assert_eq!(avg, "# Avg bus bandwidth (raw) : 2 ");
        assert_eq!(
            ratio,
            "# Median ratio tensor/raw : out-of-place 1.250 in-place N/A"
        );
    }
}
