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

/// How an operation's input and output lengths relate, and what NCCL's
/// count is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sizes {
    /// Equal lengths; the count is the length.
    Same,
    /// Output = world size x input; the count is the input's length.
    Gathered,
    /// Input = world size x output; the count is the output's length.
    Scattered,
    /// Equal lengths, a multiple of the world size; the count is one
    /// rank's block.
    Exchanged,
}

/// What one operation takes: the one place its argument rules are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The buffers it takes.
    pub layouts: Layouts,
    /// How their lengths relate.
    pub sizes: Sizes,
}

/// The rules of `op`.
pub const fn rules(op: &Op<'_>) -> Rules {
    let (layouts, sizes) = match op {
        Op::AllReduce(_) | Op::Broadcast { .. } | Op::Reduce { .. } => {
            (Layouts::Either, Sizes::Same)
        }
        Op::AllGather => (Layouts::OutOfPlace, Sizes::Gathered),
        Op::ReduceScatter(_) => (Layouts::OutOfPlace, Sizes::Scattered),
        Op::AllToAll => (Layouts::OutOfPlace, Sizes::Exchanged),
        Op::Send { .. } => (Layouts::Input, Sizes::Same),
        Op::Recv { .. } => (Layouts::Output, Sizes::Same),
    };
    Rules { layouts, sizes }
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
                let count = sized(name, rules.sizes, &input, &output, info)?;
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

/// Checks the lengths of an out-of-place operation; returns NCCL's count.
fn sized(
    op: &'static str,
    sizes: Sizes,
    input: &BufferDesc<'_>,
    output: &BufferDesc<'_>,
    info: &CommInfo,
) -> Result<usize> {
    let world = info.world_size.max(1) as usize;
    match sizes {
        Sizes::Same => {
            checks::length(op, "output", input.len, output.len, SAME)?;
            Ok(input.len)
        }
        Sizes::Gathered => {
            let expected = input.len.saturating_mul(world);
            let rule = "world size x input elements";
            checks::length(op, "output", expected, output.len, rule)?;
            Ok(input.len)
        }
        Sizes::Scattered => {
            let expected = output.len.saturating_mul(world);
            let rule = "world size x output elements";
            checks::length(op, "input", expected, input.len, rule)?;
            Ok(output.len)
        }
        Sizes::Exchanged => {
            if input.len % world != 0 {
                return Err(Error::NotDivisible {
                    op,
                    what: "input",
                    given: input.len,
                    world_size: info.world_size,
                });
            }
            checks::length(op, "output", input.len, output.len, SAME)?;
            Ok(input.len / world)
        }
    }
}

const SAME: &str = "the same number of elements as the input";
