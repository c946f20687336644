//! What watches the group's operations: the watchdog thread and its
//! tracker, the completion check of each operation's end, and the
//! exchange of progress among the ranks when one fails.

pub(crate) mod alarm;
pub(crate) mod peers;
pub(crate) mod verify;
pub(crate) mod watchdog;
