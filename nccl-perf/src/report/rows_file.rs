//! The rows `--json` wrote, read back (`--report ROWS.jsonl`): one [`Row`]
//! per line, in the form [`Row::to_json`] writes. The names a row holds
//! (collective, layer, type, reduction) must be nccl-perf's own; anything
//! else is an error naming the line, what was expected and what was given.

use std::path::Path;

use clap::ValueEnum;
use nccl_core::{DataType, ReduceOp};
use serde::de::{Deserialize, Deserializer, Error as _};

use super::Row;
use crate::collective::Collective;
use crate::error::BenchError;
use crate::layer::LayerKind;

/// The one of `names` that a string equals, or an error naming `what` was
/// expected and what was given.
fn known<'de, D: Deserializer<'de>>(
    deserializer: D,
    what: &str,
    names: &[&'static str],
) -> Result<&'static str, D::Error> {
    let given = String::deserialize(deserializer)?;
    names
        .iter()
        .find(|name| **name == given)
        .copied()
        .ok_or_else(|| {
            D::Error::custom(format!(
                "expected {what} ({}), got {given:?}",
                names.join(", ")
            ))
        })
}

/// A collective's name (`all_reduce`).
pub(super) fn collective<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    known(d, "a collective", &Collective::ALL.map(Collective::name))
}

/// A layer's name (`raw`, `group-caller`).
pub(super) fn layer<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let names: Vec<&'static str> = LayerKind::value_variants()
        .iter()
        .map(|kind| kind.name())
        .collect();
    known(d, "a layer", &names)
}

/// An element type by nccl-tests' name (`float`, `bfloat16`).
pub(super) fn dtype<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    known(d, "a type", &DataType::ALL.map(DataType::short_name))
}

/// A reduction by nccl-tests' name (`sum`), or `none`.
pub(super) fn redop<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let mut names: Vec<&'static str> = ReduceOp::ALL.iter().map(|op| op.name()).collect();
    names.push("none");
    known(d, "a reduction", &names)
}

/// A serde_json syntax error with its column, without its line (which
/// is always 1: the line is named apart).
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&position) {
        Some(message) => format!("{message} at column {}", error.column()),
        None => text,
    }
}

/// Every row of `text`, one JSON object per line (blank lines are
/// skipped); `path` names the file in errors.
///
/// # Errors
/// [`BenchError::Rows`] naming the first line that is not a row, or
/// saying there is no row at all.
pub fn parse_rows(text: &str, path: &Path) -> Result<Vec<Row>, BenchError> {
    let error = |message: String| BenchError::Rows {
        path: path.display().to_string(),
        message,
    };
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        // Through a `Value`, which owns its strings: a row's names are
        // `&'static str`, looked up rather than borrowed from the line.
        let row = serde_json::from_str::<serde_json::Value>(line).and_then(Row::deserialize);
        rows.push(row.map_err(|source| {
            let line = index + 1;
            error(if source.is_data() {
                format!("line {line}: {source}")
            } else {
                format!(
                    "line {line}: not a JSON object ({}): expected one row per line, as nccl-perf --json \
                     writes them",
                    without_position(&source)
                )
            })
        })?);
    }
    if rows.is_empty() {
        return Err(error(
            "no rows: expected one JSON object per line, as nccl-perf --json writes them"
                .to_string(),
        ));
    }
    Ok(rows)
}

/// Every row of the file at `path`.
///
/// # Errors
/// [`BenchError::Rows`] when it cannot be read or is not rows
/// ([`parse_rows`]).
pub fn read_rows(path: &Path) -> Result<Vec<Row>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Rows {
        path: path.display().to_string(),
        message: format!("cannot read it: {source}"),
    })?;
    parse_rows(&text, path)
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample_row;
    use super::*;
    use crate::per_iter::PerIter;
    use crate::report::Ratio;

    fn parse(text: &str) -> Result<Vec<Row>, String> {
        parse_rows(text, Path::new("rows.jsonl")).map_err(|error| error.to_string())
    }

    #[test]
    fn rows_come_back_as_they_were_written() {
        let mut first = sample_row();
        first.out_of_place_per_iter = PerIter::of_ranks(&[Some(&[1.0, 3.0][..])], 1, 2, 0);
        first.cpu_time = true;
        let baseline = Row {
            layer: "raw",
            collective: "reduce",
            dtype: "bfloat16",
            redop: "avg",
            root: 1,
            in_place: None,
            ..first.clone()
        };
        let mut subject = Row {
            layer: "group-caller",
            graph: 10,
            ..baseline.clone()
        };
        subject.ratio = Some(Ratio::between(&baseline, &subject));
        let text = [&first, &baseline, &subject]
            .iter()
            .map(|row| row.to_json().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
            + "\n\n";
        assert_eq!(parse(&text).unwrap(), [first, baseline, subject]);
    }

    #[test]
    fn a_bad_line_is_named_with_what_was_expected() {
        let good = sample_row().to_json().unwrap();
        let with = |from: &str, to: &str| format!("{good}\n{}\n", good.replacen(from, to, 1));
        for (text, says) in [
            (
                with("all_reduce", "allreduce"),
                "--report rows.jsonl: line 2: expected a collective (all_reduce, broadcast, ",
            ),
            (with("\"core\"", "\"fast\""), "got \"fast\""),
            (with("\"float\"", "\"f32\""), "expected a type (int8, "),
            (
                with("\"sum\"", "\"add\""),
                "expected a reduction (sum, prod, max, min, avg, none), got \"add\"",
            ),
            (
                with("\"size\":8", "\"size\":\"8\""),
                "line 2: invalid type: string \"8\", expected u64",
            ),
            (with("\"size\":8,", ""), "line 2: missing field `size`"),
            (
                format!("{good}\n{{not json"),
                "line 2: not a JSON object (key must be a string at column 2): expected one row per line",
            ),
            (
                "42".to_string(),
                "line 1: invalid type: integer `42`, expected struct Row",
            ),
            (
                "\n \n".to_string(),
                "--report rows.jsonl: no rows: expected one JSON object per line",
            ),
        ] {
            let error = parse(&text).unwrap_err();
            assert!(error.contains(says), "{says:?} not in {error:?}");
        }
        let missing = read_rows(Path::new("/nonexistent/rows.jsonl")).unwrap_err();
        assert_eq!(missing.exit_code(), 2);
        assert!(
            missing
                .to_string()
                .starts_with("--report /nonexistent/rows.jsonl: cannot read it: "),
            "{missing}"
        );
    }
}
