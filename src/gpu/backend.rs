//! The backend interface each runtime implements, the `entry_points!` macro that declares a
//! runtime's C entry points, and loading a runtime library.

use std::ffi::{CStr, c_void};

use super::{CaptureMode, DeviceInfo, Error, IpcHandle, MemKind};

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
    unsafe fn memcpy_htod_async(
        &self,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: *mut c_void,
    ) -> Result<(), Error>;
    /// # Safety
    /// `dst` is writable for `bytes`; `src..src+bytes` is device memory.
    unsafe fn memcpy_dtoh_async(&self, dst: *mut u8, src: u64, bytes: usize, stream: *mut c_void) -> Result<(), Error>;

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
    /// How many blocks of `block_threads` threads of `func` one multiprocessor holds at once
    /// (registers and shared memory decide); 1 when the runtime cannot say.
    fn blocks_per_multiprocessor(&self, func: *mut c_void, block_threads: u32) -> Result<u32, Error>;
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
    /// Waits for all work on the current device.
    fn device_synchronize(&self) -> Result<(), Error>;
    /// `true` when all work on the stream has completed.
    fn stream_query(&self, stream: *mut c_void) -> Result<bool, Error>;
    /// The capture `stream` is in (its unique id; an active or invalidated capture), or `None`
    /// when it is not capturing. Id 0 where the runtime cannot tell captures apart.
    fn stream_capture(&self, stream: *mut c_void) -> Result<Option<u64>, Error>;
    /// Sets the calling thread's stream capture mode (`cuThreadExchangeStreamCaptureMode`,
    /// `hipThreadExchangeStreamCaptureMode`; 0 global, 1 thread-local, 2 relaxed) and returns
    /// the one it replaces. A runtime without the call keeps its mode (returns `mode`).
    fn exchange_capture_mode(&self, mode: i32) -> Result<i32, Error>;
    fn stream_wait_event(&self, stream: *mut c_void, event: *mut c_void) -> Result<(), Error>;
    /// Creates an event without timing on the current device.
    fn event_create(&self) -> Result<*mut c_void, Error>;
    /// Creates an event with timing on the current device (the GPU tests' timings).
    fn event_create_timed(&self) -> Result<*mut c_void, Error>;
    /// Milliseconds between two completed timed events (optional entry point: tests only).
    fn event_elapsed_ms(&self, start: *mut c_void, end: *mut c_void) -> Result<f32, Error>;
    fn event_record(&self, event: *mut c_void, stream: *mut c_void) -> Result<(), Error>;
    /// `true` when the work the event tracks has completed.
    fn event_query(&self, event: *mut c_void) -> Result<bool, Error>;
    /// # Safety
    /// `event` came from `event_create` and is not used afterwards.
    unsafe fn event_destroy(&self, event: *mut c_void) -> Result<(), Error>;

    /// Free and total memory of the current device, in bytes.
    fn memory_info(&self) -> Result<(u64, u64), Error>;
    /// Starts capturing `stream` into a graph (relaxed mode: other threads' calls are not
    /// checked).
    fn capture_begin(&self, stream: *mut c_void, mode: CaptureMode) -> Result<(), Error>;
    /// Ends the capture of `stream` and instantiates the graph.
    fn capture_end(&self, stream: *mut c_void) -> Result<*mut c_void, Error>;
    /// # Safety
    /// `exec` came from `capture_end` and is not destroyed.
    unsafe fn graph_launch(&self, exec: *mut c_void, stream: *mut c_void) -> Result<(), Error>;
    /// # Safety
    /// `exec` came from `capture_end` and is not used afterwards.
    unsafe fn graph_destroy(&self, exec: *mut c_void) -> Result<(), Error>;
    /// Makes the graph being captured on `stream` own one reference to a new user object, whose
    /// release (the graph destroyed, its launches completed) calls `release(data)` on a driver
    /// thread. `Ok(false)`: the stream is not capturing (nothing retained, `release` not called).
    /// On `Err`, `release` was not called and will not be.
    ///
    /// # Safety
    /// `release` must not call the runtime and `data` must stay valid until it is called.
    unsafe fn capture_retain(
        &self,
        stream: *mut c_void,
        release: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<bool, Error>;
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
