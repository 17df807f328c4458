// all_reduce_perf / all_gather_perf / reduce_scatter_perf / alltoall_perf: nccl-tests 2.19.6
// compatible benchmark (the collective comes from the program name or --coll) that measures
// several NCCL-API libraries side by side in one process, size by size.
#include "common.h"

#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>

// ------------------------------------------------------------------------------------------
// Options (parsed before the fork, inherited by every process)
// ------------------------------------------------------------------------------------------
struct Opts {
  Topo topo;
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20;
  int stepFactor = 1, iters = 20, warmup = 1, agg = 1, cycles = 1, check = 1, graphs = 0;
  int blocking = 0, average = 1, parallelInit = 0, nullStream = 0, cputime = 0, timeout = 600;
  std::string libs, typeArg = "float", opArg = "sum", capture, prog;
  const CollDesc* coll = nullptr;
};
static Opts O;

// Resolved in each process once the libraries are loaded (version gates as nccl-tests).
static std::vector<const TypeDesc*> g_types;
static std::vector<const OpDesc*> g_ops;

struct Half { double us = 0, algbw = 0, busbw = 0; long long wrong = -1; };  // wrong -1: not checked (N/A)
struct Row { size_t bytes = 0, count = 0; const TypeDesc* type; const OpDesc* op; Half r[kMaxLibs][2]; };
static std::vector<Row> g_rows;  // recorded by global thread 0 (process 0)
static long long g_errors = 0;   // results with wrong elements, all libraries (same in every process)

struct Bufs { char* send[kMaxGpusPerThread]; char* recv[kMaxGpusPerThread]; unsigned long long* bad[kMaxGpusPerThread]; };
static std::vector<Bufs> g_bufs;  // per thread of this process

// The collective at one size and type.
struct Cur {
  const TypeDesc* type;
  const OpDesc* op;
  Layout lay;
  size_t sendBytes, recvBytes;
};
static Cur setup(size_t bytes, const TypeDesc* type, const OpDesc* op) {
  Cur c{type, op, layoutFromBytes(O.coll->id, bytes, type->size, O.topo.nranks()), 0, 0};
  c.sendBytes = c.lay.sendCount * type->size;
  c.recvBytes = c.lay.recvCount * type->size;
  return c;
}

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ------------------------------------------------------------------------------------------
// Issue / complete / check, as nccl-tests' startColl / completeColl / CheckData
// ------------------------------------------------------------------------------------------
static void startColl(Thr& t, int li, const Cur& c, bool inPlace, int iter, bool capturing) {
  const Lib& L = t.p->libs[li];
  const Bufs& B = g_bufs[t.thread];
  const int G = t.p->topo.ngpus, elt = c.type->size;
  // Rotate the buffer offset per iteration (cache effects, races), like nccl-tests.
  size_t total = std::max(c.sendBytes, c.recvBytes);
  size_t steps = total ? O.maxBytes / total : 1;
  size_t shift = total * (iter % std::max<size_t>(steps, 1));
  if (G > 1) NCCLCHECK(L, L.groupStart());
  for (int i = 0; i < G; i++) {
    char* recv = B.recv[i] + shift;
    char* send = B.send[i] + shift;
    const int rank = t.rank[i];
    ncclRedOp_t op = makeOp(L, c.op->id, c.type->type, rank, t.comm[li][i]);
    runColl(L, O.coll->id, inPlace ? recv + c.lay.sendInplace * rank * elt : send,
            inPlace ? recv + c.lay.recvInplace * rank * elt : recv, c.lay.count, c.type->type, op,
            t.comm[li][i], t.stream[i]);
    releaseOp(L, c.op->id, op, t.comm[li][i]);
  }
  if (G > 1) NCCLCHECK(L, L.groupEnd());
  if ((O.blocking == 1 || O.blocking == 2) && !capturing) {
    t.syncStreams(li);
    if (O.blocking == 1) t.barrier();
  }
}

static void completeColl(Thr& t, int li) {
  if (O.blocking == 1 || O.blocking == 2) return;
  t.syncStreams(li);
}

static GenParams genParams(const Cur& c, uint64_t seed) {
  return GenParams{GEN_EXACT, c.op->id, O.topo.nranks(), seed};
}

// Poison the result area (0x7F bytes: never an expected value) and write the inputs where the
// collective reads them (in place: inside the receive buffer, nccl-tests layout).
static void initData(Thr& t, const Cur& c, bool inPlace, uint64_t seed) {
  const Bufs& B = g_bufs[t.thread];
  const int elt = c.type->size;
  for (int i = 0; i < t.p->topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    const int rank = t.rank[i];
    size_t poison = inPlace ? std::max(c.sendBytes, c.recvBytes) : c.recvBytes;
    CUDACHECK(cudaMemsetAsync(B.recv[i], 0x7F, poison, t.stream[i]));
    char* in = inPlace ? B.recv[i] + c.lay.sendInplace * rank * elt : B.send[i];
    launchFill(c.type->type, in, c.lay.sendCount, 0, rank, genParams(c, seed), nullptr, t.stream[i]);
  }
  t.syncStreams(-1);
  CUDACHECK(cudaSetDevice(t.gpu[0]));
}

// Wrong elements of this thread's ranks (floating-point avg may be 2 ULP off, as nccl-tests).
static long long checkData(Thr& t, const Cur& c, bool inPlace, uint64_t seed) {
  const Bufs& B = g_bufs[t.thread];
  const uint64_t tol = (c.op->id == OP_AVG && c.type->isFloat) ? 2 : 0;
  unsigned long long host[kMaxGpusPerThread] = {};
  for (int i = 0; i < t.p->topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    const int rank = t.rank[i];
    const char* out = B.recv[i] + (inPlace ? c.lay.recvInplace * rank * c.type->size : 0);
    CUDACHECK(cudaMemsetAsync(B.bad[i], 0, sizeof(unsigned long long), t.stream[i]));
    launchVerify(c.type->type, out, O.coll->id, c.lay, rank, genParams(c, seed), tol, B.bad[i], t.stream[i]);
    CUDACHECK(cudaMemcpyAsync(&host[i], B.bad[i], sizeof host[i], cudaMemcpyDeviceToHost, t.stream[i]));
  }
  t.syncStreams(-1);
  CUDACHECK(cudaSetDevice(t.gpu[0]));
  long long n = 0;
  for (int i = 0; i < t.p->topo.ngpus; i++) n += (long long)host[i];
  return n;
}

struct Graphs {
  cudaGraph_t g[kMaxGpusPerThread];
  cudaGraphExec_t x[kMaxGpusPerThread];
  int n = 0;
  void begin(Thr& t) {
    n = t.p->topo.ngpus;
    for (int i = 0; i < n; i++)
      CUDACHECK(cudaStreamBeginCapture(t.stream[i], captureMode(O.capture, O.topo.nthreads)));
  }
  void end(Thr& t) {
    for (int i = 0; i < n; i++) CUDACHECK(cudaStreamEndCapture(t.stream[i], &g[i]));
    for (int i = 0; i < n; i++) CUDACHECK(cudaGraphInstantiate(&x[i], g[i], 0));
  }
  void launch(Thr& t) { for (int i = 0; i < n; i++) CUDACHECK(cudaGraphLaunch(x[i], t.stream[i])); }
  void destroy() {
    for (int i = 0; i < n; i++) { CUDACHECK(cudaGraphExecDestroy(x[i])); CUDACHECK(cudaGraphDestroy(g[i])); }
    n = 0;
  }
};

// nccl-tests BenchTime: one result (time, bandwidths, #wrong) of one library, one layout.
static Half benchTime(Thr& t, int li, const Cur& c, bool inPlace) {
  static thread_local int rep = 0;
  const bool graph = O.graphs > 0;
  if (O.check) initData(t, c, inPlace, 99);
  startColl(t, li, c, inPlace, 0, false);  // sync run
  completeColl(t, li);
  t.barrier();

  Graphs gr;
  if (graph) gr.begin(t);
  double t0 = now(), sum3 = 0;
  for (int iter = 0; iter < O.iters; iter++) {
    const bool per = O.blocking == 3 && !graph;  // -z 3: time each iteration, barrier untimed
    double a = now();
    if (O.agg > 1) NCCLCHECK(t.p->libs[li], t.p->libs[li].groupStart());
    for (int k = 0; k < O.agg; k++) startColl(t, li, c, inPlace, iter * O.agg + k, graph);
    if (O.agg > 1) NCCLCHECK(t.p->libs[li], t.p->libs[li].groupEnd());
    if (per) { t.syncStreams(li); sum3 += now() - a; t.barrier(); }
  }
  if (graph) {
    gr.end(t);
    t.barrier();
    t0 = now();
    for (int l = 0; l < O.graphs; l++) gr.launch(t);
  }
  double v[2] = {now() - t0, 0};  // {wall, cpu}
  v[1] = v[0];
  completeColl(t, li);
  v[0] = (O.blocking == 3 && !graph) ? sum3 : now() - t0;
  const double div = (double)O.iters * O.agg * (graph ? O.graphs : 1);
  v[0] /= div;
  v[1] /= div;
  const int modes[2] = {O.average == 0 ? RED_R0 : O.average == 2 ? RED_MIN : O.average == 3 ? RED_MAX : RED_AVG,
                        O.average == 0 ? RED_R0 : O.average == 2 ? RED_MIN : O.average == 3 ? RED_MAX : RED_AVG};
  t.allreduce(v, 2, modes);
  if (graph) gr.destroy();

  Half h;
  const double sec = O.cputime ? v[1] : v[0];
  getBw(O.coll->id, c.lay.count, c.type->size, sec, O.topo.nranks(), &h.algbw, &h.busbw);
  h.us = sec * 1e6;
  t.barrier();

  // nccl-tests does not check in-place alltoall (NCCL does not define it): N/A, like there.
  const int checks = (O.coll->id == COLL_A2A && inPlace) ? 0 : O.check;
  for (int k = 0; k < checks; k++) {
    const uint64_t seed = 1000 + (uint64_t)(++rep);
    initData(t, c, inPlace, seed);
    if (graph) {
      gr.begin(t);
      startColl(t, li, c, inPlace, 0, true);
      gr.end(t);
      gr.launch(t);
    } else {
      startColl(t, li, c, inPlace, 0, false);
    }
    completeColl(t, li);
    if (graph) gr.destroy();
    h.wrong = (long long)t.allreduce1((double)checkData(t, c, inPlace, seed), RED_SUM);
    if (h.wrong > 0) break;
  }
  if (h.wrong > 0 && t.thread == 0) g_errors++;  // h.wrong is the same in every thread
  return h;
}

// ------------------------------------------------------------------------------------------
// Output
// ------------------------------------------------------------------------------------------
static std::string fmtNum(double v, int w) {  // nccl-tests getFloatStr
  char b[64];
  if (snprintf(b, sizeof b, "%*.2f", w, v) <= w) return b;
  if (snprintf(b, sizeof b, "%*.1f", w, v) <= w) return b;
  if (snprintf(b, sizeof b, "%*.0f", w, v) <= w) return b;
  snprintf(b, sizeof b, w >= 7 ? "%*.1e" : "%*.0e", w, v);
  return b;
}

static void printLibHeader(const Lib& L) {
  printf("# library %s: %s ncclGetVersion=%d", L.name.c_str(), L.path.c_str(), L.version);
  if (O.coll->id == COLL_A2A) printf(" (alltoall via %s)", L.alltoallSym ? L.alltoallSym : "none");
  printf("\n#\n");
  const char* ts = O.cputime ? "cputime" : "time";
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type",
         "redop", "root", ts, "algbw", "busbw", "#wrong", ts, "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
         "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void printRow(const Row& r, int li) {
  printf("%12zu  %12zu  %8s  %6s  %6i", r.bytes, r.count, r.type->name, r.op->name, -1);
  for (int h = 0; h < 2; h++) {
    const Half& x = r.r[li][h];
    if (x.wrong >= 0)
      printf("  %7s  %6s  %6s  %6g", fmtNum(x.us, 7).c_str(), fmtNum(x.algbw, 6).c_str(), fmtNum(x.busbw, 6).c_str(), (double)x.wrong);
    else
      printf("  %7s  %6s  %6s    N/A", fmtNum(x.us, 7).c_str(), fmtNum(x.algbw, 6).c_str(), fmtNum(x.busbw, 6).c_str());
  }
  printf("\n");
}

static bool printLibFooter(int li) {  // returns false when this library failed
  long long bad = 0;
  double bw = 0;
  int nbw = 0;
  for (const Row& r : g_rows)
    for (int h = 0; h < 2; h++) { bad += r.r[li][h].wrong > 0; bw += r.r[li][h].busbw; nbw++; }
  bw = nbw ? bw / nbw : 0;
  const char* minbw = getenv("NCCL_TESTS_MIN_BW");
  bool bwFail = minbw && bw < 0.9 * atof(minbw);
  printf("# Out of bounds values : %lld %s\n", bad, bad ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g %s\n", bw, minbw ? (bwFail ? "FAILED" : "OK") : "");
  printf("#\n");
  return bad == 0 && !bwFail;
}

// ratio = time(first library) / time(other library): > 1 means the other library is faster.
static void printComparison(const std::vector<Lib>& libs) {
  const int nl = (int)libs.size();
  const char* half[2] = {"oop", "ip"};
  printf("# Comparison: ratio = time(%s) / time(other library); ratio > 1 means the other library is faster\n",
         libs[0].name.c_str());
  printf("# %10s  %8s  %6s", "size", "type", "redop");
  for (int h = 0; h < 2; h++) {
    printf("  %14s", (libs[0].name + " " + half[h] + " us").c_str());
    for (int l = 1; l < nl; l++)
      printf("  %14s  %7s", (libs[l].name + " " + half[h] + " us").c_str(), "ratio");
  }
  printf("\n");
  std::vector<double> logSum(2 * nl, 0.0);
  int n = 0;
  for (const Row& r : g_rows) {
    printf("%12zu  %8s  %6s", r.bytes, r.type->name, r.op->name);
    for (int h = 0; h < 2; h++) {
      const double base = r.r[0][h].us;
      printf("  %14.2f", base);
      for (int l = 1; l < nl; l++) {
        const double x = r.r[l][h].us, ratio = x > 0 ? base / x : 0;
        printf("  %14.2f  %7.3f", x, ratio);
        if (ratio > 0) logSum[2 * l + h] += log(ratio);
      }
    }
    printf("\n");
    n++;
  }
  for (int l = 1; l < nl && n; l++)
    printf("# geomean ratio %s/%s over %d sizes: out-of-place %.3f  in-place %.3f\n", libs[0].name.c_str(),
           libs[l].name.c_str(), n, exp(logSum[2 * l] / n), exp(logSum[2 * l + 1] / n));
  printf("#\n");
}

// ------------------------------------------------------------------------------------------
// Test loop (nccl-tests TimeTest), per thread
// ------------------------------------------------------------------------------------------
static size_t nextSize(size_t s) {
  if (O.stepFactor > 1) return s ? s * O.stepFactor : 1;
  return s + std::max<size_t>(O.stepBytes, 1);
}

static void timeTest(Thr& t, const TypeDesc* type, const OpDesc* op) {
  const int nl = (int)t.p->libs.size();
  t.barrier();
  for (int li = 0; li < nl; li++)  // warm-up for all sizes (step factor 2), each library
    for (size_t s = O.minBytes; s <= O.maxBytes; s = s ? s * 2 : 1) {
      Cur c = setup(s, type, op);
      for (int w = 0; w < O.warmup; w++) startColl(t, li, c, false, w, false);
      completeColl(t, li);
    }
  for (int cyc = 0; cyc < O.cycles; cyc++)
    for (size_t s = O.minBytes; s <= O.maxBytes; s = nextSize(s)) {
      Cur c = setup(s, type, op);
      Row row;
      row.bytes = std::max(c.sendBytes, c.recvBytes);
      row.count = c.lay.count;
      row.type = type;
      row.op = op;
      for (int li = 0; li < nl; li++) {  // interleaved per size, so drift hits every library
        row.r[li][0] = benchTime(t, li, c, false);
        row.r[li][1] = benchTime(t, li, c, true);
      }
      if (!t.isMain()) continue;
      g_rows.push_back(row);
      if (nl == 1) {
        printRow(row, 0);
      } else {
        printf("# [progress] %zu B %s %s:", row.bytes, type->name, op->name);
        for (int li = 0; li < nl; li++)
          printf("  %s %.2f/%.2f us", t.p->libs[li].name.c_str(), row.r[li][0].us, row.r[li][1].us);
        printf("\n");
      }
      fflush(stdout);
    }
}

static void perfThread(Thr& t) {
  Proc& P = *t.p;
  thrSetup(t, O.nullStream);
  initComms(t, O.parallelInit);
  // Memory limit (nccl-tests: send + recv (+ expected) + 1 GiB); we keep no expected buffer.
  double mem = 1e300;
  for (int i = 0; i < P.topo.ngpus; i++) {
    cudaDeviceProp prop;
    CUDACHECK(cudaGetDeviceProperties(&prop, t.gpu[i]));
    mem = std::min(mem, (double)prop.totalGlobalMem);
  }
  mem = t.allreduce1(mem, RED_MIN);
  const size_t memMax = (size_t)std::max(0.0, (mem - (double)(1 << 30)) / 2);
  if (O.maxBytes > memMax && t.thread == 0) {  // same decision in every process
    O.maxBytes = memMax;
    if (t.isMain()) printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", memMax);
  }
  t.barrier();  // the other threads of this process read O.maxBytes after this
  Bufs& B = g_bufs[t.thread];
  for (int i = 0; i < P.topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    CUDACHECK(cudaMalloc(&B.send[i], std::max<size_t>(O.maxBytes, 1)));
    CUDACHECK(cudaMalloc(&B.recv[i], std::max<size_t>(O.maxBytes, 1)));
    CUDACHECK(cudaMalloc(&B.bad[i], sizeof(unsigned long long)));
    CUDACHECK(cudaMemset(B.send[i], 0, std::max<size_t>(O.maxBytes, 1)));
    CUDACHECK(cudaMemset(B.recv[i], 0, std::max<size_t>(O.maxBytes, 1)));
    CUDACHECK(cudaDeviceSynchronize());
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
  t.barrier();
  if (t.isMain()) {
    printDevices(P);
    printf("#\n");
    if (P.libs.size() == 1) printLibHeader(P.libs[0]);
    fflush(stdout);
  }
  for (const TypeDesc* type : g_types)
    for (const OpDesc* op : g_ops) timeTest(t, type, op);
  destroyComms(t);
  for (int i = 0; i < P.topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    CUDACHECK(cudaFree(B.send[i]));
    CUDACHECK(cudaFree(B.recv[i]));
    CUDACHECK(cudaFree(B.bad[i]));
  }
}

// ------------------------------------------------------------------------------------------
// Types and ops (-d / -o), gated by the oldest library version like nccl-tests
// ------------------------------------------------------------------------------------------
static void resolveTypesOps(Proc& P) {
  cudaDeviceProp prop;
  CUDACHECK(cudaGetDeviceProperties(&prop, P.thr[0].gpu[0]));
  g_types = resolveTypes(O.typeArg, P.minVersion(), prop.major);
  g_ops = O.coll->reduces ? resolveOps(O.opArg, P.minVersion()) : std::vector<const OpDesc*>{&kOpNone};
  CHECK(!g_types.empty() && !g_ops.empty(), "no datatype or op to test");
}

static Shared* g_shared = nullptr;

static int perfProc(int proc) {
  static Proc P;
  procSetup(P, proc, O.topo, g_shared, O.libs);
  resolveTypesOps(P);
  g_bufs.assign(O.topo.nthreads, Bufs());
  const int nl = (int)P.libs.size();
  if (proc == 0) {
    printf("# rccl-tests-compat (nccl-tests 2.19.6 format) nccl-headers=%d\n", NCCL_VERSION_CODE);
    printf("# Collective test starting: %s\n", O.prog.c_str());
    printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
           "agg iters: %d validation: %d graph: %d\n",
           O.topo.nthreads, O.topo.ngpus, O.minBytes, O.maxBytes,
           O.stepFactor > 1 ? (size_t)O.stepFactor : O.stepBytes, O.stepFactor > 1 ? "factor" : "bytes",
           O.warmup, O.iters, O.agg, O.check, O.graphs);
    printf("# nProcs %d (forked, no MPI)  nRanks %d  libraries:", O.topo.nprocs, O.topo.nranks());
    for (const Lib& L : P.libs) printf(" %s", L.name.c_str());
    printf("\n");
    if (O.blocking) printf("# Blocking Enabled: -z %d\n", O.blocking);
    if (O.parallelInit) printf("# Parallel Init Enabled: threads call into NcclInitRank concurrently\n");
    if (nl > 1)
      for (const Lib& L : P.libs) printf("# library %s: %s ncclGetVersion=%d\n", L.name.c_str(), L.path.c_str(), L.version);
    printf("#\n");
    fflush(stdout);
  }
  runThreads(P, perfThread);
  if (proc != 0) return g_errors ? 1 : 0;
  bool ok = true;
  if (nl == 1) {
    ok &= printLibFooter(0);
  } else {
    for (int li = 0; li < nl; li++) {
      printLibHeader(P.libs[li]);
      for (const Row& r : g_rows) printRow(r, li);
      ok &= printLibFooter(li);
    }
    printComparison(P.libs);
  }
  printf("# Collective test concluded: %s\n#\n", O.prog.c_str());
  return ok && !g_errors ? 0 : 1;
}

static void usage(const char* prog) {
  printf("USAGE: %s [options]   (nccl-tests 2.19.6 flags, plus the rccl-tests-compat ones)\n"
         "  -t,--nthreads N        threads per process (1)\n"
         "  -g,--ngpus N           GPUs per thread (1); one thread drives them in ncclGroupStart/End\n"
         "  -b,--minbytes S        min size, K/M/G suffixes (32M)\n"
         "  -e,--maxbytes S        max size (32M)\n"
         "  -i,--stepbytes S       additive step (1M)\n"
         "  -f,--stepfactor N      multiplicative step (off)\n"
         "  -n,--iters N           timed iterations (20)\n"
         "  -m,--agg_iters N       operations per iteration, in one group (1)\n"
         "  -w,--warmup_iters N    warm-up iterations per size (1)\n"
         "  -N,--run_cycles N      repeat the size sweep N times (1)\n"
         "  -p,--parallel_init 0/1 each thread creates its own communicators (0)\n"
         "  -c,--check N           correctness checks per result (1); #wrong column\n"
         "  -o,--op OP             sum|prod|max|min|avg|mulsum|all, or a comma list (sum)\n"
         "  -d,--datatype T        int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|\n"
         "                         f8e4m3|f8e5m2|all, or a comma list (float)\n"
         "  -r,--root N            accepted, unused (no rooted collective here)\n"
         "  -z,--blocking 0..3     0 async; 1 sync+barrier per op; 2 sync per op; 3 sync per iteration (0)\n"
         "  -y,--stream_null 0/1   use the NULL stream (0)\n"
         "  -G,--cudagraph N       capture the -n iterations in a CUDA graph, launch it N times (0)\n"
         "  -C,--report_cputime 0/1  report CPU time instead of wall time (0)\n"
         "  -a,--average 0..3      cross-rank time: 0 rank 0, 1 average, 2 min, 3 max (1)\n"
         "  -P,--nprocs N          fork N processes (no MPI); ranks = N x t x g (1)\n"
         "  -T,--timeout S         kill everything after S seconds (600; 0 = never)\n"
         "  --libs NAME=PATH[,NAME=PATH...]  libraries to compare ($RCCLX_BENCH_LIBS, else nccl=libnccl.so.2)\n"
         "  --coll C               all_reduce|all_gather|reduce_scatter|alltoall (default: from the program name)\n"
         "  --capture-mode M       global|thread|relaxed stream capture for -G (global; thread with -t > 1)\n",
         prog);
}

int main(int argc, char** argv) {
  setlinebuf(stdout);
  setDefaultEnv();
  std::string a0 = argv[0];
  O.prog = basename(&a0[0]);
  O.coll = findColl(O.prog.c_str());
  static option longopts[] = {
      {"nthreads", required_argument, 0, 't'}, {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'}, {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'}, {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'}, {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'}, {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'}, {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'}, {"report_cputime", required_argument, 0, 'C'},
      {"average", required_argument, 0, 'a'}, {"nprocs", required_argument, 0, 'P'},
      {"libs", required_argument, 0, 1}, {"coll", required_argument, 0, 2},
      {"capture-mode", required_argument, 0, 3}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  auto size = [](const char* s, const char* what) {
    double v = parseSize(s);
    if (v < 0) { fprintf(stderr, "invalid size '%s' for %s\n", s, what); exit(1); }
    return (size_t)v;
  };
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:a:P:h", longopts, nullptr)) != -1) {
    const char* v = optarg;
    switch (c) {
      case 't': O.topo.nthreads = atoi(v); break;
      case 'g': O.topo.ngpus = atoi(v); break;
      case 'b': O.minBytes = size(v, "minbytes"); break;
      case 'e': O.maxBytes = size(v, "maxbytes"); break;
      case 'i': O.stepBytes = size(v, "stepbytes"); break;
      case 'f': O.stepFactor = atoi(v); break;
      case 'n': O.iters = atoi(v); break;
      case 'm': O.agg = atoi(v); break;
      case 'w': O.warmup = atoi(v); break;
      case 'N': O.cycles = atoi(v); break;
      case 'p': O.parallelInit = atoi(v); break;
      case 'c': O.check = atoi(v); break;
      case 'o': O.opArg = v; break;
      case 'd': O.typeArg = v; break;
      case 'r': break;
      case 'z': O.blocking = atoi(v); break;
      case 'y': O.nullStream = atoi(v); break;
      case 'T': O.timeout = atoi(v); break;
      case 'G': O.graphs = atoi(v); break;
      case 'C': O.cputime = atoi(v); break;
      case 'a': O.average = atoi(v); break;
      case 'P': O.topo.nprocs = atoi(v); break;
      case 1: O.libs = v; break;
      case 2: O.coll = findColl(v); if (!O.coll) { fprintf(stderr, "unknown --coll %s\n", v); return 1; } break;
      case 3: O.capture = v; break;
      case 'h': usage(O.prog.c_str()); return 0;
      default: usage(O.prog.c_str()); return 1;
    }
  }
  if (optind < argc) { fprintf(stderr, "unexpected argument '%s'\n", argv[optind]); return 1; }
  if (!O.coll) { fprintf(stderr, "%s: cannot tell the collective from the program name; use --coll\n", O.prog.c_str()); return 1; }
  if (O.minBytes > O.maxBytes) { fprintf(stderr, "invalid sizes: minbytes %zu > maxbytes %zu\n", O.minBytes, O.maxBytes); return 1; }
  if (O.iters < 1 || O.agg < 1 || O.warmup < 0 || O.check < 0 || O.graphs < 0 || O.cycles < 1 ||
      O.blocking < 0 || O.blocking > 3 || O.average < 0 || O.average > 3) {
    fprintf(stderr, "invalid option value (need -n >= 1, -m >= 1, -N >= 1, -z 0..3, -a 0..3)\n");
    return 1;
  }
  if (O.graphs && O.nullStream) { fprintf(stderr, "-G cannot capture the NULL stream (-y 1)\n"); return 1; }
  if (!validTypeList(O.typeArg)) { fprintf(stderr, "unknown datatype in '%s'\n", O.typeArg.c_str()); return 1; }
  if (!validOpList(O.opArg)) { fprintf(stderr, "unknown op in '%s'\n", O.opArg.c_str()); return 1; }
  captureMode(O.capture, O.topo.nthreads);  // validates the name
  parseLibs(O.libs);                        // validates the list before forking
  g_shared = createShared(O.topo, 0);
  return launch(O.topo.nprocs, O.timeout, perfProc);
}
