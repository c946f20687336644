//! The macro that turns the generated list of NCCL functions into a table of
//! independently resolved function pointers.

/// Builds [`Functions`](crate::Functions) from the signatures that
/// `cargo xtask bindgen` writes into `functions.rs`.
///
/// Every function becomes an `Option` of a function pointer, resolved on its
/// own when the library is opened, and an accessor that returns the pointer
/// or a [`MissingSymbol`](crate::MissingSymbol) naming the function and the
/// NCCL release that introduced it.
macro_rules! nccl_functions {
    ($(
        $(#[doc = $doc:expr])*
        pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        /// One resolved entry point per NCCL function; `None` where the loaded
        /// library does not export it.
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub struct Functions {
            loaded_version: crate::Version,
            $($name: Option<unsafe extern "C" fn($($ty),*) $(-> $ret)?>,)*
        }

        /// The name of every function in the table, in header order.
        pub const FUNCTION_NAMES: &[&str] = &[$(stringify!($name)),*];

        impl Functions {
            /// Looks every symbol up in `library`, each on its own.
            ///
            /// # Safety
            /// `library` must be a NCCL library whose exported symbols have
            /// the signatures of the pinned header, and it must never be
            /// unloaded while the returned pointers are in use.
            pub(crate) unsafe fn resolve(
                library: &libloading::Library,
                loaded_version: crate::Version,
            ) -> Self {
                Self {
                    loaded_version,
                    $($name: {
                        // SAFETY: the caller guarantees the symbol has this
                        // signature; a missing symbol becomes `None`.
                        let symbol = unsafe {
                            library.get::<unsafe extern "C" fn($($ty),*) $(-> $ret)?>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        };
                        symbol.ok().map(|symbol| *symbol)
                    },)*
                }
            }

            /// Whether the loaded library exports `name`.
            pub fn has(&self, name: &str) -> bool {
                match name {
                    $(stringify!($name) => self.$name.is_some(),)*
                    _ => false,
                }
            }

            /// The error the accessor of `name` returns: `Some` when `name`
            /// is a function of these bindings that the loaded library does
            /// not export, `None` when it exports it or when `name` is no
            /// function of the bindings ([`has`](Self::has) tells which).
            pub fn missing(&self, name: &str) -> Option<crate::MissingSymbol> {
                match name {
                    $(stringify!($name) => self.$name.is_none().then(|| {
                        crate::MissingSymbol::new(stringify!($name), self.loaded_version)
                    }),)*
                    _ => None,
                }
            }

            $(
                $(#[doc = $doc])*
                ///
                /// Returns the entry point, or [`MissingSymbol`](crate::MissingSymbol)
                /// when the loaded library predates this function.
                #[allow(non_snake_case)]
                #[inline]
                pub fn $name(
                    &self,
                ) -> Result<unsafe extern "C" fn($($ty),*) $(-> $ret)?, crate::MissingSymbol> {
                    self.$name
                        .ok_or_else(|| crate::MissingSymbol::new(stringify!($name), self.loaded_version))
                }
            )*
        }
    };
}
