// fidelity: does rcclx (librcclx.so, LD_PRELOAD'ed in front of the stock libnccl.so.2) behave
// exactly like stock NCCL? run.sh runs this program twice, plain and with rcclx preloaded, and
// diffs the "CASE ..." lines; "#" lines are information (timings, rcclx's route statistics).
//
// Only the public NCCL API (nccl.h) and the CUDA runtime are used. Every case runs in freshly
// forked processes (2 processes, one GPU each, or 1 process driving both GPUs). They are forked
// before any CUDA call and share a unique id and a process-shared barrier through a MAP_SHARED
// anonymous mapping. The parent never touches CUDA or NCCL; it enforces a time limit per case
// and kills the case's processes when it expires, so one stuck case cannot hang the run.
//
// A CASE line ends with ok=1 or ok=0. ok only uses facts that must hold for stock NCCL too
// (wrong elements, ranks agreeing, a stream completing); everything else on the line is there
// to be compared between the two runs.
#include <cuda_runtime.h>
#include <nccl.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr int kRanks = 2;  // every communicator here has 2 ranks, on devices 0 and 1
constexpr double kStreamLimitS = 60;  // bound on every ordinary stream wait

// ------------------------------------------------------------------------------------------
// Output. Each line is one write(2), so lines of concurrent processes never interleave.
// ------------------------------------------------------------------------------------------
std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::string s(n > 0 ? (size_t)n : 0, '\0');
  if (n > 0) vsnprintf(&s[0], (size_t)n + 1, fmt, ap);
  return s;
}

__attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void writeLine(std::string s) {
  s += '\n';
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = write(1, s.data() + off, s.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += (size_t)w;
  }
}

__attribute__((format(printf, 1, 2))) void line(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  writeLine(vformat(fmt, ap));
  va_end(ap);
}

// ------------------------------------------------------------------------------------------
// Errors: reported as "# ERROR" lines with file:line; the check macros then return false, and
// a case that returns false makes its process exit with status 1 (the parent prints FAILED).
// ------------------------------------------------------------------------------------------
const char* g_case = "main";
int g_proc = -1;

__attribute__((format(printf, 3, 4))) void report(const char* file, int ln, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  line("# ERROR [%s proc %d] %s:%d: %s", g_case, g_proc, file, ln, msg.c_str());
}

const char* lastError() {
  const char* s = ncclGetLastError(nullptr);
  return s && *s ? s : "-";
}

#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      report(__FILE__, __LINE__, __VA_ARGS__);    \
      return false;                               \
    }                                             \
  } while (0)

#define CUDA_OK(call)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    CHECK(e_ == cudaSuccess, "%s: %s (%s)", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
  } while (0)

#define NCCL_OK(call)                                                                            \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    CHECK(r_ == ncclSuccess, "%s: NCCL error %d (%s), last error: %s", #call, (int)r_,           \
          ncclGetErrorString(r_), lastError());                                                  \
  } while (0)

// Runs a bool-returning step; a failure propagates.
#define STEP(call)          \
  do {                      \
    if (!(call)) return false; \
  } while (0)

// ------------------------------------------------------------------------------------------
// Small helpers
// ------------------------------------------------------------------------------------------
double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sleepMs(double ms) {
  if (ms <= 0) return;
  timespec ts;
  ts.tv_sec = (time_t)(ms / 1000);
  ts.tv_nsec = (long)((ms - 1000.0 * (double)ts.tv_sec) * 1e6);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

long envLong(const char* name, long def) {
  const char* v = getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  return end && *end == '\0' && x >= 0 ? x : def;
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// ------------------------------------------------------------------------------------------
// rcclx's route statistics, found with dlsym only when rcclx is preloaded.
// ------------------------------------------------------------------------------------------
struct RcclxRouteStats {
  uint64_t calls, bytes;
};
using GetRouteStatsFn = ncclResult_t (*)(ncclComm_t, RcclxRouteStats*, int, int*);
using RouteNameFn = const char* (*)(int);
using RevokeFn = ncclResult_t (*)(ncclComm_t, int);
GetRouteStatsFn g_routeStats = nullptr;
RouteNameFn g_routeName = nullptr;
// What this process's route lines showed, per rank (summed over the case's lines): route -> calls.
std::map<std::string, uint64_t> g_routesSeen[kRanks];
bool g_routesPrinted[kRanks] = {};

void lookupRcclx() {
  g_routeStats = reinterpret_cast<GetRouteStatsFn>(dlsym(RTLD_DEFAULT, "rcclxCommGetRouteStats"));
  g_routeName = reinterpret_cast<RouteNameFn>(dlsym(RTLD_DEFAULT, "rcclxRouteName"));
  if (!g_routeStats || !g_routeName) g_routeStats = nullptr, g_routeName = nullptr;
}

// "# <case> <label> routes: allreduce.ll=400 forwarded=0": the routes with calls, and always
// "forwarded". Call before the communicator is destroyed.
void printRoutes(const std::string& label, ncclComm_t comm) {
  if (!g_routeStats || !comm) return;
  int count = 0;
  ncclResult_t r = g_routeStats(comm, nullptr, 0, &count);
  if (r != ncclSuccess || count < 0) {
    line("# %s %s routes: rcclxCommGetRouteStats returned %d", g_case, label.c_str(), (int)r);
    return;
  }
  std::vector<RcclxRouteStats> s((size_t)count);
  int filled = 0;
  r = g_routeStats(comm, s.data(), count, &filled);
  if (r != ncclSuccess) {
    line("# %s %s routes: rcclxCommGetRouteStats returned %d", g_case, label.c_str(), (int)r);
    return;
  }
  std::string text;
  int rank = -1;
  if (sscanf(label.c_str(), "rank%d", &rank) != 1 || rank < 0 || rank >= kRanks) rank = -1;
  if (rank >= 0) g_routesPrinted[rank] = true;
  for (int i = 0; i < std::min(count, filled); i++) {
    const char* name = g_routeName(i);
    if (name && (s[(size_t)i].calls > 0 || strcmp(name, "forwarded") == 0))
      text += format(" %s=%" PRIu64, name, s[(size_t)i].calls);
    if (name && rank >= 0) g_routesSeen[rank][name] += s[(size_t)i].calls;
  }
  line("# %s %s routes:%s", g_case, label.c_str(), text.empty() ? " (none)" : text.c_str());
}

// ------------------------------------------------------------------------------------------
// Shared mapping and per-process context
// ------------------------------------------------------------------------------------------
constexpr int kMaxProcs = 2;

struct Shared {
  pthread_barrier_t barrier;
  ncclUniqueId ids[2];          // communicators made by rank 0's process, handed to the others
  int64_t slots[kMaxProcs];     // one value per process for sumAll/maxAll/gather
  int failedLines;              // CASE lines with ok=0 (written by process 0)
  // probe results (see probe())
  int probeDone, ndev, ncclVersion, canPeer;
  char probeError[256], names[kMaxProcs][128];
};

struct Ctx;
struct Case {
  const char* name;
  int nprocs;  // 2: one GPU per process; 1: one process drives both GPUs
  bool (*run)(Ctx&);
  long arg;         // a case parameter (bytes per call, variant)
  const char* env;  // "NAME=VALUE" set in the case's processes before any NCCL call, or null
  const char* what;
  // With rcclx: the routes each rank's calls must have taken, summed over the case's route
  // lines ("allreduce.ll": at least one call; "forwarded=0": none), or null (not checked).
  const char* routes;
};

enum { kAbortStock = 0, kAbortRcclx = 1, kCreate = 0, kDestroy = 1 };

struct Ctx {
  const Case* cs;
  int proc;    // 0 or 1 (2-process cases), 0 (1-process cases)
  int nprocs;  // 2 or 1
  Shared* sh;
  void barrier() const { pthread_barrier_wait(&sh->barrier); }
};

// One value per process, visible to all: write, barrier, read, barrier (so the next call cannot
// overwrite a slot that a slower process has not read yet).
std::vector<int64_t> gather(const Ctx& c, int64_t v) {
  c.sh->slots[c.proc] = v;
  c.barrier();
  std::vector<int64_t> all(c.sh->slots, c.sh->slots + c.nprocs);
  c.barrier();
  return all;
}
int64_t sumAll(const Ctx& c, int64_t v) {
  int64_t s = 0;
  for (int64_t x : gather(c, v)) s += x;
  return s;
}
int64_t maxAll(const Ctx& c, int64_t v) {
  std::vector<int64_t> g = gather(c, v);
  return *std::max_element(g.begin(), g.end());
}
int64_t minAll(const Ctx& c, int64_t v) {
  std::vector<int64_t> g = gather(c, v);
  return *std::min_element(g.begin(), g.end());
}
// "a,b": one value per process (for return codes that might differ between ranks).
std::string perProc(const Ctx& c, int64_t v) {
  std::string s;
  for (int64_t x : gather(c, v)) s += format("%s%lld", s.empty() ? "" : ",", (long long)x);
  return s;
}

// The result line of a case: "CASE <name> <text> ok=<0|1>", printed by process 0 only.
__attribute__((format(printf, 3, 4))) void caseLine(const Ctx& c, bool ok, const char* fmt, ...) {
  if (c.proc != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::string text = vformat(fmt, ap);
  va_end(ap);
  writeLine(format("CASE %s %s ok=%d", c.cs->name, text.c_str(), ok ? 1 : 0));
  if (!ok) c.sh->failedLines++;
}

// ------------------------------------------------------------------------------------------
// Ranks driven by this process, communicators
// ------------------------------------------------------------------------------------------
struct Local {
  int rank = 0, dev = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::string label() const { return format("rank%d", rank); }
};

// Rank `proc` for 2-process cases, ranks 0 and 1 for 1-process cases; a non-blocking stream each.
bool makeLocals(const Ctx& c, std::vector<Local>& L) {
  L.clear();
  for (int r = 0; r < kRanks; r++) {
    if (c.nprocs != 1 && r != c.proc) continue;
    Local l;
    l.rank = l.dev = r;
    CUDA_OK(cudaSetDevice(l.dev));
    CUDA_OK(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
    L.push_back(l);
  }
  CUDA_OK(cudaSetDevice(L[0].dev));
  return true;
}

// Rank 0's process creates a unique id in slot `slot`; all processes return it.
bool shareId(const Ctx& c, int slot, ncclUniqueId* id) {
  if (c.proc == 0) NCCL_OK(ncclGetUniqueId(&c.sh->ids[slot]));
  c.barrier();
  *id = c.sh->ids[slot];
  return true;
}

// One communicator per local rank (in a group when one process drives both GPUs).
bool initComms(const Ctx& c, std::vector<Local>& L, int slot) {
  ncclUniqueId id;
  if (c.nprocs == 1) NCCL_OK(ncclGetUniqueId(&id));
  else STEP(shareId(c, slot, &id));
  if (L.size() > 1) NCCL_OK(ncclGroupStart());
  for (Local& l : L) {
    CUDA_OK(cudaSetDevice(l.dev));
    NCCL_OK(ncclCommInitRank(&l.comm, kRanks, id, l.rank));
  }
  if (L.size() > 1) NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaSetDevice(L[0].dev));
  return true;
}

// Prints the routes, then destroys (never-finalized, blocking) communicators one by one:
// ncclCommDestroy is local, so one thread may destroy both ranks' communicators in turn.
bool destroyComms(std::vector<Local>& L, const char* suffix = "") {
  for (Local& l : L) printRoutes(l.label() + suffix, l.comm);
  for (Local& l : L) {
    if (!l.comm) continue;
    CUDA_OK(cudaSetDevice(l.dev));
    NCCL_OK(ncclCommDestroy(l.comm));
    l.comm = nullptr;
  }
  return true;
}

// Polls `s` until it is idle (*done = true) or `limitS` seconds pass (*done = false).
// A CUDA error fails (the error is reported).
bool waitStream(cudaStream_t s, double limitS, bool* done) {
  const double deadline = now() + limitS;
  *done = false;
  while (true) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) {
      *done = true;
      return true;
    }
    CHECK(e == cudaErrorNotReady, "cudaStreamQuery: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    if (now() > deadline) return true;
    usleep(100);
  }
}

bool syncStream(cudaStream_t s, const char* what) {
  bool done = false;
  STEP(waitStream(s, kStreamLimitS, &done));
  CHECK(done, "%s did not complete within %.0f s", what, kStreamLimitS);
  return true;
}

bool syncLocals(const std::vector<Local>& L) {
  for (const Local& l : L) STEP(syncStream(l.stream, "stream"));
  return true;
}

// Polls ncclCommGetAsyncError until the state is not ncclInProgress or `deadline` passes.
bool pollState(ncclComm_t comm, double deadline, ncclResult_t* state) {
  while (true) {
    NCCL_OK(ncclCommGetAsyncError(comm, state));
    if (*state != ncclInProgress || now() > deadline) return true;
    usleep(200);
  }
}

// ------------------------------------------------------------------------------------------
// Device memory helpers. Uploads from pageable memory may still be in flight when cudaMemcpy
// returns and memsets run on the legacy stream, while NCCL runs on non-blocking streams, so
// both wait for the legacy stream before returning.
// ------------------------------------------------------------------------------------------
bool upload(int dev, void* dst, const void* src, size_t bytes) {
  CUDA_OK(cudaSetDevice(dev));
  CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  return true;
}

bool setBytes(int dev, void* dst, int byte, size_t bytes) {
  CUDA_OK(cudaSetDevice(dev));
  CUDA_OK(cudaMemset(dst, byte, bytes));
  CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  return true;
}

bool download(void* dst, const void* src, size_t bytes) {
  CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return true;
}

// Float AllReduce inputs: small integers, so every sum is exact and has one right answer.
float inVal(size_t j, int rank, int tag) {
  return (float)(long)((j * 7 + (size_t)tag * 13 + (size_t)rank * 101) % 1021) - 510.0f;
}
float sumVal(size_t j, int tag) {
  return inVal(j, 0, tag) + inVal(j, 1, tag);
}

// An out-of-place float sum AllReduce of one rank: input filled for (rank, tag), output poisoned.
struct ArBuf {
  int dev = 0, rank = 0, tag = 0;
  size_t n = 0;
  float* in = nullptr;
  float* out = nullptr;
};

bool arFill(ArBuf& b, int tag) {
  b.tag = tag;
  std::vector<float> h(b.n);
  for (size_t j = 0; j < b.n; j++) h[j] = inVal(j, b.rank, tag);
  STEP(upload(b.dev, b.in, h.data(), b.n * sizeof(float)));
  return setBytes(b.dev, b.out, 0xff, b.n * sizeof(float));  // NaN: never a right answer
}

bool arAlloc(ArBuf& b, const Local& l, size_t bytes, int tag) {
  b.dev = l.dev;
  b.rank = l.rank;
  b.n = bytes / sizeof(float);
  CUDA_OK(cudaSetDevice(b.dev));
  CUDA_OK(cudaMalloc(&b.in, b.n * sizeof(float)));
  CUDA_OK(cudaMalloc(&b.out, b.n * sizeof(float)));
  return arFill(b, tag);
}

void arFree(ArBuf& b) {
  cudaSetDevice(b.dev);
  cudaFree(b.in);
  cudaFree(b.out);
  b.in = b.out = nullptr;
}

// Adds the number of wrong output elements to *wrong (the stream must be idle).
bool arCount(const ArBuf& b, int64_t* wrong) {
  std::vector<float> h(b.n);
  STEP(download(h.data(), b.out, b.n * sizeof(float)));
  for (size_t j = 0; j < b.n; j++) *wrong += h[j] != sumVal(j, b.tag);
  return true;
}

bool arIssue(const ArBuf& b, ncclComm_t comm, cudaStream_t s) {
  CUDA_OK(cudaSetDevice(b.dev));
  NCCL_OK(ncclAllReduce(b.in, b.out, b.n, ncclFloat32, ncclSum, comm, s));
  return true;
}

// One AllReduce per local rank (B[i] belongs to L[i]), grouped when there are several.
bool arIssueAll(std::vector<Local>& L, std::vector<ArBuf>& B) {
  if (L.size() > 1) NCCL_OK(ncclGroupStart());
  for (size_t i = 0; i < L.size(); i++) STEP(arIssue(B[i], L[i].comm, L[i].stream));
  if (L.size() > 1) NCCL_OK(ncclGroupEnd());
  return true;
}

// A checked AllReduce of `bytes` on every local rank: allocate, run, wait, count, free.
bool arChecked(std::vector<Local>& L, size_t bytes, int tag, int64_t* wrong) {
  std::vector<ArBuf> B(L.size());
  for (size_t i = 0; i < L.size(); i++) STEP(arAlloc(B[i], L[i], bytes, tag));
  STEP(arIssueAll(L, B));
  STEP(syncLocals(L));
  for (ArBuf& b : B) STEP(arCount(b, wrong));
  for (ArBuf& b : B) arFree(b);
  return true;
}

int64_t asyncErrors(const std::vector<Local>& L) {
  int64_t worst = 0;
  for (const Local& l : L) {
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(l.comm, &a);
    worst = std::max<int64_t>(worst, r != ncclSuccess ? 1000 + (int)r : (int)a);
  }
  return worst;
}

// ==========================================================================================
// Cases
// ==========================================================================================

// ------------------------------------------------------------------------------------------
// two-streams-<size>: 200 AllReduces on one communicator, alternating between two streams,
// issued without any host synchronization, each with its own buffers.
bool caseTwoStreams(Ctx& c) {
  const size_t bytes = (size_t)c.cs->arg, n = bytes / sizeof(float);
  const int rounds = 200;  // 200 x 2 x 4 MiB = 1.6 GB at the largest size: fits on an H200
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  Local& l = L[0];
  cudaStream_t other;
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  float *in = nullptr, *out = nullptr;
  CUDA_OK(cudaMalloc(&in, rounds * bytes));
  CUDA_OK(cudaMalloc(&out, rounds * bytes));
  std::vector<float> h(n);
  for (int i = 0; i < rounds; i++) {
    for (size_t j = 0; j < n; j++) h[j] = inVal(j, l.rank, i);
    STEP(upload(l.dev, in + i * n, h.data(), bytes));
  }
  STEP(setBytes(l.dev, out, 0xff, rounds * bytes));
  c.barrier();

  const double t0 = now();
  for (int i = 0; i < rounds; i++)
    NCCL_OK(ncclAllReduce(in + i * n, out + i * n, n, ncclFloat32, ncclSum, l.comm, i % 2 ? other : l.stream));
  const double t1 = now();
  STEP(syncStream(l.stream, "stream A"));
  STEP(syncStream(other, "stream B"));
  const double t2 = now();

  int64_t wrong = 0;
  for (int i = 0; i < rounds; i++) {
    STEP(download(h.data(), out + i * n, bytes));
    for (size_t j = 0; j < n; j++) wrong += h[j] != sumVal(j, i);
  }
  line("# %s rank%d: %d calls issued in %.3f ms, all done after %.3f ms", g_case, l.rank, rounds,
       1e3 * (t1 - t0), 1e3 * (t2 - t0));
  const int64_t wrongAll = sumAll(c, wrong), async = maxAll(c, asyncErrors(L));
  caseLine(c, wrongAll == 0 && async == 0, "wrong=%lld async=%lld", (long long)wrongAll, (long long)async);
  STEP(destroyComms(L));
  cudaFree(in);
  cudaFree(out);
  cudaStreamDestroy(other);
  return true;
}

// ------------------------------------------------------------------------------------------
// slow-peer: rank 1 arrives FIDELITY_SLOW_MS late at a 16 KiB AllReduce; rank 0's stream must
// still complete with the right result (no time limit on a late peer by default).
bool caseSlowPeer(Ctx& c) {
  const long slowMs = envLong("FIDELITY_SLOW_MS", 5000);
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  Local& l = L[0];
  int64_t warmWrong = 0;  // a first call sets up the connections: the late call then waits on the GPU
  STEP(arChecked(L, 16 << 10, 1, &warmWrong));
  ArBuf b;
  STEP(arAlloc(b, l, 16 << 10, 2));
  c.barrier();

  if (l.rank == 1) sleepMs((double)slowMs);
  const double t0 = now();
  STEP(arIssue(b, l.comm, l.stream));
  bool done = false;
  STEP(waitStream(l.stream, kStreamLimitS, &done));
  const double waited = now() - t0;
  int64_t wrong = (int64_t)b.n;
  if (done) {
    wrong = 0;
    STEP(arCount(b, &wrong));
  }
  line("# %s rank%d: waited %.3f s (peer late by %ld ms), done=%d", g_case, l.rank, waited, slowMs, done ? 1 : 0);
  const int64_t allDone = minAll(c, done), wrongAll = sumAll(c, wrong + warmWrong);
  const int64_t async = maxAll(c, asyncErrors(L));
  caseLine(c, allDone && wrongAll == 0 && async == 0, "done=%lld wrong=%lld async=%lld", (long long)allDone,
           (long long)wrongAll, (long long)async);
  printRoutes(l.label(), l.comm);
  if (!allDone) {  // a stuck operation: destroying would wait for it
    NCCL_OK(ncclCommAbort(l.comm));
    return true;
  }
  arFree(b);
  CUDA_OK(cudaSetDevice(l.dev));
  NCCL_OK(ncclCommDestroy(l.comm));
  return true;
}

// ------------------------------------------------------------------------------------------
// reductions-<layout>: special values of every type under every op. The pattern is a list of
// (rank 0 value, rank 1 value) bit patterns; results are compared bit for bit between stock
// and rcclx through the printed bits (small count) or an FNV-1a hash (large counts).
struct TypeInfo {
  const char* name;
  ncclDataType_t type;
  int size;
  char kind;  // 'f' IEEE binary format (E exponent, M mantissa bits), 'i' signed, 'u' unsigned
  int E, M;
};
const TypeInfo kTypes[] = {
    {"float", ncclFloat32, 4, 'f', 8, 23},  {"half", ncclFloat16, 2, 'f', 5, 10}, {"bfloat16", ncclBfloat16, 2, 'f', 8, 7},
    {"double", ncclFloat64, 8, 'f', 11, 52}, {"int8", ncclInt8, 1, 'i', 0, 0},     {"uint8", ncclUint8, 1, 'u', 0, 0},
    {"int32", ncclInt32, 4, 'i', 0, 0},     {"uint32", ncclUint32, 4, 'u', 0, 0}, {"int64", ncclInt64, 8, 'i', 0, 0},
    {"uint64", ncclUint64, 8, 'u', 0, 0},
};
struct OpInfo {
  const char* name;
  ncclRedOp_t op;
};
const OpInfo kOps[] = {{"sum", ncclSum}, {"prod", ncclProd}, {"max", ncclMax}, {"min", ncclMin}, {"avg", ncclAvg}};

using Pair = std::pair<uint64_t, uint64_t>;

// Bit patterns of an IEEE binary format with E exponent and M mantissa bits.
struct FloatFormat {
  int E, M;
  uint64_t bits(int s, uint64_t e, uint64_t m) const { return ((uint64_t)s << (E + M)) | (e << M) | m; }
  uint64_t emax() const { return (1ull << E) - 1; }
  int bias() const { return (1 << (E - 1)) - 1; }
  uint64_t inf(int s) const { return bits(s, emax(), 0); }
  uint64_t qnan(int s, uint64_t payload) const { return bits(s, emax(), (1ull << (M - 1)) | payload); }
  uint64_t snan(int s, uint64_t payload) const { return bits(s, emax(), payload); }  // payload != 0
  uint64_t zero(int s) const { return bits(s, 0, 0); }
  uint64_t minSub(int s) const { return bits(s, 0, 1); }
  uint64_t maxSub(int s) const { return bits(s, 0, (1ull << M) - 1); }
  uint64_t minNormal(int s) const { return bits(s, 1, 0); }
  uint64_t maxFinite(int s) const { return bits(s, emax() - 1, (1ull << M) - 1); }
  // An exactly representable (dyadic) value; anything else is a bug in the pattern.
  uint64_t val(double v) const {
    const int s = std::signbit(v) ? 1 : 0;
    const double a = std::fabs(v);
    if (a == 0) return zero(s);
    int ex = 0;
    const double fr = std::frexp(a, &ex);  // a = fr * 2^ex, fr in [0.5, 1)
    long e = ex - 1 + bias();
    const double m = e >= 1 ? std::ldexp(fr * 2 - 1, M) : std::ldexp(a, bias() - 1 + M);
    if (e < 1) e = 0;
    if (m != std::floor(m) || e >= (long)emax()) {
      fprintf(stderr, "fidelity: internal error: %g is not exact with E=%d M=%d\n", v, E, M);
      abort();
    }
    return bits(s, (uint64_t)e, (uint64_t)m);
  }
};

std::vector<Pair> floatPattern(const FloatFormat& F) {
  const uint64_t one = F.val(1), mone = F.val(-1);
  const double h = std::ldexp(1.0, -(F.M + 1));            // half an ulp of 1
  const double big = std::ldexp(1.0, F.bias() / 2 + 1);   // big * big overflows
  return {
      // NaN on rank 0 only, rank 1 only, both (payloads and signs differ), signalling NaN
      {F.qnan(0, 0), one}, {one, F.qnan(0, 0)}, {F.qnan(0, 1), F.qnan(1, 2)}, {F.qnan(1, 3), F.qnan(0, 0)},
      {F.snan(0, 1), one}, {mone, F.snan(1, 2)}, {F.snan(0, 1), F.qnan(1, 1)}, {F.qnan(0, 0), F.inf(0)},
      // infinities with finite values and with each other; inf * 0
      {F.inf(0), one}, {one, F.inf(0)}, {F.inf(1), one}, {one, F.inf(1)}, {F.inf(0), F.inf(1)},
      {F.inf(1), F.inf(0)}, {F.inf(0), F.inf(0)}, {F.inf(1), F.inf(1)}, {F.inf(0), F.maxFinite(1)},
      {F.zero(0), F.inf(1)}, {F.inf(0), F.zero(1)},
      // signed zeros
      {F.zero(0), F.zero(0)}, {F.zero(0), F.zero(1)}, {F.zero(1), F.zero(0)}, {F.zero(1), F.zero(1)},
      // subnormals on one or both ranks, halved (avg), times 0.5 (rounds to 0 or stays)
      {F.minSub(0), F.zero(0)}, {F.zero(1), F.minSub(1)}, {F.minSub(0), F.minSub(0)}, {F.minSub(1), F.minSub(1)},
      {F.minSub(0), F.minSub(1)}, {F.maxSub(0), F.maxSub(0)}, {F.maxSub(1), F.maxSub(0)}, {F.maxSub(0), F.minSub(0)},
      {F.minNormal(0), F.minSub(1)}, {F.minSub(0), F.val(0.5)}, {F.minNormal(1), F.val(0.5)}, {F.maxSub(0), F.val(1.5)},
      // largest finite: the sum overflows, the average must not; products overflow
      {F.maxFinite(0), F.maxFinite(0)}, {F.maxFinite(1), F.maxFinite(1)}, {F.maxFinite(0), F.maxFinite(1)},
      {F.maxFinite(0), one}, {F.val(big), F.val(big)}, {F.val(-big), F.val(big)},
      // rounding: a tie to even (down, then up), above half an ulp, a rounded product
      {one, F.val(h)}, {F.val(1 + 2 * h), F.val(h)}, {one, F.val(1.25 * h)}, {F.val(h), one},
      {F.val(1 + 2 * h), F.val(1 + 2 * h)}, {F.val(1 + 2 * h), F.val(-h)},
      // ordinary values
      {F.val(1.5), F.val(-2.25)}, {F.val(3), F.val(0.375)}, {F.val(-7), F.val(100)}, {F.val(0.5), F.val(0.5)},
      {mone, mone}, {F.val(-0.75), F.val(0.25)},
  };
}

std::vector<Pair> intPattern(int bits, bool isSigned) {
  const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  const int64_t half = (int64_t)1 << (bits / 2);  // half * half wraps to 0
  auto I = [&](int64_t v) { return (uint64_t)v & mask; };
  if (isSigned) {
    const int64_t mn = bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
    const int64_t mx = bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    return {
        // MIN with -1 (sum wraps, avg, prod overflows), MIN/MAX combinations
        {I(mn), I(-1)}, {I(-1), I(mn)}, {I(mn), I(mn)}, {I(mx), I(mx)}, {I(mx), I(1)}, {I(mn), I(mx)},
        {I(mx), I(-mx)}, {I(mn), I(1)}, {I(mn + 1), I(-2)}, {I(half), I(half)}, {I(-half), I(half)},
        {I(3), I(mx / 2 + 1)},
        // negatives and averages that round (toward zero or down?)
        {I(-1), I(-1)}, {I(-1), I(1)}, {I(0), I(0)}, {I(0), I(-5)}, {I(7), I(-3)}, {I(-7), I(4)},
        {I(5), I(4)}, {I(-5), I(-4)}, {I(3), I(-4)}, {I(100), I(27)}, {I(-100), I(-27)},
    };
  }
  const uint64_t mx = mask, top = 1ull << (bits - 1);
  return {
      {mx, mx}, {mx, 1}, {0, mx}, {0, 0}, {1, 1}, {7, 4}, {4, 7}, {top, top}, {mx, 2},
      {(uint64_t)half, (uint64_t)half}, {3, top + 1}, {5, 0}, {100, 27}, {top, 1}, {mx - 1, mx},
  };
}

std::vector<Pair> patternOf(const TypeInfo& t) {
  if (t.kind == 'f') return floatPattern(FloatFormat{t.E, t.M});
  return intPattern(8 * t.size, t.kind == 'i');
}

// Whether the result of a (rank 0, rank 1) pair depends on the order the stock library combines
// them in, which varies with the element's position: both values NaN (which payload survives;
// fp64 keeps one operand's payload), or an average whose pre-multiplied value is inexact (a
// subnormal input; the stock library fuses that multiply with the add for one of the ranks).
bool orderDependent(const TypeInfo& t, ncclRedOp_t op, const Pair& p) {
  if (t.kind != 'f') return false;
  const FloatFormat F{t.E, t.M};
  auto isNan = [&](uint64_t v) { return ((v >> F.M) & F.emax()) == F.emax() && (v & ((1ull << F.M) - 1)) != 0; };
  auto isSub = [&](uint64_t v) { return ((v >> F.M) & F.emax()) == 0 && (v & ((1ull << F.M) - 1)) != 0; };
  if (isNan(p.first) && isNan(p.second)) return true;
  return op == ncclAvg && (isSub(p.first) || isSub(p.second));
}

// Rank `rank`'s input: the pattern repeated to n elements, little endian.
void buildInput(const std::vector<Pair>& P, int rank, int size, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; i++) {
    const Pair& p = P[i % P.size()];
    const uint64_t v = rank == 0 ? p.first : p.second;
    memcpy(dst + i * (size_t)size, &v, (size_t)size);
  }
}

constexpr size_t kGuardBytes = 256;  // past the last element: must stay untouched
constexpr int kSentinel = 0xA5;

bool caseReductions(Ctx& c) {
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  const size_t maxBytes = (8u << 20) + 3 * 8 + kGuardBytes;
  std::vector<uint8_t*> dIn(L.size()), dOut(L.size());
  for (size_t i = 0; i < L.size(); i++) {
    CUDA_OK(cudaSetDevice(L[i].dev));
    CUDA_OK(cudaMalloc(&dIn[i], maxBytes));
    CUDA_OK(cudaMalloc(&dOut[i], maxBytes));
  }
  std::vector<uint8_t> host(maxBytes);
  std::vector<std::vector<uint8_t>> res(L.size(), std::vector<uint8_t>(maxBytes));
  int lines = 0, bad = 0;
  const double t0 = now();

  for (const TypeInfo& t : kTypes) {
    const std::vector<Pair> P = patternOf(t);
    const size_t counts[3] = {P.size(), (1u << 20) / (size_t)t.size, (8u << 20) / (size_t)t.size + 3};
    if (c.proc == 0)  // the inputs, to read the bits= lines against
      for (int r = 0; r < kRanks; r++) {
        std::string in;
        for (const Pair& p : P)
          in += format("%s%0*llx", in.empty() ? "" : ",", 2 * t.size, (unsigned long long)(r ? p.second : p.first));
        line("# %s %s input rank%d=%s", g_case, t.name, r, in.c_str());
      }
    for (const OpInfo& op : kOps) {
      for (int k = 0; k < 3; k++) {
        for (int inplace = 0; inplace <= 1; inplace++) {
          const size_t n = counts[k], bytes = n * (size_t)t.size;
          // Inputs in place (in the output buffer) or apart; the output poisoned up to the guard.
          for (size_t i = 0; i < L.size(); i++) {
            buildInput(P, L[i].rank, t.size, n, host.data());
            if (inplace) {
              STEP(upload(L[i].dev, dOut[i], host.data(), bytes));
              STEP(setBytes(L[i].dev, dOut[i] + bytes, kSentinel, kGuardBytes));
            } else {
              STEP(upload(L[i].dev, dIn[i], host.data(), bytes));
              STEP(setBytes(L[i].dev, dOut[i], kSentinel, bytes + kGuardBytes));
            }
          }
          if (L.size() > 1) NCCL_OK(ncclGroupStart());
          for (size_t i = 0; i < L.size(); i++) {
            CUDA_OK(cudaSetDevice(L[i].dev));
            NCCL_OK(ncclAllReduce(inplace ? dOut[i] : dIn[i], dOut[i], n, t.type, op.op, L[i].comm, L[i].stream));
          }
          if (L.size() > 1) NCCL_OK(ncclGroupEnd());
          STEP(syncLocals(L));

          bool guard = true;
          for (size_t i = 0; i < L.size(); i++) {
            STEP(download(res[i].data(), dOut[i], bytes + kGuardBytes));
            for (size_t b = 0; b < kGuardBytes; b++) guard = guard && res[i][bytes + b] == kSentinel;
          }
          // The large results are hashed without the pairs whose result depends on the order the
          // two values are combined in: the stock library's order varies with an element's
          // position (which rank reduces its chunk), so not even it gives one answer for them.
          // The small line (bits=) shows them masked.
          std::vector<uint8_t> stable;
          size_t excluded = 0;
          for (size_t i = 0; i < n; i++) {
            if (orderDependent(t, op.op, P[i % P.size()])) {
              excluded++;
              continue;
            }
            stable.insert(stable.end(), res[0].begin() + i * (size_t)t.size, res[0].begin() + (i + 1) * (size_t)t.size);
          }
          const uint64_t hash = k == 0 ? fnv1a(res[0].data(), bytes) : fnv1a(stable.data(), stable.size());
          bool same;
          if (L.size() > 1) same = memcmp(res[0].data(), res[1].data(), bytes) == 0;
          else same = minAll(c, (int64_t)hash) == maxAll(c, (int64_t)hash);
          guard = minAll(c, guard) != 0;

          std::string what;
          if (k == 0) {
            // Order-dependent pairs (see orderDependent) show as `*` here: the stock library
            // gives different bits for them at different positions (seen on H200, even within
            // this small array), so no one answer can be compared. Their bits are in `#` lines.
            what = "bits=";
            std::string raw;
            for (size_t i = 0; i < n; i++) {
              uint64_t v = 0;
              memcpy(&v, res[0].data() + i * (size_t)t.size, (size_t)t.size);
              const std::string hex = format("%0*llx", 2 * t.size, (unsigned long long)v);
              const bool masked = orderDependent(t, op.op, P[i]);
              what += (i ? "," : "") + (masked ? std::string("*") : hex);
              if (masked) raw += format(" %zu:%s", i, hex.c_str());
            }
            if (!raw.empty() && c.proc == 0)
              line("# %s %s %s inplace=%d order-dependent:%s", g_case, t.name, op.name, inplace, raw.c_str());
          } else {
            what = format("hash=%016llx excluded=%zu", (unsigned long long)hash, excluded);
          }
          caseLine(c, same && guard, "%s %s n=%zu inplace=%d %s same=%d guard=%d", t.name, op.name, n, inplace,
                   what.c_str(), same ? 1 : 0, guard ? 1 : 0);
          lines++;
          bad += !(same && guard);
        }
      }
    }
  }
  line("# %s proc%d: %d results (%d not ok) in %.1f s", g_case, c.proc, lines, bad, now() - t0);
  STEP(destroyComms(L));
  for (size_t i = 0; i < L.size(); i++) {
    cudaSetDevice(L[i].dev);
    cudaFree(dIn[i]);
    cudaFree(dOut[i]);
  }
  return true;
}

// ------------------------------------------------------------------------------------------
// group-simulate: an AllReduce inside ncclGroupStart/ncclGroupSimulateEnd must not run (stock
// only estimates its time); then a communicator split off the same one works.
bool caseGroupSimulate(Ctx& c) {
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  Local& l = L[0];
  ArBuf b;
  STEP(arAlloc(b, l, 64 << 10, 1));
  const size_t bytes = b.n * sizeof(float);
  STEP(setBytes(l.dev, b.out, kSentinel, bytes));
  c.barrier();

  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(b.in, b.out, b.n, ncclFloat32, ncclSum, l.comm, l.stream));
  NCCL_OK(ncclGroupSimulateEnd(&sim));
  STEP(syncStream(l.stream, "stream after ncclGroupSimulateEnd"));
  std::vector<uint8_t> h(bytes);
  STEP(download(h.data(), b.out, bytes));
  bool untouched = std::all_of(h.begin(), h.end(), [](uint8_t x) { return x == kSentinel; });
  line("# %s rank%d: estimatedTime=%g untouched=%d", g_case, l.rank, (double)sim.estimatedTime, untouched ? 1 : 0);
  c.barrier();  // both ranks looked before anything else runs

  std::vector<Local> S = L;  // the split communicator, same device and stream
  NCCL_OK(ncclCommSplit(l.comm, 0, l.rank, &S[0].comm, nullptr));
  CHECK(S[0].comm != nullptr, "ncclCommSplit returned no communicator");
  int64_t wrong = 0;
  for (int i = 0; i < 8; i++) STEP(arChecked(S, i % 2 ? (1 << 20) : (4 << 10), 10 + i, &wrong));

  const int64_t untouchedAll = minAll(c, untouched), wrongAll = sumAll(c, wrong);
  caseLine(c, untouchedAll && wrongAll == 0, "untouched=%lld split_wrong=%lld", (long long)untouchedAll,
           (long long)wrongAll);
  STEP(destroyComms(S, " split"));
  STEP(destroyComms(L));
  arFree(b);
  return true;
}

// ------------------------------------------------------------------------------------------
// xla-nonblocking: what XLA does. Non-blocking communicators for both GPUs created in one group
// by one thread; grouped AllReduces; every ncclInProgress is followed by polling.
bool caseXlaNonblocking(Ctx& c) {
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  auto inProgressOk = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };

  const double t0 = now();
  NCCL_OK(ncclGroupStart());
  for (Local& l : L) {
    CUDA_OK(cudaSetDevice(l.dev));
    ncclResult_t r = ncclCommInitRankConfig(&l.comm, kRanks, id, l.rank, &cfg);
    CHECK(inProgressOk(r), "ncclCommInitRankConfig: %d (%s)", (int)r, ncclGetErrorString(r));
  }
  ncclResult_t ge = ncclGroupEnd();
  CHECK(inProgressOk(ge), "ncclGroupEnd: %d (%s)", (int)ge, ncclGetErrorString(ge));
  const double deadline = now() + 60;
  ncclResult_t st[2] = {ncclInProgress, ncclInProgress};
  for (size_t i = 0; i < L.size(); i++) STEP(pollState(L[i].comm, deadline, &st[i]));
  const bool ready = st[0] == ncclSuccess && st[1] == ncclSuccess;
  line("# %s: init ready after %.3f s (ncclGroupEnd returned %d, states %d %d)", g_case, now() - t0, (int)ge,
       (int)st[0], (int)st[1]);
  if (!ready) {
    caseLine(c, false, "ready=0 wrong=-1");
    for (Local& l : L) ncclCommAbort(l.comm);
    return true;
  }

  // After a call that returns ncclInProgress, poll the communicators until they are done.
  auto settle = [&](ncclResult_t r, const char* what) -> bool {
    CHECK(inProgressOk(r), "%s: %d (%s), last error: %s", what, (int)r, ncclGetErrorString(r), lastError());
    if (r != ncclInProgress) return true;
    for (Local& l : L) {
      ncclResult_t s = ncclInProgress;
      STEP(pollState(l.comm, now() + kStreamLimitS, &s));
      CHECK(s == ncclSuccess, "%s: communicator state %d (%s)", what, (int)s, ncclGetErrorString(s));
    }
    return true;
  };

  const int iters = 20;
  std::vector<std::vector<ArBuf>> B(iters, std::vector<ArBuf>(L.size()));
  for (int it = 0; it < iters; it++)
    for (size_t i = 0; i < L.size(); i++) STEP(arAlloc(B[it][i], L[i], it % 2 ? (1 << 20) : (4 << 10), it));
  for (int it = 0; it < iters; it++) {
    NCCL_OK(ncclGroupStart());
    for (size_t i = 0; i < L.size(); i++) {
      CUDA_OK(cudaSetDevice(L[i].dev));
      STEP(settle(ncclAllReduce(B[it][i].in, B[it][i].out, B[it][i].n, ncclFloat32, ncclSum, L[i].comm, L[i].stream),
                  "ncclAllReduce"));
    }
    STEP(settle(ncclGroupEnd(), "ncclGroupEnd"));  // in progress: the launch goes on in the background
  }
  STEP(syncLocals(L));
  int64_t wrong = 0;
  for (auto& row : B)
    for (ArBuf& b : row) {
      STEP(arCount(b, &wrong));
      arFree(b);
    }
  caseLine(c, wrong == 0, "ready=1 wrong=%lld", (long long)wrong);

  for (Local& l : L) printRoutes(l.label(), l.comm);
  for (Local& l : L) {
    CUDA_OK(cudaSetDevice(l.dev));
    STEP(settle(ncclCommFinalize(l.comm), "ncclCommFinalize"));
  }
  for (Local& l : L) {
    ncclResult_t s = ncclInProgress;
    STEP(pollState(l.comm, now() + kStreamLimitS, &s));
    CHECK(s == ncclSuccess, "state %d after ncclCommFinalize", (int)s);
  }
  for (Local& l : L) {
    CUDA_OK(cudaSetDevice(l.dev));
    ncclResult_t r = ncclCommDestroy(l.comm);  // may complete in the background (ncclInProgress)
    CHECK(inProgressOk(r), "ncclCommDestroy: %d (%s)", (int)r, ncclGetErrorString(r));
  }
  return true;
}

// ------------------------------------------------------------------------------------------
// setup-fault-<step>: RCCLX_FAULT_INJECT (set by the case table, ignored by stock) makes rcclx's
// own setup fail on rank 1 only; every call must then still be right (rcclx forwards them all).
bool caseSetupFault(Ctx& c) {
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  const size_t sizes[] = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
  const int calls = 50;
  std::vector<std::vector<ArBuf>> B(calls, std::vector<ArBuf>(L.size()));
  for (int k = 0; k < calls; k++)
    for (size_t i = 0; i < L.size(); i++) STEP(arAlloc(B[k][i], L[i], sizes[(k * 3) % 7], k));
  c.barrier();
  for (int k = 0; k < calls; k++) STEP(arIssueAll(L, B[k]));  // back to back, one stream
  STEP(syncLocals(L));
  int64_t wrong = 0;
  for (auto& row : B)
    for (ArBuf& b : row) {
      STEP(arCount(b, &wrong));
      arFree(b);
    }
  const int64_t wrongAll = sumAll(c, wrong), async = maxAll(c, asyncErrors(L));
  caseLine(c, wrongAll == 0 && async == 0, "wrong=%lld async=%lld", (long long)wrongAll, (long long)async);
  return destroyComms(L);
}

// ------------------------------------------------------------------------------------------
// abort-<kind>: rank 1 never joins a call of rank 0; another thread of rank 0 aborts the
// communicator after 1 s. The abort must return quickly and the stuck stream must drain.
// abort-stock: a 1 MiB Broadcast from rank 1 (rcclx forwards it to stock NCCL);
// abort-rcclx: a 16 KiB AllReduce (which rcclx runs on its own kernels).
bool caseAbort(Ctx& c) {
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  Local& l = L[0];
  // Warm up both calls with both ranks, so that connections exist and rank 0's stuck call
  // waits on the GPU (not in a host-side connection setup).
  int64_t warmWrong = 0;
  STEP(arChecked(L, 16 << 10, 1, &warmWrong));
  ArBuf bc;
  STEP(arAlloc(bc, l, 1 << 20, 2));
  NCCL_OK(ncclBroadcast(bc.in, bc.out, bc.n, ncclFloat32, 1, l.comm, l.stream));
  STEP(syncStream(l.stream, "warm-up broadcast"));
  ArBuf ar;
  STEP(arAlloc(ar, l, 16 << 10, 3));
  c.barrier();

  if (l.rank == 1) {  // never joins: wait until rank 0 is done, then abort
    c.barrier();
    printRoutes(l.label(), l.comm);
    NCCL_OK(ncclCommAbort(l.comm));
    return true;
  }
  if (c.cs->arg == kAbortStock) NCCL_OK(ncclBroadcast(bc.in, bc.out, bc.n, ncclFloat32, 1, l.comm, l.stream));
  else STEP(arIssue(ar, l.comm, l.stream));
  printRoutes(l.label(), l.comm);

  std::atomic<int> abortRc{-1};
  std::atomic<double> abortS{-1};
  std::thread aborter([&] {
    sleepMs(1000);
    const double t0 = now();
    abortRc = (int)ncclCommAbort(l.comm);
    abortS = now() - t0;
  });
  sleepMs(900);
  cudaError_t q = cudaStreamQuery(l.stream);
  const bool stuck = q == cudaErrorNotReady;
  aborter.join();  // bounded by the case time limit

  // The stuck operation's stream must complete soon after the abort.
  const double deadline = now() + 5;
  cudaError_t e = cudaErrorNotReady;
  while ((e = cudaStreamQuery(l.stream)) == cudaErrorNotReady && now() < deadline) usleep(100);
  const bool streamDone = e == cudaSuccess;
  const bool under1s = abortS.load() < 1.0;
  line("# %s rank0: ncclCommAbort returned %d after %.3f ms; stream before abort: %s, after: %s", g_case,
       abortRc.load(), 1e3 * abortS.load(), cudaGetErrorName(q), cudaGetErrorName(e));
  caseLine(c, under1s, "returned=1 code=%d stuck=%d under_1s=%d stream_done=%d", abortRc.load(), stuck ? 1 : 0,
           under1s ? 1 : 0, streamDone ? 1 : 0);
  c.barrier();  // releases rank 1
  return true;
}

// ------------------------------------------------------------------------------------------
// create-while-inflight / destroy-while-inflight: while rank 0's AllReduce on communicator A
// waits for rank 1, rank 0 creates (or destroys) communicator B, which rank 1 does first.
bool caseInflight(Ctx& c) {
  const bool create = c.cs->arg == kCreate;
  std::vector<Local> A, B;
  STEP(makeLocals(c, A));
  STEP(makeLocals(c, B));  // B gets its own stream: A's stream is blocked by the waiting call
  STEP(initComms(c, A, 0));
  ncclUniqueId idB;
  if (create) STEP(shareId(c, 1, &idB));
  else STEP(initComms(c, B, 1));
  int64_t warmWrong = 0;  // connections of A exist before the interesting part
  STEP(arChecked(A, 4 << 10, 1, &warmWrong));
  ArBuf a, b;
  STEP(arAlloc(a, A[0], 4 << 10, 2));
  STEP(arAlloc(b, B[0], 4 << 10, 3));
  const int rank = A[0].rank;
  c.barrier();

  auto createB = [&]() -> bool {
    CUDA_OK(cudaSetDevice(B[0].dev));
    NCCL_OK(ncclCommInitRank(&B[0].comm, kRanks, idB, B[0].rank));
    return arIssue(b, B[0].comm, B[0].stream);
  };
  auto destroyB = [&]() -> bool {
    printRoutes(B[0].label() + " B", B[0].comm);
    CUDA_OK(cudaSetDevice(B[0].dev));
    NCCL_OK(ncclCommDestroy(B[0].comm));
    B[0].comm = nullptr;
    return true;
  };
  if (rank == 0) {
    STEP(arIssue(a, A[0].comm, A[0].stream));
    STEP(create ? createB() : destroyB());
  } else {
    STEP(create ? createB() : destroyB());
    STEP(arIssue(a, A[0].comm, A[0].stream));
  }
  STEP(syncLocals(A));
  int64_t wrongA = warmWrong, wrongB = 0;
  STEP(arCount(a, &wrongA));
  if (create) {
    STEP(syncLocals(B));
    STEP(arCount(b, &wrongB));
  }
  const int64_t wa = sumAll(c, wrongA), wb = sumAll(c, wrongB);
  if (create) caseLine(c, wa == 0 && wb == 0, "wrong_a=%lld wrong_b=%lld", (long long)wa, (long long)wb);
  else caseLine(c, wa == 0, "wrong_a=%lld", (long long)wa);
  if (create) STEP(destroyComms(B, " B"));
  STEP(destroyComms(A, " A"));
  arFree(a);
  arFree(b);
  return true;
}

// ------------------------------------------------------------------------------------------
// leaks: FIDELITY_LEAK_CYCLES cycles of (unique id, init, one checked 4 KiB AllReduce, destroy)
// must not leak device memory, file descriptors or resident memory.
struct Usage {
  size_t freeMem = 0;
  long fds = 0, rssBytes = 0;
};

bool measure(Usage* u) {
  sleepMs(500);  // let helper threads of the last communicator wind down
  size_t total = 0;
  CUDA_OK(cudaMemGetInfo(&u->freeMem, &total));
  DIR* d = opendir("/proc/self/fd");
  CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
  u->fds = 0;
  while (dirent* e = readdir(d)) u->fds += e->d_name[0] != '.';
  closedir(d);
  FILE* f = fopen("/proc/self/statm", "r");
  CHECK(f, "fopen /proc/self/statm: %s", strerror(errno));
  long pages = 0, rss = 0;
  const int got = fscanf(f, "%ld %ld", &pages, &rss);
  fclose(f);
  CHECK(got == 2, "cannot parse /proc/self/statm");
  u->rssBytes = rss * sysconf(_SC_PAGESIZE);
  return true;
}

long leakCycles() { return envLong("FIDELITY_LEAK_CYCLES", 500); }

bool caseLeaks(Ctx& c) {
  const long cycles = leakCycles();
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  ArBuf b;  // allocated once, before the first measurement
  STEP(arAlloc(b, L[0], 4 << 10, 0));
  int64_t wrong = 0;
  auto cycle = [&](long k, bool last) -> bool {
    STEP(initComms(c, L, 0));
    STEP(arFill(b, (int)(k % 1000)));
    STEP(arIssue(b, L[0].comm, L[0].stream));
    STEP(syncLocals(L));
    STEP(arCount(b, &wrong));
    if (last) printRoutes(L[0].label(), L[0].comm);
    CUDA_OK(cudaSetDevice(L[0].dev));
    NCCL_OK(ncclCommDestroy(L[0].comm));
    L[0].comm = nullptr;
    c.barrier();  // the next cycle's unique id may overwrite the slot only now
    return true;
  };
  STEP(cycle(0, false));  // warm-up: one-time allocations of CUDA and NCCL
  Usage before, after;
  STEP(measure(&before));
  const double t0 = now();
  for (long k = 1; k <= cycles; k++) STEP(cycle(k, k == cycles));
  const double secs = now() - t0;
  STEP(measure(&after));

  const long long devDelta = (long long)before.freeMem - (long long)after.freeMem;
  const long fdDelta = after.fds - before.fds;
  const long long rssDelta = (long long)after.rssBytes - (long long)before.rssBytes;
  line("# %s rank%d: %ld cycles in %.1f s (%.1f ms each): devmem_delta=%lld fds_delta=%ld (%ld -> %ld) "
       "rss_delta=%lld",
       g_case, L[0].rank, cycles, secs, cycles ? 1e3 * secs / (double)cycles : 0.0, devDelta, fdDelta, before.fds,
       after.fds, rssDelta);
  const bool devOk = minAll(c, devDelta <= (1 << 20)) != 0;
  const bool fdsOk = minAll(c, fdDelta == 0) != 0;
  // RSS: the stock library itself grows by tens of MB over hundreds of cycles on the machines
  // seen so far, so run.sh judges rcclx's growth against the stock run's (this line only
  // reports it): `# leaks rss_max=` is the larger of the two ranks' deltas.
  line("# %s rss_max=%lld", g_case, (long long)maxAll(c, rssDelta));
  const int64_t wrongAll = sumAll(c, wrong);
  caseLine(c, wrongAll == 0 && devOk && fdsOk, "wrong=%lld devmem_ok=%d fds_ok=%d", (long long)wrongAll,
           devOk ? 1 : 0, fdsOk ? 1 : 0);
  arFree(b);
  return true;
}

// ------------------------------------------------------------------------------------------
// after-finalize: the return codes of an AllReduce on a finalized communicator and of the
// destroy that follows; rcclx must return the same ones, but for the AllReduce (below).
bool caseAfterFinalize(Ctx& c) {
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  Local& l = L[0];
  int64_t warmWrong = 0;
  STEP(arChecked(L, 16 << 10, 1, &warmWrong));
  ArBuf b;
  STEP(arAlloc(b, l, 16 << 10, 2));
  c.barrier();

  const ncclResult_t fin = ncclCommFinalize(l.comm);
  ncclResult_t state = ncclInProgress;
  STEP(pollState(l.comm, now() + kStreamLimitS, &state));
  printRoutes(l.label(), l.comm);
  c.barrier();  // both ranks finalized

  const ncclResult_t ar = ncclAllReduce(b.in, b.out, b.n, ncclFloat32, ncclSum, l.comm, l.stream);
  line("# %s rank%d: finalize=%d state=%d allreduce=%d (last error: %s)", g_case, l.rank, (int)fin, (int)state,
       (int)ar, lastError());
  bool done = true;
  int64_t wrong = -1;  // -1: nothing was launched, or it did not complete
  if (ar == ncclSuccess) {  // something may have been launched: does it complete?
    STEP(waitStream(l.stream, 10, &done));
    if (done) {
      wrong = 0;
      STEP(arCount(b, &wrong));
    }
  }
  const bool allDone = minAll(c, done) != 0;
  // A launched call that never completes would make the destroy wait for it: abort instead.
  const ncclResult_t end = allDone ? ncclCommDestroy(l.comm) : ncclCommAbort(l.comm);
  // NCCL's documentation allows only destroy after finalize. The one accepted difference:
  // rcclx refuses the AllReduce (ncclInvalidUsage, src/comm/mod.rs State::finalize), while the
  // stock library (2.28) launches it (ncclSuccess; a refusal is accepted from stock too). A
  // launched one must complete with the right result.
  const bool underRcclx = g_routeStats != nullptr;
  const bool arValid = underRcclx ? ar == ncclInvalidUsage : (ar == ncclSuccess || ar == ncclInvalidUsage);
  const bool resultOk = ar != ncclSuccess || (done && wrong == 0);
  line("# %s rank%d: allreduce after finalize returned %d, wrong=%lld", g_case, l.rank, (int)ar, (long long)wrong);
  const std::string fins = perProc(c, fin), states = perProc(c, state), ends = perProc(c, end);
  const bool allValid = minAll(c, arValid) != 0, allResultOk = minAll(c, resultOk) != 0;
  caseLine(c, allValid && allResultOk, "finalize=%s state=%s allreduce_valid=%d result_ok=%d stream_done=%d %s=%s",
           fins.c_str(), states.c_str(), allValid ? 1 : 0, allResultOk ? 1 : 0, allDone ? 1 : 0,
           allDone ? "destroy" : "abort", ends.c_str());
  return true;
}

// ------------------------------------------------------------------------------------------
// revoke: ncclCommRevoke (NCCL >= 2.28.7) of a communicator whose 16 KiB AllReduce on rank 0
// can never complete (rank 1 never joins) must stop it: the stream completes within 1 s.
bool caseRevoke(Ctx& c) {
  const RevokeFn revoke = reinterpret_cast<RevokeFn>(dlsym(RTLD_DEFAULT, "ncclCommRevoke"));
  if (!revoke) {
    caseLine(c, true, "unsupported");
    return true;
  }
  std::vector<Local> L;
  STEP(makeLocals(c, L));
  STEP(initComms(c, L, 0));
  Local& l = L[0];
  int64_t warmWrong = 0;
  STEP(arChecked(L, 16 << 10, 1, &warmWrong));
  ArBuf b;
  STEP(arAlloc(b, l, 16 << 10, 2));
  c.barrier();
  if (l.rank == 1) {  // never joins: wait until rank 0 is done, then abort
    c.barrier();
    printRoutes(l.label(), l.comm);
    NCCL_OK(ncclCommAbort(l.comm));
    return true;
  }
  STEP(arIssue(b, l.comm, l.stream));
  sleepMs(1000);
  const bool stuck = cudaStreamQuery(l.stream) == cudaErrorNotReady;
  printRoutes(l.label(), l.comm);
  const double t0 = now();
  const ncclResult_t rv = revoke(l.comm, NCCL_REVOKE_DEFAULT);
  const double revokeS = now() - t0;
  const double deadline = now() + 1;
  cudaError_t e = cudaErrorNotReady;
  while ((e = cudaStreamQuery(l.stream)) == cudaErrorNotReady && now() < deadline) usleep(100);
  const bool streamDone = e == cudaSuccess;
  ncclResult_t state = ncclInProgress;
  STEP(pollState(l.comm, now() + 5, &state));
  const ncclResult_t ab = ncclCommAbort(l.comm);
  line("# %s rank0: ncclCommRevoke returned %d after %.3f ms; stream after: %s", g_case, (int)rv, 1e3 * revokeS,
       cudaGetErrorName(e));
  caseLine(c, streamDone, "stuck=%d revoke=%d stream_done=%d state=%d abort=%d", stuck ? 1 : 0, (int)rv,
           streamDone ? 1 : 0, (int)state, (int)ab);
  c.barrier();  // releases rank 1
  return true;
}

// ------------------------------------------------------------------------------------------
// All cases, in the order they run.
const Case kCases[] = {
    {"two-streams-1k", 2, caseTwoStreams, 1 << 10, nullptr, "200 AllReduces of 1 KiB alternating between two streams", "allreduce.ll forwarded=0"},
    {"two-streams-64k", 2, caseTwoStreams, 64 << 10, nullptr, "200 AllReduces of 64 KiB alternating between two streams", "allreduce.ll forwarded=0"},
    {"two-streams-4m", 2, caseTwoStreams, 4 << 20, nullptr, "200 AllReduces of 4 MiB alternating between two streams", "allreduce.flat forwarded=0"},
    {"slow-peer", 2, caseSlowPeer, 0, nullptr, "rank 1 joins a 16 KiB AllReduce FIDELITY_SLOW_MS late", "allreduce.ll forwarded=0"},
    {"reductions-2proc", 2, caseReductions, 0, nullptr, "special values, 10 types x 5 ops, bitwise results", "allreduce.ll allreduce.flat forwarded=0"},
    {"reductions-1proc", 1, caseReductions, 0, nullptr, "as reductions-2proc, one process driving both GPUs", "allreduce.ll allreduce.flat forwarded=0"},
    {"group-simulate", 2, caseGroupSimulate, 0, nullptr, "ncclGroupSimulateEnd launches nothing; then ncclCommSplit", "allreduce.ll allreduce.flat"},
    {"xla-nonblocking", 1, caseXlaNonblocking, 0, nullptr, "non-blocking init in a group, 20 grouped AllReduces", "allreduce.ll allreduce.flat forwarded=0"},
    {"setup-fault-alloc", 2, caseSetupFault, 0, "RCCLX_FAULT_INJECT=alloc:1", "rcclx setup fails on rank 1 (alloc)", "forwarded allreduce.ll=0 allreduce.flat=0"},
    {"setup-fault-ipc", 2, caseSetupFault, 0, "RCCLX_FAULT_INJECT=ipc:1", "rcclx setup fails on rank 1 (ipc)", "forwarded allreduce.ll=0 allreduce.flat=0"},
    {"setup-fault-peer", 1, caseSetupFault, 0, "RCCLX_FAULT_INJECT=peer:1", "rcclx setup fails on rank 1 (peer)", "forwarded allreduce.ll=0 allreduce.flat=0"},
    {"abort-stock", 2, caseAbort, kAbortStock, nullptr, "ncclCommAbort of a stuck 1 MiB Broadcast", "allreduce.ll forwarded"},
    {"abort-rcclx", 2, caseAbort, kAbortRcclx, nullptr, "ncclCommAbort of a stuck 16 KiB AllReduce", "allreduce.ll forwarded"},
    {"create-while-inflight", 2, caseInflight, kCreate, nullptr, "create a communicator while an AllReduce waits", "allreduce.ll"},
    {"destroy-while-inflight", 2, caseInflight, kDestroy, nullptr, "destroy a communicator while an AllReduce waits", "allreduce.ll"},
    {"leaks", 2, caseLeaks, 0, nullptr, "FIDELITY_LEAK_CYCLES x (init, AllReduce, destroy): memory, fds, RSS", "allreduce.ll forwarded=0"},
    {"after-finalize", 2, caseAfterFinalize, 0, nullptr, "AllReduce on a finalized communicator: return codes", nullptr},
    {"revoke", 2, caseRevoke, 0, nullptr, "ncclCommRevoke of a stuck 16 KiB AllReduce", "allreduce.ll"},
};

// ==========================================================================================
// Parent: probe, fork, time limits
// ==========================================================================================
Shared* mapShared(int nprocs) {
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  Shared* sh = static_cast<Shared*>(m);  // anonymous mappings start zeroed
  pthread_barrierattr_t a;
  pthread_barrierattr_init(&a);
  pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->barrier, &a, (unsigned)nprocs);
  pthread_barrierattr_destroy(&a);
  return sh;
}

void unmapShared(Shared* sh) {
  pthread_barrier_destroy(&sh->barrier);
  munmap(sh, sizeof(Shared));
}

pid_t g_parent = 0;

// The first thing a forked child does: die with the parent, never run the parent's exit code.
void childStart() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != g_parent) _exit(1);
}

// With rcclx and a case that states its routes: "ROUTES <case> rank<r> want=<spec> got=<routes>
// ok=<0|1>" per rank of this process (run.sh fails on ok=0). A rank that printed no route line
// (the case stopped early, or its communicator was never made) fails too.
void checkRoutes(const Ctx& c) {
  if (!g_routeStats || !c.cs->routes) return;
  for (int r = 0; r < kRanks; r++) {
    if (c.nprocs != 1 && r != c.proc) continue;
    bool ok = g_routesPrinted[r];
    std::istringstream want(c.cs->routes);
    std::string item;
    while (want >> item) {
      const size_t eq = item.find('=');
      const std::string name = item.substr(0, eq);
      const uint64_t calls = g_routesSeen[r].count(name) ? g_routesSeen[r][name] : 0;
      ok = ok && (eq == std::string::npos ? calls > 0 : calls == strtoull(item.c_str() + eq + 1, nullptr, 10));
    }
    std::string got;
    for (const auto& kv : g_routesSeen[r])
      if (kv.second > 0) got += format("%s%s=%" PRIu64, got.empty() ? "" : ",", kv.first.c_str(), kv.second);
    line("ROUTES %s rank%d want=\"%s\" got=%s ok=%d", c.cs->name, r, c.cs->routes,
         g_routesPrinted[r] ? (got.empty() ? "none" : got.c_str()) : "(no route line)", ok ? 1 : 0);
  }
}

[[noreturn]] void caseChild(const Case& cs, int proc, Shared* sh) {
  childStart();
  g_case = cs.name;
  g_proc = proc;
  if (cs.env) {  // before any NCCL call: rcclx reads its configuration once, on first use
    std::string kv = cs.env;
    size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  Ctx c{&cs, proc, cs.nprocs, sh};
  bool ok = true;
  if (cs.nprocs > 1) {
    cudaError_t e = cudaSetDevice(proc);
    if (e != cudaSuccess) {
      report(__FILE__, __LINE__, "cudaSetDevice(%d): %s (%s)", proc, cudaGetErrorName(e), cudaGetErrorString(e));
      ok = false;
    }
  }
  ok = ok && cs.run(c);
  checkRoutes(c);
  fflush(stdout);
  fflush(stderr);
  _exit(ok ? 0 : 1);  // no exit handlers: CUDA/NCCL teardown at exit could hang
}

std::string describeStatus(int st) {
  if (WIFEXITED(st)) return format("exit status %d", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return format("signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return format("status 0x%x", st);
}

// Waits for the given processes until `limitS`; then (or `graceS` after the first failure)
// kills the rest. Returns the statuses (-1: killed by us) and whether the limit expired.
struct Reaped {
  std::vector<int> status;
  std::vector<bool> killed;
  bool timedOut = false;
};

Reaped reap(const std::vector<pid_t>& pids0, double limitS, double graceS) {
  std::vector<pid_t> pids = pids0;
  Reaped r;
  r.status.assign(pids.size(), 0);
  r.killed.assign(pids.size(), false);
  const double deadline = now() + limitS;
  double graceEnd = 0;
  size_t alive = pids.size();
  while (alive > 0) {
    for (size_t p = 0; p < pids.size(); p++) {
      if (pids[p] <= 0) continue;
      int st = 0;
      if (waitpid(pids[p], &st, WNOHANG) != pids[p]) continue;
      pids[p] = 0;
      alive--;
      r.status[p] = st;
      const bool failed = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
      if (failed && graceEnd == 0) graceEnd = now() + graceS;
    }
    if (alive == 0) break;
    const double t = now();
    if (t > deadline || (graceEnd > 0 && t > graceEnd)) {
      r.timedOut = t > deadline;
      for (size_t p = 0; p < pids.size(); p++)
        if (pids[p] > 0) {
          kill(pids[p], SIGKILL);
          r.killed[p] = true;
        }
      // A killed process can take a while to leave the GPU driver; do not wait forever.
      const double hard = now() + 30;
      while (alive > 0 && now() < hard) {
        for (size_t p = 0; p < pids.size(); p++) {
          int st = 0;
          if (pids[p] > 0 && waitpid(pids[p], &st, WNOHANG) == pids[p]) {
            pids[p] = 0;
            alive--;
            r.status[p] = st;
          }
        }
        usleep(10000);
      }
      break;
    }
    usleep(5000);
  }
  return r;
}

double caseLimitS(const Case& cs) {
  double s = (double)envLong("FIDELITY_CASE_TIMEOUT_S", 120);
  if (s <= 0) s = 120;
  if (cs.run == caseLeaks) s += 1.0 * (double)leakCycles();  // init + destroy: well under 1 s each
  return s;
}

// Runs one case in fresh processes; returns true when it passed (every CASE line ok=1).
bool runCase(const Case& cs) {
  Shared* sh = mapShared(cs.nprocs);
  if (!sh) {
    line("CASE %s FAILED ok=0", cs.name);
    line("# %s: mmap failed: %s", cs.name, strerror(errno));
    return false;
  }
  const double t0 = now(), limit = caseLimitS(cs);
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids;
  for (int p = 0; p < cs.nprocs; p++) {
    pid_t pid = fork();
    if (pid == 0) caseChild(cs, p, sh);
    if (pid < 0) {
      line("# %s: fork failed: %s", cs.name, strerror(errno));
      break;
    }
    pids.push_back(pid);
  }
  bool ok = (int)pids.size() == cs.nprocs;
  if (!ok)
    for (pid_t pid : pids) kill(pid, SIGKILL);  // they would wait for the missing process
  // When one process fails, its peer is probably waiting for it: 10 s, then it is killed.
  Reaped r = reap(pids, limit, 10);
  if (r.timedOut) {
    line("CASE %s TIMEOUT", cs.name);
    line("# %s: time limit of %.0f s expired (FIDELITY_CASE_TIMEOUT_S); its processes were killed", cs.name, limit);
    ok = false;
  } else {
    bool failed = !ok;
    for (size_t p = 0; p < pids.size(); p++) {
      const int st = r.status[p];
      if (r.killed[p]) {
        line("# %s: process %zu killed after its peer failed", cs.name, p);
        failed = true;
      } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        line("# %s: process %zu ended with %s", cs.name, p, describeStatus(st).c_str());
        failed = true;
      }
    }
    if (failed) line("CASE %s FAILED ok=0", cs.name);
    ok = !failed;
  }
  if (sh->failedLines > 0) ok = false;
  line("# %s: %s in %.1f s", cs.name, ok ? "passed" : "FAILED", now() - t0);
  unmapShared(sh);
  return ok;
}

// A throw-away child looks at the GPUs, so that the parent never initializes CUDA (a forked
// child of a CUDA process cannot use CUDA).
bool probe() {
  Shared* sh = mapShared(1);
  if (!sh) return false;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    childStart();
    g_case = "probe";
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      snprintf(sh->probeError, sizeof sh->probeError, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
               cudaGetErrorString(e));
      n = 0;
    }
    sh->ndev = n;
    for (int d = 0; d < std::min(n, kMaxProcs); d++) {
      cudaDeviceProp prop;
      char bus[32] = "?";
      if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
        cudaDeviceGetPCIBusId(bus, sizeof bus, d);
        snprintf(sh->names[d], sizeof sh->names[d], "%.64s [%.31s] sm_%d%d", prop.name, bus, prop.major, prop.minor);
      }
    }
    if (n >= 2) cudaDeviceCanAccessPeer(&sh->canPeer, 0, 1);
    ncclGetVersion(&sh->ncclVersion);
    sh->probeDone = 1;
    _exit(0);
  }
  bool ok = false;
  if (pid > 0) {
    Reaped r = reap({pid}, 60, 0);
    if (r.timedOut || !sh->probeDone) {
      line("# fidelity: the GPU probe did not finish (%s)",
           r.timedOut ? "no answer within 60 s" : describeStatus(r.status[0]).c_str());
    } else if (sh->ndev < kRanks) {
      line("# fidelity: needs %d CUDA devices, found %d%s%s", kRanks, sh->ndev, sh->probeError[0] ? ": " : "",
           sh->probeError);
    } else {
      for (int d = 0; d < kRanks; d++) line("# device %d: %s", d, sh->names[d]);
      line("# %d devices visible, peer access 0->1: %d, ncclGetVersion: %d", sh->ndev, sh->canPeer, sh->ncclVersion);
      ok = true;
    }
  } else {
    line("# fidelity: fork failed: %s", strerror(errno));
  }
  unmapShared(sh);
  return ok;
}

// A name selects the case of that name and the cases named "<name>-...".
bool selects(const std::string& arg, const char* name) {
  const std::string n = name;
  return n == arg || (n.size() > arg.size() && n.compare(0, arg.size(), arg) == 0 && n[arg.size()] == '-');
}

void usage() {
  fprintf(stderr,
          "usage: fidelity [--list] [CASE...]\n"
          "  Runs all cases, or those named (a name also selects '<name>-*', e.g. 'abort'), in a fixed order.\n"
          "  Environment: FIDELITY_CASE_TIMEOUT_S (120), FIDELITY_SLOW_MS (5000), FIDELITY_LEAK_CYCLES (500).\n"
          "  Exit status: 0 all ok, 1 a case failed, 2 usage error or no usable GPUs.\n");
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // before any NCCL call (in the children); kept if set
  g_parent = getpid();
  bool list = false;
  std::vector<std::string> names;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--list") list = true;
    else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "fidelity: unknown option %s\n", a.c_str());
      usage();
      return 2;
    } else names.push_back(a);
  }
  std::vector<const Case*> run;
  for (const Case& cs : kCases) {
    bool want = names.empty();
    for (const std::string& n : names) want = want || selects(n, cs.name);
    if (want) run.push_back(&cs);
  }
  for (const std::string& n : names) {
    bool known = false;
    for (const Case& cs : kCases) known = known || selects(n, cs.name);
    if (!known) {
      fprintf(stderr, "fidelity: unknown case '%s' (see --list)\n", n.c_str());
      return 2;
    }
  }
  if (list) {
    for (const Case* cs : run)
      line("%-24s %d process%s  %s", cs->name, cs->nprocs, cs->nprocs > 1 ? "es" : "  ", cs->what);
    return 0;
  }

  lookupRcclx();
  line("# fidelity: %zu case(s); rcclx route statistics: %s", run.size(),
       g_routeStats ? "available (rcclx is loaded)" : "not available (stock NCCL)");
  if (!probe()) {
    fprintf(stderr, "fidelity: no usable GPUs (see the '# fidelity:' line on stdout); nothing was run\n");
    return 2;
  }
  int failed = 0;
  for (const Case* cs : run) failed += !runCase(*cs);
  line("# fidelity: %zu case(s) run, %d failed", run.size(), failed);
  return failed ? 1 : 0;
}
