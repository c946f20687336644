//! The listing of a fabricated crate's rustdoc JSON.

use serde_json::{Value, json};

use super::listing;

/// An index entry.
fn item(id: u32, name: Option<&str>, visibility: &str, inner: Value) -> (String, Value) {
    (
        id.to_string(),
        json!({
            "id": id, "crate_id": 0, "name": name, "visibility": visibility,
            "attrs": [], "deprecation": null, "inner": inner,
        }),
    )
}

fn primitive(name: &str) -> Value {
    json!({ "primitive": name })
}

fn no_generics() -> Value {
    json!({ "params": [], "where_predicates": [] })
}

fn function(inputs: Value, output: Value) -> Value {
    json!({ "function": {
        "sig": { "inputs": inputs, "output": output, "is_c_variadic": false },
        "generics": no_generics(),
        "header": { "is_const": false, "is_unsafe": false, "is_async": false, "abi": "Rust" },
        "has_body": true,
    } })
}

fn named(written: &str, id: u32) -> Value {
    json!({ "resolved_path": { "path": written, "id": id, "args": null } })
}

fn trait_path(written: &str, id: u32, args: Value) -> Value {
    json!({ "path": written, "id": id, "args": args })
}

fn implementation(trait_: Value, for_type: Value, synthetic: bool, blanket: Value) -> Value {
    json!({ "impl": {
        "is_unsafe": false, "generics": no_generics(), "provided_trait_methods": [],
        "trait": trait_, "for": for_type, "items": [], "is_negative": false,
        "is_synthetic": synthetic, "blanket_impl": blanket,
    } })
}

/// A crate `demo` with a struct and its impls (inherent, derived, auto,
/// unstable auto, blanket), a `#[non_exhaustive]` enum, a trait
/// implemented for another crate's type, a function reached through a
/// glob re-export of a private module, a prelude that re-exports a local
/// and a foreign item, and an implementation of a foreign trait for a
/// foreign type.
fn document() -> Value {
    let foo = || named("Foo", 1);
    let self_ref = json!({ "borrowed_ref": {
        "lifetime": null, "is_mutable": false, "type": { "generic": "Self" } } });
    let mut index: Vec<(String, Value)> = vec![
        item(
            0,
            Some("demo"),
            "public",
            json!({ "module": {
            "is_crate": true, "items": [1, 2, 3, 4, 20], "is_stripped": false } }),
        ),
        item(
            1,
            Some("Foo"),
            "public",
            json!({ "struct": {
            "kind": { "plain": { "fields": [10, 11], "has_stripped_fields": false } },
            "generics": no_generics(),
            "impls": [12, 13, 14, 15, 16],
        } }),
        ),
        item(
            10,
            Some("size"),
            "public",
            json!({ "struct_field": primitive("usize") }),
        ),
        item(
            11,
            Some("secret"),
            "crate",
            json!({ "struct_field": primitive("u8") }),
        ),
        item(
            12,
            None,
            "default",
            json!({ "impl": {
            "is_unsafe": false, "generics": no_generics(), "provided_trait_methods": [],
            "trait": null, "for": foo(), "items": [17, 18], "is_negative": false,
            "is_synthetic": false, "blanket_impl": null,
        } }),
        ),
        item(
            17,
            Some("new"),
            "public",
            function(json!([]), json!({ "generic": "Self" })),
        ),
        item(
            18,
            Some("len"),
            "public",
            function(json!([["self", self_ref]]), primitive("usize")),
        ),
        item(
            13,
            None,
            "default",
            implementation(
                trait_path("Clone", 60, Value::Null),
                foo(),
                false,
                Value::Null,
            ),
        ),
        item(
            14,
            None,
            "default",
            implementation(
                trait_path("Send", 61, Value::Null),
                foo(),
                true,
                Value::Null,
            ),
        ),
        item(
            15,
            None,
            "default",
            implementation(
                trait_path("Freeze", 62, Value::Null),
                foo(),
                true,
                Value::Null,
            ),
        ),
        item(
            16,
            None,
            "default",
            implementation(
                trait_path(
                    "Into",
                    63,
                    json!({ "angle_bracketed": {
                "args": [{ "type": { "generic": "U" } }], "constraints": [] } }),
                ),
                foo(),
                false,
                json!({ "generic": "T" }),
            ),
        ),
        item(
            2,
            Some("prelude"),
            "public",
            json!({ "module": {
            "is_crate": false, "items": [5, 6], "is_stripped": false } }),
        ),
        item(
            5,
            None,
            "public",
            json!({ "use": {
            "source": "crate::Foo", "name": "Foo", "id": 1, "is_glob": false } }),
        ),
        item(
            6,
            None,
            "public",
            json!({ "use": {
            "source": "other::deep::Thing", "name": "Thing", "id": 50, "is_glob": false } }),
        ),
        item(
            3,
            Some("Mode"),
            "public",
            json!({ "enum": {
            "generics": no_generics(), "has_stripped_variants": false,
            "variants": [31, 32, 33], "impls": [] } }),
        ),
        item(
            31,
            Some("Plain"),
            "default",
            json!({ "variant": { "kind": "plain", "discriminant": null } }),
        ),
        item(
            32,
            Some("Tuple"),
            "default",
            json!({ "variant": { "kind": { "tuple": [34] }, "discriminant": null } }),
        ),
        item(
            34,
            Some("0"),
            "default",
            json!({ "struct_field": primitive("u8") }),
        ),
        item(
            33,
            Some("Struct"),
            "default",
            json!({ "variant": {
            "kind": { "struct": { "fields": [35], "has_stripped_fields": false } }, "discriminant": null } }),
        ),
        item(
            35,
            Some("x"),
            "default",
            json!({ "struct_field": primitive("u8") }),
        ),
        item(
            4,
            Some("Buffers"),
            "public",
            json!({ "trait": {
            "is_auto": false, "is_unsafe": false, "is_dyn_compatible": true,
            "items": [36], "generics": no_generics(),
            "bounds": [{ "trait_bound": { "trait": trait_path("Send", 61, Value::Null),
                                          "generic_params": [], "modifier": "none" } }],
            "implementations": [37],
        } }),
        ),
        item(
            36,
            Some("count"),
            "default",
            function(
                json!([["self", { "borrowed_ref": { "lifetime": null, "is_mutable": false,
                                                 "type": { "generic": "Self" } } }]]),
                primitive("usize"),
            ),
        ),
        item(
            37,
            None,
            "default",
            implementation(
                trait_path("Buffers", 4, Value::Null),
                json!({ "resolved_path": { "path": "Vec", "id": 51, "args": { "angle_bracketed": {
                "args": [{ "type": primitive("u8") }], "constraints": [] } } } }),
                false,
                Value::Null,
            ),
        ),
        item(
            20,
            None,
            "public",
            json!({ "use": {
            "source": "hidden", "name": "hidden", "id": 21, "is_glob": true } }),
        ),
        item(
            21,
            Some("hidden"),
            "crate",
            json!({ "module": {
            "is_crate": false, "items": [30], "is_stripped": false } }),
        ),
        item(
            30,
            Some("helper"),
            "public",
            function(json!([["x", primitive("u32")]]), primitive("bool")),
        ),
        item(
            40,
            None,
            "default",
            implementation(
                trait_path(
                    "From",
                    64,
                    json!({ "angle_bracketed": {
                "args": [{ "type": foo() }], "constraints": [] } }),
                ),
                named("String", 52),
                false,
                Value::Null,
            ),
        ),
    ];
    // The deprecated method and the non-exhaustive enum.
    for (id, entry) in &mut index {
        match id.as_str() {
            "18" => entry["deprecation"] = json!({ "since": null, "note": null }),
            "3" => entry["attrs"] = json!(["non_exhaustive"]),
            _ => {}
        }
    }
    json!({
        "root": 0,
        "format_version": 57,
        "index": index.into_iter().collect::<serde_json::Map<_, _>>(),
        "paths": {
            "50": { "crate_id": 3, "path": ["other", "deep", "Thing"], "kind": "struct" },
            "51": { "crate_id": 2, "path": ["alloc", "vec", "Vec"], "kind": "struct" },
        },
    })
}

#[test]
fn a_crate_is_listed_item_by_item_with_members_under_their_type() {
    assert_eq!(
        listing(&document()).unwrap(),
        [
            "pub mod demo",
            "impl From<Foo> for String",
            "pub trait demo::Buffers: Send",
            "pub fn demo::Buffers::count(&self) -> usize",
            "impl Buffers for Vec<u8>",
            "pub struct demo::Foo",
            "#[deprecated] pub fn demo::Foo::len(&self) -> usize",
            "pub fn demo::Foo::new() -> Self",
            "pub demo::Foo::size: usize",
            "impl Clone for demo::Foo",
            "impl Send for demo::Foo",
            "#[non_exhaustive] pub enum demo::Mode",
            "pub demo::Mode::Plain",
            "pub demo::Mode::Struct { x: u8 }",
            "pub demo::Mode::Tuple(u8)",
            "pub fn demo::helper(x: u32) -> bool",
            "pub mod demo::prelude",
            "pub use demo::prelude::Foo = demo::Foo",
            "pub use demo::prelude::Thing = other::Thing",
        ]
    );
}

#[test]
fn a_document_without_its_parts_is_refused_by_name() {
    let mut no_index = document();
    no_index["index"] = Value::Null;
    let error = listing(&no_index).unwrap_err().to_string();
    assert!(error.contains("`index`"), "{error}");

    let mut dangling = document();
    dangling["index"]["0"]["inner"]["module"]["items"] = json!([1, 999]);
    let error = listing(&dangling).unwrap_err().to_string();
    assert!(error.contains("item 999"), "{error}");

    let mut unknown = document();
    unknown["index"]["30"]["inner"] = json!({ "hologram": {} });
    let error = listing(&unknown).unwrap_err().to_string();
    assert!(
        error.contains("\"hologram\"") && error.contains("demo::helper"),
        "{error}"
    );
}

#[test]
fn an_inherent_impl_with_bounds_is_listed_and_a_plain_one_is_not() {
    let mut bounded = document();
    let implementation = &mut bounded["index"]["12"]["inner"]["impl"];
    implementation["generics"]["params"] = json!([{ "name": "T", "kind": { "type": {
        "bounds": [{ "trait_bound": { "trait": trait_path("Clone", 60, Value::Null),
                                      "generic_params": [], "modifier": "none" } }],
        "default": null, "is_synthetic": false } } }]);
    implementation["for"]["resolved_path"]["args"] = json!({ "angle_bracketed": {
        "args": [{ "type": { "generic": "T" } }], "constraints": [] } });
    let lines = listing(&bounded).unwrap();
    assert!(
        lines.contains(&"impl<T: Clone> demo::Foo<T>".to_string()),
        "{lines:#?}"
    );
    let plain = listing(&document()).unwrap();
    assert!(
        !plain.iter().any(|line| line == "impl demo::Foo"),
        "{plain:#?}"
    );
}
