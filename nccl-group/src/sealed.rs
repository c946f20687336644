//! The seal of the group's extension traits ([`Lifecycle`](crate::prelude::Lifecycle)
//! and its kin): implemented for [`ProcessGroup`](crate::ProcessGroup)
//! only, so the traits can gain methods without breaking anyone.

/// Implemented by the types the extension traits are for; not nameable
/// outside the crate.
pub trait Sealed {}
