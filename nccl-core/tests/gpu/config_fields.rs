//! Every `Config` option on a real communicator: each one set alone on a
//! world-size-1 communicator of the loaded libnccl, which creates it when
//! its release knows the option and otherwise refuses it before NCCL is
//! called, naming the option, its field and the release that introduced
//! it (on the GPU machine's 2.28.3: every option from 2.29.2 on). NCCL
//! exposes no getter of a communicator's `ncclConfig_t` (nor of any of its
//! fields), so no option can be read back: a created communicator whose
//! asynchronous error is `ncclSuccess` is the check.

use nccl_core::{Communicator, Config, Error, Status, UniqueId};
use nccl_test_support::config::every_option;
use nccl_test_support::raw::one_gpu;

/// The option of `config`, with a value NCCL takes on any single GPU:
/// `every_option`'s own, except `with_collnet` and `with_net_name`, which are set
/// to what a machine without CollNet or InfiniBand has.
fn on_one_gpu(method: &str, config: Config) -> Config {
    match method {
        "with_collnet" => Config::new().with_collnet(false),
        "with_net_name" => Config::new().with_net_name("Socket"),
        _ => config,
    }
}

#[test]
fn gpu_every_config_option_is_created_or_refused_by_the_loaded_release() {
    let Some(device) = one_gpu() else { return };
    let loaded = nccl_core::version().unwrap();
    println!("loaded libnccl {loaded}");
    let mut refused = Vec::new();
    for (config, method, field, since) in every_option() {
        let config = on_one_gpu(method, config);
        let made =
            Communicator::with_config(device.clone(), 1, UniqueId::new().unwrap(), 0, &config);
        if since <= loaded {
            let comm = made.unwrap_or_else(|e| panic!("{method} on {loaded}: {e}"));
            assert_eq!(comm.async_error().unwrap(), Status::Success, "{method}");
            continue;
        }
        let error = match made {
            Err(error) => error,
            Ok(_) => panic!("{method} needs {since}, but {loaded} created the communicator"),
        };
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "Config::{method} (ncclConfig_t's {field}) needs NCCL {since}"
            )),
            "{message}"
        );
        match error {
            Error::Unsupported {
                needed, loaded: l, ..
            } => assert_eq!((needed, l), (since, loaded)),
            other => panic!("expected Error::Unsupported, got {other:?}"),
        }
        refused.push(method);
    }
    println!("refused by {loaded}: {refused:?}");
    if loaded == nccl_core::Version::new(2, 28, 3) {
        assert_eq!(
            refused,
            [
                "with_graph_usage_mode",
                "with_rma_ctxs",
                "with_max_p2p_peers",
                "with_graph_stream_ordering",
                "with_launch_order_implicit",
                "with_rma_signals",
                "with_rma_eager_init",
                "with_host_cft_mode",
                "with_nvls_host_mode",
            ]
        );
    }
}
