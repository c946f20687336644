//! The manifest checks on fabricated `cargo metadata` samples.

use serde_json::{Value, json};

use super::{api_features, forwarding_gaps, msrv_violations, publishable_members};

/// A package of a metadata sample.
fn package(name: &str, version: &str, rust_version: Option<&str>) -> Value {
    json!({
        "name": name,
        "version": version,
        "id": format!("{name}@{version}"),
        "rust_version": rust_version,
        "publish": null,
        "features": {},
        "dependencies": [],
    })
}

/// A sample whose members are the packages named in `members`.
fn metadata(packages: Vec<Value>, members: &[&str]) -> Value {
    let ids: Vec<Value> = packages
        .iter()
        .filter(|p| members.contains(&p["name"].as_str().unwrap()))
        .map(|p| p["id"].clone())
        .collect();
    json!({ "packages": packages, "workspace_members": ids })
}

fn workspace_at(rust_version: &str, dependencies: Vec<Value>) -> Value {
    let mut packages = vec![
        package("nccl-core", "0.1.0", Some(rust_version)),
        package("xtask", "0.1.0", Some(rust_version)),
    ];
    packages.extend(dependencies);
    metadata(packages, &["nccl-core", "xtask"])
}

#[test]
fn a_locked_dependency_above_the_workspace_rust_version_is_named() {
    let sample = workspace_at(
        "1.85",
        vec![
            package("libloading", "0.9.1", Some("1.88.0")),
            package("criterion", "0.8.2", Some("1.86")),
            package("half", "2.7.1", Some("1.81")),
            package("no-msrv", "1.0.0", None),
        ],
    );
    let violations = msrv_violations(&sample).unwrap();
    assert_eq!(violations.len(), 2, "{violations:#?}");
    assert!(
        violations[0].starts_with(
            "libloading 0.9.1 needs Rust 1.88.0, above the workspace's rust-version 1.85.0"
        ),
        "{}",
        violations[0]
    );
    assert!(
        violations[1].starts_with("criterion 0.8.2 needs Rust 1.86.0"),
        "{}",
        violations[1]
    );
}

#[test]
fn dependencies_at_or_below_the_workspace_rust_version_pass() {
    let sample = workspace_at(
        "1.88",
        vec![
            package("libloading", "0.9.1", Some("1.88.0")),
            package("criterion", "0.8.2", Some("1.86")),
        ],
    );
    assert_eq!(msrv_violations(&sample).unwrap(), Vec::<String>::new());
}

#[test]
fn members_that_disagree_or_omit_a_rust_version_are_refused() {
    let disagree = metadata(
        vec![
            package("nccl-core", "0.1.0", Some("1.88")),
            package("xtask", "0.1.0", Some("1.85")),
        ],
        &["nccl-core", "xtask"],
    );
    let error = msrv_violations(&disagree).unwrap_err().to_string();
    assert!(
        error.contains("different rust-versions: 1.85, 1.88"),
        "{error}"
    );

    let missing = metadata(vec![package("nccl-core", "0.1.0", None)], &["nccl-core"]);
    let error = msrv_violations(&missing).unwrap_err().to_string();
    assert!(
        error.contains("nccl-core declares no rust-version"),
        "{error}"
    );

    let malformed = workspace_at("1.88", vec![package("odd", "1.0.0", Some("1.x"))]);
    let error = msrv_violations(&malformed).unwrap_err().to_string();
    assert!(error.contains("odd 1.0.0"), "{error}");
}

/// cudarc with two CUDA versions and the linking modes, a crate that
/// forwards them to cudarc, one that forwards to the first, and the
/// `forwarded` features of a third crate over the first.
fn forwarding_sample(third: Value) -> Value {
    let mut cudarc = package("cudarc", "0.19.10", Some("1.81"));
    cudarc["features"] = json!({
        "cuda-12080": [], "cuda-13000": [], "dynamic-loading": [], "dynamic-linking": [],
        "fallback-dynamic-loading": [], "static-linking": [], "f16": ["dep:half"],
    });
    let forwarding = |to: &str| {
        let mut features = serde_json::Map::new();
        for name in [
            "cuda-12080",
            "cuda-13000",
            "dynamic-loading",
            "dynamic-linking",
            "fallback-dynamic-loading",
            "static-linking",
        ] {
            features.insert(name.into(), json!([format!("{to}/{name}")]));
        }
        Value::Object(features)
    };
    let mut core = package("nccl-core", "0.1.0", Some("1.88"));
    core["features"] = forwarding("cudarc");
    core["dependencies"] = json!([{ "name": "cudarc", "kind": null }]);
    let mut tensor = package("nccl-tensor", "0.1.0", Some("1.88"));
    tensor["features"] = forwarding("nccl-core");
    tensor["dependencies"] = json!([{ "name": "nccl-core", "kind": null }]);
    let mut group = package("nccl-group", "0.1.0", Some("1.88"));
    group["features"] = third;
    group["dependencies"] = json!([{ "name": "nccl-tensor", "kind": null }]);
    let mut benches = package("benches", "0.1.0", Some("1.88"));
    benches["publish"] = json!([]);
    benches["dependencies"] = json!([{ "name": "nccl-core", "kind": null }]);
    let mut sys = package("nccl-sys", "0.1.0", Some("1.88"));
    sys["dependencies"] = json!([{ "name": "libloading", "kind": null }]);
    metadata(
        vec![cudarc, core, tensor, group, benches, sys],
        &[
            "nccl-core",
            "nccl-tensor",
            "nccl-group",
            "benches",
            "nccl-sys",
        ],
    )
}

#[test]
fn every_publishable_crate_over_cudarc_forwards_its_features() {
    let complete = json!({
        "cuda-12080": ["nccl-tensor/cuda-12080"], "cuda-13000": ["nccl-tensor/cuda-13000"],
        "dynamic-loading": ["nccl-tensor/dynamic-loading"],
        "dynamic-linking": ["nccl-tensor/dynamic-linking"],
        "fallback-dynamic-loading": ["nccl-tensor/fallback-dynamic-loading"],
        "static-linking": ["nccl-tensor/static-linking"],
    });
    assert_eq!(
        forwarding_gaps(&forwarding_sample(complete)).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn a_missing_or_unforwarded_cudarc_feature_is_named() {
    // nccl-group, two dependencies away from cudarc, lacks cuda-13000 and
    // has a dynamic-linking that turns on something else.
    let gappy = json!({
        "cuda-12080": ["nccl-tensor/cuda-12080"],
        "dynamic-loading": ["nccl-tensor/dynamic-loading"],
        "dynamic-linking": ["nccl-tensor/dynamic-loading"],
        "fallback-dynamic-loading": ["nccl-tensor/fallback-dynamic-loading"],
        "static-linking": ["nccl-tensor/static-linking"],
    });
    let gaps = forwarding_gaps(&forwarding_sample(gappy)).unwrap();
    assert_eq!(gaps.len(), 2, "{gaps:#?}");
    assert!(
        gaps[0].starts_with("nccl-group lacks cudarc's feature `cuda-13000`"),
        "{}",
        gaps[0]
    );
    assert!(
        gaps[1].starts_with(
            "nccl-group's feature `dynamic-linking` does not pass `dynamic-linking` on"
        ),
        "{}",
        gaps[1]
    );
}

#[test]
fn publish_false_members_are_not_packaged() {
    let names = publishable_members(&forwarding_sample(json!({}))).unwrap();
    assert_eq!(
        names,
        ["nccl-core", "nccl-tensor", "nccl-group", "nccl-sys"]
    );
}

#[test]
fn api_features_leave_out_cudarc_choices_and_default() {
    let mut group = package("nccl-group", "0.1.0", Some("1.88"));
    group["features"] = json!({
        "default": ["cuda-12080", "dynamic-loading", "torch-dumps"],
        "torch-dumps": ["dep:serde-pickle"],
        "tracing": ["dep:tracing"],
        "cuda-12080": ["nccl-tensor/cuda-12080"],
        "cuda-version-from-build-system": [],
        "dynamic-loading": [],
        "static-linking": [],
    });
    let sample = metadata(vec![group], &["nccl-group"]);
    assert_eq!(
        api_features(&sample, "nccl-group").unwrap(),
        ["torch-dumps", "tracing"]
    );
    let error = api_features(&sample, "nccl-gruop").unwrap_err().to_string();
    assert!(error.contains("\"nccl-gruop\""), "{error}");
}
