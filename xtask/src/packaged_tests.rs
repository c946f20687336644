//! The packaged consumer's parts that need no cargo: the patch it passes,
//! where it looks for a `.crate` file, and unpacking one (with `tar`).

use std::path::Path;
use std::process::Command;

use serde_json::json;

use super::{crate_file, declared_dependencies, patch_config, toml_string, unpack};
use crate::manifests::Published;

fn nccl_group() -> Published {
    Published {
        name: "nccl-group".into(),
        version: "0.2.0".into(),
    }
}

#[test]
fn the_patch_names_the_crate_and_its_unpacked_folder() {
    assert_eq!(
        patch_config(
            "nccl-group",
            Path::new("/ci/target/unpacked/nccl-group-0.2.0")
        )
        .unwrap(),
        r#"patch.crates-io.nccl-group.path = "/ci/target/unpacked/nccl-group-0.2.0""#
    );
}

#[test]
fn quotes_backslashes_and_control_characters_are_escaped() {
    assert_eq!(toml_string("a \"b\" c:\\d\te"), r#""a \"b\" c:\\d\u0009e""#);
}

#[test]
fn the_crate_file_is_in_the_package_folder_under_name_and_version() {
    assert_eq!(
        crate_file(Path::new("target/package-verify"), &nccl_group()),
        Path::new("target/package-verify/package/nccl-group-0.2.0.crate")
    );
}

#[test]
fn the_consumers_declared_dependencies_are_read_by_name() {
    let metadata = json!({ "packages": [{
        "name": "consumer-packaged",
        "dependencies": [{ "name": "nccl-group" }, { "name": "nccl-tensor" }],
    }]});
    assert_eq!(
        declared_dependencies(&metadata).unwrap(),
        ["nccl-group", "nccl-tensor"]
    );

    let two = json!({ "packages": [{ "dependencies": [] }, { "dependencies": [] }] });
    assert_eq!(
        declared_dependencies(&two).unwrap_err().to_string(),
        "expected the consumer's metadata to hold one package, got 2"
    );
}

/// A gzipped tar of `folder` (its files inside `root`) at `file`.
fn pack(root: &Path, folder: &str, file: &Path) {
    let status = Command::new("tar")
        .arg("-czf")
        .arg(file)
        .arg("-C")
        .arg(root)
        .arg(folder)
        .status()
        .unwrap();
    assert!(status.success(), "tar -czf: {status}");
}

#[test]
fn a_crate_file_unpacks_into_its_name_and_version() {
    let scratch = tempfile::tempdir().unwrap();
    let sources = scratch.path().join("sources");
    let package = sources.join("nccl-group-0.2.0");
    std::fs::create_dir_all(package.join("src")).unwrap();
    std::fs::write(package.join("Cargo.toml"), "[package]\n").unwrap();
    std::fs::write(package.join("src/lib.rs"), "//! lib\n").unwrap();
    let file = scratch.path().join("nccl-group-0.2.0.crate");
    pack(&sources, "nccl-group-0.2.0", &file);
    let into = scratch.path().join("unpacked");
    std::fs::create_dir(&into).unwrap();

    let folder = unpack(&file, &into, &nccl_group()).unwrap();
    assert_eq!(folder, into.join("nccl-group-0.2.0"));
    assert_eq!(
        std::fs::read_to_string(folder.join("src/lib.rs")).unwrap(),
        "//! lib\n"
    );
}

#[test]
fn a_crate_file_of_another_package_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let sources = scratch.path().join("sources");
    std::fs::create_dir_all(sources.join("nccl-core-0.2.0")).unwrap();
    std::fs::write(sources.join("nccl-core-0.2.0/Cargo.toml"), "[package]\n").unwrap();
    let file = scratch.path().join("nccl-group-0.2.0.crate");
    pack(&sources, "nccl-core-0.2.0", &file);
    let into = scratch.path().join("unpacked");
    std::fs::create_dir(&into).unwrap();

    let error = unpack(&file, &into, &nccl_group()).unwrap_err().to_string();
    let expected = format!(
        "unpacked without {}",
        into.join("nccl-group-0.2.0/Cargo.toml").display()
    );
    assert!(error.ends_with(&expected), "{error}");
}

#[test]
fn a_file_that_is_no_gzipped_tar_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("nccl-group-0.2.0.crate");
    std::fs::write(&file, "not a tar").unwrap();
    let error = unpack(&file, scratch.path(), &nccl_group())
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("tar -xzmf "), "{error}");
}
