//! Each operation described once: the buffers it takes, how their lengths
//! relate ([`rules`]), and the pure plan
//! step that makes every check and returns what to enqueue ([`Plan`]).
//! [`Communicator::plan`](crate::Communicator::plan) adds the buffers'
//! addresses, and [`Planned::enqueue`](crate::Planned::enqueue) issues it.

use nccl_core::{DataType, Op};

use crate::buffer::BufferDesc;
use crate::checks::{self, CommInfo};
use crate::error::{Error, Result};

/// The buffers an operation is given, described (no addresses).
#[derive(Clone, Copy, Debug)]
pub enum Layout<'a> {
    /// One buffer, read and written (in place).
    InPlace(BufferDesc<'a>),
    /// Separate input and output.
    OutOfPlace {
        /// What this rank contributes.
        input: BufferDesc<'a>,
        /// Where this rank's result goes.
        output: BufferDesc<'a>,
    },
    /// One buffer that is only read (a send).
    Input(BufferDesc<'a>),
    /// One buffer that is only written (a receive).
    Output(BufferDesc<'a>),
}

impl Layout<'_> {
    /// How the layout is named in an error.
    pub const fn name(&self) -> &'static str {
        match self {
            Layout::InPlace(_) => "one buffer in place",
            Layout::OutOfPlace { .. } => "an input and an output",
            Layout::Input(_) => "an input only",
            Layout::Output(_) => "an output only",
        }
    }
}

/// Which layouts an operation takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layouts {
    /// In place or out of place.
    Either,
    /// Out of place only.
    OutOfPlace,
    /// An input only.
    Input,
    /// An output only.
    Output,
}

impl Layouts {
    fn accepts(self, layout: &Layout<'_>) -> bool {
        matches!(
            (self, layout),
            (
                Layouts::Either,
                Layout::InPlace(_) | Layout::OutOfPlace { .. }
            ) | (Layouts::OutOfPlace, Layout::OutOfPlace { .. })
                | (Layouts::Input, Layout::Input(_))
                | (Layouts::Output, Layout::Output(_))
        )
    }

    const fn name(self) -> &'static str {
        match self {
            Layouts::Either => "one buffer in place, or an input and an output",
            Layouts::OutOfPlace => "an input and an output",
            Layouts::Input => "an input only",
            Layouts::Output => "an output only",
        }
    }
}

/// How many elements one of an operation's buffers holds, in blocks of
/// NCCL's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// One block: NCCL's count.
    Block,
    /// One block per rank: world size x NCCL's count.
    World,
}

/// How an operation's input and output lengths relate, and what NCCL's
/// count is: a block, taken from the first buffer of one block (the
/// input when both are), or the input's length over the world size when
/// both buffers hold one block per rank (which must divide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The input's extent.
    pub input: Extent,
    /// The output's extent.
    pub output: Extent,
}

impl Sizes {
    /// Equal lengths; the count is the length (all_reduce, broadcast,
    /// reduce, send, recv).
    pub const SAME: Sizes = Sizes::new(Extent::Block, Extent::Block);
    /// Output = world size x input; the count is the input's length
    /// (all_gather).
    pub const GATHERED: Sizes = Sizes::new(Extent::Block, Extent::World);
    /// Input = world size x output; the count is the output's length
    /// (reduce_scatter).
    pub const SCATTERED: Sizes = Sizes::new(Extent::World, Extent::Block);
    /// Equal lengths, a multiple of the world size; the count is one
    /// rank's block (all_to_all).
    pub const EXCHANGED: Sizes = Sizes::new(Extent::World, Extent::World);

    const fn new(input: Extent, output: Extent) -> Self {
        Self { input, output }
    }

    /// The elements of the input and the output for NCCL's `count` on
    /// `world` ranks (a world of 0 counts as one rank).
    pub fn lengths(self, count: usize, world: usize) -> (usize, usize) {
        let whole = count.saturating_mul(world.max(1));
        let len = |extent| match extent {
            Extent::Block => count,
            Extent::World => whole,
        };
        (len(self.input), len(self.output))
    }
}

/// What one operation takes: the one place its argument rules are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The buffers it takes.
    pub layouts: Layouts,
    /// How their lengths relate.
    pub sizes: Sizes,
    /// Whether the buffer of one block per rank is used on the root only
    /// (gather's output, scatter's input): elsewhere its length is not
    /// checked, and an empty buffer will do.
    pub spread_on_root_only: bool,
}

/// The rules of `op`.
pub const fn rules(op: &Op<'_>) -> Rules {
    let (layouts, sizes, spread_on_root_only) = match op {
        Op::AllReduce(_) | Op::Broadcast { .. } | Op::Reduce { .. } => {
            (Layouts::Either, Sizes::SAME, false)
        }
        Op::AllGather => (Layouts::OutOfPlace, Sizes::GATHERED, false),
        Op::ReduceScatter(_) => (Layouts::OutOfPlace, Sizes::SCATTERED, false),
        Op::AllToAll => (Layouts::OutOfPlace, Sizes::EXCHANGED, false),
        Op::Gather { .. } => (Layouts::OutOfPlace, Sizes::GATHERED, true),
        Op::Scatter { .. } => (Layouts::OutOfPlace, Sizes::SCATTERED, true),
        Op::Send { .. } => (Layouts::Input, Sizes::SAME, false),
        Op::Recv { .. } => (Layouts::Output, Sizes::SAME, false),
    };
    Rules {
        layouts,
        sizes,
        spread_on_root_only,
    }
}

/// An operation whose every argument passed its checks: what to enqueue.
#[derive(Clone, Copy, Debug)]
pub struct Plan<'r> {
    /// The operation.
    pub op: Op<'r>,
    /// The element type.
    pub dtype: DataType,
    /// NCCL's count for the operation (see [`nccl_core::Call`]); 0 means
    /// there is nothing to do.
    pub count: usize,
    /// Elements of the input (of the one buffer when in place), for logs
    /// and flight recorders.
    pub input_len: usize,
}

impl<'r> Plan<'r> {
    /// Every check of `op` on buffers laid out as `layout` and a stream on
    /// device `stream_device`, as a pure function of the communicator's
    /// facts: the layout the operation takes, the stream's device, the
    /// root or peer, each buffer (device, contiguity, a data type the
    /// loaded NCCL knows), one data type for both, the lengths
    /// ([`Sizes`]) and the reduction.
    ///
    /// # Errors
    /// The first failed check, naming what was expected and what was given.
    pub fn new(
        op: Op<'r>,
        info: &CommInfo,
        layout: &Layout<'_>,
        stream_device: usize,
    ) -> Result<Self> {
        let name = op.name();
        let rules = rules(&op);
        if !rules.layouts.accepts(layout) {
            return Err(Error::WrongLayout {
                op: name,
                expected: rules.layouts.name(),
                given: layout.name(),
            });
        }
        checks::stream(name, stream_device, info.device)?;
        match op.rank_argument() {
            Some((what, peer)) if op.is_point_to_point() => checks::peer(name, what, peer, info)?,
            Some((what, root)) => checks::rank(name, what, root, info)?,
            None => {}
        }
        let (dtype, count, input_len) = match *layout {
            Layout::InPlace(desc) | Layout::Input(desc) | Layout::Output(desc) => {
                checks::buffer(name, "tensor", &desc, info)?;
                (desc.dtype, desc.len, desc.len)
            }
            Layout::OutOfPlace { input, output } => {
                checks::buffer(name, "input", &input, info)?;
                checks::buffer(name, "output", &output, info)?;
                checks::same_dtype(name, &input, &output)?;
                let on_root = match op.rank_argument() {
                    Some((_, root)) => root == info.rank,
                    None => true,
                };
                let check_spread = on_root || !rules.spread_on_root_only;
                let count = sized(name, rules.sizes, &input, &output, info, check_spread)?;
                (output.dtype, count, input.len)
            }
        };
        if let Some(reduction) = op.reduction() {
            checks::reduction(name, reduction, dtype, info)?;
        }
        Ok(Self {
            op,
            dtype,
            count,
            input_len,
        })
    }
}

/// Checks the lengths of an out-of-place operation against its
/// [`Sizes`] (the length of the buffer of one block per rank only where
/// `check_spread`); returns NCCL's count.
fn sized(
    op: &'static str,
    sizes: Sizes,
    input: &BufferDesc<'_>,
    output: &BufferDesc<'_>,
    info: &CommInfo,
    check_spread: bool,
) -> Result<usize> {
    let world = info.world_size.max(1);
    // The reference is the first buffer of one block, else the input,
    // which then holds one block per rank.
    let input_is_reference = sizes.input == Extent::Block || sizes.output == Extent::World;
    let (reference, reference_extent, what, checked, checked_extent) = if input_is_reference {
        ("input", sizes.input, "output", output, sizes.output)
    } else {
        ("output", sizes.output, "input", input, sizes.input)
    };
    let reference_len = if input_is_reference {
        input.len
    } else {
        output.len
    };
    let block = match reference_extent {
        Extent::Block => reference_len,
        Extent::World if reference_len % world != 0 => {
            return Err(Error::NotDivisible {
                op,
                what: reference,
                given: reference_len,
                world_size: info.world_size,
            });
        }
        Extent::World => reference_len / world,
    };
    if checked_extent == Extent::World && reference_extent == Extent::Block && !check_spread {
        return Ok(block);
    }
    let (expected, rule) = match (reference_extent, checked_extent) {
        (Extent::Block, Extent::World) if input_is_reference => {
            (block.saturating_mul(world), "world size x input elements")
        }
        (Extent::Block, Extent::World) => {
            (block.saturating_mul(world), "world size x output elements")
        }
        _ => (reference_len, SAME),
    };
    checks::length(op, what, expected, checked.len, rule)?;
    Ok(block)
}

const SAME: &str = "the same number of elements as the input";
