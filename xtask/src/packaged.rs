//! The packaged consumer: `xtask/consumers/packaged` built against the
//! `.crate` files `cargo package` wrote. Each nccl crate it reaches is
//! unpacked from its `.crate` and put in the place of crates.io's crate of
//! that name with `[patch.crates-io]`, so the consumer compiles what a
//! registry would serve (the normalized manifests, only the files that
//! ship), never the workspace's folders.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::manifests::{self, Published};
use crate::{Result, run_cargo, workspace_root};

/// The consumer's folder under `xtask/consumers/`.
pub const CONSUMER: &str = "packaged";

/// The folder of the packaging target folder where the `.crate` files are
/// unpacked, one folder each, afresh on every run.
const UNPACKED: &str = "unpacked";

/// Builds the consumer (`cargo build --offline --all-targets`) in
/// `package_target`, the target folder `cargo package` wrote its `.crate`
/// files under (in `package/`) and verified them in, so the registry
/// dependencies it compiled with the same features are reused.
pub fn build(package_target: &Path) -> Result<()> {
    let root = workspace_root();
    let consumer = root.join("xtask/consumers").join(CONSUMER);
    let manifest = consumer.join("Cargo.toml");
    let metadata = manifests::load()?;
    let publishable = manifests::publishable_members(&metadata)?;
    let dependencies = dependency_names(&manifest)?;
    let roots: Vec<&str> = dependencies
        .iter()
        .map(String::as_str)
        .filter(|name| publishable.iter().any(|p| p == name))
        .collect();
    if roots.is_empty() {
        return Err(format!(
            "{} depends on none of the publishable crates ({})",
            manifest.display(),
            publishable.join(", ")
        )
        .into());
    }
    let crates = manifests::published_closure(&metadata, &roots)?;

    let unpacked = package_target.join(UNPACKED);
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)
            .map_err(|e| format!("could not remove {}: {e}", unpacked.display()))?;
    }
    std::fs::create_dir_all(&unpacked)
        .map_err(|e| format!("could not create {}: {e}", unpacked.display()))?;
    // Offline: everything it needs was downloaded for the packaging step,
    // at the versions of the lock file copied below.
    let mut args: Vec<OsString> = ["build", "--offline", "--all-targets", "--manifest-path"]
        .map(OsString::from)
        .into();
    args.push(manifest.clone().into());
    args.extend([OsString::from("--target-dir"), package_target.into()]);
    for published in &crates {
        let file = crate_file(package_target, published);
        if !file.is_file() {
            return Err(format!(
                "{} is missing: `cargo package` writes it (run the packaging step first: \
                 `cargo xtask ci --only package`)",
                file.display()
            )
            .into());
        }
        let folder = unpack(&file, &unpacked, published)?;
        args.extend([
            OsString::from("--config"),
            patch_config(&published.name, &folder)?.into(),
        ]);
    }
    // The workspace's lock file: the consumer resolves to the versions the
    // packages were verified with, already downloaded, not to whatever
    // crates.io has newest today.
    let lock = consumer.join("Cargo.lock");
    std::fs::copy(root.join("Cargo.lock"), &lock)
        .map_err(|e| format!("could not copy Cargo.lock to {}: {e}", lock.display()))?;

    let names: Vec<String> = crates
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    println!("against the packages of {}", names.join(", "));
    run_cargo(&args, &[])
}

/// The names of the dependencies `manifest` declares (`cargo metadata
/// --no-deps`, which resolves nothing, so needs no registry).
fn dependency_names(manifest: &Path) -> Result<Vec<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(manifest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {} metadata: {e}", cargo.to_string_lossy()))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata of {} exited with {}",
            manifest.display(),
            output.status
        )
        .into());
    }
    declared_dependencies(&serde_json::from_slice(&output.stdout)?)
}

/// The dependency names of the one package of a `cargo metadata --no-deps`
/// document.
fn declared_dependencies(metadata: &Value) -> Result<Vec<String>> {
    let packages = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata has no packages list")?;
    let [package] = &packages[..] else {
        return Err(format!(
            "expected the consumer's metadata to hold one package, got {}",
            packages.len()
        )
        .into());
    };
    package["dependencies"]
        .as_array()
        .ok_or("the consumer's package has no dependencies list")?
        .iter()
        .map(|dependency| {
            dependency["name"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| "a dependency of the consumer has no name".into())
        })
        .collect()
}

/// Where `cargo package` writes the `.crate` file of `published`.
fn crate_file(package_target: &Path, published: &Published) -> PathBuf {
    package_target
        .join("package")
        .join(format!("{}-{}.crate", published.name, published.version))
}

/// Unpacks `file` (a gzipped tar whose one folder is `<name>-<version>`)
/// into `into`, and returns that folder. The files are dated now, not as
/// the archive dates them, so cargo never takes a build of an earlier
/// package's sources as up to date.
fn unpack(file: &Path, into: &Path, published: &Published) -> Result<PathBuf> {
    let output = Command::new("tar")
        .arg("-xzmf")
        .arg(file)
        .arg("-C")
        .arg(into)
        .output()
        .map_err(|e| format!("could not run tar to unpack {}: {e}", file.display()))?;
    if !output.status.success() {
        return Err(format!(
            "tar -xzmf {} exited with {}: {}",
            file.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let folder = into.join(format!("{}-{}", published.name, published.version));
    if !folder.join("Cargo.toml").is_file() {
        return Err(format!(
            "{} unpacked without {}/Cargo.toml",
            file.display(),
            folder.display()
        )
        .into());
    }
    Ok(folder)
}

/// The `--config` value that patches crates.io's `name` with the package
/// unpacked in `folder`.
fn patch_config(name: &str, folder: &Path) -> Result<String> {
    let folder = folder
        .to_str()
        .ok_or_else(|| format!("a package folder that is UTF-8, got {}", folder.display()))?;
    Ok(format!(
        "patch.crates-io.{name}.path = {}",
        toml_string(folder)
    ))
}

/// `text` as a TOML basic string, quoted and escaped.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
#[path = "packaged_tests.rs"]
mod tests;
