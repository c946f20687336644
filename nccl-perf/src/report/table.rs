//! nccl-tests' table: its column headers, one line per row, and the
//! footer lines after each collective's table.

use super::Row;
use super::format::{c_general, fixed_width, ratio_column};
use crate::collective::Mode;
use crate::runner::Plan;
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
    /// Each half has nccl-tests' per-iteration columns `i_min`, `i_max`,
    /// `i_p99` and `i_cv%` after `#wrong` (`-I 1`).
    pub per_iter: bool,
}

impl Columns {
    /// The columns of `plan`'s tables.
    pub fn of(plan: &Plan) -> Self {
        Self {
            ratio: plan.compare().is_some(),
            cpu_time: plan.method.cpu_time,
            timestamps: plan.method.timestamps,
            per_iter: plan.method.per_iter.is_some(),
        }
    }
}

/// The format of a row's timestamp, as the header's unit line shows it.
pub const TIMESTAMP_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// The three column-header lines of nccl-tests' table, with `columns`.
pub fn table_header(columns: &Columns) -> [String; 3] {
    let Columns {
        ratio,
        cpu_time,
        timestamps,
        per_iter,
    } = *columns;
    let e = "";
    let time_name = if cpu_time { "cputime" } else { "time" };
    let half = |names: [&str; 5], per_iter_names: [&str; 4]| {
        let [time, algbw, busbw, wrong, ratio_name] = names;
        let mut text = format!("  {time:>7}  {algbw:>6}  {busbw:>6}  {wrong:>6}");
        if per_iter {
            for name in per_iter_names {
                text.push_str(&format!("  {name:>7}"));
            }
        }
        if ratio {
            text.push_str(&format!("  {ratio_name:>6}"));
        }
        text
    };
    let names = half(
        [time_name, "algbw", "busbw", "#wrong", "ratio"],
        ["i_min", "i_max", "i_p99", "i_cv%"],
    );
    let units = half(
        ["(us)", "(GB/s)", "(GB/s)", e, "(B/A)"],
        ["(us)", "(us)", "(us)", "(%)"],
    );
    // nccl-tests' `%*s` after the halves: 19 wide with timestamps, else empty.
    let (stamp_name, stamp_unit) = if timestamps {
        (
            format!("{:>19}", "timestamp"),
            format!("{TIMESTAMP_FORMAT:>19}"),
        )
    } else {
        (String::new(), String::new())
    };
    let lead = format!("# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}");
    let (out_of_place, in_place) = if per_iter {
        (
            "out-of-place (+ per-iteration)",
            "in-place (+ per-iteration)",
        )
    } else {
        ("out-of-place", "in-place")
    };
    let top = match (ratio, per_iter) {
        (true, _) => format!(
            "{lead}{out_of_place:^width$}{in_place:^width$} ",
            width = names.len()
        ),
        (false, true) => {
            format!("{lead}              {out_of_place}                                {in_place}")
        }
        (false, false) => {
            format!("{lead}           {out_of_place}                       {in_place}          ")
        }
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

/// One row in nccl-tests' layout, with `columns` (its timestamp aside):
/// with `-I 1` each half has its per-iteration columns after `#wrong`,
/// with `--compare` it ends in the ratio column.
pub fn table_row(row: &Row, columns: &Columns) -> String {
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
        if columns.per_iter {
            match row.per_iter(mode) {
                Some(report) => {
                    let stats = &report.stats;
                    for value in [stats.min_us, stats.max_us, stats.p99_us, stats.cv_pct] {
                        line.push_str(&format!("  {:>7}", fixed_width(value, 7)));
                    }
                }
                None => line.push_str(&format!("  {0:>7}  {0:>7}  {0:>7}  {0:>7}", "N/A")),
            }
        }
        if columns.ratio {
            line.push_str("  ");
            line.push_str(&ratio_column(row.ratio.and_then(|ratio| ratio.of(mode))));
        }
    }
    line
}

/// The wrong elements of every mode of `rows`.
pub fn wrong_elements(rows: &[Row]) -> u64 {
    rows.iter()
        .flat_map(|row| [row.out_of_place, row.in_place])
        .flatten()
        .filter_map(|m| m.wrong)
        .sum()
}

/// The lines after a collective's table of `shown` rows: nccl-tests'
/// summary (its wrong elements counting those of the `baseline` rows of
/// `--compare`, if any, too) and with a baseline the comparison's.
pub fn collective_footer(shown: &[Row], baseline: Option<&[Row]>) -> Vec<String> {
    let wrong = wrong_elements(shown) + baseline.map_or(0, wrong_elements);
    let mut lines = table_footer(wrong, average_busbw(shown)).to_vec();
    if let Some(baseline) = baseline {
        let name = |rows: &[Row]| rows.first().map_or("?", |row| row.layer);
        lines.extend(compare_footer(name(baseline), name(shown), baseline, shown));
    }
    lines
}

/// The summary lines after a collective's table.
fn table_footer(wrong: u64, avg_busbw: f64) -> [String; 2] {
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
fn average_busbw(rows: &[Row]) -> f64 {
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

/// The comment lines after a `--compare` table of layer `b` against `a`:
/// the baseline's average bus bandwidth and the median ratio of each mode
/// over the sizes.
fn compare_footer(a: &str, b: &str, baseline: &[Row], shown: &[Row]) -> [String; 2] {
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
            format!("Avg bus bandwidth ({a})"),
            c_general(average_busbw(baseline))
        ),
        format!(
            "# {:<20} : out-of-place {} in-place {}",
            format!("Median ratio {b}/{a}"),
            median_ratio(Mode::OutOfPlace),
            median_ratio(Mode::InPlace)
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eight_byte_sum, m, row};
    use super::super::{Measurement, Ratio};
    use super::*;
    use crate::per_iter::{IterStats, PerIter};

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
        let plain = Columns::default();
        // Lines of /work/shared/baselines/h200-1gpu.md (nccl-tests 2.19.6).
        assert_eq!(
            table_row(
                &row(
                    8,
                    2,
                    "sum",
                    -1,
                    m(6.30, 0.00127, 0.0, Some(0)),
                    m(0.31, 0.0258, 0.0, Some(0))
                ),
                &plain
            ),
            "           8             2     float     sum      -1     6.30    0.00    0.00       0     0.31    0.03    0.00       0"
        );
        assert_eq!(
            table_row(
                &row(
                    524288,
                    131072,
                    "sum",
                    -1,
                    m(6.36, 82.40, 0.0, Some(0)),
                    m(0.42, 1255.3, 0.0, Some(0))
                ),
                &plain
            ),
            "      524288        131072     float     sum      -1     6.36   82.40    0.00       0     0.42  1255.3    0.00       0"
        );
        assert_eq!(
            table_row(
                &row(
                    536870912,
                    134217728,
                    "none",
                    0,
                    m(255.59, 2100.5, 2100.5, Some(0)),
                    m(0.35, 1.53e6, 1.53e6, Some(0))
                ),
                &plain
            ),
            "   536870912     134217728     float    none       0   255.59  2100.5  2100.5       0     0.35   2e+06   2e+06       0"
        );
        assert_eq!(
            table_row(
                &row(
                    32,
                    8,
                    "none",
                    -1,
                    m(5.05, 0.01, 0.0, Some(0)),
                    m(0.22, 0.14, 0.0, None)
                ),
                &plain
            ),
            "          32             8     float    none      -1     5.05    0.01    0.00       0     0.22    0.14    0.00    N/A"
        );
        assert_eq!(
            table_row(
                &row(
                    8,
                    2,
                    "sum",
                    -1,
                    m(1.0, 18711.0, 308023.0, Some(3)),
                    m(0.1, 76164.4, 0.0, Some(1234567))
                ),
                &plain
            ),
            "           8             2     float     sum      -1     1.00   18711  308023       3     0.10   76164    0.00  1.23457e+06"
        );
    }

    /// A per-iteration report with these statistics (the rest 0).
    fn per_iter(min_us: f64, max_us: f64, p99_us: f64, cv_pct: f64) -> PerIter {
        PerIter {
            skipped_iterations: 0,
            stats: IterStats {
                min_us,
                max_us,
                avg_us: 0.0,
                p50_us: 0.0,
                p95_us: 0.0,
                p99_us,
                stdev_us: 0.0,
                cv_pct,
            },
            times_us: Vec::new(),
            per_process_max_times_us: None,
        }
    }

    #[test]
    fn per_iteration_columns_as_nccl_tests_prints_them() {
        // nccl-tests 2.19.6's printf formats of writeResultHeader and
        // writePerIterReport, evaluated by C's rules.
        let columns = Columns {
            per_iter: true,
            ..Columns::default()
        };
        let [top, names, units] = table_header(&columns);
        assert_eq!(
            top,
            "#                                                                 out-of-place (+ per-iteration)                                in-place (+ per-iteration)"
        );
        assert_eq!(
            names,
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% "
        );
        assert_eq!(
            units,
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) "
        );
        let mut r = eight_byte_sum(m(6.5, 0.5, 0.0, Some(0)), m(0.25, 32.0, 0.0, Some(0)));
        r.out_of_place_per_iter = Some(per_iter(6.1, 12.25, 12.25, 33.3333));
        r.in_place_per_iter = Some(per_iter(0.2, 1234567.8, 0.3, 0.0));
        assert_eq!(
            table_row(&r, &columns),
            "           8             2     float     sum      -1     6.50    0.50    0.00       0     6.10    12.25    12.25    33.33     0.25   32.00    0.00       0     0.20  1234568     0.30     0.00"
        );
        // A half without a report, and with --compare the ratio after
        // the per-iteration columns: every row keeps the header's fields.
        let both = Columns {
            ratio: true,
            ..columns
        };
        r.in_place_per_iter = None;
        let line = table_row(&r, &both);
        assert!(
            line.ends_with("      N/A      N/A      N/A      N/A     N/A"),
            "{line}"
        );
        let [top, names, _] = table_header(&both);
        assert_eq!(top.len(), names.len());
        let fields = |text: &str| text.split_whitespace().count();
        assert_eq!(fields(&line), fields(&names) - 1, "one header field is '#'");
    }

    #[test]
    fn compare_rows_and_header_stay_machine_readable() {
        let ratio = Columns {
            ratio: true,
            ..Columns::default()
        };
        let [top, names, units] = table_header(&ratio);
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
            ..eight_byte_sum(m(5.0, 0.0016, 0.0, Some(0)), m(0.2, 0.04, 0.0, Some(0)))
        };
        let mut tensor = Row {
            layer: "tensor",
            ..eight_byte_sum(m(5.5, 0.00145, 0.0, Some(0)), m(0.5, 0.016, 0.0, Some(0)))
        };
        tensor.ratio = Some(Ratio::between(&raw, &tensor));
        assert_eq!(
            table_row(&tensor, &ratio),
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
        let line = table_row(&gather, &ratio);
        assert_eq!(
            line,
            "          32             8     float    none      -1     6.00    0.01    0.00       0   1.200      N/A     N/A     N/A     N/A     N/A"
        );
        let fields = |text: &str| text.split_whitespace().count();
        assert_eq!(fields(&line), fields(&table_row(&tensor, &ratio)));
        assert_eq!(fields(&line), fields(&names) - 1, "one header field is '#'");
        // Without --compare the table is nccl-tests' own.
        gather.ratio = None;
        assert_eq!(fields(&table_row(&gather, &Columns::default())), 13);
        assert_eq!(average_busbw(&[gather]), 0.0);
    }

    #[test]
    fn footer_and_average() {
        let rows = [
            eight_byte_sum(m(1.0, 1.0, 2.0, Some(0)), m(1.0, 1.0, 4.0, Some(0))),
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
        assert_eq!(collective_footer(&rows, None), table_footer(0, 5.0));
        // A baseline's wrong elements count too.
        let mut failing = rows.clone();
        failing[1].in_place = Some(m(1.0, 1.0, 8.0, Some(3)));
        assert_eq!(wrong_elements(&failing), 3);
        let lines = collective_footer(&rows, Some(&failing));
        assert_eq!(lines[0], "# Out of bounds values : 3 FAILED");
        assert_eq!(lines.len(), 4);
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
            out_of_place_per_iter: None,
            in_place_per_iter: None,
            cpu_time: false,
            ratio: None,
            graph: 0,
        };
        let raw = vec![row("raw", 2.0, Some(1.0)), row("raw", 4.0, Some(1.0))];
        let mut tensor = vec![row("tensor", 3.0, None), row("tensor", 4.0, None)];
        for (b, a) in tensor.iter_mut().zip(&raw) {
            b.ratio = Some(Ratio::between(a, b));
        }
        let lines = collective_footer(&tensor, Some(&raw));
        assert_eq!(lines[0], "# Out of bounds values : 0 OK");
        let [avg, ratio] = [&lines[2], &lines[3]];
        assert_eq!(avg, "# Avg bus bandwidth (raw) : 2 ");
        assert_eq!(
            ratio,
            "# Median ratio tensor/raw : out-of-place 1.250 in-place N/A"
        );
    }
}
