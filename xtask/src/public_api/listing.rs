//! A crate's public API as sorted lines of Rust-like text, from its
//! rustdoc JSON: every item at its public path (the shortest one; the
//! others as `pub use OTHER = CANONICAL`), each type's public fields,
//! variants and inherent associated items as lines of their own right
//! under it, then its trait implementations (`impl Clone for ...`).
//!
//! Left out, as they say nothing about this crate: blanket
//! implementations (`impl<T> From<T> for T`) and the unstable traits
//! rustc implements (`Freeze`, `UnsafeUnpin`, `StructuralPartialEq`),
//! which change with the toolchain, not with the code. Constants are
//! listed with their type, not their value.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};

use super::signature::{Names, variant};
use crate::Result;

/// The auto traits whose implementations are part of a type's contract.
const STABLE_AUTO_TRAITS: [&str; 5] = ["Send", "Sync", "Unpin", "UnwindSafe", "RefUnwindSafe"];

/// Unstable traits that derives implement (`derive(PartialEq)` implements
/// `StructuralPartialEq`): the toolchain's business, not the API's.
const DERIVE_INTERNALS: [&str; 1] = ["StructuralPartialEq"];

/// One line of the listing and where it sorts: an item, then its members
/// by name, then its implementations, then the items below its path.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    path: Vec<String>,
    section: Section,
    member: String,
    text: String,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Section {
    Item,
    Member,
    Implementation,
}

/// The sorted lines of the public API of the crate `document` describes.
pub fn listing(document: &Value) -> Result<Vec<String>> {
    let index = document["index"]
        .as_object()
        .ok_or("rustdoc JSON with an `index` object")?;
    let paths = document["paths"]
        .as_object()
        .ok_or("rustdoc JSON with a `paths` object")?;
    let root = id_of(&document["root"])?;
    let crate_name = index
        .get(&root)
        .and_then(|item| item["name"].as_str())
        .ok_or_else(|| format!("rustdoc JSON whose `root` {root} is an item with a name"))?;
    let lister = Lister {
        index,
        names: Names { paths },
    };
    let found = lister.public_paths(&root, crate_name)?;

    let mut entries = Vec::new();
    let mut canonical: HashMap<&str, &[String]> = HashMap::new();
    for (id, places) in &found.local {
        let shortest = places
            .iter()
            .min_by(|a, b| (a.len(), a.join("::")).cmp(&(b.len(), b.join("::"))))
            .ok_or("an item found at no path")?;
        canonical.insert(id, shortest);
    }
    let listed = lister.listed_impls();
    for (id, shortest) in &canonical {
        entries.extend(lister.item(id, shortest, &listed)?);
        for place in &found.local[*id] {
            if place != shortest {
                entries.push(Entry::item(
                    place,
                    format!("pub use {} = {}", place.join("::"), shortest.join("::")),
                ));
            }
        }
    }
    for (place, source) in &found.external {
        entries.push(Entry::item(
            place,
            format!("pub use {} = {source}", place.join("::")),
        ));
    }
    let crate_path = [crate_name.to_string()];
    for (id, item) in index {
        let Some(implementation) = item["inner"].get("impl") else {
            continue;
        };
        if listed.contains(id.as_str()) || implementation["is_synthetic"] == true {
            continue;
        }
        if let Some(text) = lister.implementation(implementation, None)? {
            entries.push(Entry::implementation(&crate_path, text));
        }
    }
    entries.sort();
    // Implementations that differ only in what a line leaves out (a
    // constant's value, a cfg) read alike: one line says it.
    entries.dedup();
    Ok(entries.into_iter().map(|entry| entry.text).collect())
}

impl Entry {
    fn new(path: &[String], section: Section, member: String, text: String) -> Self {
        Entry {
            path: path.to_vec(),
            section,
            member,
            text,
        }
    }

    fn item(path: &[String], text: String) -> Self {
        Self::new(path, Section::Item, String::new(), text)
    }

    fn implementation(path: &[String], text: String) -> Self {
        Self::new(path, Section::Implementation, String::new(), text)
    }
}

/// An id as the `index` map's keys write it.
fn id_of(value: &Value) -> Result<String> {
    match value {
        Value::Number(number) => Ok(number.to_string()),
        Value::String(text) => Ok(text.clone()),
        other => Err(format!("an item id, got {other}").into()),
    }
}

/// Where the crate's public items are: the local ones by id (each at
/// every public path), and the re-exports of other crates' items.
struct Found {
    local: HashMap<String, Vec<Vec<String>>>,
    external: Vec<(Vec<String>, String)>,
}

/// A member of a type or trait: its name (which orders it) and its line.
type Member = (String, String);

/// The implementations that are listed under an item of the crate.
#[derive(Default)]
struct Listed {
    by_types: HashSet<String>,
    by_traits: HashSet<String>,
}

impl Listed {
    fn contains(&self, id: &str) -> bool {
        self.by_types.contains(id) || self.by_traits.contains(id)
    }
}

struct Lister<'a> {
    index: &'a Map<String, Value>,
    names: Names<'a>,
}

impl<'a> Lister<'a> {
    fn get(&self, id: &str) -> Result<&'a Value> {
        self.index
            .get(id)
            .ok_or_else(|| format!("item {id} in rustdoc JSON's index").into())
    }

    /// Every public path of every item, walking the modules from the root,
    /// each once, nearest first; glob re-exports of local modules are
    /// followed in place.
    fn public_paths(&self, root: &str, crate_name: &str) -> Result<Found> {
        let mut found = Found {
            local: HashMap::new(),
            external: Vec::new(),
        };
        let root_path = vec![crate_name.to_string()];
        found
            .local
            .entry(root.to_string())
            .or_default()
            .push(root_path.clone());
        let mut walked = HashSet::from([root.to_string()]);
        let mut queue = VecDeque::from([(root.to_string(), root_path)]);
        while let Some((module, path)) = queue.pop_front() {
            let mut globs = vec![module.clone()];
            self.module_items(&module, &path, &mut found, &mut globs, &mut |id, place| {
                if walked.insert(id.to_string()) {
                    queue.push_back((id.to_string(), place));
                }
            })?;
        }
        Ok(found)
    }

    fn module_items(
        &self,
        module: &str,
        path: &[String],
        found: &mut Found,
        globs: &mut Vec<String>,
        walk: &mut dyn FnMut(&str, Vec<String>),
    ) -> Result<()> {
        let items = self.get(module)?["inner"]["module"]["items"]
            .as_array()
            .ok_or_else(|| format!("module {module} with `items`"))?;
        for child in items {
            let child = id_of(child)?;
            let item = self.get(&child)?;
            if item["visibility"] != "public" {
                continue;
            }
            let (kind, inner) = variant(&item["inner"])?;
            match kind {
                "use" => {
                    let target = match &inner["id"] {
                        Value::Null => None,
                        id => Some(id_of(id)?),
                    };
                    let local = target.clone().filter(|id| self.index.contains_key(id));
                    let local_module = local
                        .as_ref()
                        .is_some_and(|id| self.index[id]["inner"].get("module").is_some());
                    let source = inner["source"].as_str().ok_or("a `use` with a source")?;
                    if inner["is_glob"] == true {
                        match local {
                            Some(module) if local_module => {
                                if !globs.contains(&module) {
                                    globs.push(module.clone());
                                    self.module_items(&module, path, found, globs, walk)?;
                                    globs.pop();
                                }
                            }
                            _ => {
                                let module = self.external_path(target.as_deref(), true);
                                found.external.push((
                                    child_path(path, "*"),
                                    format!("{}::*", module.unwrap_or_else(|| source.to_string())),
                                ));
                            }
                        }
                        continue;
                    }
                    let name = inner["name"].as_str().ok_or("a `use` with a name")?;
                    let place = child_path(path, name);
                    match local {
                        Some(local) => {
                            if local_module {
                                walk(&local, place.clone());
                            }
                            found.local.entry(local).or_default().push(place);
                        }
                        None => {
                            let item = self.external_path(target.as_deref(), false);
                            found
                                .external
                                .push((place, item.unwrap_or_else(|| source.to_string())));
                        }
                    }
                }
                "impl" => {}
                _ => {
                    let name = item["name"]
                        .as_str()
                        .ok_or_else(|| format!("item {child} with a name"))?;
                    let place = child_path(path, name);
                    if kind == "module" {
                        walk(&child, place.clone());
                    }
                    found.local.entry(child).or_default().push(place);
                }
            }
        }
        Ok(())
    }

    /// How a re-export names another crate's item: `nccl_core::Config`,
    /// its crate and its name, not the path of the module that defines
    /// it, so that moving it between that crate's private modules changes
    /// nothing here; a glob's module by its whole path
    /// (`nccl_tensor::prelude`). `None` for an item the document does not
    /// know.
    fn external_path(&self, id: Option<&str>, whole: bool) -> Option<String> {
        let segments = self.names.paths.get(id?)?["path"].as_array()?;
        let segments: Vec<&str> = segments.iter().filter_map(Value::as_str).collect();
        match (whole, segments.as_slice()) {
            (true, _) => Some(segments.join("::")),
            (false, [only]) => Some(only.to_string()),
            (false, [first, .., last]) => Some(format!("{first}::{last}")),
            (false, []) => None,
        }
    }

    /// The implementations listed under the crate's types, and those
    /// listed under its traits.
    fn listed_impls(&self) -> Listed {
        let mut listed = Listed::default();
        for item in self.index.values() {
            let inner = &item["inner"];
            for (kind, field) in [
                ("struct", "impls"),
                ("enum", "impls"),
                ("union", "impls"),
                ("trait", "implementations"),
            ] {
                let Some(ids) = inner[kind][field].as_array() else {
                    continue;
                };
                let set = if kind == "trait" {
                    &mut listed.by_traits
                } else {
                    &mut listed.by_types
                };
                set.extend(ids.iter().filter_map(|id| id_of(id).ok()));
            }
        }
        listed
    }

    /// The lines of one item at its path: the item, its members, its
    /// implementations.
    fn item(&self, id: &str, path: &[String], listed: &Listed) -> Result<Vec<Entry>> {
        let item = self.get(id)?;
        let full = path.join("::");
        let (kind, inner) = variant(&item["inner"])?;
        let generics = |inner: &Value| -> Result<(String, String)> {
            Ok((
                self.names.generic_params(&inner["generics"])?,
                self.names.where_clause(&inner["generics"])?,
            ))
        };
        let mut members = Vec::new();
        let mut members_of_impls = Vec::new();
        let mut implementations = Vec::new();
        let text = match kind {
            "module" => format!("pub mod {full}"),
            "struct" | "union" => {
                let (params, where_clause) = generics(inner)?;
                let shape = match variant(&inner["kind"]).map(|(shape, _)| shape) {
                    Ok("unit") => ";".to_string(),
                    Ok("tuple") => self.tuple_fields(&inner["kind"]["tuple"])?,
                    _ => String::new(),
                };
                let fields = inner["kind"]["plain"]["fields"]
                    .as_array()
                    .or_else(|| inner["fields"].as_array());
                for field in fields.into_iter().flatten() {
                    let field = self.get(&id_of(field)?)?;
                    if field["visibility"] == "public" {
                        let name = field["name"].as_str().ok_or("a field with a name")?;
                        let ty = self.names.ty(&field["inner"]["struct_field"])?;
                        members.push((name.to_string(), format!("pub {full}::{name}: {ty}")));
                    }
                }
                (members_of_impls, implementations) = self.own_impls(id, &full, &inner["impls"])?;
                format!("pub {kind} {full}{params}{shape}{where_clause}")
            }
            "enum" => {
                let (params, where_clause) = generics(inner)?;
                for variant_id in inner["variants"].as_array().ok_or("an enum's variants")? {
                    let variant_item = self.get(&id_of(variant_id)?)?;
                    let name = variant_item["name"].as_str().ok_or("a variant's name")?;
                    let text = self.variant(&variant_item["inner"]["variant"])?;
                    members.push((
                        name.to_string(),
                        format!("{}pub {full}::{name}{text}", attributes(variant_item)),
                    ));
                }
                (members_of_impls, implementations) = self.own_impls(id, &full, &inner["impls"])?;
                format!("pub enum {full}{params}{where_clause}")
            }
            "function" => format!("pub {}", self.names.function(&full, inner)?),
            "trait" => {
                let (params, where_clause) = generics(inner)?;
                let mut supertraits = self.names.bounds(&inner["bounds"])?;
                if !supertraits.is_empty() {
                    supertraits.insert_str(0, ": ");
                }
                let unsafety = if inner["is_unsafe"] == true {
                    "unsafe "
                } else {
                    ""
                };
                let auto = if inner["is_auto"] == true {
                    "auto "
                } else {
                    ""
                };
                for member in inner["items"].as_array().ok_or("a trait's items")? {
                    let member = self.get(&id_of(member)?)?;
                    if let Some(line) = self.associated(&full, member)? {
                        members.push(line);
                    }
                }
                let ids = inner["implementations"]
                    .as_array()
                    .ok_or("a trait's implementations")?;
                for implementation in ids {
                    let implementation_id = id_of(implementation)?;
                    // An implementation for a type of the crate is listed
                    // under that type.
                    if listed.by_types.contains(&implementation_id) {
                        continue;
                    }
                    let implementation = &self.get(&implementation_id)?["inner"]["impl"];
                    implementations.extend(self.implementation(implementation, None)?);
                }
                format!("pub {unsafety}{auto}trait {full}{params}{supertraits}{where_clause}")
            }
            "trait_alias" => {
                let (params, where_clause) = generics(inner)?;
                let bounds = self.names.bounds(&inner["params"])?;
                format!("pub trait {full}{params} = {bounds}{where_clause}")
            }
            "type_alias" => {
                let (params, where_clause) = generics(inner)?;
                let ty = self.names.ty(&inner["type"])?;
                format!("pub type {full}{params}{where_clause} = {ty}")
            }
            "constant" => format!("pub const {full}: {}", self.names.ty(&inner["type"])?),
            "static" => {
                let mutability = if inner["is_mutable"] == true {
                    "mut "
                } else {
                    ""
                };
                let unsafety = if inner["is_unsafe"] == true {
                    "unsafe "
                } else {
                    ""
                };
                let ty = self.names.ty(&inner["type"])?;
                format!("pub {unsafety}static {mutability}{full}: {ty}")
            }
            "macro" => format!("pub macro {full}!"),
            "proc_macro" => match inner["kind"].as_str() {
                Some("attr") => format!("pub proc_macro #[{full}]"),
                Some("derive") => format!("pub proc_macro derive({full})"),
                _ => format!("pub proc_macro {full}!"),
            },
            "extern_type" => format!("pub extern type {full}"),
            "extern_crate" => format!("pub extern crate {full}"),
            "primitive" => format!("pub primitive {full}"),
            other => {
                return Err(format!(
                    "an item of a kind this reader knows, got {other:?} at {full}"
                )
                .into());
            }
        };
        let mut entries = vec![Entry::item(path, format!("{}{text}", attributes(item)))];
        entries.extend(
            members
                .into_iter()
                .chain(members_of_impls)
                .map(|(member, text)| Entry::new(path, Section::Member, member, text)),
        );
        entries.extend(
            implementations
                .into_iter()
                .map(|text| Entry::implementation(path, text)),
        );
        Ok(entries)
    }

    /// `(pub u32, _)`: a tuple struct's fields, the hidden ones as `_`.
    fn tuple_fields(&self, fields: &Value) -> Result<String> {
        let mut parts = Vec::new();
        for field in fields.as_array().ok_or("a tuple struct's fields")? {
            parts.push(match field {
                Value::Null => "_".to_string(),
                id => format!(
                    "pub {}",
                    self.names
                        .ty(&self.get(&id_of(id)?)?["inner"]["struct_field"])?
                ),
            });
        }
        Ok(format!("({})", parts.join(", ")))
    }

    /// `(u32, _)`, ` { a: u32, b: String }` or nothing, and ` = 3` for an
    /// explicit discriminant.
    fn variant(&self, variant_inner: &Value) -> Result<String> {
        let (shape, fields) = variant(&variant_inner["kind"])?;
        let field_type = |id: &Value| -> Result<(String, String)> {
            let field = self.get(&id_of(id)?)?;
            Ok((
                field["name"].as_str().unwrap_or_default().to_string(),
                self.names.ty(&field["inner"]["struct_field"])?,
            ))
        };
        let mut text = match shape {
            "plain" => String::new(),
            "tuple" => {
                let mut parts = Vec::new();
                for field in fields.as_array().ok_or("a tuple variant's fields")? {
                    parts.push(match field {
                        Value::Null => "_".to_string(),
                        id => field_type(id)?.1,
                    });
                }
                format!("({})", parts.join(", "))
            }
            "struct" => {
                let mut parts = Vec::new();
                for field in fields["fields"]
                    .as_array()
                    .ok_or("a struct variant's fields")?
                {
                    let (name, ty) = field_type(field)?;
                    parts.push(format!("{name}: {ty}"));
                }
                if fields["has_stripped_fields"] == true {
                    parts.push("..".to_string());
                }
                format!(" {{ {} }}", parts.join(", "))
            }
            other => return Err(format!("a variant shape, got {other:?}").into()),
        };
        if let Some(expr) = variant_inner["discriminant"]["expr"].as_str() {
            text.push_str(" = ");
            text.push_str(expr);
        }
        Ok(text)
    }

    /// A function, constant or type of a trait or an inherent
    /// implementation, as a member line of `owner`; `None` for a private one.
    fn associated(&self, owner: &str, member: &Value) -> Result<Option<Member>> {
        if !matches!(member["visibility"].as_str(), Some("public" | "default")) {
            return Ok(None);
        }
        let name = member["name"].as_str().ok_or("an associated item's name")?;
        let full = format!("{owner}::{name}");
        let (kind, inner) = variant(&member["inner"])?;
        let text = match kind {
            "function" => format!("pub {}", self.names.function(&full, inner)?),
            "assoc_const" => format!("pub const {full}: {}", self.names.ty(&inner["type"])?),
            "assoc_type" => {
                let mut text = format!(
                    "pub type {full}{}",
                    self.names.generic_params(&inner["generics"])?
                );
                let bounds = self.names.bounds(&inner["bounds"])?;
                if !bounds.is_empty() {
                    text.push_str(": ");
                    text.push_str(&bounds);
                }
                if !inner["type"].is_null() {
                    text.push_str(" = ");
                    text.push_str(&self.names.ty(&inner["type"])?);
                }
                text.push_str(&self.names.where_clause(&inner["generics"])?);
                text
            }
            other => return Err(format!("an associated item, got {other:?} at {full}").into()),
        };
        Ok(Some((
            name.to_string(),
            format!("{}{text}", attributes(member)),
        )))
    }

    /// A type's inherent associated items, as member lines, and the lines
    /// of its implementations: every trait implementation, and the inherent
    /// ones whose generics or bounds say more than `impl Type`.
    fn own_impls(&self, id: &str, full: &str, impls: &Value) -> Result<(Vec<Member>, Vec<String>)> {
        let mut members = Vec::new();
        let mut lines = Vec::new();
        for implementation in impls.as_array().ok_or("a type's impls")? {
            let implementation = &self.get(&id_of(implementation)?)?["inner"]["impl"];
            let line = self.implementation(implementation, Some((id, full)))?;
            if implementation["trait"].is_null() {
                for member in implementation["items"]
                    .as_array()
                    .ok_or("an impl's items")?
                {
                    members.extend(self.associated(full, self.get(&id_of(member)?)?)?);
                }
                lines.extend(line.filter(|line| *line != format!("impl {full}")));
            } else {
                lines.extend(line);
            }
        }
        Ok((members, lines))
    }

    /// `impl<T> Trait for Type<T> where ... { type Error = E }` of a trait
    /// implementation, `impl<T: Bound> Type<T>` of an inherent one;
    /// `None` for a blanket one or an unstable auto trait. `own_type` (its
    /// id and public path) writes the implementing type by that path.
    fn implementation(
        &self,
        implementation: &Value,
        own_type: Option<(&str, &str)>,
    ) -> Result<Option<String>> {
        if !implementation["blanket_impl"].is_null() {
            return Ok(None);
        }
        let trait_part = match &implementation["trait"] {
            Value::Null => String::new(),
            trait_path => {
                let trait_name = self.names.path(trait_path)?;
                let unstable = if implementation["is_synthetic"] == true {
                    !STABLE_AUTO_TRAITS.contains(&trait_name.as_str())
                } else {
                    DERIVE_INTERNALS.contains(&trait_name.as_str())
                };
                if unstable {
                    return Ok(None);
                }
                let negation = if implementation["is_negative"] == true {
                    "!"
                } else {
                    ""
                };
                format!("{negation}{trait_name} for ")
            }
        };
        let for_type = &implementation["for"]["resolved_path"];
        let implementor = match own_type {
            Some((id, full)) if id_of(&for_type["id"]).is_ok_and(|for_id| for_id == id) => {
                format!("{full}{}", self.names.generic_args(&for_type["args"])?)
            }
            _ => self.names.ty(&implementation["for"])?,
        };
        let unsafety = if implementation["is_unsafe"] == true {
            "unsafe "
        } else {
            ""
        };
        let mut text = format!(
            "{unsafety}impl{} {trait_part}{implementor}{}",
            self.names.generic_params(&implementation["generics"])?,
            self.names.where_clause(&implementation["generics"])?,
        );
        let mut associated_types = Vec::new();
        for member in implementation["items"]
            .as_array()
            .ok_or("an impl's items")?
        {
            let member = self.get(&id_of(member)?)?;
            if let Some(assoc) = member["inner"].get("assoc_type") {
                let name = member["name"].as_str().ok_or("an associated type's name")?;
                associated_types.push(format!(
                    "type {name}{} = {}",
                    self.names.generic_params(&assoc["generics"])?,
                    self.names.ty(&assoc["type"])?
                ));
            }
        }
        if !associated_types.is_empty() {
            text.push_str(&format!(" {{ {} }}", associated_types.join("; ")));
        }
        Ok(Some(text))
    }
}

/// `#[deprecated] #[non_exhaustive] ` of an item, or nothing: the
/// attributes that change what a user of the item may do.
fn attributes(item: &Value) -> String {
    let mut text = String::new();
    if !item["deprecation"].is_null() {
        text.push_str("#[deprecated] ");
    }
    let attrs = item["attrs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if attrs.iter().any(|attr| attr == "non_exhaustive") {
        text.push_str("#[non_exhaustive] ");
    }
    text
}

fn child_path(path: &[String], name: &str) -> Vec<String> {
    let mut place = path.to_vec();
    place.push(name.to_string());
    place
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
