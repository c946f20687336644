//! Flight-recorder dumps of a group (a world of one, which needs no GPU
//! to join): on request through the API and through the request file,
//! complete when returned, one folder per incident, nothing overwritten.

use nccl_group::{Diagnostics, Lifecycle};
use std::path::Path;
use std::time::Duration;

use nccl_group::dumps::{DumpError, REQUEST_FILE};
use nccl_group::{ErrorKind, FlightDump, GroupError, GroupOptions, ProcessGroup};
use nccl_test_support::group::world_of_one;
use nccl_test_support::within;

/// Hang guard of the waits below: only a watchdog that never serves the
/// request file outlasts it.
const PATIENCE: Duration = Duration::from_secs(120);

/// A group of one process (which needs no GPU to join) dumping to `dump_dir`.
fn group(name: &str, dump_dir: Option<&Path>) -> ProcessGroup {
    let options = match dump_dir {
        Some(dir) => GroupOptions::default().with_dump_dir(dir),
        None => GroupOptions::default().without_dump_dir(),
    };
    world_of_one(name, options)
}

#[test]
fn a_dump_on_request_returns_complete_files_and_keeps_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let group = group("on-request", Some(dir.path()));
    let first = group.dump_flight_recorder("before-restart").unwrap();
    assert_eq!(
        first.folder,
        dir.path().join("on-request-g0-before-restart")
    );
    // Complete on return: the marker lists the files, which are there.
    let listing = std::fs::read_to_string(&first.done).unwrap();
    assert!(listing.starts_with("rank0.json\n"), "{listing}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&first.json).unwrap()).unwrap();
    assert_eq!(json["rank"], 0);
    assert_eq!(json["reason"], "on request: \"before-restart\"");
    if let Some(torch) = &first.torch {
        assert!(std::fs::metadata(torch).unwrap().len() > 0);
        assert!(listing.contains("nccl_trace_rank_0\n"), "{listing}");
    }
    // The same label again: a second incident, beside the first.
    let second = group.dump_flight_recorder("before-restart").unwrap();
    assert_eq!(
        second.folder,
        dir.path().join("on-request-g0-before-restart.1")
    );
    assert!(first.json.exists() && first.done.exists());
    assert!(second.json.exists() && second.done.exists());
}

#[test]
fn a_group_without_a_dump_folder_says_so() {
    let group = group("no-folder", None);
    let error = group.dump_flight_recorder("x").unwrap_err();
    assert!(
        matches!(error, GroupError::Dump(DumpError::NoFolder)),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("dump_dir"), "{error}");
}

#[test]
fn the_request_file_asks_the_group_for_a_dump() {
    let dir = tempfile::tempdir().unwrap();
    let _group = group("file-trigger", Some(dir.path()));
    std::fs::write(dir.path().join(REQUEST_FILE), "from-script\n").unwrap();
    // A script waits for the marker of each rank.
    let done = dir.path().join("file-trigger-g0-from-script/rank0.done");
    within(
        "the watchdog serving the request file",
        PATIENCE,
        move || {
            while !done.exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
        },
    );
    let json = dir.path().join("file-trigger-g0-from-script/rank0.json");
    let text = std::fs::read_to_string(json).unwrap();
    assert!(text.contains("requested through dump-request"), "{text}");
}

/// An abort of a group that never made a communicator and had nothing
/// pending writes a dump that says so, and names no pending communicator.
#[test]
fn an_idle_groups_abort_dump_says_nothing_was_pending() {
    let dir = tempfile::tempdir().unwrap();
    let group = group("idle", Some(dir.path()));
    group.abort().unwrap();
    let json = dir.path().join("idle-g0-failure/rank0.json");
    let dump = FlightDump::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        dump.reason
            .contains("was aborted with no operation pending"),
        "{}",
        dump.reason
    );
    assert!(!dump.reason.contains("was pending"), "{}", dump.reason);
    assert!(dump.ops.is_empty(), "{:?}", dump.ops);
}

/// A dump written by a group reads back as the dump it wrote.
#[test]
fn a_written_dump_reads_back_as_the_groups_record() {
    let dir = tempfile::tempdir().unwrap();
    let group = group("round-trip", Some(dir.path()));
    let files = group.dump_flight_recorder("check").unwrap();
    let read = FlightDump::from_json(&std::fs::read_to_string(&files.json).unwrap()).unwrap();
    assert_eq!((read.group.as_str(), read.rank), ("round-trip", 0));
    assert_eq!(read.pid, std::process::id());
    assert!(read.epoch_unix_us > 0, "{read:?}");
}
