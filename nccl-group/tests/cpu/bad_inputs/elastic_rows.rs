//! The bad-input rows of what an elastic trainer calls around heal and
//! grow: a commit vote (`Recovery::agree`) from a rank a heal excluded,
//! from a generation a heal replaced, from an aborted or a destroyed
//! group, and the pending joins of a sub-group. Groups that never made a
//! communicator need no GPU.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use nccl_group::SubGroups;
use std::sync::Arc;

use nccl_group::store::Store;
use nccl_group::{GroupOptions, HealOptions, InProcessStore, Liveness, ProcessGroup};

use nccl_test_support::group::ranks_on;

use super::{Row, calls, err, once_destroyed};

/// Ranks `0..world` of a group on a fresh in-process store, without the
/// liveness beat: its pushed alarm would race the late rank's own heal
/// for the cause its message names.
fn world(world: usize) -> Vec<ProcessGroup> {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    ranks_on(
        &store,
        "elastic-rows",
        world,
        &GroupOptions::default()
            .without_dump_dir()
            .with_liveness(Liveness::Off),
    )
}

/// Rank 0 of a world of 2 healed without rank 1, then rank 1, which
/// came after the decision: `(rank 0's old generation, rank 1)`.
fn healed_without_rank_1() -> Result<(ProcessGroup, ProcessGroup), String> {
    let mut groups = world(2);
    let late = groups.pop().expect("rank 1");
    let survivor = groups.pop().expect("rank 0");
    survivor
        .heal(&HealOptions::new().with_suspects(vec![1]))
        .map_err(|error| format!("<the heal failed: {error}>"))?;
    match late.heal(&HealOptions::new().with_suspects(vec![0])) {
        Err(_excluded) => Ok((survivor, late)),
        Ok(_) => Err("<rank 1 was not excluded>".to_string()),
    }
}

/// The vote of the rank the heal excluded, or of the replaced generation.
fn vote_after_heal(excluded: bool) -> String {
    match healed_without_rank_1() {
        Ok((old, _)) if !excluded => err(old.agree(true)),
        Ok((_, late)) => err(late.agree(true)),
        Err(marker) => marker,
    }
}

pub(super) fn rows() -> Vec<Row> {
    [
        calls(
            "elastic",
            "Recovery::agree",
            &[
                (
                    "a rank a heal excluded",
                    &[
                        "invalid process group to vote in",
                        "a rank the heal excluded must leave",
                        "\"elastic-rows\" generation 0, which failed",
                    ],
                    || vote_after_heal(true),
                ),
                (
                    "a generation a heal replaced",
                    &["generation 0", "generation 1"],
                    || vote_after_heal(false),
                ),
                (
                    "an aborted group",
                    &[
                        "invalid process group to vote in",
                        "heal a failed one first",
                        "\"elastic-rows\" generation 0, which aborted",
                    ],
                    || {
                        let group = world(1).remove(0);
                        match group.abort() {
                            Ok(()) => err(group.agree(true)),
                            Err(error) => format!("<abort failed: {error}>"),
                        }
                    },
                ),
                (
                    "a destroyed group",
                    &["process group \"elastic-rows\"", "was destroyed"],
                    || once_destroyed(world(1).remove(0), |group| group.agree(true)),
                ),
            ],
        ),
        calls(
            "elastic",
            "Recovery::pending_joins",
            &[(
                "a sub-group",
                &["a root group", "a sub-group of \"elastic-rows\""],
                || {
                    let parent = world(1).remove(0);
                    match parent.new_group(&[0]) {
                        Ok(Some(sub)) => err(sub.pending_joins()),
                        Ok(None) => "<rank 0 is not in its sub-group>".to_string(),
                        Err(error) => format!("<new_group failed: {error}>"),
                    }
                },
            )],
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}
