//! nccl-group (under construction).
