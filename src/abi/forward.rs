//! The `forward!` helper: the call of an upstream symbol that the exports' bodies (`table.rs`)
//! and the hooks (`hooks.rs`) make.

/// Calls the upstream symbol `$name` with the re-entrancy guard, or returns the error value
/// of the return type when the library or the symbol is missing. A failed call makes the
/// stock library's error the one `ncclGetLastError` returns (`upstream::forwarded_error`).
macro_rules! forward {
    ($name:ident ( $( $arg:expr ),* )) => {
        match $crate::upstream::get() {
            Ok(u) => match u.fns.$name {
                Some(f) => {
                    // SAFETY: the pointer was resolved from the stock library under the same
                    // name, and the list gives it the stock header's signature.
                    let r = $crate::upstream::guarded(|| unsafe { f( $( $arg ),* ) });
                    // The stock library's error is now the newest one (ncclGetLastError).
                    if $crate::abi::CReturn::is_error(&r) {
                        $crate::upstream::forwarded_error();
                    }
                    r
                }
                None => $crate::abi::CReturn::from_error($crate::upstream::missing_symbol(stringify!($name))),
            },
            Err(code) => $crate::abi::CReturn::from_error(code),
        }
    };
}
pub(crate) use forward;
