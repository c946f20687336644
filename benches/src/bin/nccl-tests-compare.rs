//! `nccl-tests-compare`: nccl-tests' table and nccl-perf's of the same run,
//! side by side: per collective and size, each time, their ratio
//! (nccl-perf / nccl-tests) and whether it is within the target, out of
//! place and in place. Exit status: 0 when every half judged met the
//! target, 1 when one did not (or lacked a time), 2 for unreadable input.
//!
//! ```sh
//! nccl-tests-compare --nccl-tests all_reduce_perf.txt --nccl-perf nccl-perf-all_reduce.txt
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use benches::tables::{Judgement, Table, compare, parse_tables, render};
use clap::Parser;

/// The flags.
#[derive(Debug, Parser)]
#[command(
    name = "nccl-tests-compare",
    version,
    about = "Sets nccl-tests' table and nccl-perf's of the same run side by side, with the \
             ratio of each time (nccl-perf / nccl-tests) and whether it is within a target"
)]
struct Args {
    /// The output of an nccl-tests binary (all_reduce_perf, ...): every table in it.
    #[arg(long, value_name = "FILE")]
    nccl_tests: PathBuf,

    /// nccl-perf's output of the same flags: its tables pair with nccl-tests' by
    /// collective (or in order, where a table names none).
    #[arg(long, value_name = "FILE")]
    nccl_perf: PathBuf,

    /// Compare this collective only (all_reduce, ...).
    #[arg(long)]
    collective: Option<String>,

    /// The target: each ratio within this many percent of 1.
    #[arg(long, value_name = "PERCENT", default_value_t = 3.0)]
    target_percent: f64,

    /// Judge rows from this size on (suffixes K, M, G); smaller rows print '-'.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    from: u64,
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    benches::parse_size(text).map_err(|error| error.to_string())
}

/// Every table of `path`.
fn tables(path: &Path) -> Result<Vec<Table>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let tables = parse_tables(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    if tables.is_empty() {
        return Err(format!("{} holds no nccl-tests table", path.display()));
    }
    Ok(tables)
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

/// Each table of `reference` (of `only`, if given) with its table in
/// `subject`: the one naming the same collective, else the one at the same
/// place.
fn pairs<'a>(
    reference: &'a [Table],
    subject: &'a [Table],
    only: Option<&str>,
) -> Result<Vec<(String, &'a Table, &'a Table)>, String> {
    let mut pairs = Vec::new();
    for (index, table) in reference.iter().enumerate() {
        let named = |other: &Table, name: &str| {
            other
                .collective
                .as_deref()
                .is_some_and(|other| same_collective(other, name))
        };
        let other = match &table.collective {
            Some(collective) => subject
                .iter()
                .find(|other| named(other, collective))
                .or_else(|| {
                    subject
                        .get(index)
                        .filter(|other| other.collective.is_none())
                }),
            None => subject.get(index),
        };
        let name = table
            .collective
            .clone()
            .or_else(|| other.and_then(|other| other.collective.clone()))
            .unwrap_or_else(|| format!("table {}", index + 1));
        if only.is_some_and(|only| !same_collective(&name, only)) {
            continue;
        }
        let other = other.ok_or_else(|| format!("nccl-perf's output has no table for {name}"))?;
        pairs.push((name, table, other));
    }
    if pairs.is_empty() {
        return Err(match only {
            Some(only) => format!("nccl-tests' output has no {only} table"),
            None => "nothing to compare".to_string(),
        });
    }
    Ok(pairs)
}

fn run(args: &Args) -> Result<bool, String> {
    if !(args.target_percent.is_finite() && args.target_percent >= 0.0) {
        return Err(format!(
            "--target-percent must be a percentage of 0 or more, got {}",
            args.target_percent
        ));
    }
    let reference = tables(&args.nccl_tests)?;
    let subject = tables(&args.nccl_perf)?;
    let mut all_met = true;
    for (name, table, other) in pairs(&reference, &subject, args.collective.as_deref())? {
        let judgement = Judgement {
            collective: name,
            target: args.target_percent / 100.0,
            from_bytes: args.from,
        };
        let (text, verdict) = render(&compare(table, other), &judgement);
        print!("{text}");
        all_met &= verdict.all_met();
    }
    Ok(all_met)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("nccl-tests-compare: error: {error}");
            ExitCode::from(2)
        }
    }
}
