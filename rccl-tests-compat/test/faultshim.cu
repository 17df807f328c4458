// Fault-injection shim, to test rccl-tests-compat itself (not built into the benchmarks).
// It exports the NCCL calls the harness uses, forwards them to the library named by $SHIM_REAL,
// and damages the result on rank 1 (or everywhere) as $SHIM_FAULT says:
//   corrupt  rank 1: first byte of every collective's output set to 0x55 (after the call)
//   oob      every rank: one byte written just past the end of the output
//   hang     rank 1: the first collective never returns
//   crash    rank 1: the first collective calls abort()
// Use it with -P 2 (one rank per process): inside ncclGroupStart/End the damage would happen
// before the real collective runs and be overwritten.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void* real() {
  static void* h = nullptr;
  if (!h) {
    const char* p = getenv("SHIM_REAL");
    h = p ? dlopen(p, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!h) { fprintf(stderr, "faultshim: set SHIM_REAL to a libnccl.so (%s)\n", dlerror()); abort(); }
  }
  return h;
}
#define REAL(name) reinterpret_cast<decltype(&name)>(dlsym(real(), #name))
#define FWD(ret, name, params, args) \
  extern "C" ret name params { static auto f = REAL(name); return f args; }

FWD(ncclResult_t, ncclGetVersion, (int* v), (v))
FWD(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* id), (id))
FWD(ncclResult_t, ncclCommInitRank, (ncclComm_t* c, int n, ncclUniqueId id, int r), (c, n, id, r))
FWD(ncclResult_t, ncclCommDestroy, (ncclComm_t c), (c))
FWD(ncclResult_t, ncclCommAbort, (ncclComm_t c), (c))
FWD(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t c, ncclResult_t* e), (c, e))
FWD(const char*, ncclGetErrorString, (ncclResult_t r), (r))
FWD(const char*, ncclGetLastError, (ncclComm_t c), (c))
FWD(ncclResult_t, ncclGroupStart, (), ())
FWD(ncclResult_t, ncclGroupEnd, (), ())
FWD(ncclResult_t, ncclCommUserRank, (const ncclComm_t c, int* r), (c, r))
FWD(ncclResult_t, ncclCommCount, (const ncclComm_t c, int* n), (c, n))
FWD(ncclResult_t, ncclRedOpCreatePreMulSum,
    (ncclRedOp_t* op, void* s, ncclDataType_t t, ncclScalarResidence_t res, ncclComm_t c), (op, s, t, res, c))
FWD(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t c), (op, c))

static size_t eltSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

static ncclResult_t fault(ncclResult_t r, void* recv, size_t count, bool timesN, ncclDataType_t t,
                          ncclComm_t comm, cudaStream_t s) {
  const char* f = getenv("SHIM_FAULT");
  if (r != ncclSuccess || !f) return r;
  int rank = 0, n = 1;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &n);
  const size_t bytes = count * eltSize(t) * (timesN ? n : 1);
  if (!strcmp(f, "corrupt") && rank == 1 && bytes) cudaMemsetAsync(recv, 0x55, 1, s);
  if (!strcmp(f, "oob")) cudaMemsetAsync((char*)recv + bytes, 0x00, 1, s);
  if (!strcmp(f, "hang") && rank == 1) for (;;) pause();
  if (!strcmp(f, "crash") && rank == 1) abort();
  return r;
}

extern "C" ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t c, cudaStream_t st) {
  static auto f = REAL(ncclAllReduce);
  return fault(f(s, r, n, t, op, c, st), r, n, false, t, c, st);
}
extern "C" ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                                      cudaStream_t st) {
  static auto f = REAL(ncclAllGather);
  return fault(f(s, r, n, t, c, st), r, n, true, t, c, st);
}
extern "C" ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                          ncclComm_t c, cudaStream_t st) {
  static auto f = REAL(ncclReduceScatter);
  return fault(f(s, r, n, t, op, c, st), r, n, false, t, c, st);
}
extern "C" ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                                     cudaStream_t st) {
  using Fn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  static auto f = reinterpret_cast<Fn>(dlsym(real(), "ncclAlltoAll"));
  return fault(f(s, r, n, t, c, st), r, n, true, t, c, st);
}
extern "C" ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                                      cudaStream_t st) {
  static auto f = REAL(ncclBroadcast);
  return fault(f(s, r, n, t, root, c, st), r, n, false, t, c, st);
}
extern "C" ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                                   ncclComm_t c, cudaStream_t st) {
  static auto f = REAL(ncclReduce);
  return fault(f(s, r, n, t, op, root, c, st), r, n, false, t, c, st);
}
extern "C" ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  static auto f = REAL(ncclBcast);
  return fault(f(b, n, t, root, c, st), b, n, false, t, c, st);
}
