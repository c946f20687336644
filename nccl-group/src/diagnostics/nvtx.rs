//! NVTX ranges and marks named after the group's operations (feature
//! `nvtx`), so that a timeline of Nsight Systems shows which operation of
//! which group launched each NCCL kernel: a range per operation around its
//! enqueue, `nccl_group:<group>:<operation> #<seq>`, a range around a heal
//! and a mark at an abort.
//!
//! Through NVIDIA's `nvtx` crate (NVTX v3, its headers vendored): with no
//! profiler attached each call returns at once, and a name with a NUL in
//! it is cut there rather than refused. Without the feature the macros
//! expand to nothing: no argument is evaluated, nothing is called.

/// Opens an NVTX range on the calling thread, named
/// `nccl_group:<group>:<what>` (`what` as `format!` takes it), until the
/// end of the enclosing block.
macro_rules! range {
    ($group:expr, $($what:tt)+) => {
        #[cfg(feature = "nvtx")]
        let _nvtx_range = $crate::diagnostics::nvtx::push_range($group, format_args!($($what)+));
    };
}

/// Puts an NVTX mark on the calling thread's timeline, named as
/// [`range!`] names its range.
macro_rules! mark {
    ($group:expr, $($what:tt)+) => {
        #[cfg(feature = "nvtx")]
        $crate::diagnostics::nvtx::put_mark($group, format_args!($($what)+));
    };
}

pub(crate) use {mark, range};

/// [`range!`]'s range.
#[cfg(feature = "nvtx")]
pub(crate) fn push_range(group: &str, what: std::fmt::Arguments<'_>) -> nvtx::LocalRange {
    nvtx::LocalRange::new(name(group, what))
}

/// [`mark!`]'s mark.
#[cfg(feature = "nvtx")]
pub(crate) fn put_mark(group: &str, what: std::fmt::Arguments<'_>) {
    nvtx::mark(name(group, what));
}

/// `nccl_group:<group>:<what>`, cut at a NUL if it has one.
#[cfg(feature = "nvtx")]
fn name(group: &str, what: std::fmt::Arguments<'_>) -> nvtx::Str {
    nvtx::Str::from_string_lossy(format!("nccl_group:{group}:{what}"))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    #[test]
    fn ranges_and_marks_need_no_profiler_and_take_any_name() {
        let evaluated = Cell::new(0);
        {
            range!("trainer", "all_reduce #{}", evaluated.replace(1));
            range!("nested\0name", "heal {}", evaluated.replace(2));
            mark!("trainer", "abort {}", evaluated.replace(3));
        }
        // The arguments are evaluated with the feature only.
        let expected = if cfg!(feature = "nvtx") { 3 } else { 0 };
        assert_eq!(evaluated.get(), expected);
    }
}
