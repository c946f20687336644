//! Types and signatures written from fabricated rustdoc JSON fragments.

use serde_json::{Map, Value, json};

use super::Names;

/// A `paths` table that knows `Config` (id 7) by its own name and
/// `Arc` (id 8).
fn paths() -> Map<String, Value> {
    json!({
        "7": { "crate_id": 1, "path": ["nccl_core", "config", "Config"], "kind": "struct" },
        "8": { "crate_id": 2, "path": ["alloc", "sync", "Arc"], "kind": "struct" },
    })
    .as_object()
    .unwrap()
    .clone()
}

fn path(written: &str, id: u32, args: Value) -> Value {
    json!({ "resolved_path": { "path": written, "id": id, "args": args } })
}

fn angle(args: Value) -> Value {
    json!({ "angle_bracketed": { "args": args, "constraints": [] } })
}

fn reference(lifetime: Option<&str>, mutable: bool, ty: Value) -> Value {
    json!({ "borrowed_ref": { "lifetime": lifetime, "is_mutable": mutable, "type": ty } })
}

fn trait_bound(written: &str, id: u32) -> Value {
    json!({ "trait_bound": {
        "trait": { "path": written, "id": id, "args": null },
        "generic_params": [],
        "modifier": "none",
    } })
}

#[test]
fn a_path_is_written_by_its_items_own_name_with_its_arguments() {
    let paths = paths();
    let names = Names { paths: &paths };
    // Imported as `crate::cfg::Config as Cfg`: still `Config`.
    let config = path("crate::cfg::Cfg", 7, Value::Null);
    assert_eq!(names.ty(&config).unwrap(), "Config");
    // An item the table lacks: the last segment of the written path.
    let work = path(
        "group::Work",
        99,
        angle(json!([{ "lifetime": "'a" }, { "type": { "generic": "B" } }])),
    );
    assert_eq!(names.ty(&work).unwrap(), "Work<'a, B>");
    let arc = path(
        "std::sync::Arc",
        8,
        angle(json!([{ "type": { "primitive": "str" } }])),
    );
    assert_eq!(
        names
            .ty(&reference(Some("'a"), true, json!({ "slice": arc })))
            .unwrap(),
        "&'a mut [Arc<str>]"
    );
}

#[test]
fn compound_types_are_written_as_rust_spells_them() {
    let paths = paths();
    let names = Names { paths: &paths };
    let cases = [
        (json!({ "tuple": [] }), "()"),
        (json!({ "tuple": [{ "primitive": "u8" }] }), "(u8,)"),
        (
            json!({ "array": { "type": { "primitive": "u8" }, "len": "16" } }),
            "[u8; 16]",
        ),
        (
            json!({ "raw_pointer": { "is_mutable": false, "type": { "generic": "T" } } }),
            "*const T",
        ),
        (json!("infer"), "_"),
        (
            json!({ "impl_trait": [trait_bound("Clone", 1), { "outlives": "'static" }] }),
            "impl Clone + 'static",
        ),
        (
            json!({ "qualified_path": {
                "name": "Input",
                "args": null,
                "self_type": { "generic": "B" },
                "trait": { "path": "GroupTensor", "id": 3, "args": null },
            } }),
            "<B as GroupTensor>::Input",
        ),
    ];
    for (ty, expected) in cases {
        assert_eq!(names.ty(&ty).unwrap(), expected, "{ty}");
    }
}

#[test]
fn a_dyn_of_several_bounds_behind_a_reference_gets_parentheses() {
    let paths = paths();
    let names = Names { paths: &paths };
    let dyn_trait = json!({ "dyn_trait": {
        "traits": [
            { "trait": { "path": "Fn", "id": 4, "args": { "parenthesized": {
                "inputs": [{ "primitive": "u32" }], "output": { "primitive": "bool" } } } },
              "generic_params": [] },
            { "trait": { "path": "Send", "id": 5, "args": null }, "generic_params": [] },
        ],
        "lifetime": null,
    } });
    assert_eq!(
        names.ty(&reference(None, false, dyn_trait)).unwrap(),
        "&(dyn Fn(u32) -> bool + Send)"
    );
}

#[test]
fn a_function_pointer_keeps_its_abi_and_drops_unnamed_arguments() {
    let paths = paths();
    let names = Names { paths: &paths };
    let pointer = json!({ "function_pointer": {
        "sig": {
            "inputs": [["_", { "primitive": "i32" }], ["_", { "raw_pointer": {
                "is_mutable": true, "type": { "primitive": "u8" } } }]],
            "output": { "primitive": "i32" },
            "is_c_variadic": false,
        },
        "generic_params": [],
        "header": { "is_const": false, "is_unsafe": true, "is_async": false,
                    "abi": { "C": { "unwind": false } } },
    } });
    assert_eq!(
        names.ty(&pointer).unwrap(),
        "unsafe extern \"C\" fn(i32, *mut u8) -> i32"
    );
}

/// A function item of `inputs`, one type parameter `T: Clone` and the
/// synthetic one rustdoc makes for an `impl Trait` argument.
fn function(inputs: Value) -> Value {
    json!({
        "sig": { "inputs": inputs, "output": { "generic": "T" }, "is_c_variadic": false },
        "generics": {
            "params": [
                { "name": "T", "kind": { "type": {
                    "bounds": [trait_bound("Clone", 1)], "default": null, "is_synthetic": false } } },
                { "name": "impl Send", "kind": { "type": {
                    "bounds": [trait_bound("Send", 5)], "default": null, "is_synthetic": true } } },
            ],
            "where_predicates": [{ "bound_predicate": {
                "type": { "generic": "T" }, "bounds": [trait_bound("Send", 5)], "generic_params": [] } }],
        },
        "header": { "is_const": true, "is_unsafe": false, "is_async": false, "abi": "Rust" },
        "has_body": true,
    })
}

#[test]
fn receivers_generics_and_where_clauses_of_a_function() {
    let paths = paths();
    let names = Names { paths: &paths };
    let self_type = json!({ "generic": "Self" });
    let arc_self = path("Arc", 8, angle(json!([{ "type": { "generic": "Self" } }])));
    let cases = [
        (
            json!([["self", reference(None, false, self_type.clone())]]),
            "&self",
        ),
        (
            json!([["self", reference(Some("'a"), true, self_type.clone())]]),
            "&'a mut self",
        ),
        (json!([["self", self_type]]), "self"),
        (json!([["self", arc_self]]), "self: Arc<Self>"),
    ];
    for (inputs, receiver) in cases {
        let mut inputs = inputs.as_array().unwrap().clone();
        inputs.push(json!(["value", { "impl_trait": [trait_bound("Send", 5)] }]));
        assert_eq!(
            names
                .function("demo::get", &function(json!(inputs)))
                .unwrap(),
            format!(
                "const fn demo::get<T: Clone>({receiver}, value: impl Send) -> T where T: Send"
            )
        );
    }
}

#[test]
fn an_unknown_shape_is_an_error_naming_it() {
    let paths = paths();
    let names = Names { paths: &paths };
    let error = names
        .ty(&json!({ "hologram": { "id": 1 } }))
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"hologram\""), "{error}");
    let error = names.ty(&json!([1, 2])).unwrap_err().to_string();
    assert!(error.contains("[1,2]"), "{error}");
}
