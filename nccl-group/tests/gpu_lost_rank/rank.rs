//! One launched rank of the lost-rank matrix: the loop of all_reduces and
//! its three read paths, the last rank's fault, and each survivor's
//! `lost-rank report:` line.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{
    CommMode, GroupError, GroupOptions, ProcessGroup, RendezvousConfig, StreamMode, Work,
};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::processes::{await_mark, publish};

use super::{
    BLOCKING_WAIT_VAR, COMMS_VAR, FAULT_AT, Fault, LAUNCH_TIMEOUT, MARK_TIMEOUT, OP_TIMEOUT, OPS,
    STREAMS_VAR, VICTIM_CONTINUED, VICTIM_READY,
};

const LEN: usize = 1024;

/// How a rank reads an operation's result.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// `wait()`, then `to_vec`: checked by the tensor's result check.
    WaitThenRead,
    /// `synchronize`, `wait()`, then `to_vec`: checked by `synchronize`.
    SynchronizeThenRead,
    /// `wait()`, a copy on the GPU, then the copy read through cudarc:
    /// unchecked, so a wrong value must be among the failure's suspects.
    GpuCopy,
}

impl Path {
    fn of(op: usize) -> Self {
        match op % 3 {
            0 => Path::WaitThenRead,
            1 => Path::SynchronizeThenRead,
            _ => Path::GpuCopy,
        }
    }
}

struct Rank {
    group: ProcessGroup,
    stream: Arc<CudaStream>,
    mine: Vec<f32>,
    sum: f32,
}

impl Rank {
    fn issue(&self, tensor: Tensor<f32>) -> Result<Work<Tensor<f32>>, GroupError> {
        self.group
            .all_reduce(tensor, ReduceOp::Sum, &self.stream)
            .map_err(|refused| refused.error)
    }

    /// The result of `work` read along `path`: the tensor back, and
    /// whether the values were right.
    fn read(&self, work: Work<Tensor<f32>>, path: Path) -> Result<(Tensor<f32>, bool), GroupError> {
        let values = |tensor: &Tensor<f32>| -> Result<Vec<f32>, GroupError> {
            Ok(tensor.to_vec(&self.stream)?)
        };
        let (tensor, got) = match path {
            Path::WaitThenRead => {
                let tensor = work.wait()?;
                let got = values(&tensor)?;
                (tensor, got)
            }
            Path::SynchronizeThenRead => {
                work.synchronize(LAUNCH_TIMEOUT)?;
                let tensor = work.wait()?;
                let got = values(&tensor)?;
                (tensor, got)
            }
            Path::GpuCopy => {
                let tensor = work.wait()?;
                let cuda = |e| GroupError::from(nccl_core::Error::cuda("the GPU copy")(e));
                let mut copy = self.stream.alloc_zeros::<f32>(LEN).map_err(cuda)?;
                self.stream
                    .memcpy_dtod(tensor.as_slice(), &mut copy)
                    .map_err(cuda)?;
                let got = self.stream.clone_dtoh(&copy).map_err(cuda)?;
                (tensor, got)
            }
        };
        let right = got.iter().all(|&v| v == self.sum);
        Ok((tensor, right))
    }
}

/// This process's part of a cell.
pub fn run(fault: Fault) {
    let ranks = support::ranks();
    let (rank, world) = (ranks.rank, ranks.world);
    let victim = world - 1;
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let comms = if var(COMMS_VAR) == "nonblocking" {
        CommMode::Nonblocking
    } else {
        CommMode::Blocking
    };
    let streams = if var(STREAMS_VAR) == "separate" {
        StreamMode::Separate
    } else {
        StreamMode::Caller
    };
    let dir = ranks
        .dir
        .clone()
        .expect("NCCL_LAUNCH_DIR is set by nccl-launch");
    let options = GroupOptions::default()
        .with_comm_mode(comms)
        .with_stream_mode(streams)
        .with_timeout(Duration::from_secs(30))
        .with_op_timeout(OP_TIMEOUT)
        .with_abort_timeout(Duration::from_secs(5))
        .with_blocking_wait(var(BLOCKING_WAIT_VAR) == "1")
        .without_dump_dir();
    let group = ProcessGroup::builder("lost-rank")
        .options(options)
        .config(&RendezvousConfig::from_env().expect("the launch variables"))
        .build()
        .expect("the group");
    let stream = ranks.device().new_stream().expect("a stream");
    let mine = vec![(rank + 1) as f32; LEN];
    let sum = (world * (world + 1) / 2) as f32;
    let me = Rank {
        group,
        stream,
        mine,
        sum,
    };
    let mut tensor = Tensor::from_host(&me.stream, &me.mine, &[LEN]).expect("upload");
    let mut silent_wrong = 0usize;
    let mut gpu_wrong: Vec<u64> = Vec::new();
    let mut ok_ops = 0usize;
    let mut error = None;
    for op in 0..OPS {
        if rank == victim && op == FAULT_AT && fault == Fault::Exits {
            println!("lost-rank victim: exiting before operation {op}");
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
        tensor.copy_from_host(&me.stream, &me.mine).expect("upload");
        let work = match me.issue(tensor) {
            Ok(work) => work,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        if rank == victim && op == FAULT_AT {
            publish(&dir, VICTIM_READY, "");
            if fault == Fault::Killed {
                std::thread::sleep(LAUNCH_TIMEOUT);
                panic!("the victim was not killed");
            }
            // Stopped here; the launcher continues it once the others failed.
            assert!(
                await_mark(&dir, VICTIM_CONTINUED, MARK_TIMEOUT).is_some(),
                "the victim was not continued"
            );
        }
        let path = Path::of(op);
        match me.read(work, path) {
            Ok((back, right)) => {
                if right {
                    ok_ops += 1;
                } else if matches!(path, Path::GpuCopy) {
                    println!("lost-rank: operation {op}: a wrong value through the GPU copy");
                    gpu_wrong.push(op as u64);
                } else {
                    println!("lost-rank: operation {op}: SILENT WRONG RESULT along {path:?}");
                    silent_wrong += 1;
                }
                tensor = back;
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let Some(error) = error else {
        panic!("rank {rank}: every operation completed although rank {victim} was lost");
    };
    // Exiting while the failure's abort still runs on its thread can
    // crash the process in NCCL's teardown: wait for it, as
    // `Failure::wait_details` documents, then drop the group.
    if let GroupError::Failed(failure) = &error {
        let _ = failure.wait_details(Duration::from_secs(30));
    }
    if rank == victim {
        println!("lost-rank victim: failed cleanly: {error}");
        return;
    }
    // An operation read through the GPU copy is named when the failure
    // marks it suspect, or when it was still pending (failed) then: the
    // failure's operation is the oldest pending one.
    let named = match &error {
        GroupError::Failed(failure) => gpu_wrong
            .iter()
            .filter(|&&seq| {
                failure.suspects.iter().any(|s| s.seq == seq)
                    || failure.op.as_ref().is_some_and(|op| seq >= op.seq)
            })
            .count(),
        _ => 0,
    };
    println!(
        "lost-rank report: ok_ops={ok_ops} silent_wrong={silent_wrong} gpu_wrong={} gpu_named={named} error={error}",
        gpu_wrong.len()
    );
    drop(me);
    publish(&dir, &format!("done.{rank}"), "");
    if rank == 0 {
        // The others' failure reports go through the store this rank hosts.
        for other in 1..victim {
            let _ = await_mark(&dir, &format!("done.{other}"), MARK_TIMEOUT);
        }
    }
}
