//! rcclx: a drop-in replacement for RCCL / NCCL (see shared/design/ARCHITECTURE.md).
//!
//! Layers, top to bottom: `abi` (exported C symbols) -> `intercept` (per-call decision) ->
//! `comm` (side table of communicator state) -> `dda`, `lowp` (algorithms) -> `gpu` (runtime
//! loaded at run time) -> `hip_kernels/` (device code). `upstream` (the stock library),
//! `config` (environment) and `log` are used by every layer. Only `abi`, `types` and
//! `upstream` use C names.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod abi;
pub mod comm;
pub mod config;
pub mod dda;
pub mod gpu;
pub mod intercept;
pub mod kernels;
pub mod log;
pub mod lowp;
pub mod types;
pub mod upstream;
