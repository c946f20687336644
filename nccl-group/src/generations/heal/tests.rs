//! The heal's steps that need no GPU: groups that never made a
//! communicator, on the in-process store, heal through the agreement
//! into the next generation (every communicator made afresh).

use crate::generations::lifecycle::Lifecycle;
use crate::generations::recovery::Recovery;
use std::sync::Arc;
use std::thread;

use super::*;
use crate::ErrorKind;
use crate::options::{GroupOptions, Liveness};
use nccl_rendezvous::{InProcessStore, Store};

/// Options for groups that write no dumps.
pub(crate) fn options() -> GroupOptions {
    GroupOptions::default()
        .without_dump_dir()
        .with_liveness(Liveness::Off)
}

/// Ranks `0..world` of group `name` on `store`, each a handle of its own.
pub(crate) fn world_on(store: &Arc<dyn Store>, name: &str, world: usize) -> Vec<ProcessGroup> {
    world_with(store, name, world, &options())
}

/// [`world_on`] with `options`.
pub(crate) fn world_with(
    store: &Arc<dyn Store>,
    name: &str,
    world: usize,
    options: &GroupOptions,
) -> Vec<ProcessGroup> {
    (0..world)
        .map(|rank| rank_of(store, name, (rank, world), options))
        .collect()
}

/// Rank `place.0` of `place.1` of group `name` on `store`, with `options`.
pub(crate) fn rank_of(
    store: &Arc<dyn Store>,
    name: &str,
    place: (usize, usize),
    options: &GroupOptions,
) -> ProcessGroup {
    ProcessGroup::builder(name)
        .rank(place.0)
        .world_size(place.1)
        .store(Arc::clone(store))
        .options(options.clone())
        .build()
        .expect("a group that makes no communicator needs no GPU")
}

/// Ranks `0..world` of group `name` on a store of their own.
fn world(name: &str, world: usize) -> Vec<ProcessGroup> {
    world_on(
        &(Arc::new(InProcessStore::new()) as Arc<dyn Store>),
        name,
        world,
    )
}

/// `heal` on each of `groups` at once, from a thread each.
pub(crate) fn heal_all(groups: &[ProcessGroup], options: &HealOptions) -> Vec<Result<Healed>> {
    thread::scope(|scope| {
        let healing: Vec<_> = groups
            .iter()
            .map(|group| scope.spawn(move || group.heal(options)))
            .collect();
        healing
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    })
}

#[test]
fn survivors_heal_into_the_next_generation_and_a_late_rank_is_excluded() {
    let groups = world("heal-lost", 4);
    for group in &groups {
        group
            .abort()
            .expect("an abort of a group without communicators");
    }
    let (survivors, late) = groups.split_at(3);
    // Rank 3 is gone: the survivors say so, and do not wait for it.
    let options = HealOptions::new()
        .with_suspects(vec![3])
        .with_min_survivors(2);
    let healed: Vec<Healed> = heal_all(survivors, &options)
        .into_iter()
        .map(|h| h.expect("healed"))
        .collect();
    for (old, healed) in healed.iter().enumerate() {
        let group = healed.group();
        assert_eq!(group.rank(), old);
        assert_eq!(group.world_size(), 3);
        assert_eq!(group.generation(), 1);
        assert_eq!(group.name(), "heal-lost");
        assert_eq!(healed.lost(), [3]);
        assert_eq!(healed.new_rank_of(2), Some(2));
        assert_eq!(healed.new_rank_of(3), None);
        assert!(
            matches!(healed.path(), HealPath::Recreated { .. }),
            "{:?}",
            healed.path()
        );
        assert!(group.check_live().is_ok());
    }
    // The old generation refuses every call, naming the new one.
    let error = survivors[0].check_live().expect_err("healed");
    assert!(
        matches!(
            error,
            GroupError::Healed {
                generation: 0,
                successor: 1,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.kind(), ErrorKind::Healed);
    assert!(error.to_string().contains("generation 1"), "{error}");
    assert!(survivors[0].destroy().is_err());
    // A second heal of the old generation returns the same group.
    let again = survivors[1]
        .heal(&HealOptions::new())
        .expect("the same heal");
    assert!(Arc::ptr_eq(&again.group().inner, &healed[1].group().inner));
    // The late rank learns it is out, and must leave.
    let error = late[0]
        .heal(&HealOptions::new().with_min_survivors(2))
        .expect_err("decided without it");
    assert_eq!(error.kind(), ErrorKind::Excluded, "{error}");
    assert!(error.to_string().contains("excluded"), "{error}");
    // It may exit on that error: its failure's releases had ended (the
    // details come after them).
    let failure = late[0].failure().expect("failed by its heal");
    assert!(
        failure.details().is_some(),
        "Excluded came back before the failure's releases ended"
    );

    // The healed group heals again: new rank 1 is lost this time.
    let next: Vec<ProcessGroup> = healed.into_iter().map(Healed::into_group).collect();
    for group in &next {
        group.abort().expect("abort");
    }
    let twice = heal_all(
        &[next[0].clone(), next[2].clone()],
        &HealOptions::new().with_suspects(vec![1]),
    );
    let expected_rank = [0, 1];
    for (healed, rank) in twice.into_iter().zip(expected_rank) {
        let healed = healed.expect("healed twice");
        assert_eq!(healed.group().generation(), 2);
        assert_eq!(healed.group().world_size(), 2);
        assert_eq!(healed.group().rank(), rank);
        assert_eq!(healed.lost(), [1]);
    }
}

#[test]
fn concurrent_heals_of_one_generation_are_one_heal() {
    let groups = world("heal-threads", 2);
    // Four threads of each rank heal the live groups at once: nobody was
    // lost, so the generation is made afresh with both ranks.
    let handles: Vec<ProcessGroup> = groups
        .iter()
        .flat_map(|group| std::iter::repeat_n(group.clone(), 4))
        .collect();
    let healed: Vec<Healed> = heal_all(&handles, &HealOptions::new())
        .into_iter()
        .map(|h| h.expect("healed"))
        .collect();
    for (i, healed) in healed.iter().enumerate() {
        let rank = i / 4;
        assert_eq!(healed.group().rank(), rank);
        assert_eq!(healed.group().world_size(), 2);
        let recorded = handles[rank * 4]
            .heal(&HealOptions::new())
            .expect("the recorded heal");
        assert!(Arc::ptr_eq(&healed.group().inner, &recorded.group().inner));
        assert_eq!(
            healed.path(),
            &HealPath::Recreated {
                reason: "no rank was lost (ncclCommShrink needs one to leave out)".into()
            }
        );
    }
    // The live groups were failed by the heal, as a heal.
    let failure = groups[0].failure().expect("failed by the heal");
    assert_eq!(failure.cause, FailureCause::Healing);
}

#[test]
fn a_heal_refuses_bad_options_and_live_graphs_without_changing_anything() {
    let groups = world("heal-refusals", 2);
    let group = &groups[0];
    for (options, argument) in [
        (HealOptions::new().with_min_survivors(0), "min_survivors"),
        (HealOptions::new().with_min_survivors(3), "min_survivors"),
        (HealOptions::new().with_suspects(vec![0]), "suspects"),
        (HealOptions::new().with_suspects(vec![2]), "suspects"),
    ] {
        let error = group.heal(&options).expect_err("refused");
        assert!(
            matches!(&error, GroupError::InvalidArgument { argument: a, .. } if *a == argument),
            "{error}"
        );
    }
    let graph = group.inner.captures.graph_alive();
    let error = group.heal(&HealOptions::new()).expect_err("a graph lives");
    assert!(
        matches!(
            error,
            GroupError::GraphsAlive {
                action: "healed",
                graphs: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("cannot be healed"), "{error}");
    drop(graph);
    // Nothing changed: the group is live.
    assert!(group.check_live().is_ok());
    group.abort().expect("abort");
    groups[1].abort().expect("abort");
    let destroyed = world("heal-destroyed", 1);
    destroyed[0].destroy().expect("destroy");
    let error = destroyed[0]
        .heal(&HealOptions::new())
        .expect_err("destroyed");
    assert!(matches!(error, GroupError::Destroyed { .. }), "{error}");
}

#[test]
fn too_few_survivors_form_no_generation() {
    let groups = world("heal-too-few", 3);
    for group in &groups {
        group.abort().expect("abort");
    }
    let error = groups[0]
        .heal(
            &HealOptions::new()
                .with_suspects(vec![1, 2])
                .with_min_survivors(2)
                .with_timeout(Duration::from_millis(200)),
        )
        .expect_err("one of three, two needed");
    assert_eq!(error.kind(), ErrorKind::TooFewSurvivors, "{error}");
    // Not healed: the group is still the failed generation 0.
    assert!(matches!(
        groups[0].check_live(),
        Err(GroupError::Aborted { .. })
    ));
}

#[test]
fn a_heal_told_its_suspects_needs_no_report_from_them() {
    // Rank 1 never heals nor reports: told, rank 0 does not wait for the
    // failure's exchange, only for the releases to begin, and goes on
    // alone.
    let groups = world("heal-told", 2);
    let healed = groups[0]
        .heal(&HealOptions::new().with_suspects(vec![1]))
        .expect("healed without rank 1");
    assert_eq!(healed.group().world_size(), 1);
    assert_eq!(healed.lost(), [1]);
    let failure = groups[0].failure().expect("failed by the heal");
    assert_eq!(failure.cause, FailureCause::Healing);
    assert!(
        failure.wait_quiet(Duration::ZERO),
        "the heal returned before the releases began"
    );
}
