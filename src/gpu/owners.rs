//! RAII owners of GPU resources. `Drop` never panics: a failed release is logged and counted
//! ([`release_failures`]).

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::error::Error;
use super::handles::{DevicePtr, IpcHandle, MemKind, Pod};
use super::load::Runtime;

/// Counts failed releases in `Drop` (each is also logged); see [`release_failures`].
static RELEASE_FAILURES: AtomicU32 = AtomicU32::new(0);

/// How many times releasing a GPU resource failed in `Drop` so far (each failure is also logged
/// at WARN level). Callers that must report late errors poll this.
pub fn release_failures() -> u32 {
    RELEASE_FAILURES.load(Ordering::Relaxed)
}

/// Bytes of device memory allocated through [`Runtime::alloc`] and not freed yet, all devices.
pub(super) static LIVE_DEVICE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes of device memory this process holds through rcclx's runtime ([`Runtime::alloc`], not
/// yet freed): what a test compares with the device's free memory, to tell a leak of its own
/// from memory the driver takes for itself.
pub fn live_device_bytes() -> u64 {
    LIVE_DEVICE_BYTES.load(Ordering::Relaxed)
}

/// Logs and counts a failed release in `Drop`; never panics.
fn release_failed(what: &str, err: &Error) {
    RELEASE_FAILURES.fetch_add(1, Ordering::Relaxed);
    tracing::warn!("gpu: releasing {what} failed: {err}");
}

/// Restores the calling thread's previous current device when dropped.
/// Made by [`Runtime::device_guard`].
#[must_use = "the device is restored when the guard is dropped"]
pub struct DeviceGuard<'a> {
    pub(super) rt: &'a Runtime,
    pub(super) saved: usize,
    /// False when the device was already current: nothing to restore.
    pub(super) switched: bool,
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
    pub(super) rt: &'static Runtime,
    pub(super) device: i32,
    pub(super) ptr: DevicePtr,
    pub(super) bytes: usize,
    pub(super) kind: MemKind,
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
        let _relaxed = self.rt.relaxed();
        // CUDA frees need a current context; a failed guard still lets the free be attempted.
        let _guard = self.rt.device_guard(self.device);
        // SAFETY: `ptr` came from `mem_alloc` and this owner is its only user.
        match unsafe { self.rt.backend.mem_free(self.ptr.0) } {
            Ok(()) => _ = LIVE_DEVICE_BYTES.fetch_sub(self.bytes as u64, Ordering::Relaxed),
            Err(e) => release_failed(&format!("{self:?}"), &e),
        }
    }
}

/// Another process's allocation mapped into this one, closed when dropped.
/// Made by [`Runtime::open_ipc`].
pub struct IpcMapping {
    pub(super) rt: &'static Runtime,
    pub(super) device: i32,
    pub(super) ptr: DevicePtr,
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
        let _relaxed = self.rt.relaxed();
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
    pub(super) rt: &'static Runtime,
    pub(super) device: i32,
    pub(super) host: *mut u8,
    pub(super) dev: DevicePtr,
    pub(super) bytes: usize,
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
        let _relaxed = self.rt.relaxed();
        let _guard = self.rt.device_guard(self.device);
        // SAFETY: `host` came from `host_alloc_mapped` and this owner is its only user.
        if let Err(e) = unsafe { self.rt.backend.host_free(self.host) } {
            release_failed(&format!("{self:?}"), &e);
        }
    }
}

/// The calling thread in relaxed stream capture mode until dropped, then back in the mode it
/// had ([`Runtime::relaxed`]).
pub struct Relaxed<'a> {
    pub(super) rt: &'a Runtime,
    /// The mode to restore (`None`: it could not be set, nothing to restore).
    pub(super) previous: Option<i32>,
}

impl Drop for Relaxed<'_> {
    fn drop(&mut self) {
        if let Some(mode) = self.previous
            && let Err(e) = self.rt.backend.exchange_capture_mode(mode)
        {
            release_failed("relaxed capture mode (restoring the thread's mode)", &e);
        }
    }
}
