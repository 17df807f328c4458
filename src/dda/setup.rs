//! Communicator setup for DDA and FP8: what every rank agreed, and the GPU resources.

use crate::intercept::{CommFacts, Thresholds};
use crate::types::ncclComm_t;

/// The agreed facts of one communicator and its resources.
pub struct Setup {
    pub rank: usize,
    pub facts: CommFacts,
    pub thresholds: Thresholds,
}

/// Sets up `comms` (all created by this thread). Communicators that cannot use rcclx's
/// kernels stay without a `Setup` and forward every call.
pub fn run(comms: &[ncclComm_t]) {
    let _ = comms;
}
