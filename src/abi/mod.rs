//! Layer `abi`: the exported C symbols. Thin by rule: a panic boundary, then a call down to
//! `upstream` (forwarded functions), `comm::ordered` (ordered functions), `comm::collective`
//! (intercepted collectives) or `hooks` (functions rcclx takes part in).
//!
//! Every export is generated from the one list in [`crate::nccl_api`] by [`nccl_exports!`]: the
//! `nccl*` symbol, its `pnccl*` profiling twin and the name list the tests check (`upstream`
//! generates the stock library's function table from the same list). Nothing here is
//! hand-written per function.
#![allow(non_snake_case)]

pub mod boundary;
mod forward;
pub mod hooks;
pub mod own;
pub mod table;

pub use boundary::{CReturn, boundary};
pub use table::Export;
pub(crate) use table::nccl_exports;
