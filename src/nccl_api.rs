//! THE list of exported NCCL/RCCL functions: every function of the newest RCCL header
//! (`tests/data/rccl-api.txt`) and every symbol the stock `libnccl.so.2` 2.28.9 and 2.32.3
//! export (`tests/data/nccl-symbols-cu13.txt`), each once, with its exact C signature spelled in
//! Rust. Type names follow the C headers (`crate::types`) so `tests/` can turn each line back
//! into a C declaration and compile it against the stock `nccl.h`.
//!
//! Layer: base (data only). The list is a callback macro (ZLUDA's pattern): `nccl_api!(m)`
//! expands to `m! { ... }`, so one list generates the stock library's function table
//! (`upstream`) and the exports (`abi::table`). Each line's kind:
//! * `forward`: straight to the stock library;
//! * `ordered(comm, stream)`: forwarded, after rcclx checked the communicator's state and ordered
//!   the call after the communicator's earlier calls on other streams (`comm::order`);
//! * `collective(Coll, send, recv, count, datatype, op, root, comm, stream)`: an intercepted
//!   collective: the export builds its `intercept::CallDesc` from the named arguments
//!   (expressions for the op and root of collectives without them) and goes to
//!   `comm::collective`, which runs rcclx's kernel or forwards;
//! * `hook`: rcclx takes part (`abi::hooks::<name>`).
//!
//! Where a macro expands the list, `crate::types::*` and `std::ffi::{c_char, c_int, c_void}`
//! must be in scope.

/// Calls `$m! { <the list> }`.
#[macro_export]
#[doc(hidden)]
macro_rules! nccl_api {
    ($m:ident) => {
        $m! {
            // Memory, version, ids, errors.
            forward fn ncclMemAlloc(ptr: *mut *mut c_void, size: size_t) -> ncclResult_t;
            forward fn ncclMemFree(ptr: *mut c_void) -> ncclResult_t;
            forward fn ncclGetVersion(version: *mut c_int) -> ncclResult_t;
            forward fn ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t;
            hook fn ncclGetErrorString(result: ncclResult_t) -> *const c_char;
            hook fn ncclGetLastError(comm: ncclComm_t) -> *const c_char;
            hook fn ncclResetDebugInit() -> ();
            hook fn ncclResetDebugInitInternal() -> ();
            forward fn ncclSetEncryption(config: *const ncclEncryptionConfig_t) -> ncclResult_t;

            // Communicator life cycle: rcclx keeps its side table in step.
            hook fn ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int) -> ncclResult_t;
            hook fn ncclCommInitRankConfig(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int, config: *mut ncclConfig_t) -> ncclResult_t;
            hook fn ncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t;
            hook fn ncclCommInitRankScalable(newcomm: *mut ncclComm_t, nranks: c_int, myrank: c_int, nId: c_int, commIds: *mut ncclUniqueId, config: *mut ncclConfig_t) -> ncclResult_t;
            hook fn ncclCommSplit(comm: ncclComm_t, color: c_int, key: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t) -> ncclResult_t;
            hook fn ncclCommShrink(comm: ncclComm_t, excludeRanksList: *mut c_int, excludeRanksCount: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t, shrinkFlags: c_int) -> ncclResult_t;
            hook fn ncclCommGrow(comm: ncclComm_t, nRanks: c_int, uniqueId: *const ncclUniqueId, rank: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t) -> ncclResult_t;
            hook fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t;
            hook fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t;
            hook fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t;
            hook fn ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t;
            hook fn ncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t;
            forward fn ncclCommGetUniqueId(comm: ncclComm_t, uniqueId: *mut ncclUniqueId) -> ncclResult_t;
            forward fn ncclCommSuspend(comm: ncclComm_t, flags: c_int) -> ncclResult_t;
            forward fn ncclCommResume(comm: ncclComm_t) -> ncclResult_t;
            forward fn ncclCommMemStats(comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64) -> ncclResult_t;

            // Communicator queries and registration.
            forward fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t;
            forward fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t;
            forward fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t;
            forward fn ncclCommRegister(comm: ncclComm_t, buff: *mut c_void, size: size_t, handle: *mut *mut c_void) -> ncclResult_t;
            forward fn ncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t;
            forward fn ncclCommWindowRegister(comm: ncclComm_t, buff: *mut c_void, size: size_t, win: *mut ncclWindow_t, winFlags: c_int) -> ncclResult_t;
            forward fn ncclCommWindowDeregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t;
            forward fn ncclWinGetUserPtr(comm: ncclComm_t, win: ncclWindow_t, outUserPtr: *mut *mut c_void) -> ncclResult_t;
            forward fn ncclRedOpCreatePreMulSum(op: *mut ncclRedOp_t, scalar: *mut c_void, datatype: ncclDataType_t, residence: ncclScalarResidence_t, comm: ncclComm_t) -> ncclResult_t;
            forward fn ncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t;

            // Collectives. Those rcclx accelerates are `collective`; the others are `ordered`:
            // forwarded after rcclx has ordered them with the communicator's earlier calls (see
            // `comm::order`).
            collective(AllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream) fn ncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            collective(AllGather, sendbuff, recvbuff, sendcount, datatype, ncclRedOp_t::Sum, 0, comm, stream) fn ncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            collective(ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream) fn ncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            collective(AllToAll, sendbuff, recvbuff, count, datatype, ncclRedOp_t::Sum, 0, comm, stream) fn ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            hook fn ncclAllToAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclAllReduceWithBias(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t, acc: *const c_void) -> ncclResult_t;
            collective(Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream) fn ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            collective(Broadcast, buff, buff, count, datatype, ncclRedOp_t::Sum, root, comm, stream) fn ncclBcast(buff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            collective(Broadcast, sendbuff, recvbuff, count, datatype, ncclRedOp_t::Sum, root, comm, stream) fn ncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclAlltoAllv(sendbuff: *const c_void, sendcounts: *const size_t, sdispls: *const size_t, recvbuff: *mut c_void, recvcounts: *const size_t, rdispls: *const size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclAllToAllv(sendbuff: *const c_void, sendcounts: *const size_t, sdispls: *const size_t, recvbuff: *mut c_void, recvcounts: *const size_t, rdispls: *const size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclSend(sendbuff: *const c_void, count: size_t, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclRecv(recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;

            // Per-collective config entry points (NCCL 2.31+).
            ordered(comm, stream) fn ncclAllReduceConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclBroadcastConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclReduceConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclAllGatherConfig(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclReduceScatterConfig(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: size_t, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclAlltoAllConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclGatherConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclScatterConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: size_t, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t, config: *const ncclCollConfig_t) -> ncclResult_t;

            // One-sided signals (NCCL 2.29+).
            ordered(comm, stream) fn ncclPutSignal(localbuff: *const c_void, count: size_t, datatype: ncclDataType_t, peer: c_int, peerWin: ncclWindow_t, peerWinOffset: size_t, sigIdx: c_int, ctx: c_int, flags: unsigned_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclSignal(peer: c_int, sigIdx: c_int, ctx: c_int, flags: unsigned_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            ordered(comm, stream) fn ncclWaitSignal(nDesc: c_int, signalDescs: *mut ncclWaitSignalDesc_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;

            // Groups: rcclx tracks the depth to decide what it may run inside one.
            hook fn ncclGroupStart() -> ncclResult_t;
            hook fn ncclGroupEnd() -> ncclResult_t;
            hook fn ncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t;

            // RCCL's MSCCL entry points (no-ops in RCCL >= 2.28.3, kept for link compatibility).
            forward fn mscclLoadAlgo(mscclAlgoFilePath: *const c_char, mscclAlgoHandle: *mut mscclAlgoHandle_t, rank: c_int) -> ncclResult_t;
            ordered(comm, stream) fn mscclRunAlgo(sendBuff: *const c_void, sendCounts: *const size_t, sDisPls: *const size_t, recvBuff: *mut c_void, recvCounts: *const size_t, rDisPls: *const size_t, count: size_t, dataType: ncclDataType_t, root: c_int, peer: c_int, op: ncclRedOp_t, mscclAlgoHandle: mscclAlgoHandle_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t;
            forward fn mscclUnloadAlgo(mscclAlgoHandle: mscclAlgoHandle_t) -> ncclResult_t;

            // Parameter API (NCCL 2.30+).
            forward fn ncclParamBind(out: *mut ncclParamHandle_t, key: *const c_char) -> ncclResult_t;
            forward fn ncclParamGetI8(h: ncclParamHandle_t, out: *mut i8) -> ncclResult_t;
            forward fn ncclParamGetI16(h: ncclParamHandle_t, out: *mut i16) -> ncclResult_t;
            forward fn ncclParamGetI32(h: ncclParamHandle_t, out: *mut i32) -> ncclResult_t;
            forward fn ncclParamGetI64(h: ncclParamHandle_t, out: *mut i64) -> ncclResult_t;
            forward fn ncclParamGetU8(h: ncclParamHandle_t, out: *mut u8) -> ncclResult_t;
            forward fn ncclParamGetU16(h: ncclParamHandle_t, out: *mut u16) -> ncclResult_t;
            forward fn ncclParamGetU32(h: ncclParamHandle_t, out: *mut u32) -> ncclResult_t;
            forward fn ncclParamGetU64(h: ncclParamHandle_t, out: *mut u64) -> ncclResult_t;
            forward fn ncclParamGetStr(h: ncclParamHandle_t, out: *mut *const c_char) -> ncclResult_t;
            forward fn ncclParamGet(h: ncclParamHandle_t, out: *mut c_void, maxLen: c_int, len: *mut c_int) -> ncclResult_t;
            forward fn ncclParamGetParameter(key: *const c_char, value: *mut *const c_char, valueLen: *mut c_int) -> ncclResult_t;
            forward fn ncclParamGetAllParameterKeys(table: *mut *mut *const c_char, tableLen: *mut c_int) -> ncclResult_t;
            forward fn ncclParamDumpAll() -> ();

            // Device API host functions (nccl_device/host.h, NCCL 2.28+).
            forward fn ncclCommQueryProperties(comm: ncclComm_t, props: *mut ncclCommProperties_t) -> ncclResult_t;
            forward fn ncclDevCommCreate(comm: ncclComm_t, reqs: *const ncclDevCommRequirements_t, outDevComm: *mut ncclDevComm_t) -> ncclResult_t;
            forward fn ncclDevCommDestroy(comm: ncclComm_t, devComm: *const ncclDevComm_t) -> ncclResult_t;
            forward fn ncclGetLsaMultimemDevicePointer(window: ncclWindow_t, offset: size_t, outPtr: *mut *mut c_void) -> ncclResult_t;
            forward fn ncclGetMultimemDevicePointer(window: ncclWindow_t, offset: size_t, multimem: ncclMultimemHandle_t, outPtr: *mut *mut c_void) -> ncclResult_t;
            forward fn ncclGetLsaDevicePointer(window: ncclWindow_t, offset: size_t, lsaRank: c_int, outPtr: *mut *mut c_void) -> ncclResult_t;
            forward fn ncclGetPeerDevicePointer(window: ncclWindow_t, offset: size_t, peer: c_int, outPtr: *mut *mut c_void) -> ncclResult_t;
            forward fn ncclGetMultimemDeviceLeInfo(window: ncclWindow_t, offset: size_t, leId: *mut ncclCftLeId, leOffset: *mut size_t) -> ncclResult_t;
            forward fn ncclGetCftDeviceLeInfo(window: ncclWindow_t, offset: size_t, peerCft: c_int, cftTeam: ncclTeam_t, leId: *mut ncclCftLeId, leOffset: *mut size_t) -> ncclResult_t;
            forward fn ncclGetPeerDeviceLeInfo(window: ncclWindow_t, offset: size_t, peerWorld: c_int, leId: *mut ncclCftLeId, leOffset: *mut size_t) -> ncclResult_t;
            forward fn ncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t;
            forward fn ncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t;
            forward fn ncclTeamCft(comm: ncclComm_t, mode: ncclCftTeamMode_t) -> ncclTeam_t;
            forward fn ncclTeamCftMultimem(comm: ncclComm_t) -> ncclTeam_t;
            forward fn ncclTeamRankToWorld(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int;
            forward fn ncclTeamRankToLsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int;
            forward fn ncclTeamRail(comm: ncclComm_t) -> ncclTeam_t;
            forward fn ncclLsaBarrierCreateRequirement(team: ncclTeam_t, nBarriers: c_int, outHandle: *mut ncclLsaBarrierHandle_t, outReq: *mut ncclDevResourceRequirements_t) -> ncclResult_t;
            forward fn ncclGinBarrierCreateRequirement(comm: ncclComm_t, team: ncclTeam_t, nBarriers: c_int, outHandle: *mut ncclGinBarrierHandle_t, outReq: *mut ncclDevResourceRequirements_t) -> ncclResult_t;
            forward fn ncclLLA2ACalcSlots(maxElts: c_int, maxEltSize: c_int) -> c_int;
            forward fn ncclLLA2ACreateRequirement(nBlocks: c_int, nSlots: c_int, outHandle: *mut ncclLLA2AHandle_t, outReq: *mut ncclDevResourceRequirements_t) -> ncclResult_t;
            forward fn ncclGinOutboxCreateRequirement(nBlocks: c_int, size_log2: c_int, outHandle: *mut ncclGinOutboxHandle, outReq: *mut ncclDevResourceRequirements) -> ncclResult_t;
            forward fn ncclGinInboxA2ACreateRequirement(peers: ncclTeam, nBlocks: c_int, size_log2: c_int, outHandle: *mut ncclGinInboxA2AHandle, outReq: *mut ncclDevResourceRequirements) -> ncclResult_t;
        }
    };
}
