//! CPU tests of `Capabilities`: against fake libraries compiled at test time
//! (`cc -shared -fPIC`, or `CC`), and against the real libraries that CI
//! names (a libnccl loads without a GPU): `NCCL_SYS_TEST_REAL_LIBRARY`, the
//! pinned release's, and `NCCL_SYS_TEST_OLD_LIBRARY`, an older one's (CI:
//! 2.28.3). No test changes the environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use nccl_core::nccl_sys::{FUNCTION_NAMES, NcclLibrary, PINNED_HEADER_VERSION, introduced_in};
use nccl_core::{Capabilities, Capability, Error, ErrorKind, Version};

/// A fake libnccl of version `code` that exports `ncclGetVersion` and one
/// empty function for each of `functions`.
fn fake_library(code: u32, functions: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let mut source =
        format!("int ncclGetVersion(int *version) {{ *version = {code}; return 0; }}\n");
    for function in functions {
        source.push_str(&format!("int {function}(void) {{ return 0; }}\n"));
    }
    let dir = tempfile::tempdir().expect("cannot create a temporary folder");
    let c_file = dir.path().join("fake.c");
    std::fs::write(&c_file, source).expect("cannot write the fake library's C source");
    let library = dir.path().join("libnccl.so.2");
    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("cc"));
    let output = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "this test compiles a fake libnccl with `{}` ({error}); install gcc or set CC",
                cc.to_string_lossy()
            )
        });
    assert!(
        output.status.success(),
        "building the fake library failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (dir, library)
}

fn capabilities_of(path: &Path) -> Capabilities {
    Capabilities::of(NcclLibrary::open(path).expect("the library loads"))
}

/// Every function of 2.32.3's capabilities.
const ALL_FUNCTIONS: [&str; 6] = [
    "ncclCommRevoke",
    "ncclCommShrink",
    "ncclCommGetUniqueId",
    "ncclCommGrow",
    "ncclCommSuspend",
    "ncclCommResume",
];

/// A fake library of version `code` that exports every capability's
/// function (memory statistics too), and its capabilities.
fn exporting_everything(code: u32) -> (tempfile::TempDir, Capabilities) {
    let mut functions = ALL_FUNCTIONS.to_vec();
    functions.push("ncclCommMemStats");
    let (dir, path) = fake_library(code, &functions);
    (dir, capabilities_of(&path))
}

fn assert_unsupported(error: Error, capability: Capability, loaded: Version) {
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    let needed = capability.introduced_in();
    match &error {
        Error::Unsupported {
            feature,
            needed: n,
            loaded: l,
        } => {
            assert_eq!((*n, *l), (needed, loaded));
            assert!(feature.starts_with(capability.name()), "{feature}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&format!("needs NCCL {needed} or newer"))
            && message.contains(&loaded.to_string()),
        "{message}"
    );
}

#[test]
fn the_table_agrees_with_the_bindings() {
    for capability in Capability::ALL {
        for function in capability.functions() {
            assert!(
                FUNCTION_NAMES.contains(function),
                "{capability}: {function} is not in the bindings"
            );
            let release = introduced_in(function).unwrap();
            assert!(
                release <= capability.introduced_in(),
                "{capability} ({}) uses {function}, introduced later in {release}",
                capability.introduced_in()
            );
        }
        assert!(capability.introduced_in() <= PINNED_HEADER_VERSION);
    }
    let names: Vec<&str> = Capability::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "revoke",
            "shrink",
            "grow",
            "suspend/resume",
            "grouped suspend/resume",
            "memory statistics"
        ]
    );
}

#[test]
fn a_symbol_older_than_its_release_does_not_count() {
    // An NCCL-compatible library that reports 2.27.3 yet exports every
    // function: only shrink (2.27.3) counts.
    let (_dir, capabilities) = exporting_everything(22703);
    assert_eq!(capabilities.version(), Version::new(2, 27, 3));
    assert!(capabilities.has(Capability::Shrink));
    for capability in Capability::ALL {
        if capability != Capability::Shrink {
            assert!(!capabilities.has(capability), "{capability}");
            assert_unsupported(
                capabilities.require(capability).unwrap_err(),
                capability,
                Version::new(2, 27, 3),
            );
        }
    }
}

#[test]
fn grouped_suspend_needs_2_30_3_although_its_functions_are_in_2_29_7() {
    let (_dir, capabilities) = exporting_everything(22907);
    for capability in [
        Capability::Revoke,
        Capability::Shrink,
        Capability::Grow,
        Capability::SuspendResume,
        Capability::MemStats,
    ] {
        assert!(capabilities.has(capability), "{capability}");
        assert!(capabilities.require(capability).is_ok());
    }
    assert!(!capabilities.has(Capability::GroupedSuspendResume));
    assert_unsupported(
        capabilities
            .require(Capability::GroupedSuspendResume)
            .unwrap_err(),
        Capability::GroupedSuspendResume,
        Version::new(2, 29, 7),
    );
}

#[test]
fn a_missing_function_in_a_new_enough_library_is_named() {
    // 2.30.3 without ncclCommGrow (a stripped or vendor build).
    let functions: Vec<&str> = ALL_FUNCTIONS
        .iter()
        .copied()
        .filter(|f| *f != "ncclCommGrow")
        .collect();
    let (_dir, path) = fake_library(23003, &functions);
    let capabilities = capabilities_of(&path);
    assert!(!capabilities.has(Capability::Grow));
    let error = capabilities.require(Capability::Grow).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MissingFunction, "{error}");
    let Error::MissingFunction(missing) = &error else {
        panic!("expected MissingFunction, got {error:?}");
    };
    assert_eq!(missing.function, "ncclCommGrow");
    assert_eq!(missing.introduced_in, Some(Version::new(2, 29, 2)));
    assert_eq!(missing.loaded, Version::new(2, 30, 3));
    // No ncclCommMemStats either; the rest is there.
    assert!(!capabilities.has(Capability::MemStats));
    for capability in [
        Capability::Revoke,
        Capability::Shrink,
        Capability::SuspendResume,
        Capability::GroupedSuspendResume,
    ] {
        assert!(capabilities.has(capability), "{capability}");
    }
    assert_eq!(
        capabilities.to_string(),
        "NCCL 2.30.3: revoke yes, shrink yes, grow no (2.29.2), suspend/resume yes, \
         grouped suspend/resume yes, memory statistics no (2.29.7)"
    );
}

/// Opens the real library `variable` names, or `None` when it is not set.
fn real_library(variable: &str) -> Option<&'static NcclLibrary> {
    let Some(path) = std::env::var_os(variable).filter(|p| !p.is_empty()) else {
        println!("{variable} is not set: the capabilities of that real libnccl were not checked");
        return None;
    };
    Some(NcclLibrary::open(&path).unwrap_or_else(|error| panic!("{variable}: {error}")))
}

/// A real library has a capability exactly when its version is at least
/// the capability's release; otherwise `require` names that release.
fn check_real(nccl: &'static NcclLibrary) -> Capabilities {
    let capabilities = Capabilities::of(nccl);
    for capability in Capability::ALL {
        let expected = nccl.version() >= capability.introduced_in();
        assert_eq!(
            capabilities.has(capability),
            expected,
            "{capability} on {}",
            nccl.path()
        );
        if !expected {
            assert_unsupported(
                capabilities.require(capability).unwrap_err(),
                capability,
                nccl.version(),
            );
        }
    }
    println!("{} from {}", capabilities, nccl.path());
    capabilities
}

#[test]
fn the_pinned_real_library_has_every_capability() {
    let Some(nccl) = real_library("NCCL_SYS_TEST_REAL_LIBRARY") else {
        return;
    };
    let capabilities = check_real(nccl);
    assert!(Capability::ALL.iter().all(|c| capabilities.has(*c)));
}

#[test]
fn an_older_real_library_has_what_its_release_has() {
    let Some(nccl) = real_library("NCCL_SYS_TEST_OLD_LIBRARY") else {
        return;
    };
    let capabilities = check_real(nccl);
    if nccl.version() == Version::new(2, 28, 3) {
        // CI's old library: shrink, and nothing newer.
        let has: Vec<Capability> = Capability::ALL
            .into_iter()
            .filter(|c| capabilities.has(*c))
            .collect();
        assert_eq!(has, [Capability::Shrink]);
    }
}
