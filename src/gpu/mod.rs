//! The GPU runtime, loaded at run time: the CUDA driver API (`libcuda.so.1`) or HIP
//! (`libamdhip64.so`), behind one interface.
//!
//! Layer: leaf, directly above the device code. This module depends on no other rcclx module
//! except [`crate::kernels`] (the code objects `build.rs` embeds). `comm`, `dda` and `lowp` call
//! [`runtime()`] and never learn which vendor runs underneath: only this module knows HIP from
//! CUDA. Nothing is linked: both libraries are opened with `libloading`, and a missing library or
//! symbol is an [`Error`], never a panic.
//!
//! Files:
//! * `cuda.rs`, `hip.rs`: one hand-written list of entry points per runtime, resolved once, and
//!   an implementation of the private [`Backend`] trait on top of it.
//! * this file: [`Runtime`] (loaded once into a `OnceLock`), plain handle types, the RAII owners
//!   ([`DeviceBuffer`], [`IpcMapping`], [`HostMapped`], [`DeviceGuard`]) and [`Error`].
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
use std::ffi::{CStr, CString, c_void};
use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::kernels;

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

mod cuda;
mod hip;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Plain data types
// ---------------------------------------------------------------------------------------------

/// Which runtime is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// NVIDIA, through the CUDA driver API (`libcuda.so.1`).
    Cuda,
    /// AMD, through HIP (`libamdhip64.so`).
    Hip,
}

impl Vendor {
    /// `"cuda"` or `"hip"`.
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Cuda => "cuda",
            Vendor::Hip => "hip",
        }
    }
}

/// A device address (`CUdeviceptr` / `void*`). Plain data: it owns nothing and is not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    pub const NULL: DevicePtr = DevicePtr(0);

    pub fn is_null(self) -> bool {
        self.0 == 0
    }
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes as u64))
    }
    /// The address as a C pointer (what HIP calls and kernel arguments take).
    pub fn as_raw(self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }
}

/// An IPC memory handle (`CUipcMemHandle` / `hipIpcMemHandle_t`): 64 opaque bytes that another
/// process on the same host opens with [`Runtime::open_ipc`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct IpcHandle(pub [u8; 64]);

const _: () = assert!(std::mem::size_of::<IpcHandle>() == 64);

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcHandle(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

/// Kind of device memory to allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// Ordinary device memory.
    Normal,
    /// Memory for cross-GPU flags: uncached/fine-grained on AMD
    /// (`hipExtMallocWithFlags(.., hipDeviceMallocUncached)`); the same as `Normal` on CUDA,
    /// where system-scope atomics are coherent on ordinary memory.
    Uncached,
}

/// Whether a stream is being captured into a graph (`CUstreamCaptureStatus` /
/// `hipStreamCaptureStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing: work runs when enqueued.
    None,
    /// Capturing: work is recorded into a graph and runs at each replay.
    Active,
    /// A capture was started but has been invalidated by an error.
    Invalidated,
}

/// Static facts about one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal, as the runtime numbers it (after `CUDA_VISIBLE_DEVICES` /
    /// `HIP_VISIBLE_DEVICES`).
    pub ordinal: i32,
    /// Marketing name, e.g. "NVIDIA H200" or "AMD Instinct MI300X".
    pub name: String,
    /// Code-object architecture: "sm_90" on NVIDIA, the full `gcnArchName` on AMD
    /// (e.g. "gfx942:sramecc+:xnack-").
    pub arch: String,
    /// `(major, minor)` compute capability (NVIDIA) or HIP's approximation of it (AMD).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD).
    pub multiprocessors: u32,
    /// PCI bus id, lower case, e.g. "0000:1b:00.0".
    pub pci_bus_id: String,
}

/// Plain data that may be copied to and from the device byte for byte.
///
/// # Safety
/// Implementors have no padding bytes and every bit pattern is a valid value.
pub unsafe trait Pod: Copy + 'static {}

macro_rules! impl_pod {
    ($($t:ty),*) => {
        $(
            // SAFETY: primitive integers and floats have no padding and accept any bit pattern.
            unsafe impl Pod for $t {}
        )*
    };
}
impl_pod!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// Declares a raw runtime handle type: a `*mut c_void` made by this module or by `from_raw`.
macro_rules! handle_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        pub struct $name(*mut c_void);

        impl $name {
            /// Wraps a raw handle.
            ///
            /// # Safety
            /// `raw` must be a valid handle of this kind for the runtime that is loaded, and
            /// stay valid for as long as the wrapper is used.
            pub unsafe fn from_raw(raw: *mut c_void) -> Self {
                Self(raw)
            }
            /// The raw handle.
            pub fn as_raw(self) -> *mut c_void {
                self.0
            }
        }

        // SAFETY: runtime handles are opaque identifiers that both runtimes allow to be used
        // from any thread; the wrapper never dereferences the pointer.
        unsafe impl Send for $name {}
        // SAFETY: as above; a shared reference only allows copying the identifier.
        unsafe impl Sync for $name {}
    };
}

handle_type!(
    /// A stream (`CUstream` / `hipStream_t`): the raw `cudaStream_t` / `hipStream_t` the
    /// application passes. [`Stream::NULL`] is the legacy default stream.
    Stream
);
handle_type!(
    /// An event (`CUevent` / `hipEvent_t`), created without timing.
    Event
);
handle_type!(
    /// A loaded code object (`CUmodule` / `hipModule_t`), bound to the device it was loaded on.
    Module
);
handle_type!(
    /// A kernel in a [`Module`] (`CUfunction` / `hipFunction_t`).
    Function
);

impl Stream {
    /// The legacy default stream (`0`).
    pub const NULL: Stream = Stream(std::ptr::null_mut());
}

// ---------------------------------------------------------------------------------------------
// The backend interface: what each runtime implements
// ---------------------------------------------------------------------------------------------

/// The raw operations each runtime provides. Handles are passed as raw pointers and come from
/// the typed wrappers in this file; "current device" means the calling thread's current device
/// (CUDA: the primary context made current by `set_device`).
pub(crate) trait Backend: Send + Sync {
    /// The library that was opened.
    fn library(&self) -> &str;
    /// The driver version number as the runtime reports it.
    fn driver_version(&self) -> i32;
    /// Builds the error for a failed call, with the runtime's name and text for `code`.
    fn error(&self, call: &'static str, code: i32) -> Error;

    fn device_count(&self) -> Result<i32, Error>;
    fn set_device(&self, device: i32) -> Result<(), Error>;
    fn current_device(&self) -> Result<i32, Error>;
    /// An opaque token for the calling thread's current device (CUDA: its current context).
    fn save_current(&self) -> Result<usize, Error>;
    /// Whether `saved` (from `save_current`) already is `device`'s context: then a guard
    /// needs no switch (the hot path of a launch). Conservative default: no.
    fn is_device_context(&self, _saved: usize, _device: i32) -> bool {
        false
    }
    fn restore_current(&self, saved: usize) -> Result<(), Error>;
    fn device_info(&self, device: i32) -> Result<DeviceInfo, Error>;
    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool, Error>;
    /// Lets the current device access `peer`'s memory; "already enabled" is success.
    fn enable_peer_access(&self, peer: i32) -> Result<(), Error>;

    /// Allocates on the current device.
    fn mem_alloc(&self, bytes: usize, kind: MemKind) -> Result<u64, Error>;
    /// # Safety
    /// `ptr` came from `mem_alloc` and is not used afterwards.
    unsafe fn mem_free(&self, ptr: u64) -> Result<(), Error>;
    /// Pinned host memory mapped into the device: (host pointer, device pointer).
    fn host_alloc_mapped(&self, bytes: usize) -> Result<(*mut u8, u64), Error>;
    /// # Safety
    /// `ptr` came from `host_alloc_mapped` and is not used afterwards.
    unsafe fn host_free(&self, ptr: *mut u8) -> Result<(), Error>;

    /// # Safety
    /// `dst..dst+bytes` is device-accessible memory that nothing else uses meanwhile.
    unsafe fn memset_async(&self, dst: u64, value: u8, bytes: usize, stream: *mut c_void) -> Result<(), Error>;
    /// # Safety
    /// Both ranges are accessible from the stream's device and do not overlap.
    unsafe fn memcpy_async(&self, dst: u64, src: u64, bytes: usize, stream: *mut c_void) -> Result<(), Error>;
    /// # Safety
    /// `src` is readable for `bytes`; `dst..dst+bytes` is device memory.
    unsafe fn memcpy_htod(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), Error>;
    /// # Safety
    /// `dst` is writable for `bytes`; `src..src+bytes` is device memory.
    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), Error>;

    fn ipc_get_handle(&self, ptr: u64) -> Result<IpcHandle, Error>;
    /// Opens a handle from another process on the current device, with lazy peer access.
    fn ipc_open(&self, handle: &IpcHandle) -> Result<u64, Error>;
    /// # Safety
    /// `ptr` came from `ipc_open` and is not used afterwards.
    unsafe fn ipc_close(&self, ptr: u64) -> Result<(), Error>;

    /// Loads a code object on the current device.
    ///
    /// # Safety
    /// `image` points to a complete code object (cubin, fatbin, hsaco, or NUL-terminated PTX).
    unsafe fn module_load(&self, image: *const u8) -> Result<*mut c_void, Error>;
    fn module_function(&self, module: *mut c_void, name: &CStr) -> Result<*mut c_void, Error>;
    /// # Safety
    /// `args` points to one pointer per kernel parameter, each to a value of that parameter's
    /// type; the kernel's memory accesses are valid.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        func: *mut c_void,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        stream: *mut c_void,
        args: *mut *mut c_void,
    ) -> Result<(), Error>;

    /// Creates a non-blocking stream on the current device.
    fn stream_create(&self) -> Result<*mut c_void, Error>;
    /// # Safety
    /// `stream` came from `stream_create` and is not used afterwards.
    unsafe fn stream_destroy(&self, stream: *mut c_void) -> Result<(), Error>;
    fn stream_synchronize(&self, stream: *mut c_void) -> Result<(), Error>;
    /// `true` when all work on the stream has completed.
    fn stream_query(&self, stream: *mut c_void) -> Result<bool, Error>;
    fn stream_capture_status(&self, stream: *mut c_void) -> Result<CaptureStatus, Error>;
    fn stream_wait_event(&self, stream: *mut c_void, event: *mut c_void) -> Result<(), Error>;
    /// Creates an event without timing on the current device.
    fn event_create(&self) -> Result<*mut c_void, Error>;
    fn event_record(&self, event: *mut c_void, stream: *mut c_void) -> Result<(), Error>;
    fn event_synchronize(&self, event: *mut c_void) -> Result<(), Error>;
    /// # Safety
    /// `event` came from `event_create` and is not used afterwards.
    unsafe fn event_destroy(&self, event: *mut c_void) -> Result<(), Error>;
}

/// Resolves one symbol of `lib` as a value of type `T`.
///
/// # Safety
/// `T` must be the `unsafe extern "C" fn` type matching the C declaration of `name`.
pub(crate) unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller guarantees that `T` is the symbol's type.
    let sym = unsafe { lib.get::<T>(name.as_bytes()) };
    sym.map(|s| *s).map_err(|e| format!("missing symbol {name} ({e})"))
}

/// Opens the first library of `candidates` that loads. A library already mapped into the process
/// under one of the names is preferred over loading a new one (so rcclx uses the very runtime
/// the application uses), then the names are tried in order. Libraries are opened with
/// `RTLD_NODELETE`: GPU runtimes must never be unmapped once initialised.
/// On failure the error lists each name with the reason.
pub(crate) fn open_library(candidates: &[String]) -> Result<(libloading::Library, String), String> {
    use libloading::os::unix::{Library as UnixLibrary, RTLD_LAZY, RTLD_LOCAL};
    let flags = RTLD_LAZY | RTLD_LOCAL | libc::RTLD_NODELETE;
    for name in candidates {
        // SAFETY: RTLD_NOLOAD only returns a library that is already loaded and initialised, so
        // no initialiser runs.
        if let Ok(lib) = unsafe { UnixLibrary::open(Some(name), flags | libc::RTLD_NOLOAD) } {
            return Ok((lib.into(), name.clone()));
        }
    }
    // (names, reason): consecutive names that failed for the same reason share one entry.
    let mut failures: Vec<(Vec<&str>, String)> = Vec::new();
    for name in candidates {
        // SAFETY: loading a GPU runtime runs its initialisers, which have no preconditions.
        match unsafe { UnixLibrary::open(Some(name), flags) } {
            Ok(lib) => return Ok((lib.into(), name.clone())),
            Err(e) => {
                let why = e.to_string();
                // dlerror() repeats the name: "libx.so: cannot open shared object file: ..."
                let why = why.strip_prefix(&format!("{name}: ")).unwrap_or(&why).to_string();
                match failures.last_mut() {
                    Some((names, last)) if *last == why => names.push(name),
                    _ => failures.push((vec![name], why)),
                }
            }
        }
    }
    let parts: Vec<String> = failures.iter().map(|(names, why)| format!("{} ({why})", names.join(", "))).collect();
    Err(parts.join(", "))
}

// ---------------------------------------------------------------------------------------------
// The runtime
// ---------------------------------------------------------------------------------------------

/// The loaded GPU runtime. Get it with [`runtime()`].
pub struct Runtime {
    vendor: Vendor,
    backend: Box<dyn Backend>,
    device_count: i32,
    /// rcclx's own code object, loaded once per device by [`Runtime::load_rcclx_module`].
    modules: Mutex<HashMap<i32, Module>>,
}

static RUNTIME: OnceLock<Result<Runtime, Error>> = OnceLock::new();

/// Counts failed releases in `Drop` (each is also logged); see [`release_failures`].
static RELEASE_FAILURES: AtomicU32 = AtomicU32::new(0);

/// The GPU runtime, loaded on first use and then shared by the whole process.
///
/// Tries CUDA, then HIP; `RCCLX_GPU_RUNTIME=cuda|hip` allows only that one. Returns
/// [`Error::NoRuntime`] when no library loads and [`Error::NoDevice`] when one loads but sees no
/// device. The outcome is cached: later calls return the same runtime or the same error.
pub fn runtime() -> Result<&'static Runtime, Error> {
    RUNTIME.get_or_init(load_runtime).as_ref().map_err(Clone::clone)
}

/// How many times releasing a GPU resource failed in `Drop` so far (each failure is also logged
/// at WARN level). Callers that must report late errors poll this.
pub fn release_failures() -> u32 {
    RELEASE_FAILURES.load(Ordering::Relaxed)
}

fn load_runtime() -> Result<Runtime, Error> {
    let choice = std::env::var("RCCLX_GPU_RUNTIME").unwrap_or_default();
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
                return Ok(Runtime { vendor, backend, device_count, modules: Mutex::new(HashMap::new()) });
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

impl Runtime {
    /// Which runtime this is.
    pub fn vendor(&self) -> Vendor {
        self.vendor
    }
    /// The library that was loaded (the name it was found under).
    pub fn library(&self) -> &str {
        self.backend.library()
    }
    /// The driver version (CUDA: e.g. 13000; HIP: its `hipDriverGetVersion`).
    pub fn driver_version(&self) -> i32 {
        self.backend.driver_version()
    }
    /// Number of visible devices (at least 1).
    pub fn device_count(&self) -> i32 {
        self.device_count
    }

    fn check_device(&self, device: i32) -> Result<(), Error> {
        if (0..self.device_count).contains(&device) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("device {device} (the runtime sees {} device(s))", self.device_count)))
        }
    }

    // --- devices ------------------------------------------------------------------------------

    /// The calling thread's current device (CUDA: the device of the current context, 0 if none).
    pub fn current_device(&self) -> Result<i32, Error> {
        self.backend.current_device()
    }

    /// Makes `device` current for the calling thread (CUDA: retains the device's primary context,
    /// the one the CUDA runtime API uses, and makes it current). Prefer [`Runtime::device_guard`],
    /// which restores the previous device.
    pub fn set_device(&self, device: i32) -> Result<(), Error> {
        self.check_device(device)?;
        self.backend.set_device(device)
    }

    /// Makes `device` current until the guard is dropped, then restores the previous one.
    pub fn device_guard(&self, device: i32) -> Result<DeviceGuard<'_>, Error> {
        self.check_device(device)?;
        let saved = self.backend.save_current()?;
        if self.backend.is_device_context(saved, device) {
            return Ok(DeviceGuard { rt: self, saved, switched: false });
        }
        self.backend.set_device(device)?;
        Ok(DeviceGuard { rt: self, saved, switched: true })
    }

    /// Name, arch, multiprocessor count and PCI bus id of `device`.
    pub fn device_info(&self, device: i32) -> Result<DeviceInfo, Error> {
        self.check_device(device)?;
        self.backend.device_info(device)
    }

    /// Whether `device` can access `peer`'s memory directly (`true` for `device == peer`).
    pub fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool, Error> {
        self.check_device(device)?;
        self.check_device(peer)?;
        if device == peer {
            return Ok(true);
        }
        self.backend.can_access_peer(device, peer)
    }

    /// Lets `device` access `peer`'s memory. Enabling it twice is fine, and no error is left
    /// behind for the application's `cudaGetLastError` / `hipGetLastError`. A no-op for
    /// `device == peer`.
    pub fn enable_peer_access(&self, device: i32, peer: i32) -> Result<(), Error> {
        self.check_device(peer)?;
        if device == peer {
            return self.check_device(device);
        }
        let _guard = self.device_guard(device)?;
        self.backend.enable_peer_access(peer).map_err(|e| e.with_detail(format!("{device} -> {peer}")))
    }

    // --- memory -------------------------------------------------------------------------------

    /// Allocates `bytes` (> 0) on `device`; freed when the buffer is dropped.
    pub fn alloc(&'static self, device: i32, bytes: usize, kind: MemKind) -> Result<DeviceBuffer, Error> {
        if bytes == 0 {
            return Err(Error::InvalidArgument("zero-byte device allocation".into()));
        }
        let _guard = self.device_guard(device)?;
        let ptr = self
            .backend
            .mem_alloc(bytes, kind)
            .map_err(|e| e.with_detail(format!("{bytes} bytes on device {device}")))?;
        Ok(DeviceBuffer { rt: self, device, ptr: DevicePtr(ptr), bytes, kind })
    }

    /// Allocates `bytes` (> 0) of zeroed, pinned host memory mapped into `device`'s address space
    /// (for host-visible error words and flags).
    pub fn alloc_host_mapped(&'static self, device: i32, bytes: usize) -> Result<HostMapped, Error> {
        if bytes == 0 {
            return Err(Error::InvalidArgument("zero-byte host allocation".into()));
        }
        let _guard = self.device_guard(device)?;
        let (host, dev) = self.backend.host_alloc_mapped(bytes)?;
        // SAFETY: `host` was just allocated with `bytes` bytes and nothing else uses it yet.
        unsafe { std::ptr::write_bytes(host, 0, bytes) };
        Ok(HostMapped { rt: self, device, host, dev: DevicePtr(dev), bytes })
    }

    /// Enqueues `bytes` bytes of `value` at `dst` on `stream`.
    ///
    /// # Safety
    /// `dst..dst+bytes` is device-accessible memory that no other work uses meanwhile.
    pub unsafe fn memset_async(&self, dst: DevicePtr, value: u8, bytes: usize, stream: Stream) -> Result<(), Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.memset_async(dst.0, value, bytes, stream.0) }
    }

    /// Sets `bytes` bytes at `dst` to `value` and waits until it is done (through the legacy
    /// default stream of the current device, which it synchronizes).
    ///
    /// # Safety
    /// As [`Runtime::memset_async`].
    pub unsafe fn memset(&self, dst: DevicePtr, value: u8, bytes: usize) -> Result<(), Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.memset_async(dst.0, value, bytes, Stream::NULL.0) }?;
        self.backend.stream_synchronize(Stream::NULL.0)
    }

    /// Enqueues a copy of `bytes` bytes from `src` to `dst` (device, peer or mapped host memory,
    /// any direction) on `stream`.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes, accessible from the stream's device, and do not
    /// overlap; host memory stays valid until the copy completes.
    pub unsafe fn memcpy_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: Stream,
    ) -> Result<(), Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.memcpy_async(dst.0, src.0, bytes, stream.0) }
    }

    /// Copies `src` to the device at `dst` and waits until it is done. It is ordered after work
    /// on the legacy default stream, but not after work on non-blocking streams: synchronize
    /// those first.
    ///
    /// # Safety
    /// `dst` is device memory valid for `size_of_val(src)` bytes that nothing else uses meanwhile.
    pub unsafe fn memcpy_htod<T: Pod>(&self, dst: DevicePtr, src: &[T]) -> Result<(), Error> {
        let bytes = std::mem::size_of_val(src);
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `src` is a readable slice of plain data; `dst` is valid per the caller.
        unsafe { self.backend.memcpy_htod(dst.0, src.as_ptr().cast(), bytes) }?;
        // A synchronous copy from pageable memory may return before the DMA lands.
        self.backend.stream_synchronize(Stream::NULL.0)
    }

    /// Copies from the device at `src` into `dst` and waits until it is done. It is ordered after
    /// work on the legacy default stream, but not after work on non-blocking streams: synchronize
    /// those first.
    ///
    /// # Safety
    /// `src` is device memory valid for `size_of_val(dst)` bytes.
    pub unsafe fn memcpy_dtoh<T: Pod>(&self, dst: &mut [T], src: DevicePtr) -> Result<(), Error> {
        let bytes = std::mem::size_of_val(dst);
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `dst` is a writable slice of `Pod` values (any bytes are valid); `src` is valid
        // per the caller.
        unsafe { self.backend.memcpy_dtoh(dst.as_mut_ptr().cast(), src.0, bytes) }
    }

    // --- IPC ------------------------------------------------------------------------------------

    /// The IPC handle of the allocation on `device` that starts at `ptr` (64 bytes, to send to
    /// another process on this host).
    pub fn ipc_handle(&self, device: i32, ptr: DevicePtr) -> Result<IpcHandle, Error> {
        // CUDA needs a current context for this call.
        let _guard = self.device_guard(device)?;
        self.backend.ipc_get_handle(ptr.0)
    }

    /// Maps another process's allocation into `device`, with peer access enabled lazily. The
    /// mapping is closed when dropped. A handle exported by this very process cannot be opened
    /// (use the pointer directly with peer access instead).
    pub fn open_ipc(&'static self, device: i32, handle: &IpcHandle) -> Result<IpcMapping, Error> {
        let _guard = self.device_guard(device)?;
        let ptr = self.backend.ipc_open(handle).map_err(|e| e.with_detail(format!("on device {device}")))?;
        Ok(IpcMapping { rt: self, device, ptr: DevicePtr(ptr) })
    }

    // --- modules and launches -------------------------------------------------------------------

    /// Loads a code object on `device`. Modules stay loaded for the life of the process.
    ///
    /// # Safety
    /// `image` is a complete code object for this runtime (cubin/fatbin/hsaco, or PTX with a
    /// terminating NUL): the runtime reads it without a length.
    pub unsafe fn load_module(&self, device: i32, image: &[u8]) -> Result<Module, Error> {
        if image.is_empty() {
            return Err(Error::InvalidArgument("empty code object".into()));
        }
        let _guard = self.device_guard(device)?;
        // SAFETY: forwarded from the caller.
        let raw = unsafe { self.backend.module_load(image.as_ptr()) }
            .map_err(|e| e.with_detail(format!("{} bytes on device {device}", image.len())))?;
        Ok(Module(raw))
    }

    /// rcclx's own kernels on `device`: picks the embedded code object for the device's arch
    /// with [`kernels::for_arch`], loads it on first use and caches it per device.
    pub fn load_rcclx_module(&self, device: i32) -> Result<Module, Error> {
        let mut modules = self.modules.lock();
        if let Some(module) = modules.get(&device) {
            return Ok(*module);
        }
        let arch = self.device_info(device)?.arch;
        let Some(code) = kernels::for_arch(&arch) else {
            let available: Vec<&str> = kernels::CODE_OBJECTS.iter().map(|c| c.target).collect();
            return Err(Error::NoCodeObject { arch, available: available.join(", ") });
        };
        // SAFETY: build.rs embeds complete code objects produced by the kernel compiler for
        // `code.target`, which matches this device's arch.
        let module = unsafe { self.load_module(device, code.image) }
            .map_err(|e| e.with_detail(format!("rcclx code object {} on device {device}", code.target)))?;
        tracing::debug!("gpu: loaded rcclx code object {} for {arch} on device {device}", code.target);
        modules.insert(device, module);
        Ok(module)
    }

    /// The kernel `name` in `module`.
    pub fn function(&self, module: Module, name: &str) -> Result<Function, Error> {
        let cname = CString::new(name).map_err(|_| Error::InvalidArgument(format!("kernel name {name:?}")))?;
        let raw = self.backend.module_function(module.0, &cname).map_err(|e| e.with_detail(name))?;
        Ok(Function(raw))
    }

    /// Launches `func` on `stream` with `grid` blocks of `block` threads and `shared_bytes` of
    /// dynamic shared memory. `args` holds one pointer per kernel parameter, in order, each to a
    /// `#[repr(C)]` plain-data value of exactly the parameter's C type (a device pointer
    /// parameter takes a pointer to a `u64`/[`DevicePtr`]). The caller's current device should be
    /// the stream's device.
    ///
    /// # Safety
    /// `args` matches the kernel's parameter list in number, order and types, and every memory
    /// access the kernel makes with them is valid.
    pub unsafe fn launch(
        &self,
        func: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        stream: Stream,
        args: &[*mut c_void],
    ) -> Result<(), Error> {
        // The runtimes take `void**` but only read the array.
        let args = args.as_ptr().cast_mut();
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.launch(func.0, grid, block, shared_bytes, stream.0, args) }
    }

    // --- streams and events ---------------------------------------------------------------

    /// Creates a non-blocking stream on `device`. Destroy it with [`Runtime::destroy_stream`].
    pub fn create_stream(&self, device: i32) -> Result<Stream, Error> {
        let _guard = self.device_guard(device)?;
        Ok(Stream(self.backend.stream_create()?))
    }

    /// Destroys a stream made by [`Runtime::create_stream`] (work already enqueued still runs).
    ///
    /// # Safety
    /// The stream is not used afterwards.
    pub unsafe fn destroy_stream(&self, stream: Stream) -> Result<(), Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.stream_destroy(stream.0) }
    }

    /// Blocks until all work on `stream` has completed (no timeout; see [`Runtime::wait_stream`]).
    pub fn synchronize_stream(&self, stream: Stream) -> Result<(), Error> {
        self.backend.stream_synchronize(stream.0)
    }

    /// `true` if all work on `stream` has completed.
    pub fn query_stream(&self, stream: Stream) -> Result<bool, Error> {
        self.backend.stream_query(stream.0)
    }

    /// Waits up to `timeout` for `stream` to complete, polling. `Ok(false)` on timeout.
    pub fn wait_stream(&self, stream: Stream, timeout: Duration) -> Result<bool, Error> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(10);
        loop {
            if self.query_stream(stream)? {
                return Ok(true);
            }
            if start.elapsed() >= timeout {
                return Ok(false);
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// Whether `stream` is being captured into a graph.
    pub fn capture_status(&self, stream: Stream) -> Result<CaptureStatus, Error> {
        self.backend.stream_capture_status(stream.0)
    }

    /// Shorthand: the stream is capturing (active or invalidated capture).
    pub fn is_capturing(&self, stream: Stream) -> Result<bool, Error> {
        Ok(self.capture_status(stream)? != CaptureStatus::None)
    }

    /// Makes later work on `stream` wait for `event`.
    pub fn stream_wait_event(&self, stream: Stream, event: Event) -> Result<(), Error> {
        self.backend.stream_wait_event(stream.0, event.0)
    }

    /// Creates an event without timing on `device`. Destroy it with [`Runtime::destroy_event`].
    pub fn create_event(&self, device: i32) -> Result<Event, Error> {
        let _guard = self.device_guard(device)?;
        Ok(Event(self.backend.event_create()?))
    }

    /// Records `event` on `stream`.
    pub fn record_event(&self, event: Event, stream: Stream) -> Result<(), Error> {
        self.backend.event_record(event.0, stream.0)
    }

    /// Blocks until `event` has completed.
    pub fn synchronize_event(&self, event: Event) -> Result<(), Error> {
        self.backend.event_synchronize(event.0)
    }

    /// Destroys an event made by [`Runtime::create_event`].
    ///
    /// # Safety
    /// The event is not used afterwards.
    pub unsafe fn destroy_event(&self, event: Event) -> Result<(), Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.event_destroy(event.0) }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("vendor", &self.vendor)
            .field("library", &self.library())
            .field("driver_version", &self.driver_version())
            .field("device_count", &self.device_count)
            .finish()
    }
}

/// Logs and counts a failed release in `Drop`; never panics.
fn release_failed(what: &str, err: &Error) {
    RELEASE_FAILURES.fetch_add(1, Ordering::Relaxed);
    tracing::warn!("gpu: releasing {what} failed: {err}");
}

// ---------------------------------------------------------------------------------------------
// RAII owners
// ---------------------------------------------------------------------------------------------

/// Restores the calling thread's previous current device when dropped.
/// Made by [`Runtime::device_guard`].
#[must_use = "the device is restored when the guard is dropped"]
pub struct DeviceGuard<'a> {
    rt: &'a Runtime,
    saved: usize,
    /// False when the device was already current: nothing to restore.
    switched: bool,
}

impl Drop for DeviceGuard<'_> {
    fn drop(&mut self) {
        if !self.switched {
            return;
        }
        if let Err(e) = self.rt.backend.restore_current(self.saved) {
            release_failed("device guard (restoring the current device)", &e);
        }
    }
}

/// A device allocation, freed when dropped. Made by [`Runtime::alloc`].
pub struct DeviceBuffer {
    rt: &'static Runtime,
    device: i32,
    ptr: DevicePtr,
    bytes: usize,
    kind: MemKind,
}

impl DeviceBuffer {
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    pub fn device(&self) -> i32 {
        self.device
    }
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// Sets the whole buffer to zero and waits (see [`Runtime::memset`] for ordering).
    pub fn zero(&self) -> Result<(), Error> {
        let _guard = self.rt.device_guard(self.device)?;
        // SAFETY: the buffer owns `bytes` bytes at `ptr`.
        unsafe { self.rt.memset(self.ptr, 0, self.bytes) }
    }

    /// Copies `src` to the start of the buffer and waits (see [`Runtime::memcpy_htod`]).
    pub fn copy_from_host<T: Pod>(&self, src: &[T]) -> Result<(), Error> {
        self.check_len(std::mem::size_of_val(src))?;
        let _guard = self.rt.device_guard(self.device)?;
        // SAFETY: the copy fits in the buffer (checked above).
        unsafe { self.rt.memcpy_htod(self.ptr, src) }
    }

    /// Fills `dst` from the start of the buffer and waits (see [`Runtime::memcpy_dtoh`]).
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T]) -> Result<(), Error> {
        self.check_len(std::mem::size_of_val(dst))?;
        let _guard = self.rt.device_guard(self.device)?;
        // SAFETY: the copy fits in the buffer (checked above).
        unsafe { self.rt.memcpy_dtoh(dst, self.ptr) }
    }

    /// The buffer's IPC handle, for another process to open.
    pub fn ipc_handle(&self) -> Result<IpcHandle, Error> {
        self.rt.ipc_handle(self.device, self.ptr)
    }

    fn check_len(&self, bytes: usize) -> Result<(), Error> {
        if bytes <= self.bytes {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("copy of {bytes} bytes into a {}-byte buffer", self.bytes)))
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes, device {}, {:?})", self.ptr.0, self.bytes, self.device, self.kind)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // CUDA frees need a current context; a failed guard still lets the free be attempted.
        let _guard = self.rt.device_guard(self.device);
        // SAFETY: `ptr` came from `mem_alloc` and this owner is its only user.
        if let Err(e) = unsafe { self.rt.backend.mem_free(self.ptr.0) } {
            release_failed(&format!("{self:?}"), &e);
        }
    }
}

/// Another process's allocation mapped into this one, closed when dropped.
/// Made by [`Runtime::open_ipc`].
pub struct IpcMapping {
    rt: &'static Runtime,
    device: i32,
    ptr: DevicePtr,
}

impl IpcMapping {
    /// The mapped address, valid on the device it was opened on (and its peers).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    pub fn device(&self) -> i32 {
        self.device
    }
}

impl fmt::Debug for IpcMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcMapping({:#x} on device {})", self.ptr.0, self.device)
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _guard = self.rt.device_guard(self.device);
        // SAFETY: `ptr` came from `ipc_open` and this owner is its only user.
        if let Err(e) = unsafe { self.rt.backend.ipc_close(self.ptr.0) } {
            release_failed(&format!("{self:?}"), &e);
        }
    }
}

/// Pinned host memory mapped into a device, freed when dropped: the host reads it as atomics
/// while kernels write it through [`HostMapped::device_ptr`]. Made by
/// [`Runtime::alloc_host_mapped`] (zeroed).
pub struct HostMapped {
    rt: &'static Runtime,
    device: i32,
    host: *mut u8,
    dev: DevicePtr,
    bytes: usize,
}

// SAFETY: the host memory is owned by this value and only reached through atomics (`words`) or
// raw pointers whose users take responsibility; the runtime allows freeing it from any thread.
unsafe impl Send for HostMapped {}
// SAFETY: shared access only hands out atomics and raw pointers.
unsafe impl Sync for HostMapped {}

impl HostMapped {
    /// The address kernels use.
    pub fn device_ptr(&self) -> DevicePtr {
        self.dev
    }
    /// The host address.
    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }
    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The memory as 32-bit words, read and written with atomics because kernels write them
    /// concurrently.
    pub fn words(&self) -> &[AtomicU32] {
        // SAFETY: pinned allocations are page aligned, the memory lives as long as `self`, and
        // it is only accessed atomically from Rust (kernels write it outside Rust's model, as any
        // other process could write shared memory).
        unsafe { std::slice::from_raw_parts(self.host.cast::<AtomicU32>(), self.bytes / 4) }
    }
}

impl fmt::Debug for HostMapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostMapped({:p}, device {:#x}, {} bytes)", self.host, self.dev.0, self.bytes)
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        let _guard = self.rt.device_guard(self.device);
        // SAFETY: `host` came from `host_alloc_mapped` and this owner is its only user.
        if let Err(e) = unsafe { self.rt.backend.host_free(self.host) } {
            release_failed(&format!("{self:?}"), &e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Host identity
// ---------------------------------------------------------------------------------------------

/// An identifier of this host, equal in every process on it and different across hosts (with
/// overwhelming probability): a hash of the host name and the kernel boot id, like NCCL's host
/// hash. `NCCL_HOSTID` replaces both, as in NCCL. Ranks with equal ids can use IPC.
pub fn host_id() -> u64 {
    let text = match std::env::var("NCCL_HOSTID") {
        Ok(id) if !id.is_empty() => id,
        _ => {
            let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default().trim().to_string();
            format!("{}{}", read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/random/boot_id"))
        }
    };
    fnv1a(text.as_bytes())
}

/// 64-bit FNV-1a: stable across builds and processes (unlike `std`'s `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Reads a NUL-terminated string out of a fixed-size buffer (lossy, never fails).
pub(crate) fn c_buf_to_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn host_id_is_stable() {
        assert_eq!(host_id(), host_id());
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn c_strings_from_buffers() {
        assert_eq!(c_buf_to_string(b"gfx942:sramecc+:xnack-\0\0junk"), "gfx942:sramecc+:xnack-");
        assert_eq!(c_buf_to_string(b"no-nul"), "no-nul");
    }
}
