//! Reading nccl-tests' tables back, and setting two side by side: the
//! output of nccl-tests' `*_perf` binaries and of nccl-perf (the same
//! table), for `nccl-tests-compare`.
//!
//! [`parse_tables`] reads every table of a text: rows are the lines that
//! start with two integers (size and count); the column-header line
//! (`# size count type redop root time ...`) says where the two time
//! columns are (nccl-perf's `ratio` columns, nccl-tests' `-I` columns and
//! `cputime` included), and starts a new table; `# Collective test
//! starting: all_reduce_perf` (nccl-tests) and `# Collective all_reduce
//! ...` (nccl-perf) name it. Anything else (comments, Markdown around a
//! pasted table) is skipped. [`compare`] pairs two tables' rows and
//! [`render`] prints them with the ratio of each time and whether it is
//! within a target.

use std::fmt::Write as _;

use crate::collective::Mode;
use crate::report::c_general;

/// One row of a table, as printed.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRow {
    /// The `size` column, in bytes.
    pub size: u64,
    /// The `count` column.
    pub count: u64,
    /// The `type` column.
    pub dtype: String,
    /// The `redop` column.
    pub redop: String,
    /// The `root` column.
    pub root: i64,
    /// The out-of-place time in microseconds; `None` for `N/A`.
    pub out_of_place_us: Option<f64>,
    /// The in-place time in microseconds; `None` for `N/A`.
    pub in_place_us: Option<f64>,
    /// The 1-based line of the text it was read from.
    pub line: usize,
}

impl TableRow {
    /// The time of `mode`.
    pub fn time_us(&self, mode: Mode) -> Option<f64> {
        match mode {
            Mode::OutOfPlace => self.out_of_place_us,
            Mode::InPlace => self.in_place_us,
        }
    }

    /// What identifies the row in its table, but for repeats (`-N`).
    fn key(&self) -> (u64, &str, &str, i64) {
        (self.size, &self.dtype, &self.redop, self.root)
    }
}

/// The rows of one table, and the collective it names, if it does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// `all_reduce` (nccl-tests' `all_reduce_perf` without `_perf`).
    pub collective: Option<String>,
    /// The rows, in order.
    pub rows: Vec<TableRow>,
}

/// A line that looks like a row but cannot be read as one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}: {text:?}")]
pub struct TableError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
    /// The line.
    pub text: String,
}

/// Where the two time columns are, counted in a row's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TimeColumns {
    out_of_place: usize,
    in_place: usize,
}

/// nccl-tests' default layout: `time` after the five leading columns, and
/// again after `time algbw busbw #wrong`.
const DEFAULT_COLUMNS: TimeColumns = TimeColumns {
    out_of_place: 5,
    in_place: 9,
};

/// The time columns a column-header line names, if it is one.
fn header_columns(fields: &[&str]) -> Option<TimeColumns> {
    if fields.first() != Some(&"size") || fields.get(1) != Some(&"count") {
        return None;
    }
    let mut times = fields
        .iter()
        .enumerate()
        .filter(|(_, name)| **name == "time" || **name == "cputime")
        .map(|(index, _)| index);
    Some(TimeColumns {
        out_of_place: times.next()?,
        in_place: times.next()?,
    })
}

/// The collective a comment line names, if it names one: nccl-tests'
/// `Collective test starting: all_reduce_perf` or nccl-perf's `Collective
/// all_reduce layer ...` (not nccl-tests' `Collective test concluded`).
fn named_collective(comment: &str) -> Option<String> {
    if let Some(test) = comment.strip_prefix("Collective test ") {
        let program = test.strip_prefix("starting:")?.trim();
        return Some(program.strip_suffix("_perf").unwrap_or(program).to_string());
    }
    let name = comment
        .strip_prefix("Collective ")?
        .split_whitespace()
        .next()?;
    Some(name.to_string())
}

/// A time field: a number, or `None` for `N/A`.
fn time_field(text: &str) -> Result<Option<f64>, String> {
    if text == "N/A" {
        return Ok(None);
    }
    text.parse::<f64>()
        .map(Some)
        .map_err(|_| format!("the time {text:?} is not a number"))
}

/// Every table of `text`, in order.
///
/// # Errors
/// [`TableError`] for a row (a line starting with two integers) without
/// its columns or with a time that is not a number.
pub fn parse_tables(text: &str) -> Result<Vec<Table>, TableError> {
    let mut tables: Vec<Table> = Vec::new();
    let mut current = Table::default();
    let mut columns = DEFAULT_COLUMNS;
    // The name of the next table, given before its rows.
    let mut next_name: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix('#') {
            let fields: Vec<&str> = comment.split_whitespace().collect();
            let header = header_columns(&fields);
            let name = named_collective(comment.trim());
            if (header.is_some() || name.is_some()) && !current.rows.is_empty() {
                tables.push(std::mem::take(&mut current));
            }
            columns = header.unwrap_or(columns);
            next_name = name.or(next_name);
            continue;
        }
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let (Some(Ok(size)), Some(Ok(count))) = (
            fields.first().map(|f| f.parse::<u64>()),
            fields.get(1).map(|f| f.parse::<u64>()),
        ) else {
            continue;
        };
        let error = |reason: String| TableError {
            line: index + 1,
            reason,
            text: line.to_string(),
        };
        let needed = columns.out_of_place.max(columns.in_place) + 1;
        if fields.len() < needed {
            return Err(error(format!(
                "a row needs at least {needed} columns, this one has {}",
                fields.len()
            )));
        }
        let root = fields[4]
            .parse::<i64>()
            .map_err(|_| error(format!("the root {:?} is not an integer", fields[4])))?;
        if current.rows.is_empty() {
            current.collective = next_name.take();
        }
        current.rows.push(TableRow {
            size,
            count,
            dtype: fields[2].to_string(),
            redop: fields[3].to_string(),
            root,
            out_of_place_us: time_field(fields[columns.out_of_place]).map_err(&error)?,
            in_place_us: time_field(fields[columns.in_place]).map_err(&error)?,
            line: index + 1,
        });
    }
    if !current.rows.is_empty() {
        tables.push(current);
    }
    Ok(tables)
}

/// One mode of a pair of rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModePair {
    /// The reference's time (nccl-tests).
    pub reference_us: Option<f64>,
    /// The subject's time (nccl-perf).
    pub subject_us: Option<f64>,
}

impl ModePair {
    /// subject / reference, when both have a positive time.
    pub fn ratio(&self) -> Option<f64> {
        match (self.reference_us, self.subject_us) {
            (Some(reference), Some(subject)) if reference > 0.0 && subject.is_finite() => {
                Some(subject / reference)
            }
            _ => None,
        }
    }

    /// Whether the ratio is within `target` (0.03: 3 %) of 1; `None`
    /// without a ratio.
    pub fn within(&self, target: f64) -> Option<bool> {
        self.ratio().map(|ratio| (ratio - 1.0).abs() <= target)
    }
}

/// A row of the reference and the subject's row of the same size, type,
/// reduction and root.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedRow {
    /// The size in bytes.
    pub size: u64,
    /// Out of place.
    pub out_of_place: ModePair,
    /// In place.
    pub in_place: ModePair,
}

impl PairedRow {
    /// The pair of `mode`.
    pub fn mode(&self, mode: Mode) -> &ModePair {
        match mode {
            Mode::OutOfPlace => &self.out_of_place,
            Mode::InPlace => &self.in_place,
        }
    }
}

/// The rows of `reference` each with the first unused row of `subject`
/// with the same size, type, reduction and root (so repeated sizes of
/// `-N` pair in order); a row the subject lacks pairs with no time.
pub fn compare(reference: &Table, subject: &Table) -> Vec<PairedRow> {
    let mut used = vec![false; subject.rows.len()];
    reference
        .rows
        .iter()
        .map(|row| {
            let found = subject
                .rows
                .iter()
                .enumerate()
                .find(|(index, other)| !used[*index] && other.key() == row.key())
                .map(|(index, other)| {
                    used[index] = true;
                    other
                });
            let pair = |mode| ModePair {
                reference_us: row.time_us(mode),
                subject_us: found.and_then(|other| other.time_us(mode)),
            };
            PairedRow {
                size: row.size,
                out_of_place: pair(Mode::OutOfPlace),
                in_place: pair(Mode::InPlace),
            }
        })
        .collect()
}

/// How a comparison is judged and labelled.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// The collective, for the title.
    pub collective: String,
    /// The largest accepted distance of the ratio from 1 (0.03: 3 %).
    pub target: f64,
    /// Rows from this size on are judged; smaller ones print `-`.
    pub from_bytes: u64,
}

/// What [`render`] found: judged halves, and those within the target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Halves of rows at or above the size judged, with both times.
    pub judged: usize,
    /// Of those, the ones within the target.
    pub met: usize,
    /// Halves at or above the size judged where a time is missing.
    pub missing: usize,
}

impl Verdict {
    /// Whether every judged half met the target and none was missing.
    pub fn all_met(&self) -> bool {
        self.met == self.judged && self.missing == 0
    }
}

/// `time` in the 12-character time columns (`N/A` for none).
fn time_column(time: Option<f64>) -> String {
    time.map_or_else(|| format!("{:>12}", "N/A"), |us| format!("{us:>12.2}"))
}

/// The side-by-side table of `rows` as `judgement` says, and its verdict.
pub fn render(rows: &[PairedRow], judgement: &Judgement) -> (String, Verdict) {
    let mut text = String::new();
    let mut verdict = Verdict::default();
    let percent = c_general(judgement.target * 100.0);
    let _ = writeln!(
        text,
        "# {}: nccl-tests and nccl-perf, time in us; ratio = nccl-perf / nccl-tests; \
         target: within {percent} % from {} B",
        judgement.collective, judgement.from_bytes
    );
    let half = |place: &str| {
        format!(
            "  {:>12}  {:>12}  {:>6}  {:>5}",
            format!("{place}_tests"),
            format!("{place}_perf"),
            "ratio",
            "meets"
        )
    };
    let _ = writeln!(text, "# {:>10}{}{}", "size", half("oop"), half("ip"));
    for row in rows {
        let mut line = format!("{:>12}", row.size);
        for mode in Mode::BOTH {
            let pair = row.mode(mode);
            let judged = row.size >= judgement.from_bytes;
            let meets = match (judged, pair.within(judgement.target)) {
                (false, _) => "-",
                (true, None) => {
                    verdict.missing += 1;
                    "N/A"
                }
                (true, Some(met)) => {
                    verdict.judged += 1;
                    verdict.met += usize::from(met);
                    if met { "yes" } else { "NO" }
                }
            };
            let ratio = pair
                .ratio()
                .map_or_else(|| "N/A".to_string(), |ratio| format!("{ratio:.3}"));
            let _ = write!(
                line,
                "  {}  {}  {ratio:>6}  {meets:>5}",
                time_column(pair.reference_us),
                time_column(pair.subject_us)
            );
        }
        let _ = writeln!(text, "{line}");
    }
    let _ = writeln!(
        text,
        "# {}: {} of {} halves from {} B within {percent} %{}",
        judgement.collective,
        verdict.met,
        verdict.judged,
        judgement.from_bytes,
        if verdict.missing > 0 {
            format!(", {} without both times", verdict.missing)
        } else {
            String::new()
        }
    );
    (text, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nccl-tests 2.19.6 on one H200, recorded (`-b 8 -e 1G -f 4 -g 1 -w 20 -n 200 -c 1`).
    const BASELINE: &str =
        include_str!("../../docs/measurements/h200-2026-12-02-baselines/h200-1gpu.md");

    /// nccl-perf --compare raw,group on one H200, recorded: `ratio` columns and `N/A`.
    const NCCL_PERF: &str =
        include_str!("../../docs/measurements/h200-2026-12-02-group/nccl-perf-raw-group.txt");

    #[test]
    fn the_recorded_nccl_tests_tables_parse() {
        let tables = parse_tables(BASELINE).unwrap();
        // all_reduce, all_gather, broadcast, reduce, reduce_scatter, alltoall, sendrecv.
        assert_eq!(tables.len(), 7);
        assert!(tables.iter().all(|table| table.rows.len() == 14));
        let all_reduce = &tables[0];
        assert_eq!(
            all_reduce.collective, None,
            "a pasted table names no program"
        );
        let first = &all_reduce.rows[0];
        assert_eq!(
            (
                first.size,
                first.count,
                first.dtype.as_str(),
                first.redop.as_str(),
                first.root
            ),
            (8, 2, "float", "sum", -1)
        );
        assert_eq!(
            (first.out_of_place_us, first.in_place_us),
            (Some(6.30), Some(0.31))
        );
        let last = all_reduce.rows.last().unwrap();
        assert_eq!((last.size, last.out_of_place_us), (536870912, Some(255.47)));
        assert_eq!(tables[1].rows[0].size, 0, "all_gather of 8 B is 0 B");
        assert_eq!(tables[2].rows[0].root, 0, "broadcast's root");
        // #wrong N/A does not hide the in-place time.
        assert_eq!(tables[5].rows[1].in_place_us, Some(0.22));
    }

    #[test]
    fn nccl_perf_tables_with_ratio_columns_and_na_parse() {
        let tables = parse_tables(NCCL_PERF).unwrap();
        let names: Vec<&str> = tables
            .iter()
            .filter_map(|t| t.collective.as_deref())
            .collect();
        assert_eq!(names.len(), tables.len(), "every nccl-perf table is named");
        assert_eq!(names[0], "all_reduce");
        let first = &tables[0].rows[0];
        assert_eq!(
            (first.out_of_place_us, first.in_place_us),
            (None, Some(4.36))
        );
        assert!(names.contains(&"sendrecv"), "{names:?}");
    }

    #[test]
    fn program_names_headers_and_bad_rows() {
        let text = "# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803\n\
                    # Collective test starting: all_gather_perf\n\
                    #       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong \n\
                    \x20         32             8     float    none      -1     7.45    0.00    0.00       0     0.35    0.09    0.00       0\n\
                    # Out of bounds values : 0 OK\n";
        let tables = parse_tables(text).unwrap();
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0].collective.as_deref(), Some("all_gather"));
        assert_eq!(tables[0].rows[0].in_place_us, Some(0.35));
        // -I's columns move the in-place time.
        let per_iter = "#  size count type redop root time algbw busbw #wrong i_min i_max i_p99 i_cv% time algbw busbw #wrong i_min i_max i_p99 i_cv%\n\
                        8 2 float sum -1 6.30 0.00 0.00 0 1 2 3 4 0.31 0.03 0.00 0 1 2 3 4\n";
        let row = &parse_tables(per_iter).unwrap()[0].rows[0];
        assert_eq!(
            (row.out_of_place_us, row.in_place_us),
            (Some(6.30), Some(0.31))
        );
        for bad in [
            "8 2 float sum -1 6.30",
            "8 2 float sum -1 fast 0 0 0 0.3",
            "8 2 float sum x 1 0 0 0 1",
        ] {
            let error = parse_tables(bad).unwrap_err();
            assert_eq!(error.line, 1, "{error}");
        }
        assert_eq!(
            parse_tables("no table here\n| 16 MiB | x |\n").unwrap(),
            vec![]
        );
    }

    fn table(rows: &[(u64, Option<f64>, Option<f64>)]) -> Table {
        Table {
            collective: None,
            rows: rows
                .iter()
                .map(|&(size, oop, ip)| TableRow {
                    size,
                    count: size / 4,
                    dtype: "float".into(),
                    redop: "sum".into(),
                    root: -1,
                    out_of_place_us: oop,
                    in_place_us: ip,
                    line: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn comparing_and_judging() {
        let tests = table(&[
            (1024, Some(6.0), Some(0.4)),
            (1 << 20, Some(10.0), Some(0.4)),
            (1 << 21, Some(20.0), None),
            (1 << 20, Some(10.0), Some(0.4)),
        ]);
        let perf = table(&[
            (1 << 20, Some(10.2), Some(0.2)),
            (1024, Some(5.0), Some(0.2)),
            (1 << 21, Some(21.0), Some(0.2)),
            (1 << 20, Some(9.0), Some(0.4)),
        ]);
        let rows = compare(&tests, &perf);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].out_of_place.subject_us, Some(5.0));
        assert!((rows[1].out_of_place.ratio().unwrap() - 1.02).abs() < 1e-9);
        assert_eq!(rows[1].out_of_place.within(0.03), Some(true));
        assert_eq!(rows[1].in_place.within(0.03), Some(false));
        assert_eq!(rows[2].in_place.ratio(), None);
        // The second 1 MiB row (a second -N cycle) pairs with the second.
        assert_eq!(rows[3].out_of_place.subject_us, Some(9.0));
        let judgement = Judgement {
            collective: "all_reduce".into(),
            target: 0.03,
            from_bytes: 1 << 20,
        };
        let (text, verdict) = render(&rows, &judgement);
        assert_eq!(
            verdict,
            Verdict {
                judged: 5,
                met: 2,
                missing: 1
            }
        );
        assert!(!verdict.all_met());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 4 + 1, "{text}");
        assert!(
            lines[0].starts_with("# all_reduce: nccl-tests and nccl-perf"),
            "{text}"
        );
        assert!(
            lines[0].ends_with("target: within 3 % from 1048576 B"),
            "{text}"
        );
        assert_eq!(
            lines[2],
            "        1024          6.00          5.00   0.833      -          0.40          0.20   0.500      -"
        );
        assert_eq!(
            lines[3],
            "     1048576         10.00         10.20   1.020    yes          0.40          0.20   0.500     NO"
        );
        assert!(
            lines[4].ends_with("         N/A          0.20     N/A    N/A"),
            "{text}"
        );
        assert_eq!(
            lines[6],
            "# all_reduce: 2 of 5 halves from 1048576 B within 3 %, 1 without both times"
        );
        // Every data line has the fields of the header line (but its '#').
        assert_eq!(
            lines[1],
            "#       size     oop_tests      oop_perf   ratio  meets      ip_tests       ip_perf   ratio  meets"
        );
        let fields = |line: &str| line.split_whitespace().count();
        assert!(
            lines[2..6]
                .iter()
                .all(|line| fields(line) == fields(lines[1]) - 1),
            "{text}"
        );
    }
}
