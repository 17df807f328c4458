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
//! Payload: the stock library's (NCCL 2.28 `src/include/nvtx_payload_schemas.h`, `nvtx.h`),
//! through NVTX's payload extension: rcclx calls the tool's `InitializeInjectionNvtxExtension`
//! with the extension's module (id 2, compat 0x0103, 63 slots, the C type sizes), registers the
//! reduction-op enum (schema `NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START + 20`) and, at a
//! collective's first range, its static schema with NCCL's id, entry names, types and offsets
//! (AllGather, AlltoAll: communicator id `u64`, message size `size_t`; AllReduce, ReduceScatter:
//! plus the op; Broadcast: plus the root), and each range carries one `nvtxPayloadData_t`
//! (`NVTX_PAYLOAD_TYPE_EXT`). The size is NCCL's: one rank's part (`count * type size`). The
//! communicator id is NCCL's `commHash`, which only the stock library knows: rcclx sends 0, the
//! value NCCL sends without a communicator. A tool without the extension gets the size as a
//! 64-bit unsigned payload (`NVTX_PAYLOAD_TYPE_UNSIGNED_INT64`), as before.
//!
//! On AMD (the HIP runtime loaded: `gpu` calls [`use_roctx`]) the same ranges also go to roctx,
//! as RCCL's do: `roctxRangePushA(name)` and `roctxRangePop()` of ROCm's roctx library, opened at
//! run time (`libroctx64.so.4`, `libroctx64.so`, rocprofiler-sdk's `librocprofiler-sdk-roctx.so`,
//! each first under `$ROCM_PATH/lib`, default `/opt/rocm/lib`, then on the loader's path).
//! roctx ranges carry a message only (no domain, no payload). `NCCL_NVTX_DISABLE=1` turns them
//! off too; without a roctx library a range costs one atomic load. Checked without a GPU by
//! `tests/roctx.rs` (a recording roctx library), not on an AMD GPU (none here).
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

/// NVTX's payload extension (`nvToolsExtPayload.h`, as NCCL 2.28 ships it).
mod ext {
    /// `NVTX_EXT_PAYLOAD_MODULEID`, `NVTX_EXT_PAYLOAD_COMPATID`, `NVTX_EXT_PAYLOAD_SLOT_COUNT`.
    pub const MODULE_ID: u16 = 2;
    pub const COMPAT_ID: u16 = 0x0103;
    pub const SLOTS: usize = 63;
    /// `NVTX3EXT_CBID_nvtxPayloadSchemaRegister`, `..._nvtxPayloadEnumRegister`.
    pub const CBID_SCHEMA_REGISTER: usize = 0;
    pub const CBID_ENUM_REGISTER: usize = 1;
    /// `NVTX_EXTENSION_FRESH`, `NVTX_EXTENSION_DISABLED`: a slot without a function.
    pub const FRESH: isize = 0;
    pub const DISABLED: isize = 1;
    /// `NVTX_PAYLOAD_TYPE_EXT`: the payload is an array of `nvtxPayloadData_t`.
    pub const PAYLOAD_TYPE_EXT: i32 = 0xDFBD_0009_u32 as i32;
    /// `NVTX_PAYLOAD_ENTRY_TYPE_*`.
    pub const TYPE_INT: u64 = 5;
    pub const TYPE_UINT64: u64 = 18;
    pub const TYPE_SIZE: u64 = 22;
    pub const SCHEMA_ID_STATIC_START: u64 = 1 << 24;
    /// NCCL's `NVTX_PAYLOAD_ENTRY_NCCL_REDOP`: the enum of `ncclRedOp_t`.
    pub const REDOP_SCHEMA: u64 = 20 + SCHEMA_ID_STATIC_START;
    /// `NVTX_PAYLOAD_SCHEMA_ATTR_{TYPE,ENTRIES,NUM_ENTRIES,STATIC_SIZE,SCHEMA_ID}`, NCCL's mask.
    pub const SCHEMA_ATTR_MASK: u64 = (1 << 2) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 8);
    pub const SCHEMA_TYPE_STATIC: u64 = 1;
    /// `NVTX_PAYLOAD_ENUM_ATTR_{ENTRIES,NUM_ENTRIES,SIZE,SCHEMA_ID}`.
    pub const ENUM_ATTR_MASK: u64 = (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5);

    /// `nvtxPayloadEntryTypeInfo_t` of x86-64 Linux for `NVTX_PAYLOAD_ENTRY_TYPE_CHAR` (1) ..
    /// `CHAR32` (27), after the header entry (count, entry size), as a C11 build bakes it in
    /// (`nvtxExtPayloadTypeInfo.h`; `char8_t` is C23/C++20 only, so 0).
    pub const TYPE_INFO: [[u16; 2]; 28] = [
        [28, 4],
        [1, 1],
        [1, 1],
        [2, 2],
        [2, 2],
        [4, 4],
        [4, 4],
        [8, 8],
        [8, 8],
        [8, 8],
        [8, 8],
        [1, 1],
        [1, 1],
        [2, 2],
        [2, 2],
        [4, 4],
        [4, 4],
        [8, 8],
        [8, 8],
        [4, 4],
        [8, 8],
        [16, 16],
        [8, 8],
        [8, 8],
        [4, 4],
        [0, 0],
        [2, 2],
        [4, 4],
    ];

    /// `nvtxExtModuleSegment_t`.
    #[repr(C)]
    pub struct Segment {
        pub segment_id: usize,
        pub slot_count: usize,
        pub slots: *mut isize,
    }

    /// `nvtxExtModuleInfo_t`.
    #[repr(C)]
    pub struct ModuleInfo {
        pub nvtx_ver: u16,
        pub struct_size: u16,
        pub module_id: u16,
        pub compat_id: u16,
        pub segments_count: usize,
        pub segments: *mut Segment,
        pub get_export_function: Option<unsafe extern "C" fn(u32) -> isize>,
        pub ext_info: *const std::ffi::c_void,
    }

    /// `nvtxPayloadSchemaEntry_t`.
    #[repr(C)]
    pub struct SchemaEntry {
        pub flags: u64,
        pub ty: u64,
        pub name: *const std::ffi::c_char,
        pub description: *const std::ffi::c_char,
        pub array_or_union_detail: u64,
        pub offset: u64,
        pub semantics: *const std::ffi::c_void,
        pub reserved: *const std::ffi::c_void,
    }

    /// `nvtxPayloadSchemaAttr_t`.
    #[repr(C)]
    pub struct SchemaAttr {
        pub field_mask: u64,
        pub name: *const std::ffi::c_char,
        pub ty: u64,
        pub flags: u64,
        pub entries: *const SchemaEntry,
        pub num_entries: usize,
        pub payload_static_size: usize,
        pub pack_align: usize,
        pub schema_id: u64,
        pub extension: *mut std::ffi::c_void,
    }

    /// `nvtxPayloadEnum_t`.
    #[repr(C)]
    pub struct Enum {
        pub name: *const std::ffi::c_char,
        pub value: u64,
        pub is_flag: i8,
    }

    /// `nvtxPayloadEnumAttr_t`.
    #[repr(C)]
    pub struct EnumAttr {
        pub field_mask: u64,
        pub name: *const std::ffi::c_char,
        pub entries: *const Enum,
        pub num_entries: usize,
        pub size_of_enum: usize,
        pub schema_id: u64,
        pub extension: *mut std::ffi::c_void,
    }

    /// `nvtxPayloadData_t`.
    #[repr(C)]
    pub struct Data {
        pub schema_id: u64,
        pub size: usize,
        pub payload: *const std::ffi::c_void,
    }

    const _: () = assert!(std::mem::size_of::<ModuleInfo>() == 40 && std::mem::size_of::<SchemaEntry>() == 64);
    const _: () = assert!(std::mem::size_of::<SchemaAttr>() == 80 && std::mem::size_of::<EnumAttr>() == 56);
    const _: () = assert!(std::mem::size_of::<Enum>() == 24 && std::mem::size_of::<Data>() == 24);

    pub type SchemaRegister = unsafe extern "C" fn(*mut std::ffi::c_void, *const SchemaAttr) -> u64;
    pub type EnumRegister = unsafe extern "C" fn(*mut std::ffi::c_void, *const EnumAttr) -> u64;
}

/// One collective's payload, laid out as NCCL's `NcclNvtxParams<Coll>`: a `u64` communicator
/// id, a `size_t` size, then the `int`s of its schema ([`schema_of`]: the op, the root, or the
/// root and the op); 16 bytes without them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Payload {
    /// NCCL's `commHash` (0: not known to rcclx, see the module doc).
    pub comm: u64,
    /// One rank's part in bytes, as NCCL counts it.
    pub bytes: usize,
    /// The schema's `int` entries in its order; unused ones are not part of the payload.
    pub ints: [i32; 2],
}

impl Payload {
    /// The payload of a call of `coll` with op `op` and root `root` (each used where its schema has it).
    pub fn new(coll: crate::collective::Coll, bytes: usize, op: i32, root: i32) -> Payload {
        let mut ints = [0; 2];
        for (slot, &(_, ty)) in ints.iter_mut().zip(schema_of(coll).1) {
            *slot = if ty == ext::REDOP_SCHEMA { op } else { root };
        }
        Payload { comm: 0, bytes, ints }
    }
}

/// NCCL's schema of a collective: `NVTX_SID_<Coll>`, and its entries after the communicator
/// id and the size (each an `int`).
fn schema_of(coll: crate::collective::Coll) -> (u64, &'static [(&'static CStr, u64)]) {
    use crate::collective::Coll;
    const OP: (&CStr, u64) = (c"Reduction operation", ext::REDOP_SCHEMA);
    const ROOT: (&CStr, u64) = (c"Root", ext::TYPE_INT);
    match coll {
        Coll::AllGather => (4, &[]),
        Coll::AllReduce => (5, &[OP]),
        Coll::Broadcast => (6, &[ROOT]),
        Coll::ReduceScatter => (7, &[OP]),
        Coll::Reduce => (8, &[ROOT, OP]),
        Coll::AllToAll => (16, &[]),
    }
}

/// The payload's size as NCCL's struct has it: 16 bytes and its `int`s, aligned to 8.
fn payload_size(coll: crate::collective::Coll) -> usize {
    (16 + 4 * schema_of(coll).1.len()).next_multiple_of(8)
}

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
    /// The payload extension's schema registration, when the tool has it.
    schema_register: Option<ext::SchemaRegister>,
    /// Per collective: its schema is registered.
    schemas: [std::sync::Once; crate::collective::COUNT],
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
        if disabled() {
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
        let schema_register = payload_extension(&lib, domain);
        Some(Tool {
            domain,
            register: slot(CORE2, CORE2_REGISTER_STRING_A),
            push,
            pop,
            names: parking_lot::Mutex::new(Vec::new()),
            schema_register,
            schemas: std::array::from_fn(|_| std::sync::Once::new()),
            _lib: lib,
        })
    })
    .as_ref()
}

/// The payload extension's function slots (`nvtxExtPayloadSlots` after its state word); the
/// tool writes its functions into them and keeps their address.
static PAYLOAD_SLOTS: [std::sync::atomic::AtomicIsize; ext::SLOTS] =
    [const { std::sync::atomic::AtomicIsize::new(ext::FRESH) }; ext::SLOTS];

/// Initialises NVTX's payload extension with the tool, as `nvtxExtPayloadInitOnce` does, and
/// registers NCCL's reduction-op enum in `domain` (NCCL's `initNvtxRegisteredEnums`). Returns the
/// tool's schema registration, or `None` when the tool has no payload extension.
fn payload_extension(lib: &libloading::Library, domain: *mut c_void) -> Option<ext::SchemaRegister> {
    type Init = unsafe extern "C" fn(*mut ext::ModuleInfo) -> c_int;
    // SAFETY: NVTX's extension entry point of an injection library has this signature.
    let init: Init = unsafe { lib.get::<Init>(b"InitializeInjectionNvtxExtension\0") }.ok().map(|s| *s)?;
    // The segment and module live only through the call (as nvtx3's, on its stack); the slots
    // and the type table live for the process.
    let mut segment =
        ext::Segment { segment_id: 0, slot_count: ext::SLOTS, slots: PAYLOAD_SLOTS.as_ptr() as *mut isize };
    let mut module = ext::ModuleInfo {
        nvtx_ver: NVTX_VERSION as u16,
        struct_size: std::mem::size_of::<ext::ModuleInfo>() as u16,
        module_id: ext::MODULE_ID,
        compat_id: ext::COMPAT_ID,
        segments_count: 1,
        segments: &mut segment,
        get_export_function: None,
        ext_info: ext::TYPE_INFO.as_ptr() as *const c_void,
    };
    // SAFETY: the module description NVTX's headers pass, valid through the call; the tool
    // writes function addresses into the slots (atomics of the same size and layout).
    if unsafe { init(&mut module) } == 0 {
        return None;
    }
    let function = |cbid: usize| {
        let v = PAYLOAD_SLOTS[cbid].load(Ordering::Acquire);
        (v != ext::FRESH && v != ext::DISABLED).then_some(v)
    };
    if let Some(f) = function(ext::CBID_ENUM_REGISTER) {
        const NAMES: [&CStr; 5] = [c"Sum", c"Product", c"Max", c"Min", c"Avg"];
        // Kept for the process, as NCCL's static arrays: a tool may keep pointers into them.
        let entries: &'static [ext::Enum] = Box::leak(
            NAMES
                .iter()
                .enumerate()
                .map(|(i, n)| ext::Enum { name: n.as_ptr(), value: i as u64, is_flag: 0 })
                .collect(),
        );
        let attr: &'static ext::EnumAttr = Box::leak(Box::new(ext::EnumAttr {
            field_mask: ext::ENUM_ATTR_MASK,
            name: std::ptr::null(),
            entries: entries.as_ptr(),
            num_entries: entries.len(),
            size_of_enum: std::mem::size_of::<c_int>(),
            schema_id: ext::REDOP_SCHEMA,
            extension: std::ptr::null_mut(),
        }));
        // SAFETY: the tool's nvtxPayloadEnumRegister (its slot's function), with attributes
        // that live for the process.
        unsafe { std::mem::transmute::<isize, ext::EnumRegister>(f)(domain, attr) };
    }
    // SAFETY: a written slot holds the tool's nvtxPayloadSchemaRegister.
    function(ext::CBID_SCHEMA_REGISTER).map(|f| unsafe { std::mem::transmute::<isize, ext::SchemaRegister>(f) })
}

/// Registers NCCL's schema of `coll` with the tool (once per collective).
fn register_schema(tool: &Tool, coll: crate::collective::Coll) {
    let Some(register) = tool.schema_register else { return };
    tool.schemas[coll as usize].call_once(|| {
        let (sid, extra) = schema_of(coll);
        let entry = |name: Option<&CStr>, ty: u64, offset: u64| ext::SchemaEntry {
            flags: 0,
            ty,
            name: name.map_or(std::ptr::null(), CStr::as_ptr),
            description: std::ptr::null(),
            array_or_union_detail: 0,
            offset,
            semantics: std::ptr::null(),
            reserved: std::ptr::null(),
        };
        let mut entries = vec![
            entry(Some(c"NCCL communicator ID"), ext::TYPE_UINT64, 0),
            entry(Some(c"Message size [bytes]"), ext::TYPE_SIZE, 8),
        ];
        for (i, &(name, ty)) in extra.iter().enumerate() {
            entries.push(entry(Some(name), ty, 16 + 4 * i as u64));
        }
        let n = entries.len();
        entries.push(entry(None, 0, 0)); // NCCL's arrays end with a zero entry
        // Kept for the process, as NCCL's static schema: a tool may keep pointers into it.
        let entries: &'static [ext::SchemaEntry] = Box::leak(entries.into_boxed_slice());
        let attr: &'static ext::SchemaAttr = Box::leak(Box::new(ext::SchemaAttr {
            field_mask: ext::SCHEMA_ATTR_MASK,
            name: std::ptr::null(),
            ty: ext::SCHEMA_TYPE_STATIC,
            flags: 0,
            entries: entries.as_ptr(),
            num_entries: n,
            payload_static_size: payload_size(coll),
            pack_align: 0,
            schema_id: ext::SCHEMA_ID_STATIC_START + sid,
            extension: std::ptr::null_mut(),
        }));
        // SAFETY: the tool's nvtxPayloadSchemaRegister, with attributes that live for the process.
        unsafe { register(tool.domain, attr) };
    });
}

/// `NCCL_NVTX_DISABLE` set to a non-zero number (the stock library's switch).
fn disabled() -> bool {
    crate::env::env("NCCL_NVTX_DISABLE").is_some_and(|v| v.trim().parse::<i64>().is_ok_and(|n| n != 0))
}

/// ROCm's roctx library: `roctxRangePushA` and `roctxRangePop`.
pub struct Roctx {
    push: unsafe extern "C" fn(*const c_char) -> c_int,
    pop: unsafe extern "C" fn() -> c_int,
    _lib: libloading::Library,
}

impl Roctx {
    /// The first of `candidates` that opens and has both functions.
    pub fn load<P: AsRef<std::ffi::OsStr>>(candidates: &[P]) -> Option<Roctx> {
        candidates.iter().find_map(|path| {
            // SAFETY: roctx's library is made to be loaded into any ROCm process; its
            // initialisers only register with a profiler that is present.
            let lib = unsafe { libloading::Library::new(path.as_ref()) }.ok()?;
            // SAFETY: roctx.h: `int roctxRangePushA(const char*)`, `int roctxRangePop(void)`.
            let push = unsafe { lib.get::<unsafe extern "C" fn(*const c_char) -> c_int>(b"roctxRangePushA\0") }.ok()?;
            // SAFETY: as above.
            let pop = unsafe { lib.get::<unsafe extern "C" fn() -> c_int>(b"roctxRangePop\0") }.ok()?;
            Some(Roctx { push: *push, pop: *pop, _lib: lib })
        })
    }

    /// Where ROCm installs roctx: `$ROCM_PATH/lib` (default `/opt/rocm/lib`), then the loader's
    /// search path; roctracer's library, then rocprofiler-sdk's.
    pub fn candidates() -> Vec<String> {
        const NAMES: [&str; 4] =
            ["libroctx64.so.4", "libroctx64.so", "librocprofiler-sdk-roctx.so.1", "librocprofiler-sdk-roctx.so"];
        let rocm = crate::env::env("ROCM_PATH").filter(|p| !p.is_empty()).unwrap_or_else(|| "/opt/rocm".into());
        let under = NAMES.iter().map(|n| format!("{rocm}/lib/{n}"));
        under.chain(NAMES.iter().map(|n| n.to_string())).collect()
    }
}

/// Set once the HIP runtime is in use ([`use_roctx`]).
static HIP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static ROCTX: OnceLock<Option<Roctx>> = OnceLock::new();

/// The GPU runtime is HIP: ranges go to roctx too (loaded at the first range).
pub fn use_roctx() {
    HIP.store(true, Ordering::Relaxed);
}

fn roctx() -> Option<&'static Roctx> {
    if !HIP.load(Ordering::Relaxed) {
        return None;
    }
    ROCTX.get_or_init(|| if disabled() { None } else { Roctx::load(&Roctx::candidates()) }).as_ref()
}

/// An open range; dropping it ends the range (`nvtxDomainRangePop`, `roctxRangePop`).
pub struct Range {
    tool: Option<&'static Tool>,
    roctx: Option<&'static Roctx>,
}

impl Drop for Range {
    fn drop(&mut self) {
        if let Some(tool) = self.tool {
            // SAFETY: the tool's nvtxDomainRangePop, on the domain it made.
            unsafe { (tool.pop)(tool.domain) };
        }
        if let Some(r) = self.roctx {
            // SAFETY: roctx's pop, ending the range this value's push opened on this thread.
            unsafe { (r.pop)() };
        }
    }
}

/// Opens the stock library's range of `coll` (`ncclAllReduce`, ...) in domain `NCCL` with its
/// payload (and a roctx range of that name on HIP); `None` (nothing to end) when no tool
/// listens.
pub fn range(coll: crate::collective::Coll, payload: Payload) -> Option<Range> {
    let name = collective_name(coll);
    let roctx = roctx();
    if let Some(r) = roctx {
        // SAFETY: roctx's push, with a NUL-terminated name that lives for the whole process.
        unsafe { (r.push)(name.as_ptr()) };
    }
    let Some(tool) = tool() else { return roctx.map(|r| Range { tool: None, roctx: Some(r) }) };
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
    register_schema(tool, coll);
    let data = ext::Data {
        schema_id: ext::SCHEMA_ID_STATIC_START + schema_of(coll).0,
        size: payload_size(coll),
        payload: &payload as *const Payload as *const c_void,
    };
    let (payload_type, reserved0, value) = match tool.schema_register {
        Some(_) => (ext::PAYLOAD_TYPE_EXT, 1, &data as *const ext::Data as u64),
        None => (PAYLOAD_TYPE_UNSIGNED_INT64, 0, payload.bytes as u64),
    };
    let attr = EventAttributes {
        version: NVTX_VERSION as u16,
        size: std::mem::size_of::<EventAttributes>() as u16,
        category: 0,
        color_type: 0,
        color: 0,
        payload_type,
        reserved0,
        payload: value,
        message_type,
        message,
    };
    // SAFETY: the tool's nvtxDomainRangePushEx, with attributes (and the payload data they
    // point to) that live across the call.
    unsafe { (tool.push)(tool.domain, &attr) };
    Some(Range { tool: Some(tool), roctx })
}

/// The stock library's range name of an intercepted collective (its API function's name).
pub fn collective_name(coll: crate::collective::Coll) -> &'static CStr {
    coll.spec().api
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roctx_falls_back_when_no_library_has_it() {
        assert!(Roctx::load(&["/nonexistent/libroctx64.so"]).is_none());
        // A library without roctx's functions is passed over.
        assert!(Roctx::load(&["libc.so.6", "/nonexistent/libroctx64.so.4"]).is_none());
        let c = Roctx::candidates();
        assert_eq!(c.len(), 8);
        assert!(c[0].ends_with("/lib/libroctx64.so.4") && c[4] == "libroctx64.so.4", "{c:?}");
        // Not on HIP: no roctx range, nothing loaded.
        assert!(roctx().is_none() && ROCTX.get().is_none());
    }

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
