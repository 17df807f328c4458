// rccl-tests-compat: harness shared by the *_perf benchmarks and rcclx_check (see common.h).
#include "common.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

static int g_proc = -1;  // process index once forked / set up (for error messages)
void (*g_dieHook)(const char* msg) = nullptr;

void die(const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fflush(stdout);
  fprintf(stderr, "[proc %d pid %d] %s:%d: %s\n", g_proc, (int)getpid(), file, line, msg);
  fflush(stderr);
  static std::atomic<bool> dying{false};
  if (g_dieHook && !dying.exchange(true)) {  // once, and never from inside the hook
    char full[2200];
    snprintf(full, sizeof full, "[proc %d] %s:%d: %s", g_proc, file, line, msg);
    g_dieHook(full);
  }
  _exit(2);  // no atexit handlers: they could hang in CUDA/NCCL teardown
}

void ncclDie(const Lib& L, ncclResult_t r, const char* file, int line, const char* what) {
  const char* s = L.getErrorString ? L.getErrorString(r) : "?";
  const char* last = L.getLastError ? L.getLastError(nullptr) : "";
  die(file, line, "NCCL error %d (%s) from library %s (%s) in: %s%s%s", (int)r, s, L.name.c_str(),
      L.path.c_str(), what, last && *last ? " -- last error: " : "", last ? last : "");
}

// ------------------------------------------------------------------------------------------
// Libraries
// ------------------------------------------------------------------------------------------
// Lib::env set for the life of the scope, then the old values back. Only where no other
// thread of the harness runs: setenv may move the environment under a concurrent getenv.
struct ScopedLibEnv {
  std::vector<std::pair<std::string, char*>> saved;
  explicit ScopedLibEnv(const Lib& L, bool active = true) {
    if (!active) return;
    for (const auto& kv : L.env) {
      const char* old = getenv(kv.first.c_str());
      saved.push_back({kv.first, old ? strdup(old) : nullptr});
      setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
  }
  ~ScopedLibEnv() {
    for (auto& kv : saved) {
      if (kv.second) setenv(kv.first.c_str(), kv.second, 1); else unsetenv(kv.first.c_str());
      free(kv.second);
    }
  }
};

void Lib::load() {
  // Single-threaded: procSetup loads the libraries before any thread starts.
  ScopedLibEnv scope(*this);
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  CHECK(handle, "cannot load library %s=%s: %s", name.c_str(), path.c_str(), dlerror());
  auto opt = [&](const char* s) { return dlsym(handle, s); };
  auto req = [&](const char* s) {
    void* f = dlsym(handle, s);
    CHECK(f, "library %s (%s) does not export %s", name.c_str(), path.c_str(), s);
    return f;
  };
#define SYM(field, fn, sym) field = reinterpret_cast<decltype(field)>(fn(sym))
  SYM(getVersion, req, "ncclGetVersion");
  SYM(getUniqueId, req, "ncclGetUniqueId");
  SYM(commInitRank, req, "ncclCommInitRank");
  SYM(commDestroy, req, "ncclCommDestroy");
  SYM(commAbort, opt, "ncclCommAbort");
  SYM(commGetAsyncError, req, "ncclCommGetAsyncError");
  SYM(getErrorString, req, "ncclGetErrorString");
  SYM(getLastError, opt, "ncclGetLastError");
  SYM(groupStart, req, "ncclGroupStart");
  SYM(groupEnd, req, "ncclGroupEnd");
  SYM(allReduce, req, "ncclAllReduce");
  SYM(allGather, req, "ncclAllGather");
  SYM(reduceScatter, req, "ncclReduceScatter");
  SYM(broadcast, opt, "ncclBroadcast");                    // checked when a broadcast runs
  SYM(bcast, opt, "ncclBcast");
  SYM(reduce, opt, "ncclReduce");                          // checked when a reduce runs
  SYM(redOpCreatePreMulSum, opt, "ncclRedOpCreatePreMulSum");
  SYM(redOpDestroy, opt, "ncclRedOpDestroy");
  SYM(memAlloc, opt, "ncclMemAlloc");                      // NCCL >= 2.19
  SYM(memFree, opt, "ncclMemFree");
  SYM(commRegister, opt, "ncclCommRegister");
  SYM(commDeregister, opt, "ncclCommDeregister");
  SYM(commWindowRegister, opt, "ncclCommWindowRegister");  // NCCL >= 2.27
  SYM(commWindowDeregister, opt, "ncclCommWindowDeregister");
  for (const char* s : {"ncclAlltoAll", "ncclAllToAll"}) {
    if (!alltoAll) { SYM(alltoAll, opt, s); if (alltoAll) alltoallSym = s; }
  }
#undef SYM
  NCCLCHECK(*this, getVersion(&version));
}

std::vector<Lib> parseLibs(const std::string& spec0) {
  std::string spec = spec0;
  if (spec.empty() && getenv("RCCLX_BENCH_LIBS")) spec = getenv("RCCLX_BENCH_LIBS");
  if (spec.empty()) spec = "nccl=libnccl.so.2";
  std::vector<Lib> libs;
  for (const std::string& item : split(spec, ',')) {
    if (item.empty()) continue;
    Lib L;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      L.path = item;
      size_t sl = item.rfind('/');
      L.name = sl == std::string::npos ? item : item.substr(sl + 1);
    } else {
      L.name = item.substr(0, eq);
      L.path = item.substr(eq + 1);
      const size_t open = L.name.find('[');
      if (open != std::string::npos) {  // NAME[VAR=VALUE;...]=PATH
        const size_t close = item.find(']', open);
        if (close == std::string::npos || close + 1 >= item.size() || item[close + 1] != '=')
          usageError("bad --libs entry '%s' (want NAME[VAR=VALUE;...]=PATH)", item.c_str());
        for (const std::string& kv : split(item.substr(open + 1, close - open - 1), ';')) {
          const size_t e = kv.find('=');
          if (e == std::string::npos || e == 0)
            usageError("bad variable '%s' in --libs entry '%s' (want VAR=VALUE)", kv.c_str(), item.c_str());
          L.env.push_back({kv.substr(0, e), kv.substr(e + 1)});
        }
        L.name = item.substr(0, open);
        L.path = item.substr(close + 2);
      }
    }
    if (L.name.empty() || L.path.empty()) usageError("bad --libs entry '%s' (want NAME=PATH)", item.c_str());
    for (const Lib& o : libs) {
      if (o.name == L.name) usageError("--libs: library name '%s' given twice", L.name.c_str());
      if (o.path == L.path && o.env != L.env)
        usageError("--libs: libraries '%s' and '%s' are one file (%s) with different variables: dlopen "
                   "gives one instance, which reads its environment once; give each a copy of the file",
                   o.name.c_str(), L.name.c_str(), L.path.c_str());
    }
    libs.push_back(L);
  }
  if (libs.empty() || libs.size() > kMaxLibs) usageError("--libs: need 1..%d libraries", (int)kMaxLibs);
  return libs;
}

// ------------------------------------------------------------------------------------------
// Tables
// ------------------------------------------------------------------------------------------
const TypeDesc kTypes[] = {
    {"int8", ncclInt8, 1, false, 0},          {"uint8", ncclUint8, 1, false, 0},
    {"int32", ncclInt32, 4, false, 0},        {"uint32", ncclUint32, 4, false, 0},
    {"int64", ncclInt64, 8, false, 0},        {"uint64", ncclUint64, 8, false, 0},
    {"half", ncclFloat16, 2, true, 0},        {"float", ncclFloat32, 4, true, 0},
    {"double", ncclFloat64, 8, true, 0},      {"bfloat16", ncclBfloat16, 2, true, 21000},
    {"f8e4m3", ncclFloat8e4m3, 1, true, 22400}, {"f8e5m2", ncclFloat8e5m2, 1, true, 22400},
};
const int kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
const TypeDesc* findType(ncclDataType_t t) {
  for (const TypeDesc& d : kTypes) if (d.type == t) return &d;
  FAIL("unknown datatype %d", (int)t);
}

const OpDesc kOps[] = {
    {"sum", OP_SUM, ncclSum, 0},     {"prod", OP_PROD, ncclProd, 0},
    {"max", OP_MAX, ncclMax, 0},     {"min", OP_MIN, ncclMin, 0},
    {"avg", OP_AVG, ncclAvg, 21000}, {"mulsum", OP_MULSUM, ncclSum, 21100},
};
const int kNumOps = sizeof(kOps) / sizeof(kOps[0]);
const OpDesc kOpNone = {"none", OP_NONE, ncclSum, 0};

// nccl-tests' bus bandwidth factors.
static double busTwoNm1N(int n) { return 2.0 * (n - 1) / n; }  // all_reduce
static double busNm1N(int n) { return (double)(n - 1) / n; }   // all_gather, reduce_scatter, alltoall
static double busOne(int) { return 1.0; }                      // broadcast, reduce

// Indexed by CollId.
const CollDesc kColls[] = {
    //  name            id           reduces rooted sendPerRank recvPerRank inPlace identical rootOut bus        inPlaceApi
    {"all_reduce",     COLL_AR,     true,   false, false,      false,      true,   true,     false,  busTwoNm1N, nullptr},
    {"all_gather",     COLL_AG,     false,  false, false,      true,       true,   false,    false,  busNm1N,    nullptr},
    {"reduce_scatter", COLL_RS,     true,   false, true,       false,      true,   false,    false,  busNm1N,    nullptr},
    {"alltoall",       COLL_A2A,    false,  false, true,       true,       false,  false,    false,  busNm1N,    nullptr},
    {"broadcast",      COLL_BCAST,  false,  true,  false,      false,      true,   true,     false,  busOne,     "ncclBcast"},
    {"reduce",         COLL_REDUCE, true,   true,  false,      false,      true,   false,    true,   busOne,     nullptr},
};
const int kNumColls = sizeof(kColls) / sizeof(kColls[0]);

const CollDesc* findColl(const char* name0) {
  std::string n;
  for (const char* c = name0; *c; c++) if (*c != '_' && *c != '-') n += (char)tolower(*c);
  if (n.size() > 4 && n.compare(n.size() - 4, 4, "perf") == 0) n.resize(n.size() - 4);
  for (const CollDesc& d : kColls) {
    std::string k;
    for (const char* c = d.name; *c; c++) if (*c != '_') k += *c;
    if (n == k) return &d;
  }
  return nullptr;
}

std::string collNames(const char* sep) {
  std::string s;
  for (const CollDesc& d : kColls) s += (s.empty() ? "" : sep) + std::string(d.name);
  return s;
}

const TypeDesc* findTypeByName(const std::string& n0) {
  static const char* alias[][2] = {{"char", "int8"}, {"int", "int32"}, {"fp16", "half"}, {"float16", "half"},
                                   {"fp32", "float"}, {"float32", "float"}, {"fp64", "double"},
                                   {"float64", "double"}, {"bf16", "bfloat16"}, {"fp8e4m3", "f8e4m3"},
                                   {"fp8e5m2", "f8e5m2"}};
  std::string n = n0;
  for (auto& a : alias) if (n == a[0]) n = a[1];
  for (const TypeDesc& d : kTypes) if (n == d.name) return &d;
  return nullptr;
}

static const OpDesc* findOpByName(const std::string& n) {
  for (const OpDesc& d : kOps) if (n == d.name) return &d;
  return nullptr;
}

bool validTypeList(const std::string& arg) {
  if (arg == "all") return true;
  for (const std::string& n : split(arg, ',')) if (!findTypeByName(n)) return false;
  return true;
}

bool validOpList(const std::string& arg) {
  if (arg == "all") return true;
  for (const std::string& n : split(arg, ',')) if (!findOpByName(n)) return false;
  return true;
}

std::vector<const TypeDesc*> resolveTypes(const std::string& arg, int version, int ccMajor) {
  std::vector<const TypeDesc*> v;
  if (arg != "all") {
    for (const std::string& n : split(arg, ',')) v.push_back(findTypeByName(n));
    return v;
  }
  for (const TypeDesc& d : kTypes)
    if (d.minVersion <= version && (d.size > 1 || !d.isFloat || ccMajor >= 9)) v.push_back(&d);
  return v;
}

std::vector<const OpDesc*> resolveOps(const std::string& arg, int version) {
  std::vector<const OpDesc*> v;
  if (arg != "all") {
    for (const std::string& n : split(arg, ',')) v.push_back(findOpByName(n));
    return v;
  }
  for (const OpDesc& d : kOps) if (d.minVersion <= version) v.push_back(&d);
  return v;
}

// nccl-tests getCollByteCount: a buffer of per-rank chunks holds nranks * count elements; in
// place, the other buffer is this rank's chunk of it.
Layout layoutFromCount(CollId c, size_t count, int n) {
  const CollDesc& d = kColls[c];
  return {count, d.sendPerRank ? count * n : count, d.recvPerRank ? count * n : count,
          d.recvPerRank && !d.sendPerRank ? count : 0, d.sendPerRank && !d.recvPerRank ? count : 0};
}

Layout layoutFromBytes(CollId c, size_t bytes, int elt, int n) {
  size_t count = bytes / elt;
  if (!kColls[c].sendPerRank && !kColls[c].recvPerRank) return layoutFromCount(c, count, n);
  size_t base = (count / n) & ~(size_t)(16 / elt - 1);  // nccl-tests: & -(16/eltSize)
  return layoutFromCount(c, base, n);
}

void getBw(CollId c, size_t count, int elt, double sec, int n, double* algBw, double* busBw) {
  const CollDesc& d = kColls[c];
  double bytes = (double)count * elt * (d.sendPerRank || d.recvPerRank ? n : 1);
  *algBw = sec > 0 ? bytes / 1.0e9 / sec : 0;
  *busBw = *algBw * d.busFactor(n);
}

void runColl(const Lib& L, CollId c, const void* s, void* r, size_t count, ncclDataType_t t,
             ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t st, bool inPlaceApi) {
  CHECK(!inPlaceApi || (kColls[c].inPlaceApi && s == r), "bad in-place API call of %s", kColls[c].name);
  switch (c) {
    case COLL_AR: NCCLCHECK(L, L.allReduce(s, r, count, t, op, comm, st)); break;
    case COLL_AG: NCCLCHECK(L, L.allGather(s, r, count, t, comm, st)); break;
    case COLL_RS: NCCLCHECK(L, L.reduceScatter(s, r, count, t, op, comm, st)); break;
    case COLL_A2A:
      CHECK(L.alltoAll, "library %s exports neither ncclAlltoAll nor ncclAllToAll", L.name.c_str());
      NCCLCHECK(L, L.alltoAll(s, r, count, t, comm, st));
      break;
    case COLL_BCAST:
      if (inPlaceApi) {
        CHECK(L.bcast, "library %s does not export ncclBcast", L.name.c_str());
        NCCLCHECK(L, L.bcast(r, count, t, root, comm, st));
      } else {
        CHECK(L.broadcast, "library %s does not export ncclBroadcast", L.name.c_str());
        NCCLCHECK(L, L.broadcast(s, r, count, t, root, comm, st));
      }
      break;
    case COLL_REDUCE:
      CHECK(L.reduce, "library %s does not export ncclReduce", L.name.c_str());
      NCCLCHECK(L, L.reduce(s, r, count, t, op, root, comm, st));
      break;
  }
}

ncclRedOp_t makeOp(const Lib& L, OpId op, ncclDataType_t type, int rank, ncclComm_t comm) {
  if (op == OP_NONE) return ncclSum;
  if (op != OP_MULSUM) return kOps[op].op;
  CHECK(L.redOpCreatePreMulSum, "library %s lacks ncclRedOpCreatePreMulSum", L.name.c_str());
  uint64_t scalar = 0;  // a T holding 1 on even ranks, 2 on odd ranks
  dispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = Tr<T>::fromD(rank % 2 ? 2.0 : 1.0);
    memcpy(&scalar, &v, sizeof(T));
  });
  ncclRedOp_t o;
  NCCLCHECK(L, L.redOpCreatePreMulSum(&o, &scalar, type, ncclScalarHostImmediate, comm));
  return o;
}

void releaseOp(const Lib& L, OpId op, ncclRedOp_t o, ncclComm_t comm) {
  if (op == OP_MULSUM) NCCLCHECK(L, L.redOpDestroy(o, comm));
}

// ------------------------------------------------------------------------------------------
// Kernels
// ------------------------------------------------------------------------------------------
HD uint64_t seedAt(uint64_t seed, const uint64_t* epoch) { return epoch ? seed + mix64(*epoch) : seed; }
#define GRID_LOOP(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)
static dim3 gridFor(size_t n) { return dim3((unsigned)std::min<size_t>((n + 255) / 256, 2048)); }

template <class T>
__global__ void kFill(T* buf, size_t n, size_t j0, int rank, GenParams p, const uint64_t* epoch) {
  const uint64_t seed = seedAt(p.seed, epoch);
  GRID_LOOP(i, n) buf[i] = genVal<T>(p, seed, rank, j0 + i);
}

template <class T>
__global__ void kCountInputChanges(const T* buf, size_t n, size_t j0, int rank, GenParams p,
                                   const uint64_t* epoch, unsigned long long* bad) {
  const uint64_t seed = seedAt(p.seed, epoch);
  unsigned long long nb = 0;
  GRID_LOOP(i, n) nb += bitsOf(buf[i]) != bitsOf(genVal<T>(p, seed, rank, j0 + i));
  if (nb) atomicAdd(bad, nb);
}

// Expected element i of the result of collective c on 'rank' (exact-mode inputs).
template <class T>
__device__ T expectedAt(CollId c, size_t count, int rank, int root, const GenParams& p, size_t i) {
  const int n = p.nranks;
  int src;
  size_t j;
  sourceOf(c, count, rank, root, i, &src, &j);
  if (src >= 0) return genVal<T>(p, p.seed, src, j);  // a copy of one rank's input
  double acc = exactVal<T>(p.op, 0, n, j, p.seed);
  for (int r = 1; r < n; r++) {
    double x = exactVal<T>(p.op, r, n, j, p.seed);
    switch (p.op) {
      case OP_PROD: acc *= x; break;
      case OP_MAX: acc = x > acc ? x : acc; break;
      case OP_MIN: acc = x < acc ? x : acc; break;
      case OP_MULSUM: acc += (r % 2 ? 2.0 : 1.0) * x; break;
      default: acc += x; break;  // sum, avg
    }
  }
  if (p.op == OP_AVG) acc /= n;
  return Tr<T>::fromD(acc);
}

template <class T>
__global__ void kVerify(const T* out, size_t n, CollId c, size_t count, int rank, int root, GenParams p,
                        uint64_t tol, unsigned long long* bad) {
  unsigned long long nb = 0;
  GRID_LOOP(i, n) nb += ulpDist(out[i], expectedAt<T>(c, count, rank, root, p, i)) > tol;
  if (nb) atomicAdd(bad, nb);
}

__global__ void kBump(uint64_t* e) { *e += 1; }

void launchFill(ncclDataType_t t, void* buf, size_t n, size_t j0, int rank, const GenParams& p,
                const uint64_t* epoch, cudaStream_t s) {
  if (n == 0) return;
  dispatchType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kFill<T><<<gridFor(n), 256, 0, s>>>((T*)buf, n, j0, rank, p, epoch);
  });
  CUDACHECK(cudaGetLastError());
}

void launchCountInputChanges(ncclDataType_t t, const void* buf, size_t n, size_t j0, int rank,
                             const GenParams& p, const uint64_t* epoch, unsigned long long* bad,
                             cudaStream_t s) {
  if (n == 0) return;
  dispatchType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kCountInputChanges<T><<<gridFor(n), 256, 0, s>>>((const T*)buf, n, j0, rank, p, epoch, bad);
  });
  CUDACHECK(cudaGetLastError());
}

void launchVerify(ncclDataType_t t, const void* out, CollId c, const Layout& L, int rank, int root,
                  const GenParams& p, uint64_t ulpTol, unsigned long long* bad, cudaStream_t s) {
  if (L.recvCount == 0) return;
  dispatchType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kVerify<T><<<gridFor(L.recvCount), 256, 0, s>>>((const T*)out, L.recvCount, c, L.count, rank,
                                                     root, p, ulpTol, bad);
  });
  CUDACHECK(cudaGetLastError());
}

void launchBump(uint64_t* epoch, cudaStream_t s) {
  kBump<<<1, 1, 0, s>>>(epoch);
  CUDACHECK(cudaGetLastError());
}

// ------------------------------------------------------------------------------------------
// Processes, threads, rendezvous
// ------------------------------------------------------------------------------------------
Shared* createShared(const Topo& topo, size_t refBytes) {
  CHECK(topo.nprocs >= 1 && topo.nthreads >= 1 && topo.ngpus >= 1, "bad -P/-t/-g");
  CHECK(topo.nprocs * topo.nthreads <= kMaxThreads, "at most %d threads in all", (int)kMaxThreads);
  CHECK(topo.nranks() <= kMaxRanks, "at most %d ranks", (int)kMaxRanks);
  CHECK(topo.ngpus <= kMaxGpusPerThread, "at most %d GPUs per thread", (int)kMaxGpusPerThread);
  size_t bytes = sizeof(Shared) + refBytes;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap of %zu shared bytes failed: %s", bytes, strerror(errno));
  Shared* sh = (Shared*)m;  // anonymous mappings start zeroed
  sh->refBytes = refBytes;
  pthread_barrierattr_t a;
  CHECK(pthread_barrierattr_init(&a) == 0, "pthread_barrierattr_init");
  CHECK(pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0, "barrier pshared");
  CHECK(pthread_barrier_init(&sh->barrier, &a, topo.nprocs * topo.nthreads) == 0, "barrier init");
  pthread_barrierattr_destroy(&a);
  return sh;
}

static double nowSec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void onAlarm(int) {
  const char m[] = "# rccl-tests-compat: --timeout expired, exiting with status 124\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  _exit(124);
}

int launch(int nprocs, int timeoutSec, int (*procMain)(int)) {
  fflush(stdout);
  fflush(stderr);
  if (nprocs == 1) {  // in this process; SIGALRM enforces the timeout
    if (timeoutSec > 0) { signal(SIGALRM, onAlarm); alarm(timeoutSec); }
    g_proc = 0;
    int rc = procMain(0);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  const pid_t parent = getpid();
  std::vector<pid_t> pids(nprocs, 0);
  for (int p = 0; p < nprocs; p++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "# fork failed: %s\n", strerror(errno));
      for (pid_t q : pids) if (q > 0) kill(q, SIGKILL);
      return 2;  // a setup error
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      if (getppid() != parent) _exit(1);
      g_proc = p;
      int rc = procMain(p);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[p] = pid;
  }
  auto killAll = [&](int sig) { for (pid_t q : pids) if (q > 0) kill(q, sig); };
  // When one process fails, the others get 5 s to finish on their own (they usually fail the
  // same way, e.g. wrong values); then SIGTERM, then SIGKILL 3 s later.
  int rc = 0, alive = nprocs, phase = 0;  // phase 0: running, 1: grace, 2: TERM sent, 3: KILL sent
  const double t0 = nowSec();
  double deadline = 0;
  while (alive > 0) {
    int st = 0;
    pid_t w = waitpid(-1, &st, WNOHANG);
    if (w > 0) {
      int p = 0;
      while (p < nprocs && pids[p] != w) p++;
      if (p == nprocs) continue;
      pids[p] = 0;
      alive--;
      int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (code != 0 && rc == 0) rc = code;
      if (!WIFEXITED(st) && phase < 2)
        fprintf(stderr, "# process %d (pid %d) was killed by signal %d\n", p, (int)w, WTERMSIG(st));
      if (code != 0 && phase == 0) { phase = 1; deadline = nowSec() + 5; }
      continue;
    }
    if (w < 0 && errno != EINTR) break;
    usleep(20000);
    const double now = nowSec();
    if (phase == 0 && timeoutSec > 0 && now - t0 > timeoutSec) {
      fprintf(stderr, "# --timeout %d s expired: killing all processes\n", timeoutSec);
      rc = 124;
      phase = 1;
      deadline = now;
    }
    if (phase == 1 && now >= deadline) {
      fprintf(stderr, "# stopping the %d remaining process(es)\n", alive);
      killAll(SIGTERM);
      phase = 2;
      deadline = now + 3;
    } else if (phase == 2 && now >= deadline) {
      killAll(SIGKILL);
      phase = 3;
    }
  }
  return rc;
}

int Proc::minVersion() const {
  int v = 1 << 30;
  for (const Lib& L : libs) v = std::min(v, L.version);
  return v;
}

void procSetup(Proc& P, int proc, const Topo& topo, Shared* sh, const std::string& libSpec) {
  g_proc = proc;
  P.topo = topo;
  P.proc = proc;
  P.sh = sh;
  // Simulated hosts (RCCLX_BENCH_SIM_HOSTS=PREFIX; scripts/gpu-tests.sh, step sim): every
  // process is a host of its own for the stock library, NCCL_HOSTID=PREFIX-<process> (set before
  // any library reads it), and every rank uses GPU $NCCL_TESTS_DEVICE. The stock library refuses
  // two ranks of one host on one GPU, hence one rank per process.
  const char* sim = getenv("RCCLX_BENCH_SIM_HOSTS");
  const bool simHosts = sim && *sim;
  const int per = topo.nthreads * topo.ngpus;
  if (simHosts) {
    CHECK(per == 1, "RCCLX_BENCH_SIM_HOSTS needs one rank per process (-t 1 -g 1), not %d", per);
    setenv("NCCL_HOSTID", (std::string(sim) + "-" + std::to_string(proc)).c_str(), 1);
    // Hosts of L ranks for rcclx (RCCLX_BENCH_SIM_LOCAL=L; with RCCLX_BENCH_SIM_INTERLEAVE=1
    // host = rank mod hosts, so hosts are not contiguous in rank order): RCCLX_SIM_HOSTID.
    if (const char* l = getenv("RCCLX_BENCH_SIM_LOCAL")) {
      const int local = atoi(l), hosts = local > 0 ? topo.nprocs / local : 0;
      CHECK(local > 0 && hosts * local == topo.nprocs, "RCCLX_BENCH_SIM_LOCAL=%s does not divide %d ranks", l,
            topo.nprocs);
      const char* il = getenv("RCCLX_BENCH_SIM_INTERLEAVE");
      const int host = il && !strcmp(il, "1") ? proc % hosts : proc / local;
      setenv("RCCLX_SIM_HOSTID", (std::string(sim) + "-h" + std::to_string(host)).c_str(), 1);
    }
  }
  P.libs = parseLibs(libSpec);
  for (Lib& L : P.libs) L.load();
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess)
    FAIL("no usable CUDA device: cudaGetDeviceCount: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  const char* d0 = getenv("NCCL_TESTS_DEVICE");
  const int gpu0 = d0 ? atoi(d0) : 0;
  if (simHosts)
    CHECK(gpu0 < ndev, "GPU %d is not visible (%d are)", gpu0, ndev);
  else
    CHECK(gpu0 + (proc + 1) * per <= ndev, "process %d needs GPUs %d..%d but only %d are visible",
          proc, gpu0 + proc * per, gpu0 + (proc + 1) * per - 1, ndev);
  P.thr.assign(topo.nthreads, Thr());
  for (int t = 0; t < topo.nthreads; t++) {
    Thr& T = P.thr[t];
    T.p = &P;
    T.thread = t;
    T.gtid = proc * topo.nthreads + t;
    for (int i = 0; i < topo.ngpus; i++) {
      T.rank[i] = T.gtid * topo.ngpus + i;
      T.gpu[i] = simHosts ? gpu0 : gpu0 + T.rank[i];  // = gpu0 + (proc*nthreads + t)*ngpus + i
    }
  }
}

void thrSetup(Thr& t, bool nullStream) {
  for (int i = 0; i < t.p->topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    if (nullStream) t.stream[i] = nullptr;
    else CUDACHECK(cudaStreamCreateWithFlags(&t.stream[i], cudaStreamNonBlocking));
    RankInfo& ri = t.p->sh->info[t.rank[i]];
    cudaDeviceProp prop;
    CUDACHECK(cudaGetDeviceProperties(&prop, t.gpu[i]));
    ri.pid = (int)getpid();
    ri.dev = t.gpu[i];
    snprintf(ri.name, sizeof ri.name, "%s", prop.name);
    CUDACHECK(cudaDeviceGetPCIBusId(ri.bus, sizeof ri.bus, t.gpu[i]));
    gethostname(ri.host, sizeof ri.host - 1);
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
}

void Thr::barrier() {
  int r = pthread_barrier_wait(&p->sh->barrier);
  CHECK(r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD, "pthread_barrier_wait: %d", r);
}

// Every thread writes its values into slot[parity][gtid], waits at the barrier, then reads all
// slots. The next call uses the other parity; a fast thread can only come back to this parity
// after the barrier of the next call, which a slow thread reaches only after it has finished
// reading these slots. So one barrier per reduction is enough.
void Thr::allreduce(double* v, int n, const int* modes) {
  CHECK(n <= 8, "allreduce of %d values", n);
  const int T = p->topo.nprocs * p->topo.nthreads;
  double(*s)[8] = p->sh->slots[parity];
  for (int k = 0; k < n; k++) s[gtid][k] = v[k];
  barrier();
  for (int k = 0; k < n; k++) {
    double a = s[0][k];
    for (int g = 1; g < T; g++) {
      double x = s[g][k];
      switch (modes[k]) {
        case RED_SUM: case RED_AVG: a += x; break;
        case RED_MIN: a = std::min(a, x); break;
        case RED_MAX: a = std::max(a, x); break;
        default: break;  // RED_R0: value of global thread 0
      }
    }
    v[k] = modes[k] == RED_AVG ? a / T : a;
  }
  parity ^= 1;
}

void Thr::syncStreams(int lib) {
  const int G = p->topo.ngpus;
  bool done[kMaxGpusPerThread] = {};
  int remaining = G;
  while (remaining > 0) {
    bool idle = true;
    for (int i = 0; i < G; i++) {
      if (done[i]) continue;
      if (!stream[i]) CUDACHECK(cudaSetDevice(gpu[i]));  // the NULL stream is per device
      cudaError_t e = cudaStreamQuery(stream[i]);
      if (e == cudaSuccess) { done[i] = true; remaining--; idle = false; continue; }
      if (e != cudaErrorNotReady) CUDACHECK(e);
      if (lib >= 0 && comm[lib][i]) {
        const Lib& L = p->libs[lib];
        ncclResult_t ae;
        NCCLCHECK(L, L.commGetAsyncError(comm[lib][i], &ae));
        if (ae != ncclSuccess) ncclDie(L, ae, __FILE__, __LINE__, "ncclCommGetAsyncError (asynchronous error)");
      }
    }
    if (idle) sched_yield();
  }
  if (!stream[0]) CUDACHECK(cudaSetDevice(gpu[0]));
}

void initComms(Thr& t, bool parallel) {
  Proc& P = *t.p;
  for (const Lib& L : P.libs)
    CHECK(!parallel || L.env.empty(), "library %s: per-library variables need one thread creating the "
          "communicators (they are set around its ncclCommInitRank calls); drop the parallel init",
          L.name.c_str());
  if (t.gtid == 0)
    for (size_t l = 0; l < P.libs.size(); l++) NCCLCHECK(P.libs[l], P.libs[l].getUniqueId(&P.sh->ids[l]));
  t.barrier();  // unique ids are visible to everybody after this
  for (size_t l = 0; l < P.libs.size(); l++) {
    const Lib& L = P.libs[l];
    const ncclUniqueId id = P.sh->ids[l];
    std::vector<std::pair<Thr*, int>> mine;  // communicators this thread creates
    for (Thr& o : P.thr)
      if (parallel ? &o == &t : t.thread == 0)
        for (int i = 0; i < P.topo.ngpus; i++) mine.push_back({&o, i});
    // rcclx reads its low-precision switches again for each communicator it creates. Only the
    // thread creating them sets them; the others wait in the barrier below (not parallel).
    ScopedLibEnv scope(L, !mine.empty());
    if (mine.size() > 1) NCCLCHECK(L, L.groupStart());
    for (auto& m : mine) {
      CUDACHECK(cudaSetDevice(m.first->gpu[m.second]));
      NCCLCHECK(L, L.commInitRank(&m.first->comm[l][m.second], P.topo.nranks(), id, m.first->rank[m.second]));
    }
    if (mine.size() > 1) NCCLCHECK(L, L.groupEnd());
  }
  t.barrier();  // all communicators of this process exist
  CUDACHECK(cudaSetDevice(t.gpu[0]));
}

void destroyComms(Thr& t) {
  t.barrier();
  for (size_t l = 0; l < t.p->libs.size(); l++)
    for (int i = 0; i < t.p->topo.ngpus; i++)
      if (t.comm[l][i]) {
        CUDACHECK(cudaSetDevice(t.gpu[i]));
        NCCLCHECK(t.p->libs[l], t.p->libs[l].commDestroy(t.comm[l][i]));
        t.comm[l][i] = nullptr;
      }
}

void runThreads(Proc& P, void (*body)(Thr&)) {
  std::vector<std::thread> ts;
  for (size_t t = 1; t < P.thr.size(); t++) ts.emplace_back(body, std::ref(P.thr[t]));
  body(P.thr[0]);
  for (auto& x : ts) x.join();
}

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------
void usageError(const char* fmt, ...) {
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (--help lists the options)\n");
  exit(2);
}

long long parseIntArg(const char* v, const char* opt, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno == ERANGE || x < lo || x > hi)
    usageError("invalid value '%s' for %s: need an integer in %lld..%lld", v, opt, lo, hi);
  return x;
}

double parseDoubleArg(const char* v, const char* opt) {
  char* end = nullptr;
  const double x = strtod(v, &end);
  if (end == v || *end || !std::isfinite(x)) usageError("invalid value '%s' for %s: need a number", v, opt);
  return x;
}

double parseSize(const char* s) {
  char* end = nullptr;
  const double v = strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return -1;
  double scale = 1;
  switch (*end) {
    case 'G': case 'g': scale = 1024.0 * 1024 * 1024; end++; break;
    case 'M': case 'm': scale = 1024.0 * 1024; end++; break;
    case 'K': case 'k': scale = 1024.0; end++; break;
    default: break;
  }
  const double bytes = v * scale;
  return *end || bytes > 9.0e18 ? -1 : bytes;  // beyond what a size_t holds: an error
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  while (true) {
    size_t b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

void setDefaultEnv() { setenv("NCCL_NVLS_ENABLE", "0", 0); }

void printDevices(const Proc& P) {
  printf("# Using devices\n");
  for (int r = 0; r < P.topo.nranks(); r++) {
    const RankInfo& ri = P.sh->info[r];
    printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s\n", r, ri.pid, ri.host, ri.dev,
           ri.bus, ri.name);
  }
}

cudaStreamCaptureMode captureMode(const std::string& name, int nthreads) {
  if (name == "global") return cudaStreamCaptureModeGlobal;
  if (name == "thread") return cudaStreamCaptureModeThreadLocal;
  if (name == "relaxed") return cudaStreamCaptureModeRelaxed;
  if (!name.empty() && name != "auto") usageError("invalid --capture-mode '%s': need global, thread or relaxed", name.c_str());
  return nthreads > 1 ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal;
}
