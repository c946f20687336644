//! The command line: every nccl-tests flag by its letter and long name,
//! `all`, what the flags mean together, and usage errors (exit status 2,
//! naming the flag and the expected form).

use std::time::Duration;

use clap::{CommandFactory, Parser};
use nccl_core::{DataType, ReduceOp};

use super::*;
use crate::method::{Blocking, Method, Step};
use crate::selection::Selection;

fn parse(flags: &[&str]) -> Args {
    Args::try_parse_checked([&["nccl-perf"], flags].concat())
        .unwrap_or_else(|error| panic!("{flags:?}: {error}"))
}

/// [`parse`] of a command line's flags, separated by spaces.
fn parse_line(line: &str) -> Args {
    parse(&line.split_whitespace().collect::<Vec<_>>())
}

fn method(flags: &[&str]) -> Method {
    parse(flags).method().unwrap()
}

/// The usage error of `flags`, checked to exit 2 and name `names`.
fn refused(flags: &[&str], names: &str) -> String {
    let error = Args::try_parse_checked([&["nccl-perf"], flags].concat())
        .map(|_| ())
        .unwrap_err();
    assert_eq!(error.exit_code(), 2, "{flags:?}: {error}");
    let text = error.to_string();
    assert!(
        text.contains(names),
        "{flags:?} should name {names:?}: {text}"
    );
    text
}

#[test]
fn defaults() {
    let args = parse(&[]);
    assert_eq!(args.min_bytes, 8);
    assert_eq!(args.max_bytes, 128 << 20);
    assert_eq!(args.step_factor, 2);
    assert_eq!(args.iters, 20);
    assert_eq!(args.warmup_iters, 5);
    assert_eq!(args.check, 1);
    assert_eq!(args.ngpus, None);
    assert_eq!(args.layer, LayerKind::Core);
    assert_eq!(args.collectives(), Collective::ALL.to_vec());
    assert_eq!(args.compare, None);
    assert_eq!(args.layers(), vec![LayerKind::Core]);
    assert_eq!((args.graph, args.batches()), (0, 1));
    assert_eq!((args.json.as_ref(), args.plot.as_ref()), (None, None));
    assert_eq!(args.selection(Some(1)).unwrap(), Selection::default());
    assert_eq!(
        args.method().unwrap(),
        Method::default(),
        "nccl-tests' method, rotation on"
    );
}

#[test]
fn every_nccl_tests_flag_by_letter_and_by_name() {
    // (short, long, value, what it sets) for every flag of nccl-tests 2.19
    // this branch parses (-g, -t and -a are the process model's).
    type Check = fn(&Args) -> bool;
    let flags: [(&str, &str, &str, Check); 28] = [
        ("-b", "--minbytes", "1K", |a| a.min_bytes == 1024),
        ("-e", "--maxbytes", "1G", |a| a.max_bytes == 1 << 30),
        ("-i", "--stepbytes", "2M", |a| a.step_bytes == 2 << 20),
        ("-f", "--stepfactor", "4", |a| a.step_factor == 4),
        ("-n", "--iters", "200", |a| a.iters == 200),
        ("-m", "--agg_iters", "3", |a| a.agg_iters == 3),
        ("-w", "--warmup_iters", "20", |a| a.warmup_iters == 20),
        ("-N", "--run_cycles", "3", |a| a.run_cycles == 3),
        ("-p", "--parallel_init", "1", |a| {
            a.unapplied.parallel_init == Some(1)
        }),
        ("-c", "--check", "5", |a| a.check == 5),
        ("-o", "--op", "max", |a| a.op == ReduceOpArg::Max),
        ("-d", "--datatype", "bfloat16", |a| {
            a.datatype == DataTypeArg::One(DataType::Bfloat16)
        }),
        ("-r", "--root", "1", |a| a.root == RootArg::One(1)),
        ("-z", "--blocking", "2", |a| a.blocking == 2),
        ("-y", "--stream_null", "1", |a| a.stream_null == 1),
        ("-T", "--timeout", "30", |a| a.timeout == 30),
        ("-G", "--cudagraph", "100", |a| a.graph == 100),
        ("-C", "--report_cputime", "1", |a| a.report_cputime == 1),
        ("-S", "--report_timestamps", "1", |a| {
            a.report_timestamps == 1
        }),
        ("-J", "--output_file", "out.json", |a| {
            a.output_file.as_deref() == Some(std::path::Path::new("out.json"))
        }),
        ("-R", "--local_register", "2", |a| {
            a.unapplied.local_register == Some(2)
        }),
        ("-x", "--cta_policy", "1", |a| a.cta_policy == Some(1)),
        ("-D", "--device_implementation", "2", |a| {
            a.unapplied.device_implementation == Some(2)
        }),
        ("-V", "--device_cta_count", "16", |a| {
            a.unapplied.device_cta_count == Some(16)
        }),
        ("-M", "--memory", "1", |a| a.memory == 1),
        ("-u", "--unalign", "3", |a| a.unalign == 3),
        ("-I", "--per_iter_timing", "1", |a| a.per_iter_timing == 1),
        ("-K", "--per_iter_skip", "4", |a| a.per_iter_skip == 4),
    ];
    for (short, long, value, check) in flags {
        // -z 2 cannot go with -G: each flag is parsed on its own.
        for args in [
            Args::try_parse_from(["nccl-perf", short, value]),
            Args::try_parse_from(["nccl-perf", long, value]),
            Args::try_parse_from(["nccl-perf".to_string(), format!("{long}={value}")]),
            Args::try_parse_from(["nccl-perf".to_string(), format!("{short}{value}")]),
        ] {
            let args = args.unwrap_or_else(|error| panic!("{short} {value}: {error}"));
            assert!(check(&args), "{short}/{long} {value}");
        }
    }
    // The help names every long flag.
    let help = Args::command().render_long_help().to_string();
    for (_, long, _, _) in flags {
        assert!(help.contains(long), "--help lacks {long}");
    }
}

#[test]
fn a_whole_nccl_tests_command_line() {
    let args = parse_line(
        "-b 8 -e 1G -f 4 -g 1 -w 20 -n 200 -c 1 -m 2 -z 0 -y 0 -T 60 -C 0 -S 0 -u 0 -p 0 -R 0 -N 2 -o sum -d float -r 0 --layer raw all_reduce",
    );
    assert_eq!(
        (args.min_bytes, args.max_bytes, args.step_factor),
        (8, 1 << 30, 4)
    );
    assert_eq!(
        (args.warmup_iters, args.iters, args.ngpus),
        (20, 200, Some(1))
    );
    let method = args.method().unwrap();
    assert_eq!(method.step, Step::Factor(4));
    assert_eq!((method.agg_iters, method.checks), (2, 1));
    assert_eq!(method.timeout, Some(Duration::from_secs(60)));
    assert_eq!(method.capacity_bytes, 1 << 30);
    assert!(method.rotate && !method.cpu_time && !method.timestamps && !method.stream_null);
    assert_eq!(method.notes.len(), 1, "-p 0 is noted: {:?}", method.notes);
    let selection = args.selection(Some(1)).unwrap();
    assert_eq!(selection.cycles, 2);
    assert_eq!(args.collectives(), vec![Collective::AllReduce]);
}

#[test]
fn all_expands_types_ops_and_roots() {
    let args = parse(&["-d", "all", "-o", "all", "-r", "all"]);
    let selection = args.selection(Some(4)).unwrap();
    assert_eq!(selection.dtypes, DataType::ALL.to_vec());
    assert_eq!(
        selection
            .dtypes
            .iter()
            .map(|d| d.short_name())
            .collect::<Vec<_>>(),
        [
            "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
            "bfloat16", "f8e4m3", "f8e5m2"
        ],
        "nccl-tests' order"
    );
    assert_eq!(selection.ops, ReduceOp::ALL.to_vec());
    assert_eq!(selection.roots, vec![0, 1, 2, 3]);
    // nccl-tests' -r -1 is every root too.
    let args = parse(&["-r", "-1", "broadcast"]);
    assert_eq!(args.selection(Some(2)).unwrap().roots, vec![0, 1]);
    assert_eq!(parse(&["--root=all"]).root, RootArg::All);
}

#[test]
fn method_flags_mean_what_they_mean_in_nccl_tests() {
    let blocking = |value: &str| method(&["-z", value]).blocking;
    assert_eq!(blocking("0"), Blocking::None);
    assert_eq!(blocking("1"), Blocking::WaitAndBarrier);
    assert_eq!(blocking("2"), Blocking::Wait);
    assert_eq!(blocking("3"), Blocking::WaitAndBarrierUntimed);
    assert!(method(&["-C", "1"]).cpu_time);
    assert!(method(&["-S", "1"]).timestamps);
    assert!(method(&["-y", "1"]).stream_null);
    assert_eq!(method(&["-T", "0"]).timeout, None);
    assert_eq!(method(&["-u", "7"]).unalign, 7);
    assert_eq!(method(&["-c", "0"]).checks, 0);
    assert!(!method(&["-c", "0"]).checks_results());
    assert_eq!(
        method(&["-f", "1", "-i", "64K"]).step,
        Step::Bytes(64 << 10)
    );
    let fixed = method(&["--no-rotate"]);
    assert!(!fixed.rotate);
    assert!(fixed.notes.iter().any(|note| note.contains("--no-rotate")));
    // -J writes only a *.json file, as nccl-tests does.
    let json = method(&["-J", "run.json"]);
    assert_eq!(
        json.output_file.as_deref(),
        Some(std::path::Path::new("run.json"))
    );
    let other = method(&["-J", "run.txt"]);
    assert_eq!(other.output_file, None);
    assert!(
        other.notes[0].contains("nothing is written"),
        "{:?}",
        other.notes
    );
    // -z 3 with -G is turned off, with a note, as in nccl-tests.
    let graph = method(&["-z", "3", "-G", "10"]);
    assert_eq!(graph.blocking, Blocking::None);
    assert!(
        graph
            .notes
            .iter()
            .any(|note| note.contains("-z 3 is turned off"))
    );
    // -m with a group layer: the calls cannot share an NCCL group.
    let group = method(&["-m", "4", "--layer", "group"]);
    assert!(
        group
            .notes
            .iter()
            .any(|note| note.starts_with("# note: -m 4"))
    );
    assert!(method(&["-m", "4", "--layer", "raw"]).notes.is_empty());
    // -R 1 is applied, and registers what the group layers do not use.
    let registered = method(&["-R", "1", "--layer", "tensor"]);
    assert!(registered.register && registered.notes.is_empty());
    let group = method(&["-R", "1", "--layer", "group-caller"]);
    assert!(group.register);
    assert!(
        group.notes[..]
            == [
                "# note: -R 1 registers the buffers of the raw, core and tensor layers; the group \
                             layers' tensors are copies of their own, made by cudarc and not registered"
            ],
        "{:?}",
        group.notes
    );
    assert!(!method(&["-R", "2"]).register);
    // Every note is one comment line.
    let noisy = method(&[
        "-p",
        "1",
        "-R",
        "2",
        "-x",
        "2",
        "-D",
        "1",
        "-V",
        "8",
        "-M",
        "1",
        "-I",
        "1",
        "-K",
        "1",
        "-J",
        "x.txt",
        "-S",
        "1",
        "--no-rotate",
    ]);
    // -M, -I, -K and -x are applied: no note.
    assert_eq!(noisy.notes.len(), 7, "{:?}", noisy.notes);
    for note in &noisy.notes {
        assert!(
            note.starts_with("# note: ") && !note.contains('\n'),
            "{note}"
        );
    }
}

#[test]
fn no_short_flag_is_swallowed_as_version_or_help() {
    // -V is nccl-tests' --device_cta_count: it takes a value and runs.
    let args = parse(&["-V", "16"]);
    assert_eq!(args.unapplied.device_cta_count, Some(16));
    // Without a value it is a usage error, not a version printed.
    let error = Args::try_parse_from(["nccl-perf", "-V"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    // The version stays reachable by its long name only.
    let version = Args::try_parse_from(["nccl-perf", "--version"]).unwrap_err();
    assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
    assert_eq!(version.exit_code(), 0);
    // -h is nccl-tests' help too.
    let help = Args::try_parse_from(["nccl-perf", "-h"]).unwrap_err();
    assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
    // Every other letter nccl-tests has takes a value: none exits 0 alone.
    for letter in "tgbeifnmwNpIKcodrzyTGCaRxDVJSMu".chars() {
        let flag = format!("-{letter}");
        if let Err(error) = Args::try_parse_from(["nccl-perf", flag.as_str()]) {
            assert_ne!(error.exit_code(), 0, "{flag} alone exited 0");
        }
    }
}

#[test]
fn bad_values_name_the_flag_and_the_form() {
    for (flags, names) in [
        (&["-b", "8X"][..], "--minbytes"),
        (&["-e", "-1"], "--maxbytes"),
        (&["-i", "0"], "--stepbytes"),
        (&["-f", "0"], "--stepfactor"),
        (&["-n", "0"], "--iters"),
        (&["-m", "0"], "--agg_iters"),
        (&["-w", "x"], "--warmup_iters"),
        (&["-N", "1.5"], "--run_cycles"),
        (&["-c", "-1"], "--check"),
        (&["-c", "yes"], "--check"),
        (&["-o", "xor"], "--op"),
        (&["-d", "float8"], "--datatype"),
        (&["-d", "float32"], "--datatype"),
        (&["-r", "-2"], "--root"),
        (&["-r", "first"], "--root"),
        (&["-z", "4"], "--blocking"),
        (&["-y", "2"], "--stream_null"),
        (&["-T", "-5"], "--timeout"),
        (&["-T", "soon"], "--timeout"),
        (&["-G", "x"], "--cudagraph"),
        (&["-G", "4294967296"], "--cudagraph"),
        (&["-C", "2"], "--report_cputime"),
        (&["-S", "yes"], "--report_timestamps"),
        (&["-u", "-1"], "--unalign"),
        (&["-u", "x"], "--unalign"),
        (&["-g", "0"], "--ngpus"),
        (&["--layer", "magic"], "--layer"),
        (&["alltoallv"], "COLLECTIVE"),
        (&["--op-name", "all_reduce", "broadcast"], "--op-name"),
    ] {
        refused(flags, names);
    }
    // The expected forms are in the messages.
    assert!(refused(&["-z", "4"], "--blocking").contains("0..=3"));
    assert!(
        refused(&["-r", "x"], "--root").contains("expected a rank (0, 1, ...), or all (or -1)")
    );
    assert!(refused(&["-b", "8X"], "--minbytes").contains("K, M or G suffix"));
    assert!(refused(&["-o", "xor"], "--op").contains("mulsum"));
    assert!(refused(&["-d", "x"], "--datatype").contains("all"));
}

#[test]
fn combinations_nccl_tests_refuses_or_nccl_perf_cannot_run() {
    refused(
        &["-b", "1M", "-e", "1K"],
        "-b/--minbytes 1048576 is larger than -e/--maxbytes 1024",
    );
    refused(&["-o", "mulsum"], "-o mulsum");
    refused(&["-N", "0"], "-N 0 (cycle forever) is not supported");
    refused(
        &["-z", "1", "-G", "5"],
        "-z 1 waits for the GPU after each iteration",
    );
    refused(&["-z", "2", "-G", "5"], "-z 2");
    refused(
        &["--layer", "group", "-G", "5"],
        "-G 5 with the group layer: a process group does not capture",
    );
    refused(
        &["--compare", "tensor,group", "-G", "5"],
        "use --layer group-caller",
    );
    assert_eq!(
        method(&["--layer", "group-caller", "-G", "5"]).blocking,
        Blocking::None
    );
    // They read as clap's own errors.
    assert!(refused(&["-N", "0"], "-N").starts_with("error: -N 0"));
    // Roots are checked against the world once it is known.
    let args = parse(&["-r", "5", "reduce"]);
    let error = args.selection(Some(2)).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(error.to_string().contains("-r 5 is not a rank"), "{error}");
    // A root past the last rank does not matter to collectives without one.
    assert!(parse(&["-r", "5", "all_gather"]).selection(Some(1)).is_ok());
}

#[test]
fn plot_needs_its_feature() {
    let flags = ["--plot", "bw.svg", "all_reduce"];
    if cfg!(feature = "plot") {
        assert_eq!(
            parse(&flags).plot.as_deref(),
            Some(std::path::Path::new("bw.svg"))
        );
    } else {
        refused(
            &flags,
            "--plot bw.svg: this nccl-perf was built without its `plot` feature",
        );
    }
}

#[test]
fn alloc_picks_who_allocates_the_buffers() {
    let by = |flags: &[&str]| {
        let method = method(flags);
        (method.memory, method.register)
    };
    assert_eq!(by(&[]), (Memory::Cudarc, false));
    assert_eq!(by(&["--alloc", "cudarc"]), (Memory::Cudarc, false));
    // NCCL's memory, as nccl-tests 2.19 allocates it: unregistered unless -R 1.
    assert_eq!(by(&["--alloc", "nccl"]), (Memory::Nccl, false));
    assert_eq!(by(&["-R", "1"]), (Memory::Nccl, true));
    assert_eq!(by(&["--alloc", "nccl", "-R", "1"]), (Memory::Nccl, true));
    refused(
        &["--alloc", "cudarc", "-R", "1"],
        "--alloc cudarc with -R 1: -R 1 registers buffers that ncclMemAlloc allocated",
    );
    refused(&["--alloc", "pool"], "--alloc");
    // The group layers' tensors are their own, and a note says so.
    assert!(
        method(&["--alloc", "nccl", "--layer", "raw"])
            .notes
            .is_empty()
    );
    assert_eq!(
        method(&["--alloc", "nccl", "--compare", "raw,group"]).notes,
        [
            "# note: --alloc nccl allocates the buffers of the raw, core and tensor layers; the group \
          layers' tensors are copies of their own, made by cudarc"
        ]
    );
}

#[test]
fn graph_flag_parses() {
    assert_eq!(parse(&["-G", "100"]).graph, 100);
    assert_eq!(parse(&["--cudagraph", "3"]).graph, 3);
    assert_eq!(parse(&["-G", "0"]).graph, 0);
    for bad in [
        &["nccl-perf", "-G", "-1"][..],
        &["nccl-perf", "-G", "x"],
        &["nccl-perf", "-G"],
        &["nccl-perf", "-G", "4294967296"],
    ] {
        assert!(Args::try_parse_from(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn nccl_perf_flags_parse() {
    let args = parse_line(
        "-b 1K -e 1G -f 4 -n 200 -w 20 -c 0 -d bfloat16 -o max -r 1 -g 2 --layer raw --json out.jsonl all_gather",
    );
    assert_eq!(
        (args.min_bytes, args.max_bytes, args.step_factor),
        (1024, 1 << 30, 4)
    );
    assert_eq!((args.iters, args.warmup_iters, args.check), (200, 20, 0));
    assert_eq!(args.datatype, DataTypeArg::One(DataType::Bfloat16));
    assert_eq!(args.op, ReduceOpArg::Max);
    assert_eq!((args.root, args.ngpus), (RootArg::One(1), Some(2)));
    assert_eq!(args.layer, LayerKind::Raw);
    assert_eq!(
        args.json.as_deref(),
        Some(std::path::Path::new("out.jsonl"))
    );
    assert_eq!(args.collectives(), vec![Collective::AllGather]);
    assert_eq!(
        parse(&["--layer", "tensor"]).layers(),
        vec![LayerKind::Tensor]
    );
    assert_eq!(
        parse(&["--layer", "group"]).layers(),
        vec![LayerKind::Group]
    );
    assert_eq!(
        parse(&["--op-name", "sendrecv"]).collectives(),
        vec![Collective::SendRecv]
    );
    assert_eq!(
        parse(&["reduce-scatter"]).collectives(),
        vec![Collective::ReduceScatter]
    );
    assert_eq!(parse(&["all"]).collectives(), Collective::ALL.to_vec());
}

#[test]
fn process_flags_parse_as_nccl_tests() {
    let args = Args::try_parse_from(["nccl-perf", "-t", "2", "-g", "4", "-a", "0"]).unwrap();
    assert_eq!((args.threads, args.ngpus), (2, Some(4)));
    assert_eq!(args.average(), Average::Rank0);
    let args = Args::try_parse_from(["nccl-perf", "--nthreads", "3", "--average", "3"]).unwrap();
    assert_eq!((args.threads, args.average()), (3, Average::Max));
    let args = Args::try_parse_from(["nccl-perf", "--ngpus", "1", "-a", "2"]).unwrap();
    assert_eq!((args.ngpus, args.average()), (Some(1), Average::Min));
    for bad in [
        &["nccl-perf", "-t", "0"][..],
        &["nccl-perf", "-a", "4"],
        &["nccl-perf", "-a", "-1"],
        &["nccl-perf", "-a"],
    ] {
        assert!(
            Args::try_parse_from(bad).is_err(),
            "{bad:?} should be rejected"
        );
    }
}

#[test]
fn a_flag_given_twice_takes_its_last_value_as_in_nccl_tests() {
    let args = parse(&["-e", "256K", "-e", "1K", "-n", "5", "-n", "7"]);
    assert_eq!((args.max_bytes, args.iters), (1024, 7));
}

#[test]
fn the_group_mismatch_check_is_on_unless_turned_off() {
    assert!(parse(&[]).group_mismatch_check.is_on());
    assert!(
        parse(&["--group-mismatch-check", "on"])
            .group_mismatch_check
            .is_on()
    );
    assert!(
        !parse(&["--group-mismatch-check", "off"])
            .group_mismatch_check
            .is_on()
    );
    refused(&["--group-mismatch-check", "yes"], "--group-mismatch-check");
}
