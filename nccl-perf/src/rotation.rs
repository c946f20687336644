//! nccl-tests' buffer rotation: each iteration's call moves to the next
//! offset of buffers allocated for the largest size (`-e`), so that
//! back-to-back calls do not find their data in the GPU's L2 cache.
//!
//! nccl-tests' `startColl` moves both pointers by `shift = total * (iter %
//! steps)`, where `total` is the larger of the call's send and receive
//! extents and `steps` how many of them fit in `-e` bytes; the checked
//! call is iteration 0. [`Rotation`] is that rule in elements, plus
//! nccl-tests' `-u` misalignment; [`Shift`] is one iteration's place.

/// Where one call lies: its rotation slot and the element offset of that
/// slot from the start of each buffer (the same for send and receive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shift {
    /// `iteration % slots`: which of the rotation's places (a layer that
    /// keeps buffers per place, the group layers, indexes them by it).
    pub slot: usize,
    /// Elements from the start of the send and receive buffers.
    pub elems: usize,
}

/// The places the calls of one size and mode rotate through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Elements between consecutive places.
    stride: usize,
    /// How many places the run uses (at least 1).
    slots: usize,
    /// Elements before the first place (`-u`).
    unalign: usize,
}

impl Rotation {
    /// No rotation: every call at `unalign`.
    pub const fn fixed(unalign: usize) -> Self {
        Self {
            stride: 0,
            slots: 1,
            unalign,
        }
    }

    /// nccl-tests' rotation of a call whose buffers span `extent` elements
    /// (`max(send, recv)`) in buffers of `capacity` elements (`-e` bytes of
    /// the element type), for a run of at most `iterations` calls per
    /// launch sequence: places `extent` apart, as many as fit (1 when none
    /// or one does, or `extent` is 0), never more than `iterations`.
    pub fn new(extent: usize, capacity: usize, unalign: usize, iterations: usize) -> Self {
        let steps = capacity.checked_div(extent).unwrap_or(1).max(1);
        Self {
            stride: extent,
            slots: steps.min(iterations.max(1)),
            unalign,
        }
    }

    /// How many places the calls use.
    pub const fn slots(&self) -> usize {
        self.slots
    }

    /// The place of iteration `iteration` (nccl-tests' `shift`); for
    /// `iteration < slots()`, the `iteration`-th place.
    pub const fn shift(&self, iteration: usize) -> Shift {
        let slot = iteration % self.slots;
        Shift {
            slot,
            elems: self.unalign + slot * self.stride,
        }
    }

    /// The places of iterations `0..count`, computed once before a loop
    /// (so the loop itself only reads them).
    pub fn shifts(&self, count: usize) -> Vec<Shift> {
        (0..count).map(|iteration| self.shift(iteration)).collect()
    }

    /// The offset of the last place, the farthest from the buffers' start.
    pub const fn last(&self) -> usize {
        self.unalign + (self.slots - 1) * self.stride
    }

    /// Elements the buffers must hold for every place of a call that
    /// touches `extent` elements from its place.
    pub const fn span(&self, extent: usize) -> usize {
        self.last() + extent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_follow_nccl_tests() {
        // nccl-tests: 1 MiB calls in a 4 MiB buffer move 0, 1, 2, 3 MiB, then wrap.
        let mib = 1 << 20;
        let rotation = Rotation::new(mib, 4 * mib, 0, 200);
        assert_eq!(rotation.slots(), 4);
        let offsets: Vec<usize> = rotation.shifts(6).iter().map(|s| s.elems).collect();
        assert_eq!(offsets, vec![0, mib, 2 * mib, 3 * mib, 0, mib]);
        let slots: Vec<usize> = rotation.shifts(6).iter().map(|s| s.slot).collect();
        assert_eq!(slots, vec![0, 1, 2, 3, 0, 1]);
        assert_eq!(rotation.span(mib), 4 * mib);
        // A capacity that is not a multiple of the extent: whole steps only.
        let rotation = Rotation::new(3, 10, 0, 200);
        assert_eq!(rotation.slots(), 3);
        assert_eq!(rotation.shift(4).elems, 3);
        assert!(rotation.span(3) <= 10);
    }

    #[test]
    fn places_are_capped_by_the_iterations() {
        // 8 B calls in a 1 GiB buffer: 2^27 steps, but 20 iterations use 20 places.
        let rotation = Rotation::new(2, 1 << 28, 0, 20);
        assert_eq!(rotation.slots(), 20);
        assert_eq!(rotation.shift(19).elems, 38);
        assert_eq!(rotation.shift(20), Shift { slot: 0, elems: 0 });
        // The first iterations are where nccl-tests puts them either way.
        let uncapped = Rotation::new(2, 1 << 28, 0, usize::MAX);
        for iteration in 0..20 {
            assert_eq!(rotation.shift(iteration), uncapped.shift(iteration));
        }
    }

    #[test]
    fn degenerate_rotations_stay_in_place() {
        for rotation in [
            Rotation::new(0, 1 << 20, 0, 20), // an empty call (all_gather of 8 B)
            Rotation::new(1 << 20, 1 << 20, 0, 20), // the largest size
            Rotation::new(1 << 20, 1 << 10, 0, 20), // larger than the capacity
            Rotation::new(4, 1 << 20, 0, 0),  // no iteration
            Rotation::fixed(0),
        ] {
            assert_eq!(rotation.slots(), 1, "{rotation:?}");
            assert_eq!(rotation.shifts(3), vec![Shift::default(); 3]);
        }
    }

    #[test]
    fn unalign_moves_every_place() {
        let rotation = Rotation::new(4, 16, 3, 200);
        let offsets: Vec<usize> = rotation.shifts(5).iter().map(|s| s.elems).collect();
        assert_eq!(offsets, vec![3, 7, 11, 15, 3]);
        assert_eq!(rotation.span(4), 19);
        assert_eq!(Rotation::fixed(5).shift(7), Shift { slot: 0, elems: 5 });
        assert_eq!(Rotation::fixed(5).span(4), 9);
    }
}
