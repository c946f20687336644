//! nccl-tensor (under construction).
