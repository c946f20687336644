//! `nccl-frtrace [--json] <folder>...`: reads the flight-recorder dumps of
//! a folder (one incident's, `<dump dir>/<group>-g<generation>-<label>/`,
//! or a dump folder of several, whose incidents it reads one by one) and
//! prints what PyTorch's `torchfrtrace` prints for its own: per rank how
//! far it got and its oldest unfinished operation, the ranks that left no
//! readable dump, the collectives every rank issued alike, and the first
//! mismatch (which ranks issued what as which collective). With `--json`
//! it prints the same analysis as one JSON array, one object per incident
//! folder (`nccl_group::analysis::FolderAnalysis`, the dumps whole).
//! Needs no Python, CUDA or NCCL.
//!
//! Exit status: 0 when every rank left a dump and all agree, 1 when a
//! rank left no dump or the ranks disagree, 2 when a folder cannot be
//! read, holds no dump, or holds a dump file that is not a readable dump
//! (cut short, not JSON, a field missing): the message names the file and
//! what is wrong with it.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nccl_group::analysis::{FolderAnalysis, analyze_tree};

/// Reads the flight-recorder dumps (rank<r>.json) in each folder, or in
/// each incident folder under it, and prints the ranks' progress, missing
/// ranks, matched collectives and the first mismatch.
#[derive(Parser)]
#[command(name = "nccl-frtrace", version)]
struct Args {
    /// Print the analysis as JSON (one array, an object per incident
    /// folder) instead of text.
    #[arg(long)]
    json: bool,
    /// The folders to read: an incident's folder, or a dump folder whose
    /// subfolders are incidents.
    #[arg(required = true, value_name = "FOLDER")]
    folders: Vec<PathBuf>,
}

/// Why the folders could not be analysed, with exit status 2.
fn unreadable(folder: &Path, what: impl std::fmt::Display) -> String {
    format!("nccl-frtrace: {}: {what}", folder.display())
}

/// Every folder's analyses, or the first folder that cannot be read or
/// holds no dump.
fn read_all(folders: &[PathBuf]) -> Result<Vec<FolderAnalysis>, String> {
    let mut all = Vec::new();
    for folder in folders {
        let analyses = analyze_tree(folder).map_err(|error| unreadable(folder, error))?;
        if analyses.is_empty() {
            return Err(unreadable(
                folder,
                "no flight-recorder dump (*.json) in it or its subfolders",
            ));
        }
        all.extend(analyses);
    }
    Ok(all)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let analyses = match read_all(&args.folders) {
        Ok(analyses) => analyses,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&analyses) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("nccl-frtrace: the analysis did not serialise as JSON: {error}");
                return ExitCode::from(2);
            }
        }
    } else {
        for analysis in &analyses {
            print!("{analysis}");
        }
    }
    let corrupt: Vec<String> = analyses
        .iter()
        .flat_map(|analysis| &analysis.unreadable)
        .map(|file| {
            format!(
                "nccl-frtrace: {} is not a readable dump: {}",
                file.path.display(),
                file.error
            )
        })
        .collect();
    if !corrupt.is_empty() {
        eprintln!("{}", corrupt.join("\n"));
        ExitCode::from(2)
    } else if analyses.iter().all(FolderAnalysis::is_clean) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
