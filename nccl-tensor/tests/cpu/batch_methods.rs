//! CPU tests of the table of `Batch`'s named methods (`Batch::METHODS`):
//! every operation has one, each adds the operation it is named after, on
//! buffers in a form that operation takes, which the batch's checks
//! (`plan_batch`) accept as they would a `push` of it.

use crate::checks_support::*;
use nccl_tensor::{Batch, BatchEntry, Form, Op, plan_batch, rules};

/// The one operation of [`every_op`] that `method` adds.
fn added_by(method: &nccl_tensor::BatchMethod) -> Op<'static> {
    let mut added = every_op(1).into_iter().filter(|op| (method.adds)(op));
    let op = added.next().expect("the method adds an operation");
    assert!(added.next().is_none(), "{} adds one kind", method.name);
    op
}

#[test]
fn every_operation_has_a_named_method() {
    for op in every_op(1) {
        assert!(
            Batch::METHODS.iter().any(|method| (method.adds)(&op)),
            "no method adds {}",
            op.name()
        );
    }
    let mut names: Vec<_> = Batch::METHODS.iter().map(|method| method.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Batch::METHODS.len(), "a name twice");
}

#[test]
fn each_method_is_named_after_its_operation() {
    for method in Batch::METHODS {
        let op = added_by(method);
        assert!(
            method.name.starts_with(op.name()),
            "{} adds {}",
            method.name,
            op.name()
        );
        let out_of_place = method.name.ends_with("_into");
        if out_of_place {
            assert_eq!(method.operands, Form::Pair, "{}", method.name);
        }
    }
}

#[test]
fn each_method_gives_buffers_its_operation_takes() {
    for method in Batch::METHODS {
        let op = added_by(method);
        let rules = rules(&op);
        let (input, output) = lens(rules.sizes, 8);
        let layout = match method.operands {
            Form::Pair => method
                .operands
                .layout(rules.layouts, f32s(input), Some(f32s(output))),
            _ => method.operands.layout(rules.layouts, f32s(8), None),
        };
        let entry = BatchEntry {
            op,
            layout,
            cells: [None, None],
        };
        // Planned as a push of the same operation and buffers would be.
        let plans = plan_batch(&info(), 0, &[entry]).expect(method.name);
        assert_eq!(plans[0].count, 8, "{}", method.name);
    }
}

#[test]
fn a_single_buffer_is_in_place_where_the_operation_has_that_form() {
    let in_place: Vec<_> = Batch::METHODS
        .iter()
        .filter(|method| method.operands == Form::Single)
        .map(|method| method.name)
        .collect();
    assert_eq!(in_place, ["all_reduce", "broadcast", "reduce", "recv"]);
    let read_only: Vec<_> = Batch::METHODS
        .iter()
        .filter(|method| method.operands == Form::ReadOnly)
        .map(|method| method.name)
        .collect();
    assert_eq!(read_only, ["send"]);
}
