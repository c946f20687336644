//! Disjoint views of one device slice, all alive at once: a DDP bucket
//! list over one flat gradient buffer.
//!
//! cudarc's `split_at_mut` reborrows (`&'b mut self`), so views split in
//! a loop cannot outlive the loop's iteration, and a `Vec` of them cannot
//! be built and returned. [`with_buckets`] splits on its own stack, one
//! frame a bucket, and hands every view to the caller's closure at once:
//! each view can go into its own operation, all in flight together, and
//! the borrow of the slice ends when the closure returns.

use cudarc::driver::{CudaSlice, CudaViewMut};

use crate::error::{Error, Result};

/// The most buckets [`with_buckets`] makes: it splits one stack frame a
/// bucket, and DDP's bucket lists hold tens to hundreds.
pub const MAX_BUCKETS: usize = 4096;

/// Calls `f` with one mutable view of `slice` per entry of `lengths`, in
/// order and disjoint: view `i` covers `lengths[i]` elements right after
/// view `i - 1`.
///
/// The lengths may add up to less than the slice (the rest is not lent); a zero
/// length gives an empty view.
///
/// ```no_run
/// use nccl_tensor::prelude::*;
/// # fn step(grads: &mut CudaSlice<f32>) -> nccl_tensor::Result<()> {
/// nccl_tensor::with_buckets(grads, &[1 << 20, 1 << 20, 4096], |buckets| {
///     for bucket in buckets {
///         // Each bucket into its own all_reduce, all in flight together.
///         let _ = bucket.len();
///     }
/// })?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Core`] of kind `InvalidArgument`, before `f` runs, when the
/// lengths add up to more than the slice's length (naming both) or there
/// are more than [`MAX_BUCKETS`].
pub fn with_buckets<T, R>(
    slice: &mut CudaSlice<T>,
    lengths: &[usize],
    f: impl for<'v> FnOnce(Vec<CudaViewMut<'v, T>>) -> R,
) -> Result<R> {
    check_lengths(slice.len(), lengths)?;
    let whole = slice.slice_mut(..);
    Ok(split_rest(
        whole,
        lengths,
        Vec::with_capacity(lengths.len()),
        f,
    ))
}

/// Refuses more than [`MAX_BUCKETS`] lengths, or lengths adding up to
/// more than `available` elements.
fn check_lengths(available: usize, lengths: &[usize]) -> Result<()> {
    let refuse = |expected: String, given: String| {
        Err(Error::Core(nccl_core::Error::InvalidArgument {
            argument: "bucket lengths",
            expected,
            given,
        }))
    };
    if lengths.len() > MAX_BUCKETS {
        return refuse(
            format!("at most {MAX_BUCKETS} buckets"),
            format!("{} lengths", lengths.len()),
        );
    }
    let total = lengths
        .iter()
        .try_fold(0usize, |sum, &length| sum.checked_add(length));
    match total {
        Some(total) if total <= available => Ok(()),
        _ => refuse(
            format!("lengths adding up to at most the slice's {available} elements"),
            format!(
                "{} lengths adding up to {}",
                lengths.len(),
                total.map_or_else(|| "more than usize::MAX".to_string(), |t| t.to_string())
            ),
        ),
    }
}

/// Splits the next bucket off `rest` and recurses on the remainder; the
/// views split so far shorten to this frame's borrow, which is alive
/// until `f` returns.
fn split_rest<'v, T, R>(
    mut rest: CudaViewMut<'v, T>,
    lengths: &[usize],
    done: Vec<CudaViewMut<'v, T>>,
    f: impl for<'w> FnOnce(Vec<CudaViewMut<'w, T>>) -> R,
) -> R {
    let Some((&length, later)) = lengths.split_first() else {
        return f(done);
    };
    let (bucket, remainder) = rest.split_at_mut(length);
    let mut done: Vec<CudaViewMut<'_, T>> = done;
    done.push(bucket);
    split_rest(remainder, later, done, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_within_the_slice_pass() {
        assert!(check_lengths(10, &[4, 0, 6]).is_ok());
        assert!(check_lengths(10, &[3]).is_ok());
        assert!(check_lengths(0, &[]).is_ok());
    }

    #[test]
    fn lengths_past_the_slice_or_too_many_are_refused_naming_both() {
        for (available, lengths, expected, given) in [
            (
                10,
                vec![4, 7],
                "at most the slice's 10 elements",
                "2 lengths adding up to 11",
            ),
            (
                10,
                vec![usize::MAX, 1],
                "the slice's 10",
                "more than usize::MAX",
            ),
            (
                1 << 20,
                vec![1; MAX_BUCKETS + 1],
                "at most 4096 buckets",
                "4097 lengths",
            ),
        ] {
            let message = check_lengths(available, &lengths).unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
            assert!(message.contains(given), "{message}");
        }
    }
}
