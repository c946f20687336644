//! `GroupOptions::with_config` on one GPU: the group's communicators are
//! created with the config (on both kinds of communicator), and an option
//! the loaded libnccl is too old for is refused at the first operation,
//! naming the option and its release (the GPU machine's 2.28.3 lacks
//! `nvls_host_mode`, from 2.32.3). NCCL exposes no getter of a
//! communicator's config, so what is checked is that the communicators
//! NCCL created with it work.

use nccl_core::{CtaPolicy, NvlsHostMode, ReduceOp, Version};
use nccl_group::{CommMode, Config, GroupOptions};
use nccl_tensor::Tensor;
use nccl_test_support::group::faults::all_reduce_works;
use nccl_test_support::group::{destroy, world_of_one};
use nccl_test_support::tensor::stream_on_first_gpu;

#[test]
fn gpu_a_group_s_communicators_are_created_with_its_config() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    for mode in [CommMode::Blocking, CommMode::Nonblocking] {
        // Options every release since 2.27.3 knows.
        let config = Config::new()
            .with_cta_policy(CtaPolicy::Efficiency)
            .with_ctas(1, 4)
            .with_nvls_ctas(2)
            .with_comm_name("group-config");
        let group = world_of_one(
            &format!("config-{mode:?}"),
            GroupOptions::default()
                .with_comm_mode(mode)
                .with_config(config),
        );
        all_reduce_works(&group, &stream);
        destroy(&group);
    }
}

#[test]
fn gpu_an_option_newer_than_the_loaded_nccl_is_refused_at_the_first_operation() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let loaded = nccl_core::version().expect("libnccl");
    let newest = Version::new(2, 32, 3);
    let group = world_of_one(
        "config-newest",
        GroupOptions::default()
            .with_config(Config::new().with_nvls_host_mode(NvlsHostMode::Enable)),
    );
    if loaded >= newest {
        all_reduce_works(&group, &stream);
        destroy(&group);
        return;
    }
    let tensor = Tensor::<f32>::zeros(&stream, &[8]).expect("tensor");
    let error = match group.all_reduce(tensor, ReduceOp::Sum, &stream) {
        Err(refused) => refused.error.to_string(),
        Ok(_) => panic!("nvls_host_mode needs {newest}, but {loaded} created the communicator"),
    };
    let says = format!(
        "Config::with_nvls_host_mode (ncclConfig_t's nvlsHostMode) needs NCCL {newest} or newer, \
         but the loaded libnccl is {loaded}"
    );
    assert!(error.contains(&says), "{error}");
    println!("the error: {error}");
}
