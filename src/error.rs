//! The one error type of rcclx's algorithm layers (`clique`, `dda`, `lowp`, `comm`): an
//! `ncclResult_t` to return, and what happened for the log line.
//!
//! Layer: `error`, above `gpu` (it converts [`gpu::Error`]).

use crate::gpu;
use crate::types::ncclResult_t;
use std::fmt;

/// An error with the `ncclResult_t` it maps to.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: ncclResult_t,
    pub what: String,
}

impl Error {
    pub fn new(code: ncclResult_t, what: impl Into<String>) -> Self {
        Self { code, what: what.into() }
    }

    pub fn internal(what: impl Into<String>) -> Self {
        Self::new(ncclResult_t::InternalError, what)
    }

    /// The error of a stock-library call that did not return `ncclSuccess`.
    pub fn upstream(call: &str, code: ncclResult_t) -> Self {
        Self::new(code, format!("{call} returned {}", code.0))
    }

    /// `Ok` for `ncclSuccess`, else [`Error::upstream`].
    pub fn check(call: &str, code: ncclResult_t) -> Result<(), Self> {
        if code.is_ok() { Ok(()) } else { Err(Self::upstream(call, code)) }
    }
}

impl From<gpu::Error> for Error {
    fn from(e: gpu::Error) -> Self {
        Self::new(ncclResult_t(e.nccl_code()), e.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (nccl result {})", self.what, self.code.0)
    }
}

impl std::error::Error for Error {}
