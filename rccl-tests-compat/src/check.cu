// rcclx_check: differential correctness checker. Runs every case with library A (the reference,
// e.g. stock NCCL) and library B (e.g. rcclx) on identical seeded random inputs and compares the
// outputs element by element; also checks that B wrote nothing outside its output (guard bytes,
// untouched send buffer) and, for all_reduce and broadcast, that every rank got bit-identical
// output from B. Rooted collectives (broadcast) run with every root; a collective with a second,
// in-place-only entry point (ncclBcast) runs it as one more mode.
// Stress modes: --random-sizes K (back-to-back calls of random sizes and alignments) and --graph
// (mixed sizes captured in one CUDA graph, replayed with inputs that change on every replay).
#include "common.h"

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>

struct COpts {
  Topo topo;
  std::string libs, typeArg = "all", opArg = "all", capture;
  std::vector<const CollDesc*> colls;
  std::vector<size_t> counts = {1, 7, 255, 1023, 4099, 1048581};
  int inplace = 2;  // 0 out-of-place, 1 in-place, 2 both
  uint64_t seed = 1;
  long long ulpTol = -1;  // -1: auto (2 for floating-point avg, else 0)
  double relTol = -1;     // -1: auto (0 with <= 2 ranks, else nranks * epsilon of the type)
  double absTol = 0;      // added to the --rel-tol bound (INT8 transports: error ~ block amax)
  long long randomSizes = 0;
  bool graph = false;
  int graphReplays = 10, bitwise = -1, show = 3, timeout = 600;
  std::string expectRoutes = "auto";  // auto | off (see routeExpectations)
  size_t maxCount() const { return *std::max_element(counts.begin(), counts.end()); }
};
static COpts O;
static Shared* g_shared = nullptr;
static std::vector<const TypeDesc*> g_types;
static std::vector<const OpDesc*> g_ops;
static long long g_pass = 0, g_fail = 0;  // counted by global thread 0
static std::vector<bool> g_inPlaceApi;    // by CollId: both libraries export CollDesc::inPlaceApi

enum { kGuard = 4096, kMaxOff = 32, kSlots = 4 };
static const unsigned char kPoison[2] = {0xFF, 0xFE};  // library A, library B

struct CBufs {
  char *send[kMaxGpusPerThread], *recv[kMaxGpusPerThread];   // recv: guard | data | guard
  char *slots[kMaxGpusPerThread], *scratch[kMaxGpusPerThread];  // stress modes
  unsigned long long* bad[kMaxGpusPerThread];
  uint64_t* epoch[kMaxGpusPerThread];
  std::vector<unsigned char> host[2][kMaxGpusPerThread];  // outputs of A and B
};
static std::vector<CBufs> g_bufs;  // per thread of this process
static size_t g_dataBytes = 0, g_slotBytes = 0;
static int g_nslots = 0;

// ------------------------------------------------------------------------------------------
// Comparison
// ------------------------------------------------------------------------------------------
struct Case {  // one collective call as seen by one rank
  CollId coll;
  const TypeDesc* type;
  OpId op;
  size_t count, j0;  // NCCL count; input element offset (random-size mode)
  int rank;
  GenParams gp;
  uint64_t seed;  // effective seed of the inputs
  int root = -1;            // rooted collectives; kRandomRoot: one per call (--random-sizes)
  bool inPlaceApi = false;  // through the collective's in-place-only entry point (ncclBcast)
};
enum { kRandomRoot = -2 };

struct Stats {
  double nbad = 0, maxulp = 0, xrank = 0, oobB = 0, oobA = 0, routeBad = 0;
};

static double epsOf(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: return ldexp(1.0, -10);
    case ncclBfloat16: return ldexp(1.0, -7);
    case ncclFloat32: return ldexp(1.0, -23);
    case ncclFloat64: return ldexp(1.0, -52);
    case ncclFloat8e4m3: return ldexp(1.0, -3);
    case ncclFloat8e5m2: return ldexp(1.0, -2);
    default: return 0;
  }
}
static uint64_t ulpTolFor(const Case& c) {
  if (O.ulpTol >= 0) return (uint64_t)O.ulpTol;
  return c.op == OP_AVG && c.type->isFloat ? 2 : 0;
}
static double relTolFor(const Case& c) {
  if (!c.type->isFloat || c.op == OP_MIN || c.op == OP_MAX) return 0;
  if (O.relTol >= 0) return O.relTol;  // AllGather/AllToAll too: lossy (FP8) transports
  if (c.op == OP_NONE) return 0;
  return c.gp.nranks <= 2 ? 0 : c.gp.nranks * epsOf(c.type->type);
}

// ------------------------------------------------------------------------------------------
// Routes: which path each of library B's calls took (rcclx's per-route counters,
// rcclxCommGetRouteStats, when B exports them) against the path the case expects: rcclx's kernel
// family (`<collective>.ll|flat|tree`, or low precision) or `forwarded` to the stock library.
// The expectation is a model of its own of rcclx's documented policy with the default crossovers
// (docs/ARCHITECTURE.md; the numbers of src/collective.rs COLLS), not rcclx's `decide`: a case
// that should run an rcclx kernel and was forwarded (kernels off, a setup that failed, a wrong
// decision) fails, and so does one that should have been forwarded. A run whose environment
// changes the routing beyond the model (crossover or DDA switches, per-collective low-precision
// switches, peer-to-peer limits) checks no routes and says so.
// ------------------------------------------------------------------------------------------
typedef ncclResult_t (*RouteStatsFn)(ncclComm_t, void* stats, int capacity, int* count);
typedef const char* (*RouteNameFn)(int);
enum { kMaxRoutes = 64 };
struct RouteCalls { uint64_t calls[kMaxRoutes]; };  // per route index, one rank of library B
static RouteStatsFn g_routeStats = nullptr;
static RouteNameFn g_routeName = nullptr;
static bool g_routesChecked = false;
// ---- the route model (tests/route_model.rs compiles this part alone against rcclx's decide)
struct RouteModel {
  bool lowpAll = false;      // RCCL_LOW_PRECISION_ENABLE
  long long lowpMin = -1;    // RCCLX_LP_MIN_BYTES (-1: the defaults)
  uint64_t ll128Max = 0;     // RCCLX_LL128_MAX_BYTES (0: off)
  int local = 0;             // ranks per simulated host (RCCLX_BENCH_SIM_LOCAL; 0: one host)
  bool hierExact = false;    // RCCLX_HIER_EXACT
  bool hierRs = false;       // RCCLX_HIER_RS
  bool hierAg = false;       // RCCLX_HIER_AG
};
static RouteModel g_model;

struct CollDefaults {  // one row of src/collective.rs COLLS: by rank row 2, 4, 8 ranks
  const char* name;
  bool whole, twoShot, lowp;
  uint64_t max[3], oneShotMax[3], lowpMin[3];
};
enum : uint64_t { KiB = 1024, MiB = 1024 * 1024 };
static const CollDefaults kCollDefaults[] = {  // by CollId
    {"allreduce", true, true, true, {64 * MiB, 16 * MiB, 8 * MiB}, {64 * MiB, MiB, 256 * KiB}, {MiB, 16 * MiB, 16 * MiB}},
    {"allgather", false, false, true, {64 * MiB, 16 * MiB, 16 * MiB}, {64 * MiB, 16 * MiB, 16 * MiB}, {4 * MiB, 16 * MiB, 16 * MiB}},
    {"reducescatter", false, false, true, {64 * MiB, 8 * MiB, 8 * MiB}, {64 * MiB, 8 * MiB, 8 * MiB}, {2 * MiB, 16 * MiB, 16 * MiB}},
    {"alltoall", false, false, true, {16 * MiB, 2 * MiB, 2 * MiB}, {16 * MiB, 2 * MiB, 2 * MiB}, {4 * MiB, 16 * MiB, 16 * MiB}},
    {"broadcast", true, false, false, {256 * KiB, 256 * KiB, 256 * KiB}, {256 * KiB, 256 * KiB, 256 * KiB}, {~0ull, ~0ull, ~0ull}},
    {"reduce", true, false, false, {64 * MiB, MiB, 256 * KiB}, {64 * MiB, MiB, 256 * KiB}, {~0ull, ~0ull, ~0ull}},
};
// AllReduce's one-shot limit on NVLink by rank count 2..8 (a model's crossovers, not rank rows).
static const uint64_t kAllReduceOneShotMax[7] = {64 * MiB, 568 * KiB, 256 * KiB, 160 * KiB, 112 * KiB, 88 * KiB, 72 * KiB};
static const uint64_t kLlMax[3] = {256 * KiB, 64 * KiB, 32 * KiB};  // bytes per rank

// The route a call of B is expected to take: `forwarded`, `<coll>.ll|flat|tree|ll128`,
// `<coll>.lowp` (every low-precision kernel of the collective, FP8 or INT8, pair or not) or, on
// a communicator spanning hosts, `allreduce.hier` / `reducescatter.hier` / `allgather.hier` (low precision on the rails) or the first host
// step of the exact hierarchy (`reducescatter.ll|flat`; `allreduce.ll|flat` below one element
// per rank of a host).
static std::string expectedRoute(CollId coll, const TypeDesc* type, OpId op, size_t count, int root, int nranks) {
  const CollDefaults& d = kCollDefaults[coll];
  const int row = nranks <= 2 ? 0 : nranks <= 4 ? 1 : 2;
  const uint64_t bytes = (uint64_t)count * (d.whole ? 1 : nranks) * type->size;
  const bool reduces = kColls[coll].reduces;
  if (count == 0 || nranks < 2) return "forwarded";
  const bool lowpType = type->type == ncclFloat32 || type->type == ncclBfloat16 || type->type == ncclFloat16;
  const uint64_t lowpMin = g_model.lowpMin >= 0 ? (uint64_t)g_model.lowpMin : d.lowpMin[row];
  // ncclSum, or op "none" of the data-movement collectives (their calls carry ncclSum).
  const bool sum = op == OP_SUM || op == OP_NONE;
  const int local = g_model.local;
  if (local > 0 && local < nranks) {  // several hosts: AllReduce; ReduceScatter, AllGather with low precision
    const bool lowp = g_model.lowpAll && lowpType && sum && bytes >= lowpMin;
    if (coll == COLL_RS && lowp && g_model.hierRs) return "reducescatter.hier";  // hosts contiguous or round-robin
    if (coll == COLL_AG && lowp && g_model.hierAg) return "allgather.hier";
    if (coll != COLL_AR) return "forwarded";
    if (lowp) return "allreduce.hier";
    if (!g_model.hierExact || local < 2 || (int)type->type > 9 || op == OP_MULSUM) return "forwarded";
    if (op == OP_AVG && (int)type->type <= 5) return "forwarded";  // integers would be divided twice
    const size_t shard = count / local;
    const uint64_t perRank = (shard > 0 ? shard : count) * type->size;
    return std::string(shard > 0 ? "reducescatter" : "allreduce") + (perRank <= kLlMax[row] ? ".ll" : ".flat");
  }
  if (d.lowp && g_model.lowpAll && lowpType && sum && bytes >= lowpMin) return std::string(d.name) + ".lowp";
  if (reduces && (int)type->type > 9) return "forwarded";  // no DDA kernel for FP8 reductions
  if (reduces && op == OP_MULSUM) return "forwarded";      // a user-made op (PreMulSum)
  if (kColls[coll].rooted && (root < 0 || root >= nranks)) return "forwarded";
  if ((uint64_t)count * type->size <= kLlMax[row]) return std::string(d.name) + ".ll";
  if (bytes > d.max[row]) return "forwarded";
  const int n = nranks > 8 ? 8 : nranks;
  const uint64_t oneShotMax = coll == COLL_AR && kAllReduceOneShotMax[n - 2] < d.max[row] ? kAllReduceOneShotMax[n - 2] : d.oneShotMax[row];
  const bool oneShot = !d.twoShot || bytes <= oneShotMax;
  // LL128 (AllReduce, AllGather) where the one-shot would run, up to its limit.
  if ((coll == COLL_AR || coll == COLL_AG) && oneShot && bytes <= g_model.ll128Max) return std::string(d.name) + ".ll128";
  if (oneShot) return std::string(d.name) + ".flat";
  return std::string(d.name) + ".tree";
}

// ---- end of the route model

// A route of B's statistics by the class the model names (low-precision kernels are one class).
static std::string routeClass(int index) {
  std::string n = g_routeName(index);
  const size_t dot = n.find('.');
  if (dot == std::string::npos) return n;
  const std::string algo = n.substr(dot + 1);
  if (algo.rfind("hier_", 0) == 0) return n.substr(0, dot) + ".hier";
  if (algo.rfind("lowp", 0) == 0 || algo.rfind("int8", 0) == 0) return n.substr(0, dot) + ".lowp";
  return n;
}

static bool envSet(const Lib& L, const char* name, std::string* value) {
  for (const auto& kv : L.env)
    if (kv.first == name) { if (value) *value = kv.second; return true; }
  const char* v = getenv(name);
  if (v && value) *value = v;
  return v != nullptr;
}

// Whether this run checks routes (prints why not otherwise); reads B's model inputs.
static bool routeExpectations(const Lib& B, int proc) {
  if (O.expectRoutes == "off") return false;
  g_routeStats = (RouteStatsFn)dlsym(B.handle, "rcclxCommGetRouteStats");
  g_routeName = (RouteNameFn)dlsym(B.handle, "rcclxRouteName");
  auto off = [&](const std::string& why) {
    if (proc == 0) printf("# routes: not checked (%s)\n", why.c_str());
    return false;
  };
  if (!g_routeStats || !g_routeName) return off("library " + B.name + " has no rcclx route statistics");
  // Variables that move the crossovers or switch paths beyond the model.
  static const char* const prefixes[] = {"RCCL_DDA_", "RCCL_ENABLE_DDA", "RCCLX_DDA_", "RCCL_LOW_PRECISION_ENABLE_",
                                         "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"};
  for (char** e = environ; *e; e++)
    for (const char* p : prefixes)
      if (!strncmp(*e, p, strlen(p))) return off(std::string("the environment sets ") + *e);
  for (const auto& kv : B.env)
    for (const char* p : prefixes)
      if (!strncmp(kv.first.c_str(), p, strlen(p))) return off("library " + B.name + " sets " + kv.first);
  std::string v;
  // rcclx's tuning file (`python -m rcclx tune`), where it reads one, moves the crossovers too.
  if (envSet(B, "RCCLX_TUNING_FILE", &v)) {
    if (!v.empty()) return off("RCCLX_TUNING_FILE=" + v);
  } else {
    const char* xdg = getenv("XDG_CONFIG_HOME");
    const char* home = getenv("HOME");
    const std::string file = xdg && *xdg ? std::string(xdg) + "/rcclx/tuning.toml"
                             : home      ? std::string(home) + "/.config/rcclx/tuning.toml"
                                         : std::string();
    if (!file.empty() && access(file.c_str(), F_OK) == 0) return off("a tuning file: " + file);
  }
  if (envSet(B, "RCCL_LOW_PRECISION_ENABLE", &v)) {
    for (char& ch : v) ch = (char)tolower((unsigned char)ch);
    g_model.lowpAll = v == "1" || v == "true" || v == "yes" || v == "on";
  }
  if (envSet(B, "RCCLX_LP_MIN_BYTES", &v)) {
    char* end = nullptr;
    g_model.lowpMin = strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || g_model.lowpMin < 0) return off("RCCLX_LP_MIN_BYTES=" + v + " is not a plain byte count");
  }
  if (const char* sl = getenv("RCCLX_BENCH_SIM_LOCAL")) g_model.local = atoi(sl);
  if (envSet(B, "RCCLX_HIER_EXACT", &v)) g_model.hierExact = v == "1";
  if (envSet(B, "RCCLX_HIER_RS", &v)) g_model.hierRs = v == "1";
  if (envSet(B, "RCCLX_HIER_AG", &v)) g_model.hierAg = v == "1";
  if (envSet(B, "RCCLX_LL128_MAX_BYTES", &v)) {
    char* end = nullptr;
    const long long ll128 = strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || ll128 < 0) return off("RCCLX_LL128_MAX_BYTES=" + v + " is not a plain byte count");
    g_model.ll128Max = (uint64_t)ll128;
  }
  if (proc == 0)
    printf("# routes: every call of %s checked against the expected route (default crossovers%s%s%s%s)\n",
           B.name.c_str(), g_model.lowpAll ? ", low precision on" : "", g_model.ll128Max ? ", LL128 on" : "",
           g_model.local ? (", " + std::to_string(g_model.local) + " ranks per host").c_str() : "",
           g_model.hierExact ? ", exact hierarchy on" : "");
  return true;
}

static RouteCalls routeCalls(ncclComm_t comm) {
  RouteCalls r{};
  uint64_t raw[2 * kMaxRoutes] = {};  // rcclxRouteStats: {calls, bytes}
  int n = 0;
  if (g_routeStats(comm, raw, kMaxRoutes, &n) != ncclSuccess) n = 0;
  for (int i = 0; i < std::min(n, (int)kMaxRoutes); i++) r.calls[i] = raw[2 * i];
  return r;
}

// Before B's calls of one case: every local rank's counters.
static void routesBefore(Thr& t, RouteCalls* before) {
  if (!g_routesChecked) return;
  for (int i = 0; i < t.p->topo.ngpus; i++) before[i] = routeCalls(t.comm[1][i]);
}

// After them: the routes each local rank's calls took must be `want` (route class -> calls).
static void routesAfter(Thr& t, const RouteCalls* before, const std::map<std::string, uint64_t>& want, Stats& st) {
  if (!g_routesChecked) return;
  for (int i = 0; i < t.p->topo.ngpus; i++) {
    const RouteCalls now = routeCalls(t.comm[1][i]);
    std::map<std::string, uint64_t> got;
    for (int k = 0; k < kMaxRoutes; k++)
      if (now.calls[k] > before[i].calls[k]) got[routeClass(k)] += now.calls[k] - before[i].calls[k];
    if (got == want) continue;
    st.routeBad++;
    auto text = [](const std::map<std::string, uint64_t>& m) {
      std::string s;
      for (const auto& kv : m) s += (s.empty() ? "" : " ") + kv.first + "=" + std::to_string(kv.second);
      return s.empty() ? std::string("nothing") : s;
    };
    printf("#   rank %d: routes expected %s, ran %s\n", t.rank[i], text(want).c_str(), text(got).c_str());
  }
}

// Exact-ish reference (double) of output element k and the magnitude used by --rel-tol.
template <class T> static void refAt(const Case& c, size_t k, double* ref, double* scale) {
  const int n = c.gp.nranks;
  int src;
  size_t j;
  sourceOf(c.coll, c.count, c.rank, c.root, k, &src, &j);
  j += c.j0;
  if (src >= 0) {
    *ref = Tr<T>::toD(genVal<T>(c.gp, c.seed, src, j));
    // Copies: relative to the element, plus a floor far below the inputs' spread (|x| <= 4)
    // for elements near zero.
    *scale = fabs(*ref) + 0.01;
    return;
  }
  double acc = 0, mag = c.op == OP_PROD ? 1 : 0;
  for (int r = 0; r < n; r++) {
    double x = Tr<T>::toD(genVal<T>(c.gp, c.seed, r, j)), w = c.op == OP_MULSUM && r % 2 ? 2 : 1;
    if (r == 0) acc = c.op == OP_MULSUM ? w * x : x;
    else switch (c.op) {
      case OP_PROD: acc *= x; break;
      case OP_MIN: acc = std::min(acc, x); break;
      case OP_MAX: acc = std::max(acc, x); break;
      default: acc += w * x; break;
    }
    if (c.op == OP_PROD) mag *= fabs(x); else mag += w * fabs(x);
  }
  if (c.op == OP_AVG) { acc /= n; mag /= n; }
  *ref = Tr<T>::isFloat ? acc : Tr<T>::toD(Tr<T>::fromD(acc));  // integers wrap (approximate for 64-bit)
  *scale = mag;
}

// Compare A's and B's output (n elements) of one rank; print up to O.show mismatches.
static void compare(const Case& c, const unsigned char* a, const unsigned char* b, size_t n, Stats& st) {
  const uint64_t ulpTol = ulpTolFor(c);
  const double relTol = relTolFor(c);
  dispatchType(c.type->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    int shown = 0;
    for (size_t k = 0; k < n; k++) {
      T x, y;
      memcpy(&x, a + k * sizeof(T), sizeof(T));
      memcpy(&y, b + k * sizeof(T), sizeof(T));
      const uint64_t u = ulpDist(x, y);
      if (u == 0) continue;
      double ref, scale;
      if (Tr<T>::isFloat) {
        st.maxulp = std::max(st.maxulp, (double)u);
        if (u <= ulpTol) continue;
        if (relTol > 0) {
          refAt<T>(c, k, &ref, &scale);
          if (fabs(Tr<T>::toD(x) - Tr<T>::toD(y)) <= relTol * scale + O.absTol) continue;
        }
      }
      st.nbad++;
      if (shown++ < O.show) {
        refAt<T>(c, k, &ref, &scale);
        printf("#   rank %d element %zu: A=%.9g (0x%llx)  B=%.9g (0x%llx)  reference=%.9g  ulp=%s\n", c.rank, k,
               Tr<T>::toD(x), (unsigned long long)bitsOf(x), Tr<T>::toD(y), (unsigned long long)bitsOf(y), ref,
               Tr<T>::isFloat ? std::to_string(u).c_str() : "-");
      }
    }
  });
}

static void printHeader() {
  printf("# %-8s %-14s %-8s %-6s %4s %8s %-9s %8s %8s %6s %6s\n", "result", "coll", "dtype", "op", "root",
         "count", "inplace", "maxulp", "nbad", "xrank", "oob");
}

static std::string rootStr(const Case& c) {
  if (!kColls[c.coll].rooted) return "-";
  return c.root == kRandomRoot ? "rand" : std::to_string(c.root);
}

// Reduce the stats over all ranks, print the case line (global thread 0), count pass/fail.
static bool report(Thr& t, const Case& c, const char* countStr, const char* mode, Stats st) {
  double v[6] = {st.nbad, st.maxulp, st.xrank, st.oobB, st.oobA, st.routeBad};
  const int modes[6] = {RED_SUM, RED_MAX, RED_SUM, RED_SUM, RED_SUM, RED_SUM};
  t.allreduce(v, 6, modes);
  const bool ok = v[0] == 0 && v[2] == 0 && v[3] == 0 && v[5] == 0;
  if (t.isMain()) {
    char ulp[32];
    if (c.type->isFloat) snprintf(ulp, sizeof ulp, "%.0f", v[1]); else snprintf(ulp, sizeof ulp, "-");
    printf("%-10s %-14s %-8s %-6s %4s %8s %-9s %8s %8.0f %6.0f %6.0f\n", ok ? "OK" : v[5] > 0 && !v[0] && !v[2] && !v[3] ? "ROUTE" : "MISMATCH",
           kColls[c.coll].name, c.type->name, c.op == OP_NONE ? "none" : kOps[c.op].name, rootStr(c).c_str(),
           countStr, mode, ulp, v[0], v[2], v[3]);
    if (v[4] > 0) printf("#   note: library A also wrote outside its output (%.0f bytes/elements)\n", v[4]);
    if (v[5] > 0) printf("#   %.0f rank(s) of library B did not take the expected route (lines above)\n", v[5]);
    fflush(stdout);
    (ok ? g_pass : g_fail)++;
  }
  return ok;
}

// ------------------------------------------------------------------------------------------
// Normal cases
// ------------------------------------------------------------------------------------------
static void issue(Thr& t, int li, const Case& c0, char* const* in, char* const* out) {
  const Lib& L = t.p->libs[li];
  const int G = t.p->topo.ngpus;
  if (G > 1) NCCLCHECK(L, L.groupStart());
  for (int i = 0; i < G; i++) {
    ncclRedOp_t op = makeOp(L, c0.op, c0.type->type, t.rank[i], t.comm[li][i]);
    runColl(L, c0.coll, in[i], out[i], c0.count, c0.type->type, op, c0.root, t.comm[li][i], t.stream[i],
            c0.inPlaceApi);
    releaseOp(L, c0.op, op, t.comm[li][i]);
  }
  if (G > 1) NCCLCHECK(L, L.groupEnd());
}

static unsigned long long readCounter(Thr& t, int i) {
  unsigned long long v = 0;
  CUDACHECK(cudaMemcpy(&v, g_bufs[t.thread].bad[i], sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

// Run one case with library li; outputs land in host[li][i]; returns bytes/elements written
// outside the output (guards, or the send buffer out of place).
static double runOne(Thr& t, int li, const Case& c0, bool ip) {
  CBufs& B = g_bufs[t.thread];
  const int G = t.p->topo.ngpus, n = t.p->topo.nranks(), elt = c0.type->size;
  const Layout lay = layoutFromCount(c0.coll, c0.count, n);
  const size_t region = (ip ? std::max(lay.sendCount, lay.recvCount) : lay.recvCount) * elt;
  char *in[kMaxGpusPerThread] = {}, *out[kMaxGpusPerThread] = {};
  for (int i = 0; i < G; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    char* base = B.recv[i] + kGuard;
    CUDACHECK(cudaMemsetAsync(B.recv[i], kPoison[li], region + 2 * kGuard, t.stream[i]));
    in[i] = ip ? base + lay.sendInplace * t.rank[i] * elt : B.send[i];
    out[i] = base + (ip ? lay.recvInplace * t.rank[i] * elt : 0);
    launchFill(c0.type->type, in[i], lay.sendCount, 0, t.rank[i], c0.gp, nullptr, t.stream[i]);
  }
  issue(t, li, c0, in, out);
  t.syncStreams(li);
  double oob = 0;
  std::vector<unsigned char> all;
  for (int i = 0; i < G; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    all.resize(region + 2 * kGuard);
    CUDACHECK(cudaMemcpy(all.data(), B.recv[i], all.size(), cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < kGuard; k++) {
      oob += all[k] != kPoison[li];
      oob += all[kGuard + region + k] != kPoison[li];
    }
    const size_t off = kGuard + (out[i] - (B.recv[i] + kGuard));
    B.host[li][i].assign(all.begin() + off, all.begin() + off + lay.recvCount * elt);
    if (!ip) {  // the send buffer must be untouched
      CUDACHECK(cudaMemsetAsync(B.bad[i], 0, sizeof(unsigned long long), t.stream[i]));
      launchCountInputChanges(c0.type->type, B.send[i], lay.sendCount, 0, t.rank[i], c0.gp, nullptr, B.bad[i], t.stream[i]);
      CUDACHECK(cudaStreamSynchronize(t.stream[i]));
      oob += (double)readCounter(t, i);
    }
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
  return oob;
}

// mode: 0 out of place, 1 in place, 2 in place through the in-place-only entry point.
static bool runCase(Thr& t, const CollDesc* coll, const TypeDesc* type, const OpDesc* op, int root, size_t count,
                    int mode, uint64_t caseId) {
  CBufs& B = g_bufs[t.thread];
  const int G = t.p->topo.ngpus, n = t.p->topo.nranks();
  const bool ip = mode > 0;
  Case c{coll->id, type, op->id, count, 0, 0, GenParams{GEN_RANDOM, op->id, n, 0}, 0};
  c.gp.seed = c.seed = hash3(O.seed, 0x5EED, caseId);
  c.root = root;
  c.inPlaceApi = mode == 2;
  Stats st;
  st.oobA = runOne(t, 0, c, ip);
  RouteCalls before[kMaxGpusPerThread];
  routesBefore(t, before);
  st.oobB = runOne(t, 1, c, ip);
  routesAfter(t, before, {{expectedRoute(c.coll, type, c.op, count, root, n), 1}}, st);
  const size_t outBytes = layoutFromCount(c.coll, count, n).recvCount * type->size;
  for (int i = 0; i < G; i++) {
    c.rank = t.rank[i];
    if (coll->rootOutput && c.rank != root) continue;  // no output off the root
    compare(c, B.host[0][i].data(), B.host[1][i].data(), B.host[0][i].size() / type->size, st);
  }
  if (coll->identicalOutputs && O.bitwise != 0) {  // every rank must hold B's output of rank 0, bit for bit
    unsigned char* ref = t.p->sh->ref();
    if (t.gtid == 0) memcpy(ref, B.host[1][0].data(), outBytes);
    t.barrier();  // ref is complete; it is rewritten only after report()'s barrier
    for (int i = 0; i < G; i++)
      for (size_t k = 0; k < outBytes; k += type->size)
        st.xrank += memcmp(ref + k, B.host[1][i].data() + k, type->size) != 0;
  }
  char cs[32];
  snprintf(cs, sizeof cs, "%zu", count);
  return report(t, c, cs, mode == 2 ? coll->inPlaceApi : ip ? "inplace" : "oop", st);
}

// ------------------------------------------------------------------------------------------
// Stress: random sizes, back to back
// ------------------------------------------------------------------------------------------
struct Call { size_t count = 0, offIn = 0, offOut = 0; int root = -1; bool valid = false; };

static Call callAt(const Case& c, long long i) {
  const uint64_t h = hash3(c.seed, 0xCA11, (uint64_t)i);
  Call k;
  k.count = 1 + h % O.maxCount();
  k.offIn = (h >> 32) % (kMaxOff + 1);
  k.offOut = (h >> 48) % (kMaxOff + 1);
  if (kColls[c.coll].rooted) k.root = (int)(mix64(h) % (uint64_t)c.gp.nranks);
  k.valid = true;
  return k;
}

// Run call k with library A into scratch and compare with B's result in 'slot'.
static void checkCall(Thr& t, Case c, const Call& k, char* const* slot, Stats& st) {
  CBufs& B = g_bufs[t.thread];
  const int G = t.p->topo.ngpus, elt = c.type->size;
  c.count = k.count;
  c.j0 = k.offIn;
  c.root = k.root;
  const Layout lay = layoutFromCount(c.coll, k.count, c.gp.nranks);
  char *in[kMaxGpusPerThread] = {}, *out[kMaxGpusPerThread] = {};
  for (int i = 0; i < G; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    in[i] = B.send[i] + k.offIn * elt;
    out[i] = B.scratch[i] + k.offOut * elt;
    CUDACHECK(cudaMemsetAsync(B.scratch[i], kPoison[0], g_slotBytes, t.stream[i]));
  }
  issue(t, 0, c, in, out);
  t.syncStreams(0);
  for (int i = 0; i < G; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    for (int li = 0; li < 2; li++) {
      B.host[li][i].resize(lay.recvCount * elt);
      CUDACHECK(cudaMemcpy(B.host[li][i].data(), (li ? slot[i] : B.scratch[i]) + k.offOut * elt,
                           lay.recvCount * elt, cudaMemcpyDeviceToHost));
    }
    c.rank = t.rank[i];
    if (kColls[c.coll].rootOutput && c.rank != c.root) continue;  // no output off the root
    compare(c, B.host[0][i].data(), B.host[1][i].data(), lay.recvCount, st);
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
}

static void poisonSlots(Thr& t) {
  for (int i = 0; i < t.p->topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    CUDACHECK(cudaMemsetAsync(g_bufs[t.thread].slots[i], kPoison[1], g_slotBytes * g_nslots, t.stream[i]));
  }
  t.syncStreams(-1);
}

static char* slotPtr(Thr& t, int i, int s) { return g_bufs[t.thread].slots[i] + (size_t)s * g_slotBytes; }

static void fillSend(Thr& t, const Case& c, const uint64_t* const* epoch) {
  const size_t elems = O.maxCount() * (kColls[c.coll].sendPerRank ? c.gp.nranks : 1) + kMaxOff;
  for (int i = 0; i < t.p->topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    launchFill(c.type->type, g_bufs[t.thread].send[i], elems, 0, t.rank[i], c.gp, epoch ? epoch[i] : nullptr, t.stream[i]);
  }
}

static bool runRandomSizes(Thr& t, const CollDesc* coll, const TypeDesc* type, const OpDesc* op, uint64_t caseId) {
  const int G = t.p->topo.ngpus, n = t.p->topo.nranks(), elt = type->size;
  Case c{coll->id, type, op->id, 0, 0, 0, GenParams{GEN_RANDOM, op->id, n, 0}, 0};
  c.gp.seed = c.seed = hash3(O.seed, 0x5EED, caseId);
  fillSend(t, c, nullptr);
  poisonSlots(t);
  Call last[kSlots];
  Stats st;
  RouteCalls before[kMaxGpusPerThread];
  routesBefore(t, before);
  std::map<std::string, uint64_t> want;  // route class -> calls of B
  for (long long i = 0; i < O.randomSizes; i++) {
    const Call k = callAt(c, i);
    want[expectedRoute(c.coll, type, c.op, k.count, k.root, n)]++;
    const int s = (int)(i % kSlots);
    char *in[kMaxGpusPerThread] = {}, *out[kMaxGpusPerThread] = {};
    for (int g = 0; g < G; g++) {
      in[g] = g_bufs[t.thread].send[g] + k.offIn * elt;
      out[g] = slotPtr(t, g, s) + k.offOut * elt;
    }
    c.count = k.count;
    c.root = k.root;
    issue(t, 1, c, in, out);
    last[s] = k;
    if ((i + 1) % 1000 == 0 || i + 1 == O.randomSizes) {  // checkpoint: the last call of each slot
      t.syncStreams(1);
      for (int q = 0; q < kSlots; q++) {
        if (!last[q].valid) continue;
        char* sp[kMaxGpusPerThread] = {};
        for (int g = 0; g < G; g++) sp[g] = slotPtr(t, g, q);
        checkCall(t, c, last[q], sp, st);
        last[q].valid = false;
      }
      poisonSlots(t);
    }
  }
  routesAfter(t, before, want, st);
  c.root = coll->rooted ? kRandomRoot : -1;
  char cs[32];
  snprintf(cs, sizeof cs, "rand:%lld", O.randomSizes);
  return report(t, c, cs, "oop", st);
}

// ------------------------------------------------------------------------------------------
// Stress: one CUDA graph with every count of --counts, inputs regenerated on each replay
// ------------------------------------------------------------------------------------------
static bool runGraph(Thr& t, const CollDesc* coll, const TypeDesc* type, const OpDesc* op, uint64_t caseId) {
  CBufs& B = g_bufs[t.thread];
  const int G = t.p->topo.ngpus, n = t.p->topo.nranks();
  const int m = (int)O.counts.size();
  auto rootOf = [&](int q) { return coll->rooted ? q % n : -1; };  // roots rotate over the calls
  Case c{coll->id, type, op->id, 0, 0, 0, GenParams{GEN_RANDOM, op->id, n, 0}, 0};
  c.gp.seed = hash3(O.seed, 0x5EED, caseId);
  for (int i = 0; i < G; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    CUDACHECK(cudaMemsetAsync(B.epoch[i], 0, sizeof(uint64_t), t.stream[i]));
  }
  poisonSlots(t);
  const cudaStreamCaptureMode mode = captureMode(O.capture, t.p->topo.nthreads);
  RouteCalls before[kMaxGpusPerThread];
  routesBefore(t, before);
  std::map<std::string, uint64_t> want;  // route class -> calls of B (counted once, at capture)
  for (int q = 0; q < m; q++) want[expectedRoute(c.coll, type, c.op, O.counts[q], rootOf(q), n)]++;
  cudaGraph_t gr[kMaxGpusPerThread];
  cudaGraphExec_t gx[kMaxGpusPerThread];
  for (int i = 0; i < G; i++) CUDACHECK(cudaStreamBeginCapture(t.stream[i], mode));
  for (int i = 0; i < G; i++) {  // replay r: epoch = r+1, inputs regenerated from it
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    launchBump(B.epoch[i], t.stream[i]);
  }
  fillSend(t, c, B.epoch);
  for (int q = 0; q < m; q++) {
    char *in[kMaxGpusPerThread] = {}, *out[kMaxGpusPerThread] = {};
    for (int i = 0; i < G; i++) { in[i] = B.send[i]; out[i] = slotPtr(t, i, q); }
    c.count = O.counts[q];
    c.root = rootOf(q);
    issue(t, 1, c, in, out);
  }
  for (int i = 0; i < G; i++) CUDACHECK(cudaStreamEndCapture(t.stream[i], &gr[i]));
  for (int i = 0; i < G; i++) CUDACHECK(cudaGraphInstantiate(&gx[i], gr[i], 0));
  for (int r = 0; r < O.graphReplays; r++)
    for (int i = 0; i < G; i++) CUDACHECK(cudaGraphLaunch(gx[i], t.stream[i]));
  t.syncStreams(1);
  for (int i = 0; i < G; i++) { CUDACHECK(cudaGraphExecDestroy(gx[i])); CUDACHECK(cudaGraphDestroy(gr[i])); }
  Stats routes;  // reported with the first count's line
  routesAfter(t, before, want, routes);
  // The send buffers now hold the inputs of epoch = replays; library A runs on them eagerly.
  const uint64_t e = (uint64_t)O.graphReplays;
  c.seed = c.gp.seed + mix64(e);  // = seedAt(gp.seed, &epoch) in the fill kernel
  bool ok = true;
  char mode_[32];
  snprintf(mode_, sizeof mode_, "graph%d", O.graphReplays);
  for (int q = 0; q < m; q++) {
    Stats st;
    if (q == 0) st.routeBad = routes.routeBad;
    Call k;
    k.count = O.counts[q];
    k.root = rootOf(q);
    char* sp[kMaxGpusPerThread] = {};
    for (int i = 0; i < G; i++) sp[i] = slotPtr(t, i, q);
    checkCall(t, c, k, sp, st);
    c.count = k.count;
    c.root = k.root;
    char cs[32];
    snprintf(cs, sizeof cs, "%zu", k.count);
    ok &= report(t, c, cs, mode_, st);
  }
  return ok;
}

// ------------------------------------------------------------------------------------------
// Driver
// ------------------------------------------------------------------------------------------
static void checkThread(Thr& t) {
  Proc& P = *t.p;
  const int G = P.topo.ngpus;
  thrSetup(t, false);
  initComms(t, false);
  CBufs& B = g_bufs[t.thread];
  for (int i = 0; i < G; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    CUDACHECK(cudaMalloc(&B.send[i], g_dataBytes + kMaxOff * 8));
    CUDACHECK(cudaMalloc(&B.recv[i], g_dataBytes + 2 * kGuard));
    CUDACHECK(cudaMalloc(&B.bad[i], sizeof(unsigned long long)));
    CUDACHECK(cudaMalloc(&B.epoch[i], sizeof(uint64_t)));
    B.slots[i] = B.scratch[i] = nullptr;
    if (g_nslots) {
      CUDACHECK(cudaMalloc(&B.slots[i], g_slotBytes * g_nslots));
      CUDACHECK(cudaMalloc(&B.scratch[i], g_slotBytes));
    }
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
  t.barrier();
  if (t.isMain()) {
    printDevices(P);
    printf("#\n");
    printHeader();
    fflush(stdout);
  }
  uint64_t caseId = 0;
  for (const CollDesc* coll : O.colls)
    for (const TypeDesc* type : g_types)
      for (const OpDesc* op : g_ops) {
        if (!coll->reduces && op != g_ops[0]) continue;  // data movement: one pass, op "none"
        const OpDesc* o = coll->reduces ? op : &kOpNone;
        if (O.randomSizes > 0) { runRandomSizes(t, coll, type, o, ++caseId); continue; }
        if (O.graph) { runGraph(t, coll, type, o, ++caseId); continue; }
        const int nroots = coll->rooted ? P.topo.nranks() : 1;  // every root of the world
        for (int r = 0; r < nroots; r++)
          for (size_t count : O.counts)
            for (int mode = 0; mode < 3; mode++) {  // out of place, in place, in-place entry point
              if ((O.inplace == 0 && mode) || (O.inplace == 1 && !mode)) continue;
              if (mode && !coll->inPlaceDefined) continue;  // in-place alltoall is not defined by NCCL
              if (mode == 2 && !g_inPlaceApi[coll->id]) continue;
              runCase(t, coll, type, o, coll->rooted ? r : -1, count, mode, ++caseId);
            }
      }
  destroyComms(t);
}

static int checkProc(int proc) {
  static Proc P;
  procSetup(P, proc, O.topo, g_shared, O.libs);
  CHECK(P.libs.size() == 2, "rcclx_check needs exactly two libraries: --libs A=PATH,B=PATH");
  g_inPlaceApi.assign(kNumColls, false);
  for (const CollDesc* d : O.colls) {  // the in-place-only entry point runs when both export it
    if (!d->inPlaceApi) continue;
    g_inPlaceApi[d->id] = dlsym(P.libs[0].handle, d->inPlaceApi) && dlsym(P.libs[1].handle, d->inPlaceApi);
    if (!g_inPlaceApi[d->id] && proc == 0 && O.inplace != 0 && O.randomSizes == 0 && !O.graph)
      printf("# note: %s not exported by both libraries: %s runs through it are skipped\n", d->inPlaceApi, d->name);
  }
  cudaDeviceProp prop;
  CUDACHECK(cudaGetDeviceProperties(&prop, P.thr[0].gpu[0]));
  g_types = resolveTypes(O.typeArg, P.minVersion(), prop.major);
  g_ops = resolveOps(O.opArg, P.minVersion());
  CHECK(!g_types.empty() && !g_ops.empty(), "no datatype or op to test");
  const int n = O.topo.nranks();
  g_dataBytes = O.maxCount() * n * 8;  // largest buffer of any case (8-byte types)
  if (O.randomSizes > 0 || O.graph) {
    g_slotBytes = ((g_dataBytes + kMaxOff * 8) + 255) & ~(size_t)255;
    g_nslots = O.graph ? (int)O.counts.size() : kSlots;
  }
  g_bufs.assign(O.topo.nthreads, CBufs());
  g_routesChecked = routeExpectations(P.libs[1], proc);
  if (proc == 0) {
    printf("# rcclx_check: A=%s (%s, ncclGetVersion=%d)  B=%s (%s, ncclGetVersion=%d)\n", P.libs[0].name.c_str(),
           P.libs[0].path.c_str(), P.libs[0].version, P.libs[1].name.c_str(), P.libs[1].path.c_str(), P.libs[1].version);
    printf("# nProcs %d nThreads %d nGpus %d nRanks %d  seed %llu  ulp-tol %s  rel-tol %s  mode %s\n", O.topo.nprocs,
           O.topo.nthreads, O.topo.ngpus, n, (unsigned long long)O.seed, O.ulpTol < 0 ? "auto" : std::to_string(O.ulpTol).c_str(),
           O.relTol < 0 ? "auto" : std::to_string(O.relTol).c_str(),
           O.randomSizes > 0 ? "random-sizes" : O.graph ? "graph" : "cases");
    printf("# columns: maxulp = largest ULP distance A vs B (floats); nbad = elements beyond tolerance;\n"
           "#          xrank = elements of B's all_reduce/broadcast output differing from rank 0's; oob = bytes B\n"
           "#          wrote outside its output + send elements B changed (out of place); root = root rank\n"
           "#          (rooted collectives); inplace = oop, inplace, or the in-place-only entry point (ncclBcast)\n");
    fflush(stdout);
  }
  runThreads(P, checkThread);
  if (proc != 0) return 0;
  printf("%lld passed, %lld failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}

static void usage() {
  printf("USAGE: rcclx_check --libs A=PATH,B=PATH [options]\n"
         "  --libs A=P,B=P       reference library A and library under test B ($RCCLX_BENCH_LIBS)\n"
         "  -P,--nprocs N        fork N processes (1)      -t,--nthreads N   threads per process (1)\n"
         "  -g,--ngpus N         GPUs per thread (1)       ranks = N x t x g\n"
         "  --coll C             %s|all,\n"
         "                       or a comma list (all); rooted collectives (broadcast) run with every root\n"
         "  -d,--datatype T      a type, a comma list, or all (all)\n"
         "  -o,--op O            sum|prod|max|min|avg|mulsum, a comma list, or all (all)\n"
         "  --counts LIST        NCCL counts (1,7,255,1023,4099,1048581)\n"
         "  --inplace both|0|1   out-of-place, in-place or both (both); in place includes broadcast\n"
         "                       through ncclBcast(buff, ...) as well as ncclBroadcast(buff, buff, ...)\n"
         "  --random-seed S      seed of the inputs (1)\n"
         "  --ulp-tol K          floating-point tolerance in ULPs (auto: 2 for avg, else 0)\n"
         "  --rel-tol X          also accept |A-B| <= X*sum|inputs| (AllGather/AllToAll: X*(|input| + 0.01))\n"
         "                       (auto: 0 with <= 2 ranks, else nranks*eps; copies exact)\n"
         "  --abs-tol X          with --rel-tol: also add X to that bound (0; the inputs lie in [-4, 4])\n"
         "  --expect-bitwise-identical-ranks 0|1   all_reduce/broadcast output of B identical on all ranks (1)\n"
         "  --random-sizes K     K back-to-back calls of random counts in [1, max(--counts)] and random\n"
         "                       alignments (B), checked against A every 1000 calls\n"
         "  --graph              capture one call per --counts entry in one CUDA graph (B), replay it,\n"
         "                       inputs regenerated in the graph on every replay; check after the last\n"
         "  --graph-replays R    replays for --graph (10)\n"
         "  --capture-mode M     global|thread|relaxed (global; thread with -t > 1)\n"
         "  --show N             mismatching elements printed per rank and case (3)\n"
         "  --expect-routes auto|off  auto: when B has rcclx's route statistics, every call of B must\n"
         "                       take the route rcclx's default crossovers give it (an rcclx kernel family\n"
         "                       or forwarded; case result ROUTE otherwise); off: routes not checked (auto)\n"
         "  -T,--timeout S       kill everything after S seconds (600; 0 = never)\n"
         "Exit status: 0 every case passed; 1 a case failed; 2 usage, setup, CUDA or NCCL error;\n"
         "124 timeout; 128+N killed by signal N.\n",
         collNames("|").c_str());
}

int main(int argc, char** argv) {
  setlinebuf(stdout);
  setDefaultEnv();
  enum { LIBS = 1, COLL, COUNTS, INPLACE, SEED, ULP, REL, ABS, BITWISE, RANDOM, GRAPH, REPLAYS, CAPTURE, SHOW, ROUTES };
  static option longopts[] = {
      {"libs", required_argument, 0, LIBS}, {"nprocs", required_argument, 0, 'P'},
      {"nthreads", required_argument, 0, 't'}, {"ngpus", required_argument, 0, 'g'},
      {"coll", required_argument, 0, COLL}, {"datatype", required_argument, 0, 'd'},
      {"op", required_argument, 0, 'o'}, {"counts", required_argument, 0, COUNTS},
      {"inplace", required_argument, 0, INPLACE}, {"random-seed", required_argument, 0, SEED},
      {"ulp-tol", required_argument, 0, ULP}, {"rel-tol", required_argument, 0, REL},
      {"abs-tol", required_argument, 0, ABS},
      {"expect-bitwise-identical-ranks", required_argument, 0, BITWISE},
      {"random-sizes", required_argument, 0, RANDOM}, {"graph", no_argument, 0, GRAPH},
      {"graph-replays", required_argument, 0, REPLAYS}, {"capture-mode", required_argument, 0, CAPTURE},
      {"show", required_argument, 0, SHOW}, {"timeout", required_argument, 0, 'T'},
      {"expect-routes", required_argument, 0, ROUTES},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  std::string collArg = "all";
  int c;
  while ((c = getopt_long(argc, argv, "P:t:g:d:o:T:h", longopts, nullptr)) != -1) {
    const char* v = optarg;
    switch (c) {
      case LIBS: O.libs = v; break;
      case 'P': O.topo.nprocs = (int)parseIntArg(v, "-P", 1, kMaxThreads); break;
      case 't': O.topo.nthreads = (int)parseIntArg(v, "-t", 1, kMaxThreads); break;
      case 'g': O.topo.ngpus = (int)parseIntArg(v, "-g", 1, kMaxGpusPerThread); break;
      case COLL: collArg = v; break;
      case 'd': O.typeArg = v; break;
      case 'o': O.opArg = v; break;
      case COUNTS:
        O.counts.clear();
        for (const std::string& s : split(v, ',')) {
          double x = parseSize(s.c_str());
          if (x < 1) usageError("bad count '%s' in --counts", s.c_str());
          O.counts.push_back((size_t)x);
        }
        break;
      case INPLACE:
        O.inplace = !strcmp(v, "both") ? 2 : !strcmp(v, "1") || !strcmp(v, "ip") ? 1 : !strcmp(v, "0") || !strcmp(v, "oop") ? 0 : -1;
        if (O.inplace < 0) usageError("invalid --inplace '%s': need both, 0 or 1", v);
        break;
      case SEED: {
        char* end = nullptr;
        errno = 0;
        O.seed = strtoull(v, &end, 0);
        if (end == v || *end || errno == ERANGE || *v == '-') usageError("invalid value '%s' for --random-seed", v);
        break;
      }
      case ULP: O.ulpTol = parseIntArg(v, "--ulp-tol", -1, LLONG_MAX); break;
      case REL: O.relTol = parseDoubleArg(v, "--rel-tol"); break;
      case ABS: O.absTol = parseDoubleArg(v, "--abs-tol"); break;
      case BITWISE: O.bitwise = (int)parseIntArg(v, "--expect-bitwise-identical-ranks", 0, 1); break;
      case RANDOM: O.randomSizes = parseIntArg(v, "--random-sizes", 0, LLONG_MAX); break;
      case GRAPH: O.graph = true; break;
      case REPLAYS: O.graphReplays = (int)parseIntArg(v, "--graph-replays", 1, INT_MAX); break;
      case CAPTURE: O.capture = v; break;
      case SHOW: O.show = (int)parseIntArg(v, "--show", 0, INT_MAX); break;
      case ROUTES:
        O.expectRoutes = v;
        if (O.expectRoutes != "auto" && O.expectRoutes != "off") usageError("invalid --expect-routes '%s': need auto or off", v);
        break;
      case 'T': O.timeout = (int)parseIntArg(v, "-T", 0, INT_MAX); break;
      case 'h': usage(); return 0;
      default:  // getopt has printed what is wrong
        fprintf(stderr, "rcclx_check: --help lists the options\n");
        return 2;
    }
  }
  if (optind < argc) usageError("unexpected argument '%s'", argv[optind]);
  for (const std::string& s : split(collArg, ',')) {
    if (s == "all") { for (int i = 0; i < kNumColls; i++) O.colls.push_back(&kColls[i]); continue; }
    const CollDesc* d = findColl(s.c_str());
    if (!d) usageError("unknown --coll '%s': need %s or all", s.c_str(), collNames(", ").c_str());
    O.colls.push_back(d);
  }
  if (!validTypeList(O.typeArg)) usageError("unknown datatype in '%s'", O.typeArg.c_str());
  if (!validOpList(O.opArg)) usageError("unknown op in '%s'", O.opArg.c_str());
  if (O.graph && O.randomSizes > 0) usageError("--graph and --random-sizes are separate modes");
  captureMode(O.capture, O.topo.nthreads);
  if (parseLibs(O.libs).size() != 2) usageError("--libs needs exactly two libraries (A=reference,B=under test)");
  g_shared = createShared(O.topo, O.maxCount() * 8);
  return launch(O.topo.nprocs, O.timeout, checkProc);
}
