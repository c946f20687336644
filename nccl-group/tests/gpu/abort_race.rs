//! `ProcessGroup::abort` racing with threads that keep issuing operations
//! on the same group (world size 1). Its own test binary: if the race
//! crashes the process, the other GPU tests still report.
//!
//! Every call must either be enqueued (its work then waits without error
//! or reports one) or be refused with an abort error and hand its tensors
//! back; nothing may crash or hang, and a new group works afterwards. A
//! watchdog exits the process if the scenario hangs.

use nccl_group::Lifecycle;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::ReduceOp;
use nccl_group::{GroupError, GroupOptions, InProcessStore, ProcessGroup};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::world_of_one_on;

const ISSUERS: usize = 4;
const ROUNDS: u64 = 10;
const LEN: usize = 1 << 16;
const HANG_LIMIT: Duration = Duration::from_secs(180);

/// Exits the process (failing the run) if `done` is not set in time.
fn watchdog(done: Arc<AtomicBool>) {
    thread::spawn(move || {
        let start = Instant::now();
        while !done.load(Ordering::Acquire) {
            if start.elapsed() > HANG_LIMIT {
                eprintln!(
                    "FAIL: abort race did not finish within {HANG_LIMIT:?}: a call or the abort hangs"
                );
                std::process::exit(101);
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
}

/// How a racing call ended.
#[derive(Default)]
struct Outcomes {
    enqueued: AtomicUsize,
    refused_by_group: AtomicUsize,
    refused_by_communicator: AtomicUsize,
    wait_errors: AtomicUsize,
}

fn group(store: &Arc<InProcessStore>) -> ProcessGroup {
    world_of_one_on("race", Arc::clone(store), GroupOptions::default())
}

#[test]
fn gpu_abort_races_with_issuing_threads() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let done = Arc::new(AtomicBool::new(false));
    watchdog(done.clone());
    let device = &devices[0];
    let store = Arc::new(InProcessStore::new());
    let data: Vec<f32> = support::test_values(1, LEN)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let outcomes = Outcomes::default();

    for round in 0..ROUNDS {
        let group = group(&store);
        let stream = device.new_stream().expect("stream");
        // Create the communicator before the race.
        let t = Tensor::from_host(&stream, &data, &[LEN]).unwrap();
        let t = group
            .all_reduce(t, ReduceOp::Sum, &stream)
            .expect("first all_reduce")
            .wait()
            .expect("wait");
        assert_eq!(t.to_vec(&stream).unwrap(), data);

        thread::scope(|scope| {
            for issuer in 0..ISSUERS {
                let (group, outcomes, data) = (&group, &outcomes, &data);
                scope.spawn(move || {
                    let stream = device.new_stream().expect("stream");
                    let mut input = Tensor::from_host(&stream, data, &[LEN]).unwrap();
                    let mut output = Tensor::<f32>::zeros(&stream, &[LEN]).unwrap();
                    loop {
                        let result = if issuer % 2 == 0 {
                            group.all_gather_into_tensor(output, input, &stream)
                        } else {
                            group.all_to_all_single(output, input, &stream)
                        };
                        match result {
                            Ok(work) => {
                                outcomes.enqueued.fetch_add(1, Ordering::Relaxed);
                                match work.wait() {
                                    Ok((o, i)) => (output, input) = (o, i),
                                    Err(_) => {
                                        outcomes.wait_errors.fetch_add(1, Ordering::Relaxed);
                                        return;
                                    }
                                }
                            }
                            Err(e) => {
                                match &e.error {
                                    GroupError::Aborted { .. } => {
                                        outcomes.refused_by_group.fetch_add(1, Ordering::Relaxed);
                                    }
                                    // Passed the group's state check just
                                    // before the abort; the communicator
                                    // refused instead.
                                    GroupError::Tensor(nccl_tensor::Error::Core(
                                        nccl_core::Error::Aborted,
                                    )) => {
                                        outcomes
                                            .refused_by_communicator
                                            .fetch_add(1, Ordering::Relaxed);
                                    }
                                    other => panic!(
                                        "round {round} issuer {issuer}: unexpected error: {other}"
                                    ),
                                }
                                let (o, i) = e.buffers;
                                assert_eq!(o.len(), LEN);
                                assert_eq!(
                                    i.to_vec(&stream).unwrap(),
                                    *data,
                                    "the input comes back intact"
                                );
                                return;
                            }
                        }
                    }
                });
            }
            thread::sleep(Duration::from_millis(1 + round * 3));
            group.abort().unwrap();
        });

        // After the race every call is refused by the group.
        let t = Tensor::from_host(&stream, &data, &[LEN]).unwrap();
        let e = group
            .all_reduce(t, ReduceOp::Sum, &stream)
            .expect_err("refused after abort");
        assert!(
            matches!(e.error, GroupError::Aborted { .. }),
            "{:?}",
            e.error
        );
    }

    // A new group on the same device still works.
    let fresh = group(&store);
    let stream = device.new_stream().expect("stream");
    let (out, _) = fresh
        .all_gather_into_tensor(
            Tensor::<f32>::zeros(&stream, &[LEN]).unwrap(),
            Tensor::from_host(&stream, &data, &[LEN]).unwrap(),
            &stream,
        )
        .expect("all_gather on a fresh group")
        .wait()
        .expect("wait");
    assert_eq!(out.to_vec(&stream).unwrap(), data);
    stream.synchronize().expect("healthy stream");
    done.store(true, Ordering::Release);
    println!(
        "abort race: {} enqueued, {} refused by the group, {} refused by the communicator, {} wait errors",
        outcomes.enqueued.load(Ordering::Relaxed),
        outcomes.refused_by_group.load(Ordering::Relaxed),
        outcomes.refused_by_communicator.load(Ordering::Relaxed),
        outcomes.wait_errors.load(Ordering::Relaxed),
    );
}
