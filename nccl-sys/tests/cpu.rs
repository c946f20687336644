//! CPU tests of the run-time loader: no NCCL and no GPU needed.
//!
//! Fake libraries are compiled at test time with `cc -shared -fPIC` (set `CC`
//! to use another compiler), each into its own temporary folder, so tests
//! share nothing and may run in any order. No test changes the environment.
//!
//! Two variables name real libraries (a libnccl loads without a GPU), each
//! checked against the committed bindings when set; `.ci/run` sets both:
//! * `NCCL_SYS_TEST_REAL_LIBRARY`: the pinned release's (the
//!   `nvidia-nccl-cu13` wheel of [`PINNED_HEADER_VERSION`]), which must
//!   export every function;
//! * `NCCL_SYS_TEST_OLD_LIBRARY`: an older release's (CI: 2.28.3), which
//!   must export exactly the functions introduced up to its version, and
//!   report each newer one as missing with the release that introduced it.

use std::ffi::{CStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use nccl_sys::{
    DEFAULT_LIBRARY_NAMES, FUNCTION_NAMES, LoadError, MissingSymbol, NcclLibrary,
    PINNED_HEADER_VERSION, Version, candidates, introduced_in, library, load_first,
};

/// A fake libnccl 2.27.3: it has `ncclGetVersion` and `ncclGetErrorString`
/// but none of the 2.28 functions (`ncclAlltoAll`, ...).
const FAKE_NCCL_2_27_3: &str = r#"
typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4 } ncclResult_t;
ncclResult_t ncclGetVersion(int *version) { *version = 22703; return ncclSuccess; }
const char *ncclGetErrorString(ncclResult_t result) {
    return result == ncclSuccess ? "fake nccl: no error" : "fake nccl: some error";
}
"#;

/// A fake whose `ncclGetVersion` fails with `ncclInternalError` (3).
const FAKE_NCCL_BROKEN_VERSION: &str = r#"
int ncclGetVersion(int *version) { (void)version; return 3; }
"#;

/// A shared library that has nothing to do with NCCL.
const NOT_NCCL: &str = r#"
int not_nccl_answer(void) { return 42; }
"#;

/// Compiles `source` into `<tempdir>/<file_name>`; keep the `TempDir` alive
/// as long as the path is used (a loaded library stays mapped after that).
fn compile_shared_library(file_name: &str, source: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("cannot create a temporary folder");
    let c_file = dir.path().join("fake.c");
    std::fs::write(&c_file, source).expect("cannot write the fake library's C source");
    let library = dir.path().join(file_name);
    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("cc"));
    let output = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "this test compiles a fake libnccl with a C compiler, but `{}` could not be run ({error}); \
                 install gcc (CI has it) or set CC to a C compiler",
                cc.to_string_lossy()
            )
        });
    assert!(
        output.status.success(),
        "`{} -shared -fPIC` failed to build the fake library ({}):\n{}",
        cc.to_string_lossy(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (dir, library)
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Asserts that opening `path` fails with `expected`, in a message that
/// names the path and says `says`.
fn assert_open_refused(path: &Path, expected: LoadError, says: &str) {
    let error = NcclLibrary::open(path).unwrap_err();
    assert_eq!(error, expected);
    let message = error.to_string();
    assert!(message.contains(&display(path)), "{message}");
    assert!(message.contains(says), "{message}");
}

#[test]
fn opening_a_missing_path_is_not_found_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-libnccl.so.2");
    let error = NcclLibrary::open(&missing).unwrap_err();
    let LoadError::NotFound { attempts, .. } = &error else {
        panic!("expected NotFound, got {error:?}");
    };
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].candidate, display(&missing));
    assert!(
        !attempts[0].error.is_empty(),
        "the loader's message is kept"
    );
    let message = error.to_string();
    assert!(message.contains(&display(&missing)), "{message}");
    assert!(message.contains("NCCL_LIBRARY"), "{message}");
}

#[test]
fn a_library_without_nccl_get_version_is_not_nccl() {
    let (_dir, path) = compile_shared_library("libnot-nccl.so", NOT_NCCL);
    let expected = LoadError::NotNccl {
        path: display(&path),
    };
    assert_open_refused(&path, expected, "ncclGetVersion");
}

#[test]
fn a_failing_nccl_get_version_is_a_version_query_error() {
    let (_dir, path) = compile_shared_library("libnccl.so.2", FAKE_NCCL_BROKEN_VERSION);
    let expected = LoadError::VersionQuery {
        path: display(&path),
        code: 3,
    };
    assert_open_refused(&path, expected, "3");
}

#[test]
fn a_missing_symbol_names_the_function_its_release_and_the_loaded_version() {
    let (_dir, path) = compile_shared_library("libnccl.so.2", FAKE_NCCL_2_27_3);
    let nccl = NcclLibrary::open(&path).expect("the fake libnccl loads");
    assert_eq!(nccl.version(), Version::new(2, 27, 3));
    assert_eq!(nccl.path(), display(&path));

    let error = nccl
        .functions()
        .ncclAlltoAll()
        .expect_err("the fake has no ncclAlltoAll");
    assert_eq!(
        error,
        MissingSymbol {
            function: "ncclAlltoAll",
            introduced_in: Some(Version::new(2, 28, 3)),
            loaded: Version::new(2, 27, 3),
        }
    );
    let message = error.to_string();
    for part in ["ncclAlltoAll", "introduced in NCCL 2.28.3", "2.27.3"] {
        assert!(message.contains(part), "{part:?} missing from {message:?}");
    }
    // The other 2.28 functions fail the same way.
    let gather = nccl.functions().ncclGather().unwrap_err();
    assert_eq!(
        (gather.function, gather.introduced_in),
        ("ncclGather", Some(Version::new(2, 28, 3)))
    );
    // So do the functions of the newest releases, each naming its own.
    for (function, release) in [
        ("ncclCommRevoke", Version::new(2, 28, 7)),
        ("ncclCommGrow", Version::new(2, 29, 2)),
        ("ncclCommGetUniqueId", Version::new(2, 29, 2)),
        ("ncclCommSuspend", Version::new(2, 29, 7)),
        ("ncclCommResume", Version::new(2, 29, 7)),
        ("ncclCommMemStats", Version::new(2, 29, 7)),
        ("ncclAllReduceConfig", Version::new(2, 31, 2)),
        ("ncclSetEncryption", Version::new(2, 32, 3)),
    ] {
        let error = missing_function(nccl, function);
        assert_eq!(error.introduced_in, Some(release), "{function}");
        let says = format!("introduced in NCCL {release}");
        assert!(error.to_string().contains(&says), "{error}");
    }
}

#[test]
fn the_symbols_that_exist_keep_working_next_to_a_missing_one() {
    let (_dir, path) = compile_shared_library("libnccl.so.2", FAKE_NCCL_2_27_3);
    let nccl = NcclLibrary::open(&path).expect("the fake libnccl loads");
    let functions = nccl.functions();
    assert!(functions.ncclAlltoAll().is_err());

    let get_error_string = functions
        .ncclGetErrorString()
        .expect("the fake exports ncclGetErrorString");
    // SAFETY: the fake's ncclGetErrorString takes a result code and returns a
    // pointer to a static NUL-terminated string; the library is never unloaded.
    let text = unsafe { CStr::from_ptr(get_error_string(nccl_sys::ncclResult_t::ncclSuccess)) };
    assert_eq!(text.to_str().unwrap(), "fake nccl: no error");
    // SAFETY: as above.
    let text = unsafe {
        CStr::from_ptr(get_error_string(
            nccl_sys::ncclResult_t::ncclInvalidArgument,
        ))
    };
    assert_eq!(text.to_str().unwrap(), "fake nccl: some error");

    let get_version = functions
        .ncclGetVersion()
        .expect("the fake exports ncclGetVersion");
    let mut code = 0;
    // SAFETY: `code` is a valid, writable int for the call.
    let result = unsafe { get_version(&mut code) };
    assert_eq!(result, nccl_sys::ncclResult_t::ncclSuccess);
    assert_eq!(code, 22703);
}

#[test]
fn has_agrees_with_the_accessors() {
    let (_dir, path) = compile_shared_library("libnccl.so.2", FAKE_NCCL_2_27_3);
    let functions = NcclLibrary::open(&path).unwrap().functions();
    assert!(functions.has("ncclGetVersion") && functions.ncclGetVersion().is_ok());
    assert!(functions.has("ncclGetErrorString") && functions.ncclGetErrorString().is_ok());
    assert!(!functions.has("ncclAlltoAll") && functions.ncclAlltoAll().is_err());
    assert!(!functions.has("ncclAllReduce") && functions.ncclAllReduce().is_err());
    assert!(!functions.has("ncclNoSuchFunction"));
    let present: Vec<&str> = FUNCTION_NAMES
        .iter()
        .copied()
        .filter(|name| functions.has(name))
        .collect();
    assert_eq!(present, ["ncclGetVersion", "ncclGetErrorString"]);
}

#[test]
fn load_first_tries_candidates_in_order_and_keeps_every_failure() {
    let dir = tempfile::tempdir().unwrap();
    let missing = [
        dir.path().join("a/libnccl.so.2"),
        dir.path().join("b/libnccl.so"),
    ];
    let error = load_first(&missing).unwrap_err();
    let LoadError::NotFound { attempts, .. } = &error else {
        panic!("expected NotFound, got {error:?}");
    };
    let tried: Vec<&str> = attempts.iter().map(|a| a.candidate.as_str()).collect();
    assert_eq!(tried, [display(&missing[0]), display(&missing[1])]);
    let message = error.to_string();
    assert!(message.contains(&display(&missing[0])), "{message}");
    assert!(message.contains(&display(&missing[1])), "{message}");

    let (_fake_dir, fake) = compile_shared_library("libnccl.so.2", FAKE_NCCL_2_27_3);
    let nccl = load_first(&[missing[0].clone(), fake.clone(), missing[1].clone()])
        .expect("the second candidate loads");
    assert_eq!(nccl.path(), display(&fake));
    assert_eq!(nccl.version(), Version::new(2, 27, 3));
}

#[test]
fn version_codes_in_the_old_layout() {
    // Up to 2.8: X*1000 + Y*100 + Z.
    assert_eq!(Version::from_code(2804), Version::new(2, 8, 4));
    assert_eq!(Version::from_code(2304), Version::new(2, 3, 4));
    assert_eq!(Version::from_code(2899), Version::new(2, 8, 99));
}

#[test]
fn version_codes_in_the_new_layout() {
    // From 2.9: X*10000 + Y*100 + Z.
    assert_eq!(Version::from_code(22803), Version::new(2, 28, 3));
    assert_eq!(Version::from_code(22703), Version::new(2, 27, 3));
    assert_eq!(Version::from_code(20900), Version::new(2, 9, 0));
    assert_eq!(Version::from_code(30000), Version::new(3, 0, 0));
    let v = Version::from_code(22803);
    assert_eq!(v.to_string(), "2.28.3");
    assert!(v.at_least(2, 28) && v.at_least(2, 9) && !v.at_least(2, 29) && !v.at_least(3, 0));
    assert!(Version::from_code(2804) < Version::from_code(20900));
}

#[test]
fn candidates_are_nccl_library_alone_when_set() {
    let path = OsString::from("/opt/nccl/lib/libnccl.so.2");
    assert_eq!(
        candidates(Some(&path)),
        [PathBuf::from("/opt/nccl/lib/libnccl.so.2")]
    );
}

#[test]
fn candidates_are_the_default_names_when_unset_or_empty() {
    let defaults = [PathBuf::from("libnccl.so.2"), PathBuf::from("libnccl.so")];
    assert_eq!(DEFAULT_LIBRARY_NAMES, ["libnccl.so.2", "libnccl.so"]);
    assert_eq!(candidates(None), defaults);
    assert_eq!(candidates(Some(&OsString::new())), defaults);
}

#[test]
fn library_returns_the_same_result_every_time() {
    // Whatever this machine has (usually no libnccl on the loader's path):
    // the second call must give back exactly what the first did.
    let first = library();
    let second = library();
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert!(std::ptr::eq(*a, *b), "two different tables"),
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            if std::env::var_os("NCCL_LIBRARY").is_none_or(|v| v.is_empty())
                && let LoadError::NotFound { attempts, .. } = a
            {
                let tried: Vec<&str> = attempts.iter().map(|a| a.candidate.as_str()).collect();
                assert_eq!(tried, DEFAULT_LIBRARY_NAMES);
            }
        }
        _ => panic!("library() changed its answer: {first:?} then {second:?}"),
    }
}

#[test]
fn every_function_has_the_release_that_introduced_it() {
    let unknown: Vec<&str> = FUNCTION_NAMES
        .iter()
        .copied()
        .filter(|name| introduced_in(name).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "add these to nccl-sys/src/introduced.rs: {unknown:?}"
    );
    assert_eq!(introduced_in("ncclNoSuchFunction"), None);
    // Every release named is one the pinned header is at least as new as.
    for name in FUNCTION_NAMES {
        let release = introduced_in(name).unwrap();
        assert!(
            release <= PINNED_HEADER_VERSION,
            "{name} introduced in {release}, after the pinned header {PINNED_HEADER_VERSION}"
        );
    }
}

/// The error of `function`'s accessor: the library must lack it.
fn missing_function(nccl: &NcclLibrary, function: &str) -> MissingSymbol {
    let error = nccl
        .functions()
        .missing(function)
        .unwrap_or_else(|| panic!("{} exports {function}", nccl.path()));
    assert_eq!(error.function, function);
    assert_eq!(error.loaded, nccl.version());
    error
}

#[test]
fn missing_agrees_with_the_accessors() {
    let (_dir, path) = compile_shared_library("libnccl.so.2", FAKE_NCCL_2_27_3);
    let functions = NcclLibrary::open(&path).unwrap().functions();
    assert_eq!(functions.missing("ncclGetVersion"), None);
    assert_eq!(
        functions.missing("ncclAlltoAll"),
        functions.ncclAlltoAll().err()
    );
    assert_eq!(
        functions.missing("ncclCommRevoke"),
        functions.ncclCommRevoke().err()
    );
    assert_eq!(functions.missing("ncclNoSuchFunction"), None);
}

/// Opens the real library named by `variable`, or says why not and
/// returns `None` when the variable is not set.
fn real_library(variable: &str) -> Option<&'static NcclLibrary> {
    let Some(path) = std::env::var_os(variable).filter(|p| !p.is_empty()) else {
        println!("{variable} is not set: that real libnccl was not checked against the bindings");
        return None;
    };
    Some(
        NcclLibrary::open(&path)
            .unwrap_or_else(|error| panic!("{variable}={}: {error}", Path::new(&path).display())),
    )
}

/// Checks that `nccl` exports exactly the functions introduced up to its
/// version, and that each newer one is missing with its release named.
fn check_functions_against_releases(nccl: &NcclLibrary) {
    let loaded = nccl.version();
    let mut wrong = Vec::new();
    let mut missing = Vec::new();
    for name in FUNCTION_NAMES.iter().copied() {
        let release = introduced_in(name).expect("every function has its release");
        let present = nccl.functions().has(name);
        if present != (release <= loaded) {
            wrong.push(format!(
                "{name} (introduced in {release}) is {}",
                if present { "exported" } else { "missing" }
            ));
        }
        if !present {
            let error = missing_function(nccl, name);
            assert_eq!(error.introduced_in, Some(release), "{name}");
            let message = error.to_string();
            assert!(
                message.contains(&format!("introduced in NCCL {release}"))
                    && message.contains(&loaded.to_string()),
                "{message}"
            );
            missing.push(name);
        }
    }
    assert!(
        wrong.is_empty(),
        "{} (NCCL {loaded}) disagrees with nccl-sys/src/introduced.rs: {wrong:?}",
        nccl.path()
    );
    println!(
        "checked {} (NCCL {loaded}): {} of {} functions present, missing as their releases say: {missing:?}",
        nccl.path(),
        FUNCTION_NAMES.len() - missing.len(),
        FUNCTION_NAMES.len()
    );
}

#[test]
fn the_real_library_matches_the_pinned_header() {
    let Some(nccl) = real_library("NCCL_SYS_TEST_REAL_LIBRARY") else {
        return;
    };
    assert_eq!(
        nccl.version(),
        PINNED_HEADER_VERSION,
        "{} is not the NCCL release the bindings were generated from",
        nccl.path()
    );
    let missing: Vec<&str> = FUNCTION_NAMES
        .iter()
        .copied()
        .filter(|name| !nccl.functions().has(name))
        .collect();
    assert!(missing.is_empty(), "{} lacks {missing:?}", nccl.path());
    check_functions_against_releases(nccl);
}

#[test]
fn an_older_real_library_lacks_exactly_the_newer_functions() {
    let Some(nccl) = real_library("NCCL_SYS_TEST_OLD_LIBRARY") else {
        return;
    };
    assert!(
        nccl.version() < PINNED_HEADER_VERSION,
        "NCCL_SYS_TEST_OLD_LIBRARY={} is NCCL {}, not older than the pinned {PINNED_HEADER_VERSION}",
        nccl.path(),
        nccl.version()
    );
    check_functions_against_releases(nccl);
    // What every caller relies on: the older library still answers.
    let get_version = nccl
        .functions()
        .ncclGetVersion()
        .expect("every release has it");
    let mut code = 0;
    // SAFETY: `code` is a valid, writable int for the call.
    let result = unsafe { get_version(&mut code) };
    assert_eq!(result, nccl_sys::ncclResult_t::ncclSuccess);
    assert_eq!(Version::from_code(code), nccl.version());
}
