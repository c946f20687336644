//! What the test binaries that launch their own ranks with nccl-launch
//! share (included with `#[path]`: each is a crate of its own).

use nccl_launch::Outcome;
use nccl_test_support::processes::{RankOutput, rank_outputs};

/// Every launched rank's ending and the tails of its output, for a
/// failure message.
pub fn outputs(outcome: &Outcome) -> String {
    rank_outputs(outcome.ranks.iter().map(|r| RankOutput {
        rank: r.rank,
        ending: format!("{:?}", r.ending),
        stdout: &r.stdout,
        stderr: &r.stderr,
    }))
}

/// `Ok(value)` when no problem was found, else an error that lists
/// `problems` and every rank's output.
pub fn verdict<T>(problems: Vec<String>, value: T, outcome: &Outcome) -> Result<T, String> {
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(format!("{}{}", problems.join("; "), outputs(outcome)))
    }
}
