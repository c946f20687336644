//! The bad-input rows of the survivors' agreement
//! (`nccl_rendezvous::meet::agree`): places, suspects, minimums and
//! generations it refuses before touching the store, then arguments that
//! differ from a committed decision's.

use std::time::Duration;

use nccl_group::InProcessStore;
use nccl_group::store::meet::agree::{AgreeOptions, agree_survivors};

use super::{Row, calls, err};

/// `agree_survivors` on a fresh in-process store, with a timeout no row
/// waits out.
fn agree(generation: u64, rank: usize, world: usize, suspects: &[usize], min: usize) -> String {
    let options = AgreeOptions::new(Duration::from_secs(60)).with_min_survivors(min);
    err(agree_survivors(
        &InProcessStore::new(),
        generation,
        rank,
        world,
        suspects,
        &options,
    ))
}

/// `agree_survivors` as `rank` of `world` with at least `min`, after
/// rank 0 of a world of two, suspecting rank 1, agreed with a minimum of
/// 1 (the committed decision).
fn against_committed(rank: usize, world: usize, min: usize) -> String {
    let store = InProcessStore::new();
    let options = AgreeOptions::new(Duration::from_secs(60));
    if let Err(error) = agree_survivors(&store, 0, 0, 2, &[1], &options) {
        return format!("<the committed agreement failed: {error}>");
    }
    err(agree_survivors(
        &store,
        0,
        rank,
        world,
        &[],
        &options.with_min_survivors(min),
    ))
}

pub(super) fn rows() -> Vec<Row> {
    calls(
        "agree",
        "agree_survivors",
        &[
            (
                "rank 4 of world size 4",
                &["agreement place rank 4 of 4", "expected a rank below"],
                || agree(0, 4, 4, &[], 1),
            ),
            (
                "world size 0",
                &["agreement place rank 0 of 0", "a world size of 1 to"],
                || agree(0, 0, 0, &[], 1),
            ),
            (
                "suspect 4 in a world of 4",
                &["suspects [4] (rank 4)", "ranks below the world size 4"],
                || agree(0, 0, 4, &[4], 1),
            ),
            (
                "suspects [1, 1]",
                &["suspects [1, 1] (rank 1)", "expected each rank once"],
                || agree(0, 0, 4, &[1, 1], 1),
            ),
            (
                "rank 2 suspecting itself",
                &["suspects [2] (rank 2)", "ranks other than this rank (2)"],
                || agree(0, 2, 4, &[2], 1),
            ),
            (
                "min_survivors 0",
                &["min_survivors 0", "expected 1 to the world size 4"],
                || agree(0, 0, 4, &[], 0),
            ),
            (
                "min_survivors 5 of world size 4",
                &["min_survivors 5", "expected 1 to the world size 4"],
                || agree(0, 0, 4, &[], 5),
            ),
            (
                "generation u64::MAX",
                &[
                    "generation 18446744073709551615",
                    "generation + 1 must exist",
                ],
                || agree(u64::MAX, 0, 4, &[], 1),
            ),
            (
                "world size 3, the committed decision's 2",
                &[
                    "invalid world size 3",
                    "expected 2, the world size of the committed agreement",
                ],
                || against_committed(0, 3, 1),
            ),
            (
                "min_survivors 2, the committed decision's 1",
                &[
                    "invalid min_survivors 2",
                    "expected 1, the minimum of the committed agreement",
                ],
                || against_committed(1, 2, 2),
            ),
        ],
    )
}
