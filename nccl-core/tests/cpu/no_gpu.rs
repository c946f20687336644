//! What nccl-core does on a machine without a GPU, a CUDA driver or NCCL:
//! every entry point answers with an `Error`, never a panic.
//!
//! The tests are written to be right on any machine: CI may point
//! `NCCL_LIBRARY` at a real libnccl (from the `nvidia-nccl-cu13` wheel) and a
//! GPU machine has a CUDA driver, so each test first asks what is present
//! and then checks the answer that fits. No test changes the environment.
//!
//! It also checks the thread-safety contract at compile time:
//! `Communicator: Send + !Sync`, `AbortHandle: Send + Sync + Clone`,
//! `Group: !Send`.

use nccl_core::{
    AbortHandle, Capabilities, Capability, Communicator, Config, DataType, Device, Error, Group,
    ReduceOp, UniqueId, cuda_driver_available, group_depth, library, version,
};

/// Whether the dynamic loader could find a CUDA driver library: in its
/// cache (`ldconfig -p`) or in a folder of `LD_LIBRARY_PATH` (which cargo
/// always sets for tests, so its mere presence says nothing).
fn libcuda_on_loader_path() -> bool {
    let names = ["libcuda.so.1", "libcuda.so"];
    let in_cache = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .unwrap_or_default();
    let in_cache = names.iter().any(|name| in_cache.contains(name));
    let in_env = std::env::var_os("LD_LIBRARY_PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| names.iter().any(|name| dir.join(name).exists()))
    });
    in_cache || in_env
}

#[test]
fn cuda_driver_availability_is_stable() {
    let first = cuda_driver_available();
    assert_eq!(cuda_driver_available(), first);
    if !libcuda_on_loader_path() {
        assert!(
            !first,
            "no libcuda on the loader path, yet cuda_driver_available() is true"
        );
    }
    // Whatever the answer, Device::count agrees on whether a driver exists.
    assert_eq!(matches!(Device::count(), Err(Error::NoCudaDriver)), !first);
}

#[test]
fn device_count_without_a_driver_is_no_cuda_driver() {
    if cuda_driver_available() {
        // A driver is installed: counting must work, or fail as a CUDA error
        // (a driver without a usable GPU), never as NoCudaDriver.
        match Device::count() {
            Ok(count) => {
                let error = Device::new(count).unwrap_err();
                assert_eq!(
                    error.to_string(),
                    format!(
                        "invalid device ordinal: expected 0..{count} (the visible GPUs), got {count}"
                    )
                );
            }
            Err(error) => assert!(
                matches!(
                    error,
                    Error::Cuda {
                        during: "counting devices",
                        ..
                    }
                ),
                "{error:?}"
            ),
        }
    } else {
        assert!(matches!(Device::count(), Err(Error::NoCudaDriver)));
    }
}

#[test]
fn device_new_without_a_driver_is_no_cuda_driver() {
    if cuda_driver_available() {
        // Ordinal usize::MAX is never a device.
        let error = Device::new(usize::MAX).unwrap_err();
        assert!(
            matches!(
                error,
                Error::InvalidArgument {
                    argument: "device ordinal",
                    ..
                } | Error::Cuda { .. }
            ),
            "{error:?}"
        );
    } else {
        for ordinal in [0, 1, usize::MAX] {
            let error = Device::new(ordinal).unwrap_err();
            assert!(matches!(error, Error::NoCudaDriver), "{error:?}");
            assert!(error.to_string().contains("libcuda.so.1"), "{error}");
        }
        assert!(matches!(Device::all(), Err(Error::NoCudaDriver)));
    }
}

#[test]
fn exempting_a_thread_from_captures_needs_a_driver() {
    let result = nccl_core::exempt_thread_from_global_captures();
    if cuda_driver_available() {
        // Before any device was used the driver may refuse (not
        // initialised): a CUDA error, never a panic.
        assert!(
            matches!(result, Ok(()) | Err(Error::Cuda { .. })),
            "{result:?}"
        );
    } else {
        assert!(matches!(result, Err(Error::NoCudaDriver)), "{result:?}");
        // Asked again, the answer is the same (nothing was remembered).
        assert!(matches!(
            nccl_core::exempt_thread_from_global_captures(),
            Err(Error::NoCudaDriver)
        ));
    }
}

#[test]
fn library_loads_or_names_what_to_do() {
    match library() {
        Ok(lib) => {
            let loaded = lib.version();
            assert!(loaded.at_least(2, 0), "loaded libnccl {loaded}");
            assert_eq!(version().unwrap(), loaded);
            assert!(!lib.path().is_empty());
        }
        Err(error) => {
            assert!(matches!(error, Error::Library(_)), "{error:?}");
            let text = error.to_string();
            assert!(text.contains("NCCL_LIBRARY"), "{text}");
            if std::env::var_os("NCCL_LIBRARY").is_none_or(|path| path.is_empty()) {
                assert!(text.contains("libnccl.so.2"), "{text}");
                assert!(
                    text.starts_with("could not load the NCCL library: "),
                    "{text}"
                );
            }
            // The failure is cached: the second call gives the same answer.
            assert_eq!(library().unwrap_err().to_string(), text);
            assert_eq!(version().unwrap_err().to_string(), text);
        }
    }
}

#[test]
fn capabilities_need_the_library_and_nothing_else() {
    match (library(), Capabilities::loaded()) {
        (Ok(lib), Ok(capabilities)) => {
            assert_eq!(capabilities.version(), lib.version());
            for capability in Capability::ALL {
                let has = capabilities.has(capability);
                assert_eq!(capabilities.require(capability).is_ok(), has);
            }
        }
        (Err(library_error), Err(error)) => {
            assert_eq!(error.to_string(), library_error.to_string());
        }
        (library, capabilities) => {
            panic!("library() gave {library:?} but Capabilities::loaded() {capabilities:?}")
        }
    }
}

/// Whether `error` is NCCL's failure of `function`.
fn nccl_failed_in(error: &Error, function: &str) -> bool {
    matches!(error, Error::Nccl { function: failed, .. } if *failed == function)
}

#[test]
fn unique_id_new_never_panics() {
    match (library(), UniqueId::new()) {
        (Err(library_error), Err(error)) => {
            assert!(matches!(error, Error::Library(_)), "{error:?}");
            assert_eq!(error.to_string(), library_error.to_string());
        }
        (Err(library_error), Ok(id)) => {
            panic!("got {id:?} although the library failed: {library_error}")
        }
        (Ok(_), Ok(id)) => {
            assert_ne!(id.as_bytes(), &[0; 128]);
            assert_eq!(id.to_string().parse::<UniqueId>().unwrap(), id);
        }
        // With a library but no usable network interface NCCL may refuse.
        (Ok(_), Err(error)) => {
            assert!(
                nccl_failed_in(&error, "ncclGetUniqueId")
                    || matches!(error, Error::MissingFunction(_)),
                "{error:?}"
            );
        }
    }
}

#[test]
fn group_start_needs_the_library() {
    assert_eq!(group_depth(), 0);
    match (library(), Group::start()) {
        (Err(library_error), Err(error)) => {
            assert!(matches!(error, Error::Library(_)), "{error:?}");
            assert_eq!(error.to_string(), library_error.to_string());
            assert_eq!(group_depth(), 0, "a failed start opens no group");
        }
        (Err(library_error), Ok(_)) => {
            panic!("a group started although the library failed: {library_error}")
        }
        (Ok(_), Ok(group)) => {
            assert_eq!(group_depth(), 1);
            // An empty group ends without work; whatever NCCL answers, the
            // group is closed afterwards.
            let _ = group.end();
            assert_eq!(group_depth(), 0);
        }
        (Ok(_), Err(error)) => {
            assert!(nccl_failed_in(&error, "ncclGroupStart"), "{error:?}");
            assert_eq!(group_depth(), 0);
        }
    }
}

#[test]
fn types_need_no_library() {
    // Values that are pure data work without NCCL or a GPU.
    let config = Config::new().with_blocking(false).with_comm_name("cpu");
    assert!(config.to_raw().is_ok());
    assert_eq!(DataType::Float32.size_bytes(), 4);
    assert_eq!(ReduceOp::Sum.to_string(), "sum");
    assert_eq!(UniqueId::from_bytes([1; 128]).to_string(), "01".repeat(128));
}

// ---- Thread-safety contract, checked by the compiler -------------------

/// Compiles only for `Send` types.
fn assert_send<T: Send>() {}

/// Compiles only for `Send + Sync + Clone` types.
fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

/// Implemented twice for `Sync` types, so naming `some_item` through it is
/// ambiguous (a compile error) exactly when `T: Sync`. The same trick as
/// `static_assertions::assert_not_impl_any!`.
trait AmbiguousIfSync<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

/// As [`AmbiguousIfSync`], for `Send`.
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

/// `Communicator` moves to the thread that drives its GPU but cannot be
/// shared (NCCL forbids concurrent calls on one communicator);
/// `AbortHandle` can be cloned into a watchdog thread and used there while
/// the communicator is blocked; `Group` stays on the thread that opened it
/// (NCCL's group state is per thread). These lines fail to compile if any
/// of that changes.
#[test]
fn thread_safety_contract() {
    assert_send::<Communicator>();
    assert_send_sync_clone::<AbortHandle>();
    assert_send_sync_clone::<Device>();
    assert_send_sync_clone::<UniqueId>();
    assert_send_sync_clone::<Config>();
    assert_send::<Error>();
    let _ = <Communicator as AmbiguousIfSync<_>>::some_item;
    let _ = <Group as AmbiguousIfSend<_>>::some_item;
    let _ = <Group as AmbiguousIfSync<_>>::some_item;
}

#[test]
fn from_raw_refuses_a_null_handle() {
    // SAFETY: a null handle is refused before anything reads it.
    let adopted = unsafe { Communicator::from_raw(std::ptr::null_mut(), &Config::new()) };
    match adopted {
        Err(Error::InvalidArgument {
            argument, given, ..
        }) => assert_eq!((argument, given.as_str()), ("raw", "a null pointer")),
        other => panic!("expected InvalidArgument for a null raw, got {other:?}"),
    }
}
