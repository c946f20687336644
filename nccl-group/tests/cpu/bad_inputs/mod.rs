//! One table of bad inputs across the whole CPU-reachable API: every
//! argument check of every operation (`nccl_tensor::checks`), the core
//! types (`Config`, `UniqueId`, `scalar_bytes`, the library loader), the
//! group's keys, membership and stores, every launch environment
//! variable `RendezvousConfig` reads, the survivors' agreement, the
//! heal, the grow, the elastic trainer's vote and pending joins, the
//! sub-groups and suspend and resume. Each
//! row runs one bad call and checks that the error names both what was
//! expected and what was given.
//!
//! The table is also written to `docs/bad-inputs.md`: run with
//! `NCCL_UPDATE_BAD_INPUTS=1` to regenerate it; otherwise the test fails
//! when the committed file differs from what it would write. The rows
//! are in `tensor_rows`, `batch_rows`, `core_rows`, `group_rows`,
//! `options_rows`, `store_rows`, `agree_rows`, `heal_rows`, `grow_rows`,
//! `elastic_rows`, `subgroup_rows` and `suspend_rows`.

mod agree_rows;
mod batch_rows;
mod core_rows;
mod elastic_rows;
mod group_rows;
mod grow_rows;
mod heal_rows;
mod options_rows;
mod store_rows;
mod subgroup_rows;
mod suspend_rows;
mod tensor_rows;

use std::fmt::Display;
use std::sync::Arc;

use nccl_core::nccl_sys;
use nccl_core::{DataType, ReduceOp, Reduction};
use nccl_group::{GroupOptions, InProcessStore, Lifecycle, ProcessGroup};

const F32: DataType = DataType::Float32;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::Bfloat16;
const E4M3: DataType = DataType::Float8E4M3;
const SUM: Reduction<'static> = Reduction::Builtin(ReduceOp::Sum);
const AVG: Reduction<'static> = Reduction::Builtin(ReduceOp::Avg);
const MAX: Reduction<'static> = Reduction::Builtin(ReduceOp::Max);

/// Where the Markdown table lives, relative to the workspace root.
const DOC: &str = "docs/bad-inputs.md";
/// Set to 1 to rewrite [`DOC`] instead of checking it.
const UPDATE_VAR: &str = "NCCL_UPDATE_BAD_INPUTS";

/// One bad input: where, which call, what is wrong with it, the substrings
/// the message must contain (what was expected and what was given), and
/// the call itself, returning the error's text.
#[derive(Clone, Copy)]
struct Row {
    area: &'static str,
    call: &'static str,
    input: &'static str,
    expect: &'static [&'static str],
    run: fn() -> String,
}

/// One bad input of a call: what is wrong with it, the substrings the
/// message must contain, and the call itself, returning the error's text.
type Case = (&'static str, &'static [&'static str], fn() -> String);

/// The rows of `call` in `area`, one per case, in the order given.
fn calls(area: &'static str, call: &'static str, cases: &[Case]) -> Vec<Row> {
    cases
        .iter()
        .map(|&(input, expect, run)| Row {
            area,
            call,
            input,
            expect,
            run,
        })
        .collect()
}

/// The error of building rank 0 of a world of 1 on a fresh in-process
/// store with `options`.
fn build_with(options: GroupOptions) -> String {
    err(ProcessGroup::builder("bad-inputs")
        .rank(0)
        .world_size(1)
        .store(Arc::new(InProcessStore::new()))
        .options(options)
        .build())
}

/// The error of `call` on `group` once it is destroyed.
fn once_destroyed<T, E: Display>(
    group: ProcessGroup,
    call: impl FnOnce(&ProcessGroup) -> Result<T, E>,
) -> String {
    if let Err(error) = group.destroy() {
        return format!("<destroy failed: {error}>");
    }
    err(call(&group))
}

/// The error's text, or a marker that fails every expectation.
fn err<T, E: Display>(result: Result<T, E>) -> String {
    match result {
        Ok(_) => "<accepted: no error was returned>".to_string(),
        Err(error) => error.to_string(),
    }
}
/// Every row. Keep rows of one area together: the Markdown follows this order.
fn rows() -> Vec<Row> {
    [
        tensor_rows::rows(),
        batch_rows::rows(),
        core_rows::rows(),
        options_rows::rows(),
        group_rows::rows(),
        store_rows::rows(),
        agree_rows::rows(),
        heal_rows::rows(),
        grow_rows::rows(),
        elastic_rows::rows(),
        subgroup_rows::rows(),
        suspend_rows::rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A table cell holding `text` as inline code, with `|` escaped and a
/// longer fence when the text itself holds backticks.
fn code_cell(text: &str) -> String {
    let text = text.replace('\n', " ").replace('|', "\\|");
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// A plain table cell, with `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The Markdown document for `rows` and their messages.
fn markdown(rows: &[Row], messages: &[String]) -> String {
    let mut areas: Vec<(&str, usize)> = Vec::new();
    for row in rows {
        match areas.last_mut() {
            Some((area, count)) if *area == row.area => *count += 1,
            _ => areas.push((row.area, 1)),
        }
    }
    let summary = areas
        .iter()
        .map(|(area, count)| format!("{area} {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = String::new();
    out.push_str("# Bad inputs and their errors\n\n");
    out.push_str(
        "Generated by `nccl-group/tests/cpu/bad_inputs/`; do not edit by hand. Regenerate with\n\
         `NCCL_UPDATE_BAD_INPUTS=1 cargo test -p nccl-group --test cpu bad_inputs`.\n\n",
    );
    out.push_str(&format!(
        "Every row is one bad call, run on the CPU, and the exact message it returns; \
         the test checks that each message names what was expected and what was given.\n\
         {} rows: {summary}.\n\n",
        rows.len()
    ));
    out.push_str("| Area | Call | Bad input | Error |\n|---|---|---|---|\n");
    for (row, message) in rows.iter().zip(messages) {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            cell(row.area),
            row.call.replace('|', "\\|"),
            cell(row.input),
            code_cell(message)
        ));
    }
    out
}

#[test]
fn every_bad_input_gets_an_error_naming_expected_and_given() {
    let rows = rows();
    let mut failures = Vec::new();
    let mut messages = Vec::with_capacity(rows.len());
    for row in &rows {
        let message = (row.run)();
        if row.expect.len() < 2 {
            failures.push(format!(
                "{} / {} / {}: a row must expect at least two substrings (what was expected and what was given)",
                row.area, row.call, row.input
            ));
        }
        let missing: Vec<&str> = row
            .expect
            .iter()
            .copied()
            .filter(|want| !message.contains(want))
            .collect();
        if !missing.is_empty() {
            failures.push(format!(
                "{} / {} / {}:\n    message: {message}\n    missing: {missing:?}",
                row.area, row.call, row.input
            ));
        }
        messages.push(message);
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad-input rows are wrong:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DOC);
    let expected = markdown(&rows, &messages);
    if std::env::var_os(UPDATE_VAR).is_some_and(|v| v == "1") {
        std::fs::write(&path, &expected).unwrap_or_else(|e| panic!("writing {DOC}: {e}"));
        return;
    }
    if std::env::var_os(nccl_sys::NCCL_LIBRARY_ENV).is_some_and(|v| !v.is_empty()) {
        // The loader's message then names the real NCCL_LIBRARY value, so the
        // committed table (written without it) cannot match; rows are still
        // checked above.
        eprintln!("NCCL_LIBRARY is set: not comparing {DOC}");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{DOC} is out of date with the bad-input table (or missing); regenerate it with\n    \
         NCCL_UPDATE_BAD_INPUTS=1 cargo test -p nccl-group --test cpu bad_inputs\nand commit the result. \
         First differing line: {:?}",
        committed
            .lines()
            .zip(expected.lines())
            .find(|(a, b)| a != b)
            .map_or_else(
                || format!(
                    "(line counts differ: {} vs {})",
                    committed.lines().count(),
                    expected.lines().count()
                ),
                |(a, b)| format!("committed {a:?}, expected {b:?}")
            )
    );
}
