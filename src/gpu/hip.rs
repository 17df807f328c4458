//! The HIP backend: `libamdhip64.so` (ROCm 5, 6 and 7), see the module doc of [`crate::gpu`].
//!
//! Device properties come from `hipGetDevicePropertiesR0600` (ROCm 6+) or, on ROCm 5, from
//! `hipGetDevicePropertiesR0000` / `hipGetDeviceProperties`, read at fixed byte offsets (see
//! [`R0600`] and [`R0000`]) rather than through a transcription of the whole struct.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use super::{Backend, CaptureMode, DeviceInfo, Error, IpcHandle, MemKind, c_buf_to_string};

type HipError = c_int;
/// `hipModule_t`, `hipFunction_t`, `hipStream_t`, `hipEvent_t`: opaque pointers.
type Handle = *mut c_void;

const HIP_SUCCESS: HipError = 0;
const HIP_ERROR_NO_DEVICE: HipError = 100;
const HIP_ERROR_INVALID_DEVICE: HipError = 101;
const HIP_ERROR_NOT_READY: HipError = 600;
const HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED: HipError = 704;

const HIP_HOST_MALLOC_PORTABLE: c_uint = 0x1;
const HIP_HOST_MALLOC_MAPPED: c_uint = 0x2;
/// Fine-grained (coherent) host memory: the host sees kernel writes while the kernel runs.
const HIP_HOST_MALLOC_COHERENT: c_uint = 0x4000_0000;
const HIP_DEVICE_MALLOC_UNCACHED: c_uint = 0x3;
const HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;
const HIP_STREAM_NON_BLOCKING: c_uint = 0x1;
const HIP_EVENT_DISABLE_TIMING: c_uint = 0x2;
const HIP_MEMCPY_HOST_TO_DEVICE: c_int = 1;
const HIP_MEMCPY_DEVICE_TO_HOST: c_int = 2;
const HIP_MEMCPY_DEFAULT: c_int = 4;
const HIP_STREAM_CAPTURE_STATUS_NONE: c_int = 0;
const HIP_STREAM_CAPTURE_STATUS_ACTIVE: c_int = 1;

entry_points! {
    /// The HIP entry points rcclx uses (signatures from `hip/hip_runtime_api.h`).
    struct Api;
    required {
        hipInit = "hipInit": fn(c_uint) -> HipError;
        hipDriverGetVersion = "hipDriverGetVersion": fn(*mut c_int) -> HipError;
        hipGetErrorName = "hipGetErrorName": fn(HipError) -> *const c_char;
        hipGetErrorString = "hipGetErrorString": fn(HipError) -> *const c_char;
        hipGetLastError = "hipGetLastError": fn() -> HipError;
        hipPeekAtLastError = "hipPeekAtLastError": fn() -> HipError;
        hipGetDeviceCount = "hipGetDeviceCount": fn(*mut c_int) -> HipError;
        hipSetDevice = "hipSetDevice": fn(c_int) -> HipError;
        hipGetDevice = "hipGetDevice": fn(*mut c_int) -> HipError;
        hipDeviceGetPCIBusId = "hipDeviceGetPCIBusId": fn(*mut c_char, c_int, c_int) -> HipError;
        hipDeviceCanAccessPeer = "hipDeviceCanAccessPeer": fn(*mut c_int, c_int, c_int) -> HipError;
        hipDeviceEnablePeerAccess = "hipDeviceEnablePeerAccess": fn(c_int, c_uint) -> HipError;
        hipMalloc = "hipMalloc": fn(*mut *mut c_void, usize) -> HipError;
        hipFree = "hipFree": fn(*mut c_void) -> HipError;
        hipHostMalloc = "hipHostMalloc": fn(*mut *mut c_void, usize, c_uint) -> HipError;
        hipHostGetDevicePointer = "hipHostGetDevicePointer":
            fn(*mut *mut c_void, *mut c_void, c_uint) -> HipError;
        hipHostFree = "hipHostFree": fn(*mut c_void) -> HipError;
        hipMemsetAsync = "hipMemsetAsync": fn(*mut c_void, c_int, usize, Handle) -> HipError;
        hipMemcpyAsync = "hipMemcpyAsync":
            fn(*mut c_void, *const c_void, usize, c_int, Handle) -> HipError;
        hipIpcGetMemHandle = "hipIpcGetMemHandle": fn(*mut IpcHandle, *mut c_void) -> HipError;
        hipIpcOpenMemHandle = "hipIpcOpenMemHandle":
            fn(*mut *mut c_void, IpcHandle, c_uint) -> HipError;
        hipIpcCloseMemHandle = "hipIpcCloseMemHandle": fn(*mut c_void) -> HipError;
        hipModuleLoadData = "hipModuleLoadData": fn(*mut Handle, *const c_void) -> HipError;
        hipModuleGetFunction = "hipModuleGetFunction":
            fn(*mut Handle, Handle, *const c_char) -> HipError;
        hipModuleLaunchKernel = "hipModuleLaunchKernel": fn(
            Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle,
            *mut *mut c_void, *mut *mut c_void,
        ) -> HipError;
        hipStreamCreateWithFlags = "hipStreamCreateWithFlags": fn(*mut Handle, c_uint) -> HipError;
        hipStreamDestroy = "hipStreamDestroy": fn(Handle) -> HipError;
        hipStreamSynchronize = "hipStreamSynchronize": fn(Handle) -> HipError;
        hipDeviceSynchronize = "hipDeviceSynchronize": fn() -> HipError;
        hipStreamQuery = "hipStreamQuery": fn(Handle) -> HipError;
        hipStreamIsCapturing = "hipStreamIsCapturing": fn(Handle, *mut c_int) -> HipError;
        hipStreamWaitEvent = "hipStreamWaitEvent": fn(Handle, Handle, c_uint) -> HipError;
        hipEventCreateWithFlags = "hipEventCreateWithFlags": fn(*mut Handle, c_uint) -> HipError;
        hipEventRecord = "hipEventRecord": fn(Handle, Handle) -> HipError;
        hipEventQuery = "hipEventQuery": fn(Handle) -> HipError;
        hipEventDestroy = "hipEventDestroy": fn(Handle) -> HipError;
    }
    optional {
        hipModuleOccupancyMaxActiveBlocksPerMultiprocessor = "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor":
            fn(*mut c_int, Handle, c_int, usize) -> HipError;
        hipExtMallocWithFlags = "hipExtMallocWithFlags":
            fn(*mut *mut c_void, usize, c_uint) -> HipError;
        // The property struct is written through an untyped pointer: see `PropsLayout`.
        hipGetDevicePropertiesR0600 = "hipGetDevicePropertiesR0600":
            fn(*mut c_void, c_int) -> HipError;
        hipGetDevicePropertiesR0000 = "hipGetDevicePropertiesR0000":
            fn(*mut c_void, c_int) -> HipError;
        hipGetDeviceProperties = "hipGetDeviceProperties": fn(*mut c_void, c_int) -> HipError;
        // Free and total device memory: the GPU tests' leak checks.
        hipMemGetInfo = "hipMemGetInfo": fn(*mut usize, *mut usize) -> HipError;
        // Time between two events: the GPU tests' timings.
        hipEventElapsedTime = "hipEventElapsedTime": fn(*mut f32, Handle, Handle) -> HipError;
        // Graph capture: not used by the library, only by its GPU tests (replays).
        hipStreamBeginCapture = "hipStreamBeginCapture": fn(Handle, c_int) -> HipError;
        // Relaxed capture mode around rcclx's own setup and teardown calls (`Runtime::relaxed`).
        hipThreadExchangeStreamCaptureMode = "hipThreadExchangeStreamCaptureMode": fn(*mut c_int) -> HipError;
        hipStreamEndCapture = "hipStreamEndCapture": fn(Handle, *mut Handle) -> HipError;
        hipGraphInstantiateWithFlags = "hipGraphInstantiateWithFlags":
            fn(*mut Handle, Handle, u64) -> HipError;
        hipGraphLaunch = "hipGraphLaunch": fn(Handle, Handle) -> HipError;
        hipGraphDestroy = "hipGraphDestroy": fn(Handle) -> HipError;
        hipGraphExecDestroy = "hipGraphExecDestroy": fn(Handle) -> HipError;
        // A graph that captured rcclx kernels keeps their clique's memory (`Runtime::capture_retain`).
        hipStreamGetCaptureInfo_v2 = "hipStreamGetCaptureInfo_v2":
            fn(Handle, *mut c_int, *mut u64, *mut Handle, *mut *const Handle, *mut usize) -> HipError;
        hipUserObjectCreate = "hipUserObjectCreate":
            fn(*mut Handle, *mut c_void, Option<unsafe extern "C" fn(*mut c_void)>, c_uint, c_uint) -> HipError;
        hipUserObjectRelease = "hipUserObjectRelease": fn(Handle, c_uint) -> HipError;
        hipGraphRetainUserObject = "hipGraphRetainUserObject": fn(Handle, Handle, c_uint, c_uint) -> HipError;
    }
}

/// Byte offsets of the fields rcclx reads in a `hipDeviceProp_t` (x86-64, LP64).
struct PropsLayout {
    call: &'static str,
    major: usize,
    minor: usize,
    multiprocessor_count: usize,
    gcn_arch_name: usize,
}

/// `hipDeviceProp_tR0600` (ROCm 6.0 and later; `sizeof` = 1472). Source: the struct
/// `hipDeviceProp_t` (`#define hipDeviceProp_t hipDeviceProp_tR0600`) in `include/hip/
/// hip_runtime_api.h` of ROCm/rocm-systems (the HIP headers formerly in ROCm/HIP and ROCm/clr):
/// `char name[256]` at 0, then uuid (16), luid (8), ..., `int major` at 360, `int minor` at 364,
/// `int multiProcessorCount` at 388, ..., `int reserved[63]`, `int hipReserved[32]`, then the
/// HIP-only members starting with `char gcnArchName[256]` at **1160**. Offsets computed with
/// `offsetof` on a transcription of that struct (gcc, x86-64), and they agree with LLVM's
/// `clang/tools/amdgpu-arch/AMDGPUArchByHIP.cpp`, which declares the R0600 layout as
/// `char padding[1160]; char gcnArchName[256];`.
const R0600: PropsLayout = PropsLayout {
    call: "hipGetDevicePropertiesR0600",
    major: 360,
    minor: 364,
    multiprocessor_count: 388,
    gcn_arch_name: 1160,
};

/// The pre-6.0 `hipDeviceProp_t` (ROCm 5's `hipGetDeviceProperties`, ROCm 6's
/// `hipGetDevicePropertiesR0000`): `char name[256]`, `size_t totalGlobalMem` at 256, ...,
/// `int major` at 328, `int minor` at 332, `int multiProcessorCount` at 336, ..., `int gcnArch`,
/// `char gcnArchName[256]` at **396**. Source: the same header before ROCm 6 (ROCm/HIP), offsets
/// computed the same way; LLVM's amdgpu-arch declares `char padding[396]` for it.
const R0000: PropsLayout = PropsLayout {
    call: "hipGetDevicePropertiesR0000",
    major: 328,
    minor: 332,
    multiprocessor_count: 336,
    gcn_arch_name: 396,
};

/// Room for any version of the property struct (R0600 is 1472 bytes, R0000 about 1.3 KiB),
/// with headroom for growth.
#[repr(C, align(16))]
struct PropsBuffer([u8; 4096]);

const LIBRARY_NAMES: [&str; 4] = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];

pub(crate) struct Hip {
    api: Api,
    library: String,
    version: i32,
    /// Keeps the library's handle; it is opened with RTLD_NODELETE and never unmapped.
    _lib: libloading::Library,
}

impl Hip {
    /// Opens `libamdhip64` (`RCCLX_HIP_LIB` alone when set; else plain names, then
    /// `$ROCM_PATH/lib`, then `/opt/rocm/lib`), resolves the entry points and runs `hipInit`.
    pub(crate) fn load() -> Result<Hip, Error> {
        let cfg = crate::config::get();
        let candidates: Vec<String> = match &cfg.hip_lib {
            Some(path) => vec![path.clone()],
            None => {
                let mut dirs = vec![String::new()];
                if let Some(root) = &cfg.rocm_path {
                    dirs.push(format!("{}/lib/", root.trim_end_matches('/')));
                }
                dirs.push("/opt/rocm/lib/".to_string());
                dirs.iter().flat_map(|dir| LIBRARY_NAMES.iter().map(move |name| format!("{dir}{name}"))).collect()
            }
        };
        let (lib, library) = super::open_library(&candidates).map_err(Error::NoRuntime)?;
        // SAFETY: `lib` is libamdhip64 and the list transcribes its header; never unmapped.
        let api = unsafe { Api::load(&lib) }.map_err(|e| Error::NoRuntime(format!("{library} ({e})")))?;
        let mut hip = Hip { api, library, version: 0, _lib: lib };
        // SAFETY: hipInit has no preconditions; flags must be 0.
        match hip.call(|| unsafe { (hip.api.hipInit)(0) }) {
            HIP_SUCCESS => {}
            // Without /dev/kfd the runtime reports either code.
            HIP_ERROR_NO_DEVICE | HIP_ERROR_INVALID_DEVICE => return Err(Error::NoDevice),
            code => {
                let err = hip.error("hipInit", code);
                return Err(Error::NoRuntime(format!("{} ({err})", hip.library)));
            }
        }
        let mut version = 0;
        // SAFETY: out-pointer to a local.
        hip.check("hipDriverGetVersion", || unsafe { (hip.api.hipDriverGetVersion)(&mut version) })?;
        hip.version = version;
        Ok(hip)
    }

    /// Runs one HIP call, `f`, and leaves the calling thread's last-error slot as the
    /// application had it. Every HIP call of rcclx goes through here.
    ///
    /// From ROCm 7.0 the slot keeps the last failing call's code until `hipGetLastError` reads
    /// it (ROCm 6 overwrote it on every call), so a failure that rcclx handles (an IPC handle it
    /// cannot open, an allocation that falls back, "peer access already enabled") would
    /// otherwise be raised by the application's next check, e.g. PyTorch's
    /// `C10_HIP_KERNEL_LAUNCH_CHECK`, in unrelated code. After a failure the slot is read (and so
    /// reset) only when it held no error before the call: an error the application has not read
    /// yet stays pending. (HIP has no call to put an older code back, so on ROCm 7 that error
    /// then reads as rcclx's code; it still reads as an error.) The peek is one more HIP call
    /// (a thread-local read) per call, negligible beside a launch.
    fn call(&self, f: impl FnOnce() -> HipError) -> HipError {
        // SAFETY: no arguments; returns the calling thread's last error without resetting it.
        let before = unsafe { (self.api.hipPeekAtLastError)() };
        let code = f();
        if code != HIP_SUCCESS && before == HIP_SUCCESS {
            // SAFETY: no arguments; resets the slot, which now holds only this call's code.
            let _ = unsafe { (self.api.hipGetLastError)() };
        }
        code
    }

    /// [`Hip::call`], then [`Hip::status`].
    fn check(&self, call: &'static str, f: impl FnOnce() -> HipError) -> Result<(), Error> {
        self.status(call, self.call(f))
    }

    /// The result of a call made through [`Hip::call`].
    fn status(&self, call: &'static str, code: HipError) -> Result<(), Error> {
        if code == HIP_SUCCESS { Ok(()) } else { Err(self.error(call, code)) }
    }

    /// Fills `buf` with the device's property struct; returns the layout it has.
    fn properties(&self, device: i32, buf: &mut PropsBuffer) -> Result<&'static PropsLayout, Error> {
        let attempts = [
            (self.api.hipGetDevicePropertiesR0600, &R0600),
            (self.api.hipGetDevicePropertiesR0000, &R0000),
            (self.api.hipGetDeviceProperties, &R0000),
        ];
        for (func, layout) in attempts {
            let Some(func) = func else { continue };
            // SAFETY: `buf` is larger than any version of the struct and suitably aligned.
            self.check(layout.call, || unsafe { func(buf.0.as_mut_ptr().cast(), device) })?;
            return Ok(layout);
        }
        Err(Error::Unsupported { call: "hipGetDeviceProperties", runtime: "hip" })
    }
}

fn read_i32(buf: &[u8], offset: usize) -> i32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[offset..offset + 4]);
    i32::from_ne_bytes(bytes)
}

impl Backend for Hip {
    fn library(&self) -> &str {
        &self.library
    }
    fn driver_version(&self) -> i32 {
        self.version
    }

    fn error(&self, call: &'static str, code: i32) -> Error {
        let text = |f: unsafe extern "C" fn(HipError) -> *const c_char| {
            // SAFETY: both functions accept any code and return a static string (or null).
            let p = unsafe { f(code) };
            if p.is_null() {
                "unknown".to_string()
            } else {
                // SAFETY: a non-null result is a static NUL-terminated string owned by HIP.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        let message = format!("{}: {}", text(self.api.hipGetErrorName), text(self.api.hipGetErrorString));
        Error::Runtime { call, detail: String::new(), runtime: "hip", code, message }
    }

    fn device_count(&self) -> Result<i32, Error> {
        let mut n = 0;
        // SAFETY: out-pointer to a local.
        match self.call(|| unsafe { (self.api.hipGetDeviceCount)(&mut n) }) {
            HIP_SUCCESS => Ok(n),
            HIP_ERROR_NO_DEVICE => Ok(0),
            code => Err(self.error("hipGetDeviceCount", code)),
        }
    }

    fn set_device(&self, device: i32) -> Result<(), Error> {
        // SAFETY: plain value argument.
        self.check("hipSetDevice", || unsafe { (self.api.hipSetDevice)(device) })
    }

    fn current_device(&self) -> Result<i32, Error> {
        let mut dev = 0;
        // SAFETY: out-pointer to a local.
        self.check("hipGetDevice", || unsafe { (self.api.hipGetDevice)(&mut dev) })?;
        Ok(dev)
    }

    fn save_current(&self) -> Result<usize, Error> {
        Ok(usize::try_from(self.current_device()?).unwrap_or(0))
    }

    fn is_device_context(&self, saved: usize, device: i32) -> bool {
        usize::try_from(device).is_ok_and(|d| d == saved)
    }

    fn restore_current(&self, saved: usize) -> Result<(), Error> {
        self.set_device(i32::try_from(saved).unwrap_or(0))
    }

    fn device_info(&self, device: i32) -> Result<DeviceInfo, Error> {
        let mut props = Box::new(PropsBuffer([0; 4096]));
        let layout = self.properties(device, &mut props)?;
        let p = &props.0;
        let mut bus = [0u8; 64];
        // SAFETY: the buffer holds 64 bytes, as passed.
        let rc = self.call(|| unsafe { (self.api.hipDeviceGetPCIBusId)(bus.as_mut_ptr().cast(), 64, device) });
        self.status("hipDeviceGetPCIBusId", rc)?;
        let (major, minor) = (read_i32(p, layout.major), read_i32(p, layout.minor));
        let arch = c_buf_to_string(&p[layout.gcn_arch_name..layout.gcn_arch_name + 256]);
        Ok(DeviceInfo {
            ordinal: device,
            name: c_buf_to_string(&p[..256]),
            arch,
            compute_capability: (major, minor),
            multiprocessors: u32::try_from(read_i32(p, layout.multiprocessor_count)).unwrap_or(0),
            pci_bus_id: c_buf_to_string(&bus).to_ascii_lowercase(),
        })
    }

    fn can_access_peer(&self, device: i32, peer: i32) -> Result<bool, Error> {
        let mut can = 0;
        // SAFETY: out-pointer to a local.
        self.check("hipDeviceCanAccessPeer", || unsafe { (self.api.hipDeviceCanAccessPeer)(&mut can, device, peer) })?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, peer: i32) -> Result<(), Error> {
        // SAFETY: plain value arguments; flags must be 0.
        match self.call(|| unsafe { (self.api.hipDeviceEnablePeerAccess)(peer, 0) }) {
            HIP_SUCCESS => Ok(()),
            // `call` cleared the code from the thread's last error.
            HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            code => Err(self.error("hipDeviceEnablePeerAccess", code)),
        }
    }

    fn mem_alloc(&self, bytes: usize, kind: MemKind) -> Result<u64, Error> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        match kind {
            MemKind::Normal => {
                // SAFETY: out-pointer to a local.
                self.check("hipMalloc", || unsafe { (self.api.hipMalloc)(&mut ptr, bytes) })?;
            }
            MemKind::Uncached => {
                let alloc = self
                    .api
                    .hipExtMallocWithFlags
                    .ok_or(Error::Unsupported { call: "hipExtMallocWithFlags", runtime: "hip" })?;
                // SAFETY: out-pointer to a local; the flag is a documented allocation flag.
                self.check("hipExtMallocWithFlags", || unsafe { alloc(&mut ptr, bytes, HIP_DEVICE_MALLOC_UNCACHED) })?;
            }
        }
        Ok(ptr as u64)
    }

    unsafe fn mem_free(&self, ptr: u64) -> Result<(), Error> {
        // SAFETY: the caller passes a pointer from hipMalloc/hipExtMallocWithFlags, no longer used.
        self.check("hipFree", || unsafe { (self.api.hipFree)(ptr as *mut c_void) })
    }

    fn host_alloc_mapped(&self, bytes: usize) -> Result<(*mut u8, u64), Error> {
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = HIP_HOST_MALLOC_MAPPED | HIP_HOST_MALLOC_PORTABLE | HIP_HOST_MALLOC_COHERENT;
        // SAFETY: out-pointer to a local.
        self.check("hipHostMalloc", || unsafe { (self.api.hipHostMalloc)(&mut host, bytes, flags) })?;
        let mut dev: *mut c_void = std::ptr::null_mut();
        // SAFETY: `host` was allocated mapped just above; flags must be 0.
        let rc = self.call(|| unsafe { (self.api.hipHostGetDevicePointer)(&mut dev, host, 0) });
        if let Err(e) = self.status("hipHostGetDevicePointer", rc) {
            // SAFETY: `host` came from hipHostMalloc and is not used elsewhere.
            let _ = self.call(|| unsafe { (self.api.hipHostFree)(host) });
            return Err(e);
        }
        Ok((host.cast(), dev as u64))
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> Result<(), Error> {
        // SAFETY: the caller passes a pointer from hipHostMalloc that is no longer used.
        self.check("hipHostFree", || unsafe { (self.api.hipHostFree)(ptr.cast()) })
    }

    unsafe fn memset_async(&self, dst: u64, value: u8, bytes: usize, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller guarantees the range and the stream.
        let rc =
            self.call(|| unsafe { (self.api.hipMemsetAsync)(dst as *mut c_void, c_int::from(value), bytes, stream) });
        self.status("hipMemsetAsync", rc)
    }

    unsafe fn memcpy_async(&self, dst: u64, src: u64, bytes: usize, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller guarantees both ranges and the stream; hipMemcpyDefault infers the
        // direction from the (unified) addresses.
        let rc = self.call(|| unsafe {
            (self.api.hipMemcpyAsync)(dst as *mut c_void, src as *const c_void, bytes, HIP_MEMCPY_DEFAULT, stream)
        });
        self.status("hipMemcpyAsync", rc)
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: *mut c_void,
    ) -> Result<(), Error> {
        // SAFETY: the caller guarantees both ranges and the stream.
        let rc = self.call(|| unsafe {
            (self.api.hipMemcpyAsync)(dst as *mut c_void, src.cast(), bytes, HIP_MEMCPY_HOST_TO_DEVICE, stream)
        });
        self.status("hipMemcpyAsync", rc)
    }

    unsafe fn memcpy_dtoh_async(&self, dst: *mut u8, src: u64, bytes: usize, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller guarantees both ranges and the stream.
        let rc = self.call(|| unsafe {
            (self.api.hipMemcpyAsync)(dst.cast(), src as *const c_void, bytes, HIP_MEMCPY_DEVICE_TO_HOST, stream)
        });
        self.status("hipMemcpyAsync", rc)
    }

    fn ipc_get_handle(&self, ptr: u64) -> Result<IpcHandle, Error> {
        let mut handle = IpcHandle([0; 64]);
        // SAFETY: out-pointer to a local of the handle's 64-byte C layout; HIP validates `ptr`.
        self.check("hipIpcGetMemHandle", || unsafe { (self.api.hipIpcGetMemHandle)(&mut handle, ptr as *mut c_void) })?;
        Ok(handle)
    }

    fn ipc_open(&self, handle: &IpcHandle) -> Result<u64, Error> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the handle is passed by value with its C layout.
        let rc = self
            .call(|| unsafe { (self.api.hipIpcOpenMemHandle)(&mut ptr, *handle, HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) });
        self.status("hipIpcOpenMemHandle", rc)?;
        Ok(ptr as u64)
    }

    unsafe fn ipc_close(&self, ptr: u64) -> Result<(), Error> {
        // SAFETY: the caller passes a pointer from hipIpcOpenMemHandle that is no longer used.
        self.check("hipIpcCloseMemHandle", || unsafe { (self.api.hipIpcCloseMemHandle)(ptr as *mut c_void) })
    }

    unsafe fn module_load(&self, image: *const u8) -> Result<*mut c_void, Error> {
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: the caller guarantees a complete code object at `image`.
        self.check("hipModuleLoadData", || unsafe { (self.api.hipModuleLoadData)(&mut module, image.cast()) })?;
        Ok(module)
    }

    fn module_function(&self, module: *mut c_void, name: &CStr) -> Result<*mut c_void, Error> {
        let mut func: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; `module` is a loaded module; `name` is NUL-terminated.
        let rc = self.call(|| unsafe { (self.api.hipModuleGetFunction)(&mut func, module, name.as_ptr()) });
        self.status("hipModuleGetFunction", rc)?;
        Ok(func)
    }

    fn blocks_per_multiprocessor(&self, func: *mut c_void, block_threads: u32) -> Result<u32, Error> {
        let Some(occupancy) = self.api.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor else { return Ok(1) };
        let mut blocks: c_int = 0;
        // SAFETY: out-pointer to a local; `func` came from `module_function`.
        let rc = self.call(|| unsafe { occupancy(&mut blocks, func, block_threads as c_int, 0) });
        self.status("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", rc)?;
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
        // SAFETY: the caller guarantees that `args` matches the kernel's parameters. The grid is
        // given in blocks, as for cuLaunchKernel.
        let rc = self.call(|| unsafe {
            (self.api.hipModuleLaunchKernel)(
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
        });
        self.status("hipModuleLaunchKernel", rc)
    }

    fn stream_create(&self) -> Result<*mut c_void, Error> {
        let mut stream: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        let rc = self.call(|| unsafe { (self.api.hipStreamCreateWithFlags)(&mut stream, HIP_STREAM_NON_BLOCKING) });
        self.status("hipStreamCreateWithFlags", rc)?;
        Ok(stream)
    }

    unsafe fn stream_destroy(&self, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller passes a stream it created and no longer uses.
        self.check("hipStreamDestroy", || unsafe { (self.api.hipStreamDestroy)(stream) })
    }

    fn stream_synchronize(&self, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: `stream` is a valid stream (see `Stream::from_raw`).
        self.check("hipStreamSynchronize", || unsafe { (self.api.hipStreamSynchronize)(stream) })
    }

    fn device_synchronize(&self) -> Result<(), Error> {
        // SAFETY: no arguments; waits for the current device's work.
        self.check("hipDeviceSynchronize", || unsafe { (self.api.hipDeviceSynchronize)() })
    }

    fn stream_query(&self, stream: *mut c_void) -> Result<bool, Error> {
        // SAFETY: `stream` is a valid stream.
        match self.call(|| unsafe { (self.api.hipStreamQuery)(stream) }) {
            HIP_SUCCESS => Ok(true),
            HIP_ERROR_NOT_READY => Ok(false),
            code => Err(self.error("hipStreamQuery", code)),
        }
    }

    fn exchange_capture_mode(&self, mode: i32) -> Result<i32, Error> {
        let Some(exchange) = self.api.hipThreadExchangeStreamCaptureMode else { return Ok(mode) };
        let mut m = mode;
        // SAFETY: in-out pointer to a local holding a valid `hipStreamCaptureMode`.
        self.check("hipThreadExchangeStreamCaptureMode", || unsafe { exchange(&mut m) })?;
        Ok(m)
    }

    fn stream_capture(&self, stream: *mut c_void) -> Result<Option<u64>, Error> {
        let (mut status, mut id): (c_int, u64) = (HIP_STREAM_CAPTURE_STATUS_NONE, 0);
        if let Some(info) = self.api.hipStreamGetCaptureInfo_v2 {
            // SAFETY: `stream` is a valid stream; the outputs are locals or NULL (optional).
            self.check("hipStreamGetCaptureInfo_v2", || unsafe {
                info(stream, &mut status, &mut id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut())
            })?;
        } else {
            // SAFETY: out-pointer to a local; `stream` is a valid stream.
            self.check("hipStreamIsCapturing", || unsafe { (self.api.hipStreamIsCapturing)(stream, &mut status) })?;
        }
        Ok((status != HIP_STREAM_CAPTURE_STATUS_NONE).then_some(id))
    }

    fn stream_wait_event(&self, stream: *mut c_void, event: *mut c_void) -> Result<(), Error> {
        // SAFETY: both handles are valid; flags must be 0.
        self.check("hipStreamWaitEvent", || unsafe { (self.api.hipStreamWaitEvent)(stream, event, 0) })
    }

    fn event_create(&self) -> Result<*mut c_void, Error> {
        let mut event: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        let rc = self.call(|| unsafe { (self.api.hipEventCreateWithFlags)(&mut event, HIP_EVENT_DISABLE_TIMING) });
        self.status("hipEventCreateWithFlags", rc)?;
        Ok(event)
    }

    fn event_create_timed(&self) -> Result<*mut c_void, Error> {
        let mut event: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        self.check("hipEventCreateWithFlags", || unsafe { (self.api.hipEventCreateWithFlags)(&mut event, 0) })?;
        Ok(event)
    }

    fn event_elapsed_ms(&self, start: *mut c_void, end: *mut c_void) -> Result<f32, Error> {
        let f =
            self.api.hipEventElapsedTime.ok_or(Error::Unsupported { call: "hipEventElapsedTime", runtime: "hip" })?;
        let mut ms = 0f32;
        // SAFETY: out-pointer to a local; both events are valid.
        self.check("hipEventElapsedTime", || unsafe { f(&mut ms, start, end) })?;
        Ok(ms)
    }

    fn event_record(&self, event: *mut c_void, stream: *mut c_void) -> Result<(), Error> {
        // SAFETY: both handles are valid.
        self.check("hipEventRecord", || unsafe { (self.api.hipEventRecord)(event, stream) })
    }

    fn event_query(&self, event: *mut c_void) -> Result<bool, Error> {
        // SAFETY: `event` is a valid event.
        match self.call(|| unsafe { (self.api.hipEventQuery)(event) }) {
            HIP_SUCCESS => Ok(true),
            HIP_ERROR_NOT_READY => Ok(false),
            code => Err(self.error("hipEventQuery", code)),
        }
    }

    unsafe fn event_destroy(&self, event: *mut c_void) -> Result<(), Error> {
        // SAFETY: the caller passes an event it created and no longer uses.
        self.check("hipEventDestroy", || unsafe { (self.api.hipEventDestroy)(event) })
    }

    fn memory_info(&self) -> Result<(u64, u64), Error> {
        let f = self.api.hipMemGetInfo.ok_or(Error::Unsupported { call: "hipMemGetInfo", runtime: "hip" })?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: two out-pointers to locals.
        self.check("hipMemGetInfo", || unsafe { f(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    fn capture_begin(&self, stream: *mut c_void, mode: CaptureMode) -> Result<(), Error> {
        let f = self
            .api
            .hipStreamBeginCapture
            .ok_or(Error::Unsupported { call: "hipStreamBeginCapture", runtime: "hip" })?;
        // SAFETY: `stream` is a valid stream; the mode is a valid capture mode.
        self.check("hipStreamBeginCapture", || unsafe { f(stream, mode as c_int) })
    }

    fn capture_end(&self, stream: *mut c_void) -> Result<*mut c_void, Error> {
        let unsupported = |call| Error::Unsupported { call, runtime: "hip" };
        let end = self.api.hipStreamEndCapture.ok_or(unsupported("hipStreamEndCapture"))?;
        let inst = self.api.hipGraphInstantiateWithFlags.ok_or(unsupported("hipGraphInstantiateWithFlags"))?;
        let destroy = self.api.hipGraphDestroy.ok_or(unsupported("hipGraphDestroy"))?;
        let mut graph: Handle = std::ptr::null_mut();
        // SAFETY: `stream` is capturing (else the call fails); out-pointer to a local.
        self.check("hipStreamEndCapture", || unsafe { end(stream, &mut graph) })?;
        let mut exec: Handle = std::ptr::null_mut();
        // SAFETY: `graph` was just captured; out-pointer to a local; flags 0.
        let made = self.check("hipGraphInstantiateWithFlags", || unsafe { inst(&mut exec, graph, 0) });
        // SAFETY: the instantiated graph does not need its template any more.
        let _ = self.call(|| unsafe { destroy(graph) });
        made.map(|_| exec)
    }

    unsafe fn graph_launch(&self, exec: *mut c_void, stream: *mut c_void) -> Result<(), Error> {
        let f = self.api.hipGraphLaunch.ok_or(Error::Unsupported { call: "hipGraphLaunch", runtime: "hip" })?;
        // SAFETY: the caller passes a live instantiated graph; `stream` is valid.
        self.check("hipGraphLaunch", || unsafe { f(exec, stream) })
    }

    unsafe fn graph_destroy(&self, exec: *mut c_void) -> Result<(), Error> {
        let f =
            self.api.hipGraphExecDestroy.ok_or(Error::Unsupported { call: "hipGraphExecDestroy", runtime: "hip" })?;
        // SAFETY: the caller passes an instantiated graph it no longer uses.
        self.check("hipGraphExecDestroy", || unsafe { f(exec) })
    }

    unsafe fn capture_retain(
        &self,
        stream: *mut c_void,
        release: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<bool, Error> {
        // hipUserObjectNoDestructorSync, hipGraphUserObjectMove.
        const NO_DESTRUCTOR_SYNC: c_uint = 1;
        const MOVE: c_uint = 1;
        let unsupported = |call| Error::Unsupported { call, runtime: "hip" };
        let info = self.api.hipStreamGetCaptureInfo_v2.ok_or(unsupported("hipStreamGetCaptureInfo_v2"))?;
        let create = self.api.hipUserObjectCreate.ok_or(unsupported("hipUserObjectCreate"))?;
        let drop_ref = self.api.hipUserObjectRelease.ok_or(unsupported("hipUserObjectRelease"))?;
        let retain = self.api.hipGraphRetainUserObject.ok_or(unsupported("hipGraphRetainUserObject"))?;
        let (mut status, mut graph): (c_int, Handle) = (0, std::ptr::null_mut());
        // SAFETY: `stream` is a valid stream; the optional outputs are NULL, the others locals.
        self.check("hipStreamGetCaptureInfo_v2", || unsafe {
            info(stream, &mut status, std::ptr::null_mut(), &mut graph, std::ptr::null_mut(), std::ptr::null_mut())
        })?;
        if status != HIP_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null() {
            return Ok(false);
        }
        let mut object: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the caller vouches for `release` and `data`.
        self.check("hipUserObjectCreate", || unsafe {
            create(&mut object, data, Some(release), 1, NO_DESTRUCTOR_SYNC)
        })?;
        // SAFETY: `graph` is the graph being captured; our one reference moves to it.
        if let Err(e) = self.check("hipGraphRetainUserObject", || unsafe { retain(graph, object, 1, MOVE) }) {
            // SAFETY: drops the reference we still own: `release(data)` runs once, as on success.
            let _ = self.call(|| unsafe { drop_ref(object, 1) });
            return Err(e);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_offsets_fit_the_buffer() {
        for layout in [&R0600, &R0000] {
            assert!(layout.gcn_arch_name + 256 <= std::mem::size_of::<PropsBuffer>());
            assert!(layout.major < layout.minor && layout.minor < layout.multiprocessor_count);
        }
        // R0600: 1472-byte struct, the arch name right after 95 reserved ints.
        assert_eq!(R0600.gcn_arch_name, 1160);
        assert_eq!(R0000.gcn_arch_name, 396);
    }

    #[test]
    fn reads_fields_at_offsets() {
        let mut buf = [0u8; 2048];
        buf[R0600.multiprocessor_count..R0600.multiprocessor_count + 4].copy_from_slice(&304i32.to_ne_bytes());
        buf[R0600.gcn_arch_name..R0600.gcn_arch_name + 22].copy_from_slice(b"gfx942:sramecc+:xnack-");
        assert_eq!(read_i32(&buf, R0600.multiprocessor_count), 304);
        assert_eq!(c_buf_to_string(&buf[1160..1416]), "gfx942:sramecc+:xnack-");
    }
}
