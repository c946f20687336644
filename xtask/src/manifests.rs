//! Checks on the workspace's manifests and lock file, read through
//! `cargo metadata`:
//!
//! * the MSRV check: no locked package may need a newer Rust than the
//!   workspace's `rust-version`;
//! * the cudarc features: every publishable crate that reaches cudarc
//!   offers each of cudarc's CUDA versions and linking modes, and passes it
//!   down, so an application picks them once through any of our crates;
//! * the publishable crates, for `cargo package` (the fields a registry
//!   page shows, and which of them a consumer of the packages reaches),
//!   and the features that add to their API, for `cargo xtask public-api`.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::Result;

/// cudarc's features that choose how it reaches the CUDA driver (its CUDA
/// version features are the ones named `cuda-*`).
const LINKING_MODES: [&str; 4] = [
    "dynamic-loading",
    "dynamic-linking",
    "fallback-dynamic-loading",
    "static-linking",
];

/// `cargo metadata` of the workspace with every feature on, so optional
/// dependencies are among its packages.
pub fn load() -> Result<Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--all-features"])
        .current_dir(crate::workspace_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {} metadata: {e}", cargo.to_string_lossy()))?;
    if !output.status.success() {
        return Err(format!("cargo metadata exited with {}", output.status).into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// A Rust version as `rust-version` writes it: `1.88` or `1.88.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RustVersion([u64; 3]);

impl RustVersion {
    fn parse(text: &str) -> Result<Self> {
        let bad = || format!("a Rust version like 1.88 or 1.88.0, got {text:?}");
        let parts: Vec<u64> = text
            .split('.')
            .map(|part| part.parse().map_err(|_| bad()))
            .collect::<std::result::Result<_, _>>()?;
        match parts[..] {
            [major, minor] => Ok(Self([major, minor, 0])),
            [major, minor, patch] => Ok(Self([major, minor, patch])),
            _ => Err(bad().into()),
        }
    }
}

impl fmt::Display for RustVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [major, minor, patch] = self.0;
        write!(f, "{major}.{minor}.{patch}")
    }
}

/// One package of the metadata, with the fields these checks read.
struct Package<'a> {
    name: &'a str,
    version: &'a str,
    rust_version: Option<&'a str>,
    publishable: bool,
    member: bool,
    value: &'a Value,
}

fn packages(metadata: &Value) -> Result<Vec<Package<'_>>> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .ok_or("cargo metadata has no workspace_members list")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let text = |package: &Value, key: &str| -> Result<String> {
        package[key]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("a package in cargo metadata has no {key}").into())
    };
    metadata["packages"]
        .as_array()
        .ok_or("cargo metadata has no packages list")?
        .iter()
        .map(|value| {
            let id = text(value, "id")?;
            Ok(Package {
                name: value["name"].as_str().ok_or("a package has no name")?,
                version: value["version"]
                    .as_str()
                    .ok_or("a package has no version")?,
                rust_version: value["rust_version"].as_str(),
                // `publish` is null when any registry may have it, a list
                // of registries otherwise (empty for `publish = false`).
                publishable: value["publish"]
                    .as_array()
                    .is_none_or(|registries| !registries.is_empty()),
                member: members.contains(id.as_str()),
                value,
            })
        })
        .collect()
}

/// The workspace's `rust-version`: the one every member declares.
fn workspace_rust_version(packages: &[Package<'_>]) -> Result<RustVersion> {
    let declared: BTreeSet<&str> = packages
        .iter()
        .filter(|package| package.member)
        .map(|package| {
            package.rust_version.ok_or_else(|| {
                format!(
                    "workspace member {} declares no rust-version (expected `rust-version.workspace = true`)",
                    package.name
                )
            })
        })
        .collect::<std::result::Result<_, _>>()?;
    match declared.into_iter().collect::<Vec<_>>()[..] {
        [one] => RustVersion::parse(one),
        [] => Err("cargo metadata lists no workspace member".into()),
        ref several => Err(format!(
            "the workspace members declare different rust-versions: {}",
            several.join(", ")
        )
        .into()),
    }
}

/// The locked packages that need a newer Rust than the workspace's
/// `rust-version`, one line each (empty when there is none).
pub fn msrv_violations(metadata: &Value) -> Result<Vec<String>> {
    let packages = packages(metadata)?;
    let workspace = workspace_rust_version(&packages)?;
    let mut violations = Vec::new();
    for package in packages.iter().filter(|package| !package.member) {
        let Some(declared) = package.rust_version else {
            continue;
        };
        let needs = RustVersion::parse(declared)
            .map_err(|e| format!("{} {}: {e}", package.name, package.version))?;
        if needs > workspace {
            violations.push(format!(
                "{} {} needs Rust {needs}, above the workspace's rust-version {workspace} \
                 (raise rust-version, or lock an older one: cargo update -p {}@{} --precise VERSION)",
                package.name, package.version, package.name, package.version
            ));
        }
    }
    Ok(violations)
}

/// The features of `package`, by name, with what each enables.
fn features(package: &Value) -> impl Iterator<Item = (&str, &Value)> {
    package["features"]
        .as_object()
        .into_iter()
        .flat_map(|features| features.iter().map(|(name, value)| (name.as_str(), value)))
}

/// What is wrong with the cudarc features of the publishable crates that
/// depend on cudarc or on a crate that does, one line each (empty when
/// nothing is): a CUDA version or linking mode of cudarc's that a crate
/// lacks, or has without passing it on to a dependency of the same name
/// (it may also turn on features of the crate's own).
pub fn forwarding_gaps(metadata: &Value) -> Result<Vec<String>> {
    let packages = packages(metadata)?;
    let cudarc = packages
        .iter()
        .find(|package| package.name == "cudarc")
        .ok_or("cargo metadata has no cudarc package")?;
    let chosen: Vec<&str> = features(cudarc.value)
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("cuda-") || LINKING_MODES.contains(name))
        .collect();
    // The members that reach cudarc, found by walking dependencies until
    // the set stops growing.
    let mut reaching: BTreeSet<&str> = BTreeSet::from(["cudarc"]);
    loop {
        let before = reaching.len();
        for package in packages.iter().filter(|package| package.member) {
            let depends = package.value["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|dependency| dependency["kind"].is_null())
                .filter_map(|dependency| dependency["name"].as_str())
                .any(|name| reaching.contains(name));
            if depends {
                reaching.insert(package.name);
            }
        }
        if reaching.len() == before {
            break;
        }
    }
    let mut gaps = Vec::new();
    for package in packages
        .iter()
        .filter(|package| package.member && package.publishable && reaching.contains(package.name))
    {
        let offered: Vec<(&str, &Value)> = features(package.value).collect();
        for feature in &chosen {
            let suffix = format!("/{feature}");
            match offered.iter().find(|(name, _)| name == feature) {
                None => gaps.push(format!(
                    "{} lacks cudarc's feature `{feature}` (add `{feature} = [\"<dependency>/{feature}\"]`)",
                    package.name
                )),
                Some((_, enables)) => {
                    // Passing it on, and perhaps turning on features of
                    // the crate's own (nccl-group's `cuda`, the part of
                    // it that needs cudarc at all).
                    let passes_on = enables.as_array().is_some_and(|enables| {
                        let names = || enables.iter().filter_map(Value::as_str);
                        names().any(|e| e.ends_with(&suffix))
                            && names().all(|e| e.ends_with(&suffix) || !e.contains([':', '/']))
                    });
                    if !passes_on {
                        gaps.push(format!(
                            "{}'s feature `{feature}` does not pass `{feature}` on: it enables {enables}",
                            package.name
                        ));
                    }
                }
            }
        }
    }
    Ok(gaps)
}

/// The workspace members that may be published, by name.
pub fn publishable_members(metadata: &Value) -> Result<Vec<String>> {
    Ok(packages(metadata)?
        .iter()
        .filter(|package| package.member && package.publishable)
        .map(|package| package.name.to_string())
        .collect())
}

/// The features of the member `name` that add to its API: all but
/// `default` and those that choose cudarc's CUDA version (`cuda-*`) or
/// linking mode, of which a build takes exactly one (its defaults'), so
/// that with them all on every public item is compiled.
pub fn api_features(metadata: &Value, name: &str) -> Result<Vec<String>> {
    let packages = packages(metadata)?;
    let package = packages
        .iter()
        .find(|package| package.member && package.name == name)
        .ok_or_else(|| format!("no workspace member named {name:?} in cargo metadata"))?;
    Ok(features(package.value)
        .map(|(feature, _)| feature)
        .filter(|feature| {
            *feature != "default"
                && !feature.starts_with("cuda-")
                && !LINKING_MODES.contains(feature)
        })
        .map(str::to_string)
        .collect())
}

/// The manifest fields every published crate needs for its registry page
/// (cargo package warns without the last three).
const PUBLISHED_FIELDS: [&str; 5] = [
    "description",
    "license",
    "repository",
    "homepage",
    "documentation",
];

/// What the publishable members lack for their registry pages, one line
/// each (empty when nothing is): a field of [`PUBLISHED_FIELDS`] missing
/// or empty, or a `documentation` other than the crate's docs.rs page.
pub fn missing_published_fields(metadata: &Value) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    for package in packages(metadata)?
        .iter()
        .filter(|package| package.member && package.publishable)
    {
        for field in PUBLISHED_FIELDS {
            if package.value[field].as_str().is_none_or(str::is_empty) {
                missing.push(format!(
                    "{} has no `{field}` (add it to its [package], or `{field}.workspace = true`)",
                    package.name
                ));
            }
        }
        let docs_rs = format!("https://docs.rs/{}", package.name);
        if let Some(documentation) = package.value["documentation"].as_str()
            && !documentation.is_empty()
            && documentation != docs_rs
        {
            missing.push(format!(
                "{}'s `documentation` is {documentation:?}, expected {docs_rs:?}",
                package.name
            ));
        }
    }
    Ok(missing)
}

/// A publishable member, as its package file names it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Published {
    pub name: String,
    pub version: String,
}

/// The publishable members a crate that depends on `roots` builds:
/// `roots` and the publishable members they reach through normal and
/// build dependencies, by name. A root that is no publishable member is
/// an error naming the ones there are.
pub fn published_closure(metadata: &Value, roots: &[&str]) -> Result<Vec<Published>> {
    let packages = packages(metadata)?;
    let publishable: Vec<&Package<'_>> = packages
        .iter()
        .filter(|package| package.member && package.publishable)
        .collect();
    let find = |name: &str| publishable.iter().find(|package| package.name == name);
    let mut reached: BTreeSet<&str> = BTreeSet::new();
    let mut pending: Vec<&str> = Vec::new();
    for &root in roots {
        if find(root).is_none() {
            let names: Vec<&str> = publishable.iter().map(|package| package.name).collect();
            return Err(format!(
                "{root} is no publishable workspace member (those are: {})",
                names.join(", ")
            )
            .into());
        }
        pending.push(root);
    }
    while let Some(name) = pending.pop() {
        let Some(package) = find(name) else {
            continue;
        };
        if !reached.insert(package.name) {
            continue;
        }
        pending.extend(
            package.value["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|dependency| dependency["kind"].as_str() != Some("dev"))
                .filter_map(|dependency| dependency["name"].as_str()),
        );
    }
    Ok(publishable
        .iter()
        .filter(|package| reached.contains(package.name))
        .map(|package| Published {
            name: package.name.to_string(),
            version: package.version.to_string(),
        })
        .collect())
}

#[cfg(test)]
#[path = "manifests_tests.rs"]
mod tests;
