//! The analysis of recorded dumps (`nccl_group::analysis`, the
//! `nccl-frtrace` binary) on synthetic ones: each kind of mismatch, a
//! skipped collective, a missing rank, a truncated file, rings that forgot
//! different amounts, and a dump folder of several incidents. (That the
//! analysis reads what the writer writes is a unit test of the crate.)

use std::path::Path;

use nccl_group::FlightDump;
use nccl_group::analysis::{self, Issued, first_divergence};
use nccl_group::dumps::write_incident;
use serde_json::{Value, json};

const WORLD: usize = 4;
/// Collectives each rank issued.
const ISSUED: u64 = 60;

/// One collective as the recorder writes it.
#[derive(Clone)]
struct Op {
    op: &'static str,
    dtype: Option<&'static str>,
    count: usize,
    peer: Option<usize>,
    reduction: Option<&'static str>,
}

fn all_reduce(count: usize) -> Op {
    Op {
        op: "all_reduce",
        dtype: Some("float"),
        count,
        peer: None,
        reduction: Some("sum"),
    }
}

fn broadcast(root: usize) -> Op {
    Op {
        op: "broadcast",
        dtype: Some("float"),
        count: 1024,
        peer: Some(root),
        reduction: None,
    }
}

fn all_gather() -> Op {
    Op {
        op: "all_gather",
        dtype: Some("float"),
        count: 256,
        peer: None,
        reduction: None,
    }
}

/// Rank `rank`'s dump (this crate's JSON) of `ops`, numbered from `first`;
/// everything before `completed` completed, the rest pending.
fn rank_dump(rank: usize, first: u64, ops: &[Op], completed: u64) -> Value {
    let records: Vec<Value> = ops
        .iter()
        .zip(first..)
        .map(|(op, n)| {
            json!({
                "seq": n, "collective_seq": n, "p2p_seq": null, "op": op.op, "dtype": op.dtype,
                "count": op.count, "output_count": op.count, "reduction": op.reduction,
                "peer": op.peer, "timeout_ms": 5000, "thread": 7, "devices": [0],
                "enqueued_us": n, "finished_us": null,
                "state": if n < completed { "completed" } else { "pending" },
            })
        })
        .collect();
    let last = (first + ops.len() as u64).checked_sub(1);
    json!({
        "group": "trainer", "generation": 0, "rank": rank, "world_size": WORLD,
        "reason": "on request: \"hang\"", "epoch_unix_us": 0, "dumped_us": 0, "pid": 1,
        "nccl_version": "2.28.3", "last_enqueued": last, "last_completed": completed.checked_sub(1),
        "peers": [], "lagging": [], "total_recorded": first + ops.len() as u64, "ops": records,
        "threads": {"7": "trainer"},
    })
}

/// `ISSUED` all_reduces of 1024 floats.
fn steady() -> Vec<Op> {
    (0..ISSUED).map(|_| all_reduce(1024)).collect()
}

/// Writes every rank's dump into a fresh folder.
fn folder(dumps: &[(usize, Value)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rank, dump) in dumps {
        let path = dir.path().join(format!("rank{rank}.json"));
        std::fs::write(path, serde_json::to_string_pretty(dump).unwrap()).unwrap();
    }
    dir
}

/// Ranks 0-2 issue `steady()`; rank `odd` issues it with collective 57
/// replaced by `instead`.
fn one_rank_differs(odd: usize, instead: Op) -> tempfile::TempDir {
    let dumps: Vec<(usize, Value)> = (0..WORLD)
        .map(|rank| {
            let mut ops = steady();
            if rank == odd {
                ops[57] = instead.clone();
            }
            (rank, rank_dump(rank, 0, &ops, 57))
        })
        .collect();
    folder(&dumps)
}

fn first_mismatch(dir: &Path) -> String {
    let analysis = analysis::analyze(dir).unwrap();
    assert!(analysis.unreadable.is_empty(), "{analysis}");
    assert_eq!(analysis.reports.len(), 1, "{analysis}");
    let report = &analysis.reports[0];
    assert_eq!(report.comparison.matched, Some((0, 56)), "{analysis}");
    let text = analysis.to_string();
    assert!(
        text.contains("collectives #0-#56 (57 collectives) alike"),
        "{text}"
    );
    let divergence = report.comparison.divergence.as_ref().expect("a mismatch");
    assert_eq!(divergence.collective_seq, 57);
    assert!(
        text.contains(&format!("first mismatch: {divergence}")),
        "{text}"
    );
    divergence.to_string()
}

#[test]
fn each_kind_of_mismatch_is_named_with_the_rank_and_the_collective() {
    let count = first_mismatch(one_rank_differs(3, all_reduce(1025)).path());
    assert_eq!(
        count,
        "rank 3 issued all_reduce(float x 1025, sum) as collective #57; \
         ranks 0-2 issued all_reduce(float x 1024, sum) (the element count differs)"
    );
    let int32 = Op {
        dtype: Some("int32"),
        ..all_reduce(1024)
    };
    let dtype = first_mismatch(one_rank_differs(3, int32).path());
    assert!(
        dtype.starts_with("rank 3 issued all_reduce(int32 x 1024, sum) as collective #57")
            && dtype.ends_with("(the data type differs)"),
        "{dtype}"
    );
    let op = first_mismatch(one_rank_differs(0, broadcast(0)).path());
    assert_eq!(
        op,
        "rank 0 issued broadcast(float x 1024, root 0) as collective #57; \
         ranks 1-3 issued all_reduce(float x 1024, sum) (the operation differs)"
    );
    let max = Op {
        reduction: Some("max"),
        ..all_reduce(1024)
    };
    let reduction = first_mismatch(one_rank_differs(1, max).path());
    assert!(
        reduction.starts_with("rank 1 issued all_reduce(float x 1024, max)")
            && reduction.contains("ranks 0, 2-3 issued all_reduce(float x 1024, sum)")
            && reduction.ends_with("(the reduction differs)"),
        "{reduction}"
    );
    // Roots: every rank broadcasts from rank 0, but rank 2 from rank 1.
    let dumps: Vec<(usize, Value)> = (0..WORLD)
        .map(|rank| {
            let mut ops: Vec<Op> = (0..ISSUED).map(|_| broadcast(0)).collect();
            if rank == 2 {
                ops[57] = broadcast(1);
            }
            (rank, rank_dump(rank, 0, &ops, 57))
        })
        .collect();
    let root = first_mismatch(folder(&dumps).path());
    assert_eq!(
        root,
        "rank 2 issued broadcast(float x 1024, root 1) as collective #57; \
         ranks 0-1, 3 issued broadcast(float x 1024, root 0) (the root differs)"
    );
}

#[test]
fn a_skipped_collective_shows_where_the_ranks_part() {
    // Mixed operations: rank 3 skips collective 57, so its #57 is the
    // others' #58.
    let mixed: Vec<Op> = (0..ISSUED)
        .map(|n| match n % 3 {
            0 => all_reduce(1024),
            1 => all_gather(),
            _ => broadcast(0),
        })
        .collect();
    let mut skipped = mixed.clone();
    skipped.remove(57);
    let mut dumps: Vec<(usize, Value)> = (0..3).map(|r| (r, rank_dump(r, 0, &mixed, 57))).collect();
    dumps.push((3, rank_dump(3, 0, &skipped, 57)));
    let text = first_mismatch(folder(&dumps).path());
    assert_eq!(
        text,
        "rank 3 issued all_gather(float x 256) as collective #57; \
         ranks 0-2 issued all_reduce(float x 1024, sum) (the operation differs)"
    );
    // The same operation throughout: the ranks agree until rank 3 runs
    // out, one collective early.
    let mut short = steady();
    short.pop();
    let mut dumps: Vec<(usize, Value)> = (0..3)
        .map(|r| (r, rank_dump(r, 0, &steady(), 59)))
        .collect();
    dumps.push((3, rank_dump(3, 0, &short, 59)));
    let dir = folder(&dumps);
    let report = analysis::analyze(dir.path()).unwrap().reports.remove(0);
    assert_eq!(report.comparison.matched, Some((0, 58)));
    assert_eq!(
        report.comparison.divergence.unwrap().to_string(),
        "rank 3 did not issue collective #59 (last issued: #58); \
         ranks 0-2 issued all_reduce(float x 1024, sum)"
    );
}

#[test]
fn missing_and_truncated_dumps_are_reported_without_a_panic() {
    let mut dumps: Vec<(usize, Value)> = (0..3)
        .map(|r| (r, rank_dump(r, 0, &steady(), 57)))
        .collect();
    dumps.remove(2); // rank 2 left no dump; rank 3 is truncated below
    let dir = folder(&dumps);
    let whole = serde_json::to_string_pretty(&rank_dump(3, 0, &steady(), 57)).unwrap();
    std::fs::write(dir.path().join("rank3.json"), &whole[..whole.len() / 2]).unwrap();
    std::fs::write(dir.path().join("notes.json"), "").unwrap();
    let analysis = analysis::analyze(dir.path()).unwrap();
    let text = analysis.to_string();
    assert!(!analysis.is_clean());
    let unreadable: Vec<Option<usize>> = analysis.unreadable.iter().map(|u| u.rank).collect();
    assert_eq!(unreadable, [None, Some(3)], "{text}");
    assert!(text.contains("unreadable (rank 3): "), "{text}");
    assert!(text.contains("EOF while parsing"), "{text}");
    let report = &analysis.reports[0];
    assert_eq!(report.missing, [2, 3]);
    assert!(
        text.contains("missing: no readable dump of ranks 2-3"),
        "{text}"
    );
    // The ranks that did dump agree.
    assert_eq!(report.comparison.divergence, None);
    assert!(text.contains("no mismatch among ranks 0-1"), "{text}");
    assert!(
        text.contains("oldest not completed: all_reduce(float x 1024, sum) #57 (pending)"),
        "{text}"
    );
    // An empty folder, and one with nothing but an unreadable file.
    let empty = tempfile::tempdir().unwrap();
    assert!(analysis::analyze_tree(empty.path()).unwrap().is_empty());
    let garbage = folder(&[]);
    std::fs::write(garbage.path().join("rank0.json"), "{\"group\": 5}").unwrap();
    let analysis = analysis::analyze(garbage.path()).unwrap();
    assert!(analysis.reports.is_empty());
    assert!(
        analysis.to_string().contains("no readable dump"),
        "{analysis}"
    );
}

/// GPU times (`gpu_duration_us`) read back, in the text (the sum and the
/// longest per rank) and the JSON; a rank whose dump has none (an older
/// dump, or no timing) has no such line.
#[test]
fn gpu_times_are_read_back_and_summed_per_rank() {
    let timed = |rank: usize| {
        let mut dump = rank_dump(rank, 0, &steady(), ISSUED);
        for (n, op) in dump["ops"].as_array_mut().unwrap().iter_mut().enumerate() {
            op["gpu_duration_us"] = json!(if n == 10 { 300.0 } else { 12.0 });
        }
        (rank, dump)
    };
    let mut dumps: Vec<(usize, Value)> = (0..3).map(timed).collect();
    dumps.push((3, rank_dump(3, 0, &steady(), ISSUED)));
    let dir = folder(&dumps);
    let analysis = analysis::analyze(dir.path()).unwrap();
    let text = analysis.to_string();
    let line = "GPU time: 60 timed operations, 1.008 ms on the GPU in all, \
                the longest all_reduce #10 (0.300 ms)";
    assert_eq!(text.matches(line).count(), 3, "{text}");
    assert_eq!(text.matches("GPU time:").count(), 3, "{text}");
    let report = &analysis.reports[0];
    let rank0 = &report.dumps[&0];
    assert_eq!(
        rank0.ops[10].gpu_duration,
        Some(std::time::Duration::from_micros(300))
    );
    assert_eq!(report.dumps[&3].ops[10].gpu_duration, None);
    let json = serde_json::to_value(&analysis).unwrap();
    let written = &json["reports"][0]["dumps"]["0"]["ops"][10]["gpu_duration_us"];
    assert_eq!(written, &json!(300.0), "{json}");
}

#[test]
fn rings_that_forgot_more_are_compared_where_all_remember() {
    // Rank 0's ring kept collectives 10-59 only; rank 1 diverges at 5,
    // which rank 0 no longer has: the comparison starts at 10.
    let mut diverged = steady();
    diverged[5] = all_reduce(1);
    let dumps = [
        (0, rank_dump(0, 10, &steady()[10..], 60)),
        (1, rank_dump(1, 0, &diverged, 60)),
    ];
    let report = analysis::analyze(folder(&dumps).path())
        .unwrap()
        .reports
        .remove(0);
    assert_eq!(report.comparison.matched, Some((10, 59)));
    assert_eq!(report.comparison.divergence, None);
    assert_eq!(report.missing, [2, 3]);
}

#[test]
fn first_divergence_takes_records_from_anywhere() {
    let issued = |seq: u64, count: usize| Issued {
        collective_seq: seq,
        op: "all_reduce".into(),
        dtype: Some("float".into()),
        count,
        root: None,
        reduction: Some("sum".into()),
    };
    let mut by_rank = std::collections::BTreeMap::new();
    by_rank.insert(0, vec![issued(1, 8), issued(0, 8)]);
    by_rank.insert(1, vec![issued(0, 8), issued(1, 9)]);
    let divergence = first_divergence(&by_rank).unwrap();
    assert_eq!(divergence.collective_seq, 1);
    // A tie: the lowest rank's collective is the one expected.
    assert_eq!(divergence.expected_ranks, [0]);
    assert_eq!(divergence.others[0].rank, 1);
    by_rank.insert(1, vec![issued(0, 8), issued(1, 8)]);
    assert_eq!(first_divergence(&by_rank), None);
    assert_eq!(first_divergence(&Default::default()), None);
}

/// Incident folders as the writer lays them out, read by the
/// `nccl-frtrace` binary: its exit status says whether the ranks agree.
#[test]
fn nccl_frtrace_reads_a_dump_folder_incident_by_incident() {
    let dir = tempfile::tempdir().unwrap();
    let write = |incident: &str, rank: usize, ops: &[Op]| {
        let folder = dir.path().join(incident);
        std::fs::create_dir_all(&folder).unwrap();
        let dump = serde_json::to_string(&rank_dump(rank, 0, ops, 2)).unwrap();
        std::fs::write(folder.join(format!("rank{rank}.json")), dump).unwrap();
    };
    for rank in 0..WORLD {
        write("trainer-g0-clean", rank, &[all_reduce(1024), broadcast(0)]);
        let odd = if rank == 1 {
            all_reduce(1025)
        } else {
            all_reduce(1024)
        };
        write("trainer-g0-odd", rank, &[odd, broadcast(0)]);
    }
    let run = |folder: &Path| {
        let (status, stdout, _) = frtrace(&[folder.as_os_str()]);
        (status, stdout)
    };
    let (status, clean) = run(&dir.path().join("trainer-g0-clean"));
    assert_eq!(status, Some(0), "{clean}");
    assert!(clean.contains("no mismatch among ranks 0-3"), "{clean}");
    // The dump folder: each incident in turn.
    let (status, both) = run(dir.path());
    assert_eq!(status, Some(1), "{both}");
    assert!(both.contains("trainer-g0-clean:"), "{both}");
    assert!(
        both.contains(
            "first mismatch: rank 1 issued all_reduce(float x 1025, sum) as collective #0; \
             ranks 0, 2-3 issued all_reduce(float x 1024, sum) (the element count differs)"
        ),
        "{both}"
    );
    let (status, missing, error) =
        frtrace(&["--json".as_ref(), dir.path().join("nowhere").as_os_str()]);
    assert_eq!(status, Some(2), "{missing}");
    assert!(error.contains("nowhere: "), "{error}");
}

/// Runs the `nccl-frtrace` binary with `args`: its exit status, its
/// output and its error output.
fn frtrace(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nccl-frtrace"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `nccl-frtrace --json DIR` reads DIR (not `--json` as a folder) and
/// prints the analysis as JSON, of dumps laid out by the crate's own
/// writer: the missing rank, the divergence and every dump field are
/// there.
#[test]
fn nccl_frtrace_json_prints_the_analysis_as_json() {
    let dir = tempfile::tempdir().unwrap();
    for rank in 0..WORLD - 1 {
        let count = if rank == 2 { 2048 } else { 1024 };
        let json = rank_dump(rank, 0, &[all_reduce(count), broadcast(0)], 1).to_string();
        let dump = FlightDump::from_json(&json).unwrap();
        write_incident(dir.path(), "hang", &dump).unwrap();
    }
    let (status, stdout, stderr) = frtrace(&["--json".as_ref(), dir.path().as_os_str()]);
    assert_eq!(status, Some(1), "{stdout}{stderr}");
    let analyses: Value = serde_json::from_str(&stdout).unwrap();
    let analyses = analyses.as_array().unwrap();
    assert_eq!(analyses.len(), 1, "{stdout}");
    let report = &analyses[0]["reports"][0];
    assert_eq!(report["group"], "trainer");
    assert_eq!(report["missing"], json!([3]));
    assert_eq!(report["comparison"]["divergence"]["collective_seq"], 0);
    assert_eq!(report["comparison"]["divergence"]["others"][0]["rank"], 2);
    let rank1 = &report["dumps"]["1"];
    assert_eq!(rank1["pid"], 1);
    assert_eq!(rank1["lagging"], json!([]));
    assert_eq!(rank1["ops"][1]["enqueued_us"], 1);
    assert_eq!(rank1["ops"][1]["state"], "pending");
}

/// A dump file cut short is named with what is wrong with it, exit 2.
#[test]
fn nccl_frtrace_names_a_corrupt_dump_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let json = rank_dump(0, 0, &[all_reduce(8)], 1).to_string();
    std::fs::write(dir.path().join("rank0.json"), &json[..json.len() / 2]).unwrap();
    let (status, stdout, stderr) = frtrace(&["--json".as_ref(), dir.path().as_os_str()]);
    assert_eq!(status, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("rank0.json is not a readable dump: EOF"),
        "{stderr}"
    );
    let empty = tempfile::tempdir().unwrap();
    let (status, _, stderr) = frtrace(&[empty.path().as_os_str()]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("no flight-recorder dump"), "{stderr}");
}
