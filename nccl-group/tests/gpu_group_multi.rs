//! `ProcessGroup` on several GPUs (`multi_gpu_*`, 2+ GPUs): one process
//! driving every local GPU, and several processes (copies of this binary,
//! one per GPU, launched the torchrun way) running collectives and
//! send/recv between them.
//!
//! Every test starts with `require_gpus(n)`: without the GPUs it prints
//! `SKIP: ...` and passes, unless `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_group::Lifecycle;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nccl_core::{Device, ReduceOp};
use nccl_group::{GroupOptions, MAX_LOCAL_DEVICES, ProcessGroup};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::{
    Closed, assert_invalid_argument, blocks_for, convert, done, every_call_refused, launched_role,
    process_scenario, reduce_host, refused, world_of_one,
};
use nccl_test_support::processes::{free_port, spawn_child_test, wait_children};
use nccl_test_support::tensor::{download, poison_values, upload, values};
use nccl_test_support::{assert_same_values, named_tests, within};

fn all_devices() -> Vec<Device> {
    let mut devices = Device::all().expect("devices");
    devices.truncate(MAX_LOCAL_DEVICES);
    devices
}

#[test]
fn multi_gpu_every_op_over_all_local_gpus_in_one_process() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    let devices = all_devices();
    let n = devices.len();
    let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
    let group = world_of_one("all-local-gpus", GroupOptions::default());
    const LEN: usize = 4097;
    // Global rank d is devices[d] (process rank 0 x n devices + index d).
    let inputs: Vec<Vec<f64>> = (0..n)
        .map(|d| support::test_values(d as u64 + 1, LEN))
        .collect();
    let upload_all = |values: &[Vec<f64>]| -> Vec<Tensor<f32>> {
        values
            .iter()
            .zip(&streams)
            .map(|(v, s)| upload(s, &convert::<f32>(v)))
            .collect()
    };
    // Each device's input with an output of `out_len` poisoned elements.
    let with_outputs = |values: &[Vec<f64>], out_len: usize| -> Vec<(Tensor<f32>, Tensor<f32>)> {
        values
            .iter()
            .zip(&streams)
            .map(|(v, s)| {
                (
                    upload(s, &poison_values::<f32>(out_len)),
                    upload(s, &convert::<f32>(v)),
                )
            })
            .collect()
    };
    let sum = reduce_host(ReduceOp::Sum, &inputs);

    let out = done(
        group
            .multi()
            .all_reduce(upload_all(&inputs), ReduceOp::Sum, &streams),
        "all_reduce_multi",
    );
    for (d, t) in out.iter().enumerate() {
        assert_same_values(
            &download(&streams[d], t),
            &convert(&sum),
            &format!("all_reduce on device {d}"),
        );
    }

    let root = n - 1;
    let out = done(
        group.multi().broadcast(upload_all(&inputs), root, &streams),
        "broadcast_multi",
    );
    for (d, t) in out.iter().enumerate() {
        assert_same_values(
            &download(&streams[d], t),
            &convert(&inputs[root]),
            &format!("broadcast from {root} on device {d}"),
        );
    }

    let out = done(
        group
            .multi()
            .reduce(upload_all(&inputs), ReduceOp::Sum, 0, &streams),
        "reduce_multi",
    );
    assert_same_values(
        &download(&streams[0], &out[0]),
        &convert(&sum),
        "reduce to root 0",
    );

    let gathered: Vec<f64> = inputs.concat();
    let pairs = with_outputs(&inputs, n * LEN);
    let out = done(
        group.multi().all_gather_into_tensor(pairs, &streams),
        "all_gather_into_tensor_multi",
    );
    for (d, (o, _)) in out.iter().enumerate() {
        assert_same_values(
            &download(&streams[d], o),
            &convert(&gathered),
            &format!("all_gather on device {d}"),
        );
    }

    // reduce_scatter and all_to_all: each device holds n blocks.
    let big: Vec<Vec<f64>> = (0..n)
        .map(|d| support::test_values(50 + d as u64, n * LEN))
        .collect();
    let pairs = with_outputs(&big, LEN);
    let out = done(
        group
            .multi()
            .reduce_scatter_tensor(pairs, ReduceOp::Sum, &streams),
        "reduce_scatter_multi",
    );
    for (d, (o, _)) in out.iter().enumerate() {
        let blocks: Vec<Vec<f64>> = big
            .iter()
            .map(|v| v[d * LEN..(d + 1) * LEN].to_vec())
            .collect();
        let expected = reduce_host(ReduceOp::Sum, &blocks);
        assert_same_values(
            &download(&streams[d], o),
            &convert(&expected),
            &format!("reduce_scatter block on device {d}"),
        );
    }

    let pairs = with_outputs(&big, n * LEN);
    let out = done(
        group.multi().all_to_all_single(pairs, &streams),
        "all_to_all_single_multi",
    );
    for (d, (o, _)) in out.iter().enumerate() {
        // Block j of device d's output is block d of device j's input.
        let expected = blocks_for(&big, d, LEN);
        assert_same_values(
            &download(&streams[d], o),
            &convert(&expected),
            &format!("all_to_all on device {d}"),
        );
    }

    // The single forms on each device still work next to the list forms
    // (their communicators are separate 1-device keys).
    for (d, s) in streams.iter().enumerate() {
        let data = convert::<f32>(&inputs[d]);
        let t = done(
            group.all_reduce(upload(s, &data), ReduceOp::Sum, s),
            "all_reduce",
        );
        assert_same_values(
            &download(s, &t),
            &data,
            &format!("single all_reduce on device {d}"),
        );
    }
}

#[test]
fn multi_gpu_destroy_a_multi_device_group() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    // The communicators of one key on several local GPUs are finalized by
    // one thread; this must not deadlock.
    within(
        "destroy of a multi-device group",
        Duration::from_secs(120),
        || {
            let devices = all_devices();
            let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
            let group = world_of_one("destroy-multi", GroupOptions::default());
            let data = values::<f32>(1, 1025);
            let tensors = streams.iter().map(|s| upload(s, &data)).collect();
            let out = done(
                group.multi().all_reduce(tensors, ReduceOp::Max, &streams),
                "all_reduce_multi",
            );
            assert_same_values(&download(&streams[0], &out[0]), &data, "all_reduce Max");
            for s in &streams {
                s.synchronize().unwrap();
            }
            group.destroy().expect("destroy");
            every_call_refused(&group, &streams[0], Closed::Destroyed);
        },
    );
}

/// A list-form call whose second device has a bad argument must be refused
/// as a whole, with nothing enqueued on the first device: otherwise the
/// first device's half of the collective is launched when the NCCL group
/// ends and waits forever for the second.
#[test]
fn multi_gpu_list_form_argument_error_enqueues_nothing() {
    let Some(devices) = support::require_gpus(2) else {
        return;
    };
    let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
    let group = world_of_one("list-error", GroupOptions::default());
    const LEN: usize = 1024;
    let n = devices.len();
    let data = values::<f32>(4, LEN);
    let uploads = |values: &[f32]| -> Vec<Tensor<f32>> {
        streams.iter().map(|s| upload(s, values)).collect()
    };
    // Create the communicators with a valid call first.
    let out = done(
        group
            .multi()
            .all_reduce(uploads(&data), ReduceOp::Max, &streams),
        "first all_reduce_multi",
    );
    assert_same_values(
        &download(&streams[1], &out[1]),
        &data,
        "first all_reduce_multi",
    );

    // The last device's output is one element short.
    let pairs: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(d, s)| {
            let out_len = n * LEN - usize::from(d == n - 1);
            (upload(s, &poison_values::<f32>(out_len)), upload(s, &data))
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    {
        let (group, streams) = (group.clone(), streams.clone());
        thread::spawn(move || {
            let outcome = match group.multi().all_gather_into_tensor(pairs, &streams) {
                Ok(_work) => Err("the call was enqueued".to_string()),
                Err(e) => Ok((format!("{:?}", e.error), e.buffers.len())),
            };
            let _ = tx.send(outcome);
        });
    }
    let (error, handed_back) = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => outcome.unwrap_or_else(|e| panic!("all_gather_multi: {e}")),
        Err(_) => {
            group.abort().unwrap();
            panic!(
                "all_gather_multi with a bad argument on device {} blocked for 60 s: \
                 it enqueued the other devices' halves before checking every argument",
                n - 1
            );
        }
    };
    assert!(error.contains("WrongLength"), "{error}");
    assert_eq!(handed_back, n);

    // Nothing is pending: the next collective completes.
    let work = group
        .multi()
        .all_reduce(uploads(&data), ReduceOp::Max, &streams)
        .expect("all_reduce_multi");
    if let Err(error) = work.synchronize(Duration::from_secs(20)) {
        // Cancel the stranded collective so later tests can use the GPUs.
        group.abort().unwrap();
        panic!(
            "after a refused all_gather_multi, the next collective did not complete ({error}): \
             the refused call left part of itself enqueued (run_many issues inside the NCCL \
             group before every device's arguments are checked)"
        );
    }
    let out = work.wait().expect("wait");
    for (d, t) in out.iter().enumerate() {
        assert_same_values(
            &download(&streams[d], t),
            &data,
            &format!("all_reduce_multi on device {d} after the refused call"),
        );
    }
}

#[test]
fn multi_gpu_stream_on_another_device_is_refused() {
    let Some(devices) = support::require_gpus(2) else {
        return;
    };
    let group = world_of_one("wrong-stream", GroupOptions::default());
    let s0 = devices[0].new_stream().unwrap();
    let s1 = devices[1].new_stream().unwrap();
    let data = values::<f32>(9, 100);
    let e = refused(
        group.all_reduce(upload(&s1, &data), ReduceOp::Sum, &s0),
        "tensor on device 1, stream on device 0",
    );
    let message = e.error.to_string();
    assert_invalid_argument(&e.error, "stream");
    assert!(
        message.contains("device 1") && message.contains("device 0"),
        "{message}"
    );
    assert_same_values(&download(&s1, &e.buffers), &data, "tensor handed back");

    let e = refused(
        group.multi().all_reduce(
            vec![upload(&s0, &data), upload(&s1, &data)],
            ReduceOp::Sum,
            &[s1.clone(), s0.clone()],
        ),
        "streams swapped",
    );
    assert_invalid_argument(&e.error, "stream");
    assert_eq!(e.buffers.len(), 2);
}

/// Set in a spawned child: which scenario it runs.
const ROLE_VAR: &str = "NCCL_GROUP_GPU_TEST_ROLE";

/// Set in a spawned child: the device ordinal it uses.
const DEVICE_VAR: &str = "NCCL_GROUP_GPU_TEST_DEVICE";

/// Set in a spawned child: destroy the group at the end.
const DESTROY_VAR: &str = "NCCL_GROUP_GPU_TEST_DESTROY";

/// The child test's name.
const CHILD: &str = "multi_gpu_process_child";

/// How long the children of one scenario may take in all.
const CHILDREN_DEADLINE: Duration = Duration::from_secs(90);

/// The children's store (and rendezvous) timeout, in seconds.
const CHILD_STORE_TIMEOUT_SECS: &str = "20";

/// How each child picks its GPU.
#[derive(Clone, Copy, Debug)]
enum Placement {
    /// Every child sees every GPU and uses GPU `RANK` (torchrun's
    /// `LOCAL_RANK` convention).
    GpuPerRank,
    /// Each child sees only its own GPU (`CUDA_VISIBLE_DEVICES`) as device 0.
    VisibleDevices,
    /// GPU `RANK`, and each child claims to be on a host of its own
    /// (`NCCL_HOSTID`), so NCCL connects the ranks through its network
    /// transport (sockets on loopback) as it would across nodes.
    SimulatedNodes,
}

/// Spawns a copy of this binary running [`CHILD`] per GPU (up to 8),
/// launched the torchrun way, and asserts that all of them pass. Skips
/// with fewer than 2 GPUs.
fn run_children(placement: Placement, destroy: bool) {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    let world = process_count();
    let port = free_port();
    let visible: Option<Vec<String>> = std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let children = (0..world)
        .map(|rank| {
            spawn_child_test(CHILD, |command| {
                command
                    .env(ROLE_VAR, "child")
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", world.to_string())
                    .env("LOCAL_RANK", rank.to_string())
                    .env("MASTER_ADDR", "127.0.0.1")
                    .env("MASTER_PORT", port.to_string())
                    .env("NCCL_RS_STORE_TIMEOUT_SECS", CHILD_STORE_TIMEOUT_SECS)
                    .env_remove("NCCL_RS_STORE")
                    .env_remove("NCCL_RS_STORE_SECRET");
                if destroy {
                    command.env(DESTROY_VAR, "1");
                }
                match placement {
                    Placement::GpuPerRank => {
                        command.env(DEVICE_VAR, rank.to_string());
                    }
                    Placement::SimulatedNodes => {
                        command
                            .env(DEVICE_VAR, rank.to_string())
                            .envs(support::simulated_node_env(rank));
                    }
                    Placement::VisibleDevices => {
                        let gpu = visible
                            .as_ref()
                            .map_or_else(|| rank.to_string(), |v| v[rank].clone());
                        command
                            .env("CUDA_VISIBLE_DEVICES", gpu)
                            .env(DEVICE_VAR, "0");
                    }
                }
            })
        })
        .collect();

    // Once one fails, the others get a short grace period (they may be
    // blocked waiting for it).
    let ended = wait_children(children, CHILDREN_DEADLINE, Duration::from_secs(15));
    let mut failures = Vec::new();
    for (rank, ended) in ended.iter().enumerate() {
        println!(
            "----- child rank {rank} ({placement:?}) stdout -----\n{}",
            ended.stdout
        );
        println!(
            "----- child rank {rank} ({placement:?}) stderr -----\n{}",
            ended.stderr
        );
        if ended.status.is_none() {
            failures.push(format!("rank {rank}: killed after the deadline (hung)"));
        } else if !ended.succeeded() {
            failures.push(format!("rank {rank}: exited with {:?}", ended.status));
        } else if !ended.stdout.contains(&format!("child {rank}: ops ok")) {
            failures.push(format!("rank {rank}: passed without running the scenario"));
        } else if destroy && !ended.stdout.contains(&format!("child {rank}: destroyed")) {
            failures.push(format!("rank {rank}: did not report the destroy"));
        }
    }
    assert!(
        failures.is_empty(),
        "{world} processes ({placement:?}): {}",
        failures.join("; ")
    );
}

fn process_count() -> usize {
    Device::count().expect("device count").min(8)
}

named_tests! {
    /// torchrun's layout: every process sees every GPU and uses GPU `RANK`.
    multi_gpu_processes_gpu_per_rank: run_children(Placement::GpuPerRank, false);
    /// Ray's layout: each process sees only its own GPU, as device 0.
    multi_gpu_processes_visible_devices: run_children(Placement::VisibleDevices, false);
    /// Several nodes, simulated: one process per GPU, each with its own
    /// `NCCL_HOSTID`, so the collectives cross NCCL's network transport.
    multi_gpu_processes_simulated_nodes: run_children(Placement::SimulatedNodes, true);
    /// The same scenario, ending with a collective `destroy` in every process.
    multi_gpu_processes_destroy: run_children(Placement::VisibleDevices, true);
}

/// One process of the multi-process scenarios; only runs when spawned by
/// them (it reports SKIP otherwise).
#[test]
fn multi_gpu_process_child() {
    let not_launched = format!("{CHILD} runs only as a child process of multi_gpu_processes_*");
    let child = |role: &str| (role == "child").then_some(());
    if launched_role(ROLE_VAR, child, &not_launched).is_none() {
        return;
    }
    let rank = support::child_var("RANK");
    let world = support::child_var("WORLD_SIZE");
    let gpu = support::child_var(DEVICE_VAR);
    let group = ProcessGroup::from_env("test")
        .unwrap_or_else(|e| panic!("rank {rank}: ProcessGroup::from_env: {e}"));
    assert_eq!((group.rank(), group.world_size()), (rank, world));
    let device = Device::new(gpu).unwrap_or_else(|e| panic!("rank {rank}: GPU {gpu}: {e}"));
    let stream = device.new_stream().expect("stream");
    process_scenario(&group, &stream, &format!("child {rank}"));
    if std::env::var(DESTROY_VAR).as_deref() == Ok("1") {
        group
            .destroy()
            .unwrap_or_else(|e| panic!("rank {rank}: destroy: {e}"));
        every_call_refused(&group, &stream, Closed::Destroyed);
        println!("child {rank}: destroyed");
    }
}
