//! `--report ROWS.jsonl`: the tables (and with `--plot FILE.svg` the plot)
//! of the rows a run wrote with `--json`, redrawn without running
//! anything: no GPU, CUDA driver or NCCL is needed.
//!
//! Each collective's rows make one table per layer, in the order the file
//! has them, with the footer lines of the run; the rows of a `--compare`
//! baseline (the layer the other rows' ratios divide by) make no table of
//! their own but the comparison's footer lines, as in the run. The columns
//! follow the rows: `ratio` for `--compare`'s, nccl-tests' per-iteration
//! columns for `-I`'s, `cputime` for `-C`'s. What rows do not record (the
//! libnccl, the GPUs, `-S`'s timestamps) is not shown.

use std::io::Write;
use std::path::Path;

use crate::error::BenchError;
use crate::report::{
    Columns, Reporter, Row, TableTitle, collective_footer, read_rows, table_heading,
};

/// One table to redraw: a collective's rows of one layer, and those of its
/// `--compare` baseline.
#[derive(Debug, PartialEq)]
struct Table {
    collective: &'static str,
    layer: &'static str,
    shown: Vec<Row>,
    /// The baseline's layer and rows.
    baseline: Option<(&'static str, Vec<Row>)>,
}

/// The tables of `rows`: per (collective, layer) in order of first
/// appearance, but the baselines of `--compare` (see the module
/// documentation).
fn tables(rows: &[Row]) -> Vec<Table> {
    let mut keys: Vec<(&'static str, &'static str)> = Vec::new();
    for row in rows {
        if !keys.contains(&(row.collective, row.layer)) {
            keys.push((row.collective, row.layer));
        }
    }
    let baselines: Vec<(&str, &str)> = rows
        .iter()
        .filter_map(|row| Some((row.collective, row.ratio?.baseline)))
        .collect();
    let of = |collective: &str, layer: &str| -> Vec<Row> {
        rows.iter()
            .filter(|row| row.collective == collective && row.layer == layer)
            .cloned()
            .collect()
    };
    keys.into_iter()
        .filter(|key| !baselines.contains(key))
        .map(|(collective, layer)| {
            let shown = of(collective, layer);
            let baseline = shown
                .iter()
                .find_map(|row| Some(row.ratio?.baseline))
                .map(|baseline| (baseline, of(collective, baseline)));
            Table {
                collective,
                layer,
                shown,
                baseline,
            }
        })
        .collect()
}

/// The columns `rows` fill.
fn columns(rows: &[Row]) -> Columns {
    Columns {
        ratio: rows.iter().any(|row| row.ratio.is_some()),
        cpu_time: rows.iter().any(|row| row.cpu_time),
        timestamps: false,
        per_iter: rows
            .iter()
            .any(|row| row.out_of_place_per_iter.is_some() || row.in_place_per_iter.is_some()),
    }
}

/// Redraws the rows of the file at `rows_path` (as `--json` writes them):
/// the tables to `out`, and with `plot` the plot to that SVG file.
///
/// # Errors
/// [`BenchError::Rows`] for a file that cannot be read or a line that is
/// not a row, naming the line; [`BenchError::Io`] or
/// [`BenchError::Plot`] when the output cannot be written.
pub fn redraw(rows_path: &Path, plot: Option<&Path>, out: impl Write) -> Result<(), BenchError> {
    let rows = read_rows(rows_path)?;
    let io_error = |source| BenchError::Io {
        what: "the output".to_string(),
        source,
    };
    let mut reporter = Reporter::new(out, None);
    reporter
        .line(&format!(
            "# nccl-perf --report {}: {} row(s), redrawn without running",
            rows_path.display(),
            rows.len()
        ))
        .map_err(io_error)?;
    for table in tables(&rows) {
        let columns = columns(&table.shown);
        let title = TableTitle {
            collective: table.collective,
            layer: table.layer,
            baseline: table.baseline.as_ref().map(|(layer, _)| *layer),
            world: table.shown.first().map_or(0, |row| row.world_size),
            machine: None,
        };
        reporter
            .lines(table_heading(&title, &columns))
            .map_err(io_error)?;
        reporter.set_columns(columns);
        for row in &table.shown {
            reporter.row(row).map_err(io_error)?;
        }
        let baseline = table.baseline.as_ref().map(|(_, rows)| rows.as_slice());
        reporter
            .lines(collective_footer(&table.shown, baseline))
            .map_err(io_error)?;
    }
    reporter.line("#").map_err(io_error)?;
    if let Some(path) = plot {
        #[cfg(feature = "plot")]
        crate::plot::write_svg(path, &rows)?;
        #[cfg(not(feature = "plot"))]
        return Err(crate::cli::without_plot_feature(path));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Ratio;
    use crate::report::tests as fixture;

    /// A checked sum row of floats at world size 2, both halves timed
    /// `time_us`.
    fn row(collective: &'static str, layer: &'static str, size: u64, time_us: f64) -> Row {
        let m = fixture::m(time_us, 1.0, 2.0, Some(0));
        Row {
            collective,
            layer,
            world_size: 2,
            ..fixture::row(size, size as usize / 4, "sum", -1, m, m)
        }
    }

    /// `--compare raw,tensor` rows of two collectives, as `--json` orders
    /// them (the baseline's row before B's, size by size).
    fn compare_rows() -> Vec<Row> {
        let mut rows = Vec::new();
        for collective in ["all_reduce", "broadcast"] {
            for size in [8, 16] {
                let raw = row(collective, "raw", size, 2.0);
                let mut tensor = row(collective, "tensor", size, 3.0);
                tensor.ratio = Some(Ratio::between(&raw, &tensor));
                rows.extend([raw, tensor]);
            }
        }
        rows
    }

    #[test]
    fn compare_rows_make_one_table_per_collective() {
        let rows = compare_rows();
        let tables = tables(&rows);
        assert_eq!(tables.len(), 2);
        assert_eq!(
            (tables[0].collective, tables[0].layer),
            ("all_reduce", "tensor")
        );
        assert_eq!(tables[0].shown.len(), 2);
        let (baseline, baseline_rows) = tables[0].baseline.as_ref().unwrap();
        assert_eq!((*baseline, baseline_rows.len()), ("raw", 2));
        assert_eq!(tables[1].collective, "broadcast");
        assert!(columns(&tables[0].shown).ratio);
        assert!(!columns(baseline_rows).ratio);
        // Rows of two runs of one layer each: a table per layer.
        let plain = [
            row("all_reduce", "core", 8, 1.0),
            row("all_reduce", "group", 8, 2.0),
        ];
        let tables = super::tables(&plain);
        assert_eq!(tables.len(), 2);
        assert!(tables.iter().all(|table| table.baseline.is_none()));
    }

    #[test]
    fn the_redrawn_output_has_the_runs_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.jsonl");
        let text: String = compare_rows()
            .iter()
            .map(|row| row.to_json().unwrap() + "\n")
            .collect();
        std::fs::write(&path, text).unwrap();
        let mut out = Vec::new();
        redraw(&path, None, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "# nccl-perf --report {}: 8 row(s), redrawn without running",
                path.display()
            )
        );
        assert!(
            lines.contains(&"# Collective all_reduce layer tensor baseline raw world 2"),
            "{out}"
        );
        assert!(
            lines.contains(&"# Median ratio tensor/raw : out-of-place 1.500 in-place 1.500"),
            "{out}"
        );
        let table_rows: Vec<&&str> = lines.iter().filter(|line| !line.starts_with('#')).collect();
        assert_eq!(table_rows.len(), 4, "{out}");
        assert!(table_rows[0].ends_with("   1.500"), "{out}");
        assert_eq!(lines.last(), Some(&"#"));
    }
}
