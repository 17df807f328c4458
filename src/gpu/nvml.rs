//! NVML, NVIDIA's management library, loaded at run time for one question: whether two GPUs
//! share an NVLink (`nvmlDeviceGetP2PStatus(.., NVML_P2P_CAPS_INDEX_NVLINK)`, as NCCL's topology
//! and vLLM's custom all-reduce ask it). It sees every GPU of the machine by PCI bus id,
//! whatever `CUDA_VISIBLE_DEVICES` hides from this process. Without it the answer is unknown.

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::OnceLock;

use super::backend::{open_library, symbol};

type Device = *mut c_void;
type ByBusId = unsafe extern "C" fn(*const c_char, *mut Device) -> c_int;
type P2pStatus = unsafe extern "C" fn(Device, Device, c_int, *mut c_int) -> c_int;

/// `NVML_P2P_CAPS_INDEX_NVLINK`, `NVML_P2P_STATUS_OK`, `NVML_SUCCESS`.
const CAPS_NVLINK: c_int = 2;
const STATUS_OK: c_int = 0;
const SUCCESS: c_int = 0;

struct Nvml {
    _lib: libloading::Library,
    by_bus_id: ByBusId,
    p2p_status: P2pStatus,
}

/// NVML, initialised once per process (`None`: not installed, or `nvmlInit_v2` failed).
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        let (lib, _) = open_library(&["libnvidia-ml.so.1".to_string()])
            .map_err(|e| tracing::debug!("nvml: not loaded ({e})"))
            .ok()?;
        // SAFETY: the types are NVML's prototypes of these symbols (nvml.h).
        let (init, by_bus_id, p2p_status) = unsafe {
            (
                symbol::<unsafe extern "C" fn() -> c_int>(&lib, "nvmlInit_v2"),
                symbol::<ByBusId>(&lib, "nvmlDeviceGetHandleByPciBusId_v2"),
                symbol::<P2pStatus>(&lib, "nvmlDeviceGetP2PStatus"),
            )
        };
        let (init, by_bus_id, p2p_status) = match (init, by_bus_id, p2p_status) {
            (Ok(i), Ok(b), Ok(p)) => (i, b, p),
            (i, b, p) => {
                let why = [i.err(), b.err(), p.err()].into_iter().flatten().collect::<Vec<_>>().join(", ");
                tracing::debug!("nvml: {why}");
                return None;
            }
        };
        // SAFETY: no preconditions; NVML counts initialisations, and this one is never undone.
        let r = unsafe { init() };
        if r != SUCCESS {
            tracing::debug!("nvml: nvmlInit_v2 returned {r}");
            return None;
        }
        Some(Nvml { _lib: lib, by_bus_id, p2p_status })
    })
    .as_ref()
}

/// Whether the GPUs at PCI bus ids `a` and `b` (`0000:1b:00.0`) share an NVLink; `None` when
/// NVML cannot say.
pub fn nvlink_between(a: &str, b: &str) -> Option<bool> {
    let nvml = nvml()?;
    let device = |bus: &str| -> Option<Device> {
        let bus = CString::new(bus.trim()).ok()?;
        let mut d: Device = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and an out-pointer to a local.
        (unsafe { (nvml.by_bus_id)(bus.as_ptr(), &mut d) } == SUCCESS).then_some(d)
    };
    let (da, db) = (device(a)?, device(b)?);
    let mut status: c_int = -1;
    // SAFETY: two handles NVML gave, an out-pointer to a local.
    let r = unsafe { (nvml.p2p_status)(da, db, CAPS_NVLINK, &mut status) };
    (r == SUCCESS).then_some(status == STATUS_OK)
}
