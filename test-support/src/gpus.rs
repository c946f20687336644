//! Which GPUs a test may use, and a thread for each.

use std::sync::Arc;

use nccl_core::Device;

/// The first `n` devices, or `None` (after printing why) when the machine
/// has fewer and GPUs are not required (`NCCL_TEST_REQUIRE_GPU` is not `1`).
pub fn require_gpus(n: usize) -> Option<Vec<Device>> {
    let found = if nccl_core::cuda_driver_available() {
        Device::count().unwrap_or(0)
    } else {
        0
    };
    if found >= n {
        return Some(
            (0..n)
                .map(|i| Device::new(i).expect("visible device"))
                .collect(),
        );
    }
    let message = format!("needs {n} GPU(s), found {found}");
    if std::env::var("NCCL_TEST_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("NCCL_TEST_REQUIRE_GPU=1 but this test {message}");
    }
    println!("SKIP: {message}");
    None
}

/// Every visible GPU, at least two: [`require_gpus`] of that many, so a
/// machine with one GPU skips.
pub fn require_every_gpu() -> Option<Vec<Device>> {
    require_gpus(Device::count().unwrap_or(0).max(2))
}

/// Runs `body(rank, device)` on a thread of its own (named `rank-<rank>`)
/// for each of `devices`, rank = position in the list, and returns the
/// results in rank order; a rank's panic is raised again here.
pub fn per_device_thread<R: Send + 'static>(
    devices: Vec<Device>,
    body: impl Fn(usize, Device) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let body = Arc::new(body);
    let threads: Vec<_> = devices
        .into_iter()
        .enumerate()
        .map(|(rank, device)| {
            let body = Arc::clone(&body);
            std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .spawn(move || body(rank, device))
                .expect("spawn a rank thread")
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect()
}
