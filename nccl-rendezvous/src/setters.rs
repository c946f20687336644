//! The builder setters of the workspace's options types, written once:
//! `with_<name>(value) -> Self`, each setting one field. Exported (hidden)
//! for the crates above this one (nccl-group, nccl-launch), whose options
//! types follow the same convention.

/// One `pub fn` per line: `with_name(param: Type) => field = value;` sets
/// `field` to `value` (an expression of `param`) and returns `self`.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_setters {
    ($($(#[$doc:meta])* $name:ident($param:ident: $ty:ty) => $field:ident = $value:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, $param: $ty) -> Self {
            self.$field = $value;
            self
        }
    )*};
}

pub(crate) use __with_setters as with_setters;
