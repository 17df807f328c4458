//! NVTX ranges for the collectives rcclx runs itself, as the stock library puts one around each
//! of its API calls (domain `NCCL`, the function's name as a registered string, a payload), so
//! that Nsight Systems and other NVTX tools see every collective: the stock library's ranges
//! cover the calls it runs, these the ones it never sees.
//!
//! No NVTX library is linked: NVTX is a protocol, and this module is one NVTX instance of its
//! own, as the header-only `nvtx3` makes in every library that includes it. At the first range
//! it reads `NVTX_INJECTION64_PATH` (the tool's injection library, set by `nsys` and the like),
//! opens it and calls its `InitializeInjectionNvtx2` with [`get_export_table`]; the tool asks
//! for each module's function table and writes its functions into the slots it implements.
//! rcclx then calls `nvtxDomainCreateA("NCCL")`, `nvtxDomainRegisterStringA`,
//! `nvtxDomainRangePushEx` and `nvtxDomainRangePop` through those slots (`CORE2` module). Without
//! the variable, with `NCCL_NVTX_DISABLE=1` (the stock library's switch), or when the tool does
//! not take `CORE2`, a range costs one atomic load.
//!
//! Payload: the message size in bytes, as a 64-bit unsigned integer
//! (`NVTX_PAYLOAD_TYPE_UNSIGNED_INT64`). The stock library sends a structured payload through
//! NVTX's payload extension (a schema with the communicator hash, the size and the op or root);
//! rcclx sends the size only.
//!
//! Layer: base (uses `env` only).

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

/// `NVTX_VERSION` of the `nvtx3` headers (the protocol's version).
const NVTX_VERSION: u32 = 3;
/// Function slots per module (`NVTX_CBID_<MODULE>_SIZE`): CORE, CUDA, OPENCL, CUDART, CORE2,
/// SYNC, in `NvtxCallbackModule` order (1..=6).
const MODULE_SIZES: [usize; 6] = [16, 9, 15, 7, 16, 7];
/// `NVTX_CB_MODULE_CORE2` and its callback ids.
const CORE2: usize = 5;
const CORE2_RANGE_PUSH_EX: usize = 4;
const CORE2_RANGE_POP: usize = 5;
const CORE2_REGISTER_STRING_A: usize = 10;
const CORE2_DOMAIN_CREATE_A: usize = 12;
/// `NVTX_ETID_CALLBACKS`, `NVTX_ETID_VERSIONINFO`.
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
const MESSAGE_TYPE_ASCII: i32 = 1;
const MESSAGE_TYPE_REGISTERED: i32 = 3;
const PAYLOAD_TYPE_UNSIGNED_INT64: i32 = 1;

/// One function slot: where the tool writes its function (`NvtxFunctionPointer`).
type Slot = AtomicPtr<c_void>;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportCallbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(c_int, *mut *const *const Slot, *mut c_uint) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct ExportVersion {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(u32),
}

/// `nvtxEventAttributes_v2`.
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}
const _: () = assert!(std::mem::size_of::<EventAttributes>() == 48);

/// This instance's slots and tables, built once and never freed (the tool keeps pointers).
struct Instance {
    /// Per module: slot `i` for callback id `i` (0 unused).
    slots: [Box<[Slot]>; 6],
    /// Per module: `[NULL, &slot[1], ..., &slot[SIZE - 1], NULL]` (`NvtxFunctionTable`).
    tables: [Box<[*const Slot]>; 6],
    callbacks: ExportCallbacks,
    version: ExportVersion,
}

// SAFETY: the raw pointers point into the instance's own boxed slots, which live for the whole
// process and are only accessed atomically.
unsafe impl Sync for Instance {}
// SAFETY: as above.
unsafe impl Send for Instance {}

static INSTANCE: OnceLock<&'static Instance> = OnceLock::new();

fn instance() -> &'static Instance {
    INSTANCE.get_or_init(|| {
        let slots: [Box<[Slot]>; 6] =
            std::array::from_fn(|m| (0..MODULE_SIZES[m]).map(|_| Slot::new(std::ptr::null_mut())).collect());
        let tables = std::array::from_fn(|m| {
            let mut t: Vec<*const Slot> = vec![std::ptr::null()];
            t.extend(slots[m][1..].iter().map(|s| s as *const Slot));
            t.push(std::ptr::null());
            t.into_boxed_slice()
        });
        Box::leak(Box::new(Instance {
            slots,
            tables,
            callbacks: ExportCallbacks {
                struct_size: std::mem::size_of::<ExportCallbacks>(),
                get_module_function_table,
            },
            version: ExportVersion {
                struct_size: std::mem::size_of::<ExportVersion>(),
                version: NVTX_VERSION,
                reserved0: 0,
                set_injection_nvtx_version,
            },
        }))
    })
}

/// `nvtxEtiGetModuleFunctionTable`: the table of `module` (1..=6) and its size.
unsafe extern "C" fn get_module_function_table(
    module: c_int,
    out_table: *mut *const *const Slot,
    out_size: *mut c_uint,
) -> c_int {
    let Some(m) = usize::try_from(module).ok().filter(|m| (1..=6).contains(m)).map(|m| m - 1) else { return 0 };
    let inst = instance();
    if !out_size.is_null() {
        // SAFETY: the tool's out-pointer, NULL-checked.
        unsafe { out_size.write(MODULE_SIZES[m] as c_uint) };
    }
    if !out_table.is_null() {
        // SAFETY: as above.
        unsafe { out_table.write(inst.tables[m].as_ptr()) };
    }
    1
}

unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// `nvtxGetExportTable`: what `InitializeInjectionNvtx2` receives.
unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    let inst = instance();
    match id {
        ETID_CALLBACKS => &inst.callbacks as *const ExportCallbacks as *const c_void,
        ETID_VERSIONINFO => &inst.version as *const ExportVersion as *const c_void,
        _ => std::ptr::null(),
    }
}

type DomainCreateA = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type RegisterStringA = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type RangePushEx = unsafe extern "C" fn(*mut c_void, *const EventAttributes) -> c_int;
type RangePop = unsafe extern "C" fn(*mut c_void) -> c_int;

/// What the tool gave: the `NCCL` domain and the functions rcclx calls.
struct Tool {
    domain: *mut c_void,
    register: Option<RegisterStringA>,
    push: RangePushEx,
    pop: RangePop,
    /// Registered names (`nvtxStringHandle_t`), by the name's address.
    names: parking_lot::Mutex<Vec<(usize, usize)>>,
    _lib: libloading::Library,
}

// SAFETY: the domain handle is an opaque value the tool made for use from any thread.
unsafe impl Sync for Tool {}
// SAFETY: as above.
unsafe impl Send for Tool {}

static TOOL: OnceLock<Option<Tool>> = OnceLock::new();

/// The slot's function, if the tool wrote one.
fn slot<F: Copy>(module: usize, id: usize) -> Option<F> {
    let p = instance().slots[module - 1][id].load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `F` is the function type of this callback id (NVTX's header), and a
    // non-null slot holds the tool's function of that type.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Loads the tool named by `NVTX_INJECTION64_PATH`, once.
fn tool() -> Option<&'static Tool> {
    TOOL.get_or_init(|| {
        if crate::env::env("NCCL_NVTX_DISABLE").is_some_and(|v| v.trim().parse::<i64>().is_ok_and(|n| n != 0)) {
            return None;
        }
        let path = std::env::var_os("NVTX_INJECTION64_PATH").filter(|p| !p.is_empty())?;
        // SAFETY: loading the tool's injection library runs its initialisers; that library is
        // made to be loaded into any NVTX-instrumented process.
        let lib = unsafe { libloading::Library::new(&path) }.ok()?;
        type Init = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> c_int;
        // SAFETY: NVTX's entry point of an injection library has this signature.
        let init: Init = unsafe { lib.get::<Init>(b"InitializeInjectionNvtx2\0") }.ok().map(|s| *s)?;
        instance();
        // SAFETY: called once, with this instance's export table, as the nvtx3 headers do.
        if unsafe { init(get_export_table) } == 0 {
            return None;
        }
        let create: DomainCreateA = slot(CORE2, CORE2_DOMAIN_CREATE_A)?;
        let push: RangePushEx = slot(CORE2, CORE2_RANGE_PUSH_EX)?;
        let pop: RangePop = slot(CORE2, CORE2_RANGE_POP)?;
        // SAFETY: the tool's nvtxDomainCreateA, with a NUL-terminated name.
        let domain = unsafe { create(c"NCCL".as_ptr()) };
        Some(Tool {
            domain,
            register: slot(CORE2, CORE2_REGISTER_STRING_A),
            push,
            pop,
            names: parking_lot::Mutex::new(Vec::new()),
            _lib: lib,
        })
    })
    .as_ref()
}

/// An open range; dropping it ends the range (`nvtxDomainRangePop`).
pub struct Range {
    tool: &'static Tool,
}

impl Drop for Range {
    fn drop(&mut self) {
        // SAFETY: the tool's nvtxDomainRangePop, on the domain it made.
        unsafe { (self.tool.pop)(self.tool.domain) };
    }
}

/// Opens a range named `name` (`ncclAllReduce`, ...) in domain `NCCL` with a payload of
/// `bytes`; `None` (nothing to end) when no tool listens.
pub fn range(name: &'static CStr, bytes: u64) -> Option<Range> {
    let tool = tool()?;
    let key = name.as_ptr() as usize;
    let registered = tool.register.map(|register| {
        let mut names = tool.names.lock();
        match names.iter().find(|(k, _)| *k == key) {
            Some(&(_, h)) => h,
            None => {
                // SAFETY: the tool's nvtxDomainRegisterStringA, with a NUL-terminated string
                // that lives for the whole process.
                let h = unsafe { register(tool.domain, name.as_ptr()) } as usize;
                names.push((key, h));
                h
            }
        }
    });
    let (message_type, message) = match registered {
        Some(h) if h != 0 => (MESSAGE_TYPE_REGISTERED, h as *const c_void),
        _ => (MESSAGE_TYPE_ASCII, name.as_ptr() as *const c_void),
    };
    let attr = EventAttributes {
        version: NVTX_VERSION as u16,
        size: std::mem::size_of::<EventAttributes>() as u16,
        category: 0,
        color_type: 0,
        color: 0,
        payload_type: PAYLOAD_TYPE_UNSIGNED_INT64,
        reserved0: 0,
        payload: bytes,
        message_type,
        message,
    };
    // SAFETY: the tool's nvtxDomainRangePushEx, with attributes that live across the call.
    unsafe { (tool.push)(tool.domain, &attr) };
    Some(Range { tool })
}

/// The stock library's range name of an intercepted collective (its API function's name).
pub fn collective_name(coll: crate::collective::Coll) -> &'static CStr {
    coll.spec().api
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_nvtxs_layout() {
        let inst = instance();
        for (m, t) in inst.tables.iter().enumerate() {
            assert_eq!(t.len(), MODULE_SIZES[m] + 1);
            assert!(t[0].is_null() && t[t.len() - 1].is_null());
            assert!(t[1..t.len() - 1].iter().all(|p| !p.is_null()));
        }
        let mut table: *const *const Slot = std::ptr::null();
        let mut size: c_uint = 0;
        // SAFETY: out-pointers to locals.
        assert_eq!(unsafe { get_module_function_table(5, &mut table, &mut size) }, 1);
        assert_eq!((size, table), (16, inst.tables[4].as_ptr()));
        // SAFETY: as above.
        assert_eq!(unsafe { get_module_function_table(7, &mut table, &mut size) }, 0);
        // SAFETY: any id is allowed.
        assert!(unsafe { get_export_table(2) }.is_null() && !unsafe { get_export_table(1) }.is_null());
    }
}
