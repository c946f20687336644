//! One launched rank of `gpu_subgroup_loss`: checked rounds on the
//! sub-groups, rank 3's death, and each survivor's `subgroup ...` lines.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use nccl_group::SubGroups;
use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{CommMode, GroupError, GroupOptions, ProcessGroup, RendezvousConfig, SplitPath};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::processes::{await_mark, publish};

const LEN: usize = 1024;
/// Checked rounds on every sub-group before the death, and on the
/// untouched ones after it.
const BEFORE: usize = 5;
const AFTER: usize = 20;
/// The rank that dies.
const LOST: usize = 3;
/// The timeout of the operation that must fail: the lost rank never
/// issues it.
const FAILING_TIMEOUT: Duration = Duration::from_secs(5);
const PATIENCE: Duration = Duration::from_secs(90);

/// This rank's stream, for its checked all_reduces.
struct Rank {
    rank: usize,
    stream: Arc<CudaStream>,
}

impl Rank {
    fn filled(&self, value: f32) -> Tensor<f32> {
        Tensor::from_host(&self.stream, &vec![value; LEN], &[LEN]).expect("upload")
    }

    /// An all_reduce of every member's global rank + 1 on `group`, which
    /// must add up to the sum over its global ranks.
    fn round(&self, group: &ProcessGroup, what: &str) -> Result<(), GroupError> {
        let mine = (self.rank + 1) as f32;
        let expected: f32 = group.global_ranks().iter().map(|&g| (g + 1) as f32).sum();
        let sum = group
            .all_reduce(self.filled(mine), ReduceOp::Sum, &self.stream)
            .map_err(|refusal| refusal.error)?
            .wait()?;
        let got = sum.to_vec(&self.stream)?;
        assert!(
            got.iter().all(|&v| v == expected),
            "rank {}: {what} on {}: expected {expected} everywhere, got {:?}",
            self.rank,
            group.name(),
            &got[..4]
        );
        Ok(())
    }

    /// The sub-group of `lists` this rank got, split from the parent's
    /// communicator.
    fn split(&self, parent: &ProcessGroup, lists: [[usize; 2]; 2]) -> ProcessGroup {
        let sub = parent
            .split_group(&lists)
            .expect("split_group")
            .expect("every rank is in one list");
        let path = sub.subgroup().expect("a sub-group").path();
        if std::env::var_os("NCCL_COMM_SPLIT_SHARE_RESOURCES").is_none() {
            assert_eq!(path, &SplitPath::Split, "rank {}", self.rank);
        }
        sub
    }

    /// The all_reduce on `sub`, which holds the lost rank, must fail, and
    /// the failure must name this rank's and the lost rank's global ranks.
    fn expect_failure(&self, sub: &ProcessGroup) {
        let result = sub
            .with_op_timeout(FAILING_TIMEOUT)
            .all_reduce(self.filled(1.0), ReduceOp::Sum, &self.stream)
            .map_err(|refusal| refusal.error)
            .and_then(|work| work.synchronize(PATIENCE).map(|_| ()));
        let error = result.expect_err("an all_reduce the lost rank never joins cannot succeed");
        // The watchdog may fail the group a moment after a refusal that
        // NCCL's asynchronous error caused.
        let deadline = Instant::now() + PATIENCE;
        let failure = loop {
            if let Some(failure) = sub.failure() {
                break failure;
            }
            assert!(
                Instant::now() < deadline,
                "rank {}: {} never failed (the call's error: {error})",
                self.rank,
                sub.name()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        failure.wait_details(PATIENCE);
        let report = failure.to_string();
        println!("subgroup {} failed: {report}", sub.name());
        let mine = format!("global rank {} of \"loss\")", self.rank);
        let lost = format!("(global ranks [{LOST}] of \"loss\")");
        for want in [&mine, &lost] {
            assert!(
                report.contains(want.as_str()),
                "rank {}: the report lacks {want:?}: {report} (the call's error: {error})",
                self.rank
            );
        }
    }
}

fn options(comms: CommMode) -> GroupOptions {
    GroupOptions::default()
        .with_comm_mode(comms)
        .with_timeout(Duration::from_secs(60))
        .with_op_timeout(Duration::from_secs(30))
        .without_dump_dir()
}

/// This process's part.
pub fn run(comms: CommMode) {
    let ranks = support::ranks();
    let dir = ranks
        .dir
        .clone()
        .expect("NCCL_LAUNCH_DIR is set by nccl-launch");
    let me = Rank {
        rank: ranks.rank,
        stream: ranks.device().new_stream().expect("a stream"),
    };
    let parent = ProcessGroup::builder("loss")
        .options(options(comms))
        .config(&RendezvousConfig::from_env().expect("the launch variables"))
        .build()
        .expect("the group");
    me.round(&parent, "the parent's first all_reduce")
        .expect("the parent's first all_reduce");
    let tp = me.split(&parent, [[0, 1], [2, 3]]);
    let dp = me.split(&parent, [[0, 2], [1, 3]]);
    for n in 0..BEFORE {
        for sub in [&tp, &dp] {
            me.round(sub, &format!("round {n}"))
                .unwrap_or_else(|e| panic!("rank {}: round {n}: {e}", me.rank));
        }
    }
    if me.rank == LOST {
        publish(&dir, "dying", "");
        let _ = std::io::stdout().flush();
        let status = Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status()
            .expect("kill");
        panic!("not killed: {status}");
    }
    await_mark(&dir, "dying", PATIENCE).expect("rank 3's last word");
    // In the same order on every rank: TP, then DP.
    let mut healthy = Vec::new();
    for sub in [&tp, &dp] {
        if sub.global_ranks().contains(&LOST) {
            me.expect_failure(sub);
            continue;
        }
        for n in 0..AFTER {
            me.round(sub, &format!("round {n} after the loss"))
                .unwrap_or_else(|e| panic!("rank {}: {} after the loss: {e}", me.rank, sub.name()));
        }
        assert!(sub.failure().is_none(), "rank {}: {}", me.rank, sub.name());
        println!(
            "subgroup {} untouched: {AFTER} rounds after the loss",
            sub.name()
        );
        healthy.push(sub);
    }
    for sub in healthy {
        sub.destroy().expect("destroy a healthy sub-group");
    }
    drop((tp, dp));
    // The parent holds the lost rank: it is aborted, never destroyed.
    let _ = parent.abort();
    publish(&dir, &format!("done.{}", me.rank), "");
    if me.rank == 0 {
        // Rank 0 hosts the store: it leaves last.
        for other in [1, 2] {
            let _ = await_mark(&dir, &format!("done.{other}"), PATIENCE);
        }
    }
}
