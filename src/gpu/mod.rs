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
//! * `cuda.rs`, `hip.rs`: one hand-written list of entry points per runtime (the
//!   `entry_points!` macro of `backend.rs`), resolved once, and an implementation of the private
//!   [`Backend`] trait (`backend.rs`) on top of it.
//! * `load.rs`: the [`Runtime`] type and loading the runtime once ([`runtime()`]);
//!   `runtime.rs`: its operations; `handles.rs`: plain data and handle types; `owners.rs`: the
//!   RAII owners ([`DeviceBuffer`], [`IpcMapping`], [`HostMapped`], [`DeviceGuard`]); `error.rs`;
//!   `nvml.rs`: NVML (NVIDIA's management library), for whether two GPUs share an NVLink.
//!   This file only declares and re-exports them.
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

#[macro_use] // `entry_points!`, for `cuda.rs` and `hip.rs`
mod backend;
mod cuda;
mod error;
mod handles;
mod hip;
mod load;
pub mod nvml;
mod owners;
mod runtime;

pub(crate) use backend::{Backend, open_library, symbol};
pub use error::Error;
pub use handles::*;
pub use load::{Runtime, runtime};
pub use owners::{DeviceBuffer, DeviceGuard, HostMapped, IpcMapping, Relaxed, live_device_bytes, release_failures};

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
