//! The named methods of a [`Batch`], one per way an operation can be
//! added, written as one table: each is [`Batch::push`] of one [`Op`] on
//! one [`Operands`](crate::Operands) form, named as the
//! [`Communicator`]'s method that issues it alone.

use nccl_core::{Op, Reduction};

use super::Batch;
#[cfg(doc)]
use super::plan_batch;
use crate::operand::{Form, Input, Output, Pair, ReadOnly, Single};
#[cfg(doc)]
use crate::{Communicator, Plan};

/// One named method of [`Batch`], as its table describes it: for tools
/// and tests that list what a batch takes.
#[derive(Clone, Copy, Debug)]
pub struct BatchMethod {
    /// The method's name (`all_reduce_into`).
    pub name: &'static str,
    /// Whether an [`Op`] is of the kind the method adds.
    pub adds: fn(&Op<'_>) -> bool,
    /// The [`Operands`](crate::Operands) form its buffers come in.
    pub operands: Form,
}

/// The named methods of [`Batch`], one row each: `fn $name($args) =>
/// Op::$variant.., $Form(..);` defines `fn $name(&mut self, $args) ->
/// &mut Self`, which [`Batch::push`]es that operation on those operands,
/// and a [`BatchMethod`] of [`Batch::METHODS`].
///
/// Nothing is checked when an operation is added: [`Batch::enqueue`] checks
/// every one, as [`Plan::new`] does, and the batch ([`plan_batch`]).
macro_rules! batch_operations {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?)
            => Op::$variant:ident $(($($tuple:tt)*))? $({$($named:tt)*})?, $form:ident $operands:tt;
    )*) => {
        impl<'a> Batch<'a> {
            /// Every named method, in the order of their table.
            pub const METHODS: &'static [BatchMethod] = &[$(BatchMethod {
                name: stringify!($name),
                adds: |op| matches!(op, Op::$variant { .. }),
                operands: Form::$form,
            }),*];

            $(
                $(#[$doc])*
                pub fn $name(&mut self, $($arg: $ty),*) -> &mut Self {
                    self.push(
                        Op::$variant $(($($tuple)*))? $({$($named)*})?,
                        $form $operands,
                    )
                }
            )*
        }
    };
}

batch_operations! {
    /// Adds an in-place [`Communicator::all_reduce`] of `tensor`.
    ///
    /// Checked at enqueue: the buffer on the communicator's device,
    /// contiguous, of a data type the loaded NCCL knows, and a reduction it
    /// supports for that type.
    fn all_reduce(tensor: impl Output + 'a, op: impl Into<Reduction<'a>>)
        => Op::AllReduce(op.into()), Single(tensor);

    /// Adds an out-of-place [`Communicator::all_reduce_into`].
    ///
    /// Checked at enqueue: as `all_reduce`, plus the same data type and
    /// length for both buffers, and not one cell twice.
    fn all_reduce_into(input: impl Input + 'a, output: impl Output + 'a, op: impl Into<Reduction<'a>>)
        => Op::AllReduce(op.into()), Pair { input, output };

    /// Adds an in-place [`Communicator::broadcast`] of `tensor` from rank
    /// `root`.
    ///
    /// Checked at enqueue: `root` in range; the buffer as in `all_reduce`.
    fn broadcast(tensor: impl Output + 'a, root: usize) => Op::Broadcast { root }, Single(tensor);

    /// Adds an out-of-place [`Communicator::broadcast_into`].
    ///
    /// Checked at enqueue: as `broadcast`, plus the same data type and
    /// length for both buffers.
    fn broadcast_into(input: impl Input + 'a, output: impl Output + 'a, root: usize)
        => Op::Broadcast { root }, Pair { input, output };

    /// Adds an in-place [`Communicator::reduce`] of `tensor` into rank
    /// `root`.
    ///
    /// Checked at enqueue: `root` in range; the buffer and reduction as in
    /// `all_reduce`.
    fn reduce(tensor: impl Output + 'a, op: impl Into<Reduction<'a>>, root: usize)
        => Op::Reduce { op: op.into(), root }, Single(tensor);

    /// Adds an out-of-place [`Communicator::reduce_into`].
    ///
    /// Checked at enqueue: as `reduce`, plus the same data type and length
    /// for both buffers.
    fn reduce_into(input: impl Input + 'a, output: impl Output + 'a, op: impl Into<Reduction<'a>>, root: usize)
        => Op::Reduce { op: op.into(), root }, Pair { input, output };

    /// Adds a [`Communicator::all_gather_into_tensor`]: every rank's
    /// `input` into `output`, in rank order.
    ///
    /// Checked at enqueue: output length = world size x input length, the
    /// same data type, the buffers as in `all_reduce`.
    fn all_gather_into_tensor(output: impl Output + 'a, input: impl Input + 'a)
        => Op::AllGather, Pair { input, output };

    /// Adds a [`Communicator::reduce_scatter_tensor`]: rank `r` gets block
    /// `r` of the reduction of `input` in `output`.
    ///
    /// Checked at enqueue: input length = world size x output length, the
    /// same data type, a supported reduction.
    fn reduce_scatter_tensor(output: impl Output + 'a, input: impl Input + 'a, op: impl Into<Reduction<'a>>)
        => Op::ReduceScatter(op.into()), Pair { input, output };

    /// Adds a [`Communicator::all_to_all_single`] with equal splits.
    ///
    /// Checked at enqueue: equal lengths, divisible by the world size, the
    /// same data type.
    fn all_to_all_single(output: impl Output + 'a, input: impl Input + 'a)
        => Op::AllToAll, Pair { input, output };

    /// Adds a [`Communicator::gather`] of every rank's `input` into
    /// `output` on rank `root`.
    ///
    /// Checked at enqueue: `root` in range; on the root, output length =
    /// world size x input length; the same data type; the buffers as in
    /// `all_reduce`.
    fn gather(output: impl Output + 'a, input: impl Input + 'a, root: usize)
        => Op::Gather { root }, Pair { input, output };

    /// Adds a [`Communicator::scatter`] of `input` of rank `root`: rank
    /// `r` gets block `r` in `output`.
    ///
    /// Checked at enqueue: `root` in range; on the root, input length =
    /// world size x output length; the same data type; the buffers as in
    /// `all_reduce`.
    fn scatter(output: impl Output + 'a, input: impl Input + 'a, root: usize)
        => Op::Scatter { root }, Pair { input, output };

    /// Adds a send of `tensor` to rank `dst` (`torch.distributed.isend`
    /// in a batch).
    ///
    /// Checked at enqueue: `dst` in range (this rank itself only when a
    /// receive from itself pairs with it); the buffer as in `all_reduce`.
    fn send(tensor: impl Input + 'a, dst: usize) => Op::Send { peer: dst }, ReadOnly(tensor);

    /// Adds a receive into `tensor` from rank `src`
    /// (`torch.distributed.irecv` in a batch).
    ///
    /// Checked at enqueue: as `send`.
    fn recv(tensor: impl Output + 'a, src: usize) => Op::Recv { peer: src }, Single(tensor);
}
