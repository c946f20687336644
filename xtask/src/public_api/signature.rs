//! Rust source text for the types, bounds, generics and function
//! signatures of a rustdoc JSON document (read as `serde_json` values).
//!
//! A named type is written by its item's own name (`Work<B>`, not the path
//! the source happened to import it by), so a changed `use` never shows
//! as a changed API. A shape this reader does not know is an `Err` naming
//! it, never a guess.

use serde_json::{Map, Value};

use crate::Result;

/// What a signature needs from the document: the names of the items its
/// paths point at.
pub struct Names<'a> {
    /// The document's `paths` table: an id's crate, path and kind.
    pub paths: &'a Map<String, Value>,
}

/// The one key of a rustdoc enum written as `{"variant": payload}`, or a
/// unit variant written as a bare string (payload `Null`).
pub fn variant(value: &Value) -> Result<(&str, &Value)> {
    match value {
        Value::String(name) => Ok((name, &Value::Null)),
        Value::Object(map) if map.len() == 1 => {
            let (name, payload) = map.iter().next().ok_or("empty object")?;
            Ok((name, payload))
        }
        other => {
            Err(format!("a rustdoc enum (an object of one key, or a string), got {other}").into())
        }
    }
}

fn string<'v>(value: &'v Value, field: &str) -> Result<&'v str> {
    value[field]
        .as_str()
        .ok_or_else(|| format!("a string `{field}` in {value}").into())
}

fn array<'v>(value: &'v Value, field: &str) -> Result<&'v [Value]> {
    value[field]
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| format!("an array `{field}` in {value}").into())
}

/// `a, b, c` of each rendered value.
fn joined(
    values: &[Value],
    separator: &str,
    render: impl Fn(&Value) -> Result<String>,
) -> Result<String> {
    Ok(values
        .iter()
        .map(render)
        .collect::<Result<Vec<_>>>()?
        .join(separator))
}

impl Names<'_> {
    /// A type: `Result<Work<B>, GroupError>`, `&mut [T]`, `impl Fn(u32)`.
    pub fn ty(&self, ty: &Value) -> Result<String> {
        let (kind, inner) = variant(ty)?;
        Ok(match kind {
            "resolved_path" => self.path(inner)?,
            "dyn_trait" => self.dyn_trait(inner)?,
            "generic" | "primitive" => inner.as_str().ok_or("a name")?.to_string(),
            "function_pointer" => {
                let mut text = self.higher_ranked(array(inner, "generic_params")?)?;
                text.push_str(&header(&inner["header"])?);
                text.push_str("fn");
                text.push_str(&self.inputs_and_output(&inner["sig"], false)?);
                text
            }
            "tuple" => {
                let items = inner.as_array().ok_or("a tuple's types")?;
                let text = joined(items, ", ", |item| self.ty(item))?;
                if items.len() == 1 {
                    format!("({text},)")
                } else {
                    format!("({text})")
                }
            }
            "slice" => format!("[{}]", self.ty(inner)?),
            "array" => format!("[{}; {}]", self.ty(&inner["type"])?, string(inner, "len")?),
            // A pattern type (`u32 is 1..`): unstable; its type is enough.
            "pat" => self.ty(&inner["type"])?,
            "impl_trait" => format!("impl {}", self.bounds(inner)?),
            "infer" => "_".to_string(),
            "raw_pointer" => {
                let mutability = if inner["is_mutable"] == true {
                    "mut"
                } else {
                    "const"
                };
                format!("*{mutability} {}", self.pointee(&inner["type"])?)
            }
            "borrowed_ref" => {
                let mut text = String::from("&");
                if let Some(lifetime) = inner["lifetime"].as_str() {
                    text.push_str(lifetime);
                    text.push(' ');
                }
                if inner["is_mutable"] == true {
                    text.push_str("mut ");
                }
                text.push_str(&self.pointee(&inner["type"])?);
                text
            }
            "qualified_path" => {
                let self_type = self.ty(&inner["self_type"])?;
                let prefix = match inner["trait"] {
                    Value::Null => self_type,
                    ref path => format!("<{self_type} as {}>", self.path(path)?),
                };
                format!(
                    "{prefix}::{}{}",
                    string(inner, "name")?,
                    self.generic_args(&inner["args"])?
                )
            }
            other => {
                return Err(format!("a type of a kind this reader knows, got {other:?}").into());
            }
        })
    }

    /// A type behind `&` or `*`: a `dyn` or `impl` of several bounds in
    /// parentheses, as Rust requires.
    fn pointee(&self, ty: &Value) -> Result<String> {
        let text = self.ty(ty)?;
        let (kind, _) = variant(ty)?;
        let several = matches!(kind, "dyn_trait" | "impl_trait") && text.contains(" + ");
        Ok(if several { format!("({text})") } else { text })
    }

    fn dyn_trait(&self, inner: &Value) -> Result<String> {
        let mut parts = Vec::new();
        for poly in array(inner, "traits")? {
            let mut text = self.higher_ranked(array(poly, "generic_params")?)?;
            text.push_str(&self.path(&poly["trait"])?);
            parts.push(text);
        }
        if let Some(lifetime) = inner["lifetime"].as_str() {
            parts.push(lifetime.to_string());
        }
        Ok(format!("dyn {}", parts.join(" + ")))
    }

    /// A path to an item with its generic arguments, by the item's own name.
    pub fn path(&self, path: &Value) -> Result<String> {
        let written = string(path, "path")?;
        let id = path["id"].to_string();
        let name = self
            .paths
            .get(&id)
            .and_then(|summary| summary["path"].as_array()?.last()?.as_str())
            .unwrap_or_else(|| written.rsplit("::").next().unwrap_or(written));
        Ok(format!("{name}{}", self.generic_args(&path["args"])?))
    }

    /// `<'a, T, Item = U>`, `(A, B) -> C`, or nothing.
    pub fn generic_args(&self, args: &Value) -> Result<String> {
        if args.is_null() {
            return Ok(String::new());
        }
        let (kind, inner) = variant(args)?;
        match kind {
            "angle_bracketed" => {
                let mut parts = Vec::new();
                for arg in array(inner, "args")? {
                    let (kind, value) = variant(arg)?;
                    parts.push(match kind {
                        "lifetime" => value.as_str().ok_or("a lifetime")?.to_string(),
                        "type" => self.ty(value)?,
                        "const" => string(value, "expr")?.to_string(),
                        "infer" => "_".to_string(),
                        other => return Err(format!("a generic argument, got {other:?}").into()),
                    });
                }
                for constraint in array(inner, "constraints")? {
                    parts.push(self.constraint(constraint)?);
                }
                Ok(if parts.is_empty() {
                    String::new()
                } else {
                    format!("<{}>", parts.join(", "))
                })
            }
            "parenthesized" => {
                let inputs = joined(array(inner, "inputs")?, ", ", |ty| self.ty(ty))?;
                Ok(match &inner["output"] {
                    Value::Null => format!("({inputs})"),
                    output => format!("({inputs}) -> {}", self.ty(output)?),
                })
            }
            "return_type_notation" => Ok("(..)".to_string()),
            other => Err(format!("generic arguments, got {other:?}").into()),
        }
    }

    /// `Item = T` or `Item: Bound`.
    fn constraint(&self, constraint: &Value) -> Result<String> {
        let name = format!(
            "{}{}",
            string(constraint, "name")?,
            self.generic_args(&constraint["args"])?
        );
        let (kind, binding) = variant(&constraint["binding"])?;
        match kind {
            "equality" => Ok(format!("{name} = {}", self.term(binding)?)),
            "constraint" => Ok(format!("{name}: {}", self.bounds(binding)?)),
            other => Err(format!("an associated item constraint, got {other:?}").into()),
        }
    }

    /// A type or a constant on the right of `=`.
    fn term(&self, term: &Value) -> Result<String> {
        let (kind, value) = variant(term)?;
        match kind {
            "type" => self.ty(value),
            "constant" => Ok(string(value, "expr")?.to_string()),
            other => Err(format!("a term (type or constant), got {other:?}").into()),
        }
    }

    /// `Clone + Send + 'a`.
    pub fn bounds(&self, bounds: &Value) -> Result<String> {
        let bounds = bounds.as_array().ok_or("a list of bounds")?;
        joined(bounds, " + ", |bound| self.bound(bound))
    }

    fn bound(&self, bound: &Value) -> Result<String> {
        let (kind, inner) = variant(bound)?;
        match kind {
            "trait_bound" => {
                let mut text = self.higher_ranked(array(inner, "generic_params")?)?;
                match inner["modifier"].as_str() {
                    Some("maybe") => text.push('?'),
                    Some("maybe_const") => text.push_str("~const "),
                    _ => {}
                }
                text.push_str(&self.path(&inner["trait"])?);
                Ok(text)
            }
            "outlives" => Ok(inner.as_str().ok_or("a lifetime")?.to_string()),
            "use" => {
                let captured = inner.as_array().ok_or("captured parameters")?;
                let names = joined(captured, ", ", |arg| {
                    let (_, name) = variant(arg)?;
                    Ok(name.as_str().ok_or("a parameter name")?.to_string())
                })?;
                Ok(format!("use<{names}>"))
            }
            other => Err(format!("a bound, got {other:?}").into()),
        }
    }

    /// `for<'a> ` of higher-ranked parameters, or nothing.
    fn higher_ranked(&self, params: &[Value]) -> Result<String> {
        if params.is_empty() {
            return Ok(String::new());
        }
        Ok(format!(
            "for<{}> ",
            joined(params, ", ", |p| self.param(p))?
        ))
    }

    /// One generic parameter: `'a: 'b`, `T: Clone = u8`, `const N: usize`.
    fn param(&self, param: &Value) -> Result<String> {
        let name = string(param, "name")?;
        let (kind, inner) = variant(&param["kind"])?;
        match kind {
            "lifetime" => {
                let outlives: Vec<&str> = array(inner, "outlives")?
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                Ok(if outlives.is_empty() {
                    name.to_string()
                } else {
                    format!("{name}: {}", outlives.join(" + "))
                })
            }
            "type" => {
                let mut text = name.to_string();
                if !array(inner, "bounds")?.is_empty() {
                    text.push_str(": ");
                    text.push_str(&self.bounds(&inner["bounds"])?);
                }
                if !inner["default"].is_null() {
                    text.push_str(" = ");
                    text.push_str(&self.ty(&inner["default"])?);
                }
                Ok(text)
            }
            "const" => {
                let mut text = format!("const {name}: {}", self.ty(&inner["type"])?);
                if let Some(default) = inner["default"].as_str() {
                    text.push_str(" = ");
                    text.push_str(default);
                }
                Ok(text)
            }
            other => Err(format!("a generic parameter, got {other:?}").into()),
        }
    }

    /// `<'a, T: Clone>` of declared generics, or nothing. The parameters
    /// rustdoc makes for `impl Trait` arguments are left out: the argument
    /// shows them.
    pub fn generic_params(&self, generics: &Value) -> Result<String> {
        let declared: Vec<Value> = array(generics, "params")?
            .iter()
            .filter(|param| param["kind"]["type"]["is_synthetic"] != true)
            .cloned()
            .collect();
        if declared.is_empty() {
            return Ok(String::new());
        }
        Ok(format!("<{}>", joined(&declared, ", ", |p| self.param(p))?))
    }

    /// ` where T: Clone, 'a: 'b`, or nothing.
    pub fn where_clause(&self, generics: &Value) -> Result<String> {
        let predicates = array(generics, "where_predicates")?;
        if predicates.is_empty() {
            return Ok(String::new());
        }
        let text = joined(predicates, ", ", |predicate| {
            let (kind, inner) = variant(predicate)?;
            match kind {
                "bound_predicate" => Ok(format!(
                    "{}{}: {}",
                    self.higher_ranked(array(inner, "generic_params")?)?,
                    self.ty(&inner["type"])?,
                    self.bounds(&inner["bounds"])?
                )),
                "lifetime_predicate" => {
                    let outlives: Vec<&str> = array(inner, "outlives")?
                        .iter()
                        .filter_map(Value::as_str)
                        .collect();
                    Ok(format!(
                        "{}: {}",
                        string(inner, "lifetime")?,
                        outlives.join(" + ")
                    ))
                }
                "eq_predicate" => Ok(format!(
                    "{} = {}",
                    self.ty(&inner["lhs"])?,
                    self.term(&inner["rhs"])?
                )),
                other => Err(format!("a where predicate, got {other:?}").into()),
            }
        })?;
        Ok(format!(" where {text}"))
    }

    /// `(&self, op: ReduceOp) -> Result<Work>`: a function's arguments and
    /// return type; `receiver` writes a first `self` argument as Rust
    /// spells it (`&self`, `&mut self`, `self`).
    pub fn inputs_and_output(&self, sig: &Value, receiver: bool) -> Result<String> {
        let mut arguments = Vec::new();
        for (position, input) in array(sig, "inputs")?.iter().enumerate() {
            let pair = input.as_array().ok_or("an argument [name, type]")?;
            let [name, ty] = pair.as_slice() else {
                return Err(format!("an argument [name, type], got {input}").into());
            };
            let name = name.as_str().ok_or("an argument name")?;
            let self_argument = receiver && position == 0 && name == "self";
            arguments.push(match self_argument.then(|| self_receiver(ty)).flatten() {
                Some(text) => text,
                // A function pointer's unnamed arguments.
                None if name.is_empty() || (!receiver && name == "_") => self.ty(ty)?,
                None => format!("{name}: {}", self.ty(ty)?),
            });
        }
        if sig["is_c_variadic"] == true {
            arguments.push("...".to_string());
        }
        let mut text = format!("({})", arguments.join(", "));
        if !sig["output"].is_null() {
            text.push_str(" -> ");
            text.push_str(&self.ty(&sig["output"])?);
        }
        Ok(text)
    }

    /// `name<T>(args) -> R where ...` of a function item, `fn` and its
    /// qualifiers before it: `const unsafe fn name(...)`.
    pub fn function(&self, name: &str, function: &Value) -> Result<String> {
        Ok(format!(
            "{}fn {name}{}{}{}",
            header(&function["header"])?,
            self.generic_params(&function["generics"])?,
            self.inputs_and_output(&function["sig"], true)?,
            self.where_clause(&function["generics"])?
        ))
    }
}

/// `self`, `&self`, `&'a mut self` for a receiver of type `Self`, `&Self`,
/// `&'a mut Self`; `None` for other receiver types (`self: Arc<Self>`),
/// which are written as a typed argument.
fn self_receiver(ty: &Value) -> Option<String> {
    if ty["generic"] == "Self" {
        return Some("self".to_string());
    }
    let reference = &ty["borrowed_ref"];
    if reference["type"]["generic"] != "Self" {
        return None;
    }
    let mut text = String::from("&");
    if let Some(lifetime) = reference["lifetime"].as_str() {
        text.push_str(lifetime);
        text.push(' ');
    }
    if reference["is_mutable"] == true {
        text.push_str("mut ");
    }
    text.push_str("self");
    Some(text)
}

/// `const async unsafe extern "C" ` of a function header, or nothing.
fn header(header: &Value) -> Result<String> {
    let mut text = String::new();
    for (flag, word) in [
        ("is_const", "const "),
        ("is_async", "async "),
        ("is_unsafe", "unsafe "),
    ] {
        if header[flag] == true {
            text.push_str(word);
        }
    }
    let (abi, payload) = variant(&header["abi"])?;
    let unwind = if payload["unwind"] == true {
        "-unwind"
    } else {
        ""
    };
    match abi {
        "Rust" => {}
        "Other" => {
            let name = payload.as_str().ok_or("an ABI name")?;
            text.push_str(&format!("extern \"{name}\" "));
        }
        // rustdoc names the ABIs by their Rust variants (`C`, `SysV64`).
        "C" => text.push_str(&format!("extern \"C{unwind}\" ")),
        named => text.push_str(&format!("extern \"{}{unwind}\" ", named.to_lowercase())),
    }
    Ok(text)
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
