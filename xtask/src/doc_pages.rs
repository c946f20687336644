//! The guide's pages stay readable and linked: each page of
//! `docs/group/` holds at most [`PAGE_LINES`] lines, and every relative
//! link of the project's Markdown names a file that exists and, with a
//! `#fragment`, a heading of that file.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::workspace_root;

/// The most lines a page of the process group's guide holds: one subject
/// a reader can take in at once.
const PAGE_LINES: usize = 250;

/// Every `.md` file under `dir`, recursively, `target` and hidden folders
/// left out.
fn markdown_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                markdown_under(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The project's own Markdown: the root's pages and `docs/`.
fn project_markdown() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut found = Vec::new();
    markdown_under(&root.join("docs"), &mut found);
    for name in ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"] {
        let path = root.join(name);
        if path.exists() {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The lines of `text` outside its fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut in_block = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            return false;
        }
        !in_block
    })
}

/// The targets of the inline links `[text](target)` in `text`, code blocks
/// and inline code left out.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut outside_code = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                outside_code.push_str(part);
            }
        }
        let mut rest = outside_code.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                targets.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    targets
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `text`'s headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect()
}

/// What is wrong with the relative link `target` of the page `page`, if
/// anything.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
        return None;
    }
    let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
    let linked = match file {
        "" => page.to_path_buf(),
        file => page.parent()?.join(file),
    };
    if !linked.exists() {
        return Some(format!("{target}: no file {}", linked.display()));
    }
    if fragment.is_empty() || !file.is_empty() && !file.ends_with(".md") {
        return None;
    }
    let text = fs::read_to_string(&linked).ok()?;
    (!anchors(&text).contains(fragment))
        .then(|| format!("{target}: no heading with the anchor #{fragment}"))
}

#[test]
fn every_page_of_the_group_guide_is_at_most_250_lines() {
    let mut pages = Vec::new();
    markdown_under(&workspace_root().join("docs/group"), &mut pages);
    assert!(!pages.is_empty(), "docs/group holds no page");
    let long: Vec<String> = pages
        .iter()
        .filter_map(|page| {
            let lines = fs::read_to_string(page).ok()?.lines().count();
            (lines > PAGE_LINES).then(|| format!("{} ({lines} lines)", page.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "pages over {PAGE_LINES} lines (split by subject): {long:?}"
    );
}

#[test]
fn every_relative_link_of_the_project_markdown_resolves() {
    let broken: Vec<String> = project_markdown()
        .iter()
        .flat_map(|page| {
            let text = fs::read_to_string(page).unwrap_or_default();
            link_targets(&text)
                .into_iter()
                .filter_map(|target| broken(page, &target))
                .map(|why| format!("{}: {why}", page.display()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rule() {
    assert_eq!(anchor(" NVTX ranges"), "nvtx-ranges");
    assert_eq!(
        anchor(" Analysing the dumps of every rank"),
        "analysing-the-dumps-of-every-rank"
    );
    assert_eq!(anchor(" `heal`, step 2: agree"), "heal-step-2-agree");
    assert_eq!(
        link_targets("see [a](b.md#c) and `[x](y)`\n```\n[p](q)\n```"),
        ["b.md#c"]
    );
}
