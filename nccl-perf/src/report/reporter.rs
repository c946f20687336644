//! Where the lines go: the table on stdout (or any writer), with
//! `--json FILE` one JSON line per row, and with `-J FILE` nccl-tests'
//! JSON document.

use std::io::{self, Write};

use indicatif::ProgressBar;

use super::comments::{Machine, preamble};
use super::nccl_tests_json::{JsonDocument, JsonHead};
use super::table::{Columns, table_row, timestamp_column};
use super::{Row, clock};
use crate::runner::Plan;

/// Where rows go: the table on stdout and, optionally, JSON lines to a
/// file and nccl-tests' JSON document to another. Lines are written with
/// the progress bar (if any) cleared from the terminal, so the two never
/// mix.
pub struct Reporter<W: Write> {
    out: W,
    json: Option<Box<dyn Write>>,
    progress: Option<ProgressBar>,
    /// `-J`'s document, once [`Reporter::begin`] opened it.
    document: Option<JsonDocument>,
    /// The columns of the rows (set by [`Reporter::begin`]).
    columns: Columns,
}

impl<W: Write> Reporter<W> {
    /// A reporter writing the table to `out` and JSON lines to `json`.
    pub fn new(out: W, json: Option<Box<dyn Write>>) -> Self {
        Self {
            out,
            json,
            progress: None,
            document: None,
            columns: Columns::default(),
        }
    }

    /// Writes the lines before the tables ([`preamble`]) for `plan` on
    /// `machine`, and opens `-J`'s document (as nccl-tests does, a file
    /// that cannot be created is skipped, with a comment line saying so).
    ///
    /// # Errors
    /// Writing failed.
    pub fn begin(&mut self, plan: &Plan, machine: &Machine) -> io::Result<()> {
        self.columns = Columns::of(plan);
        let mut lines = preamble(plan, machine);
        if let Some(path) = &plan.method.output_file {
            match JsonDocument::create(path, &JsonHead::new(plan, machine)) {
                Ok(document) => {
                    lines.push(format!(
                        "# Writing JSON output to {}",
                        document.path().display()
                    ));
                    self.document = Some(document);
                }
                Err(error) => lines.push(format!(
                    "# skipping json output; {} not accessible ({error})",
                    path.display()
                )),
            }
        }
        self.lines(lines)
    }

    /// Sets the columns of the rows to come (those of a plan's tables
    /// once [`Reporter::begin`] ran).
    pub fn set_columns(&mut self, columns: Columns) {
        self.columns = columns;
    }

    /// Closes `-J`'s document after the last row.
    ///
    /// # Errors
    /// Writing failed.
    pub fn finish(&mut self) -> io::Result<()> {
        match self.document.as_mut() {
            Some(document) => document.finish(&[]),
            None => Ok(()),
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

    /// Writes one row to the table (with its timestamp under `-S 1`), the
    /// JSON file and `-J`'s document.
    ///
    /// # Errors
    /// Writing failed.
    pub fn row(&mut self, row: &Row) -> io::Result<()> {
        let mut line = table_row(row, &self.columns);
        if self.columns.timestamps {
            line.push_str(&timestamp_column(&clock::utc_now()));
        }
        self.line(&line)?;
        if let Some(document) = self.document.as_mut() {
            document.result(row)?;
        }
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

    /// Writes comment or header lines, one after another.
    ///
    /// # Errors
    /// Writing failed.
    pub fn lines(&mut self, lines: impl IntoIterator<Item = String>) -> io::Result<()> {
        lines.into_iter().try_for_each(|text| self.line(&text))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::super::tests::{eight_byte_sum, m, sample_row};
    use super::*;

    /// A writer whose bytes the test can still read after handing it over.
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn table_lines_and_json_rows_go_their_ways() {
        let r = sample_row();
        let mut table = Vec::new();
        let json = Arc::new(Mutex::new(Vec::new()));
        let mut reporter = Reporter::new(&mut table, Some(Box::new(Shared(json.clone()))));
        reporter.line("# hello").unwrap();
        reporter.row(&r).unwrap();
        reporter.row(&r).unwrap();
        reporter.json_row(&r).unwrap();
        reporter
            .lines(["# a".to_string(), "# b".to_string()])
            .unwrap();
        let table = String::from_utf8(table).unwrap();
        assert_eq!(table.lines().count(), 5);
        assert!(table.starts_with("# hello\n           8"));
        assert!(table.ends_with("\n# a\n# b\n"), "{table:?}");
        let json = String::from_utf8(json.lock().unwrap().clone()).unwrap();
        assert_eq!(json.lines().count(), 3);
        assert!(
            json.lines()
                .all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok())
        );
    }

    #[test]
    fn timestamps_and_the_nccl_tests_document_follow_the_plan() {
        use clap::Parser;

        use crate::cli::Args;
        use crate::report::DeviceInfo;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        let path_text = path.to_str().unwrap();
        let args =
            Args::try_parse_from(["nccl-perf", "-S", "1", "-J", path_text, "all_reduce"]).unwrap();
        let plan = Plan::new(&args, &crate::runner::Layout::single_process(1)).unwrap();
        let machine = Machine {
            nccl_version: nccl_sys::Version::new(2, 28, 3),
            nccl_path: "libnccl.so.2".to_string(),
            native_all_to_all: true,
            devices: vec![DeviceInfo {
                rank: 0,
                host: "vm".to_string(),
                pid: 7,
                ordinal: 0,
                name: "NVIDIA H200".to_string(),
                pci: "0000:00:06".to_string(),
            }],
        };
        let mut table = Vec::new();
        let mut reporter = Reporter::new(&mut table, None);
        reporter.begin(&plan, &machine).unwrap();
        let r = eight_byte_sum(m(6.5, 0.5, 0.0, Some(0)), m(0.25, 32.0, 0.0, Some(0)));
        reporter.row(&r).unwrap();
        reporter.finish().unwrap();
        drop(reporter);
        let table = String::from_utf8(table).unwrap();
        assert!(
            table.contains(&format!("# Writing JSON output to {path_text}\n")),
            "{table}"
        );
        assert!(
            table.contains("# note: -S 1: the timestamps are UTC"),
            "{table}"
        );
        let row_line = table.lines().last().unwrap();
        // The row, then two spaces and `YYYY-MM-DD HH:MM:SS`.
        let (body, stamp) = row_line.split_at(row_line.len() - 21);
        assert_eq!(body, table_row(&r, &Columns::of(&plan)));
        assert_eq!(&stamp[..2], "  ");
        assert_eq!(stamp[2..].len(), "YYYY-MM-DD HH:MM:SS".len());
        let document: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(document["results"].as_array().unwrap().len(), 1);
        assert_eq!(
            document["config"]["devices"][0]["device_info"],
            "NVIDIA H200"
        );
        assert_eq!(document["errors"], serde_json::json!([]));
        // A name nccl-tests would not write: no document, no line about one.
        let args = Args::try_parse_from([
            "nccl-perf",
            "-J",
            dir.path().join("run.txt").to_str().unwrap(),
        ])
        .unwrap();
        let plan = Plan::new(&args, &crate::runner::Layout::single_process(1)).unwrap();
        let mut table = Vec::new();
        Reporter::new(&mut table, None)
            .begin(&plan, &machine)
            .unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(!table.contains("Writing JSON output"), "{table}");
        assert!(!dir.path().join("run.txt").exists());
    }
}
