//! `cargo xtask nccl-tests-compare OUT_DIR`: nccl-tests and nccl-perf of
//! the same run, side by side, from the JSON documents both write with
//! `-J` (the GPU bundle's nccl-tests.sh writes `OP.nccl-tests.json` and
//! `OP.nccl-perf.json` per operation; fetch its folder here and compare).
//!
//! Per operation and size: both tools' times out of place and in place,
//! their ratio (nccl-perf / nccl-tests) and whether it is within the
//! target (`--target-percent`, 3 by default) from `--from` bytes on (1M),
//! then a summary line per operation and one for the whole folder. The
//! task fails when an operation missed the target or a document cannot be
//! read.
//!
//! Given several folders (nccl-tests.sh's `runK` folders, with `REPEAT`),
//! it compares each, then prints per operation and size each program's own
//! spread over the runs (slowest / fastest - 1) and the ratio of their
//! medians: where a program differs from itself by more than the target
//! from one process to the next, no single run can show the target met.
//!
//! Rows pair by collective, size, type, reduction and root, in order (so
//! the repeats of `-N` pair one by one); each row has its out-of-place and
//! in-place halves. nccl-tests names its collective only by its program
//! (`args[0]`, `all_reduce_perf`); nccl-perf names it in every result
//! (`collective`), and its `all_to_all` is nccl-tests' `alltoall`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Result;

/// What the files of each operation end with.
const NCCL_TESTS_SUFFIX: &str = ".nccl-tests.json";
const NCCL_PERF_SUFFIX: &str = ".nccl-perf.json";

#[derive(clap::Args)]
pub struct Args {
    /// The folders nccl-tests.sh wrote (OP.nccl-tests.json and OP.nccl-perf.json per
    /// operation): one, or each runK folder of a run with REPEAT.
    #[arg(required = true, value_name = "OUT_DIR")]
    out_dirs: Vec<PathBuf>,

    /// The target: each ratio within this many percent of 1.
    #[arg(long, value_name = "PERCENT", default_value_t = 3.0)]
    target_percent: f64,

    /// Judge rows from this size on (bytes; suffixes K, M, G); smaller rows print '-'.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    from: u64,

    /// Judge only the out-of-place halves (in place at world size 1, NCCL copies nothing and
    /// both programs time an empty loop); the in-place halves still print, marked '-'.
    #[arg(long)]
    out_of_place_only: bool,
}

/// `text` in bytes: digits, then optionally `K`, `M` or `G` (powers of
/// 1024, either case), as nccl-tests and nccl-perf read sizes.
fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let bad = || format!("expected a size in bytes like 1048576 or 1M, got {text:?}");
    let (digits, shift) = match text.char_indices().last() {
        Some((at, 'k' | 'K')) => (&text[..at], 10),
        Some((at, 'm' | 'M')) => (&text[..at], 20),
        Some((at, 'g' | 'G')) => (&text[..at], 30),
        _ => (text, 0),
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    value.checked_mul(1 << shift).ok_or_else(bad)
}

/// One row of a document's results: what identifies it and its two times.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonRow {
    /// The collective, as the tool names it (`all_reduce`, `alltoall`).
    pub collective: String,
    /// Bytes.
    pub size: u64,
    /// The element type (`float`).
    pub dtype: String,
    /// The reduction (`sum`, or `none`).
    pub redop: String,
    /// The root (-1 for collectives without one).
    pub root: i64,
    /// The out-of-place time in microseconds; `None` for a `null` half.
    pub out_of_place_us: Option<f64>,
    /// The in-place time in microseconds; `None` for a `null` half.
    pub in_place_us: Option<f64>,
}

impl JsonRow {
    /// The time of one half: `out_of_place` or `in_place`.
    fn time_us(&self, in_place: bool) -> Option<f64> {
        if in_place {
            self.in_place_us
        } else {
            self.out_of_place_us
        }
    }
}

/// Whether two names are the same collective: nccl-tests' `alltoall` is
/// nccl-perf's `all_to_all`, so `_` and `-` do not count.
fn same_collective(a: &str, b: &str) -> bool {
    let letters = |name: &str| {
        name.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .collect::<String>()
    };
    letters(a) == letters(b)
}

/// The collective nccl-tests' document ran: its program's name
/// (`.../all_reduce_perf`) without `_perf`.
fn program_collective(document: &Value) -> Option<String> {
    let program = document["args"].as_array()?.first()?.as_str()?;
    let name = Path::new(program).file_name()?.to_str()?;
    Some(name.strip_suffix("_perf").unwrap_or(name).to_string())
}

/// One half's time: its `time` (or `cpu_time`, with `-C 1`); `None` for a
/// `null` half or a time that is not a number (nccl-tests' `"nan"`).
fn half_time(half: &Value) -> Option<f64> {
    half.get("time")
        .or_else(|| half.get("cpu_time"))
        .and_then(Value::as_f64)
}

/// The rows of one `-J` document, each named by its `collective` or, for
/// nccl-tests' results, which name none, by `collective`.
///
/// # Errors
/// A document without a results list, or a result without its size,
/// type, reduction or root.
pub fn rows(document: &Value, collective: Option<&str>) -> Result<Vec<JsonRow>> {
    let results = document["results"]
        .as_array()
        .ok_or("the document has no \"results\" list")?;
    results
        .iter()
        .enumerate()
        .map(|(index, result)| {
            let field = |key: &str| -> Result<&Value> {
                result
                    .get(key)
                    .ok_or_else(|| format!("result {index} has no \"{key}\"").into())
            };
            let text = |key: &str| -> Result<String> {
                field(key)?
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("result {index}'s \"{key}\" is not a string").into())
            };
            let root = text("root")?;
            let root = root
                .trim()
                .parse()
                .map_err(|_| format!("result {index}'s root {root:?} is not an integer"))?;
            let collective = match result.get("collective").and_then(Value::as_str) {
                Some(named) => named.to_string(),
                None => collective
                    .ok_or_else(|| format!("result {index} names no collective"))?
                    .to_string(),
            };
            Ok(JsonRow {
                collective,
                size: field("size")?
                    .as_u64()
                    .ok_or_else(|| format!("result {index}'s size is not a byte count"))?,
                dtype: text("type")?,
                redop: text("redop")?,
                root,
                out_of_place_us: half_time(field("out_of_place")?),
                in_place_us: half_time(field("in_place")?),
            })
        })
        .collect()
}

/// One half of a pair of rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HalfPair {
    /// nccl-tests' time.
    pub reference_us: Option<f64>,
    /// nccl-perf's time.
    pub subject_us: Option<f64>,
}

impl HalfPair {
    /// nccl-perf / nccl-tests, when both have a positive time.
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

/// A row of nccl-tests and nccl-perf's row of the same collective, size,
/// type, reduction and root.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedRow {
    /// Bytes.
    pub size: u64,
    /// Out of place, then in place.
    pub halves: [HalfPair; 2],
}

/// The rows of `reference` each with the first unused row of `subject`
/// with the same collective, size, type, reduction and root (so repeated
/// sizes of `-N` pair in order); a row the subject lacks pairs with no
/// time.
pub fn pair(reference: &[JsonRow], subject: &[JsonRow]) -> Vec<PairedRow> {
    let mut used = vec![false; subject.len()];
    let same = |a: &JsonRow, b: &JsonRow| {
        same_collective(&a.collective, &b.collective)
            && (a.size, &a.dtype, &a.redop, a.root) == (b.size, &b.dtype, &b.redop, b.root)
    };
    reference
        .iter()
        .map(|row| {
            let found = subject
                .iter()
                .enumerate()
                .find(|(index, other)| !used[*index] && same(row, other))
                .map(|(index, other)| {
                    used[index] = true;
                    other
                });
            let half = |in_place| HalfPair {
                reference_us: row.time_us(in_place),
                subject_us: found.and_then(|other| other.time_us(in_place)),
            };
            PairedRow {
                size: row.size,
                halves: [half(false), half(true)],
            }
        })
        .collect()
}

/// How a comparison is judged and labelled.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// The operation, for the title.
    pub operation: String,
    /// The largest accepted distance of the ratio from 1 (0.03: 3 %).
    pub target: f64,
    /// Rows from this size on are judged; smaller ones print `-`.
    pub from_bytes: u64,
    /// Whether the in-place halves are judged too.
    pub in_place: bool,
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
    let percent = judgement.target * 100.0;
    let _ = writeln!(
        text,
        "# {}: nccl-tests and nccl-perf, time in us; ratio = nccl-perf / nccl-tests; \
         target: within {percent} % from {} B{}",
        judgement.operation,
        judgement.from_bytes,
        if judgement.in_place {
            ""
        } else {
            ", out of place"
        }
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
        for (place, pair) in row.halves.iter().enumerate() {
            let judged = row.size >= judgement.from_bytes && (place == 0 || judgement.in_place);
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
        judgement.operation,
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

/// The JSON document at `path`.
fn read_document(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    serde_json::from_str(&text).map_err(|error| {
        format!(
            "{} is not a whole JSON document ({error}): did the run stop early? its .txt log says",
            path.display()
        )
        .into()
    })
}

/// The operations of `dir`: every `OP` with an `OP.nccl-tests.json`, sorted.
fn operations(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|error| format!("cannot read the folder {}: {error}", dir.display()))?;
    let mut operations = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        if let Some(operation) = name
            .to_str()
            .and_then(|n| n.strip_suffix(NCCL_TESTS_SUFFIX))
        {
            operations.push(operation.to_string());
        }
    }
    operations.sort();
    if operations.is_empty() {
        return Err(format!(
            "{} holds no OP{NCCL_TESTS_SUFFIX}: give the folder nccl-tests.sh wrote",
            dir.display()
        )
        .into());
    }
    Ok(operations)
}

/// nccl-tests' and nccl-perf's rows of one operation in `dir`, paired.
fn paired_rows(dir: &Path, operation: &str) -> Result<Vec<PairedRow>> {
    let reference_path = dir.join(format!("{operation}{NCCL_TESTS_SUFFIX}"));
    let subject_path = dir.join(format!("{operation}{NCCL_PERF_SUFFIX}"));
    let named = |path: &Path, error: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{}: {error}", path.display()).into()
    };
    let reference = read_document(&reference_path)?;
    let collective = program_collective(&reference).unwrap_or_else(|| operation.to_string());
    let reference = rows(&reference, Some(&collective)).map_err(|e| named(&reference_path, e))?;
    let subject =
        rows(&read_document(&subject_path)?, None).map_err(|e| named(&subject_path, e))?;
    Ok(pair(&reference, &subject))
}

/// How `args` judges `operation`.
fn judgement(operation: &str, args: &Args) -> Judgement {
    Judgement {
        operation: operation.to_string(),
        target: args.target_percent / 100.0,
        from_bytes: args.from,
        in_place: !args.out_of_place_only,
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// `None` for none.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[middle]),
        _ => Some((values[middle - 1] + values[middle]) / 2.0),
    }
}

/// How much the slowest of `times` exceeds the fastest, in percent, as a
/// column; `N/A` for fewer than two times.
fn spread_column(times: &[f64]) -> String {
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    let slowest = times.iter().copied().fold(0.0, f64::max);
    if times.len() < 2 || fastest <= 0.0 {
        return format!("{:>10}", "N/A");
    }
    format!("{:>9.1}%", (slowest / fastest - 1.0) * 100.0)
}

/// The table of `operation` over repeated runs (`runs`, each the paired
/// rows of one folder): per size and half, nccl-tests' and nccl-perf's
/// own spread over the runs and the ratio of their median times.
///
/// # Errors
/// Runs whose rows are not the same sizes in the same order (the runs of
/// one nccl-tests.sh call always are).
pub fn render_spread(operation: &str, runs: &[Vec<PairedRow>]) -> Result<String> {
    let first = runs.first().map(Vec::as_slice).unwrap_or_default();
    let sizes = |rows: &[PairedRow]| rows.iter().map(|row| row.size).collect::<Vec<_>>();
    for (index, run) in runs.iter().enumerate() {
        if sizes(run) != sizes(first) {
            return Err(format!(
                "{operation}: run {} has the sizes {:?} but run 1 has {:?}: compare runs of one \
                 nccl-tests.sh call",
                index + 1,
                sizes(run),
                sizes(first)
            )
            .into());
        }
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# {operation} over {} runs: each program's spread (slowest / fastest - 1) and the ratio \
         of the median times (nccl-perf / nccl-tests)",
        runs.len()
    );
    let half = |place: &str| {
        format!(
            "  {:>10}  {:>10}  {:>12}",
            format!("{place}_tests"),
            format!("{place}_perf"),
            "median_ratio"
        )
    };
    let _ = writeln!(text, "# {:>10}{}{}", "size", half("oop"), half("ip"));
    for (at, row) in first.iter().enumerate() {
        let mut line = format!("{:>12}", row.size);
        for place in 0..2 {
            let times = |pick: fn(&HalfPair) -> Option<f64>| -> Vec<f64> {
                runs.iter()
                    .filter_map(|run| pick(&run[at].halves[place]))
                    .collect()
            };
            let tests = times(|half| half.reference_us);
            let perf = times(|half| half.subject_us);
            let ratio = HalfPair {
                reference_us: median(tests.clone()),
                subject_us: median(perf.clone()),
            }
            .ratio()
            .map_or_else(|| "N/A".to_string(), |ratio| format!("{ratio:.3}"));
            let _ = write!(
                line,
                "  {}  {}  {ratio:>12}",
                spread_column(&tests),
                spread_column(&perf)
            );
        }
        let _ = writeln!(text, "{line}");
    }
    Ok(text)
}

pub fn run(args: Args) -> Result<()> {
    if !(args.target_percent.is_finite() && args.target_percent >= 0.0) {
        return Err(format!(
            "--target-percent must be a percentage of 0 or more, got {}",
            args.target_percent
        )
        .into());
    }
    let several = args.out_dirs.len() > 1;
    let mut missed = Vec::new();
    let mut runs_of: BTreeMap<String, Vec<Vec<PairedRow>>> = BTreeMap::new();
    for dir in &args.out_dirs {
        if several {
            println!("## {}", dir.display());
        }
        for operation in operations(dir)? {
            let rows = paired_rows(dir, &operation)?;
            let (text, verdict) = render(&rows, &judgement(&operation, &args));
            print!("{text}");
            if !verdict.all_met() {
                missed.push(if several {
                    format!("{operation} in {}", dir.display())
                } else {
                    operation.clone()
                });
            }
            if several {
                runs_of.entry(operation).or_default().push(rows);
            }
        }
    }
    for (operation, runs) in &runs_of {
        print!("{}", render_spread(operation, runs)?);
    }
    let target = format!("target {} % from {} B", args.target_percent, args.from);
    if missed.is_empty() {
        println!("nccl-tests-compare: {target}: met by every operation");
        Ok(())
    } else {
        Err(format!("{target}: missed by {}", missed.join(", ")).into())
    }
}

#[cfg(test)]
#[path = "nccl_tests_compare_tests.rs"]
mod tests;
