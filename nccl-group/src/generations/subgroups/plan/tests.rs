use super::*;

fn layout(lists: &[&[usize]], world_size: usize) -> Result<Layout> {
    Layout::new(lists, world_size, "rank lists")
}

fn refusal(lists: &[&[usize]], world_size: usize) -> String {
    match layout(lists, world_size) {
        Ok(layout) => panic!("{lists:?} accepted as {layout:?}"),
        Err(error) => error.to_string(),
    }
}

fn proposal(lists: &str, candidate: Candidate) -> Proposal {
    Proposal {
        lists: lists.to_string(),
        candidate,
    }
}

fn key(name: &str) -> Candidate {
    Candidate::Key(name.to_string())
}

#[test]
fn a_layout_places_each_rank_in_its_list_by_position() {
    let tp = layout(&[&[0, 1], &[3, 2]], 5).expect("two disjoint lists");
    assert_eq!(tp.place(0), Some((0, 0)));
    assert_eq!(tp.place(1), Some((0, 1)));
    // Ranked by position, not by value.
    assert_eq!(tp.place(3), Some((1, 0)));
    assert_eq!(tp.place(2), Some((1, 1)));
    assert_eq!(tp.place(4), None);
    assert_eq!(tp.list(1), &[3, 2]);
    assert_eq!(tp.text(), "[[0, 1], [3, 2]]");
}

#[test]
fn a_layout_refuses_each_fault_naming_expected_and_given() {
    let none: &[&[usize]] = &[];
    let cases: [(&[&[usize]], &[&str]); 6] = [
        (none, &["at least one rank list", "got no list"]),
        (&[&[]], &["at least one rank", "got []"]),
        (
            &[&[0], &[]],
            &["non-empty rank lists", "[[0], []] (list 1 is empty)"],
        ),
        (
            &[&[0, 4]],
            &["ranks of the parent group, 0..4", "rank 4 in [0, 4]"],
        ),
        (
            &[&[1, 2, 1]],
            &["distinct ranks in each list", "rank 1 twice in [1, 2, 1]"],
        ),
        (
            &[&[0, 1], &[2, 1]],
            &[
                "each rank in one list at most",
                "rank 1 in both [0, 1] and [2, 1]",
            ],
        ),
    ];
    for (lists, expected) in cases {
        let message = refusal(lists, 4);
        assert!(
            message.starts_with("invalid rank lists: expected "),
            "{message}"
        );
        for want in expected {
            assert!(
                message.contains(want),
                "{lists:?}: {message} lacks {want:?}"
            );
        }
    }
}

#[test]
fn the_same_candidate_everywhere_is_split() {
    let lists = "[[0, 1]]";
    let everyone = [
        proposal(lists, key("g/0/comm/x1/0")),
        proposal(lists, key("g/0/comm/x1/0")),
    ];
    assert_eq!(decide(&everyone), Verdict::Split("g/0/comm/x1/0".into()));
}

#[test]
fn lists_that_differ_are_refused_naming_rank_0_and_the_first_that_differs() {
    let verdict = decide(&[
        proposal("[[0, 1]]", key("k")),
        proposal("[[0, 1]]", key("k")),
        proposal("[[1, 0]]", key("k")),
        proposal("[[2]]", key("k")),
    ]);
    assert_eq!(
        verdict,
        Verdict::Refused {
            expected: "the same rank lists on every rank of the parent (rank 0 passed [[0, 1]])"
                .into(),
            given: "rank 2 passed [[1, 0]]".into(),
        }
    );
}

#[test]
fn without_one_communicator_everywhere_the_sub_groups_are_lazy() {
    let lists = "[[0]]";
    let lazy = |proposals: &[Proposal]| match decide(proposals) {
        Verdict::Lazy(reason) => reason,
        other => panic!("{proposals:?}: {other:?}"),
    };
    assert_eq!(
        lazy(&[proposal(lists, key("k")), proposal(lists, Candidate::None)]),
        NOTHING_TO_SPLIT
    );
    assert_eq!(
        lazy(&[proposal(lists, Candidate::None), proposal(lists, key("k"))]),
        NOTHING_TO_SPLIT
    );
    // Sharing anywhere wins over a key everywhere else.
    assert_eq!(
        lazy(&[
            proposal(lists, key("k")),
            proposal(lists, Candidate::Shared)
        ]),
        SHARED_REASON
    );
    let differ = lazy(&[proposal(lists, key("a")), proposal(lists, key("b"))]);
    assert!(differ.contains("differ"), "{differ}");
    assert_eq!(decide(&[]), Verdict::Lazy(NOTHING_TO_SPLIT.into()));
}

#[test]
fn proposals_and_verdicts_survive_the_store() {
    let mine = proposal("[[0, 1]]", Candidate::Shared);
    let back: Proposal = decode("split proposal", &encode(&mine)).expect("round trip");
    assert_eq!(back, mine);
    let verdict = Verdict::Refused {
        expected: "e".into(),
        given: "g".into(),
    };
    let back: Verdict = decode("split verdict", &encode(&verdict)).expect("round trip");
    assert_eq!(back, verdict);
    let error = decode::<Verdict>("split verdict", b"{").expect_err("not JSON");
    assert!(
        error.to_string().contains("invalid split verdict"),
        "{error}"
    );
    assert!(
        error.to_string().contains("1 bytes that do not parse"),
        "{error}"
    );
}
