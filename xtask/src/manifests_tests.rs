//! The manifest checks on fabricated `cargo metadata` samples.

use serde_json::{Value, json};

use super::{
    Published, api_features, forwarding_gaps, missing_published_fields, msrv_violations,
    publishable_members, published_closure,
};

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

/// Dependencies that need Rust 1.88.0 (libloading 0.9.1) and 1.86
/// (criterion 0.8.2).
fn needing_1_88_and_1_86() -> Vec<Value> {
    vec![
        package("libloading", "0.9.1", Some("1.88.0")),
        package("criterion", "0.8.2", Some("1.86")),
    ]
}

#[test]
fn a_locked_dependency_above_the_workspace_rust_version_is_named() {
    let mut dependencies = needing_1_88_and_1_86();
    dependencies.extend([
        package("half", "2.7.1", Some("1.81")),
        package("no-msrv", "1.0.0", None),
    ]);
    let violations = msrv_violations(&workspace_at("1.85", dependencies)).unwrap();
    assert_eq!(violations.len(), 2, "{violations:#?}");
    assert!(
        violations[0].starts_with(
            "libloading 0.9.1 needs Rust 1.88.0, above the workspace's rust-version 1.85.0"
        ),
        "{violations:#?}"
    );
    assert!(
        violations[1].starts_with("criterion 0.8.2 needs Rust 1.86.0"),
        "{violations:#?}"
    );
}

#[test]
fn dependencies_at_or_below_the_workspace_rust_version_pass() {
    let sample = workspace_at("1.88", needing_1_88_and_1_86());
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

/// A publishable member with every registry field filled in.
fn described(name: &str) -> Value {
    let mut member = package(name, "0.2.0", Some("1.88"));
    member["description"] = json!(format!("what {name} is"));
    member["license"] = json!("MIT OR Apache-2.0");
    member["repository"] = json!("https://github.com/nccl-rs/nccl-rs");
    member["homepage"] = json!("https://github.com/nccl-rs/nccl-rs");
    member["documentation"] = json!(format!("https://docs.rs/{name}"));
    member
}

#[test]
fn published_crates_with_every_registry_field_pass() {
    let mut internal = package("benches", "0.2.0", Some("1.88"));
    internal["publish"] = json!([]);
    let sample = metadata(
        vec![described("nccl-core"), described("nccl-group"), internal],
        &["nccl-core", "nccl-group", "benches"],
    );
    assert_eq!(
        missing_published_fields(&sample).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn a_missing_registry_field_or_another_crates_docs_is_named() {
    let mut core = described("nccl-core");
    core["repository"] = Value::Null;
    core["homepage"] = json!("");
    let mut group = described("nccl-group");
    group["documentation"] = json!("https://docs.rs/nccl-core");
    let sample = metadata(vec![core, group], &["nccl-core", "nccl-group"]);
    assert_eq!(
        missing_published_fields(&sample).unwrap(),
        [
            "nccl-core has no `repository` (add it to its [package], or `repository.workspace = true`)",
            "nccl-core has no `homepage` (add it to its [package], or `homepage.workspace = true`)",
            "nccl-group's `documentation` is \"https://docs.rs/nccl-core\", expected \"https://docs.rs/nccl-group\"",
        ]
    );
}

fn published(name: &str, version: &str) -> Published {
    Published {
        name: name.into(),
        version: version.into(),
    }
}

#[test]
fn the_closure_follows_normal_and_build_dependencies_not_dev_ones() {
    // nccl-group -> nccl-tensor -> nccl-core -(build)-> nccl-sys; nccl-core
    // also has a dev-dependency on nccl-perf, and benches (not published)
    // depends on everything.
    let mut sample = forwarding_sample(json!({}));
    let mut perf = package("nccl-perf", "0.1.0", Some("1.88"));
    perf["dependencies"] = json!([{ "name": "nccl-group", "kind": null }]);
    let packages = sample["packages"].as_array_mut().unwrap();
    for package in packages.iter_mut() {
        if package["name"] == "nccl-core" {
            package["dependencies"] = json!([
                { "name": "cudarc", "kind": null },
                { "name": "nccl-sys", "kind": "build" },
                { "name": "nccl-perf", "kind": "dev" },
            ]);
        }
    }
    packages.push(perf.clone());
    sample["workspace_members"]
        .as_array_mut()
        .unwrap()
        .push(perf["id"].clone());

    assert_eq!(
        published_closure(&sample, &["nccl-group"]).unwrap(),
        [
            published("nccl-core", "0.1.0"),
            published("nccl-tensor", "0.1.0"),
            published("nccl-group", "0.1.0"),
            published("nccl-sys", "0.1.0"),
        ]
    );
    assert_eq!(
        published_closure(&sample, &["nccl-sys"]).unwrap(),
        [published("nccl-sys", "0.1.0")]
    );
}

#[test]
fn a_closure_root_that_is_not_published_is_refused() {
    let sample = forwarding_sample(json!({}));
    let error = published_closure(&sample, &["benches"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "benches is no publishable workspace member (those are: nccl-core, nccl-tensor, nccl-group, nccl-sys)"
    );
}
