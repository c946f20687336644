//! Where the lines go: the table on stdout (or any writer), with
//! `--json FILE` one JSON line per row, and with `-J FILE` nccl-tests'
//! JSON document.

use std::io::{self, Write};

use indicatif::ProgressBar;

use super::comments::{Machine, preamble};
use super::nccl_tests_json::{JsonDocument, JsonHead};
use super::table::{table_row, timestamp_column};
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
    /// Whether rows end in a timestamp (`-S 1`).
    timestamps: bool,
}

impl<W: Write> Reporter<W> {
    /// A reporter writing the table to `out` and JSON lines to `json`.
    pub fn new(out: W, json: Option<Box<dyn Write>>) -> Self {
        Self {
            out,
            json,
            progress: None,
            document: None,
            timestamps: false,
        }
    }

    /// Writes the lines before the tables ([`preamble`]) for `plan` on
    /// `machine`, and opens `-J`'s document (as nccl-tests does, a file
    /// that cannot be created is skipped, with a comment line saying so).
    ///
    /// # Errors
    /// Writing failed.
    pub fn begin(&mut self, plan: &Plan, machine: &Machine) -> io::Result<()> {
        self.timestamps = plan.method.timestamps;
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
        let mut line = table_row(row);
        if self.timestamps {
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

    use super::super::tests::{m, row};
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
        let r = row(
            8,
            2,
            "sum",
            -1,
            m(6.5, 0.5, 0.0, Some(0)),
            m(0.25, 32.0, 0.0, None),
        );
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
}
