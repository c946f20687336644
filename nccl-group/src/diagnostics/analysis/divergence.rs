//! The comparison of the ranks' collectives: how far they agree, and the
//! first collective where they do not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Issued, Ranks};

/// A rank that did not issue what most ranks issued as a collective.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deviation {
    /// The rank.
    pub rank: usize,
    /// What it issued as that collective instead; `None`: it issued no
    /// such collective.
    pub issued: Option<Issued>,
    /// The last collective it issued (`None`: none).
    pub last_collective: Option<u64>,
}

/// The first collective the ranks did not issue alike (in a dump's JSON:
/// these fields, and `message`, its `Display`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The collective's number.
    pub collective_seq: u64,
    /// What most ranks issued as it (on a tie, the group of the lowest
    /// rank).
    pub expected: Issued,
    /// The ranks that issued it, in order.
    pub expected_ranks: Vec<usize>,
    /// Every other rank, in order.
    pub others: Vec<Deviation>,
}

/// How the ranks' collectives compare.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// The first and last collective that every rank issued alike, from
    /// the first collective that every rank still has a record of (rings
    /// forget the oldest) to the last before the divergence; `None`: none.
    pub matched: Option<(u64, u64)>,
    /// The first collective they did not issue alike.
    pub divergence: Option<Divergence>,
}

/// The first collective that the ranks of `collectives_by_rank` did not
/// issue alike ([`Issued::differences`]), or that some did not issue at
/// all; `None` when they agree on every collective that all of them still
/// have records of.
///
/// Each rank's list holds its collectives (in any order); only the ranks in the
/// map are compared.
pub fn first_divergence(collectives_by_rank: &BTreeMap<usize, Vec<Issued>>) -> Option<Divergence> {
    compare(collectives_by_rank).divergence
}

/// [`first_divergence`], and the collectives every rank issued alike
/// before it.
pub fn compare(collectives_by_rank: &BTreeMap<usize, Vec<Issued>>) -> Comparison {
    let by_rank: BTreeMap<usize, BTreeMap<u64, &Issued>> = collectives_by_rank
        .iter()
        .map(|(&rank, issued)| {
            let by_seq = issued.iter().map(|i| (i.collective_seq, i)).collect();
            (rank, by_seq)
        })
        .collect();
    // Below the latest first record, some rank's ring has forgotten.
    let Some(start) = by_rank
        .values()
        .filter_map(|by_seq| by_seq.keys().next().copied())
        .max()
    else {
        return Comparison::default();
    };
    let seqs: BTreeSet<u64> = by_rank
        .values()
        .flat_map(|by_seq| by_seq.range(start..).map(|(&seq, _)| seq))
        .collect();
    let mut matched: Option<(u64, u64)> = None;
    for seq in seqs {
        if let Some(divergence) = diverges_at(&by_rank, seq) {
            return Comparison {
                matched,
                divergence: Some(divergence),
            };
        }
        matched = Some((matched.map_or(seq, |(first, _)| first), seq));
    }
    Comparison {
        matched,
        divergence: None,
    }
}

/// How the ranks differ at collective `seq`, if they do.
fn diverges_at(by_rank: &BTreeMap<usize, BTreeMap<u64, &Issued>>, seq: u64) -> Option<Divergence> {
    // The ranks that issued it, grouped by what they issued (first seen
    // first), and those that did not.
    let mut groups: Vec<(&Issued, Vec<usize>)> = Vec::new();
    let mut absent = Vec::new();
    for (&rank, by_seq) in by_rank {
        match by_seq.get(&seq) {
            None => absent.push(rank),
            Some(&issued) => match groups
                .iter_mut()
                .find(|(first, _)| first.differences(issued).is_empty())
            {
                Some((_, ranks)) => ranks.push(rank),
                None => groups.push((issued, vec![rank])),
            },
        }
    }
    if groups.len() == 1 && absent.is_empty() {
        return None;
    }
    let expected_at = (0..groups.len()).fold(0, |best, i| {
        if groups[i].1.len() > groups[best].1.len() {
            i
        } else {
            best
        }
    });
    let (expected, expected_ranks) = groups.swap_remove(expected_at);
    let last_collective = |rank: usize| {
        by_rank
            .get(&rank)
            .and_then(|by_seq| by_seq.keys().next_back().copied())
    };
    let mut others: Vec<Deviation> = groups
        .into_iter()
        .flat_map(|(issued, ranks)| ranks.into_iter().map(move |rank| (rank, Some(issued))))
        .chain(absent.into_iter().map(|rank| (rank, None)))
        .map(|(rank, issued)| Deviation {
            rank,
            issued: issued.cloned(),
            last_collective: last_collective(rank),
        })
        .collect();
    others.sort_by_key(|deviation| deviation.rank);
    Some(Divergence {
        collective_seq: seq,
        expected: expected.clone(),
        expected_ranks,
        others,
    })
}

/// `rank 3 issued all_reduce(float x 1025, sum) as collective #57; ranks
/// 0-2 issued all_reduce(float x 1024, sum) (the element count differs)`, or
/// `rank 3 did not issue collective #57 (last issued: #56); ranks 0-2
/// issued all_reduce(float x 1024, sum)`.
impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = self.collective_seq;
        // The deviating ranks, grouped by what they did instead.
        let mut groups: Vec<(&Deviation, Vec<usize>)> = Vec::new();
        for deviation in &self.others {
            let alike = |(first, _): &&mut (&Deviation, Vec<usize>)| match (
                &first.issued,
                &deviation.issued,
            ) {
                (Some(a), Some(b)) => a == b,
                (None, None) => first.last_collective == deviation.last_collective,
                _ => false,
            };
            match groups.iter_mut().find(alike) {
                Some((_, ranks)) => ranks.push(deviation.rank),
                None => groups.push((deviation, vec![deviation.rank])),
            }
        }
        let mut differences = Vec::new();
        for (i, (deviation, ranks)) in groups.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let ranks = Ranks(ranks);
            match &deviation.issued {
                Some(issued) => {
                    write!(f, "{ranks} issued {issued} as collective #{seq}")?;
                    for what in issued.differences(&self.expected) {
                        if !differences.contains(&what) {
                            differences.push(what);
                        }
                    }
                }
                None => {
                    let last = match deviation.last_collective {
                        Some(last) => format!("last issued: #{last}"),
                        None => "no collective issued".to_string(),
                    };
                    write!(f, "{ranks} did not issue collective #{seq} ({last})")?;
                }
            }
        }
        write!(
            f,
            "; {} issued {}",
            Ranks(&self.expected_ranks),
            self.expected
        )?;
        match differences.as_slice() {
            [] => {}
            [what] => write!(f, " (the {what} differs)")?,
            several => write!(f, " (the {} differ)", several.join(" and "))?,
        }
        Ok(())
    }
}

#[cfg(test)]
impl Divergence {
    /// The tests' divergence: ranks 0-2 issued collective 57 as an
    /// all_reduce (sum) of 1024 floats, rank 3 as one of `count`.
    pub(crate) fn sample(count: usize) -> Self {
        let issued = |count| Issued {
            collective_seq: 57,
            op: "all_reduce".into(),
            dtype: Some("float".into()),
            count,
            root: None,
            reduction: Some("sum".into()),
        };
        Divergence {
            collective_seq: 57,
            expected: issued(1024),
            expected_ranks: vec![0, 1, 2],
            others: vec![Deviation {
                rank: 3,
                issued: Some(issued(count)),
                last_collective: Some(57),
            }],
        }
    }
}
