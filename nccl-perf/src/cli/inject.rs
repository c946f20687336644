//! `--inject FAULT@RANK:ITER` and `--heal`: which rank is lost, how and
//! when, and how the survivors go on (the run itself: `recovery`).

use std::fmt;
use std::str::FromStr;

use clap::ValueEnum;

/// How the lost rank is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The process exits (status 1): NCCL's peers see its sockets close.
    Exit,
    /// The process is killed with SIGKILL: the same for its peers, with no
    /// chance to run anything of its own.
    Kill,
    /// The process is stopped with SIGSTOP: a hang, which only a timeout
    /// or a liveness check finds; it is continued (and exits) once the
    /// survivors are done.
    Stop,
}

impl Fault {
    /// Every fault, in the order `--help` names them.
    pub const ALL: [Fault; 3] = [Fault::Exit, Fault::Kill, Fault::Stop];

    /// The name on the command line and in the output.
    pub const fn name(self) -> &'static str {
        match self {
            Fault::Exit => "exit",
            Fault::Kill => "kill",
            Fault::Stop => "stop",
        }
    }
}

/// `--inject`: rank `rank` is lost by `fault` after `iter` all_reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injection {
    /// How it is lost.
    pub fault: Fault,
    /// Which rank (of the launch) is lost.
    pub rank: usize,
    /// After how many correct all_reduces.
    pub iter: usize,
}

impl fmt::Display for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.fault.name(), self.rank, self.iter)
    }
}

impl FromStr for Injection {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let names: Vec<&str> = Fault::ALL.iter().map(|fault| fault.name()).collect();
        let expected = format!(
            "FAULT@RANK:ITER with FAULT one of {} (e.g. kill@3:57)",
            names.join(", ")
        );
        let refuse = |why: &str| format!("expected {expected}; got {text:?}{why}");
        let (fault, place) = text.split_once('@').ok_or_else(|| refuse(""))?;
        let fault = Fault::ALL
            .into_iter()
            .find(|candidate| candidate.name() == fault)
            .ok_or_else(|| refuse(&format!(" (no fault {fault:?})")))?;
        let (rank, iter) = place.split_once(':').ok_or_else(|| refuse(""))?;
        let number = |what: &str, digits: &str| {
            digits
                .parse::<usize>()
                .map_err(|_| refuse(&format!(" ({what} {digits:?} is not a whole number)")))
        };
        Ok(Self {
            fault,
            rank: number("RANK", rank)?,
            iter: number("ITER", iter)?,
        })
    }
}

/// `--heal`: how the survivors go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HealMode {
    /// `ProcessGroup::heal`: agree on the lost ranks, then shrink the
    /// communicators where NCCL can (else re-create them).
    Shrink,
    /// `heal` with `HealOptions::with_shrink(false)`: agree, then fresh
    /// communicators (torchft's way).
    Recreate,
    /// No agreement: drop the failed group and build a new one of the
    /// survivors under a new name, its ranks known in advance (the floor a
    /// restart of the group, without the processes' start, costs).
    Full,
}

impl HealMode {
    /// The name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            HealMode::Shrink => "shrink",
            HealMode::Recreate => "recreate",
            HealMode::Full => "full",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_parses_with_its_rank_and_iteration_and_prints_back() {
        for fault in Fault::ALL {
            let text = format!("{}@3:57", fault.name());
            let injection: Injection = text.parse().expect("parses");
            assert_eq!(
                injection,
                Injection {
                    fault,
                    rank: 3,
                    iter: 57
                }
            );
            assert_eq!(injection.to_string(), text);
        }
    }

    #[test]
    fn a_malformed_injection_names_the_form_and_what_was_wrong() {
        for (text, why) in [
            ("kill", "got \"kill\""),
            ("kill@3", "got \"kill@3\""),
            ("crash@3:57", "no fault \"crash\""),
            ("exit@-1:57", "RANK \"-1\" is not a whole number"),
            ("stop@1:x", "ITER \"x\" is not a whole number"),
        ] {
            let error = text.parse::<Injection>().expect_err(text);
            assert!(
                error.starts_with("expected FAULT@RANK:ITER with FAULT one of exit, kill, stop"),
                "{error}"
            );
            assert!(error.contains(why), "{text}: {error}");
        }
    }
}
