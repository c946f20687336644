//! The element types NCCL reduces and moves: one table
//! ([`for_each_data_type!`](crate::for_each_data_type)) from which
//! [`DataType`] and every per-type list of the workspace are generated.

use std::fmt;

use nccl_sys::{Version, ncclDataType_t};

/// Calls `$callback!` with the table of every `ncclDataType_t` of the
/// pinned header, one row per type, in `ncclDataType_t` order.
///
/// Every per-type list of the workspace is generated from it ([`DataType`]
/// here, `NcclType` and `AnyTensor` in nccl-tensor, the benchmark's `-d` and
/// buffers), so a new type is one row here.
///
/// `for_each_data_type!(path::to::callback)` expands to
/// `path::to::callback! { [] ROWS }`, and
/// `for_each_data_type!(path::to::callback, EXTRA...)` to
/// `path::to::callback! { [EXTRA...] ROWS }`, where each row is
///
/// ```text
/// Variant { raw: ncclName, rust: RustType, kind: int|float|fp8, bytes: 4,
///           since: (2, 0, 0), short: "name", torch: "Name", doc: "..." }
/// ```
///
/// * `raw`: the `ncclDataType_t` constant, whose name is the C name;
/// * `rust`: the Rust element type, written to resolve in any crate that
///   depends on `half` and `float8`: a plain number, every bit pattern of
///   which is a valid value (nccl-tensor's `unsafe impl NcclType` relies on
///   it);
/// * `kind`: `int`, `float`, or `fp8` (8-bit floats, whose reductions need
///   compute capability 9.0 and refuse scaling);
/// * `bytes`: the C element size (nccl-tensor asserts it equals the Rust
///   type's at compile time);
/// * `since`: the first NCCL release with the type;
/// * `short`: the name nccl-tests prints;
/// * `torch`: PyTorch's name of the scalar type (`c10::toString` of the
///   `at::ScalarType` that PyTorch maps to this NCCL type), as its flight
///   recorder writes it;
/// * `doc`: a description.
///
/// ```
/// macro_rules! variant_names {
///     ([] $($variant:ident { $($fields:tt)* })*) => {
///         [$(stringify!($variant)),*]
///     };
/// }
/// let names = nccl_core::for_each_data_type!(variant_names);
/// assert_eq!(names.len(), nccl_core::DataType::ALL.len());
/// assert_eq!(names[0], "Int8");
/// ```
#[macro_export]
macro_rules! for_each_data_type {
    ($($callback:ident)::+ $(, $($extra:tt)*)?) => {
        $($callback)::+! {
            [$($($extra)*)?]
            Int8 {       raw: ncclInt8,       rust: i8,               kind: int,   bytes: 1, since: (2, 0, 0),  short: "int8",     torch: "Char",           doc: "Signed 8-bit integer" }
            Uint8 {      raw: ncclUint8,      rust: u8,               kind: int,   bytes: 1, since: (2, 0, 0),  short: "uint8",    torch: "Byte",           doc: "Unsigned 8-bit integer" }
            Int32 {      raw: ncclInt32,      rust: i32,              kind: int,   bytes: 4, since: (2, 0, 0),  short: "int32",    torch: "Int",            doc: "Signed 32-bit integer" }
            Uint32 {     raw: ncclUint32,     rust: u32,              kind: int,   bytes: 4, since: (2, 0, 0),  short: "uint32",   torch: "UInt32",         doc: "Unsigned 32-bit integer" }
            Int64 {      raw: ncclInt64,      rust: i64,              kind: int,   bytes: 8, since: (2, 0, 0),  short: "int64",    torch: "Long",           doc: "Signed 64-bit integer" }
            Uint64 {     raw: ncclUint64,     rust: u64,              kind: int,   bytes: 8, since: (2, 0, 0),  short: "uint64",   torch: "UInt64",         doc: "Unsigned 64-bit integer" }
            Float16 {    raw: ncclFloat16,    rust: ::half::f16,      kind: float, bytes: 2, since: (2, 0, 0),  short: "half",     torch: "Half",           doc: "16-bit IEEE float" }
            Float32 {    raw: ncclFloat32,    rust: f32,              kind: float, bytes: 4, since: (2, 0, 0),  short: "float",    torch: "Float",          doc: "32-bit IEEE float" }
            Float64 {    raw: ncclFloat64,    rust: f64,              kind: float, bytes: 8, since: (2, 0, 0),  short: "double",   torch: "Double",         doc: "64-bit IEEE float" }
            Bfloat16 {   raw: ncclBfloat16,   rust: ::half::bf16,     kind: float, bytes: 2, since: (2, 10, 0), short: "bfloat16", torch: "BFloat16",       doc: "16-bit brain float" }
            Float8E4M3 { raw: ncclFloat8e4m3, rust: ::float8::F8E4M3, kind: fp8,   bytes: 1, since: (2, 24, 0), short: "f8e4m3",   torch: "Float8_e4m3fn",  doc: "8-bit float with 4 exponent bits; reductions need compute capability 9.0" }
            Float8E5M2 { raw: ncclFloat8e5m2, rust: ::float8::F8E5M2, kind: fp8,   bytes: 1, since: (2, 24, 0), short: "f8e5m2",   torch: "Float8_e5m2",    doc: "8-bit float with 5 exponent bits; reductions need compute capability 9.0" }
        }
    };
}

/// Runs `$body` with `$t` naming the Rust element type of `$dtype` (a
/// [`DataType`]), or evaluates `$otherwise` for a data type the table lacks.
///
/// No such type exists, but `DataType` is `#[non_exhaustive]`, so a match on it
/// outside nccl-core needs the arm. The body is compiled once per type, so it
/// may call functions generic over the element type.
///
/// ```
/// use nccl_core::DataType;
/// fn size(dtype: DataType) -> usize {
///     nccl_core::with_data_type!(dtype, T => size_of::<T>(), _ => 0)
/// }
/// assert_eq!(size(DataType::Bfloat16), 2);
/// ```
#[macro_export]
macro_rules! with_data_type {
    ($dtype:expr, $t:ident => $body:expr, _ => $otherwise:expr) => {
        $crate::for_each_data_type!($crate::__with_data_type_arms, $dtype, $t => $body, $otherwise)
    };
}

/// The match of [`with_data_type!`] (a [`for_each_data_type!`] callback).
#[doc(hidden)]
#[macro_export]
macro_rules! __with_data_type_arms {
    (
        [$dtype:expr, $t:ident => $body:expr, $otherwise:expr]
        $($variant:ident { raw: $raw:ident, rust: $rust:ty, $($field:ident: $value:tt),* })*
    ) => {
        match $dtype {
            $($crate::DataType::$variant => {
                type $t = $rust;
                $body
            })*
            #[allow(unreachable_patterns)]
            _ => $otherwise,
        }
    };
}

/// `kind` of a table row as (is a float, is an 8-bit float).
macro_rules! kind_flags {
    (int) => {
        (false, false)
    };
    (float) => {
        (true, false)
    };
    (fp8) => {
        (true, true)
    };
}

/// Defines [`DataType`] from the table.
macro_rules! define_data_type {
    (
        []
        $($variant:ident {
            raw: $raw:ident,
            rust: $(::)? $rust_first:ident $(:: $rust_rest:ident)*,
            kind: $kind:ident,
            bytes: $bytes:literal,
            since: ($major:literal, $minor:literal, $patch:literal),
            short: $short:literal,
            torch: $torch:literal,
            doc: $doc:literal
        })*
    ) => {
        /// Every `ncclDataType_t` of the pinned header.
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DataType {
            $(
                #[doc = concat!(
                    "`", stringify!($raw), "`: ", $doc, ", `", stringify!($rust_first),
                    $("::", stringify!($rust_rest),)* "` in Rust (NCCL ",
                    $major, ".", $minor, "+)."
                )]
                $variant,
            )*
        }

        impl DataType {
            /// Every data type, in `ncclDataType_t` order.
            pub const ALL: [DataType; [$(DataType::$variant),*].len()] = [$(DataType::$variant),*];

            /// The C value.
            pub const fn to_raw(self) -> ncclDataType_t {
                match self {
                    $(DataType::$variant => ncclDataType_t::$raw,)*
                }
            }

            /// Bytes per element.
            pub const fn size_bytes(self) -> usize {
                match self {
                    $(DataType::$variant => $bytes,)*
                }
            }

            /// The first NCCL release that knows this type.
            pub const fn min_version(self) -> Version {
                match self {
                    $(DataType::$variant => Version::new($major, $minor, $patch),)*
                }
            }

            /// Whether this is a floating-point type.
            pub const fn is_float(self) -> bool {
                match self {
                    $(DataType::$variant => kind_flags!($kind).0,)*
                }
            }

            /// Whether this is one of the 8-bit float formats, whose reductions
            /// need a GPU of compute capability 9.0 or newer.
            pub const fn is_fp8(self) -> bool {
                match self {
                    $(DataType::$variant => kind_flags!($kind).1,)*
                }
            }

            /// The C name (`ncclFloat32`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(DataType::$variant => stringify!($raw),)*
                }
            }

            /// The short name nccl-tests prints (`float`, `half`, `bfloat16`, ...).
            pub const fn short_name(self) -> &'static str {
                match self {
                    $(DataType::$variant => $short,)*
                }
            }

            /// PyTorch's name of the scalar type (`Float`, `Half`, `BFloat16`,
            /// `Long`, ...), as its flight recorder writes data types.
            pub const fn torch_name(self) -> &'static str {
                match self {
                    $(DataType::$variant => $torch,)*
                }
            }

            /// A description (`32-bit IEEE float`).
            pub const fn description(self) -> &'static str {
                match self {
                    $(DataType::$variant => $doc,)*
                }
            }
        }
    };
}

crate::for_each_data_type!(define_data_type);

impl DataType {
    /// The data type for a C value, or `None` for one this header lacks.
    pub fn from_raw(raw: ncclDataType_t) -> Option<Self> {
        Self::ALL.into_iter().find(|dtype| dtype.to_raw() == raw)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}
