//! The GPU side of a case: device buffers with guards, the NCCL call through rcclx, rcclx's
//! statistics (which path the call took), and the communicators one thread drives.

use std::ffi::{CStr, c_int, c_void};
use std::ops::Range;
use std::time::Duration;

use rcclx::abi::own::{
    rcclxCommGetRouteStats, rcclxCommGetStats, rcclxCommStats, rcclxForwardReasonName, rcclxRouteName, rcclxRouteStats,
};
use rcclx::abi::table as api;
use rcclx::config::LowpCodec;
use rcclx::gpu::{DeviceBuffer, DevicePtr, MemKind, Runtime, Stream};
use rcclx::types::{ncclComm_t, ncclRedOp_t, ncclResult_t};
use rcclx_gpu_tests::codec::Io;
use rcclx_gpu_tests::world::{FORWARDED, Placement, World};
use rcclx_gpu_tests::{self as harness, nccl, watchdog};

use crate::cases::{Case, Op, dtype_of, env_codec, lowp_algo};
use crate::reference::{Prepared, to_bytes};
use crate::report::{RankResult, evaluate};

/// Bytes of 0xFF before and after every buffer; a kernel write there is a failure.
const GUARD: usize = 256;
/// Bound on each stream wait.
const STREAM_WAIT: Duration = Duration::from_secs(120);

/// One rank's device buffers for a case (guards of 0xFF around each).
struct RankBufs {
    /// The output buffer (also the input for in-place).
    main: DeviceBuffer,
    /// Separate input buffer (out-of-place) and its host image.
    send_buf: Option<(DeviceBuffer, Vec<u8>)>,
    send: DevicePtr,
    recv: DevicePtr,
    /// Byte range of the output within `main`.
    out: Range<usize>,
}

fn setup_buffers(
    rt: &'static Runtime,
    dev: i32,
    case: &Case,
    n: usize,
    r: usize,
    input: &[f32],
) -> Result<RankBufs, String> {
    let (op, io, count) = (case.g.op, case.g.io, case.g.count);
    let sz = io.size();
    let inb = op.in_len(count, n) * sz;
    let outb = op.out_len(count, n) * sz;
    let input = to_bytes(io, input);
    let image = |len: usize, at: usize| {
        let mut v = vec![0xFFu8; GUARD + len + GUARD];
        v[GUARD + at..GUARD + at + input.len()].copy_from_slice(&input);
        v
    };
    let upload = |img: &[u8]| -> Result<DeviceBuffer, String> {
        let b = rt.alloc(dev, img.len(), MemKind::Normal).map_err(|e| e.to_string())?;
        b.copy_from_host(img).map_err(|e| e.to_string())?;
        Ok(b)
    };
    if !case.inplace {
        let simg = image(inb, 0);
        let send = upload(&simg)?;
        let main = upload(&vec![0xFFu8; GUARD + outb + GUARD])?;
        let (s, rp) = (send.ptr().offset(GUARD), main.ptr().offset(GUARD));
        return Ok(RankBufs { main, send_buf: Some((send, simg)), send: s, recv: rp, out: GUARD..GUARD + outb });
    }
    let own = r * count * sz;
    let (main, send_off, recv_off) = match op {
        Op::AllReduce | Op::AlltoAll | Op::AllToAllRccl => (upload(&image(inb, 0))?, 0, 0),
        // nccl-tests layouts: allgather sendbuff = recvbuff + rank*count,
        // reducescatter recvbuff = sendbuff + rank*count.
        Op::AllGather => (upload(&image(outb, own))?, own, 0),
        Op::ReduceScatter => (upload(&image(inb, 0))?, 0, own),
    };
    let base = main.ptr().offset(GUARD);
    Ok(RankBufs {
        send: base.offset(send_off),
        recv: base.offset(recv_off),
        out: GUARD + recv_off..GUARD + recv_off + outb,
        main,
        send_buf: None,
    })
}

/// Reads the output back; (output bytes, guards intact, out-of-place input unchanged).
fn collect(b: &RankBufs) -> Result<(Vec<u8>, bool, bool), String> {
    let mut all = vec![0u8; b.main.len()];
    b.main.copy_to_host(&mut all).map_err(|e| e.to_string())?;
    let end = b.main.len() - GUARD;
    let guard_ok = all[..GUARD].iter().chain(&all[end..]).all(|&x| x == 0xFF);
    let send_ok = match &b.send_buf {
        Some((buf, img)) => {
            let mut s = vec![0u8; img.len()];
            buf.copy_to_host(&mut s).map_err(|e| e.to_string())?;
            &s == img
        }
        None => true,
    };
    Ok((all[b.out.clone()].to_vec(), guard_ok, send_ok))
}

/// Issues the case's collective on one communicator: the stock library's, through rcclx's
/// exports as an application calls them; or (`harness`) one of the harness's (`--world`),
/// through rcclx's own per-call path, since no stock communicator stands behind it to forward to.
///
/// # Safety
/// `send`/`recv` are device buffers of the sizes the call implies on the communicator's
/// device, and `stream` is a stream of that device.
#[allow(clippy::too_many_arguments)]
unsafe fn issue(
    op: Op,
    io: Io,
    count: usize,
    send: DevicePtr,
    recv: DevicePtr,
    comm: ncclComm_t,
    stream: Stream,
    harness: bool,
) -> ncclResult_t {
    let (s, r, dt, st) = (send.as_raw() as *const c_void, recv.as_raw(), dtype_of(io), stream.as_raw());
    if harness {
        let call = rcclx::intercept::CallDesc::new(op.coll(), count, dt);
        let bufs = rcclx::clique::Buffers { send: s, recv: r, stream };
        return rcclx::comm::collective(comm, call, bufs, || FORWARDED);
    }
    // SAFETY: forwarded from the caller (the NCCL contract of each call).
    unsafe {
        match op {
            Op::AllReduce => api::ncclAllReduce(s, r, count, dt, ncclRedOp_t::Sum, comm, st),
            Op::ReduceScatter => api::ncclReduceScatter(s, r, count, dt, ncclRedOp_t::Sum, comm, st),
            Op::AllGather => api::ncclAllGather(s, r, count, dt, comm, st),
            Op::AlltoAll => api::ncclAlltoAll(s, r, count, dt, comm, st),
            Op::AllToAllRccl => api::ncclAllToAll(s, r, count, dt, comm, st),
        }
    }
}

fn stats(comm: ncclComm_t) -> rcclxCommStats {
    let mut s = rcclxCommStats::default();
    // SAFETY: `s` is a writable rcclxCommStats; an unknown comm only returns an error.
    unsafe { rcclxCommGetStats(comm, &mut s) };
    s
}

/// Calls so far on every route of `comm` (the order of `rcclxRouteName`).
fn route_calls(comm: ncclComm_t) -> Vec<u64> {
    let mut count: c_int = 0;
    // SAFETY: capacity 0 with a NULL array only writes the route count to `count`.
    unsafe { rcclxCommGetRouteStats(comm, std::ptr::null_mut(), 0, &mut count) };
    let mut v = vec![rcclxRouteStats::default(); count.max(0) as usize];
    // SAFETY: `v` has room for `count` entries; `count` is writable.
    unsafe { rcclxCommGetRouteStats(comm, v.as_mut_ptr(), v.len() as c_int, &mut count) };
    v.iter().map(|s| s.calls).collect()
}

/// Names of rcclx's routes (`<collective>.<algorithm>` or `forwarded`), in index order.
fn route_names() -> Vec<String> {
    (0..)
        .map_while(|i| {
            let p = rcclxRouteName(i);
            // SAFETY: a non-NULL result is a static NUL-terminated string.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// Whether route `name` runs `coll` on the low-precision kernels of `algo` (`lowp` or `int8`):
/// `<coll>.<algo>`, or a variant of it such as AllReduce's 2-rank `<coll>.<algo>_pair`.
fn is_lowp_route(name: &str, coll: &str, algo: &str) -> bool {
    name.strip_prefix(coll)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_prefix(algo))
        .is_some_and(|r| r.is_empty() || r.starts_with('_'))
}

/// Growth of the calls on the low-precision routes of `coll` and `algo` between two snapshots.
fn lowp_growth(before: &[u64], after: &[u64], coll: &str, algo: &str) -> u64 {
    route_names()
        .iter()
        .enumerate()
        .filter(|(_, n)| is_lowp_route(n, coll, algo))
        .map(|(i, _)| after.get(i).copied().unwrap_or(0) - before.get(i).copied().unwrap_or(0))
        .sum()
}

/// Name of the forward reason whose counter grew between two snapshots.
fn forward_reason(before: &rcclxCommStats, after: &rcclxCommStats) -> String {
    let mut names = Vec::new();
    for i in 0..before.forwardedByReason.len() {
        if after.forwardedByReason[i] > before.forwardedByReason[i] {
            let p = rcclxForwardReasonName(i as c_int);
            names.push(if p.is_null() {
                format!("reason{i}")
            } else {
                // SAFETY: a non-NULL result is a static NUL-terminated string.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            });
        }
    }
    names.join(",")
}

/// A set of communicators driven from this thread (one per rank in `ranks`): the stock
/// library's, or the harness's (`world`: ranks that may share GPUs, no stock library).
pub struct Comms {
    pub ranks: Vec<usize>,
    pub comms: Vec<ncclComm_t>,
    pub streams: Vec<Stream>,
    pub nranks: usize,
    pub world: Option<World>,
}

impl Comms {
    /// This process's `ranks` of `placement`, through the harness (`--world`); the other
    /// processes' ranks exchange through files in `dir`.
    pub fn world(
        rt: &'static Runtime,
        placement: Placement,
        ranks: &[usize],
        dir: &std::path::Path,
    ) -> Result<Comms, String> {
        watchdog::progress("world setup");
        let w = World::join(rt, placement, ranks, dir, Duration::from_secs(120)).map_err(|f| f.0)?;
        Ok(Comms {
            ranks: w.ranks.clone(),
            comms: w.comms.clone(),
            streams: w.streams.clone(),
            nranks: placement.nranks,
            world: Some(w),
        })
    }

    /// Every rank of `n` on devices 0..n by `ncclCommInitAll`, one stream each.
    pub fn init_all(rt: &'static Runtime, n: usize) -> Result<Comms, String> {
        watchdog::progress("ncclCommInitAll");
        let comms = nccl::init_all(n)?;
        let streams =
            (0..n).map(|d| rt.create_stream(d as i32)).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
        Ok(Comms { ranks: (0..n).collect(), comms, streams, nranks: n, world: None })
    }

    /// Runs one case on every local rank (inside a group when there are several) and evaluates
    /// each rank's output.
    pub fn run_case(
        &self,
        rt: &'static Runtime,
        case: &Case,
        p: &Prepared,
        note: &mut dyn FnMut(String),
    ) -> Vec<RankResult> {
        let n = self.nranks;
        let (op, io, count) = (case.g.op, case.g.io, case.g.count);
        let mut bufs = Vec::new();
        for (k, &r) in self.ranks.iter().enumerate() {
            let dev = self.world.as_ref().map_or(r as i32, |w| w.devices[k]);
            match setup_buffers(rt, dev, case, n, r, &p.inputs[r]) {
                Ok(b) => bufs.push(b),
                Err(e) => {
                    return self
                        .ranks
                        .iter()
                        .map(|_| RankResult::failed_call(format!("buffers on rank {r}: {e}")))
                        .collect();
                }
            }
        }
        let before: Vec<rcclxCommStats> = self.comms.iter().map(|&c| stats(c)).collect();
        let routes_before: Vec<Vec<u64>> = self.comms.iter().map(|&c| route_calls(c)).collect();
        // The case's low-precision routes with the expected codec, and with the other one.
        let codec = env_codec();
        let other = if codec == LowpCodec::Int8 { LowpCodec::Fp8 } else { LowpCodec::Int8 };
        let (coll, lp_algo, other_algo) = (op.coll().name(), lowp_algo(codec), lowp_algo(other));
        watchdog::progress(&format!("{} (issue)", case.name()));
        // The harness's communicators need no group (there is no stock library to enqueue in).
        let grouped = self.comms.len() > 1 && self.world.is_none();
        let mut rets = Vec::new();
        // SAFETY: group calls take no arguments.
        let gs = if grouped { unsafe { api::ncclGroupStart() } } else { ncclResult_t::Success };
        for (k, b) in bufs.iter().enumerate() {
            let harness = self.world.is_some();
            // SAFETY: buffers sized for this call on rank k's device; stream of that device.
            rets.push(unsafe { issue(op, io, count, b.send, b.recv, self.comms[k], self.streams[k], harness) });
        }
        // SAFETY: as above.
        let ge = if grouped { unsafe { api::ncclGroupEnd() } } else { ncclResult_t::Success };
        watchdog::progress(&format!("{} (wait)", case.name()));
        let mut out = Vec::new();
        for (k, b) in bufs.iter().enumerate() {
            let r = self.ranks[k];
            let failed = [gs, rets[k], ge].into_iter().find(|x| !x.is_ok());
            let waited = || harness::gpu::wait_stream_or_exit(rt, self.streams[k], STREAM_WAIT, &case.name());
            let mut res = match failed {
                Some(e) => RankResult::failed_call(format!("call returned {}", nccl::error_string(e))),
                None => match waited().map_err(|f| f.0).and_then(|_| collect(b)) {
                    Err(e) => RankResult::failed_call(e),
                    Ok((bytes, guard_ok, send_ok)) => {
                        watchdog::progress(&format!("{} (check rank {r})", case.name()));
                        let mut res = evaluate(p, r, io, &bytes, note);
                        res.guard_ok = guard_ok;
                        res.send_ok = send_ok;
                        res
                    }
                },
            };
            let ae = match self.world {
                // rcclx's own late error (a kernel timeout); nothing is asked of a stock library.
                Some(_) => rcclx::comm::lookup(self.comms[k]).map_or(ncclResult_t::Success, |s| s.own_error()),
                // SAFETY: our communicators live until `destroy`.
                None => unsafe { nccl::async_error(self.comms[k]) },
            };
            if !ae.is_ok() && res.call_ok {
                res.call_ok = false;
                res.err = format!("ncclCommGetAsyncError: {}", nccl::error_string(ae));
            }
            let after = stats(self.comms[k]);
            let routes_after = route_calls(self.comms[k]);
            res.lp_delta = lowp_growth(&routes_before[k], &routes_after, coll, lp_algo);
            res.lp_other = lowp_growth(&routes_before[k], &routes_after, coll, other_algo);
            res.fwd_reason = forward_reason(&before[k], &after);
            out.push(res);
        }
        out
    }

    pub fn destroy(self, rt: &Runtime) {
        if let Some(w) = self.world {
            w.end(rt);
            return;
        }
        for (&c, &s) in self.comms.iter().zip(&self.streams) {
            // SAFETY: our own communicator, destroyed once, after its work finished.
            unsafe { api::ncclCommDestroy(c) };
            // SAFETY: our own stream, not used afterwards.
            let _ = unsafe { rt.destroy_stream(s) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcclx::intercept::Coll;

    #[test]
    fn lowp_routes_by_codec() {
        assert!(is_lowp_route("allreduce.lowp", "allreduce", "lowp"));
        assert!(is_lowp_route("allreduce.lowp_pair", "allreduce", "lowp"));
        assert!(is_lowp_route("allreduce.int8_pair", "allreduce", "int8"));
        assert!(!is_lowp_route("allreduce.int8", "allreduce", "lowp"));
        assert!(!is_lowp_route("allreduce.lowpx", "allreduce", "lowp"));
        assert!(!is_lowp_route("allgather.lowp", "allreduce", "lowp"));
        assert!(!is_lowp_route("alltoallv.dynamic", "alltoall", "lowp"));
        // rcclx has routes of both codecs for every collective with low precision, and no
        // route of both.
        let names = route_names();
        for coll in Coll::ALL.into_iter().filter(|c| c.spec().lowp_var.is_some()) {
            for codec in [LowpCodec::Fp8, LowpCodec::Int8] {
                let algo = lowp_algo(codec);
                assert!(names.iter().any(|n| is_lowp_route(n, coll.name(), algo)), "{coll:?} {algo}: {names:?}");
            }
            assert!(
                !names.iter().any(|n| is_lowp_route(n, coll.name(), "lowp") && is_lowp_route(n, coll.name(), "int8"))
            );
        }
    }
}
