//! Slurm host lists (`node[01-04,7]`, `a[1-2],b3`, `rack[1-2]-node[01-02]`),
//! read with the grammar of Slurm's own `hostlist.c`:
//!
//! * the list is host patterns separated by `,`, space, tab or newline
//!   outside brackets;
//! * a pattern is text and bracket groups; a group is a comma-separated
//!   list of numbers and `low-high` ranges, and a host is one choice from
//!   every group, the first group varying slowest;
//! * a number keeps the width it was written with (`[01-10]` gives `01` to
//!   `10`), and a range names at most [`MAX_RANGE_HOSTS`] hosts, as in Slurm.
//!
//! The text is parsed whole (so a malformed list is an error wherever it is
//! malformed) into a structure no larger than the text, and hosts are made
//! one at a time: a list naming billions of hosts costs no more memory than
//! its characters.

use std::fmt;

/// The most hosts one bracketed range may name: Slurm's `MAX_RANGE`.
pub(super) const MAX_RANGE_HOSTS: u64 = 65_536;

/// What is wrong with a host list, and where (a byte offset, from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostListError {
    pub(super) position: usize,
    pub(super) problem: String,
}

impl fmt::Display for HostListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at position {}", self.problem, self.position)
    }
}

/// A parsed host list.
#[derive(Debug)]
pub(super) struct HostList<'a> {
    patterns: Vec<Pattern<'a>>,
}

#[derive(Debug)]
struct Pattern<'a> {
    parts: Vec<Part<'a>>,
}

#[derive(Debug)]
enum Part<'a> {
    Text(&'a str),
    Group(Vec<Range>),
}

#[derive(Debug, Clone, Copy)]
struct Range {
    low: u64,
    high: u64,
    width: usize,
}

fn is_separator(b: u8) -> bool {
    matches!(b, b',' | b' ' | b'\t' | b'\n')
}

fn error(position: usize, problem: impl Into<String>) -> HostListError {
    HostListError {
        position,
        problem: problem.into(),
    }
}

impl<'a> HostList<'a> {
    /// Parses `text`; an empty list (nothing but separators) names no host.
    pub(super) fn parse(text: &'a str) -> Result<Self, HostListError> {
        let bytes = text.as_bytes();
        let mut patterns = Vec::new();
        let mut parts = Vec::new();
        let mut text_start = 0;
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b if is_separator(b) => {
                    if text_start < at {
                        parts.push(Part::Text(&text[text_start..at]));
                    }
                    if !parts.is_empty() {
                        patterns.push(Pattern {
                            parts: std::mem::take(&mut parts),
                        });
                    }
                    at += 1;
                    text_start = at;
                }
                b'[' => {
                    if text_start < at {
                        parts.push(Part::Text(&text[text_start..at]));
                    }
                    let (group, after) = parse_group(text, at)?;
                    parts.push(Part::Group(group));
                    at = after;
                    text_start = at;
                }
                b']' => return Err(error(at, "unexpected ']' with no '[' open")),
                _ => at += 1,
            }
        }
        if text_start < at {
            parts.push(Part::Text(&text[text_start..at]));
        }
        if !parts.is_empty() {
            patterns.push(Pattern { parts });
        }
        Ok(HostList { patterns })
    }

    /// The hosts in order, made one at a time.
    pub(super) fn hosts(&self) -> impl Iterator<Item = String> + '_ {
        self.patterns.iter().flat_map(Pattern::hosts)
    }
}

/// Parses the bracket group opening at `open`; returns it and the position
/// after its `]`.
fn parse_group(text: &str, open: usize) -> Result<(Vec<Range>, usize), HostListError> {
    let bytes = text.as_bytes();
    let mut ranges = Vec::new();
    let mut at = open + 1;
    loop {
        let (low, width, after_low) = parse_number(text, at)?;
        let (high, after) = if bytes.get(after_low) == Some(&b'-') {
            let (high, _, after_high) = parse_number(text, after_low + 1)?;
            (high, after_high)
        } else {
            (low, after_low)
        };
        if low > high {
            return Err(error(
                at,
                format!("range {low}-{high} runs backwards (expected low-high)"),
            ));
        }
        if high - low >= MAX_RANGE_HOSTS {
            return Err(error(
                at,
                format!(
                    "range {low}-{high} names more than the {MAX_RANGE_HOSTS} hosts Slurm allows \
                     in one range"
                ),
            ));
        }
        ranges.push(Range { low, high, width });
        match bytes.get(after) {
            Some(b',') => at = after + 1,
            Some(b']') => return Ok((ranges, after + 1)),
            Some(&other) => {
                return Err(error(
                    after,
                    format!(
                        "unexpected {:?} in the bracket group opened at position {open} \
                         (expected digits, '-', ',' or ']')",
                        char::from(other)
                    ),
                ));
            }
            None => {
                return Err(error(
                    after,
                    format!("the '[' at position {open} is not closed"),
                ));
            }
        }
    }
}

/// Parses the decimal number at `at`: its value, its width in digits and
/// the position after it.
fn parse_number(text: &str, at: usize) -> Result<(u64, usize, usize), HostListError> {
    let digits = text.as_bytes()[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        let found = text[at..]
            .chars()
            .next()
            .map_or_else(|| "the end".to_owned(), |c| format!("{c:?}"));
        return Err(error(at, format!("expected a number, found {found}")));
    }
    let end = at + digits;
    let value = text[at..end]
        .parse::<u64>()
        .map_err(|_| error(at, format!("the number {} is too large", &text[at..end])))?;
    Ok((value, digits, end))
}

impl Pattern<'_> {
    fn hosts(&self) -> PatternHosts<'_> {
        let groups: Vec<&[Range]> = self
            .parts
            .iter()
            .filter_map(|part| match part {
                Part::Group(ranges) => Some(ranges.as_slice()),
                Part::Text(_) => None,
            })
            .collect();
        let choice = groups.iter().map(|ranges| (0, ranges[0].low)).collect();
        PatternHosts {
            pattern: self,
            groups,
            choice,
            done: false,
        }
    }
}

/// The hosts of one pattern: an odometer over its groups, the last group
/// turning fastest.
struct PatternHosts<'p> {
    pattern: &'p Pattern<'p>,
    groups: Vec<&'p [Range]>,
    /// For each group, the range in use and the number in it.
    choice: Vec<(usize, u64)>,
    done: bool,
}

impl Iterator for PatternHosts<'_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        let mut host = String::new();
        let mut group = 0;
        for part in &self.pattern.parts {
            match part {
                Part::Text(text) => host.push_str(text),
                Part::Group(_) => {
                    let (range, number) = self.choice[group];
                    let width = self.groups[group][range].width;
                    host.push_str(&format!("{number:0width$}"));
                    group += 1;
                }
            }
        }
        self.done = !self.advance();
        Some(host)
    }
}

impl PatternHosts<'_> {
    /// Moves to the next choice; false when every choice has been made.
    fn advance(&mut self) -> bool {
        for group in (0..self.groups.len()).rev() {
            let ranges = self.groups[group];
            let (range, number) = self.choice[group];
            if number < ranges[range].high {
                self.choice[group] = (range, number + 1);
                return true;
            }
            if range + 1 < ranges.len() {
                self.choice[group] = (range + 1, ranges[range + 1].low);
                return true;
            }
            self.choice[group] = (0, ranges[0].low);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(text: &str) -> Vec<String> {
        HostList::parse(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .hosts()
            .collect()
    }

    fn err(text: &str) -> HostListError {
        HostList::parse(text).expect_err(text)
    }

    #[test]
    fn ranges_keep_their_zero_padding() {
        assert_eq!(
            hosts("node[01-04,7]"),
            ["node01", "node02", "node03", "node04", "node7"]
        );
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("n[098-101]"), ["n098", "n099", "n100", "n101"]);
    }

    #[test]
    fn commas_inside_and_outside_brackets() {
        assert_eq!(hosts("a[1-2],b3"), ["a1", "a2", "b3"]);
        assert_eq!(
            hosts("gnode[10,20,25,37]"),
            ["gnode10", "gnode20", "gnode25", "gnode37"]
        );
        assert_eq!(hosts("t-cn0117"), ["t-cn0117"]);
        assert_eq!(hosts(" x , y\tz\n"), ["x", "y", "z"]);
        assert!(hosts(",, ").is_empty());
    }

    #[test]
    fn several_groups_vary_the_last_fastest() {
        assert_eq!(
            hosts("rack[1-2]-node[01-02]"),
            [
                "rack1-node01",
                "rack1-node02",
                "rack2-node01",
                "rack2-node02"
            ]
        );
        assert_eq!(hosts("r[1,3]n[5]x"), ["r1n5x", "r3n5x"]);
        assert_eq!(hosts("[1-2]"), ["1", "2"]);
    }

    #[test]
    fn malformed_lists_say_where() {
        let cases: [(&str, usize, &str); 9] = [
            ("node[01-", 8, "expected a number, found the end"),
            ("node[01", 7, "'[' at position 4 is not closed"),
            ("node[]", 5, "expected a number, found ']'"),
            ("node[1,]", 7, "expected a number"),
            ("node[5-3]", 5, "runs backwards"),
            ("node[1-2]]", 9, "unexpected ']'"),
            ("node[1[2]]", 6, "unexpected '['"),
            ("node[1 ,2]", 6, "unexpected ' '"),
            ("n[99999999999999999999]", 2, "too large"),
        ];
        for (text, position, problem) in cases {
            let e = err(text);
            assert_eq!(e.position, position, "{text:?}: {e}");
            assert!(e.problem.contains(problem), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_huge_list_is_read_lazily_and_a_huge_range_refused() {
        // 65536 x 65536 x 65536 hosts: only the first few are ever made.
        let list = HostList::parse("a[0-65535]b[0-65535]c[0-65535]").unwrap();
        let first: Vec<String> = list.hosts().take(2).collect();
        assert_eq!(first, ["a0b0c0", "a0b0c1"]);
        let e = err("n[0-65536]");
        assert!(e.problem.contains("more than the 65536 hosts"), "{e}");
        assert!(
            err("n[0-18446744073709551615]")
                .problem
                .contains("more than")
        );
    }

    #[test]
    fn the_odometer_visits_every_host_once() {
        let all = hosts("x[1-3,7]y[0-1]");
        assert_eq!(all.len(), 8);
        assert_eq!(all.first().map(String::as_str), Some("x1y0"));
        assert_eq!(all.last().map(String::as_str), Some("x7y1"));
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
    }
}
