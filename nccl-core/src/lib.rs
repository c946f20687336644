//! nccl-core (under construction).
