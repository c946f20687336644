//! `nccl-frtrace <folder>...`: reads the flight-recorder dumps of a
//! folder (one incident's, `<dump dir>/<group>-g<generation>-<label>/`, or
//! a dump folder of several, whose incidents it reads one by one) and
//! prints what PyTorch's `torchfrtrace` prints for its own: per rank how
//! far it got and its oldest unfinished operation, the ranks that left no
//! readable dump, the collectives every rank issued alike, and the first
//! mismatch (which ranks issued what as which collective). Needs no
//! Python, CUDA or NCCL.
//!
//! Exit status: 0 when every rank left a dump and all agree, 1 when a
//! dump is missing or unreadable or the ranks disagree, 2 when a folder
//! cannot be read.
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;

use nccl_group::analysis::analyze_tree;

const USAGE: &str = "usage: nccl-frtrace <folder>...\n\
    Reads the flight-recorder dumps (rank<r>.json) in each folder, or in each incident \
    folder under it, and prints the ranks' progress, missing ranks, matched collectives \
    and the first mismatch.";

fn main() -> ExitCode {
    let folders: Vec<String> = std::env::args().skip(1).collect();
    if folders.is_empty() || folders.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return if folders.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let mut clean = true;
    for folder in &folders {
        match analyze_tree(Path::new(folder)) {
            Ok(analyses) if analyses.is_empty() => {
                println!("{folder}: no flight-recorder dump (*.json) in it or its subfolders");
                clean = false;
            }
            Ok(analyses) => {
                for analysis in analyses {
                    print!("{analysis}");
                    clean &= analysis.is_clean();
                }
            }
            Err(error) => {
                eprintln!("nccl-frtrace: {folder}: {error}");
                return ExitCode::from(2);
            }
        }
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
