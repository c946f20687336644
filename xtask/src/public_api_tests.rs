//! The snapshot comparison and the inherent-function count, on text.

use std::path::PathBuf;

use super::{
    FunctionCount, Library, count_inherent_functions, describe_difference, difference,
    first_argument_is_self, snapshot_text,
};

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

#[test]
fn a_difference_names_each_missing_line_as_often_as_it_is_missing() {
    let old = "pub mod demo\nimpl Send for demo::A\nimpl Send for demo::A\npub fn demo::gone()\n";
    let new = "pub mod demo\nimpl Send for demo::A\npub fn demo::new()\npub fn demo::newer()\n";
    let (removed, added) = difference(old, new);
    assert_eq!(removed, ["impl Send for demo::A", "pub fn demo::gone()"]);
    assert_eq!(added, ["pub fn demo::new()", "pub fn demo::newer()"]);
    assert_eq!(difference(new, new), (vec![], vec![]));
}

#[test]
fn a_stale_snapshot_is_described_line_by_line() {
    let message = describe_difference(
        "api/demo.txt",
        "pub mod demo\npub fn demo::gone()\n",
        "pub mod demo\npub fn demo::new()\n",
    );
    assert_eq!(
        message,
        "api/demo.txt differs from the crate: 1 line(s) removed, 1 added\n\
         - pub fn demo::gone()\n\
         + pub fn demo::new()"
    );
    let missing = describe_difference("api/demo.txt", "", "pub mod demo\npub fn demo::new()\n");
    assert_eq!(
        missing,
        "api/demo.txt is missing or empty: the crate's API has 2 lines"
    );
}

#[test]
fn a_snapshot_says_what_it_lists_and_how_to_remake_it() {
    let library = Library {
        package: "demo".into(),
        lib_name: "demo".into(),
        features: vec!["serde".into(), "tracing".into()],
        target_dir: PathBuf::from("target"),
    };
    let text = snapshot_text(&library, &lines("pub mod demo\npub fn demo::f()"));
    assert_eq!(
        text,
        "// The public API of demo with its default features and serde, tracing.\n\
         // Written by `cargo xtask public-api`; `cargo xtask public-api --check` (in CI) compares.\n\
         pub mod demo\n\
         pub fn demo::f()\n"
    );
}

const GROUP: &str = "\
pub struct demo::Group
pub fn demo::Group::new(name: &str) -> Result<Self>
#[deprecated] pub fn demo::Group::old(&self)
pub fn demo::Group::map<F: Fn() -> u32>(&self, f: F) -> u32
pub const unsafe fn demo::Group::raw(self: Arc<Self>) -> *const u8
#[deprecated] #[non_exhaustive] pub fn demo::Group::from_parts<'a>(parts: &'a [u8]) -> Self
pub fn demo::Group::with(&'a mut self, selfish: bool) -> &mut Self
pub demo::Group::size: usize
pub fn demo::Group::Inner::hidden(&self)
pub fn demo::GroupOptions::new() -> Self
impl Clone for demo::Group
pub fn demo::helper(group: &Group)
";

#[test]
fn the_inherent_functions_of_a_type_are_counted_methods_apart() {
    assert_eq!(
        count_inherent_functions(&lines(GROUP), "demo::Group"),
        Some(FunctionCount {
            methods: 4,
            associated: 2,
            deprecated: 2,
        })
    );
    assert_eq!(
        count_inherent_functions(&lines(GROUP), "demo::Group")
            .unwrap()
            .to_string(),
        "6 public inherent functions (4 methods taking self, 2 associated functions; 2 deprecated)"
    );
}

#[test]
fn counting_a_path_that_is_no_type_gives_none() {
    assert_eq!(
        count_inherent_functions(&lines(GROUP), "demo::helper"),
        None
    );
    assert_eq!(count_inherent_functions(&lines(GROUP), "demo::Gro"), None);
}

#[test]
fn receivers_are_told_from_arguments_named_like_self() {
    for (after_name, is_method) in [
        ("(&self) -> u32", true),
        ("(&mut self)", true),
        ("(&'a mut self, x: u8)", true),
        ("(mut self)", true),
        ("(self: Arc<Self>)", true),
        ("<F: Fn(Self) -> bool>(f: F)", false),
        ("<F: Fn() -> u32>(&self, f: F)", true),
        ("(selfish: bool)", false),
        ("()", false),
    ] {
        assert_eq!(
            first_argument_is_self(after_name),
            is_method,
            "{after_name}"
        );
    }
}
