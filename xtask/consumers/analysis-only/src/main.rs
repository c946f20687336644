//! `consumer-analysis-only <dump folder>`: for each incident folder, the
//! ranks that lagged by their own dumps and the first mismatch, read
//! through nccl-group's dump types with no CUDA in the build.

use std::path::Path;
use std::process::ExitCode;

use nccl_group::FlightDump;
use nccl_group::analysis::analyze_tree;

/// One line per rank: how far it got and whom it found lagging.
fn describe(dump: &FlightDump) -> String {
    format!(
        "rank {} (pid {}): last enqueued {:?}, last completed {:?}, lagging {:?}, {} peers answered",
        dump.rank,
        dump.pid,
        dump.last_enqueued,
        dump.last_completed,
        dump.lagging,
        dump.peers.len()
    )
}

fn main() -> ExitCode {
    let Some(folder) = std::env::args().nth(1) else {
        eprintln!("usage: consumer-analysis-only <dump folder>");
        return ExitCode::from(2);
    };
    let analyses = match analyze_tree(Path::new(&folder)) {
        Ok(analyses) => analyses,
        Err(error) => {
            eprintln!("{folder}: {error}");
            return ExitCode::from(2);
        }
    };
    for analysis in &analyses {
        for report in &analysis.reports {
            println!("{} generation {}", report.group, report.generation);
            for dump in report.dumps.values() {
                println!("  {}", describe(dump));
            }
            if let Some(divergence) = &report.comparison.divergence {
                println!("  first mismatch: {divergence}");
            }
        }
    }
    ExitCode::SUCCESS
}
