//! Flight-recorder dumps of real operations at world size N, read by this
//! crate's analysis and, where python3 has torch, by PyTorch's own
//! analyzer (`torch.distributed.flight_recorder.fr_trace`, what
//! `torchfrtrace` runs): the `ranks_*` test that run.sh also runs under
//! `nccl-launch -n 2` and `-n 4`; and torchfrtrace on synthetic dumps of
//! a mismatch.
//!
//! `FR_CHECK_DIR=/some/folder` keeps the dumps there (one incident folder
//! per world size and communicator mode), to run torchfrtrace by hand.

use nccl_group::Diagnostics;
use std::path::{Path, PathBuf};
use std::process::Command;

use nccl_core::ReduceOp;
use nccl_group::analysis;
use nccl_group::dumps::write_incident;
use nccl_group::{CommMode, ProcessGroup};
use nccl_tensor::Tensor;
use nccl_test_support::group::ranks::{COMM_MODES, RankContext, options, tcp_store};
use nccl_test_support::group::{destroy, done, watchdog_drained, world_of_one};
use nccl_test_support::tensor::stream_on_first_gpu;

/// torchfrtrace's arguments, or `None` (after `SKIP`) when python3 cannot
/// import it.
pub(super) fn torchfrtrace() -> Option<Command> {
    let module = "torch.distributed.flight_recorder.fr_trace";
    let importable = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|out| out.status.success());
    if !importable {
        println!("SKIP: python3 cannot import {module} (no torch): torchfrtrace not run");
        return None;
    }
    let mut command = Command::new("python3");
    command.args(["-m", module]);
    Some(command)
}

/// torchfrtrace's exit status and log (it logs to stderr) on `folder`.
pub(super) fn run_torchfrtrace(
    mut command: Command,
    folder: &Path,
    extra: &[&str],
) -> (bool, String) {
    let out = command
        .arg(folder)
        .args(["--prefix", "nccl_trace_rank_"])
        .args(extra)
        .output()
        .expect("python3 runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("torchfrtrace {}:\n{log}", folder.display());
    (out.status.success(), log)
}

/// Every kind of collective a few times, each waited for.
fn mixed_collectives(ctx: &RankContext, group: &ProcessGroup) {
    let (stream, world) = (&ctx.stream, ctx.world());
    let what = |op: &str| format!("{}: {op}", ctx.label());
    let tensor = |len: usize| Tensor::<f32>::zeros(stream, &[len]).expect("a tensor");
    for _ in 0..3 {
        done(
            group.all_reduce(tensor(1024), ReduceOp::Sum, stream),
            &what("all_reduce"),
        );
        done(
            group.all_gather_into_tensor(tensor(256 * world), tensor(256), stream),
            &what("all_gather_into_tensor"),
        );
        done(group.broadcast(tensor(64), 0, stream), &what("broadcast"));
        done(
            group.reduce_scatter_tensor(tensor(128), tensor(128 * world), ReduceOp::Max, stream),
            &what("reduce_scatter_tensor"),
        );
        group
            .barrier(stream)
            .and_then(|work| work.wait())
            .unwrap_or_else(|e| panic!("{}: {e}", what("barrier")));
    }
    stream.synchronize().expect("synchronize");
    // Dumps compare states: wait until the watchdog saw every end.
    watchdog_drained(group, &ctx.label());
}

/// Every rank dumps after the same collectives into one folder; the
/// analysis finds them alike, and so does torchfrtrace.
#[test]
fn ranks_dumps_of_every_rank_read_by_the_analysis_and_torchfrtrace() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    let temporary = tempfile::tempdir().expect("a temporary folder");
    let dir: PathBuf = match (std::env::var_os("FR_CHECK_DIR"), &ctx.ranks.dir) {
        (Some(dir), _) => dir.into(),
        (None, Some(launch)) => launch.join("flight-recorder"),
        (None, None) => temporary.path().to_path_buf(),
    };
    for mode in COMM_MODES {
        let name = format!("fr-check-w{}-{mode:?}", ctx.world());
        let group = ProcessGroup::builder(&name)
            .rank(ctx.rank())
            .world_size(ctx.world())
            .store(std::sync::Arc::clone(&store.store))
            .store_address(store.address.clone())
            .options(options(mode).with_dump_dir(dir.clone()))
            .build()
            .unwrap_or_else(|e| panic!("{}: joining {name}: {e}", ctx.label()));
        mixed_collectives(&ctx, &group);
        let files = group
            .dump_flight_recorder("torch-check")
            .unwrap_or_else(|e| panic!("{}: the dump: {e}", ctx.label()));
        assert!(files.done.exists() && files.torch.is_some(), "{files:?}");
        ctx.meet(&format!("{name}-dumped"));
        if ctx.rank() == 0 {
            let analysis = analysis::analyze(&files.folder).expect("the incident's folder");
            println!("{analysis}");
            assert!(analysis.is_clean(), "{analysis}");
            assert_eq!(
                analysis.reports[0].comparison.matched,
                Some((0, 14)),
                "{analysis}"
            );
            if let Some(command) = torchfrtrace() {
                let (ok, log) = run_torchfrtrace(command, &files.folder, &[]);
                assert!(ok, "torchfrtrace failed on {}", files.folder.display());
                assert!(!log.contains("has errors"), "{log}");
                assert!(!log.contains("Not all ranks"), "{log}");
            }
        }
        ctx.meet(&format!("{name}-read"));
        destroy(&group);
    }
}

/// torchfrtrace on dumps where rank 3 of 4 passed 1025 elements to
/// collective #57 and the others 1024: it names collective 57 (numbered
/// from 0, as this crate's errors) and the sizes, as the analysis does.
/// (Its culprit is whichever rank differs from the first file it loaded,
/// in directory order: rank 3, unless rank 3's file came first.) The
/// records are real (a world of one issued 60 all_reduces); the dumps of
/// four ranks are made from them.
#[test]
fn gpu_torchfrtrace_names_the_collective_of_a_mismatch() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let group = world_of_one("fr-mismatch", options(CommMode::Blocking));
    for _ in 0..60 {
        let tensor = Tensor::<f32>::zeros(&stream, &[1024]).expect("a tensor");
        done(
            group.all_reduce(tensor, ReduceOp::Sum, &stream),
            "all_reduce",
        );
    }
    stream.synchronize().expect("synchronize");
    watchdog_drained(&group, "all_reduce");
    let recorded = group.flight_record();
    let dir = tempfile::tempdir().expect("a temporary folder");
    for rank in 0..4 {
        let mut dump = recorded.clone();
        (dump.rank, dump.world_size) = (rank, 4);
        if rank == 3 {
            dump.ops[57].count = 1025;
            dump.ops[57].output_count = 1025;
        }
        write_incident(dir.path(), "mismatch", &dump).expect("the dump");
    }
    let folder = dir.path().join("fr-mismatch-g0-mismatch");
    let analysis = analysis::analyze(&folder).expect("the folder");
    let divergence = analysis.reports[0].comparison.divergence.clone();
    assert_eq!(divergence.map(|d| d.collective_seq), Some(57), "{analysis}");
    let Some(command) = torchfrtrace() else {
        return;
    };
    let (ok, log) = run_torchfrtrace(command, &folder, &[]);
    assert!(ok, "torchfrtrace failed on {}", folder.display());
    assert!(
        log.contains("Collective sequence number: 57 has errors"),
        "{log}"
    );
    assert!(log.contains("SIZE_OR_SYNTAX_MISMATCH"), "{log}");
    assert!(log.contains("'[[1025]]'"), "{log}");
}
