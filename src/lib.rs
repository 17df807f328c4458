//! rcclx: a drop-in replacement for RCCL / NCCL (see `docs/ARCHITECTURE.md`).
//!
//! Layers, top to bottom; a module uses only modules of lower layers (`tests/layers.rs`
//! checks it):
//!
//! | layer | modules |
//! |---|---|
//! | exports | `abi` |
//! | communicators | `comm` |
//! | plans: a call as steps across hosts | `plan` |
//! | algorithms | `dda`, `lowp` |
//! | shared peer resources | `clique` |
//! | errors | `error` |
//! | GPU runtime | `gpu` |
//! | stock library, decision, code objects | `upstream`, `intercept`, `kernels` |
//! | base | `types`, `collective`, `env`, `config`, `tuning`, `topo`, `log`, `nvtx`, `kernel_table`, `nccl_api` |
//!
//! Only `abi`, `types`, `nccl_api` and `upstream` use C names.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod abi;
pub mod clique;
pub mod collective;
pub mod comm;
pub mod config;
pub mod dda;
pub mod env;
pub mod error;
pub mod gpu;
pub mod intercept;
pub mod kernel_table;
pub mod kernels;
pub mod log;
pub mod lowp;
#[macro_use]
pub mod nccl_api;
pub mod nvtx;
pub mod plan;
pub mod topo;
pub mod tuning;
pub mod types;
pub mod upstream;
