//! The C types of `nccl.h` / `rccl.h` and `nccl_device/*.h`, with their exact layouts
//! (`tests/c_abi.rs` checks them against the stock headers).
//!
//! Layer: base. Only plain data; no logic beyond small conversions.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `ncclResult_t`: a C enum passed as a 32-bit integer. Transparent so that any value the
/// upstream returns (even one newer than this table) passes through unchanged.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ncclResult_t(pub c_uint);

impl ncclResult_t {
    pub const Success: Self = Self(0);
    pub const UnhandledCudaError: Self = Self(1);
    pub const SystemError: Self = Self(2);
    pub const InternalError: Self = Self(3);
    pub const InvalidArgument: Self = Self(4);
    pub const InvalidUsage: Self = Self(5);
    pub const RemoteError: Self = Self(6);
    pub const InProgress: Self = Self(7);
    pub const Timeout: Self = Self(8);

    pub fn is_ok(self) -> bool {
        self == Self::Success
    }
    /// `ncclInProgress` is a status of a non-blocking communicator, not an error.
    pub fn is_ok_or_in_progress(self) -> bool {
        self == Self::Success || self == Self::InProgress
    }
}

/// `ncclDataType_t`.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ncclDataType_t(pub c_int);

impl ncclDataType_t {
    pub const Int8: Self = Self(0);
    pub const Uint8: Self = Self(1);
    pub const Int32: Self = Self(2);
    pub const Uint32: Self = Self(3);
    pub const Int64: Self = Self(4);
    pub const Uint64: Self = Self(5);
    pub const Float16: Self = Self(6);
    pub const Float32: Self = Self(7);
    pub const Float64: Self = Self(8);
    pub const Bfloat16: Self = Self(9);
    pub const Float8e4m3: Self = Self(10);
    pub const Float8e5m2: Self = Self(11);
    pub const NumTypes: c_int = 12;

    /// Element size in bytes, `None` for a value outside the enum.
    pub fn size(self) -> Option<usize> {
        Some(match self.0 {
            0 | 1 | 10 | 11 => 1,
            6 | 9 => 2,
            2 | 3 | 7 => 4,
            4 | 5 | 8 => 8,
            _ => return None,
        })
    }

    /// The type's name as NCCL's headers spell it without the `nccl` prefix (`float`, `bfloat16`).
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        const NAMES: [&str; 12] = [
            "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "fp8e4m3",
            "fp8e5m2",
        ];
        match usize::try_from(self.0).ok().and_then(|i| NAMES.get(i)) {
            Some(n) => (*n).into(),
            None => format!("type {}", self.0).into(),
        }
    }
}

/// `ncclRedOp_t`. Values >= `NumOps` are user ops (PreMulSum) created per communicator.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ncclRedOp_t(pub c_int);

impl ncclRedOp_t {
    pub const Sum: Self = Self(0);
    pub const Prod: Self = Self(1);
    pub const Max: Self = Self(2);
    pub const Min: Self = Self(3);
    pub const Avg: Self = Self(4);
    pub const NumOps: c_int = 5;

    /// The op's name (`sum`, `prod`, `max`, `min`, `avg`; a user op by number).
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match self.0 {
            0 => "sum".into(),
            1 => "prod".into(),
            2 => "max".into(),
            3 => "min".into(),
            4 => "avg".into(),
            n => format!("op {n}").into(),
        }
    }
}

/// `ncclScalarResidence_t`.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ncclScalarResidence_t(pub c_int);

/// `ncclCommMemStat_t`.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ncclCommMemStat_t(pub c_int);

/// Opaque handles. rcclx never dereferences them: they belong to the upstream library.
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}
pub type ncclComm_t = *mut ncclComm;

#[repr(C)]
pub struct ncclWindow_vidmem {
    _private: [u8; 0],
}
pub type ncclWindow_t = *mut ncclWindow_vidmem;

#[repr(C)]
pub struct ncclParamHandle {
    _private: [u8; 0],
}
pub type ncclParamHandle_t = *mut ncclParamHandle;

#[repr(C)]
pub struct ncclDevComm {
    _private: [u8; 0],
}

/// `cudaStream_t` / `hipStream_t`: both are pointers to an opaque struct.
pub type Stream = *mut c_void;

pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`, passed by value to `ncclCommInitRank(Config)`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// `mscclAlgoHandle_t` (RCCL): a plain int.
pub type mscclAlgoHandle_t = c_int;

/// `ncclWaitSignalDesc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclWaitSignalDesc_t {
    pub opCnt: c_int,
    pub peer: c_int,
    pub sigIdx: c_int,
    pub ctx: c_int,
}

/// `ncclSimInfo_t` (v22200).
#[repr(C)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: f32,
}

/// `ncclConfig_t` as of NCCL 2.31 (v23100, 120 bytes). Callers built against older headers pass
/// a shorter struct: read a field only if `size` covers it (see [`ncclConfig_t::has`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
    pub graphUsageMode: c_int,
    pub numRmaCtx: c_int,
    pub maxP2pPeers: c_int,
    pub graphStreamOrdering: c_int,
    pub launchOrderImplicit: c_int,
    pub numRmaSig: c_int,
    pub rmaEagerInit: c_int,
    pub hostCftMode: c_int,
    pub nvlsHostMode: c_int,
}
const _: () = assert!(std::mem::size_of::<ncclConfig_t>() == 120);

pub const NCCL_API_MAGIC: c_uint = 0xcafe_beef;
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;

impl ncclConfig_t {
    /// Whether the caller's struct (of `self.size` bytes) covers the field at `offset` of `len` bytes.
    pub fn has(&self, offset: usize, len: usize) -> bool {
        self.magic == NCCL_API_MAGIC && self.size >= offset + len
    }
    /// The `blocking` field as the caller set it; `None` when unset (then NCCL blocks).
    pub fn blocking(&self) -> Option<bool> {
        let off = std::mem::offset_of!(ncclConfig_t, blocking);
        (self.has(off, 4) && self.blocking != NCCL_CONFIG_UNDEF_INT).then_some(self.blocking != 0)
    }
}

/// The `maxCTAs` a caller's config sets (above 0), or `None` (no config, unset, or not above 0).
///
/// # Safety
/// `config` is NULL or points to a config the stock library accepted: `size` bytes of it are
/// readable, and its first fields (`size`, `magic`) are in every version's struct.
pub unsafe fn max_ctas_of(config: *const ncclConfig_t) -> Option<u32> {
    if config.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: `size` and `magic` are readable; then only the covered field.
    let (size, magic) =
        unsafe { (std::ptr::addr_of!((*config).size).read(), std::ptr::addr_of!((*config).magic).read()) };
    let off = std::mem::offset_of!(ncclConfig_t, maxCTAs);
    if magic != NCCL_API_MAGIC || size < off + 4 {
        return None;
    }
    // SAFETY: covered by `size` (checked above).
    let v = unsafe { std::ptr::addr_of!((*config).maxCTAs).read() };
    (v > 0).then_some(v as u32)
}

/// `ncclCollConfig_t` (NCCL 2.31): only passed through, never read.
#[repr(C)]
pub struct ncclCollConfig_t {
    _private: [u8; 0],
}

/// `ncclTeam_t` of the device API (`nccl_device/core.h`): returned by value.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ncclTeam_t {
    pub nRanks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// Opaque pointer-sized argument used for device-API structs rcclx only passes through.
pub type Opaque = *mut c_void;

// Device-API types (nccl_device/*.h) that rcclx only passes through.
#[repr(C)]
pub struct ncclCommProperties_t(c_void);
#[repr(C)]
pub struct ncclDevCommRequirements_t(c_void);
#[repr(C)]
pub struct ncclDevComm_t(c_void);
#[repr(C)]
pub struct ncclLsaBarrierHandle_t(c_void);
#[repr(C)]
pub struct ncclGinBarrierHandle_t(c_void);
#[repr(C)]
pub struct ncclDevResourceRequirements_t(c_void);
#[repr(C)]
pub struct ncclDevResourceRequirements(c_void);
#[repr(C)]
pub struct ncclLLA2AHandle_t(c_void);
#[repr(C)]
pub struct ncclGinOutboxHandle(c_void);
#[repr(C)]
pub struct ncclGinInboxA2AHandle(c_void);
#[repr(C)]
pub struct ncclEncryptionConfig_t(c_void);
/// `ncclMultimemHandle_t`: passed by value; one pointer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclMultimemHandle_t {
    pub mcBasePtr: *mut c_void,
}
pub type ncclCftLeId = u32;
/// `ncclCftTeamMode_t`: a C enum.
pub type ncclCftTeamMode_t = c_int;
/// `ncclTeam` (the struct tag; same as `ncclTeam_t`).
pub type ncclTeam = ncclTeam_t;
/// C spellings used by the export list (`crate::nccl_api`).
pub type size_t = usize;
pub type cudaStream_t = Stream;
pub type unsigned_int = c_uint;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_ctas_is_read_only_where_the_callers_struct_sets_it() {
        // SAFETY: all-zero is a valid value of this struct of integers and pointers.
        let mut c: ncclConfig_t = unsafe { std::mem::zeroed() };
        c.size = std::mem::size_of::<ncclConfig_t>();
        c.magic = NCCL_API_MAGIC;
        // SAFETY: a whole struct, or (below) one whose `size` says it is shorter.
        let read = |c: &ncclConfig_t| unsafe { max_ctas_of(c) };
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { max_ctas_of(std::ptr::null()) }, None);
        c.maxCTAs = 8;
        assert_eq!(read(&c), Some(8));
        for unset in [NCCL_CONFIG_UNDEF_INT, 0, -3] {
            c.maxCTAs = unset;
            assert_eq!(read(&c), None, "{unset}");
        }
        c.maxCTAs = 8;
        c.size = std::mem::offset_of!(ncclConfig_t, maxCTAs); // an older, shorter struct
        assert_eq!(read(&c), None);
        c.size = std::mem::size_of::<ncclConfig_t>();
        c.magic = 0;
        assert_eq!(read(&c), None);
    }
}
