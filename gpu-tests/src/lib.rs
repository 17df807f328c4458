//! rcclx's GPU test programs (`src/bin/`: `selftest`, `lowp_accuracy`, `timeout`) and the
//! harness they share. None of this is part of `librcclx.so`.
//!
//! The harness keeps the programs' common rules in one place:
//! * every wait is bounded ([`gpu::wait_stream`], [`children::Lines::expect`]), and a
//!   [`watchdog`] ends a process that makes no progress at all;
//! * child processes are copies of the same program in another role, spoken to one line at a
//!   time over their stdin/stdout ([`children`]);
//! * results are `PASS|FAIL|SKIP <name> <detail>` lines, then `N passed, M failed` ([`Tally`]),
//!   and the exit status says what happened ([`EXIT_FAILED`], [`EXIT_NO_GPU`], [`EXIT_STALL`]).
//!
//! [`codec`] is the CPU reference model of the low-precision collectives (FP8 and INT8 codecs)
//! that `lowp_accuracy` checks the GPU against.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod children;
pub mod codec;
pub mod exact;
pub mod fnv;
pub mod gpu;
pub mod hex;
pub mod nccl;
pub mod reduce;
pub mod results;
pub mod watchdog;
pub mod world;

pub use results::{EXIT_FAILED, EXIT_NO_GPU, Fail, Outcome, Tally, options_or_exit};
pub use watchdog::EXIT_STALL;
