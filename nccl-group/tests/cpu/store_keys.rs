//! No source file of the crate spells a store key by hand: every protocol
//! builds its keys with `nccl_rendezvous::meet::Scope` from the purposes
//! of `src/protocols.rs`. Read over the source text, so that a new
//! `format!("{name}/{generation}/...")` fails here, naming where it is.

use std::fs;
use std::path::{Path, PathBuf};

/// Where the purposes are named, the one file allowed to name them.
const PURPOSES: &str = "protocols.rs";

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a readable directory entry").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The production part of a source file: unit tests pin the stored keys'
/// strings on purpose, so what follows `#[cfg(test)]` is not read, nor a
/// file of tests.
fn production(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs" || name == PURPOSES {
        return None;
    }
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(match text.find("#[cfg(test)]") {
        Some(end) => text[..end].to_string(),
        None => text,
    })
}

/// The literal of the `format!` call `text` starts with: the text
/// between its first pair of quotes.
fn literal_after(text: &str) -> Option<&str> {
    let open = text.find('"')? + 1;
    let close = open + text[open..].find('"')?;
    Some(&text[open..close])
}

/// Whether a format string joins a placeholder to another part with `/`,
/// the shape of a hand-built store key. An absolute path (`/proc/...`)
/// is a file's, not a key's.
fn joins_a_key(literal: &str) -> bool {
    !literal.starts_with('/') && (literal.contains("}/") || literal.contains("/{"))
}

#[test]
fn no_source_file_builds_a_slash_joined_store_key_by_hand() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut by_hand = Vec::new();
    let mut read = 0;
    for path in sources(&src) {
        let Some(text) = production(&path) else {
            continue;
        };
        read += 1;
        for (at, _) in text.match_indices("format!(") {
            let literal = literal_after(&text[at..]).unwrap_or_default();
            if joins_a_key(literal) {
                let line = text[..at].lines().count();
                by_hand.push(format!("{}:{line}: {literal:?}", path.display()));
            }
        }
        for helper in ["scoped_store(", "nested_scope("] {
            if text.contains(helper) {
                by_hand.push(format!("{}: {helper}", path.display()));
            }
        }
    }
    assert!(
        read > 50,
        "read only {read} source files below {}",
        src.display()
    );
    assert!(
        by_hand.is_empty(),
        "store keys built by hand (use nccl_rendezvous::meet::Scope with a purpose of \
         src/{PURPOSES}):\n{}",
        by_hand.join("\n")
    );
}

#[test]
fn the_check_sees_a_hand_built_key_and_passes_a_file_path() {
    assert!(joins_a_key("{name}/{generation}/failed"));
    assert!(joins_a_key("{scope}/progress/{rank}"));
    assert!(!joins_a_key("/proc/self/task/{thread}/comm"));
    assert!(!joins_a_key("{count} devices"));
    assert_eq!(literal_after(r#"format!("{a}/b", a = 1)"#), Some("{a}/b"));
}
