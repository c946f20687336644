//! Which GPUs a test may use.

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
