// rccl-tests-compat: shared harness for the *_perf benchmarks and rcclx_check.
//
// - NCCL libraries are dlopen'ed (RTLD_NOW|RTLD_LOCAL) into one function table each (struct Lib),
//   so one process can drive the stock library and rcclx side by side.
// - Multi-process without MPI: the launcher forks N processes before any CUDA call; they meet in
//   a MAP_SHARED anonymous mapping (struct Shared: unique ids, a process-shared barrier, reduction
//   slots, per-rank device info, a scratch area for cross-rank comparisons).
// - Collectives, datatypes and ops are small tables; per-type code is templated (Tr<T>) and
//   selected at run time by dispatchType().
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <string>
#include <vector>

// ------------------------------------------------------------------------------------------
// Errors: every CUDA / NCCL call is checked; a failure prints file:line and the error string and
// ends this process with a non-zero status (the launcher then stops the other processes).
// ------------------------------------------------------------------------------------------
[[noreturn]] void die(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Called once by die() with the message, before the process ends (the *_perf JSON output uses
// it to record the error). nullptr: none.
extern void (*g_dieHook)(const char* msg);
#define FAIL(...) die(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...) do { if (!(cond)) die(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CUDACHECK(cmd) do {                                                                   \
    cudaError_t e_ = (cmd);                                                                   \
    if (e_ != cudaSuccess)                                                                    \
      die(__FILE__, __LINE__, "CUDA error %s: %s, in: %s", cudaGetErrorName(e_),             \
          cudaGetErrorString(e_), #cmd);                                                      \
  } while (0)
struct Lib;
[[noreturn]] void ncclDie(const Lib& L, ncclResult_t r, const char* file, int line, const char* what);
#define NCCLCHECK(L, cmd) do {                                                                \
    ncclResult_t r_ = (cmd);                                                                  \
    if (r_ != ncclSuccess) ncclDie((L), r_, __FILE__, __LINE__, #cmd);                        \
  } while (0)

// ------------------------------------------------------------------------------------------
// One loaded NCCL-API library.
// ------------------------------------------------------------------------------------------
enum { kMaxLibs = 8, kMaxThreads = 64, kMaxRanks = 256, kMaxGpusPerThread = 16 };

struct Lib {
  std::string name, path;
  // Variables set while the library loads and answers its first call, and while its
  // communicators are created, then restored (rcclx reads its configuration at its first call
  // and its low-precision switches again per communicator), so that two copies of one library
  // can run side by side with different settings. Not while collectives run.
  std::vector<std::pair<std::string, std::string>> env;
  void* handle = nullptr;
  int version = 0;
  const char* alltoallSym = nullptr;  // "ncclAlltoAll" or "ncclAllToAll" (whichever exists)
  ncclResult_t (*getVersion)(int*) = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*getErrorString)(ncclResult_t) = nullptr;
  const char* (*getLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*alltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                           cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*bcast)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t) = nullptr;
  ncclResult_t (*redOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                                       ncclComm_t) = nullptr;
  ncclResult_t (*redOpDestroy)(ncclRedOp_t, ncclComm_t) = nullptr;
  // Buffer registration (*_perf -R); optional, checked only when -R asks for them.
  ncclResult_t (*memAlloc)(void**, size_t) = nullptr;
  ncclResult_t (*memFree)(void*) = nullptr;
  ncclResult_t (*commRegister)(ncclComm_t, void*, size_t, void**) = nullptr;
  ncclResult_t (*commDeregister)(ncclComm_t, void*) = nullptr;
  ncclResult_t (*commWindowRegister)(ncclComm_t, void*, size_t, ncclWindow_t*, int) = nullptr;
  ncclResult_t (*commWindowDeregister)(ncclComm_t, ncclWindow_t) = nullptr;

  void load();  // dlopen + dlsym; dies with dlerror() on failure
};

// "a=/p/libnccl.so.2,b=/q/librcclx.so" (or a bare path, named after its file). Empty spec:
// $RCCLX_BENCH_LIBS, else "nccl=libnccl.so.2" (found through LD_LIBRARY_PATH like nccl-tests).
// A name may carry variables for Lib::env: "int8[RCCLX_LOW_PRECISION_CODEC=int8;X=1]=/c/lib.so".
// Libraries with different variables must be different files (dlopen of one file gives one
// instance, which reads its environment once).
std::vector<Lib> parseLibs(const std::string& spec);

// ------------------------------------------------------------------------------------------
// Tables: datatypes, reduction ops, collectives.
// ------------------------------------------------------------------------------------------
struct TypeDesc { const char* name; ncclDataType_t type; int size; bool isFloat; int minVersion; };
extern const TypeDesc kTypes[];
extern const int kNumTypes;
const TypeDesc* findType(ncclDataType_t t);

enum OpId { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_MULSUM, OP_NONE };
struct OpDesc { const char* name; OpId id; ncclRedOp_t op; int minVersion; };
extern const OpDesc kOps[];  // sum prod max min avg mulsum
extern const int kNumOps;
extern const OpDesc kOpNone;

// One collective. kColls is indexed by CollId. The fields drive sizes, layouts, bandwidths,
// the root and op loops and the checks; only the calls themselves (runColl) and the meaning of
// an output element (sourceOf) are written per collective.
enum CollId { COLL_AR, COLL_AG, COLL_RS, COLL_A2A, COLL_BCAST, COLL_REDUCE };
struct CollDesc {
  const char* name;
  CollId id;
  bool reduces;  // takes a reduction op (-o); else op "none"
  bool rooted;   // takes a root rank (-r); else root -1
  // The send / receive buffer holds one chunk of `count` elements per rank (else one chunk).
  // Also nccl-tests' sizing (count = bytes/elt, or (bytes/elt/nranks) & -(16/elt) when either
  // holds per-rank chunks) and algbw (count*elt, times nranks when either does).
  bool sendPerRank, recvPerRank;
  bool inPlaceDefined;     // NCCL defines the in-place call (not alltoall): checked
  bool identicalOutputs;   // every rank's output is the same (rcclx_check's xrank check)
  bool rootOutput;         // only the root has an output (reduce): the others' are not checked
  double (*busFactor)(int nranks);  // nccl-tests: busbw = algbw * factor
  const char* inPlaceApi;  // a second, in-place-only entry point (ncclBcast), or nullptr
};
extern const CollDesc kColls[];
extern const int kNumColls;
const CollDesc* findColl(const char* name);  // "all_reduce", "allreduce", "all_reduce_perf", ...
std::string collNames(const char* sep);      // "all_reduce|all_gather|..." (usage texts)
const TypeDesc* findTypeByName(const std::string& name);  // nccl-tests names (+ a few aliases)
bool validTypeList(const std::string& arg);  // "all" or a comma list of known names
bool validOpList(const std::string& arg);
// "-d all" / "-o all" as nccl-tests: what the oldest loaded library supports (bf16/avg >= 2.10,
// mulsum >= 2.11, fp8 >= 2.24 and compute capability >= 9); else the listed names.
std::vector<const TypeDesc*> resolveTypes(const std::string& arg, int version, int ccMajor);
std::vector<const OpDesc*> resolveOps(const std::string& arg, int version);

// Element counts of one call, as nccl-tests' getCollByteCount (all in elements).
struct Layout {
  size_t count;          // the count argument of the NCCL call (per-rank count)
  size_t sendCount;      // elements in the send buffer
  size_t recvCount;      // elements in the receive buffer
  size_t sendInplace;    // in place: sendbuff = recvbuff + sendInplace*rank
  size_t recvInplace;    // in place: result at recvbuff + recvInplace*rank
};
Layout layoutFromCount(CollId c, size_t count, int nranks);  // count = NCCL count argument
Layout layoutFromBytes(CollId c, size_t bytes, int eltSize, int nranks);  // nccl-tests sizing
void getBw(CollId c, size_t count, int eltSize, double sec, int nranks, double* algBw,
           double* busBw);

// Issue one collective with library L (ops with premul scalar handled by makeOp()). root: the
// root rank of rooted collectives, ignored by the others. inPlaceApi: call the collective's
// in-place-only entry point (CollDesc::inPlaceApi, e.g. ncclBcast(recv, ...)); send == recv.
void runColl(const Lib& L, CollId c, const void* send, void* recv, size_t count,
             ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
             bool inPlaceApi = false);
// Reduction op for one call: the built-in op, or a PreMulSum op (scalar 1 on even ranks, 2 on
// odd ranks, like nccl-tests) that must be released with releaseOp().
ncclRedOp_t makeOp(const Lib& L, OpId op, ncclDataType_t type, int rank, ncclComm_t comm);
void releaseOp(const Lib& L, OpId op, ncclRedOp_t o, ncclComm_t comm);

// ------------------------------------------------------------------------------------------
// Per-type traits and value generators (host + device).
// ------------------------------------------------------------------------------------------
#define HD __host__ __device__ __forceinline__
template <class T> struct Tag { using type = T; };

template <class T> struct Tr {  // integer types
  static constexpr bool isFloat = false, isFp8 = false;
  static constexpr bool isSigned = (T)-1 < (T)0;
  static HD double toD(T v) { return (double)v; }
  static HD T fromD(double d) { return (T)(long long)d; }  // wraps modulo 2^bits
};
template <> struct Tr<float> {
  static constexpr bool isFloat = true, isFp8 = false, isSigned = true;
  static HD double toD(float v) { return v; }
  static HD float fromD(double d) { return (float)d; }
};
template <> struct Tr<double> {
  static constexpr bool isFloat = true, isFp8 = false, isSigned = true;
  static HD double toD(double v) { return v; }
  static HD double fromD(double d) { return d; }
};
template <> struct Tr<__half> {
  static constexpr bool isFloat = true, isFp8 = false, isSigned = true;
  static HD double toD(__half v) { return __half2float(v); }
  static HD __half fromD(double d) { return __double2half(d); }
};
template <> struct Tr<__nv_bfloat16> {
  static constexpr bool isFloat = true, isFp8 = false, isSigned = true;
  static HD double toD(__nv_bfloat16 v) { return __bfloat162float(v); }
  static HD __nv_bfloat16 fromD(double d) { return __double2bfloat16(d); }
};
template <> struct Tr<__nv_fp8_e4m3> {
  static constexpr bool isFloat = true, isFp8 = true, isSigned = true;
  static HD double toD(__nv_fp8_e4m3 v) { return (float)v; }
  static HD __nv_fp8_e4m3 fromD(double d) { return __nv_fp8_e4m3(d); }
};
template <> struct Tr<__nv_fp8_e5m2> {
  static constexpr bool isFloat = true, isFp8 = true, isSigned = true;
  static HD double toD(__nv_fp8_e5m2 v) { return (float)v; }
  static HD __nv_fp8_e5m2 fromD(double d) { return __nv_fp8_e5m2(d); }
};

template <class T> HD uint64_t bitsOf(T v) { uint64_t b = 0; memcpy(&b, &v, sizeof(T)); return b; }
// Distance in units in the last place (0 = bit-identical, +0 == -0). Integers: 0 or UINT64_MAX.
template <class T> HD uint64_t ulpDist(T a, T b) {
  uint64_t x = bitsOf(a), y = bitsOf(b);
  if (x == y) return 0;
  if (!Tr<T>::isFloat) return ~0ull;
  const int nb = 8 * sizeof(T);
  const uint64_t sign = 1ull << (nb - 1), mag = sign - 1;
  int64_t ox = (x & sign) ? -(int64_t)(x & mag) : (int64_t)(x & mag);
  int64_t oy = (y & sign) ? -(int64_t)(y & mag) : (int64_t)(y & mag);
  return ox >= oy ? (uint64_t)ox - (uint64_t)oy : (uint64_t)oy - (uint64_t)ox;
}

template <class F> auto dispatchType(ncclDataType_t t, F&& f) {
  switch (t) {
    case ncclInt8: return f(Tag<int8_t>());
    case ncclUint8: return f(Tag<uint8_t>());
    case ncclInt32: return f(Tag<int32_t>());
    case ncclUint32: return f(Tag<uint32_t>());
    case ncclInt64: return f(Tag<int64_t>());
    case ncclUint64: return f(Tag<uint64_t>());
    case ncclFloat16: return f(Tag<__half>());
    case ncclFloat32: return f(Tag<float>());
    case ncclFloat64: return f(Tag<double>());
    case ncclBfloat16: return f(Tag<__nv_bfloat16>());
    case ncclFloat8e4m3: return f(Tag<__nv_fp8_e4m3>());
    case ncclFloat8e5m2: return f(Tag<__nv_fp8_e5m2>());
    default: FAIL("unsupported datatype %d", (int)t);
  }
}

HD uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
HD uint64_t hash3(uint64_t seed, uint64_t a, uint64_t b) { return mix64(seed ^ mix64(a ^ mix64(b))); }

// Input values. mode EXACT (the *_perf check): small integers chosen so that every partial
// result of the op is exactly representable, whatever the reduction order. mode RANDOM
// (rcclx_check): seeded pseudo-random values (normal-ish floats with negatives; for prod
// magnitudes near 1; full-range integers, or a range whose sum cannot overflow for avg).
enum GenMode { GEN_EXACT = 0, GEN_RANDOM = 1 };
struct GenParams { int mode; int op; int nranks; uint64_t seed; };

template <class T> HD double exactVal(int op, int r, int n, size_t j, uint64_t seed) {
  const uint64_t hr = hash3(seed, (uint64_t)r + 1, j), h = hash3(seed, 0, j);
  const bool uns = !Tr<T>::isSigned, fp8 = Tr<T>::isFp8;
  switch (op) {
    case OP_SUM: case OP_MULSUM:
      return fp8 ? (double)(int)(hr % 3) - 1 : uns ? (double)(hr % 9) : (double)(int)(hr % 9) - 4;
    case OP_AVG: {  // base + (one rank adds n*k): the average is base+k exactly
      double base = fp8 ? (double)(int)(h % 3) - 1 : uns ? (double)(h % 9) : (double)(int)(h % 9) - 4;
      int k = (int)((h >> 20) % 3);
      if ((Tr<T>::isFloat && (n & (n - 1))) || (fp8 && n > 4)) k = 0;  // keep x/n exact
      return base + ((size_t)r == j % n ? (double)n * k : 0.0);
    }
    case OP_PROD: {  // 1 almost everywhere; one rank may contribute 2, another -1
      double v = ((size_t)r == j % n && h % 4 == 0) ? 2.0 : 1.0;
      if (!uns && (size_t)r == (j + 1) % n && (h >> 8) % 5 == 0) v = -v;
      return v;
    }
    default:  // min, max, and the data of all_gather / alltoall (never 0x7F: the poison byte)
      return fp8 ? (double)(int)(hr % 17) - 8 : uns ? (double)(hr % 101) : (double)(int)(hr % 101) - 50;
  }
}

template <class T> HD T genVal(const GenParams& p, uint64_t seed, int r, size_t j) {
  if (p.mode == GEN_EXACT) return Tr<T>::fromD(exactVal<T>(p.op, r, p.nranks, j, seed));
  const uint64_t h = hash3(seed, (uint64_t)r + 1, j);
  if constexpr (Tr<T>::isFloat) {
    // Irwin-Hall(4) - 2: exact in double, same bits on host and device.
    const double u = 1.0 / 16777216.0;
    double s = (double)(h >> 40) * u + (double)((h >> 16) & 0xFFFFFF) * u +
               (double)(mix64(h) >> 40) * u + (double)(mix64(h + 1) >> 40) * u - 2.0;
    if (p.op == OP_PROD) return Tr<T>::fromD((1.0 + 0.0625 * s) * ((h & 15) == 0 ? -1.0 : 1.0));
    return Tr<T>::fromD(2.0 * s);
  } else {
    if (p.op == OP_AVG) {  // |sum over ranks| fits in T
      const int nb = 8 * (int)sizeof(T) - (Tr<T>::isSigned ? 1 : 0);
      const uint64_t lim = (nb >= 64 ? ~0ull : (1ull << nb) - 1) / (uint64_t)p.nranks;
      const uint64_t m = h % (lim + (lim < ~0ull ? 1 : 0));
      if (Tr<T>::isSigned) return (T)((h >> 63) ? -(int64_t)(m / 2) : (int64_t)(m / 2));
      return (T)m;
    }
    return (T)h;  // full-range integer (sums and products wrap like NCCL)
  }
}

// What output element i of collective c on 'rank' holds: input element *j of rank *src (data
// movement), or the reduction over all ranks of their input element *j (*src = -1).
HD void sourceOf(CollId c, size_t count, int rank, int root, size_t i, int* src, size_t* j) {
  switch (c) {
    case COLL_AR: *src = -1; *j = i; return;
    case COLL_RS: *src = -1; *j = (size_t)rank * count + i; return;
    case COLL_AG: *src = (int)(i / count); *j = i % count; return;       // chunk r from rank r
    case COLL_A2A: *src = (int)(i / count); *j = (size_t)rank * count + i % count; return;
    case COLL_BCAST: *src = root; *j = i; return;                          // the root's input
    case COLL_REDUCE: *src = -1; *j = i; return;                           // on the root only
  }
  *src = -1; *j = i;
}

// Device-side helpers (common.cu). All run on 'stream' of the current device.
// Fill buf[i] = genVal(rank, j0 + i), seed = p.seed (+ *epoch mixed in when epoch != nullptr).
void launchFill(ncclDataType_t t, void* buf, size_t n, size_t j0, int rank, const GenParams& p,
                const uint64_t* epoch, cudaStream_t s);
// nccl-tests "#wrong": compare 'out' (recvCount elements) with the exact expected result of
// collective c on rank 'rank' (root: of rooted collectives); adds the number of elements
// further than ulpTol to *bad.
void launchVerify(ncclDataType_t t, const void* out, CollId c, const Layout& L, int rank, int root,
                  const GenParams& p, uint64_t ulpTol, unsigned long long* bad, cudaStream_t s);
// Adds to *bad the number of elements of buf that differ from genVal(rank, j0 + i).
void launchCountInputChanges(ncclDataType_t t, const void* buf, size_t n, size_t j0, int rank,
                             const GenParams& p, const uint64_t* epoch, unsigned long long* bad,
                             cudaStream_t s);
void launchBump(uint64_t* epoch, cudaStream_t s);  // (*epoch)++ on the device

// ------------------------------------------------------------------------------------------
// Processes, threads, rendezvous.
// ------------------------------------------------------------------------------------------
struct RankInfo { int pid, dev; char bus[32]; char name[256]; char host[64]; };
struct Shared {
  pthread_barrier_t barrier;  // process-shared; count = nprocs * nthreads
  ncclUniqueId ids[kMaxLibs];
  double slots[2][kMaxThreads][8];  // reduction slots, double-buffered (see Thr::allreduce)
  RankInfo info[kMaxRanks];
  size_t refBytes;               // size of the scratch area that follows this struct
  unsigned char* ref() { return (unsigned char*)this + sizeof(Shared); }
};

struct Topo {
  int nprocs = 1, nthreads = 1, ngpus = 1;
  int nranks() const { return nprocs * nthreads * ngpus; }
};

enum RedMode { RED_SUM, RED_AVG, RED_MIN, RED_MAX, RED_R0 };

struct Proc;
struct Thr {  // one host thread of one process; drives ngpus GPUs (= ranks)
  Proc* p = nullptr;
  int thread = 0, gtid = 0;  // thread index in the process; global thread index
  int gpu[kMaxGpusPerThread], rank[kMaxGpusPerThread];
  cudaStream_t stream[kMaxGpusPerThread] = {};
  ncclComm_t comm[kMaxLibs][kMaxGpusPerThread] = {};
  int parity = 0;
  bool isMain() const { return gtid == 0; }
  void barrier();  // all threads of all processes
  // Reduce v[0..n) over all threads of all processes; modes[k] is a RedMode.
  void allreduce(double* v, int n, const int* modes);
  double allreduce1(double v, int mode) { allreduce(&v, 1, &mode); return v; }
  // Wait for all streams of this thread, polling ncclCommGetAsyncError like nccl-tests.
  void syncStreams(int lib);
};

struct Proc {  // one process
  Topo topo;
  int proc = 0;
  Shared* sh = nullptr;
  std::vector<Lib> libs;
  std::vector<Thr> thr;
  int minVersion() const;
};

// Set up process 'proc': load libraries, check devices, lay out threads/GPUs/ranks
// (GPU = $NCCL_TESTS_DEVICE or 0, + (proc*nthreads + thread)*ngpus + i).
void procSetup(Proc& P, int proc, const Topo& topo, Shared* sh, const std::string& libSpec);
// Per thread: set device, create streams (null streams if nullStream), record RankInfo.
void thrSetup(Thr& t, bool nullStream);
// Create one communicator per GPU per library with ncclCommInitRank: by the process' first thread
// for all its threads (inside one group per library when it inits more than one), or by every
// thread for its own GPUs when parallel. All threads of all processes must call it.
void initComms(Thr& t, bool parallel);
void destroyComms(Thr& t);
// Run body(thread) in nthreads host threads of this process (thread 0 = caller); join.
void runThreads(Proc& P, void (*body)(Thr&));

// Launcher: create the shared area, run procMain(proc) in nprocs forked processes (or in this
// process when nprocs == 1), wait with a timeout, kill the others when one fails. Returns the
// exit status for main(). Call before any CUDA call.
Shared* createShared(const Topo& topo, size_t refBytes);
int launch(int nprocs, int timeoutSec, int (*procMain)(int proc));

// Command-line helpers. A usage error (unknown option, bad value, missing argument) prints
// its message on stderr and ends the program with exit status 2, as a setup error does.
[[noreturn]] void usageError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// The integer in v (decimal, the whole string) within [lo, hi]; else a usage error naming opt.
long long parseIntArg(const char* v, const char* opt, long long lo, long long hi);
double parseDoubleArg(const char* v, const char* opt);  // a finite number; else a usage error
double parseSize(const char* s);  // "4096", "1.5M", "32K": K/M/G suffixes are binary; <0 on error
std::vector<std::string> split(const std::string& s, char sep);
void setDefaultEnv();             // NCCL_NVLS_ENABLE=0 unless set
void printDevices(const Proc& P);  // "# Using devices" block (from the shared RankInfo)
cudaStreamCaptureMode captureMode(const std::string& name, int nthreads);
