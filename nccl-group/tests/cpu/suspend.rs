//! Suspend and resume without a GPU: a group that has made no
//! communicator has no memory to release, so its suspend only marks it,
//! which is where the state's rules show: what a suspended group
//! refuses (a second suspend, destroy, a split, a capture's stream
//! aside), what it still answers (`mem_stats`, `abort`), and the refusal
//! of a resume of a group that is not suspended.

use nccl_group::{Diagnostics, ErrorKind, GroupError, GroupOptions, Lifecycle, SubGroups};
use nccl_test_support::group::world_of_one;

fn options() -> GroupOptions {
    GroupOptions::default().without_dump_dir()
}

#[track_caller]
fn assert_suspended_refusal(error: GroupError, name: &str, action: &str) {
    assert_eq!(error.kind(), ErrorKind::Suspended, "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("{name:?} is suspended")),
        "{message}"
    );
    assert!(
        message.contains(&format!("call resume on every rank before {action}")),
        "{message}"
    );
}

#[test]
fn a_suspended_group_refuses_what_needs_its_communicators_until_resumed() {
    let group = world_of_one("suspend-rules", options());
    assert_eq!(
        group.mem_stats().expect("no communicator: nothing to read"),
        vec![]
    );

    group
        .suspend()
        .expect("a group without communicators suspends");
    assert_suspended_refusal(
        group.suspend().expect_err("suspending twice"),
        "suspend-rules",
        "suspending it again",
    );
    assert_suspended_refusal(
        group.destroy().expect_err("destroy while suspended"),
        "suspend-rules",
        "destroying it",
    );
    assert_suspended_refusal(
        group.shutdown().expect_err("shutdown while suspended"),
        "suspend-rules",
        "destroying it",
    );
    assert_suspended_refusal(
        group.new_group(&[0]).expect_err("a split while suspended"),
        "suspend-rules",
        "splitting it",
    );
    assert_eq!(group.mem_stats().expect("answers while suspended"), vec![]);

    group.resume().expect("resumes");
    let error = group
        .resume()
        .expect_err("resuming a group that is not suspended");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let message = error.to_string();
    assert!(
        message.contains("expected a suspended group (ProcessGroup::suspend first)"),
        "{message}"
    );
    assert!(
        message.contains("\"suspend-rules\", which is not suspended"),
        "{message}"
    );

    // Live again: a sub-group splits, and the group destroys after it.
    let subgroup = group
        .new_group(&[0])
        .expect("splits once resumed")
        .expect("rank 0 is a member");
    subgroup.destroy().expect("the sub-group destroys");
    group.destroy().expect("destroys once resumed");
    assert!(matches!(group.suspend(), Err(GroupError::Destroyed { .. })));
}

#[test]
fn a_suspended_group_aborts_and_then_refuses_resume_as_aborted() {
    let group = world_of_one("suspend-abort", options());
    group.suspend().expect("suspends");
    group.abort().expect("aborts while suspended");
    assert!(matches!(group.resume(), Err(GroupError::Aborted { .. })));
    assert!(matches!(group.suspend(), Err(GroupError::Aborted { .. })));
}
