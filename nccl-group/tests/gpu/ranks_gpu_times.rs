//! GPU times in the flight recorder (`GroupOptions::gpu_timing`) at world
//! size N: the `ranks_*` test that run.sh also runs under `nccl-launch -n
//! 2` and `-n 4`. Every completed operation of a timed group has a GPU time
//! in the dump (`gpu_duration_us`) and in PyTorch's (`duration_ms`, read
//! back with Python's pickle where python3 is), which torchfrtrace reads
//! where python3 has torch; an untimed group's have none. The GPU bundle
//! builds this test with the `nvtx` feature, so the operations also go
//! through their NVTX ranges.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nccl_core::ReduceOp;
use nccl_group::{CommMode, Diagnostics, FlightDump, OpState, ProcessGroup};
use nccl_tensor::Tensor;
use nccl_test_support::group::ranks::{COMM_MODES, RankContext, options, tcp_store};
use nccl_test_support::group::{done, watchdog_drained};

/// All_reduces per group, of growing sizes (4 KiB to 4 MiB).
const OPERATIONS: u32 = 8;

/// Runs [`OPERATIONS`] all_reduces on `group`, each waited for, then waits
/// until the watchdog saw every one end.
fn timed_all_reduces(ctx: &RankContext, group: &ProcessGroup) {
    for n in 0..OPERATIONS {
        let tensor = Tensor::<f32>::zeros(&ctx.stream, &[1024 << (n + n / 2)]).expect("a tensor");
        done(
            group.all_reduce(tensor, ReduceOp::Sum, &ctx.stream),
            &format!("{}: all_reduce {n}", ctx.label()),
        );
    }
    ctx.stream.synchronize().expect("synchronize");
    watchdog_drained(group, &ctx.label());
}

/// Checks with Python's pickle that every completed entry of the PyTorch
/// dump at `torch` has a `duration_ms` above 0 (`timed`), or none has one.
fn check_torch_durations(torch: &Path, timed: bool) {
    if Command::new("python3").arg("--version").output().is_err() {
        println!("SKIP: python3 is not installed; duration_ms not read back");
        return;
    }
    let script = r#"
import pickle, sys
entries = pickle.load(open(sys.argv[1], "rb"))["entries"]
timed = sys.argv[2] == "timed"
completed = [e for e in entries if e["state"] == "completed"]
assert len(completed) == len(entries) == int(sys.argv[3]), entries
for e in completed:
    if timed:
        assert type(e["duration_ms"]) is float and e["duration_ms"] > 0, e
    else:
        assert "duration_ms" not in e, e
print("durations:", [round(e.get("duration_ms", 0), 4) for e in entries])
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(torch)
        .arg(if timed { "timed" } else { "untimed" })
        .arg(OPERATIONS.to_string())
        .output()
        .expect("python3 runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{log}");
    assert!(out.status.success(), "{log}");
}

/// torchfrtrace on `folder`, where python3 has torch: it reads the dumps
/// and finds no error.
fn torchfrtrace(folder: &Path) {
    if let Some(command) = super::ranks_dumps::torchfrtrace() {
        let (ran, log) = super::ranks_dumps::run_torchfrtrace(command, folder, &[]);
        assert!(ran, "torchfrtrace failed: {log}");
        assert!(!log.contains("has errors"), "{log}");
    }
}

/// Every rank times its all_reduces on the GPU and dumps them; every
/// completed record of the dumps has its GPU time, above 0, and the
/// untimed group's have none.
#[test]
fn ranks_gpu_times_reach_the_dumps_and_torchfrtrace() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    // The launch's folder, which every rank shares, else one of its own.
    let temporary = tempfile::tempdir().expect("a temporary folder");
    let dir = ctx.ranks.dir.as_ref().map_or_else(
        || temporary.path().to_path_buf(),
        |launch| launch.join("gpu-times"),
    );
    let runs = COMM_MODES
        .into_iter()
        .map(|mode| (mode, true))
        .chain([(CommMode::Blocking, false)]);
    for (mode, timed) in runs {
        let name = format!("gpu-times-w{}-{mode:?}-{timed}", ctx.world());
        let group = ProcessGroup::builder(&name)
            .rank(ctx.rank())
            .world_size(ctx.world())
            .store(std::sync::Arc::clone(&store.store))
            .store_address(store.address.clone())
            .options(
                options(mode)
                    .with_gpu_timing(timed)
                    .with_dump_dir(dir.clone()),
            )
            .build()
            .unwrap_or_else(|e| panic!("{}: joining {name}: {e}", ctx.label()));
        timed_all_reduces(&ctx, &group);
        let files = group
            .dump_flight_recorder("gpu-times")
            .unwrap_or_else(|e| panic!("{}: the dump: {e}", ctx.label()));
        let json = std::fs::read_to_string(&files.json).expect("the dump's JSON");
        let dump = FlightDump::from_json(&json).expect("a readable dump");
        assert_eq!(dump.ops.len(), OPERATIONS as usize, "{json}");
        for op in &dump.ops {
            assert_eq!(op.state, OpState::Completed, "{}: {op:?}", ctx.label());
            match op.gpu_duration {
                Some(time) => assert!(timed && time > Duration::ZERO, "{op:?}"),
                None => assert!(!timed, "{}: no GPU time: {op:?}", ctx.label()),
            }
        }
        let torch = files.torch.as_deref().expect("the torch-dumps feature");
        check_torch_durations(torch, timed);
        ctx.meet(&format!("{name}-dumped"));
        if ctx.rank() == 0 && timed {
            let analysis = nccl_group::analysis::analyze(&files.folder).expect("the folder");
            let text = analysis.to_string();
            println!("{text}");
            assert!(analysis.is_clean(), "{text}");
            assert_eq!(text.matches("GPU time: ").count(), ctx.world(), "{text}");
            torchfrtrace(&files.folder);
        }
        ctx.meet(&format!("{name}-read"));
        nccl_test_support::group::destroy(&group);
    }
}
