//! The CUDA backend: the driver API of `libcuda.so.1` (no `libcudart`), see the module doc of
//! [`crate::gpu`]. Versioned entry points (`_v2`) are named explicitly, because the unversioned
//! names are the old ABIs kept for binary compatibility.
//!
//! Devices are used through their primary context (`cuDevicePrimaryCtxRetain`), the context the
//! CUDA runtime API uses, so rcclx shares it with the application. Each device's primary context
//! is retained once and kept for the life of the process.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use parking_lot::Mutex;

use super::{Backend, CaptureMode, DeviceInfo, Error, IpcHandle, MemKind, c_buf_to_string};

type CUresult = c_int;
type CUdevice = c_int;
type CUdeviceptr = u64;
/// `CUcontext`, `CUmodule`, `CUfunction`, `CUstream`, `CUevent`: opaque pointers.
type Handle = *mut c_void;

const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_NO_DEVICE: CUresult = 100;
const CUDA_ERROR_NOT_READY: CUresult = 600;
const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;

const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x02;
const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;
const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
const CU_STREAM_CAPTURE_STATUS_NONE: c_int = 0;
const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_int = 1;
const CU_USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
const CU_GRAPH_USER_OBJECT_MOVE: c_uint = 1;

entry_points! {
    /// The CUDA driver entry points rcclx uses (signatures from `cuda.h`).
    struct Api;
    required {
        cuInit = "cuInit": fn(c_uint) -> CUresult;
        cuDriverGetVersion = "cuDriverGetVersion": fn(*mut c_int) -> CUresult;
        cuGetErrorName = "cuGetErrorName": fn(CUresult, *mut *const c_char) -> CUresult;
        cuGetErrorString = "cuGetErrorString": fn(CUresult, *mut *const c_char) -> CUresult;
        cuDeviceGetCount = "cuDeviceGetCount": fn(*mut c_int) -> CUresult;
        cuDeviceGet = "cuDeviceGet": fn(*mut CUdevice, c_int) -> CUresult;
        cuDeviceGetName = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice) -> CUresult;
        cuDeviceGetAttribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CUdevice) -> CUresult;
        cuDeviceGetPCIBusId = "cuDeviceGetPCIBusId": fn(*mut c_char, c_int, CUdevice) -> CUresult;
        cuDeviceCanAccessPeer = "cuDeviceCanAccessPeer":
            fn(*mut c_int, CUdevice, CUdevice) -> CUresult;
        cuDevicePrimaryCtxRetain = "cuDevicePrimaryCtxRetain":
            fn(*mut Handle, CUdevice) -> CUresult;
        cuCtxGetCurrent = "cuCtxGetCurrent": fn(*mut Handle) -> CUresult;
        cuCtxSetCurrent = "cuCtxSetCurrent": fn(Handle) -> CUresult;
        cuCtxGetDevice = "cuCtxGetDevice": fn(*mut CUdevice) -> CUresult;
        cuCtxSynchronize = "cuCtxSynchronize": fn() -> CUresult;
        cuCtxEnablePeerAccess = "cuCtxEnablePeerAccess": fn(Handle, c_uint) -> CUresult;
        cuMemAlloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize) -> CUresult;
        cuMemFree = "cuMemFree_v2": fn(CUdeviceptr) -> CUresult;
        cuMemHostAlloc = "cuMemHostAlloc": fn(*mut *mut c_void, usize, c_uint) -> CUresult;
        cuMemHostGetDevicePointer = "cuMemHostGetDevicePointer_v2":
            fn(*mut CUdeviceptr, *mut c_void, c_uint) -> CUresult;
        cuMemFreeHost = "cuMemFreeHost": fn(*mut c_void) -> CUresult;
        cuMemsetD8Async = "cuMemsetD8Async": fn(CUdeviceptr, u8, usize, Handle) -> CUresult;
        cuMemcpyAsync = "cuMemcpyAsync": fn(CUdeviceptr, CUdeviceptr, usize, Handle) -> CUresult;
        cuMemcpyHtoDAsync = "cuMemcpyHtoDAsync_v2": fn(CUdeviceptr, *const c_void, usize, Handle) -> CUresult;
        cuMemcpyDtoHAsync = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CUdeviceptr, usize, Handle) -> CUresult;
        cuIpcGetMemHandle = "cuIpcGetMemHandle": fn(*mut IpcHandle, CUdeviceptr) -> CUresult;
        cuIpcOpenMemHandle = "cuIpcOpenMemHandle_v2":
            fn(*mut CUdeviceptr, IpcHandle, c_uint) -> CUresult;
        cuIpcCloseMemHandle = "cuIpcCloseMemHandle": fn(CUdeviceptr) -> CUresult;
        cuModuleLoadData = "cuModuleLoadData": fn(*mut Handle, *const c_void) -> CUresult;
        cuModuleGetFunction = "cuModuleGetFunction":
            fn(*mut Handle, Handle, *const c_char) -> CUresult;
        cuLaunchKernel = "cuLaunchKernel": fn(
            Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle,
            *mut *mut c_void, *mut *mut c_void,
        ) -> CUresult;
        cuStreamCreate = "cuStreamCreate": fn(*mut Handle, c_uint) -> CUresult;
        cuStreamDestroy = "cuStreamDestroy_v2": fn(Handle) -> CUresult;
        cuStreamSynchronize = "cuStreamSynchronize": fn(Handle) -> CUresult;
        cuStreamQuery = "cuStreamQuery": fn(Handle) -> CUresult;
        cuStreamIsCapturing = "cuStreamIsCapturing": fn(Handle, *mut c_int) -> CUresult;
        cuStreamWaitEvent = "cuStreamWaitEvent": fn(Handle, Handle, c_uint) -> CUresult;
        cuEventCreate = "cuEventCreate": fn(*mut Handle, c_uint) -> CUresult;
        cuEventRecord = "cuEventRecord": fn(Handle, Handle) -> CUresult;
        cuEventQuery = "cuEventQuery": fn(Handle) -> CUresult;
        cuEventDestroy = "cuEventDestroy_v2": fn(Handle) -> CUresult;
    }
    optional {
        cuOccupancyMaxActiveBlocksPerMultiprocessor = "cuOccupancyMaxActiveBlocksPerMultiprocessor":
            fn(*mut c_int, Handle, c_int, usize) -> CUresult;
        // Graph capture: not used by the library, only by its GPU tests (replays).
        cuStreamBeginCapture = "cuStreamBeginCapture_v2": fn(Handle, c_int) -> CUresult;
        cuStreamEndCapture = "cuStreamEndCapture": fn(Handle, *mut Handle) -> CUresult;
        cuGraphInstantiateWithFlags = "cuGraphInstantiateWithFlags":
            fn(*mut Handle, Handle, u64) -> CUresult;
        cuGraphLaunch = "cuGraphLaunch": fn(Handle, Handle) -> CUresult;
        cuGraphDestroy = "cuGraphDestroy": fn(Handle) -> CUresult;
        cuGraphExecDestroy = "cuGraphExecDestroy": fn(Handle) -> CUresult;
        // Free and total device memory: the GPU tests' leak checks.
        cuMemGetInfo = "cuMemGetInfo_v2": fn(*mut usize, *mut usize) -> CUresult;
        // Time between two events: the GPU tests' timings.
        cuEventElapsedTime = "cuEventElapsedTime": fn(*mut f32, Handle, Handle) -> CUresult;
        // A graph that captured rcclx kernels keeps their clique's memory (`Runtime::capture_retain`).
        cuStreamGetCaptureInfo3 = "cuStreamGetCaptureInfo_v3": fn(
            Handle, *mut c_int, *mut u64, *mut Handle, *mut *const Handle, *mut *const c_void, *mut usize,
        ) -> CUresult;
        cuStreamGetCaptureInfo2 = "cuStreamGetCaptureInfo_v2":
            fn(Handle, *mut c_int, *mut u64, *mut Handle, *mut *const Handle, *mut usize) -> CUresult;
        cuUserObjectCreate = "cuUserObjectCreate":
            fn(*mut Handle, *mut c_void, Option<unsafe extern "C" fn(*mut c_void)>, c_uint, c_uint) -> CUresult;
        cuUserObjectRelease = "cuUserObjectRelease": fn(Handle, c_uint) -> CUresult;
        cuGraphRetainUserObject = "cuGraphRetainUserObject": fn(Handle, Handle, c_uint, c_uint) -> CUresult;
        // Relaxed capture mode around rcclx's own setup and teardown calls (`Runtime::relaxed`).
        cuThreadExchangeStreamCaptureMode = "cuThreadExchangeStreamCaptureMode": fn(*mut c_int) -> CUresult;
    }
}

const LIBRARY: &str = "libcuda.so.1";

pub(crate) struct Cuda {
    api: Api,
    library: String,
    version: i32,
    /// Retained primary context per device ordinal, as an address (0: not retained yet).
    primary: Mutex<Vec<usize>>,
    /// Keeps the library's handle; it is opened with RTLD_NODELETE and never unmapped.
    _lib: libloading::Library,
}

impl Cuda {
    /// Opens `libcuda.so.1`, resolves the entry points and runs `cuInit`.
    pub(crate) fn load() -> Result<Cuda, Error> {
        let (lib, library) = super::open_library(&[LIBRARY.to_string()]).map_err(Error::NoRuntime)?;
        // SAFETY: `lib` is libcuda and the list transcribes `cuda.h`; the library is never
        // unmapped.
        let api = unsafe { Api::load(&lib) }.map_err(|e| Error::NoRuntime(format!("{library} ({e})")))?;
        let mut cuda = Cuda { api, library, version: 0, primary: Mutex::new(Vec::new()), _lib: lib };
        // SAFETY: cuInit has no preconditions; flags must be 0.
        match unsafe { (cuda.api.cuInit)(0) } {
            CUDA_SUCCESS => {}
            CUDA_ERROR_NO_DEVICE => return Err(Error::NoDevice),
            code => {
                // e.g. 34 (the toolkit's stub library) or 35 (driver too old).
                let err = cuda.error("cuInit", code);
                return Err(Error::NoRuntime(format!("{} ({err})", cuda.library)));
            }
        }
        let mut version = 0;
        // SAFETY: out-pointer to a local.
        cuda.check("cuDriverGetVersion", unsafe { (cuda.api.cuDriverGetVersion)(&mut version) })?;
        cuda.version = version;
        Ok(cuda)
    }

    fn check(&self, call: &'static str, code: CUresult) -> Result<(), Error> {
        if code == CUDA_SUCCESS { Ok(()) } else { Err(self.error(call, code)) }
    }

    fn device(&self, ordinal: i32) -> Result<CUdevice, Error> {
        let mut dev = 0;
        // SAFETY: out-pointer to a local.
        self.check("cuDeviceGet", unsafe { (self.api.cuDeviceGet)(&mut dev, ordinal) })?;
        Ok(dev)
    }

    /// The primary context of `ordinal`, retained on first use and kept for the process's life.
    fn primary_context(&self, ordinal: i32) -> Result<Handle, Error> {
        let mut table = self.primary.lock();
        let slot = usize::try_from(ordinal).map_err(|_| Error::InvalidArgument(format!("device {ordinal}")))?;
        if table.len() <= slot {
            table.resize(slot + 1, 0);
        }
        if table[slot] == 0 {
            let dev = self.device(ordinal)?;
            let mut ctx: Handle = std::ptr::null_mut();
            // SAFETY: out-pointer to a local; `dev` is a valid device.
            self.check("cuDevicePrimaryCtxRetain", unsafe { (self.api.cuDevicePrimaryCtxRetain)(&mut ctx, dev) })?;
            table[slot] = ctx as usize;
        }
        Ok(table[slot] as Handle)
    }

    fn attribute(&self, attr: c_int, dev: CUdevice) -> Result<i32, Error> {
        let mut value = 0;
        // SAFETY: out-pointer to a local; `attr` is a valid CUdevice_attribute.
        self.check("cuDeviceGetAttribute", unsafe { (self.api.cuDeviceGetAttribute)(&mut value, attr, dev) })?;
        Ok(value)
    }

    fn error_text(
        &self,
        f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
        code: CUresult,
    ) -> Option<String> {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: out-pointer to a local; the driver returns a static string or an error.
        let rc = unsafe { f(code, &mut text) };
        if rc != CUDA_SUCCESS || text.is_null() {
            return None;
        }
        // SAFETY: on success `text` is a static NUL-terminated string owned by the driver.
        Some(unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
    }
}

impl Backend for Cuda {
    fn library(&self) -> &str {
        &self.library
    }
    fn driver_version(&self) -> i32 {
        self.version
    }

    fn error(&self, call: &'static str, code: i32) -> Error {
        let name = self.error_text(self.api.cuGetErrorName, code).unwrap_or_else(|| "CUDA_ERROR_UNKNOWN_CODE".into());
        let text = self.error_text(self.api.cuGetErrorString, code).unwrap_or_else(|| "unrecognized error code".into());
        Error::Runtime { call, detail: String::new(), runtime: "cuda", code, message: format!("{name}: {text}") }
    }

    fn device_count(&self) -> Result<i32, Error> {
        let mut n = 0;
        // SAFETY: out-pointer to a local.
        self.check("cuDeviceGetCount", unsafe { (self.api.cuDeviceGetCount)(&mut n) })?;
        Ok(n)
    }

    fn set_device(&self, device: i32) -> Result<(), Error> {
        let ctx = self.primary_context(device)?;
        // SAFETY: `ctx` is a retained primary context, which stays valid.
        self.check("cuCtxSetCurrent", unsafe { (self.api.cuCtxSetCurrent)(ctx) })
    }

    fn current_device(&self) -> Result<i32, Error> {
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        self.check("cuCtxGetCurrent", unsafe { (self.api.cuCtxGetCurrent)(&mut ctx) })?;
        if ctx.is_null() {
            // Like cudaGetDevice before any device was chosen.
            return Ok(0);
        }
        let mut dev = 0;
        // SAFETY: out-pointer to a local; a context is current.
        self.check("cuCtxGetDevice", unsafe { (self.api.cuCtxGetDevice)(&mut dev) })?;
        Ok(dev)
    }

    fn save_current(&self) -> Result<usize, Error> {
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        self.check("cuCtxGetCurrent", unsafe { (self.api.cuCtxGetCurrent)(&mut ctx) })?;
        Ok(ctx as usize)
    }

    fn is_device_context(&self, saved: usize, device: i32) -> bool {
        saved != 0 && self.primary_context(device).is_ok_and(|ctx| ctx as usize == saved)
    }

    fn restore_current(&self, saved: usize) -> Result<(), Error> {
        // SAFETY: `saved` is the context that was current (or null: none), from `save_current`.
        self.check("cuCtxSetCurrent", unsafe { (self.api.cuCtxSetCurrent)(saved as Handle) })
    }

    fn device_info(&self, device: i32) -> Result<DeviceInfo, Error> {
        let dev = self.device(device)?;
        let mut name = [0u8; 256];
        // SAFETY: the buffer holds 256 bytes, as passed.
        self.check("cuDeviceGetName", unsafe { (self.api.cuDeviceGetName)(name.as_mut_ptr().cast(), 256, dev) })?;
        let mut bus = [0u8; 64];
        // SAFETY: the buffer holds 64 bytes, as passed.
        self.check("cuDeviceGetPCIBusId", unsafe { (self.api.cuDeviceGetPCIBusId)(bus.as_mut_ptr().cast(), 64, dev) })?;
        let major = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)?;
        let minor = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)?;
        let sms = self.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)?;
        Ok(DeviceInfo {
            ordinal: device,
            name: c_buf_to_string(&name),
            arch: format!("sm_{major}{minor}"),
            compute_capability: (major, minor),
            multiprocessors: u32::try_from(sms).unwrap_or(0),
            pci_bus_id: c_buf_to_string(&bus).to_ascii_lowercase(),
        })
    }

    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool, Error> {
        let (dev, peer) = (self.device(device)?, self.device(peer)?);
        let mut can = 0;
        // SAFETY: out-pointer to a local; both devices are valid.
        self.check("cuDeviceCanAccessPeer", unsafe { (self.api.cuDeviceCanAccessPeer)(&mut can, dev, peer) })?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, peer: i32) -> Result<(), Error> {
        let peer_ctx = self.primary_context(peer)?;
        // SAFETY: `peer_ctx` is a retained primary context; flags must be 0. The driver API has
        // no sticky "last error", so the tolerated code leaves nothing behind.
        match unsafe { (self.api.cuCtxEnablePeerAccess)(peer_ctx, 0) } {
            CUDA_SUCCESS | CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            code => Err(self.error("cuCtxEnablePeerAccess", code)),
        }
    }

    fn mem_alloc(&self, bytes: usize, _kind: MemKind) -> Result<u64, Error> {
        // Uncached == Normal: system-scope atomics on ordinary device memory are coherent on
        // NVIDIA.
        let mut ptr = 0;
        // SAFETY: out-pointer to a local.
        self.check("cuMemAlloc_v2", unsafe { (self.api.cuMemAlloc)(&mut ptr, bytes) })?;
        Ok(ptr)
    }

    unsafe fn mem_free(&self, ptr: u64) -> Result<(), Error> {
        // SAFETY: the caller passes a pointer from cuMemAlloc that is no longer used.
        self.check("cuMemFree_v2", unsafe { (self.api.cuMemFree)(ptr) })
    }

    fn host_alloc_mapped(&self, bytes: usize) -> Result<(*mut u8, u64), Error> {
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: out-pointer to a local.
        self.check("cuMemHostAlloc", unsafe { (self.api.cuMemHostAlloc)(&mut host, bytes, flags) })?;
        let mut dev = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just above; flags must be 0.
        let rc = unsafe { (self.api.cuMemHostGetDevicePointer)(&mut dev, host, 0) };
        if let Err(e) = self.check("cuMemHostGetDevicePointer_v2", rc) {
            // SAFETY: `host` came from cuMemHostAlloc and is not used elsewhere.
            let _ = unsafe { (self.api.cuMemFreeHost)(host) };
            return Err(e);
        }
        Ok((host.cast(), dev))
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> Result<(), Error> {
        // SAFETY: the caller passes a pointer from cuMemHostAlloc that is no longer used.
        self.check("cuMemFreeHost", unsafe { (self.api.cuMemFreeHost)(ptr.cast()) })
    }

    unsafe fn memset_async(&self, dst: u64, value: u8, bytes: usize, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller guarantees the range and the stream.
        self.check("cuMemsetD8Async", unsafe { (self.api.cuMemsetD8Async)(dst, value, bytes, stream) })
    }

    unsafe fn memcpy_async(&self, dst: u64, src: u64, bytes: usize, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller guarantees both ranges and the stream; unified addressing lets the
        // driver infer the direction.
        self.check("cuMemcpyAsync", unsafe { (self.api.cuMemcpyAsync)(dst, src, bytes, stream) })
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: *mut c_void,
    ) -> Result<(), Error> {
        // SAFETY: the caller guarantees both ranges and the stream.
        self.check("cuMemcpyHtoDAsync_v2", unsafe { (self.api.cuMemcpyHtoDAsync)(dst, src.cast(), bytes, stream) })
    }

    unsafe fn memcpy_dtoh_async(&self, dst: *mut u8, src: u64, bytes: usize, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller guarantees both ranges and the stream.
        self.check("cuMemcpyDtoHAsync_v2", unsafe { (self.api.cuMemcpyDtoHAsync)(dst.cast(), src, bytes, stream) })
    }

    fn ipc_get_handle(&self, ptr: u64) -> Result<IpcHandle, Error> {
        let mut handle = IpcHandle([0; 64]);
        // SAFETY: out-pointer to a local of the handle's 64-byte C layout; the driver
        // validates `ptr`.
        self.check("cuIpcGetMemHandle", unsafe { (self.api.cuIpcGetMemHandle)(&mut handle, ptr) })?;
        Ok(handle)
    }

    fn ipc_open(&self, handle: &IpcHandle) -> Result<u64, Error> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local; the handle is passed by value with its C layout.
        let rc = unsafe { (self.api.cuIpcOpenMemHandle)(&mut ptr, *handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) };
        self.check("cuIpcOpenMemHandle_v2", rc)?;
        Ok(ptr)
    }

    unsafe fn ipc_close(&self, ptr: u64) -> Result<(), Error> {
        // SAFETY: the caller passes a pointer from cuIpcOpenMemHandle that is no longer used.
        self.check("cuIpcCloseMemHandle", unsafe { (self.api.cuIpcCloseMemHandle)(ptr) })
    }

    unsafe fn module_load(&self, image: *const u8) -> Result<*mut c_void, Error> {
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: the caller guarantees a complete code object at `image`.
        self.check("cuModuleLoadData", unsafe { (self.api.cuModuleLoadData)(&mut module, image.cast()) })?;
        Ok(module)
    }

    fn module_function(&self, module: *mut c_void, name: &CStr) -> Result<*mut c_void, Error> {
        let mut func: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; `module` is a loaded module; `name` is NUL-terminated.
        self.check("cuModuleGetFunction", unsafe { (self.api.cuModuleGetFunction)(&mut func, module, name.as_ptr()) })?;
        Ok(func)
    }

    fn blocks_per_multiprocessor(&self, func: *mut c_void, block_threads: u32) -> Result<u32, Error> {
        let Some(occupancy) = self.api.cuOccupancyMaxActiveBlocksPerMultiprocessor else { return Ok(1) };
        let mut blocks: c_int = 0;
        // SAFETY: out-pointer to a local; `func` came from `module_function`.
        let rc = unsafe { occupancy(&mut blocks, func, block_threads as c_int, 0) };
        self.check("cuOccupancyMaxActiveBlocksPerMultiprocessor", rc)?;
        Ok(blocks.max(1) as u32)
    }

    unsafe fn launch(
        &self,
        func: *mut c_void,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        stream: *mut c_void,
        args: *mut *mut c_void,
    ) -> Result<(), Error> {
        // SAFETY: the caller guarantees that `args` matches the kernel's parameters.
        let rc = unsafe {
            (self.api.cuLaunchKernel)(
                func,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                shared_bytes,
                stream,
                args,
                std::ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", rc)
    }

    fn stream_create(&self) -> Result<*mut c_void, Error> {
        let mut stream: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        self.check("cuStreamCreate", unsafe { (self.api.cuStreamCreate)(&mut stream, CU_STREAM_NON_BLOCKING) })?;
        Ok(stream)
    }

    unsafe fn stream_destroy(&self, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller passes a stream it created and no longer uses.
        self.check("cuStreamDestroy_v2", unsafe { (self.api.cuStreamDestroy)(stream) })
    }

    fn stream_synchronize(&self, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: `stream` is a valid stream (see `Stream::from_raw`).
        self.check("cuStreamSynchronize", unsafe { (self.api.cuStreamSynchronize)(stream) })
    }

    fn device_synchronize(&self) -> Result<(), Error> {
        // SAFETY: no arguments; waits for the current context's work.
        self.check("cuCtxSynchronize", unsafe { (self.api.cuCtxSynchronize)() })
    }

    fn stream_query(&self, stream: *mut c_void) -> Result<bool, Error> {
        // SAFETY: `stream` is a valid stream.
        match unsafe { (self.api.cuStreamQuery)(stream) } {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.error("cuStreamQuery", code)),
        }
    }

    fn exchange_capture_mode(&self, mode: i32) -> Result<i32, Error> {
        let Some(exchange) = self.api.cuThreadExchangeStreamCaptureMode else { return Ok(mode) };
        let mut m = mode;
        // SAFETY: in-out pointer to a local holding a valid `CUstreamCaptureMode`.
        self.check("cuThreadExchangeStreamCaptureMode", unsafe { exchange(&mut m) })?;
        Ok(m)
    }

    fn stream_capture(&self, stream: *mut c_void) -> Result<Option<u64>, Error> {
        let (mut status, mut id): (c_int, u64) = (CU_STREAM_CAPTURE_STATUS_NONE, 0);
        let null = std::ptr::null_mut::<c_void>;
        let r = if let Some(info) = self.api.cuStreamGetCaptureInfo3 {
            // SAFETY: `stream` is a valid stream; the outputs are locals or NULL (optional).
            unsafe { info(stream, &mut status, &mut id, null().cast(), null().cast(), null().cast(), null().cast()) }
        } else if let Some(info) = self.api.cuStreamGetCaptureInfo2 {
            // SAFETY: as above.
            unsafe { info(stream, &mut status, &mut id, null().cast(), null().cast(), null().cast()) }
        } else {
            // SAFETY: out-pointer to a local; `stream` is a valid stream.
            unsafe { (self.api.cuStreamIsCapturing)(stream, &mut status) }
        };
        self.check("cuStreamGetCaptureInfo", r)?;
        Ok((status != CU_STREAM_CAPTURE_STATUS_NONE).then_some(id))
    }

    fn stream_wait_event(&self, stream: *mut c_void, event: *mut c_void) -> Result<(), Error> {
        // SAFETY: both handles are valid; flags must be 0.
        self.check("cuStreamWaitEvent", unsafe { (self.api.cuStreamWaitEvent)(stream, event, 0) })
    }

    fn event_create(&self) -> Result<*mut c_void, Error> {
        let mut event: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        self.check("cuEventCreate", unsafe { (self.api.cuEventCreate)(&mut event, CU_EVENT_DISABLE_TIMING) })?;
        Ok(event)
    }

    fn event_create_timed(&self) -> Result<*mut c_void, Error> {
        let mut event: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        self.check("cuEventCreate", unsafe { (self.api.cuEventCreate)(&mut event, 0) })?;
        Ok(event)
    }

    fn event_elapsed_ms(&self, start: *mut c_void, end: *mut c_void) -> Result<f32, Error> {
        let f =
            self.api.cuEventElapsedTime.ok_or(Error::Unsupported { call: "cuEventElapsedTime", runtime: "cuda" })?;
        let mut ms = 0f32;
        // SAFETY: out-pointer to a local; both events are valid.
        self.check("cuEventElapsedTime", unsafe { f(&mut ms, start, end) })?;
        Ok(ms)
    }

    fn event_record(&self, event: *mut c_void, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: both handles are valid.
        self.check("cuEventRecord", unsafe { (self.api.cuEventRecord)(event, stream) })
    }

    fn event_query(&self, event: *mut c_void) -> Result<bool, Error> {
        // SAFETY: `event` is a valid event.
        match unsafe { (self.api.cuEventQuery)(event) } {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.error("cuEventQuery", code)),
        }
    }

    unsafe fn event_destroy(&self, event: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller passes an event it created and no longer uses.
        self.check("cuEventDestroy_v2", unsafe { (self.api.cuEventDestroy)(event) })
    }

    fn memory_info(&self) -> Result<(u64, u64), Error> {
        let f = self.api.cuMemGetInfo.ok_or(Error::Unsupported { call: "cuMemGetInfo", runtime: "cuda" })?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: two out-pointers to locals.
        self.check("cuMemGetInfo", unsafe { f(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    fn capture_begin(&self, stream: *mut c_void, mode: CaptureMode) -> Result<(), Error> {
        let f = self
            .api
            .cuStreamBeginCapture
            .ok_or(Error::Unsupported { call: "cuStreamBeginCapture", runtime: "cuda" })?;
        // SAFETY: `stream` is a valid stream; the mode is a valid capture mode.
        self.check("cuStreamBeginCapture", unsafe { f(stream, mode as c_int) })
    }

    fn capture_end(&self, stream: *mut c_void) -> Result<*mut c_void, Error> {
        let unsupported = |call| Error::Unsupported { call, runtime: "cuda" };
        let end = self.api.cuStreamEndCapture.ok_or(unsupported("cuStreamEndCapture"))?;
        let inst = self.api.cuGraphInstantiateWithFlags.ok_or(unsupported("cuGraphInstantiateWithFlags"))?;
        let destroy = self.api.cuGraphDestroy.ok_or(unsupported("cuGraphDestroy"))?;
        let mut graph: Handle = std::ptr::null_mut();
        // SAFETY: `stream` is capturing (else the call fails); out-pointer to a local.
        self.check("cuStreamEndCapture", unsafe { end(stream, &mut graph) })?;
        let mut exec: Handle = std::ptr::null_mut();
        // SAFETY: `graph` was just captured; out-pointer to a local; flags 0.
        let made = self.check("cuGraphInstantiateWithFlags", unsafe { inst(&mut exec, graph, 0) });
        // SAFETY: the instantiated graph does not need its template any more.
        let _ = unsafe { destroy(graph) };
        made.map(|_| exec)
    }

    unsafe fn graph_launch(&self, exec: *mut c_void, stream: *mut c_void) -> Result<(), Error> {
        let f = self.api.cuGraphLaunch.ok_or(Error::Unsupported { call: "cuGraphLaunch", runtime: "cuda" })?;
        // SAFETY: the caller passes a live instantiated graph; `stream` is valid.
        self.check("cuGraphLaunch", unsafe { f(exec, stream) })
    }

    unsafe fn graph_destroy(&self, exec: *mut c_void) -> Result<(), Error> {
        let f =
            self.api.cuGraphExecDestroy.ok_or(Error::Unsupported { call: "cuGraphExecDestroy", runtime: "cuda" })?;
        // SAFETY: the caller passes an instantiated graph it no longer uses.
        self.check("cuGraphExecDestroy", unsafe { f(exec) })
    }

    unsafe fn capture_retain(
        &self,
        stream: *mut c_void,
        release: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<bool, Error> {
        let unsupported = |call| Error::Unsupported { call, runtime: "cuda" };
        let create = self.api.cuUserObjectCreate.ok_or(unsupported("cuUserObjectCreate"))?;
        let drop_ref = self.api.cuUserObjectRelease.ok_or(unsupported("cuUserObjectRelease"))?;
        let retain = self.api.cuGraphRetainUserObject.ok_or(unsupported("cuGraphRetainUserObject"))?;
        let (mut status, mut graph): (c_int, Handle) = (0, std::ptr::null_mut());
        let r = if let Some(info) = self.api.cuStreamGetCaptureInfo3 {
            // SAFETY: `stream` is a valid stream; the optional outputs are NULL, the others locals.
            unsafe {
                info(
                    stream,
                    &mut status,
                    std::ptr::null_mut(),
                    &mut graph,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            }
        } else if let Some(info) = self.api.cuStreamGetCaptureInfo2 {
            // SAFETY: as above.
            unsafe {
                info(stream, &mut status, std::ptr::null_mut(), &mut graph, std::ptr::null_mut(), std::ptr::null_mut())
            }
        } else {
            return Err(unsupported("cuStreamGetCaptureInfo"));
        };
        self.check("cuStreamGetCaptureInfo", r)?;
        if status != CU_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null() {
            return Ok(false);
        }
        let mut object: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the caller vouches for `release` and `data`; the only
        // flag CUDA accepts.
        let r = unsafe { create(&mut object, data, Some(release), 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) };
        self.check("cuUserObjectCreate", r)?;
        // SAFETY: `graph` is the graph being captured; our one reference moves to it.
        let r = unsafe { retain(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE) };
        if let Err(e) = self.check("cuGraphRetainUserObject", r) {
            // SAFETY: drops the reference we still own: `release(data)` runs once, as on success.
            let _ = unsafe { drop_ref(object, 1) };
            return Err(e);
        }
        Ok(true)
    }
}
