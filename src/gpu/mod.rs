//! The GPU runtime, loaded at run time: the CUDA driver API (`libcuda.so.1`) or HIP
//! (`libamdhip64.so`), behind one interface.
//!
//! Layer: `gpu`, directly above the device code. It depends on no other rcclx module except
//! [`crate::kernels`] (the code objects the build script embeds). `comm`, `dda` and `lowp` call
//! [`runtime()`] and never learn which vendor runs underneath: only this module knows HIP from
//! CUDA. Nothing is linked: both libraries are opened with `libloading`, and a missing library or
//! symbol is an [`Error`], never a panic.
//!
//! Files:
//! * `cuda.rs`, `hip.rs`: one hand-written list of entry points per runtime, resolved once, and
//!   an implementation of the private [`Backend`] trait (`backend.rs`) on top of it.
//! * this file: loading the runtime once ([`runtime()`]) and the [`Runtime`] type;
//!   `runtime.rs`: its operations; `handles.rs`: plain data and handle types; `owners.rs`: the
//!   RAII owners ([`DeviceBuffer`], [`IpcMapping`], [`HostMapped`], [`DeviceGuard`]); `error.rs`.
//!
//! **Current device.** Calls that create something on a device (allocations, streams, events,
//! modules, IPC mappings, peer access) take the device and switch to it only for the call (a
//! [`DeviceGuard`] restores the caller's device afterwards), so the application's current device
//! is left as it was. On CUDA "device" means the device's *primary context*, the one the CUDA
//! runtime API uses, so rcclx works on the same context as the application. Hot-path calls
//! (launch, async copies and memsets, event and stream calls) take no device: the stream says
//! where the work goes, and the caller holds a [`DeviceGuard`] for the stream's device.
//!
//! **Safety model.** [`DevicePtr`] is a plain number: calls that read or write through a raw
//! device pointer are `unsafe`, and the owners offer safe, bounds-checked equivalents. The
//! handles [`Stream`], [`Event`], [`Module`] and [`Function`] are made by this module or by an
//! `unsafe fn from_raw`, so calls that take them are safe; calls that destroy them are `unsafe`
//! (the caller promises not to use the handle again).

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;

/// Declares one runtime's table of C entry points and its loader, from one list.
///
/// Each line is `field = "symbol": fn(args) -> ret;`. The field is the C name without its
/// version suffix, the string is the exact (versioned) symbol that is resolved. `required`
/// entries must all resolve or the runtime is not used; `optional` ones become `Option`s.
macro_rules! entry_points {
    (
        $(#[$meta:meta])*
        struct $name:ident;
        required { $( $field:ident = $sym:literal : fn($($arg:ty),* $(,)?) -> $ret:ty; )* }
        optional { $( $ofield:ident = $osym:literal : fn($($oarg:ty),* $(,)?) -> $oret:ty; )* }
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(crate) struct $name {
            $( pub(crate) $field: unsafe extern "C" fn($($arg),*) -> $ret, )*
            $( pub(crate) $ofield: Option<unsafe extern "C" fn($($oarg),*) -> $oret>, )*
        }

        impl $name {
            /// Resolves every entry point; the error names the first required one missing.
            ///
            /// # Safety
            /// `lib` must be the library whose C declarations this list transcribes, and it
            /// must stay loaded for as long as the table is used (libraries are opened with
            /// `RTLD_NODELETE`, so they are never unmapped).
            pub(crate) unsafe fn load(lib: &libloading::Library) -> Result<Self, String> {
                Ok(Self {
                    // SAFETY: each field's type is the C signature of the symbol named next to
                    // it, transcribed from the runtime's header (see the list).
                    $( $field: unsafe { $crate::gpu::symbol(lib, $sym)? }, )*
                    // SAFETY: as above.
                    $( $ofield: unsafe { $crate::gpu::symbol(lib, $osym).ok() }, )*
                })
            }
        }
    };
}

mod backend;
mod cuda;
mod error;
mod handles;
mod hip;
mod owners;
mod runtime;

pub(crate) use backend::{Backend, open_library, symbol};
pub use error::Error;
pub use handles::*;
pub use owners::{DeviceBuffer, DeviceGuard, HostMapped, IpcMapping, release_failures};

/// The loaded GPU runtime. Get it with [`runtime()`].
pub struct Runtime {
    vendor: Vendor,
    backend: Box<dyn Backend>,
    device_count: i32,
    /// rcclx's own code object, loaded once per device by [`Runtime::load_rcclx_module`].
    modules: Mutex<HashMap<i32, Module>>,
    /// rcclx's own non-blocking stream per device (see `Runtime::private_stream`).
    private_streams: Mutex<HashMap<i32, Stream>>,
}

static RUNTIME: OnceLock<Result<Runtime, Error>> = OnceLock::new();

/// The GPU runtime, loaded on first use and then shared by the whole process.
///
/// Tries CUDA, then HIP; `RCCLX_GPU_RUNTIME=cuda|hip` allows only that one. Returns
/// [`Error::NoRuntime`] when no library loads and [`Error::NoDevice`] when one loads but sees no
/// device. The outcome is cached: later calls return the same runtime or the same error.
pub fn runtime() -> Result<&'static Runtime, Error> {
    RUNTIME
        .get_or_init(|| {
            let rt = load_runtime();
            if rt.as_ref().is_ok_and(|r| r.vendor() == Vendor::Hip) {
                crate::nvtx::use_roctx(); // AMD: rcclx's ranges go to roctx too, as RCCL's do
            }
            // Log lines of threads on no communicator name the current device, as NCCL's do.
            crate::log::set_current_device_probe(|| RUNTIME.get()?.as_ref().ok()?.current_device().ok());
            rt
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn load_runtime() -> Result<Runtime, Error> {
    let choice = crate::config::get().gpu_runtime.as_deref().unwrap_or_default();
    let order: &[Vendor] = match choice.trim().to_ascii_lowercase().as_str() {
        "" => &[Vendor::Cuda, Vendor::Hip],
        "cuda" => &[Vendor::Cuda],
        "hip" => &[Vendor::Hip],
        other => {
            return Err(Error::NoRuntime(format!("RCCLX_GPU_RUNTIME={other} is not `cuda` or `hip`")));
        }
    };
    let mut tried = Vec::new();
    let mut saw_no_device = false;
    for &vendor in order {
        let loaded: Result<Box<dyn Backend>, Error> = match vendor {
            Vendor::Cuda => cuda::Cuda::load().map(|b| Box::new(b) as Box<dyn Backend>),
            Vendor::Hip => hip::Hip::load().map(|b| Box::new(b) as Box<dyn Backend>),
        };
        let counted = loaded.and_then(|backend| match backend.device_count() {
            Ok(n) if n > 0 => Ok((backend, n)),
            Ok(_) => Err(Error::NoDevice),
            Err(e) => {
                tracing::debug!("gpu: {} device count failed: {e}", vendor.name());
                Err(Error::NoDevice)
            }
        });
        match counted {
            Ok((backend, device_count)) => {
                tracing::debug!(
                    "gpu: using {} ({}, driver {}), {device_count} device(s)",
                    vendor.name(),
                    backend.library(),
                    backend.driver_version()
                );
                return Ok(Runtime {
                    vendor,
                    backend,
                    device_count,
                    modules: Mutex::new(HashMap::new()),
                    private_streams: Mutex::new(HashMap::new()),
                });
            }
            Err(Error::NoDevice) => {
                tracing::debug!("gpu: {} loaded but sees no device", vendor.name());
                saw_no_device = true;
            }
            Err(Error::NoRuntime(why)) => {
                tracing::debug!("gpu: {} not usable: {why}", vendor.name());
                tried.push(why);
            }
            Err(other) => tried.push(other.to_string()),
        }
    }
    if saw_no_device { Err(Error::NoDevice) } else { Err(Error::NoRuntime(format!("tried {}", tried.join(", ")))) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_void;

    #[test]
    fn runtime_fails_cleanly_without_a_gpu() {
        // On a GPU machine this returns a runtime; on CI it must be an error, not a panic.
        match runtime() {
            Ok(rt) => assert!(rt.device_count() > 0),
            Err(Error::NoRuntime(why)) => {
                assert!(why.contains("libcuda.so.1") || why.contains("RCCLX_GPU_RUNTIME"), "{why}");
                let text = Error::NoRuntime(why).to_string();
                assert!(text.starts_with("no GPU runtime: "), "{text}");
            }
            Err(Error::NoDevice) => {}
            Err(other) => panic!("unexpected error {other}"),
        }
        // The outcome is cached: the second call agrees with the first.
        assert_eq!(runtime().is_ok(), runtime().is_ok());
    }

    #[test]
    fn missing_library_is_an_error() {
        let err = open_library(&["librcclx-does-not-exist.so.9".to_string()]).unwrap_err();
        assert!(err.starts_with("librcclx-does-not-exist.so.9 ("), "{err}");
    }

    #[test]
    fn error_display_names_call_runtime_code_and_message() {
        let e = Error::Runtime {
            call: "cuMemAlloc_v2",
            detail: String::new(),
            runtime: "cuda",
            code: 2,
            message: "CUDA_ERROR_OUT_OF_MEMORY: out of memory".into(),
        }
        .with_detail("1024 bytes on device 1");
        assert_eq!(
            e.to_string(),
            "cuMemAlloc_v2(1024 bytes on device 1) failed: cuda error 2: \
             CUDA_ERROR_OUT_OF_MEMORY: out of memory"
        );
        assert_eq!(e.nccl_code(), 1);
        assert_eq!(Error::NoDevice.nccl_code(), 2);
        assert_eq!(Error::NoRuntime("tried x".into()).nccl_code(), 2);
        assert_eq!(Error::NoRuntime("tried x".into()).to_string(), "no GPU runtime: tried x");
        assert_eq!(Error::InvalidArgument("x".into()).nccl_code(), 4);
        let e = Error::NoCodeObject { arch: "gfx950".into(), available: String::new() };
        assert!(e.to_string().contains("gfx950") && e.to_string().contains("none"), "{e}");
        assert_eq!(e.nccl_code(), 2);
        let e = Error::Unsupported { call: "hipExtMallocWithFlags", runtime: "hip" };
        assert_eq!(e.to_string(), "hipExtMallocWithFlags is not available in the loaded hip runtime");
    }

    #[test]
    fn handle_sizes() {
        assert_eq!(std::mem::size_of::<IpcHandle>(), 64);
        assert_eq!(std::mem::size_of::<DevicePtr>(), 8);
        assert_eq!(std::mem::size_of::<Stream>(), std::mem::size_of::<*mut c_void>());
        assert_eq!(std::mem::size_of::<Function>(), std::mem::size_of::<*mut c_void>());
        assert!(Stream::NULL.as_raw().is_null());
        assert_eq!(DevicePtr(0x1000).offset(16), DevicePtr(0x1010));
    }

    #[test]
    fn c_strings_from_buffers() {
        assert_eq!(c_buf_to_string(b"gfx942:sramecc+:xnack-\0\0junk"), "gfx942:sramecc+:xnack-");
        assert_eq!(c_buf_to_string(b"no-nul"), "no-nul");
    }
}
