//! Statistics: per communicator and per process, summed by algorithm or per route, and the
//! names of routes and forward reasons.

use std::ffi::{c_char, c_int};

use crate::abi::boundary;
use crate::comm::Snapshot;
use crate::types::{ncclComm_t, ncclResult_t};

/// Per-communicator statistics by algorithm, summed over the collectives (a stable summary of
/// the per-route counters of `rcclxCommGetRouteStats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct rcclxCommStats {
    /// Calls run by a DDA one-shot LL kernel (smallest messages), and their bytes.
    pub ddaLlCalls: u64,
    pub ddaLlBytes: u64,
    /// Calls run by a DDA flat (one-shot) kernel, and their bytes.
    pub ddaFlatCalls: u64,
    pub ddaFlatBytes: u64,
    /// Calls run by a DDA tree (two-shot) kernel, and their bytes.
    pub ddaTreeCalls: u64,
    pub ddaTreeBytes: u64,
    /// Calls run by a low-precision (FP8 or INT8) kernel, and their bytes.
    pub lowpCalls: u64,
    pub lowpBytes: u64,
    /// Intercepted calls forwarded to the stock library, and their bytes.
    pub forwardedCalls: u64,
    pub forwardedBytes: u64,
    /// Forwarded calls by reason (see `rcclxForwardReasonName`).
    pub forwardedByReason: [u64; 16],
}

/// Copies the statistics of `comm` into `*stats`.
///
/// Returns `ncclInvalidArgument` for a NULL pointer or a communicator rcclx does not know.
///
/// # Safety
/// `stats` must be NULL or point to writable memory for one `rcclxCommStats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcclxCommGetStats(comm: ncclComm_t, stats: *mut rcclxCommStats) -> ncclResult_t {
    boundary("rcclxCommGetStats", || {
        if stats.is_null() || comm.is_null() {
            return ncclResult_t::InvalidArgument;
        }
        let Some(state) = crate::comm::lookup(comm) else {
            return ncclResult_t::InvalidArgument;
        };
        // SAFETY: checked non-null; the caller guarantees it is writable.
        unsafe { stats.write(summary(&state.stats.snapshot())) };
        ncclResult_t::Success
    })
}

/// Copies the statistics summed over every communicator of the process (live and destroyed)
/// into `*stats`. Returns `ncclInvalidArgument` for a NULL pointer.
///
/// # Safety
/// `stats` must be NULL or point to writable memory for one `rcclxCommStats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcclxGetProcessStats(stats: *mut rcclxCommStats) -> ncclResult_t {
    boundary("rcclxGetProcessStats", || {
        if stats.is_null() {
            return ncclResult_t::InvalidArgument;
        }
        // SAFETY: checked non-null; the caller guarantees it is writable.
        unsafe { stats.write(summary(&crate::comm::process_stats())) };
        ncclResult_t::Success
    })
}

fn summary(s: &Snapshot) -> rcclxCommStats {
    let (ll, flat, tree) = (s.algo("ll"), s.algo("flat"), s.algo("tree"));
    let lowp = s.algos(crate::kernel_table::LOW_PRECISION_ALGOS);
    let fwd = s.routes[crate::comm::stats::FORWARDED];
    rcclxCommStats {
        ddaLlCalls: ll.calls,
        ddaLlBytes: ll.bytes,
        ddaFlatCalls: flat.calls,
        ddaFlatBytes: flat.bytes,
        ddaTreeCalls: tree.calls,
        ddaTreeBytes: tree.bytes,
        lowpCalls: lowp.calls,
        lowpBytes: lowp.bytes,
        forwardedCalls: fwd.calls,
        forwardedBytes: fwd.bytes,
        forwardedByReason: std::array::from_fn(|i| s.reasons.get(i).copied().unwrap_or(0)),
    }
}

/// Calls and bytes of one route (see `rcclxRouteName`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct rcclxRouteStats {
    pub calls: u64,
    pub bytes: u64,
}

/// Writes up to `capacity` routes of `comm` (index order, see `rcclxRouteName`) to `stats` and
/// the number of routes there are to `*count` (call with `capacity` 0 to size the array).
///
/// Returns `ncclInvalidArgument` for a NULL `count`, a NULL `stats` with `capacity` > 0, or a
/// communicator rcclx does not know.
///
/// # Safety
/// `stats` must be NULL or point to writable memory for `capacity` `rcclxRouteStats`; `count`
/// must be NULL or point to writable memory for one `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcclxCommGetRouteStats(
    comm: ncclComm_t,
    stats: *mut rcclxRouteStats,
    capacity: c_int,
    count: *mut c_int,
) -> ncclResult_t {
    boundary("rcclxCommGetRouteStats", || {
        if comm.is_null() {
            return ncclResult_t::InvalidArgument;
        }
        let Some(state) = crate::comm::lookup(comm) else {
            return ncclResult_t::InvalidArgument;
        };
        // SAFETY: forwarded from the caller.
        unsafe { write_routes(&state.stats.snapshot(), stats, capacity, count) }
    })
}

/// As `rcclxCommGetRouteStats`, summed over every communicator of the process (live and
/// destroyed).
///
/// # Safety
/// As `rcclxCommGetRouteStats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcclxGetProcessRouteStats(
    stats: *mut rcclxRouteStats,
    capacity: c_int,
    count: *mut c_int,
) -> ncclResult_t {
    boundary("rcclxGetProcessRouteStats", || {
        // SAFETY: forwarded from the caller.
        unsafe { write_routes(&crate::comm::process_stats(), stats, capacity, count) }
    })
}

/// # Safety
/// As `rcclxCommGetRouteStats`.
unsafe fn write_routes(s: &Snapshot, stats: *mut rcclxRouteStats, capacity: c_int, count: *mut c_int) -> ncclResult_t {
    if count.is_null() || capacity < 0 || (stats.is_null() && capacity > 0) {
        return ncclResult_t::InvalidArgument;
    }
    for (i, c) in s.routes.iter().enumerate().take(capacity as usize) {
        // SAFETY: i < capacity, and the caller guarantees `capacity` writable entries.
        unsafe { stats.add(i).write(rcclxRouteStats { calls: c.calls, bytes: c.bytes }) };
    }
    // SAFETY: checked non-null; the caller guarantees it is writable.
    unsafe { count.write(s.routes.len() as c_int) };
    ncclResult_t::Success
}

/// Name of route `index` (`<collective>.<algorithm>`, e.g. `allreduce.ll`, or `forwarded`), a
/// static string, or NULL past the last one.
#[unsafe(no_mangle)]
pub extern "C" fn rcclxRouteName(index: c_int) -> *const c_char {
    boundary("rcclxRouteName", || {
        static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            (0..crate::comm::stats::ROUTES)
                .filter_map(crate::comm::stats::route_name)
                .map(|n| std::ffi::CString::new(n).expect("route names have no NUL"))
                .collect()
        });
        usize::try_from(index).ok().and_then(|i| names.get(i)).map_or(std::ptr::null(), |n| n.as_ptr())
    })
}

/// Name of forward reason `index` of `rcclxCommStats::forwardedByReason` (a static string),
/// or NULL past the last one.
#[unsafe(no_mangle)]
pub extern "C" fn rcclxForwardReasonName(index: c_int) -> *const c_char {
    boundary("rcclxForwardReasonName", || {
        usize::try_from(index)
            .ok()
            .and_then(|i| crate::intercept::Reason::ALL.get(i))
            .map_or(std::ptr::null(), |r| r.c_name().as_ptr())
    })
}
