//! Every failure of the GPU layer.

use std::fmt;

/// Every failure of the GPU layer, with enough context to act on it from a log line alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No GPU runtime library could be loaded (or a required symbol was missing).
    /// The text lists what was tried and why each failed.
    NoRuntime(String),
    /// A runtime loaded, but it sees no device.
    NoDevice,
    /// A runtime call failed.
    Runtime {
        /// The C entry point, e.g. `cuMemAlloc_v2`.
        call: &'static str,
        /// What the call was about (a kernel name, a device), or empty.
        detail: String,
        /// `"cuda"` or `"hip"`.
        runtime: &'static str,
        /// The runtime's numeric error code (`CUresult` / `hipError_t`).
        code: i32,
        /// The runtime's name and description of the code.
        message: String,
    },
    /// The loaded runtime lacks an optional entry point that this call needs.
    Unsupported { call: &'static str, runtime: &'static str },
    /// No embedded code object matches the device's architecture.
    NoCodeObject { arch: String, available: String },
    /// An argument was out of range (e.g. a copy larger than its buffer).
    InvalidArgument(String),
}

impl Error {
    /// The `ncclResult_t` value this error maps to: a failing runtime call is
    /// `ncclUnhandledCudaError` (1), a missing runtime, device, entry point or code object is
    /// `ncclSystemError` (2), a bad argument `ncclInvalidArgument` (4).
    pub fn nccl_code(&self) -> u32 {
        match self {
            Error::Runtime { .. } => 1,
            Error::NoRuntime(_) | Error::NoDevice | Error::Unsupported { .. } | Error::NoCodeObject { .. } => 2,
            Error::InvalidArgument(_) => 4,
        }
    }

    /// Adds what a failed runtime call was about (no effect on other variants).
    pub fn with_detail(mut self, what: impl Into<String>) -> Self {
        if let Error::Runtime { detail, .. } = &mut self {
            *detail = what.into();
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoRuntime(tried) => write!(f, "no GPU runtime: {tried}"),
            Error::NoDevice => write!(f, "no GPU device: a GPU runtime loaded but reports no device"),
            Error::Runtime { call, detail, runtime, code, message } => {
                write!(f, "{call}")?;
                if !detail.is_empty() {
                    write!(f, "({detail})")?;
                }
                write!(f, " failed: {runtime} error {code}: {message}")
            }
            Error::Unsupported { call, runtime } => {
                write!(f, "{call} is not available in the loaded {runtime} runtime")
            }
            Error::NoCodeObject { arch, available } => {
                let available = if available.is_empty() { "none" } else { available.as_str() };
                write!(
                    f,
                    "no rcclx code object for GPU arch {arch} (embedded: {available}; \
                     the library was built without a kernel compiler for this arch)"
                )
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {}
