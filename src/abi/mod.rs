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
pub mod hooks;
pub mod own;
pub mod table;

pub use boundary::{CReturn, boundary};

/// One exported function, as the tests and the C-ABI check see it.
#[derive(Debug, Clone, Copy)]
pub struct Export {
    pub name: &'static str,
    /// `forward` (straight to upstream), `ordered` (forwarded after `comm::ordered`),
    /// `collective` (`comm::collective`) or `hook` (rcclx takes part: see `hooks`).
    pub kind: &'static str,
    /// Rust spelling of the return type and of each `(name, type)` parameter; `tests/` turns
    /// them into C declarations that are compiled against the stock `nccl.h`.
    pub ret: &'static str,
    pub params: &'static [(&'static str, &'static str)],
}

/// Generates, from the export list (`crate::nccl_api`):
/// * `EXPORTS`, the list of names and signatures;
/// * each `#[no_mangle] extern "C"` export and, in `mod profiling`, its `p`-prefixed twin.
///
/// `forward` bodies call the upstream symbol of the same name; `ordered` ones do so through
/// `comm::ordered`; `collective` ones build the call's `CallDesc` and go to `comm::collective`.
/// `hook` bodies call `hooks::<name>`. Re-entered from inside the upstream
/// library, or with `RCCLX_DISABLE=1`, every export forwards.
macro_rules! nccl_exports {
    ( $( $kind:ident $( ( $($opt:tt)* ) )? fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        pub const EXPORTS: &[$crate::abi::Export] = &[
            $( $crate::abi::Export {
                name: stringify!($name),
                kind: stringify!($kind),
                ret: stringify!($ret),
                params: &[ $( (stringify!($arg), stringify!($ty)) ),* ],
            }, )*
        ];

        $( $crate::abi::nccl_exports!(@export $kind [ $( $($opt)* )? ] $name ( $( $arg : $ty ),* ) -> $ret); )*

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

    (@export forward [] $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty) => {
        $crate::abi::nccl_exports!(@extern "forwarded to the stock library", $name ( $( $arg : $ty ),* ) -> $ret, {
            $crate::abi::table::forward!($name( $( $arg ),* ))
        });
    };

    (@export ordered [ $c:ident, $s:ident ] $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty) => {
        $crate::abi::nccl_exports!(@extern "forwarded to the stock library, in order with the communicator's other operations",
            $name ( $( $arg : $ty ),* ) -> $ret, {
            // SAFETY: the application's `cudaStream_t` / `hipStream_t` (NCCL's contract).
            let stream = unsafe { $crate::gpu::Stream::from_raw($s) };
            $crate::comm::ordered($c, stream, || $crate::abi::table::forward!($name( $( $arg ),* )))
        });
    };

    (@export collective [ $coll:ident, $send:ident, $recv:ident, $count:ident, $dtype:ident, $op:expr, $root:expr, $comm:ident, $stream:ident ]
        $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty) => {
        $crate::abi::nccl_exports!(@extern "an intercepted collective (rcclx's kernel or the stock library)",
            $name ( $( $arg : $ty ),* ) -> $ret, {
            let call = $crate::intercept::CallDesc {
                coll: $crate::intercept::Coll::$coll,
                count: $count,
                dtype: $dtype,
                op: $op,
                root: $root,
            };
            // SAFETY: the application's `cudaStream_t` / `hipStream_t` (NCCL's contract).
            let stream = unsafe { $crate::gpu::Stream::from_raw($stream) };
            let bufs = $crate::clique::Buffers { send: $send as *const c_void, recv: $recv, stream };
            $crate::comm::collective($comm, call, bufs, || $crate::abi::table::forward!($name( $( $arg ),* )))
        });
    };

    (@export hook [] $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty) => {
        $crate::abi::nccl_exports!(@extern "rcclx takes part (see `abi::hooks`)", $name ( $( $arg : $ty ),* ) -> $ret, {
            // SAFETY: the caller upholds the C API's contract for these arguments; hooks
            // dereference nothing before checking it.
            unsafe { $crate::abi::hooks::$name( $( $arg ),* ) }
        });
    };

    // Every export: the panic boundary, the trace line, and with `RCCLX_DISABLE=1` or from
    // inside the stock library (`upstream::pass_through`) the stock function; else `$own`.
    (@extern $doc:literal, $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty, $own:block) => {
        #[doc = concat!("`", stringify!($name), "`: ", $doc, ".")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> $ret {
            $crate::abi::boundary(stringify!($name), move || {
                $crate::upstream::trace_entry(stringify!($name));
                if $crate::upstream::pass_through() {
                    $crate::abi::table::forward!($name( $( $arg ),* ))
                } else $own
            })
        }
    };
}
pub(crate) use nccl_exports;
