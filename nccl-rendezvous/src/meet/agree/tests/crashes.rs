//! Faults: a store that dies under the ranks, and a rank that dies at
//! any step of the protocol, its partial writes left behind.

use super::*;

pub(super) fn the_store_dies(mut backend: Backend) {
    // Ranks 0 and 1 wait for rank 2, whom nobody suspects; the store dies
    // under them. Both end with the store's error, long before the timeout.
    let waiting = ranks(&backend, &[0, 1], &[], &AgreeOptions::new(LONG));
    let observer = backend.client();
    let outcomes = thread::scope(|scope| {
        let running = scope.spawn(|| agree_all(&waiting, 0, 3));
        arrived(&*observer, 0, 2);
        backend.kill();
        running.join().expect("the waiting ranks")
    });
    // A rank that comes to the dead store fails the same way.
    let late = agree_survivors(&*observer, 0, 2, 3, &[], &AgreeOptions::new(LONG));
    for outcome in outcomes.into_iter().chain([late]) {
        let error = outcome.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Store, "{error}");
    }
}

pub(super) fn a_rank_that_dies_at_any_step_leaves_one_decision(backend: Backend) {
    // Ranks 1 and 2 wait for rank 3, which never comes, until their
    // deadline. Rank 0 comes last with no time to wait, so it is the one
    // that decides (unless their deadline passes first), and dies in its
    // call after the first `ops`, that call applied but unanswered: for
    // every `ops` until it lives to the end, so at every step (reading
    // before it arrives; its slot claimed but unwritten; arrived; reading
    // the arrivals; its decision committed). Ranks 1 and 2 always agree
    // with each other, and with rank 0 when it lives.
    let waiting = AgreeOptions::new(SHORT);
    for (generation, ops) in (0..100).zip(0_isize..) {
        let first = ranks(&backend, &[1, 2], &[], &waiting);
        let last = Rank {
            rank: 0,
            suspects: Vec::new(),
            store: backend.crashing_client(ops),
            options: AgreeOptions::new(Duration::ZERO),
        };
        let observer = backend.client();
        let (dying, outcomes) = thread::scope(|scope| {
            let running = scope.spawn(|| agree_all(&first, generation, 4));
            arrived(&*observer, generation, 2);
            let dying = last.agree(generation, 4);
            (dying, running.join().expect("ranks 1 and 2"))
        });
        let agreements = agreements(outcomes);
        let agreement = the_same(&agreements);
        assert_eq!(agreement.generation(), generation + 1);
        assert!(agreement.new_rank_of(1).is_some() && agreement.new_rank_of(2).is_some());
        assert_eq!(agreement.new_rank_of(3), None);
        // Rank 0 is in only if it wrote its arrival (its third call).
        assert!(agreement.new_rank_of(0).is_none() || ops >= 2, "{ops}");
        match dying {
            Ok(own) => {
                assert_eq!(own.survivors(), agreement.survivors());
                assert_eq!(own.decided_by(), agreement.decided_by());
                return;
            }
            Err(error) => assert!(error.to_string().contains(CRASHED), "{error}"),
        }
    }
    panic!("rank 0 never lived to the end of an agreement in 100 store calls");
}

pub(super) fn partial_writes_of_a_dead_rank(backend: Backend) {
    let raw = backend.client();
    let short = AgreeOptions::new(SHORT);
    let long = AgreeOptions::new(LONG);

    // Rank 0 claimed a slot and died before writing its arrival: the hole
    // in the log blocks nobody; rank 0 had not arrived.
    raw.add(&Keys::new(0).count, 1).unwrap();
    let outcomes = agree_all(&ranks(&backend, &[1, 2], &[], &short), 0, 3);
    let agreements_0 = agreements(outcomes);
    let agreement = the_same(&agreements_0);
    assert_eq!(agreement.survivors(), [1, 2]);
    assert_eq!(
        agreement.excluded().collect::<Vec<_>>(),
        [exclusion(0, ExclusionReason::NotArrived)]
    );

    // Rank 0 wrote its arrival and died: it voted, so it is in (the next
    // step fails with it, and the next agreement leaves it out).
    arrive(&*raw, &Keys::new(1), 0, &[]).unwrap();
    let outcomes = agree_all(&ranks(&backend, &[1, 2], &[], &long), 1, 3);
    assert_eq!(the_same(&agreements(outcomes)).survivors(), [0, 1, 2]);

    // Rank 0 arrived first, suspecting both others, found the decision
    // due, committed it, and died before returning: its decision stands
    // for everyone, even though it leaves them out.
    let keys = Keys::new(2);
    arrive(&*raw, &keys, 0, &[1, 2]).unwrap();
    let mut view = View::new(3);
    view.refresh(&*raw, &keys).unwrap();
    assert!(view.ready(1));
    commit(&*raw, &keys, view.decide(2, 1, 0), 3).unwrap();
    for outcome in agree_all(&ranks(&backend, &[1, 2], &[], &long), 2, 3) {
        let error = outcome.unwrap_err();
        assert!(
            matches!(
                &error,
                StoreError::Excluded { generation: 3, reason, survivors, .. }
                    if reason == &suspected(&[0]) && survivors == &[0]
            ),
            "{error}"
        );
    }

    // Records no agreement wrote (another program's): a clear error for
    // every rank, no decision and no panic. A decision that is not one:
    raw.set(&Keys::new(3).decision, br#"{"survivors":"all"}"#)
        .unwrap();
    for outcome in agree_all(&ranks(&backend, &[0, 1], &[], &long), 3, 2) {
        let error = outcome.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        let record = "invalid agreement record \"agree/3/decision\" = ";
        assert!(error.to_string().starts_with(record), "{error}");
    }
    // A counter of arrivals no rank could have reached, which would take
    // longer than any deadline to read:
    raw.set(&Keys::new(4).count, b"1000000").unwrap();
    for outcome in agree_all(&ranks(&backend, &[0, 1], &[], &long), 4, 2) {
        let error = outcome.unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("invalid agreement record \"agree/4/arrivals\" = \"100000")
                && message.contains("expected a count of arrivals of at most 128"),
            "{error}"
        );
    }
}
