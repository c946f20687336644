//! `ProcessGroup::builder`: each step left out is refused at `build` (or
//! `join_grown`) with an `InvalidArgument` naming it, and a configuration
//! step gives the group its place and store.

use std::sync::Arc;
use std::time::Duration;

use nccl_group::{
    GroupBuilder, GroupError, GroupOptions, InProcessStore, ProcessGroup, RendezvousConfig,
    StoreSpec,
};

/// The argument an `InvalidArgument` names and what it asks to call.
fn refused(result: nccl_group::Result<ProcessGroup>) -> (&'static str, String) {
    match result {
        Err(GroupError::InvalidArgument {
            argument, expected, ..
        }) => (argument, expected),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// A builder of a group of one without communicators.
fn builder(name: &str) -> GroupBuilder {
    ProcessGroup::builder(name).options(GroupOptions::default().without_dump_dir())
}

#[test]
fn a_builder_without_a_store_is_refused_naming_store() {
    let (argument, expected) = refused(builder("no-store").rank(0).world_size(1).build());
    assert_eq!(argument, "store");
    assert!(expected.contains(".store(Arc<dyn Store>)"), "{expected}");
}

#[test]
fn a_builder_without_a_rank_is_refused_naming_rank() {
    let store = Arc::new(InProcessStore::new());
    let (argument, expected) = refused(builder("no-rank").world_size(1).store(store).build());
    assert_eq!(argument, "rank");
    assert!(expected.contains(".rank(r)"), "{expected}");
}

#[test]
fn a_builder_without_a_world_size_is_refused_naming_world_size() {
    let store = Arc::new(InProcessStore::new());
    let (argument, expected) = refused(builder("no-world").rank(0).store(store).build());
    assert_eq!(argument, "world size");
    assert!(expected.contains(".world_size(n)"), "{expected}");
}

#[test]
fn joining_a_grown_group_without_a_store_is_refused_naming_store() {
    let (argument, _) = refused(builder("no-store").join_grown(Duration::ZERO));
    assert_eq!(argument, "store");
}

#[test]
fn a_configuration_gives_the_place_the_local_rank_and_the_store() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = RendezvousConfig::new(
        0,
        1,
        StoreSpec::File {
            dir: dir.path().to_path_buf(),
        },
    )
    .expect("a configuration of one process");
    let group = builder("configured")
        .config(&config)
        .build()
        .expect("a group of one process needs no GPU to join");
    assert_eq!((group.rank(), group.world_size()), (0, 1));
    assert_eq!(group.local_rank(), Some(config.local_rank));
}

#[test]
fn a_given_local_rank_is_the_groups() {
    let group = builder("local")
        .rank(0)
        .world_size(1)
        .store(Arc::new(InProcessStore::new()))
        .local_rank(3)
        .build()
        .expect("a group of one process needs no GPU to join");
    assert_eq!(group.local_rank(), Some(3));
}
