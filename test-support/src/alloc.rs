//! Counting the Rust heap's allocations: a global allocator that forwards
//! to the system's and counts, per thread, the allocations made while that
//! thread has counting switched on. A test binary installs it with
//! `#[global_allocator] static GLOBAL: CountingAllocator = CountingAllocator;`
//! and wraps the calls it checks in [`counted`]. Each thread counts only
//! its own allocations, so tests running at the same time never disturb
//! each other's counts. NCCL's and the driver's own `malloc`s are not Rust
//! allocations and are not seen.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the allocations (and reallocations) of the Rust heap made by a
/// thread inside [`counted`].
pub struct CountingAllocator;

thread_local! {
    // Const-initialised and without destructors, so touching them never
    // allocates (which would recurse into the allocator).
    /// Whether this thread's allocations are counted now.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// This thread's allocations while counting, ever.
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: an allocation during the thread's teardown is not counted.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = COUNT.try_with(|count| count.set(count.get() + 1));
    }
}

/// Runs `f` with this thread's allocations counted (nested calls count
/// into each enclosing one too): its result and the count. Only counts
/// when [`CountingAllocator`] is the binary's global allocator.
pub fn counted<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = COUNT.with(Cell::get);
    let was_counting = COUNTING.with(|counting| counting.replace(true));
    let result = f();
    COUNTING.with(|counting| counting.set(was_counting));
    (result, COUNT.with(Cell::get) - before)
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are this allocator's; the counting
// touches only const thread-locals without destructors, which never
// allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` came from this allocator, which got it from `System`;
        // the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which got it from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}
