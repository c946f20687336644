//! What the flags mean together: the [`Method`] and [`Selection`] a run
//! reads from them, the combinations refused as usage errors (before
//! anything else runs, with [`Args::try_parse_checked`]), and the notes on
//! those nccl-tests would change silently.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::Args;
use crate::buffers::Memory;
use crate::error::BenchError;
use crate::layer::LayerKind;
use crate::method::{Blocking, Method, Step};
use crate::selection::Selection;

impl Args {
    /// Parses `args` (the program name first) and checks the flags'
    /// combinations, so that every usage error is clap's (exit status 2,
    /// with the usage line) before the machine is probed.
    ///
    /// # Errors
    /// clap's error for a bad flag or value, or for flags that cannot run
    /// together ([`Args::method`], [`Args::selection`], and any but
    /// `--plot` with `--report`).
    pub fn try_parse_checked<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let usage = |error: BenchError| {
            clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{error}\n"),
            )
            .with_cmd(&Self::command())
        };
        let mut matches = Self::command().try_get_matches_from(args)?;
        // Before the values are taken out of `matches`.
        report_alone(&matches).map_err(usage)?;
        let args = Self::from_arg_matches_mut(&mut matches)
            .map_err(|error| error.format(&mut Self::command()))?;
        args.method().map_err(usage)?;
        args.selection(None).map_err(usage)?;
        Ok(args)
    }

    /// The process's command line, checked as [`Args::try_parse_checked`]
    /// does; a usage error or `--help` ends the process as clap does.
    pub fn parse_checked() -> Self {
        Self::try_parse_checked(std::env::args_os()).unwrap_or_else(|error| error.exit())
    }

    /// How the run measures and reports.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for `-b` above `-e`, `-K` not below `-n`,
    /// `-z 1`/`-z 2` with `-G` (a graph capture cannot wait for the GPU), or the group
    /// layer with `-G` (the group does not capture operations on its own
    /// stream; `group-caller` it does).
    pub fn method(&self) -> Result<Method, BenchError> {
        if let Some(path) = &self.plot
            && !cfg!(feature = "plot")
        {
            return Err(without_plot_feature(path));
        }
        if self.min_bytes > self.max_bytes {
            return Err(BenchError::Usage(format!(
                "-b/--minbytes {} is larger than -e/--maxbytes {}",
                self.min_bytes, self.max_bytes
            )));
        }
        let mut notes = self.unapplied.notes();
        let group_layers = self
            .layers()
            .iter()
            .any(|layer| layer.stream_mode().is_some());
        let mut blocking = Blocking::from_flag(self.blocking).ok_or_else(|| {
            BenchError::Usage(format!(
                "-z/--blocking takes 0, 1, 2 or 3, got {}",
                self.blocking
            ))
        })?;
        if self.graph > 0 && self.layers().contains(&LayerKind::Group) {
            return Err(BenchError::Usage(format!(
                "-G {} with the group layer: a process group does not capture the operations it runs on its \
                 own NCCL stream (StreamMode::Separate); use --layer group-caller, whose operations run on the \
                 rank's stream and are captured",
                self.graph
            )));
        }
        if self.graph > 0 {
            match blocking {
                Blocking::WaitAndBarrier | Blocking::Wait => {
                    return Err(BenchError::Usage(format!(
                        "-z {} waits for the GPU after each iteration, which a CUDA graph capture (-G {}) cannot do",
                        self.blocking, self.graph
                    )));
                }
                Blocking::WaitAndBarrierUntimed => {
                    notes.push(
                        "# note: -z 3 is turned off with -G, as nccl-tests does (a capture cannot wait)"
                            .to_string(),
                    );
                    blocking = Blocking::None;
                }
                Blocking::None => {}
            }
        }
        let per_iter = self.per_iter(&mut notes)?;
        if self.agg_iters > 1 && group_layers {
            notes.push(format!(
                "# note: -m {}: the group layers issue each iteration's calls one after another (a process group's operations do not join one NCCL group)",
                self.agg_iters
            ));
        }
        let output_file = match &self.output_file {
            Some(path) if is_json_name(path) => Some(path.clone()),
            Some(path) => {
                notes.push(format!(
                    "# note: -J {}: nccl-tests writes JSON only to a file named *.json; nothing is written",
                    path.display()
                ));
                None
            }
            None => None,
        };
        if self.report_timestamps > 0 {
            notes.push("# note: -S 1: the timestamps are UTC".to_string());
        }
        let register = self.unapplied.local_register == Some(1);
        let memory = match (self.alloc, register) {
            (Some(Memory::Cudarc), true) => {
                return Err(BenchError::Usage(
                    "--alloc cudarc with -R 1: -R 1 registers buffers that ncclMemAlloc allocated, as nccl-tests \
                     does; drop --alloc or give --alloc nccl"
                        .to_string(),
                ));
            }
            (Some(memory), _) => memory,
            (None, true) => Memory::Nccl,
            (None, false) => Memory::as_nccl_tests(),
        };
        if register && group_layers {
            notes.push(
                "# note: -R 1 registers the buffers of the raw, core and tensor layers; the group layers' tensors \
                 are copies of their own, made by cudarc and not registered"
                    .to_string(),
            );
        } else if memory == Memory::Nccl && group_layers {
            notes.push(
                "# note: --alloc nccl allocates the buffers of the raw, core and tensor layers; the group layers' \
                 tensors are copies of their own, made by cudarc"
                    .to_string(),
            );
        }
        if self.no_rotate {
            notes.push(
                "# note: --no-rotate: every iteration uses the same buffers (nccl-tests moves each to the next offset)"
                    .to_string(),
            );
        }
        Ok(Method {
            step: Step::new(self.step_factor, self.step_bytes),
            rotate: !self.no_rotate,
            capacity_bytes: self.max_bytes,
            unalign: self.unalign as usize,
            agg_iters: self.agg_iters,
            blocking,
            checks: self.check,
            cpu_time: self.report_cputime > 0,
            timestamps: self.report_timestamps > 0,
            stream_null: self.stream_null > 0,
            memory,
            register,
            timeout: (self.timeout > 0).then(|| Duration::from_secs(u64::from(self.timeout))),
            output_file,
            per_iter,
            memory_report: self.memory > 0,
            notes,
        })
    }

    /// `-I` and `-K`: the iterations `-I 1`'s statistics skip, or `None`
    /// without per-iteration timing (`-I 0`, or `-G`, which turns it off
    /// as nccl-tests does, with a note; so does `-K` without it).
    ///
    /// # Errors
    /// [`BenchError::Usage`] for `-K` not below `-n`.
    fn per_iter(&self, notes: &mut Vec<String>) -> Result<Option<u32>, BenchError> {
        if self.per_iter_skip >= self.iters {
            return Err(BenchError::Usage(format!(
                "-K/--per_iter_skip {} leaves no iteration for -I's statistics: it must be below \
                 -n/--iters ({})",
                self.per_iter_skip, self.iters
            )));
        }
        let on = self.per_iter_timing > 0;
        if on && self.graph > 0 {
            notes.push(format!(
                "# note: -I 1 is turned off with -G {}, as nccl-tests does (a graph replays the \
                 iterations with no event between them)",
                self.graph
            ));
        }
        let per_iter = (on && self.graph == 0).then_some(self.per_iter_skip);
        if per_iter.is_none() && self.per_iter_skip > 0 {
            notes.push(format!(
                "# note: -K {} has no effect without -I 1, as in nccl-tests",
                self.per_iter_skip
            ));
        }
        Ok(per_iter)
    }

    /// The element types, reductions, roots and cycles to run on `world`
    /// ranks (`None` before the world is known: roots are not checked).
    ///
    /// # Errors
    /// [`BenchError::Usage`] for `-o mulsum`, `-N 0`, or a root past the
    /// last rank when a collective of the run has a root.
    pub fn selection(&self, world: Option<usize>) -> Result<Selection, BenchError> {
        let ops = self.op.reduce_ops().ok_or_else(|| {
            BenchError::Usage(
                "-o mulsum (nccl-tests' ncclRedOpCreatePreMulSum reduction) is not implemented in nccl-perf; \
                 use sum, prod, max, min, avg or all"
                    .to_string(),
            )
        })?;
        if self.run_cycles == 0 {
            return Err(BenchError::Usage(
                "-N 0 (cycle forever) is not supported: give -N/--run_cycles a count of 1 or more"
                    .to_string(),
            ));
        }
        let roots = match world {
            Some(world) => {
                let roots = self.root.roots(world);
                let has_root = self.collectives().iter().any(|c| c.has_root());
                if let Some(&root) = roots.iter().find(|&&root| root >= world)
                    && has_root
                {
                    return Err(BenchError::Usage(format!(
                        "-r {root} is not a rank: with {world} rank(s) the root must be in 0..{world}"
                    )));
                }
                roots
            }
            None => self.root.roots(1),
        };
        Ok(Selection {
            dtypes: self.datatype.data_types(),
            ops,
            roots,
            cycles: self.run_cycles,
        })
    }
}

/// `--plot path` refused by an nccl-perf built without its `plot` feature.
pub fn without_plot_feature(path: &Path) -> BenchError {
    BenchError::Usage(format!(
        "--plot {}: this nccl-perf was built without its `plot` feature (on by default); \
         build it with `--features plot` to draw plots",
        path.display()
    ))
}

/// `--report` runs nothing, so no flag but `--plot` can go with it: with
/// `--report`, an error naming the others given on the command line.
fn report_alone(matches: &ArgMatches) -> Result<(), BenchError> {
    let given_here = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    if !given_here("report") {
        return Ok(());
    }
    let command = Args::command();
    let given: Vec<String> = command
        .get_arguments()
        .filter(|arg| !matches!(arg.get_id().as_str(), "report" | "plot"))
        .filter(|arg| given_here(arg.get_id().as_str()))
        .map(|arg| match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            (None, None) => arg.get_id().as_str().to_uppercase(),
        })
        .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(BenchError::Usage(format!(
        "--report redraws saved rows and runs nothing: only --plot can go with it, given {}",
        given.join(", ")
    )))
}

/// Whether nccl-tests would write JSON to `path`: the text after its last
/// `.` (with no `/` after that `.`, and not empty) is `json`, in any case.
fn is_json_name(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text.rsplit_once('.').is_some_and(|(_, extension)| {
        !extension.contains('/') && extension.eq_ignore_ascii_case("json")
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn method(flags: &[&str]) -> Result<Method, BenchError> {
        Args::try_parse_from([&["nccl-perf"], flags].concat())
            .unwrap()
            .method()
    }

    #[test]
    fn report_takes_plot_and_nothing_else() {
        let alone = Args::try_parse_checked(["nccl-perf", "--report", "rows.jsonl"]).unwrap();
        assert_eq!(alone.report.as_deref(), Some(Path::new("rows.jsonl")));
        if cfg!(feature = "plot") {
            let plot = ["nccl-perf", "--report", "r.jsonl", "--plot", "bw.svg"];
            assert!(Args::try_parse_checked(plot).is_ok());
        }
        for (flags, named) in [
            (&["--layer", "raw"][..], "given --layer"),
            (&["-n", "5", "all_reduce"], "given --iters, COLLECTIVE"),
            (&["-I", "1"], "given --per_iter_timing"),
            (&["-R", "1"], "given --local_register"),
        ] {
            let args = [&["nccl-perf", "--report", "r.jsonl"][..], flags].concat();
            let error = Args::try_parse_checked(args).unwrap_err();
            assert_eq!(error.exit_code(), 2);
            let text = error.to_string();
            assert!(
                text.contains(
                    "--report redraws saved rows and runs nothing: only --plot can go with it"
                ) && text.contains(named),
                "{flags:?}: {text}"
            );
        }
        // A collective as the positional argument still runs it.
        let run = Args::try_parse_checked(["nccl-perf", "all_reduce"]).unwrap();
        assert!(run.report.is_none() && run.collectives().len() == 1);
    }

    #[test]
    fn per_iteration_timing_and_its_skip() {
        let off = method(&[]).unwrap();
        assert_eq!((off.per_iter, off.memory_report), (None, false));
        let on = method(&["-I", "1", "-K", "3", "-M", "1"]).unwrap();
        assert_eq!((on.per_iter, on.memory_report), (Some(3), true));
        assert!(on.notes.is_empty(), "{:?}", on.notes);
        // -G turns -I off, as nccl-tests does, and -K with it: two notes.
        let graph = method(&["-I", "1", "-K", "2", "-G", "10"]).unwrap();
        assert_eq!(graph.per_iter, None);
        assert_eq!(graph.notes.len(), 2, "{:?}", graph.notes);
        assert!(graph.notes[0].starts_with("# note: -I 1 is turned off with -G 10"));
        assert!(graph.notes[1].starts_with("# note: -K 2 has no effect without -I 1"));
        // -K must leave an iteration to the statistics.
        for flags in [&["-K", "20"][..], &["-I", "1", "-n", "5", "-K", "7"]] {
            let error = method(flags).unwrap_err();
            assert_eq!(error.exit_code(), 2);
            assert!(
                error.to_string().starts_with("-K/--per_iter_skip ")
                    && error.to_string().contains("below -n/--iters"),
                "{error}"
            );
        }
        for bad in [&["-I", "2"][..], &["-M", "2"], &["-K", "-1"], &["-I", "x"]] {
            assert!(
                Args::try_parse_from([&["nccl-perf"], bad].concat()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn json_names_as_nccl_tests_classifies_them() {
        for (name, json) in [
            ("out.json", true),
            ("dir/out.JSON", true),
            ("a.b.json", true),
            ("out.jsonl", false),
            ("out", false),
            ("dir.json/out", false),
            ("out.", false),
            (".json", true),
            ("dir/.json", true),
        ] {
            assert_eq!(is_json_name(Path::new(name)), json, "{name}");
        }
    }
}
