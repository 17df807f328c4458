//! Plain data and handle types of the GPU layer: no behaviour, no ownership.

use std::ffi::c_void;
use std::fmt;

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
    /// Memory other GPUs read or write (staging, flags, LL inbox): uncached on AMD
    /// (`hipExtMallocWithFlags(.., hipDeviceMallocUncached)`, as RCCL's P2P buffers), so that
    /// no peer's data waits in an L2 for a writeback (docs/memory-model.md); the same as
    /// `Normal` on CUDA, where system-scope operations are coherent on ordinary memory.
    Uncached,
}

/// How a capture restricts other calls (`CUstreamCaptureMode` / `hipStreamCaptureMode`): under
/// `Global` (PyTorch's default) a "potentially unsafe" call on any thread not in relaxed mode
/// invalidates the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    Global = 0,
    ThreadLocal = 1,
    Relaxed = 2,
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
        pub struct $name(pub(super) *mut c_void);

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
handle_type!(
    /// A captured graph, instantiated (`CUgraphExec` / `hipGraphExec_t`); its `CUgraph` /
    /// `hipGraph_t` is destroyed right after instantiation.
    GraphExec
);

impl Stream {
    /// The legacy default stream (`0`).
    pub const NULL: Stream = Stream(std::ptr::null_mut());
}

/// Reads a NUL-terminated string out of a fixed-size buffer (lossy, never fails).
pub(crate) fn c_buf_to_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
