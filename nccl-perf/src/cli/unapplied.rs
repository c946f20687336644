//! The nccl-tests flags nccl-perf accepts without applying them, with
//! nccl-tests' values, and the `# note:` line each gives when it is used.

/// nccl-tests flags accepted so that nccl-tests command lines run, but
/// without effect here: each one given prints why in a `# note:` line.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct Unapplied {
    /// nccl-tests: initialize the communicators from one thread (0) or in parallel (1).
    /// Every rank here initializes its own on its own thread, as with 1.
    #[arg(short = 'p', allow_negative_numbers = true, long = "parallel_init", value_name = "0|1", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub parallel_init: Option<u8>,

    /// nccl-tests: register the buffers locally (1) or symmetrically (2). 1 is applied
    /// (`Method::register`: ncclMemAlloc and ncclCommRegister); 2 is not implemented,
    /// and the buffers are not registered.
    #[arg(short = 'R', allow_negative_numbers = true, long = "local_register", value_name = "0|1|2", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub local_register: Option<u8>,

    /// nccl-tests: run its own device-API kernel instead of NCCL's (0: NCCL's). Not
    /// implemented: NCCL's implementation is measured.
    #[arg(
        short = 'D',
        allow_negative_numbers = true,
        long = "device_implementation",
        value_name = "N"
    )]
    pub device_implementation: Option<u32>,

    /// nccl-tests: CTAs of the device-API kernels of -D (1 to 128). Not applied (no -D).
    #[arg(short = 'V', allow_negative_numbers = true, long = "device_cta_count", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=128))]
    pub device_cta_count: Option<u32>,
}

impl Unapplied {
    /// One `# note:` line per flag given with a value that would change
    /// what nccl-tests does (the off values, `-R 0` say, need none; nor
    /// `-R 1`, which is applied).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let mut note = |flag: &str, value: Option<String>, why: &str| {
            if let Some(value) = value {
                notes.push(format!("# note: -{flag} {value} has no effect here: {why}"));
            }
        };
        note(
            "p",
            self.parallel_init.map(|v| v.to_string()),
            "every rank initializes its own communicator on its own thread (as nccl-tests' -p 1)",
        );
        note(
            "R",
            self.local_register
                .filter(|&v| v == 2)
                .map(|v| v.to_string()),
            "symmetric registration (ncclCommWindowRegister) is not implemented; the buffers are not registered",
        );
        note(
            "D",
            self.device_implementation
                .filter(|&v| v > 0)
                .map(|v| v.to_string()),
            "nccl-tests' device-API kernels are not implemented; NCCL's own implementation is measured",
        );
        note(
            "V",
            self.device_cta_count.map(|v| v.to_string()),
            "it sets the CTAs of nccl-tests' device-API kernels (-D), which are not implemented",
        );
        notes
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Args;

    fn notes(flags: &[&str]) -> Vec<String> {
        let args = Args::try_parse_from([&["nccl-perf"], flags].concat()).unwrap();
        args.unapplied.notes()
    }

    #[test]
    fn each_flag_given_notes_why_it_does_nothing() {
        assert!(notes(&[]).is_empty());
        for (flags, says) in [
            (
                &["-p", "1"][..],
                "-p 1 has no effect here: every rank initializes",
            ),
            (&["-p", "0"], "-p 0 has no effect here"),
            (
                &["--local_register", "2"],
                "-R 2 has no effect here: symmetric registration (ncclCommWindowRegister)",
            ),
            (
                &["-D", "3"],
                "-D 3 has no effect here: nccl-tests' device-API kernels",
            ),
            (&["-V", "16"], "-V 16 has no effect here: it sets the CTAs"),
        ] {
            let notes = notes(flags);
            assert_eq!(notes.len(), 1, "{flags:?}: {notes:?}");
            assert!(notes[0].starts_with("# note: "), "{notes:?}");
            assert!(notes[0].contains(says), "{flags:?}: {notes:?}");
            assert!(!notes[0].contains('\n'));
        }
        // Off values change nothing in nccl-tests either: no note; -R 1
        // and -x are applied.
        for flags in [&["-R", "0"][..], &["-R", "1"], &["-D", "0"], &["-x", "1"]] {
            assert!(notes(flags).is_empty(), "{flags:?}");
        }
        assert_eq!(
            notes(&["-p", "1", "-R", "2", "-x", "1", "-D", "1", "-V", "8"]).len(),
            4
        );
    }

    #[test]
    fn out_of_range_values_are_usage_errors_naming_the_flag() {
        for (flags, names) in [
            (&["-p", "2"][..], "--parallel_init"),
            (&["-R", "3"], "--local_register"),
            (&["-x", "3"], "--cta_policy"),
            (&["-D", "-1"], "--device_implementation"),
            (&["-V", "0"], "--device_cta_count"),
            (&["-V", "129"], "--device_cta_count"),
        ] {
            let error = Args::try_parse_from([&["nccl-perf"], flags].concat()).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{flags:?}");
            assert!(error.to_string().contains(names), "{flags:?}: {error}");
        }
    }
}
