//! The panic boundary (rustls-ffi's `ffi_panic_boundary!`): a Rust panic never unwinds into C.
//! It becomes one log line and the return type's error value (`ncclInternalError` for
//! `ncclResult_t`).

use crate::types::{ncclResult_t, ncclTeam_t};
use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What an export returns when rcclx cannot produce a real answer: a panic, a missing
/// upstream library or a missing upstream symbol.
pub trait CReturn: Sized {
    fn from_error(code: ncclResult_t) -> Self;

    /// Whether a forwarded call's answer is an error (`ncclInProgress` is not one).
    fn is_error(&self) -> bool {
        false
    }
}

impl CReturn for ncclResult_t {
    fn from_error(code: ncclResult_t) -> Self {
        code
    }

    fn is_error(&self) -> bool {
        !self.is_ok_or_in_progress()
    }
}

impl CReturn for *const c_char {
    fn from_error(code: ncclResult_t) -> Self {
        crate::upstream::own_error_string(code).as_ptr()
    }
}

impl CReturn for () {
    fn from_error(_: ncclResult_t) -> Self {}
}

/// Device-API helpers returning an `int` (rank numbers, slot counts): -1 is never valid.
impl CReturn for c_int {
    fn from_error(_: ncclResult_t) -> Self {
        -1
    }
}

impl CReturn for ncclTeam_t {
    fn from_error(_: ncclResult_t) -> Self {
        ncclTeam_t::default()
    }
}

/// Runs `body`; a panic inside becomes a log line and `R::from_error(ncclInternalError)`.
pub fn boundary<R: CReturn>(name: &'static str, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!("{name}: internal error (panic: {msg}); returning ncclInternalError");
            R::from_error(ncclResult_t::InternalError)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_becomes_internal_error() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r: ncclResult_t = boundary("test", || panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(r, ncclResult_t::InternalError);
    }

    #[test]
    fn value_passes_through() {
        assert_eq!(boundary("t", || ncclResult_t::InProgress), ncclResult_t::InProgress);
    }
}
