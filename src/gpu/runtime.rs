//! The operations of [`Runtime`]: devices, memory, IPC, modules and launches, streams, events.

use std::ffi::{CString, c_void};
use std::fmt;
use std::time::{Duration, Instant};

use super::error::Error;
use super::handles::*;
use super::load::Runtime;
use super::owners::{DeviceBuffer, DeviceGuard, HostMapped, IpcMapping, Relaxed};
use crate::kernels;

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

    /// The calling thread in relaxed stream capture mode until the guard is dropped. Around
    /// every driver call rcclx makes for itself (setup, teardown: allocations, frees, IPC,
    /// modules, streams, events, synchronous copies), so that none of them invalidates a graph
    /// another thread is capturing in global or thread-local mode (PyTorch's default is global),
    /// as NCCL does around its own. Not around what rcclx enqueues on the application's stream.
    pub fn relaxed(&self) -> Relaxed<'_> {
        Relaxed { rt: self, previous: self.backend.exchange_capture_mode(CaptureMode::Relaxed as i32).ok() }
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
        let _relaxed = self.relaxed();
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
        let _relaxed = self.relaxed();
        if bytes == 0 {
            return Err(Error::InvalidArgument("zero-byte device allocation".into()));
        }
        let _guard = self.device_guard(device)?;
        let ptr = self
            .backend
            .mem_alloc(bytes, kind)
            .map_err(|e| e.with_detail(format!("{bytes} bytes on device {device}")))?;
        super::owners::LIVE_DEVICE_BYTES.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(DeviceBuffer { rt: self, device, ptr: DevicePtr(ptr), bytes, kind })
    }

    /// Allocates `bytes` (> 0) of zeroed, pinned host memory mapped into `device`'s address space
    /// (for host-visible error words and flags).
    pub fn alloc_host_mapped(&'static self, device: i32, bytes: usize) -> Result<HostMapped, Error> {
        let _relaxed = self.relaxed();
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

    /// rcclx's own non-blocking stream on the current device, for its synchronous helpers
    /// ([`Runtime::memset`], [`Runtime::memcpy_htod`], [`Runtime::memcpy_dtoh`]). why: the legacy
    /// default stream would also wait for the application's blocking streams, so a setup step
    /// could hang behind a collective that itself waits for a peer still in setup.
    fn private_stream(&self) -> Result<Stream, Error> {
        let device = self.backend.current_device()?;
        let mut streams = self.private_streams.lock();
        if let Some(s) = streams.get(&device) {
            return Ok(*s);
        }
        let s = Stream(self.backend.stream_create()?);
        streams.insert(device, s);
        Ok(s)
    }

    /// Sets `bytes` bytes at `dst` to `value` and waits until it is done (on rcclx's own stream
    /// of the current device: ordered after nothing else).
    ///
    /// # Safety
    /// As [`Runtime::memset_async`].
    pub unsafe fn memset(&self, dst: DevicePtr, value: u8, bytes: usize) -> Result<(), Error> {
        let _relaxed = self.relaxed();
        let stream = self.private_stream()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.memset_async(dst.0, value, bytes, stream.0) }?;
        self.backend.stream_synchronize(stream.0)
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

    /// Copies `src` to the device at `dst` and waits until it is done (on rcclx's own stream of
    /// the current device: ordered after no other work; synchronize that first).
    ///
    /// # Safety
    /// `dst` is device memory valid for `size_of_val(src)` bytes that nothing else uses meanwhile.
    pub unsafe fn memcpy_htod<T: Pod>(&self, dst: DevicePtr, src: &[T]) -> Result<(), Error> {
        let _relaxed = self.relaxed();
        let bytes = std::mem::size_of_val(src);
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.private_stream()?;
        // SAFETY: `src` is a readable slice of plain data that outlives the wait below; `dst` is
        // valid per the caller.
        unsafe { self.backend.memcpy_htod_async(dst.0, src.as_ptr().cast(), bytes, stream.0) }?;
        self.backend.stream_synchronize(stream.0)
    }

    /// Copies from the device at `src` into `dst` and waits until it is done (on rcclx's own
    /// stream of the current device: ordered after no other work; synchronize that first).
    ///
    /// # Safety
    /// `src` is device memory valid for `size_of_val(dst)` bytes.
    pub unsafe fn memcpy_dtoh<T: Pod>(&self, dst: &mut [T], src: DevicePtr) -> Result<(), Error> {
        let _relaxed = self.relaxed();
        let bytes = std::mem::size_of_val(dst);
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.private_stream()?;
        // SAFETY: `dst` is a writable slice of `Pod` values (any bytes are valid) that outlives
        // the wait below; `src` is valid per the caller.
        unsafe { self.backend.memcpy_dtoh_async(dst.as_mut_ptr().cast(), src.0, bytes, stream.0) }?;
        self.backend.stream_synchronize(stream.0)
    }

    // --- IPC ------------------------------------------------------------------------------------

    /// The IPC handle of the allocation on `device` that starts at `ptr` (64 bytes, to send to
    /// another process on this host).
    pub fn ipc_handle(&self, device: i32, ptr: DevicePtr) -> Result<IpcHandle, Error> {
        let _relaxed = self.relaxed();
        // CUDA needs a current context for this call.
        let _guard = self.device_guard(device)?;
        self.backend.ipc_get_handle(ptr.0)
    }

    /// Maps another process's allocation into `device`, with peer access enabled lazily. The
    /// mapping is closed when dropped. A handle exported by this very process cannot be opened
    /// (use the pointer directly with peer access instead).
    pub fn open_ipc(&'static self, device: i32, handle: &IpcHandle) -> Result<IpcMapping, Error> {
        let _relaxed = self.relaxed();
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
        let _relaxed = self.relaxed();
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
        // SAFETY: the build script embeds complete code objects produced by the kernel compiler for
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

    /// How many blocks of `block_threads` threads of `func` one multiprocessor (SM or CU) of
    /// its device holds at once, at least 1.
    pub fn blocks_per_multiprocessor(&self, func: Function, block_threads: u32) -> Result<u32, Error> {
        self.backend.blocks_per_multiprocessor(func.0, block_threads)
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
        let _relaxed = self.relaxed();
        let _guard = self.device_guard(device)?;
        Ok(Stream(self.backend.stream_create()?))
    }

    /// Destroys a stream made by [`Runtime::create_stream`] (work already enqueued still runs).
    ///
    /// # Safety
    /// The stream is not used afterwards.
    pub unsafe fn destroy_stream(&self, stream: Stream) -> Result<(), Error> {
        let _relaxed = self.relaxed();
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.stream_destroy(stream.0) }
    }

    /// Blocks until all work on `device` has completed (every stream, every library's).
    pub fn synchronize_device(&self, device: i32) -> Result<(), Error> {
        let _relaxed = self.relaxed();
        let _guard = self.device_guard(device)?;
        self.backend.device_synchronize()
    }

    /// `true` if all work on `stream` has completed.
    pub fn query_stream(&self, stream: Stream) -> Result<bool, Error> {
        let _relaxed = self.relaxed();
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

    /// The capture `stream` is in (its id), or `None` when it is not being captured into a
    /// graph. Id 0 where the runtime cannot tell captures apart (no `StreamGetCaptureInfo`).
    pub fn capture_id(&self, stream: Stream) -> Result<Option<u64>, Error> {
        self.backend.stream_capture(stream.0)
    }

    /// Shorthand: the stream is capturing (active or invalidated capture).
    pub fn is_capturing(&self, stream: Stream) -> Result<bool, Error> {
        Ok(self.capture_id(stream)?.is_some())
    }

    /// Makes later work on `stream` wait for `event`.
    pub fn stream_wait_event(&self, stream: Stream, event: Event) -> Result<(), Error> {
        self.backend.stream_wait_event(stream.0, event.0)
    }

    /// Creates an event without timing on `device`. Destroy it with [`Runtime::destroy_event`].
    pub fn create_event(&self, device: i32) -> Result<Event, Error> {
        let _relaxed = self.relaxed();
        let _guard = self.device_guard(device)?;
        Ok(Event(self.backend.event_create()?))
    }

    /// Creates an event with timing on `device` (for [`Runtime::elapsed_ms`]). Destroy it with
    /// [`Runtime::destroy_event`].
    pub fn create_timed_event(&self, device: i32) -> Result<Event, Error> {
        let _relaxed = self.relaxed();
        let _guard = self.device_guard(device)?;
        Ok(Event(self.backend.event_create_timed()?))
    }

    /// Milliseconds between two completed timed events (optional entry point: tests only).
    pub fn elapsed_ms(&self, start: Event, end: Event) -> Result<f32, Error> {
        self.backend.event_elapsed_ms(start.0, end.0)
    }

    /// Records `event` on `stream`.
    pub fn record_event(&self, event: Event, stream: Stream) -> Result<(), Error> {
        self.backend.event_record(event.0, stream.0)
    }

    /// `true` if the work `event` tracks has completed (or it was never recorded).
    pub fn query_event(&self, event: Event) -> Result<bool, Error> {
        let _relaxed = self.relaxed();
        self.backend.event_query(event.0)
    }

    /// Destroys an event made by [`Runtime::create_event`].
    ///
    /// # Safety
    /// The event is not used afterwards.
    pub unsafe fn destroy_event(&self, event: Event) -> Result<(), Error> {
        let _relaxed = self.relaxed();
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.event_destroy(event.0) }
    }

    // --- graphs (rcclx's GPU tests replay captured collectives) ---------------------------------

    /// Free and total memory of `device`, in bytes (optional entry point: tests only).
    pub fn memory_info(&self, device: i32) -> Result<(u64, u64), Error> {
        let _relaxed = self.relaxed();
        let _guard = self.device_guard(device)?;
        self.backend.memory_info()
    }

    /// Starts capturing `stream` into a graph (relaxed mode).
    pub fn begin_capture(&self, stream: Stream) -> Result<(), Error> {
        self.begin_capture_in(stream, CaptureMode::Relaxed)
    }

    /// Starts capturing `stream` into a graph in capture mode `mode`.
    pub fn begin_capture_in(&self, stream: Stream, mode: CaptureMode) -> Result<(), Error> {
        self.backend.capture_begin(stream.0, mode)
    }

    /// Ends the capture of `stream` and instantiates what it recorded. Destroy the result with
    /// [`Runtime::destroy_graph`].
    pub fn end_capture(&self, stream: Stream) -> Result<GraphExec, Error> {
        Ok(GraphExec(self.backend.capture_end(stream.0)?))
    }

    /// Enqueues one replay of `graph` on `stream`.
    pub fn launch_graph(&self, graph: GraphExec, stream: Stream) -> Result<(), Error> {
        // SAFETY: a GraphExec comes only from `end_capture` (or `from_raw`, whose caller
        // vouches for it); destroying it is unsafe, so it is live here.
        unsafe { self.backend.graph_launch(graph.0, stream.0) }
    }

    /// Destroys a graph made by [`Runtime::end_capture`].
    ///
    /// # Safety
    /// The graph is not used afterwards (replays already enqueued still run).
    pub unsafe fn destroy_graph(&self, graph: GraphExec) -> Result<(), Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.graph_destroy(graph.0) }
    }

    /// If `stream` is being captured: the graph takes one reference to a new user object whose
    /// release calls `release(data)`, once the graph (and every executable graph made from it)
    /// is destroyed and their launches have completed; `Ok(true)`. `Ok(false)`: not capturing.
    /// How a clique's memory outlives the graphs that captured its kernels (NCCL keeps its
    /// persistent plans the same way).
    ///
    /// # Safety
    /// `release` runs on a driver thread: it must not call the runtime, and `data` must stay
    /// valid until it runs. On `Err` it never runs.
    pub unsafe fn capture_retain(
        &self,
        stream: Stream,
        release: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<bool, Error> {
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.capture_retain(stream.0, release, data) }
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
