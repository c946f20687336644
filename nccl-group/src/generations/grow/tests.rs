//! The grow's steps that need no GPU: groups that never made a
//! communicator, on the in-process store, grow with joining threads into
//! the next generation (every communicator made afresh).

use crate::generations::lifecycle::Lifecycle;
use crate::generations::recovery::Recovery;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::*;
use crate::ErrorKind;
use crate::generations::heal::tests::{options, world_on};
use crate::generations::heal::{HealOptions, Healed};
use nccl_rendezvous::InProcessStore;

/// Longer than any wait here that must end: a hang guard.
const PATIENCE: Duration = Duration::from_secs(60);

/// `grow` by `new_ranks` on each of `groups` at once, from a thread each,
/// while `joiners` processes join from threads of their own, one after
/// the other in ticket order; the growers' results and the joiners'.
fn grow_all(
    store: &Arc<dyn Store>,
    groups: &[ProcessGroup],
    new_ranks: usize,
    joiners: usize,
    grow: &GrowOptions,
) -> (Vec<Result<Grown>>, Vec<Result<ProcessGroup>>) {
    let name = groups[0].name().to_string();
    thread::scope(|scope| {
        let growing: Vec<_> = groups
            .iter()
            .map(|group| scope.spawn(move || group.grow(new_ranks, grow)))
            .collect();
        let joining: Vec<_> = (0..joiners)
            .map(|_| {
                let taken = tickets(store, &name);
                let (joining_store, joining) = (Arc::clone(store), name.clone());
                let joiner = scope.spawn(move || {
                    ProcessGroup::builder(&joining)
                        .store(joining_store)
                        .local_rank(0)
                        .options(options())
                        .join_grown(PATIENCE)
                });
                // The next joiner takes its ticket after this one.
                while tickets(store, &name) == taken {
                    thread::yield_now();
                }
                joiner
            })
            .collect();
        (
            growing
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect(),
            joining
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect(),
        )
    })
}

/// How many tickets joining processes of `name` have taken.
fn tickets(store: &Arc<dyn Store>, name: &str) -> i64 {
    store
        .add(&format!("{name}/grow/tickets"), 0)
        .expect("the in-process store counts")
}

#[test]
fn a_healed_group_grows_back_with_a_new_process() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "heal-grow", 3);
    for group in &groups {
        group.abort().expect("abort");
    }
    let options = HealOptions::new().with_suspects(vec![2]);
    let healed: Vec<ProcessGroup> = thread::scope(|scope| {
        let healing: Vec<_> = groups[..2]
            .iter()
            .map(|group| scope.spawn(|| group.heal(&options)))
            .collect();
        healing
            .into_iter()
            .map(|h| h.join().expect("no panic").expect("healed"))
            .map(Healed::into_group)
            .collect()
    });
    assert_eq!(healed[1].world_size(), 2);

    let (grown, joined) = grow_all(&store, &healed, 1, 1, &GrowOptions::new());
    let grown: Vec<Grown> = grown.into_iter().map(|g| g.expect("grown")).collect();
    let joined = joined
        .into_iter()
        .next()
        .expect("one joiner")
        .expect("joined");
    for (rank, grown) in grown.iter().enumerate() {
        let group = grown.group();
        assert_eq!(group.rank(), rank, "the current ranks keep theirs");
        assert_eq!(group.world_size(), 3);
        assert_eq!(group.generation(), 2);
        assert_eq!(grown.new_ranks(), 2..3);
        assert_eq!(
            grown.path(),
            &GrowPath::Recreated {
                reason: NOTHING_TO_GROW.to_string()
            }
        );
    }
    assert_eq!(
        (joined.rank(), joined.world_size(), joined.generation()),
        (2, 3, 2)
    );
    assert_eq!(joined.name(), "heal-grow");
    assert_eq!(joined.local_rank(), Some(0));
    // Every rank of generation 2 meets under one scope, from the root.
    for group in grown.iter().map(Grown::group).chain([&joined]) {
        assert_eq!(
            group.inner.cache.membership().scope.to_string(),
            "heal-grow/0/healed/heal-grow/1/grown/0"
        );
    }

    // The healed generation refuses, naming the grown one.
    let error = healed[0].check_live().expect_err("replaced");
    assert!(
        matches!(
            error,
            GroupError::Healed {
                generation: 1,
                successor: 2,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.kind(), ErrorKind::Healed);
    assert!(
        error
            .to_string()
            .contains("was replaced by generation 2 (ProcessGroup::heal or grow)"),
        "{error}"
    );
    let error = healed[0].heal(&HealOptions::new()).expect_err("grown");
    assert_eq!(error.kind(), ErrorKind::Healed, "{error}");
    let error = groups[0].grow(1, &GrowOptions::new()).expect_err("healed");
    assert_eq!(error.kind(), ErrorKind::Healed, "{error}");
    // The same grow again returns its group; another one refuses.
    let again = healed[1].grow(1, &GrowOptions::new()).expect("recorded");
    assert!(Arc::ptr_eq(&again.group().inner, &grown[1].group().inner));
    let error = healed[1]
        .grow(2, &GrowOptions::new())
        .expect_err("grown by 1");
    assert_eq!(error.kind(), ErrorKind::Healed, "{error}");

    // The three are one group: they heal together, nobody lost.
    let three: Vec<ProcessGroup> = grown
        .into_iter()
        .map(Grown::into_group)
        .chain([joined])
        .collect();
    let healed_again: Vec<Healed> = thread::scope(|scope| {
        let healing: Vec<_> = three
            .iter()
            .map(|group| scope.spawn(|| group.heal(&HealOptions::new())))
            .collect();
        healing
            .into_iter()
            .map(|h| h.join().expect("no panic").expect("healed"))
            .collect()
    });
    for (rank, healed) in healed_again.iter().enumerate() {
        assert_eq!(healed.group().rank(), rank);
        assert_eq!(healed.group().world_size(), 3);
        assert_eq!(healed.group().generation(), 3);
        assert!(healed.lost().is_empty());
    }
}

#[test]
fn two_new_processes_get_their_ranks_in_ticket_order() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "grow-two", 2);
    let options = GrowOptions::new().with_timeout(PATIENCE);
    let (grown, joined) = grow_all(&store, &groups, 2, 2, &options);
    for (rank, grown) in grown.into_iter().enumerate() {
        let grown = grown.expect("grown");
        assert_eq!(grown.group().rank(), rank);
        assert_eq!(grown.group().world_size(), 4);
        assert_eq!(grown.group().generation(), 1);
        assert_eq!(grown.new_ranks(), 2..4);
    }
    let ranks: Vec<usize> = joined
        .into_iter()
        .map(|j| j.expect("joined").rank())
        .collect();
    assert_eq!(ranks, [2, 3], "ticket order");
    assert_eq!(tickets(&store, "grow-two"), 2);
}

#[test]
fn an_offer_numbered_but_never_written_does_not_block_the_next_grows_joiner() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "grow-hole", 2);
    // An earlier grow's rank 0 died after numbering its offer (0) for
    // ticket 1, taken by a process that is gone too.
    for counter in ["tickets", "granted", "offers"] {
        store
            .add(&format!("grow-hole/grow/{counter}"), 1)
            .expect("the in-process store counts");
    }
    let options = GrowOptions::new().with_timeout(PATIENCE);
    let (grown, joined) = grow_all(&store, &groups, 1, 1, &options);
    for grown in grown {
        assert_eq!(grown.expect("grown").group().world_size(), 3);
    }
    let joined = joined.into_iter().next().expect("one joiner");
    assert_eq!(joined.expect("joined past the missing offer").rank(), 2);
}

#[test]
fn a_grow_without_its_new_process_changes_nothing_and_the_late_one_joins_the_next() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "grow-late", 2);
    let short = GrowOptions::new().with_timeout(Duration::from_millis(300));
    let (grown, _) = grow_all(&store, &groups, 1, 0, &short);
    for result in grown {
        let error = result.expect_err("nobody joined");
        assert!(
            matches!(error.kind(), ErrorKind::Timeout | ErrorKind::PeerFailed),
            "{error}"
        );
    }
    for group in &groups {
        assert!(group.check_live().is_ok(), "nothing changed");
        assert_eq!(group.generation(), 0);
    }
    // The late process's ticket was the failed grow's: it learns so, and
    // its next ticket is the next grow's.
    let late = ProcessGroup::builder("grow-late")
        .store(Arc::clone(&store))
        .local_rank(0)
        .options(options())
        .join_grown(PATIENCE)
        .expect_err("the grow of ticket 1 failed");
    assert_eq!(late.kind(), ErrorKind::PeerFailed, "{late}");
    let (grown, joined) = grow_all(&store, &groups, 1, 1, &GrowOptions::new());
    for grown in grown {
        assert_eq!(grown.expect("grown").group().world_size(), 3);
    }
    let joined = joined.into_iter().next().expect("one").expect("joined");
    assert_eq!((joined.rank(), joined.generation()), (2, 1));
    assert_eq!(
        joined.inner.cache.membership().scope.to_string(),
        "grow-late/0/grown/1",
        "the second offer's scope"
    );
}

#[test]
fn a_new_process_without_an_offer_times_out_naming_its_ticket() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    for ticket in [1, 2] {
        let error = ProcessGroup::builder("grow-none")
            .store(Arc::clone(&store))
            .local_rank(0)
            .options(options())
            .join_grown(Duration::from_millis(100))
            .expect_err("no grow");
        assert!(
            matches!(&error, GroupError::NotOffered { ticket: t, offers: 0, .. } if *t == ticket),
            "{error}"
        );
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(error.is_timeout());
        assert!(
            error
                .to_string()
                .contains(&format!("ticket {ticket}: no ProcessGroup::grow offered")),
            "{error}"
        );
    }
}

#[test]
fn a_grow_refuses_bad_counts_failed_groups_and_live_graphs_without_changing_anything() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "grow-refusals", 1);
    let group = &groups[0];
    for new_ranks in [0, usize::MAX] {
        let error = group
            .grow(new_ranks, &GrowOptions::new())
            .expect_err("refused");
        assert!(
            matches!(
                &error,
                GroupError::InvalidArgument {
                    argument: "new_ranks",
                    ..
                }
            ),
            "{error}"
        );
    }
    let graph = group.inner.captures.graph_alive();
    let error = group
        .grow(1, &GrowOptions::new())
        .expect_err("a graph lives");
    assert!(
        matches!(
            error,
            GroupError::GraphsAlive {
                action: "grown",
                graphs: 1,
                ..
            }
        ),
        "{error}"
    );
    drop(graph);
    assert!(group.check_live().is_ok(), "nothing changed");

    group.inner.fail(
        FailureCause::Creation {
            error: "a test's failure".to_string(),
        },
        None,
        crate::engine::failing::Finish::Here,
    );
    let error = group.grow(1, &GrowOptions::new()).expect_err("failed");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let message = error.to_string();
    assert!(message.contains("heal a failed one first"), "{message}");
    assert!(message.contains("which failed: "), "{message}");
    assert!(message.contains("a test's failure"), "{message}");

    let destroyed = world_on(&store, "grow-destroyed", 1);
    destroyed[0].destroy().expect("destroy");
    let error = destroyed[0]
        .grow(1, &GrowOptions::new())
        .expect_err("destroyed");
    assert!(matches!(error, GroupError::Destroyed { .. }), "{error}");
}

#[test]
fn the_ranks_plan_alike_from_their_proposals() {
    let of = |proposals: &[&str]| {
        recreate_reason(
            &proposals
                .iter()
                .map(|p| p.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(of(&["grow:a", "grow:a"]), None);
    assert_eq!(
        of(&["grow:a", "off"]).as_deref(),
        Some("GrowOptions::with_grow(false)")
    );
    assert_eq!(of(&["none", "grow:a"]).as_deref(), Some(NOTHING_TO_GROW));
    let differ = of(&["grow:a", "grow:b"]).expect("no grow");
    assert!(differ.contains("differ"), "{differ}");
    assert_eq!(proposal(true, Some("g/0/comm/x1/0")), "grow:g/0/comm/x1/0");
    assert_eq!(proposal(false, Some("g/0/comm/x1/0")), "off");
    assert_eq!(proposal(true, None), "none");
}
