//! The rule's cases with live ranks: all alive, one lost (suspected or
//! not), one late, one suspected yet on time, too few, and two heals.

use super::*;

pub(super) fn every_rank_alive(backend: Backend) {
    let all = ranks(&backend, &[0, 1, 2, 3], &[], &AgreeOptions::new(LONG));
    let agreements = agreements(agree_all(&all, 7, 4));
    let agreement = the_same(&agreements);
    assert_eq!(agreement.generation(), 8);
    assert_eq!(agreement.survivors(), [0, 1, 2, 3]);
    assert_eq!(agreement.excluded().count(), 0);
    for (rank, agreement) in agreements.iter().enumerate() {
        assert_eq!((agreement.previous_rank(), agreement.rank()), (rank, rank));
        assert_eq!(agreement.world_size(), 4);
        assert_eq!(agreement.previous_world_size(), 4);
    }
}

pub(super) fn a_crashed_rank_that_the_others_suspect(backend: Backend) {
    // Rank 2 never comes; the others say it is lost, so nobody waits
    // for it (a LONG timeout that nothing waits out).
    let alive = ranks(&backend, &[0, 1, 3], &[2], &AgreeOptions::new(LONG));
    let agreements = agreements(agree_all(&alive, 0, 4));
    let agreement = the_same(&agreements);
    assert_eq!(agreement.generation(), 1);
    assert_eq!(agreement.survivors(), [0, 1, 3]);
    assert_eq!(
        agreement.excluded().collect::<Vec<_>>(),
        [exclusion(2, suspected(&[0, 1, 3]))]
    );
    let new_ranks: Vec<usize> = agreements.iter().map(Agreement::rank).collect();
    assert_eq!(new_ranks, [0, 1, 2]);
    assert_eq!(agreement.new_rank_of(3), Some(2));
    assert_eq!(agreement.new_rank_of(2), None);
    assert_eq!(agreement.old_rank_of(2), Some(3));
    assert_eq!(agreement.old_rank_of(3), None);
    assert_eq!(agreement.world_size(), 3);
}

pub(super) fn a_crashed_rank_that_nobody_suspects(backend: Backend) {
    // Rank 1 never comes and nobody names it: the decision comes at the
    // deadline and leaves it out as not arrived.
    let alive = ranks(&backend, &[0, 2], &[], &AgreeOptions::new(SHORT));
    let agreements = agreements(agree_all(&alive, 3, 3));
    let agreement = the_same(&agreements);
    assert_eq!(agreement.generation(), 4);
    assert_eq!(agreement.survivors(), [0, 2]);
    assert_eq!(
        agreement.excluded().collect::<Vec<_>>(),
        [exclusion(1, ExclusionReason::NotArrived)]
    );
}

pub(super) fn a_late_rank_is_excluded_and_disturbs_nothing(backend: Backend) {
    let options = AgreeOptions::new(LONG);
    let alive = ranks(&backend, &[0, 1, 2], &[3], &options);
    let before = agreements(agree_all(&alive, 5, 4));
    assert_eq!(the_same(&before).survivors(), [0, 1, 2]);
    let keys = Keys::new(5);
    let observer = backend.client();
    let snapshot = |store: &dyn Store| {
        (
            store.try_get(&keys.count).unwrap(),
            store.try_get(&keys.decision).unwrap(),
            store.try_get(&keys.entry(4)).unwrap(),
        )
    };
    let stored = snapshot(&*observer);
    // Rank 3 was stopped; continued, it comes (twice) and is told it is out.
    let late = Rank::new(&backend, 3, &[], &options);
    for _ in 0..2 {
        let error = late.agree(5, 4).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Excluded, "{error}");
        match &error {
            StoreError::Excluded {
                rank: 3,
                generation: 6,
                reason,
                survivors,
            } => {
                assert_eq!(reason, &suspected(&[0, 1, 2]));
                assert_eq!(survivors, &[0, 1, 2]);
            }
            other => panic!("expected Excluded, got {other:?}"),
        }
        assert!(
            error.to_string().starts_with(
                "rank 3 was excluded from generation 6: it had not arrived when the survivors \
                 decided, and ranks 0, 1, 2 had declared it lost; ranks 0, 1, 2 went on as \
                 generation 6 without it"
            ),
            "{error}"
        );
    }
    assert_eq!(snapshot(&*observer), stored, "the late rank wrote nothing");
    // The survivors, asking again, get the decision they had.
    for (rank, first) in alive.iter().zip(&before) {
        assert_eq!(&rank.agree(5, 4).unwrap(), first);
    }
}

pub(super) fn a_suspected_rank_that_arrives_in_time_is_kept(backend: Backend) {
    // Every other rank suspects rank 3, but it comes before the decision:
    // arriving counts as alive.
    let options = AgreeOptions::new(LONG);
    let suspected_one = Rank::new(&backend, 3, &[], &options);
    let others = ranks(&backend, &[0, 1, 2], &[3], &options);
    let observer = backend.client();
    let outcomes = thread::scope(|scope| {
        let first = scope.spawn(|| suspected_one.agree(0, 4));
        arrived(&*observer, 0, 1);
        let mut outcomes = agree_all(&others, 0, 4);
        outcomes.push(first.join().expect("rank 3's thread"));
        outcomes
    });
    let agreements = agreements(outcomes);
    assert_eq!(the_same(&agreements).survivors(), [0, 1, 2, 3]);
    assert_eq!(agreements[3].rank(), 3);
}

pub(super) fn too_few_by_the_deadline(backend: Backend) {
    let options = AgreeOptions::new(SHORT).with_min_survivors(3);
    let alive = ranks(&backend, &[0, 1], &[2, 3], &options);
    let mut outcomes = agree_all(&alive, 2, 4);
    // A rank coming after the decision learns the same.
    outcomes.push(Rank::new(&backend, 2, &[], &options).agree(2, 4));
    for outcome in outcomes {
        let error = outcome.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::TooFewSurvivors, "{error}");
        assert!(
            matches!(
                &error,
                StoreError::TooFewSurvivors {
                    generation: 3,
                    survivors,
                    min_survivors: 3,
                    world_size: 4,
                } if survivors == &[0, 1]
            ),
            "{error:?}"
        );
        assert!(
            error.to_string().starts_with(
                "only ranks 0, 1 of 4 came to the agreement on generation 3 in time, fewer than \
                 the 3 the group needs (min_survivors)"
            ),
            "{error}"
        );
    }
}

pub(super) fn a_suspected_rank_can_still_make_the_minimum(backend: Backend) {
    // Ranks 0 and 1 suspect 2 and 3, but two are fewer than the minimum:
    // they wait, and rank 2, suspected yet alive, completes it.
    let options = AgreeOptions::new(LONG).with_min_survivors(3);
    let first = ranks(&backend, &[0, 1], &[2, 3], &options);
    let third = Rank::new(&backend, 2, &[3], &options);
    let observer = backend.client();
    let outcomes = thread::scope(|scope| {
        let waiting = scope.spawn(|| agree_all(&first, 0, 4));
        arrived(&*observer, 0, 2);
        let last = third.agree(0, 4);
        let mut outcomes = waiting.join().expect("ranks 0 and 1");
        outcomes.push(last);
        outcomes
    });
    let agreements = agreements(outcomes);
    let agreement = the_same(&agreements);
    assert_eq!(agreement.survivors(), [0, 1, 2]);
    assert_eq!(
        agreement.excluded().collect::<Vec<_>>(),
        [exclusion(3, suspected(&[0, 1, 2]))]
    );
}

pub(super) fn two_heals_in_a_row(backend: Backend) {
    let options = AgreeOptions::new(LONG).with_min_survivors(2);
    // Generation 0, 4 ranks: rank 3 is lost.
    let first = ranks(&backend, &[0, 1, 2], &[3], &options);
    let heal_1 = agreements(agree_all(&first, 0, 4));
    let heal_1 = the_same(&heal_1).clone();
    assert_eq!(
        (heal_1.generation(), heal_1.survivors()),
        (1, &[0, 1, 2][..])
    );
    // Generation 1, 3 ranks (new ranks): new rank 0 (old rank 0) is lost.
    let second = ranks(&backend, &[1, 2], &[0], &options);
    let heal_2 = agreements(agree_all(&second, 1, 3));
    let heal_2 = the_same(&heal_2).clone();
    assert_eq!((heal_2.generation(), heal_2.survivors()), (2, &[1, 2][..]));
    let original: Vec<usize> = (0..heal_2.world_size())
        .filter_map(|rank| heal_2.old_rank_of(rank))
        .filter_map(|rank| heal_1.old_rank_of(rank))
        .collect();
    assert_eq!(original, [1, 2], "generation 2's ranks in generation 0");
    // Each lost rank, come late, is out of the generation after its own.
    for (generation, rank, world, next) in [(0, 3, 4, 1), (1, 0, 3, 2)] {
        let error = Rank::new(&backend, rank, &[], &options)
            .agree(generation, world)
            .unwrap_err();
        assert!(
            matches!(error, StoreError::Excluded { rank: r, generation: g, .. } if r == rank && g == next),
            "{error}"
        );
    }
    // The two agreements kept to keys of their own.
    let observer = backend.client();
    let decisions: Vec<Vec<u8>> = (0..2)
        .map(|generation| {
            observer
                .try_get(&Keys::new(generation).decision)
                .unwrap()
                .expect("a decision per generation")
        })
        .collect();
    assert_ne!(decisions[0], decisions[1]);
}
