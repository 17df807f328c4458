//! Layer `abi`: the exported C symbols. Thin by rule: a panic boundary, then a call down to
//! `upstream` (forwarded functions) or to `hooks` (functions rcclx takes part in).
//!
//! Every export is generated from the one table in [`table`] by [`nccl_exports!`]: the
//! `nccl*` symbol, its `pnccl*` profiling twin, the upstream function-pointer field and the
//! name list the tests check. Nothing here is hand-written per function.
#![allow(non_snake_case)]

pub mod boundary;
pub mod hooks;
pub mod own;
pub mod table;

pub use boundary::{CReturn, boundary};

/// One exported function, as the tests and the C-ABI check see it.
#[derive(Debug, Clone, Copy)]
pub struct Export {
    pub name: &'static str,
    /// `forward` (straight to upstream) or `hook` (rcclx takes part: see `hooks`).
    pub kind: &'static str,
    /// Rust spelling of the return type and of each `(name, type)` parameter; `tests/` turns
    /// them into C declarations that are compiled against the stock `nccl.h`.
    pub ret: &'static str,
    pub params: &'static [(&'static str, &'static str)],
}

/// Generates, from one list of C signatures:
/// * `UpstreamFns`, one `Option<fn>` per symbol, resolved from the stock library;
/// * `EXPORTS`, the list of names and signatures;
/// * each `#[no_mangle] extern "C"` export and, in `mod profiling`, its `p`-prefixed twin.
///
/// `forward` bodies call the upstream symbol of the same name. `hook` bodies call
/// `hooks::<name>`, except when re-entered from inside the upstream library or with
/// `RCCLX_DISABLE=1`, where they forward too.
macro_rules! nccl_exports {
    ( $( $kind:ident fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        /// Function pointers of the stock library, one per export; `None` if it lacks the symbol.
        #[allow(non_snake_case)]
        pub struct UpstreamFns {
            $( pub $name: Option<unsafe extern "C" fn($($ty),*) -> $ret>, )*
        }

        impl UpstreamFns {
            /// Resolves every symbol of the table in `lib`.
            pub fn resolve(lib: &libloading::Library) -> Self {
                Self { $( $name: crate::upstream::symbol(lib, stringify!($name)), )* }
            }
        }

        pub const EXPORTS: &[$crate::abi::Export] = &[
            $( $crate::abi::Export {
                name: stringify!($name),
                kind: stringify!($kind),
                ret: stringify!($ret),
                params: &[ $( (stringify!($arg), stringify!($ty)) ),* ],
            }, )*
        ];

        $( $crate::abi::nccl_exports!(@export $kind $name ( $( $arg : $ty ),* ) -> $ret); )*

        /// The `pnccl*` profiling aliases (NCCL's PROFAPI): same behaviour as `nccl*`.
        pub mod profiling {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("`p", stringify!($name), "`: same as `", stringify!($name), "`.")]
                #[unsafe(export_name = concat!("p", stringify!($name)))]
                pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> $ret {
                    // SAFETY: same contract as the function it aliases.
                    unsafe { super::$name( $( $arg ),* ) }
                }
            )*
        }
    };

    (@export forward $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($name), "`: forwarded to the stock library.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> $ret {
            $crate::abi::boundary(stringify!($name), move || {
                $crate::upstream::trace_entry(stringify!($name));
                $crate::abi::table::forward!($name( $( $arg ),* ))
            })
        }
    };

    (@export hook $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($name), "`: rcclx takes part (see `abi::hooks::", stringify!($name), "`).")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> $ret {
            $crate::abi::boundary(stringify!($name), move || {
                $crate::upstream::trace_entry(stringify!($name));
                if $crate::upstream::pass_through() {
                    $crate::abi::table::forward!($name( $( $arg ),* ))
                } else {
                    // SAFETY: the caller upholds the C API's contract for these arguments;
                    // hooks dereference nothing before checking it.
                    unsafe { $crate::abi::hooks::$name( $( $arg ),* ) }
                }
            })
        }
    };
}
pub(crate) use nccl_exports;
