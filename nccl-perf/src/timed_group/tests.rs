//! The measurements' shared parts: the values ranks share, the files
//! rank 0 writes, the group the flags ask for.

use std::sync::Arc;

use clap::Parser;
use nccl_group::InProcessStore;

use super::{Outputs, TimedGroup, f64s_bytes, f64s_of, gather_times, stamp_of};
use crate::cli::Args;
use crate::world::World;

fn args(flags: &[&str]) -> Args {
    Args::try_parse_from([&["nccl-perf"], flags].concat()).expect("flags parse")
}

#[test]
fn shared_values_go_through_bytes_and_back_and_a_wrong_length_is_refused() {
    let back: [f64; 2] = f64s_of(1, "grow times", &f64s_bytes(&[3.5, 80.25])).expect("read back");
    assert_eq!(back, [3.5, 80.25]);
    let error = f64s_of::<2>(1, "grow times", &[0; 24])
        .expect_err("24 bytes refused")
        .to_string();
    assert!(
        error.contains("rank 1 shared 24 bytes of grow times, expected 16"),
        "{error}"
    );
    assert_eq!(
        stamp_of(3, "its loss", &7u64.to_le_bytes()).expect("8 bytes"),
        7
    );
    let error = stamp_of(3, "its loss", &[0; 4])
        .expect_err("4 bytes refused")
        .to_string();
    assert!(
        error.contains("rank 3 shared its loss as 4 bytes; expected 8"),
        "{error}"
    );
}

#[test]
fn rank_0_gathers_every_process_times_its_own_included_and_the_others_go_on() {
    let store: Arc<dyn nccl_group::Store> = Arc::new(InProcessStore::new());
    let gathered: Vec<_> = std::thread::scope(|scope| {
        let processes: Vec<_> = (0..3)
            .map(|rank| {
                let store = Arc::clone(&store);
                scope.spawn(move || {
                    let world = World::in_store(rank, 3, store, "in-process");
                    let times = [rank as f64, 10.0 * rank as f64];
                    gather_times(world.meeting(), "run/times", "test times", times)
                        .expect("gathered")
                })
            })
            .collect();
        processes
            .into_iter()
            .map(|process| process.join().expect("no panic"))
            .collect()
    });
    assert_eq!(
        gathered[0],
        Some(vec![[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]]),
        "rank 0 gets every process's times in rank order"
    );
    assert_eq!(gathered[1..], [None, None]);
}

#[test]
fn a_timed_group_needs_one_group_layer_all_reduce_and_float() {
    let group = TimedGroup::new(
        &args(&["all_reduce", "--layer", "group", "-b", "8K"]),
        "--grow-spare 5",
    )
    .expect("a group");
    assert_eq!(group.count, 2048);
    for (flags, expected) in [
        (
            &["broadcast", "--layer", "group"][..],
            "expected the all_reduce collective",
        ),
        (
            &["all_reduce"],
            "expected one group layer (--layer group or group-caller); got core",
        ),
        (
            &["all_reduce", "--layer", "group", "-d", "half"],
            "expected -d float",
        ),
    ] {
        let Err(error) = TimedGroup::new(&args(flags), "--grow-spare 5") else {
            panic!("{flags:?} accepted");
        };
        let error = error.to_string();
        assert!(error.starts_with("--grow-spare 5: "), "{flags:?}: {error}");
        assert!(error.contains(expected), "{flags:?}: {error}");
    }
}

#[test]
fn rank_0_opens_its_output_files_before_the_run_and_refuses_one_it_cannot_write() {
    let dir = std::env::temp_dir().join(format!("nccl-perf-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let (file, json) = (dir.join("one.json"), dir.join("runs.jsonl"));
    std::fs::write(&json, "{\"earlier\":1}\n").expect("an earlier line");
    let flags = |j: &std::path::Path| {
        let mut flags: Vec<String> = ["all_reduce", "--layer", "group-caller"]
            .map(String::from)
            .to_vec();
        flags.extend(["--inject", "exit@1:5", "-J"].map(String::from));
        flags.push(j.display().to_string());
        flags.push("--json".to_string());
        flags.push(json.display().to_string());
        flags
    };
    let parsed = |j: &std::path::Path| {
        let flags = flags(j);
        args(&flags.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let outputs = Outputs::open(&parsed(&file), 0).expect("both open");
    assert!(outputs.file.is_some() && outputs.json.is_some());
    assert_eq!(
        std::fs::read_to_string(&json).expect("kept"),
        "{\"earlier\":1}\n",
        "--json appends: the earlier line stays"
    );
    let others = Outputs::open(&parsed(&file), 2).expect("nothing to open");
    assert!(others.file.is_none() && others.json.is_none());
    let unwritable = dir.join("no-such-folder").join("one.json");
    let Err(error) = Outputs::open(&parsed(&unwritable), 0) else {
        panic!("a file in a missing folder opened");
    };
    assert!(
        error.to_string().contains("no-such-folder"),
        "the error names the file: {error}"
    );
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}
