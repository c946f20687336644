//! `cargo xtask public-api [--check] [--count PATH]`: the public API of
//! each publishable crate as a sorted text file, `api/<crate>.txt`, so
//! that the surface changes only on purpose: `--check` (a step of
//! `cargo xtask ci`) fails on any difference and names it.
//!
//! The listing is read from rustdoc's JSON output, which is unstable:
//! `RUSTC_BOOTSTRAP=1 cargo rustdoc -p CRATE --lib --features ... --
//! -Z unstable-options --output-format json`, on the stable toolchain, with
//! the crate's defaults and every feature that adds to its API on
//! (`manifests::api_features`). The document is walked as plain
//! `serde_json` values (`listing`, `signature`) rather than deserialized
//! into `rustdoc-types` or handed to `cargo public-api`, both of which
//! were tried on the CI machine's toolchain (Rust 1.95, JSON format 57):
//!
//! * both read one format version: rustdoc-types 0.57 (cargo-public-api
//!   0.52 through public-api 0.52) is format 57; the newest rustdoc-types
//!   reads 61. Every toolchain that moves the format would break CI until
//!   the dependency moved with it. This reader takes any version whose
//!   shapes it knows, and names the shape it does not;
//! * `cargo install --locked cargo-public-api` compiles 126 crates in
//!   release mode: minutes of CI's two cores on every fresh machine, for a
//!   listing this module makes with `serde_json`, already a dependency;
//! * cargo-public-api writes a trait method under the implementing type's
//!   path (`nccl_group::ProcessGroup::clone`, `...::fmt`, and those of the
//!   blanket impls), so counting a type's inherent methods needs its
//!   impl headers; here the only `pub fn TYPE::name` lines are inherent.
//!
//! `--count nccl_group::ProcessGroup` prints the number of public inherent
//! associated functions of a type (methods and the rest), from a fresh
//! listing of its crate.

mod listing;
mod signature;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{Result, manifests, workspace_root};

/// The folder of the snapshots, at the workspace root.
const API_DIR: &str = "api";

/// The command that rewrites the snapshots, for the messages.
const REGENERATE: &str = "cargo xtask public-api";

#[derive(clap::Args)]
pub struct Args {
    /// Compare the snapshots with the crates instead of writing them; fail
    /// on a difference, naming every line added or removed.
    #[arg(long)]
    pub check: bool,
    /// Print how many public inherent functions the type at this public
    /// path has (e.g. nccl_group::ProcessGroup), and write nothing.
    #[arg(long, value_name = "PATH", conflicts_with = "check")]
    pub count: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let metadata = manifests::load()?;
    let crates = publishable_libraries(&metadata)?;
    if let Some(path) = &args.count {
        let crate_name = path.split("::").next().unwrap_or_default();
        let library = crates
            .iter()
            .find(|library| library.lib_name == crate_name)
            .ok_or_else(|| {
                let names: Vec<&str> = crates.iter().map(|l| l.lib_name.as_str()).collect();
                format!(
                    "--count takes a public path that starts with a publishable crate ({}), got {path:?}",
                    names.join(", ")
                )
            })?;
        let lines = listing_of(library)?;
        let count = count_inherent_functions(&lines, path).ok_or_else(|| {
            format!(
                "{path} is no struct, enum, union or trait in {}'s public API (give the path the snapshot lists it by)",
                library.package
            )
        })?;
        println!("{path}: {count}");
        return Ok(());
    }

    let dir = workspace_root().join(API_DIR);
    let mut stale = Vec::new();
    let mut expected_files = Vec::new();
    for library in &crates {
        let lines = listing_of(library)?;
        let text = snapshot_text(library, &lines);
        let file = dir.join(format!("{}.txt", library.package));
        if args.check {
            let current = std::fs::read_to_string(&file).unwrap_or_default();
            if current != text {
                stale.push(describe_difference(
                    &format!("{API_DIR}/{}.txt", library.package),
                    &current,
                    &text,
                ));
            }
        } else {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("could not create {}: {e}", dir.display()))?;
            std::fs::write(&file, &text)
                .map_err(|e| format!("could not write {}: {e}", file.display()))?;
            println!(
                "wrote {API_DIR}/{}.txt ({} lines)",
                library.package,
                lines.len()
            );
        }
        expected_files.push(file);
    }
    for leftover in leftover_snapshots(&dir, &expected_files)? {
        let name = format!(
            "{API_DIR}/{}",
            leftover.file_name().unwrap_or_default().to_string_lossy()
        );
        if args.check {
            stale.push(format!("{name} belongs to no publishable crate: delete it"));
        } else {
            std::fs::remove_file(&leftover).map_err(|e| format!("could not remove {name}: {e}"))?;
            println!("removed {name}");
        }
    }
    if stale.is_empty() {
        if args.check {
            println!("public API snapshots match ({} crates)", crates.len());
        }
        return Ok(());
    }
    for message in &stale {
        eprintln!("{message}");
    }
    Err(format!(
        "the public API differs from {API_DIR}/ in {} file(s); if the change is on purpose, run `{REGENERATE}` and commit {API_DIR}/",
        stale.len()
    )
    .into())
}

/// A publishable member with a library: its package name, the library's
/// crate name, and the features its listing is made with.
struct Library {
    package: String,
    lib_name: String,
    features: Vec<String>,
    target_dir: PathBuf,
}

fn publishable_libraries(metadata: &Value) -> Result<Vec<Library>> {
    let target_dir = metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or("cargo metadata names no target_directory")?;
    let packages = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata with packages")?;
    let mut libraries = Vec::new();
    for name in manifests::publishable_members(metadata)? {
        let package = packages
            .iter()
            .find(|package| package["name"] == name.as_str())
            .ok_or_else(|| format!("{name} among cargo metadata's packages"))?;
        let lib_name = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|target| {
                let kinds = target["kind"].as_array()?;
                kinds
                    .iter()
                    .any(|kind| kind == "lib")
                    .then(|| target["name"].as_str().map(|name| name.replace('-', "_")))?
            });
        let Some(lib_name) = lib_name else {
            println!("{name}: no library, so no API to list");
            continue;
        };
        libraries.push(Library {
            features: manifests::api_features(metadata, &name)?,
            package: name,
            lib_name,
            target_dir: target_dir.clone(),
        });
    }
    Ok(libraries)
}

/// The listing of one crate, from rustdoc JSON made now.
fn listing_of(library: &Library) -> Result<Vec<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut args: Vec<OsString> = ["rustdoc", "--quiet", "--lib", "-p"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push(library.package.clone().into());
    if !library.features.is_empty() {
        args.extend(["--features".into(), library.features.join(",").into()]);
    }
    args.extend(["--", "-Z", "unstable-options", "--output-format", "json"].map(OsString::from));
    // rustdoc's JSON output is unstable; RUSTC_BOOTSTRAP lets the stable
    // toolchain make it.
    let status = Command::new(&cargo)
        .args(&args)
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("could not run {}: {e}", cargo.to_string_lossy()))?;
    if !status.success() {
        return Err(format!(
            "cargo {} exited with {status}",
            args.join(" ".as_ref()).to_string_lossy()
        )
        .into());
    }
    let json = library
        .target_dir
        .join("doc")
        .join(format!("{}.json", library.lib_name));
    let document = read_json(&json)?;
    listing::listing(&document).map_err(|e| {
        format!(
            "{} (rustdoc JSON format version {}): {e}",
            json.display(),
            document["format_version"]
        )
        .into()
    })
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("could not read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()).into())
}

/// A snapshot file: a header that says what it is and how it is made,
/// then the listing.
fn snapshot_text(library: &Library, lines: &[String]) -> String {
    let features = if library.features.is_empty() {
        "its default features".to_string()
    } else {
        format!("its default features and {}", library.features.join(", "))
    };
    let mut text = format!(
        "// The public API of {} with {features}.\n\
         // Written by `{REGENERATE}`; `{REGENERATE} --check` (in CI) compares.\n",
        library.package
    );
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The `.txt` files in `dir` that are not among `expected`.
fn leftover_snapshots(dir: &Path, expected: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut leftovers = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "txt") && !expected.contains(&path) {
            leftovers.push(path);
        }
    }
    leftovers.sort();
    Ok(leftovers)
}

/// The lines of `old` missing from `new` and those of `new` missing from
/// `old` (as many times as they are missing), each in its file's order.
fn difference(old: &str, new: &str) -> (Vec<String>, Vec<String>) {
    let missing_from = |from: &str, other: &str| {
        let mut available: HashMap<&str, usize> = HashMap::new();
        for line in other.lines() {
            *available.entry(line).or_default() += 1;
        }
        let mut missing = Vec::new();
        for line in from.lines() {
            match available.get_mut(line) {
                Some(count) if *count > 0 => *count -= 1,
                _ => missing.push(line.to_string()),
            }
        }
        missing
    };
    (missing_from(old, new), missing_from(new, old))
}

/// What changed in one snapshot, diff-like: `- ` the lines the crates no
/// longer have, `+ ` the lines they now have.
fn describe_difference(file: &str, old: &str, new: &str) -> String {
    let (removed, added) = difference(old, new);
    let mut text = if old.is_empty() {
        format!(
            "{file} is missing or empty: the crate's API has {} lines",
            added.len()
        )
    } else {
        format!(
            "{file} differs from the crate: {} line(s) removed, {} added",
            removed.len(),
            added.len()
        )
    };
    for line in &removed {
        text.push_str("\n- ");
        text.push_str(line);
    }
    if !old.is_empty() {
        for line in &added {
            text.push_str("\n+ ");
            text.push_str(line);
        }
    }
    text
}

/// The public inherent functions of one type (or a trait's functions).
#[derive(Debug, PartialEq, Eq)]
struct FunctionCount {
    /// Those taking `self` in any form.
    methods: usize,
    /// Those that do not (constructors and the like).
    associated: usize,
    /// Of all of them, the deprecated ones.
    deprecated: usize,
}

impl std::fmt::Display for FunctionCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} public inherent functions ({} methods taking self, {} associated functions; {} deprecated)",
            self.methods + self.associated,
            self.methods,
            self.associated,
            self.deprecated
        )
    }
}

/// Counts the `pub fn PATH::name(...)` lines of a listing or snapshot;
/// `None` when no struct, enum, union or trait is listed at `path`.
fn count_inherent_functions(lines: &[String], path: &str) -> Option<FunctionCount> {
    let declared = lines.iter().any(|line| {
        let (_, text) = split_attributes(line);
        ["struct", "enum", "union", "trait"].iter().any(|kind| {
            text.strip_prefix(&format!("pub {kind} {path}"))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['<', '(', ';', ' ', ':']))
        })
    });
    if !declared {
        return None;
    }
    let marker = format!("fn {path}::");
    let mut count = FunctionCount {
        methods: 0,
        associated: 0,
        deprecated: 0,
    };
    for line in lines {
        let (attributes, text) = split_attributes(line);
        // `pub`, then any of `const async unsafe extern "C"`, then `fn`.
        let Some(qualified) = text.strip_prefix("pub ") else {
            continue;
        };
        let Some(at) = qualified.find(&marker) else {
            continue;
        };
        if qualified[..at].contains('(') {
            continue;
        }
        let rest = &qualified[at + marker.len()..];
        let name_end = rest.find(['<', '(']).unwrap_or(rest.len());
        if rest[..name_end].contains("::") || name_end == rest.len() {
            continue;
        }
        if first_argument_is_self(&rest[name_end..]) {
            count.methods += 1;
        } else {
            count.associated += 1;
        }
        if attributes.contains("#[deprecated]") {
            count.deprecated += 1;
        }
    }
    Some(count)
}

/// The leading `#[...] ` attributes of a line, and the rest.
fn split_attributes(line: &str) -> (&str, &str) {
    let mut rest = line;
    while rest.starts_with("#[") {
        let Some(end) = rest.find("] ") else {
            break;
        };
        rest = &rest[end + 2..];
    }
    (&line[..line.len() - rest.len()], rest)
}

/// Whether `<generics>(first, ...` starts its arguments with a receiver:
/// `self`, `mut self`, `&self`, `&'a mut self`, `self: Arc<Self>`.
fn first_argument_is_self(after_name: &str) -> bool {
    let mut depth = 0usize;
    let mut previous = ' ';
    let mut arguments = None;
    for (at, character) in after_name.char_indices() {
        match character {
            '<' => depth += 1,
            // `->` inside the generics (`F: Fn() -> u32`) closes nothing.
            '>' if previous != '-' => depth = depth.saturating_sub(1),
            '(' if depth == 0 => {
                arguments = Some(&after_name[at + 1..]);
                break;
            }
            _ => {}
        }
        previous = character;
    }
    let Some(mut argument) = arguments else {
        return false;
    };
    if let Some(rest) = argument.strip_prefix('&') {
        argument = rest;
        if argument.starts_with('\'') {
            argument = argument.split_once(' ').map_or("", |(_, rest)| rest);
        }
    }
    argument = argument.strip_prefix("mut ").unwrap_or(argument);
    argument
        .strip_prefix("self")
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
}

#[cfg(test)]
#[path = "public_api_tests.rs"]
mod tests;
