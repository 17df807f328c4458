//! The [`Runtime`] type, and loading the GPU runtime once per process ([`runtime()`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::backend::Backend;
use super::error::Error;
use super::handles::{Module, Stream, Vendor};
use super::{cuda, hip};

/// The loaded GPU runtime. Get it with [`runtime()`].
pub struct Runtime {
    pub(super) vendor: Vendor,
    pub(super) backend: Box<dyn Backend>,
    pub(super) device_count: i32,
    /// rcclx's own code object, loaded once per device by [`Runtime::load_rcclx_module`].
    pub(super) modules: Mutex<HashMap<i32, Module>>,
    /// rcclx's own non-blocking stream per device (see `Runtime::private_stream`).
    pub(super) private_streams: Mutex<HashMap<i32, Stream>>,
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
