// all_reduce_perf / all_gather_perf / reduce_scatter_perf / alltoall_perf / broadcast_perf /
// reduce_perf:
// nccl-tests 2.19.6 compatible benchmark (the collective comes from the program name or --coll)
// that measures several NCCL-API libraries side by side in one process, size by size.
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

// ------------------------------------------------------------------------------------------
// Options (parsed before the fork, inherited by every process)
// ------------------------------------------------------------------------------------------
struct Opts {
  Topo topo;
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20;
  int stepFactor = 1, iters = 20, warmup = 1, agg = 1, cycles = 1, check = 1, graphs = 0;
  int blocking = 0, average = 1, parallelInit = 0, nullStream = 0, cputime = 0, timeout = 600;
  int reg = 0;  // -R: 0 none, 1 ncclCommRegister, 2 ncclMemAlloc + symmetric windows
  int root = 0;  // -r: root of rooted collectives; -1: every rank in turn (nccl-tests)
  int table = 0;         // the library of the nccl-tests table (--table; default the last in --libs)
  bool compare = false;  // --compare: every library's table and the comparison as plain rows
  std::string libs, typeArg = "float", opArg = "sum", capture, prog, jsonFile;
  const CollDesc* coll = nullptr;
};
static Opts O;

// Resolved in each process once the libraries are loaded (version gates as nccl-tests).
static std::vector<const TypeDesc*> g_types;
static std::vector<const OpDesc*> g_ops;

struct Half { double us = 0, algbw = 0, busbw = 0; long long wrong = -1; };  // wrong -1: not checked (N/A)
struct Row {
  size_t bytes = 0, count = 0;
  int cycle = 0, root = -1;  // root: -1 for collectives without one
  const TypeDesc* type;
  const OpDesc* op;
  Half r[kMaxLibs][2];
};
static std::vector<Row> g_rows;  // recorded by global thread 0 (process 0); pushed under g_rowsMu
static std::mutex g_rowsMu;      // g_rows and the JSON error list (read by the JSON writer)
static long long g_errors = 0;   // results with wrong elements, all libraries (same in every process)

struct Bufs {
  char* send[kMaxGpusPerThread]; char* recv[kMaxGpusPerThread]; unsigned long long* bad[kMaxGpusPerThread];
  void* reg[kMaxLibs][kMaxGpusPerThread][2];         // -R 1: ncclCommRegister handles {send, recv}
  ncclWindow_t win[kMaxLibs][kMaxGpusPerThread][2];  // -R 2: windows {send, recv}
};
static std::vector<Bufs> g_bufs;  // per thread of this process (value-initialized: all null)

// The collective at one size, type, op and root.
struct Cur {
  const TypeDesc* type;
  const OpDesc* op;
  int root;  // -1 for collectives without one
  Layout lay;
  size_t sendBytes, recvBytes;
};
static Cur setup(size_t bytes, const TypeDesc* type, const OpDesc* op, int root) {
  Cur c{type, op, root, layoutFromBytes(O.coll->id, bytes, type->size, O.topo.nranks()), 0, 0};
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
            c.root, t.comm[li][i], t.stream[i]);
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
// collective reads them (in place: inside the receive buffer, nccl-tests layout). Every rank
// gets its own inputs, also the non-roots of a rooted collective (nccl-tests leaves theirs
// as they are): a result taken from a wrong rank then shows.
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
    if (O.coll->rootOutput && rank != c.root) continue;  // no output off the root
    const char* out = B.recv[i] + (inPlace ? c.lay.recvInplace * rank * c.type->size : 0);
    CUDACHECK(cudaMemsetAsync(B.bad[i], 0, sizeof(unsigned long long), t.stream[i]));
    launchVerify(c.type->type, out, O.coll->id, c.lay, rank, c.root, genParams(c, seed), tol, B.bad[i], t.stream[i]);
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
  const int checks = (inPlace && !O.coll->inPlaceDefined) ? 0 : O.check;
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
// Output. By default stdout is what nccl-tests prints for one library, the "table library"
// (O.table: the last in --libs, or --table NAME): its rows as they are measured, then one
// "# Out of bounds values" and one "# Avg bus bandwidth" line. With several libraries,
// everything else (the other libraries' rows and summaries, the comparison) follows as lines
// that start with '#', which nccl-tests parsers skip. --compare prints instead every library's
// table, then the comparison, as plain rows at the end.
// ------------------------------------------------------------------------------------------
static std::string fmtNum(double v, int w) {  // nccl-tests getFloatStr
  char b[64];
  if (snprintf(b, sizeof b, "%*.2f", w, v) <= w) return b;
  if (snprintf(b, sizeof b, "%*.1f", w, v) <= w) return b;
  if (snprintf(b, sizeof b, "%*.0f", w, v) <= w) return b;
  snprintf(b, sizeof b, w >= 7 ? "%*.1e" : "%*.0e", w, v);
  return b;
}

static void printLibLine(const Lib& L) {  // "# library NAME: PATH ncclGetVersion=N ..." (no newline)
  printf("# library %s: %s ncclGetVersion=%d", L.name.c_str(), L.path.c_str(), L.version);
  if (O.coll->id == COLL_A2A) printf(" (alltoall via %s)", L.alltoallSym ? L.alltoallSym : "none");
}

static void printLibHeader(const Lib& L) {
  printLibLine(L);
  printf("\n#\n");
  const char* ts = O.cputime ? "cputime" : "time";
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type",
         "redop", "root", ts, "algbw", "busbw", "#wrong", ts, "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
         "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

// One row of the nccl-tests table of library li. comment: as a '#' line, the size one character
// narrower so that the columns stay aligned (the other libraries' rows in the default output).
static void printRow(const Row& r, int li, bool comment = false) {
  if (comment) printf("#%11zu", r.bytes);
  else printf("%12zu", r.bytes);
  printf("  %12zu  %8s  %6s  %6i", r.count, r.type->name, r.op->name, r.root);
  for (int h = 0; h < 2; h++) {
    const Half& x = r.r[li][h];
    if (x.wrong >= 0)
      printf("  %7s  %6s  %6s  %6g", fmtNum(x.us, 7).c_str(), fmtNum(x.algbw, 6).c_str(), fmtNum(x.busbw, 6).c_str(), (double)x.wrong);
    else
      printf("  %7s  %6s  %6s    N/A", fmtNum(x.us, 7).c_str(), fmtNum(x.algbw, 6).c_str(), fmtNum(x.busbw, 6).c_str());
  }
  printf("\n");
}

// nccl-tests footer values of one library: results with wrong elements, average busbw (over
// every out-of-place and in-place result), and the NCCL_TESTS_MIN_BW check (90 % of it).
struct LibSummary { long long bad = 0; double bw = 0; bool bwChecked = false, bwFail = false; };
static LibSummary libSummary(int li) {
  LibSummary s;
  int nbw = 0;
  for (const Row& r : g_rows)
    for (int h = 0; h < 2; h++) { s.bad += r.r[li][h].wrong > 0; s.bw += r.r[li][h].busbw; nbw++; }
  s.bw = nbw ? s.bw / nbw : 0;
  const char* minbw = getenv("NCCL_TESTS_MIN_BW");
  s.bwChecked = minbw != nullptr;
  s.bwFail = minbw && s.bw < 0.9 * atof(minbw);
  return s;
}

// The nccl-tests footer of library li. The NCCL_TESTS_MIN_BW verdict is printed for the table
// library only: only its bandwidth decides the exit status.
static void printLibFooter(int li) {
  const LibSummary s = libSummary(li);
  const bool verdict = s.bwChecked && li == O.table;
  printf("# Out of bounds values : %lld %s\n", s.bad, s.bad ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g %s\n", s.bw, verdict ? (s.bwFail ? "FAILED" : "OK") : "");
  printf("#\n");
}

// Geometric mean of ratio = time(library 0) / time(library li) over all rows, as printed in the
// comparison table (rows with a zero time count in the divisor but add nothing); NaN: no rows.
static double geomeanRatio(int li, int h) {
  double logSum = 0;
  for (const Row& r : g_rows) {
    const double base = r.r[0][h].us, x = r.r[li][h].us, ratio = x > 0 ? base / x : 0;
    if (ratio > 0) logSum += log(ratio);
  }
  return g_rows.empty() ? NAN : exp(logSum / (double)g_rows.size());
}

// ratio = time(first library) / time(other library): > 1 means the other library is faster.
// comment: the rows as '#' lines too (default output); --compare: plain rows.
static void printComparison(const std::vector<Lib>& libs, bool comment) {
  const int nl = (int)libs.size();
  const char* half[2] = {"oop", "ip"};
  printf("# Comparison: ratio = time(%s) / time(other library); ratio > 1 means the other library is faster\n",
         libs[0].name.c_str());
  const bool rooted = O.coll->rooted;  // a root column only where there is a root
  printf("# %10s  %8s  %6s", "size", "type", "redop");
  if (rooted) printf("  %4s", "root");
  for (int h = 0; h < 2; h++) {
    printf("  %14s", (libs[0].name + " " + half[h] + " us").c_str());
    for (int l = 1; l < nl; l++)
      printf("  %14s  %7s", (libs[l].name + " " + half[h] + " us").c_str(), "ratio");
  }
  printf("\n");
  for (const Row& r : g_rows) {
    if (comment) printf("#%11zu", r.bytes);
    else printf("%12zu", r.bytes);
    printf("  %8s  %6s", r.type->name, r.op->name);
    if (rooted) printf("  %4d", r.root);
    for (int h = 0; h < 2; h++) {
      const double base = r.r[0][h].us;
      printf("  %14.2f", base);
      for (int l = 1; l < nl; l++) {
        const double x = r.r[l][h].us;
        printf("  %14.2f  %7.3f", x, x > 0 ? base / x : 0);
      }
    }
    printf("\n");
  }
  for (int l = 1; l < nl && !g_rows.empty(); l++)
    printf("# geomean ratio %s/%s over %zu sizes: out-of-place %.3f  in-place %.3f\n", libs[0].name.c_str(),
           libs[l].name.c_str(), g_rows.size(), geomeanRatio(l, 0), geomeanRatio(l, 1));
  printf("#\n");
}

// The start of the table (every thread of process 0 has its communicators by now).
static void printTableStart(const std::vector<Lib>& libs) {
  if (libs.size() == 1 || !O.compare) printLibHeader(libs[O.table]);
}

// One measured size (global thread 0): the table library's row, or with --compare a progress
// comment (the tables print at the end).
static void printMeasured(const std::vector<Lib>& libs, const Row& row) {
  if (libs.size() == 1 || !O.compare) {
    printRow(row, O.table);
    return;
  }
  printf("# [progress] %zu B %s %s", row.bytes, row.type->name, row.op->name);
  if (O.coll->rooted) printf(" root %d", row.root);
  printf(":");
  for (size_t li = 0; li < libs.size(); li++)
    printf("  %s %.2f/%.2f us", libs[li].name.c_str(), row.r[li][0].us, row.r[li][1].us);
  printf("\n");
}

// The end of the output (process 0). Returns false when the run failed as nccl-tests fails it:
// wrong values (in any library), or the table library's average busbw below 90 % of
// NCCL_TESTS_MIN_BW.
static bool printTableEnd(const std::vector<Lib>& libs) {
  const int nl = (int)libs.size();
  if (nl > 1 && O.compare) {
    for (int li = 0; li < nl; li++) {
      printLibHeader(libs[li]);
      for (const Row& r : g_rows) printRow(r, li);
      printLibFooter(li);
    }
    printComparison(libs, false);
  } else {
    printLibFooter(O.table);
    if (nl > 1) {
      printf("# The other libraries (as comments; columns as in the table above):\n");
      for (int li = 0; li < nl; li++) {
        if (li == O.table) continue;
        const LibSummary s = libSummary(li);
        printLibLine(libs[li]);
        printf("\n");
        for (const Row& r : g_rows) printRow(r, li, true);
        printf("# library %s: %lld results with wrong values%s, average busbw %g\n", libs[li].name.c_str(), s.bad,
               s.bad ? " (FAILED)" : "", s.bw);
        printf("#\n");
      }
      printComparison(libs, true);
    }
  }
  printf("# Collective test concluded: %s\n#\n", O.prog.c_str());
  return g_errors == 0 && !libSummary(O.table).bwFail;
}

// ------------------------------------------------------------------------------------------
// JSON output (-J/--output_file FILE.json), nccl-tests 2.19 format (file version 3) extended
// with every library's results and the ratios. Process 0 writes the whole document: at the
// end ("complete": true), after every type/op sweep and at most every 5 s in between
// ("complete": false), and from die() with the error message, so an aborted run still leaves
// valid JSON with the results measured so far.
// ------------------------------------------------------------------------------------------
static int g_jsonFd = -1;                  // opened by main() before the fork
static std::string g_jsonPath, g_jsonStart;
static std::vector<std::string> g_args, g_env, g_jsonErrors;
static Proc* g_jsonProc = nullptr;         // set in process 0 only
static double g_jsonLast = 0;              // time of the last checkpoint

class JsonWriter {
 public:
  std::string s;
  void beginObject() { value(); s += '{'; n_.push_back(0); }
  void endObject() { close('}'); }
  void beginArray() { value(); s += '['; n_.push_back(0); }
  void endArray() { close(']'); }
  void key(const char* k) { element(); quote(k); s += ':'; afterKey_ = true; }
  void str(const std::string& v) { value(); quote(v); }
  void num(double v) {  // non-finite values are not JSON numbers: null
    value();
    char b[40];
    if (std::isfinite(v)) snprintf(b, sizeof b, "%.9g", v);
    else snprintf(b, sizeof b, "null");
    s += b;
  }
  void integer(long long v) { value(); s += std::to_string(v); }
  void boolean(bool v) { value(); s += v ? "true" : "false"; }
  void null() { value(); s += "null"; }

 private:
  static constexpr size_t kPrettyDepth = 2;  // containers this deep put one element per line
  std::vector<int> n_;                       // elements so far in each open container
  bool afterKey_ = false;
  void newline(size_t depth) { s += '\n'; s.append(depth, ' '); }
  void element() {
    if (n_.empty()) return;
    if (n_.back()++) s += ',';
    if (n_.size() <= kPrettyDepth) newline(n_.size());
  }
  void value() { if (afterKey_) afterKey_ = false; else element(); }
  void close(char c) {
    const bool some = n_.back() > 0;
    n_.pop_back();
    if (some && n_.size() < kPrettyDepth) newline(n_.size());
    s += c;
  }
  // Length of the valid UTF-8 sequence at v[i], 0 if invalid (then written as U+FFFD).
  static size_t utf8Len(const std::string& v, size_t i) {
    const unsigned char c = v[i];
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    if (n == 0 || i + n > v.size()) return 0;
    const unsigned char c1 = v[i + 1];
    if (c1 < lo || c1 > hi) return 0;
    for (size_t k = 2; k < n; k++)
      if (((unsigned char)v[i + k] & 0xC0) != 0x80) return 0;
    return n;
  }
  void quote(const std::string& v) {
    s += '"';
    for (size_t i = 0; i < v.size();) {
      const unsigned char c = v[i];
      if (c == '"' || c == '\\') { s += '\\'; s += (char)c; i++; }
      else if (c < 0x20) {
        char b[8];
        snprintf(b, sizeof b, "\\u%04x", c);
        s += b;
        i++;
      } else if (c < 0x80) { s += (char)c; i++; }
      else if (size_t n = utf8Len(v, i)) { s.append(v, i, n); i += n; }
      else { s += "\\ufffd"; i++; }
    }
    s += '"';
  }
};

static std::string timeString() {  // nccl-tests TIME_STRING_FORMAT, local time
  char b[64];
  time_t t = time(nullptr);
  struct tm tmv;
  localtime_r(&t, &tmv);
  strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tmv);
  return b;
}

// nccl-tests: the type comes from the suffix (only .json); an existing file is never
// overwritten: FILE.0, FILE.1, ... are tried instead. Prints where the output goes.
static void jsonOpen(const std::string& path) {
  const size_t dot = path.rfind('.'), slash = path.rfind('/');
  const bool isJson = dot != std::string::npos && (slash == std::string::npos || slash < dot) &&
                      strcasecmp(path.c_str() + dot + 1, "json") == 0;
  if (!isJson) {
    printf("# skipping json output; %s does not end in .json\n", path.c_str());
    return;
  }
  std::string p = path;
  for (int k = 0;; k++) {
    g_jsonFd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (g_jsonFd >= 0) break;
    if (errno != EEXIST || k >= 100000) {
      printf("# skipping json output; %s not accessible\n", p.c_str());
      return;
    }
    p = path + "." + std::to_string(k);
  }
  g_jsonPath = p;
  g_jsonStart = timeString();
  printf("# Writing JSON output to %s\n", p.c_str());
}

// The environment that changes what the libraries do, sorted: NCCL_*, RCCL_*, RCCLX_*, and
// CUDA_VISIBLE_DEVICES, LD_PRELOAD, LD_LIBRARY_PATH.
static std::vector<std::string> relevantEnv() {
  extern char** environ;
  std::vector<std::string> v;
  for (char** e = environ; e && *e; e++) {
    const std::string x = *e;
    for (const char* pre : {"NCCL_", "RCCL_", "RCCLX_", "CUDA_VISIBLE_DEVICES=", "LD_PRELOAD=", "LD_LIBRARY_PATH="})
      if (x.compare(0, strlen(pre), pre) == 0) { v.push_back(x); break; }
  }
  std::sort(v.begin(), v.end());
  return v;
}

static const char* jsonTrueFalse(bool b) { return b ? "true" : "false"; }  // nccl-tests' jsonBool

// The whole document (caller holds g_rowsMu).
static std::string jsonDocument(const Proc& P, bool complete) {
  JsonWriter j;
  const int nl = (int)P.libs.size();
  j.beginObject();
  // nccl-tests header
  j.key("version"); j.integer(3);
  j.key("start_time"); j.str(g_jsonStart);
  j.key("args"); j.beginArray(); for (const std::string& a : g_args) j.str(a); j.endArray();
  j.key("env"); j.beginArray(); for (const std::string& e : g_env) j.str(e); j.endArray();
  j.key("nccl_version"); j.integer(nl ? P.libs[O.table].version : 0);  // the table library's, as the text
  j.key("generator"); j.str("rccl-tests-compat (nccl-tests 2.19.6 format)");
  j.key("config");
  j.beginObject();
  j.key("nthreads"); j.integer(O.topo.nthreads);
  j.key("ngpus"); j.integer(O.topo.ngpus);
  j.key("minimum_bytes"); j.integer((long long)O.minBytes);
  j.key("maximum_bytes"); j.integer((long long)O.maxBytes);
  if (O.stepFactor > 1) { j.key("step_factor"); j.integer(O.stepFactor); }
  else { j.key("step_bytes"); j.integer((long long)O.stepBytes); }
  j.key("warmup_iters"); j.integer(O.warmup);
  j.key("iterations"); j.integer(O.iters);
  j.key("aggregated_iterations"); j.integer(O.agg);
  j.key("validation"); j.integer(O.check);
  j.key("graph"); j.integer(O.graphs);
  j.key("blocking_collectives"); j.str(jsonTrueFalse(O.blocking != 0));
  j.key("per_iter_timing"); j.str(jsonTrueFalse(false));
  j.key("per_iter_skip"); j.integer(0);
  j.key("parallel_init"); j.str(jsonTrueFalse(O.parallelInit != 0));
  j.key("devices");
  j.beginArray();
  for (int r = 0; P.sh && r < O.topo.nranks(); r++) {
    const RankInfo& ri = P.sh->info[r];
    if (ri.pid == 0) continue;  // not set up yet
    j.beginObject();
    j.key("rank"); j.integer(r);
    j.key("group"); j.integer(0);
    j.key("pid"); j.integer(ri.pid);
    j.key("hostname"); j.str(std::string(ri.host, strnlen(ri.host, sizeof ri.host)));
    j.key("device"); j.integer(ri.dev);
    j.key("device_hex"); j.str(std::string(ri.bus, strnlen(ri.bus, sizeof ri.bus)));
    j.key("device_info"); j.str(std::string(ri.name, strnlen(ri.name, sizeof ri.name)));
    j.endObject();
  }
  j.endArray();
  // rccl-tests-compat additions to the configuration
  j.key("program"); j.str(O.prog);
  j.key("collective"); j.str(O.coll->name);
  j.key("nprocs"); j.integer(O.topo.nprocs);
  j.key("nranks"); j.integer(O.topo.nranks());
  j.key("datatypes"); j.beginArray(); for (const TypeDesc* t : g_types) j.str(t->name); j.endArray();
  j.key("ops"); j.beginArray(); for (const OpDesc* o : g_ops) j.str(o->name); j.endArray();
  j.key("run_cycles"); j.integer(O.cycles);
  j.key("blocking"); j.integer(O.blocking);
  j.key("average"); j.integer(O.average);
  j.key("report_cputime"); j.boolean(O.cputime != 0);
  j.key("stream_null"); j.boolean(O.nullStream != 0);
  j.key("capture_mode");
  if (O.graphs) {
    const cudaStreamCaptureMode m = captureMode(O.capture, O.topo.nthreads);
    j.str(m == cudaStreamCaptureModeGlobal ? "global" : m == cudaStreamCaptureModeThreadLocal ? "thread" : "relaxed");
  } else {
    j.null();
  }
  j.key("timeout"); j.integer(O.timeout);
  j.key("local_register"); j.integer(O.reg);
  if (O.coll->rooted) { j.key("root"); j.integer(O.root); }  // -r; -1: every rank in turn
  j.key("nccl_headers"); j.integer(NCCL_VERSION_CODE);
  j.endObject();

  std::vector<LibSummary> sum;
  for (int li = 0; li < nl; li++) sum.push_back(libSummary(li));
  j.key("libraries");
  j.beginArray();
  for (int li = 0; li < nl; li++) {
    const Lib& L = P.libs[li];
    j.beginObject();
    j.key("name"); j.str(L.name);
    j.key("path"); j.str(L.path);
    if (!L.env.empty()) {
      j.key("env");
      j.beginObject();
      for (const auto& kv : L.env) { j.key(kv.first.c_str()); j.str(kv.second); }
      j.endObject();
    }
    j.key("version"); j.integer(L.version);
    if (O.coll->id == COLL_A2A) { j.key("alltoall_symbol"); if (L.alltoallSym) j.str(L.alltoallSym); else j.null(); }
    j.key("out_of_bounds");
    j.beginObject(); j.key("count"); j.integer(sum[li].bad); j.key("okay"); j.str(jsonTrueFalse(sum[li].bad == 0)); j.endObject();
    j.key("average_bus_bandwidth");
    j.beginObject(); j.key("bandwidth"); j.num(sum[li].bw); j.key("okay");
    if (sum[li].bwChecked) j.str(jsonTrueFalse(!sum[li].bwFail)); else j.str("unchecked");
    j.endObject();
    j.endObject();
  }
  j.endArray();
  j.key("ratio_definition");
  j.str(nl ? "time(" + P.libs[0].name + ") / time(library): > 1 means the library is faster than " + P.libs[0].name : "");
  // The library of the nccl-tests keys (results' out_of_place/in_place, out_of_bounds,
  // average_bus_bandwidth, nccl_version): the one whose table the text output shows.
  j.key("table_library"); j.str(nl ? P.libs[O.table].name : "");

  auto half = [&](const Half& x) {
    j.beginObject();
    j.key(O.cputime ? "cpu_time" : "time"); j.num(x.us);
    j.key("alg_bw"); j.num(x.algbw);
    j.key("bus_bw"); j.num(x.busbw);
    j.key("nwrong"); if (x.wrong >= 0) j.integer(x.wrong); else j.null();
    j.endObject();
  };
  const char* halfName[2] = {"out_of_place", "in_place"};
  j.key("results");
  j.beginArray();
  for (const Row& r : g_rows) {
    char root[16];
    snprintf(root, sizeof root, "%6i", r.root);
    j.beginObject();
    j.key("size"); j.integer((long long)r.bytes);
    j.key("count"); j.integer((long long)r.count);
    j.key("type"); j.str(r.type->name);
    j.key("redop"); j.str(r.op->name);
    j.key("root"); j.str(root);
    for (int h = 0; h < 2; h++) { j.key(halfName[h]); half(r.r[O.table][h]); }  // the table library
    j.key("actual_iterations"); j.integer(O.iters);
    j.key("experiment_name"); j.str("");
    j.key("cycle"); j.integer(r.cycle);
    j.key("per_library");
    j.beginObject();
    for (int li = 0; li < nl; li++) {
      j.key(P.libs[li].name.c_str());
      j.beginObject();
      for (int h = 0; h < 2; h++) { j.key(halfName[h]); half(r.r[li][h]); }
      j.endObject();
    }
    j.endObject();
    j.key("ratio");
    j.beginObject();
    for (int li = 1; li < nl; li++) {
      j.key(P.libs[li].name.c_str());
      j.beginObject();
      for (int h = 0; h < 2; h++) {
        const double x = r.r[li][h].us;
        j.key(halfName[h]);
        if (x > 0) j.num(r.r[0][h].us / x); else j.null();
      }
      j.endObject();
    }
    j.endObject();
    j.endObject();
  }
  j.endArray();

  // nccl-tests footer, of the table library (as the text's); every library's in "libraries".
  const LibSummary tab = nl ? sum[O.table] : LibSummary();  // no libraries yet: a failed setup
  j.key("out_of_bounds");
  j.beginObject(); j.key("count"); j.integer(tab.bad); j.key("okay"); j.str(jsonTrueFalse(tab.bad == 0)); j.endObject();
  j.key("average_bus_bandwidth");
  j.beginObject(); j.key("bandwidth"); j.num(tab.bw); j.key("okay");
  if (tab.bwChecked) j.str(jsonTrueFalse(!tab.bwFail)); else j.str("unchecked");
  j.endObject();
  j.key("geomean_ratio");
  j.beginObject();
  for (int li = 1; li < nl; li++) {
    j.key(P.libs[li].name.c_str());
    j.beginObject();
    for (int h = 0; h < 2; h++) { j.key(halfName[h]); j.num(geomeanRatio(li, h)); }
    j.key("sizes"); j.integer((long long)g_rows.size());
    j.endObject();
  }
  j.endObject();
  j.key("errors"); j.beginArray(); for (const std::string& e : g_jsonErrors) j.str(e); j.endArray();
  j.key("complete"); j.boolean(complete);
  if (complete) { j.key("end_time"); j.str(timeString()); }
  j.endObject();
  j.s += '\n';
  return j.s;
}

static void jsonWriteDoc(const std::string& doc) {
  if (g_jsonFd < 0) return;
  bool ok = ftruncate(g_jsonFd, 0) == 0;
  for (size_t off = 0; ok && off < doc.size();) {
    const ssize_t w = pwrite(g_jsonFd, doc.data() + off, doc.size() - off, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) ok = false;
    else off += (size_t)w;
  }
  if (!ok) {
    fprintf(stderr, "# JSON output: writing %s failed: %s; no more JSON output\n", g_jsonPath.c_str(), strerror(errno));
    close(g_jsonFd);
    g_jsonFd = -1;
  }
}

// Process 0: (re)write the document. force = false: only when 5 s have passed since the last one.
static void jsonWrite(bool complete, bool force) {
  if (g_jsonFd < 0 || !g_jsonProc) return;
  if (!force && now() - g_jsonLast < 5.0) return;
  std::string doc;
  {
    std::lock_guard<std::mutex> lk(g_rowsMu);
    doc = jsonDocument(*g_jsonProc, complete);
  }
  jsonWriteDoc(doc);
  g_jsonLast = now();
}

// die() hook in process 0: record the error with the results so far. The lock is only tried
// (the dying thread may have interrupted nothing that holds it, but never wait for long).
static void jsonOnDie(const char* msg) {
  if (g_jsonFd < 0 || !g_jsonProc) return;
  std::unique_lock<std::mutex> lk(g_rowsMu, std::defer_lock);
  for (int i = 0; i < 500 && !lk.try_lock(); i++) usleep(1000);
  if (!lk.owns_lock()) return;
  g_jsonErrors.push_back(msg);
  const std::string doc = jsonDocument(*g_jsonProc, false);
  lk.unlock();
  jsonWriteDoc(doc);
}

// ------------------------------------------------------------------------------------------
// Test loop (nccl-tests TimeTest), per thread
// ------------------------------------------------------------------------------------------
static size_t nextSize(size_t s) {
  if (O.stepFactor > 1) return s ? s * O.stepFactor : 1;
  return s + std::max<size_t>(O.stepBytes, 1);
}

static void timeTest(Thr& t, const TypeDesc* type, const OpDesc* op, int root) {
  const int nl = (int)t.p->libs.size();
  t.barrier();
  for (int li = 0; li < nl; li++)  // warm-up for all sizes (step factor 2), each library
    for (size_t s = O.minBytes; s <= O.maxBytes; s = s ? s * 2 : 1) {
      Cur c = setup(s, type, op, root);
      for (int w = 0; w < O.warmup; w++) startColl(t, li, c, false, w, false);
      completeColl(t, li);
    }
  for (int cyc = 0; cyc < O.cycles; cyc++)
    for (size_t s = O.minBytes; s <= O.maxBytes; s = nextSize(s)) {
      Cur c = setup(s, type, op, root);
      Row row;
      row.bytes = std::max(c.sendBytes, c.recvBytes);
      row.count = c.lay.count;
      row.type = type;
      row.op = op;
      row.cycle = cyc;
      row.root = root;
      for (int li = 0; li < nl; li++) {  // interleaved per size, so drift hits every library
        row.r[li][0] = benchTime(t, li, c, false);
        row.r[li][1] = benchTime(t, li, c, true);
      }
      if (!t.isMain()) continue;
      {
        std::lock_guard<std::mutex> lk(g_rowsMu);
        g_rows.push_back(row);
      }
      printMeasured(t.p->libs, row);
      fflush(stdout);
      jsonWrite(false, false);
    }
  if (t.isMain()) jsonWrite(false, true);
}

// ------------------------------------------------------------------------------------------
// Send/receive buffers and their registration (-R), as nccl-tests 2.19
// ------------------------------------------------------------------------------------------
static size_t dataBytes() { return std::max<size_t>(O.maxBytes, 1); }  // per buffer, per GPU

// -R 2 needs cuMem memory (what ncclMemAlloc returns) for symmetric windows; it comes from the
// first library and every library registers the same buffers, so they still share them.
// Otherwise cudaMalloc, which any library can use. Current device = the buffer's GPU.
static void* allocData(const Proc& P, size_t bytes) {
  void* p = nullptr;
  if (O.reg == 2) NCCLCHECK(P.libs[0], P.libs[0].memAlloc(&p, bytes));
  else CUDACHECK(cudaMalloc(&p, bytes));
  return p;
}

static void freeData(const Proc& P, void* p) {
  if (O.reg == 2) NCCLCHECK(P.libs[0], P.libs[0].memFree(p));
  else CUDACHECK(cudaFree(p));
}

// At start-up, before any buffer or communicator exists: every library must have what -R needs.
static void checkRegSymbols(const Proc& P) {
  if (O.reg == 2)
    CHECK(P.libs[0].memAlloc && P.libs[0].memFree,
          "-R 2: library %s (%s) does not export ncclMemAlloc/ncclMemFree (NCCL >= 2.19)",
          P.libs[0].name.c_str(), P.libs[0].path.c_str());
  for (const Lib& L : P.libs) {
    if (O.reg == 1)
      CHECK(L.commRegister && L.commDeregister,
            "-R 1: library %s (%s) does not export ncclCommRegister/ncclCommDeregister (NCCL >= 2.19)",
            L.name.c_str(), L.path.c_str());
    if (O.reg == 2)
      CHECK(L.commWindowRegister && L.commWindowDeregister,
            "-R 2: library %s (%s) does not export ncclCommWindowRegister/ncclCommWindowDeregister "
            "(NCCL >= 2.27)", L.name.c_str(), L.path.c_str());
  }
}

// Window registration is collective over the communicator, so a thread that holds several of
// its ranks (-g > 1, or the first thread for all threads without -p 1, as initComms) issues the
// calls in one group per library. nccl-tests groups both kinds, even for one rank; so do we.
// All threads call this, once all of this process' buffers exist.
static void registerBufs(Thr& t) {
  if (O.reg == 0) return;
  Proc& P = *t.p;
  const size_t bytes = dataBytes();
  std::vector<std::pair<Thr*, int>> mine;  // the ranks whose buffers this thread registers
  for (Thr& o : P.thr)
    if (O.parallelInit ? &o == &t : t.thread == 0)
      for (int i = 0; i < P.topo.ngpus; i++) mine.push_back({&o, i});
  for (size_t l = 0; l < P.libs.size() && !mine.empty(); l++) {
    const Lib& L = P.libs[l];
    NCCLCHECK(L, L.groupStart());
    for (auto& m : mine) {
      Thr& o = *m.first;
      const int i = m.second;
      Bufs& B = g_bufs[o.thread];
      CUDACHECK(cudaSetDevice(o.gpu[i]));
      char* buf[2] = {B.send[i], B.recv[i]};
      for (int k = 0; k < 2; k++) {
        if (O.reg == 1) NCCLCHECK(L, L.commRegister(o.comm[l][i], buf[k], bytes, &B.reg[l][i][k]));
        else NCCLCHECK(L, L.commWindowRegister(o.comm[l][i], buf[k], bytes, &B.win[l][i][k], NCCL_WIN_COLL_SYMMETRIC));
      }
    }
    NCCLCHECK(L, L.groupEnd());
  }
  t.barrier();  // every handle of this thread's ranks is set (its registering thread is past the group)
  // A library may return success with no window (stock NCCL: the communicator has no symmetric
  // memory support); its calls then use the buffers unregistered. Say so, it changes what is measured.
  for (size_t l = 0; O.reg == 2 && l < P.libs.size(); l++)
    for (int i = 0; i < P.topo.ngpus; i++)
      if (!g_bufs[t.thread].win[l][i][0] || !g_bufs[t.thread].win[l][i][1])
        printf("# -R 2: library %s returned no symmetric window for rank %d: its buffers stay unregistered\n",
               P.libs[l].name.c_str(), t.rank[i]);
  CUDACHECK(cudaSetDevice(t.gpu[0]));
}

// Deregistration is local to the rank (no peer takes part), so each thread releases its own
// ranks' handles, outside a group, once every rank is past its last collective.
static void deregisterBufs(Thr& t) {
  if (O.reg == 0) return;
  Proc& P = *t.p;
  Bufs& B = g_bufs[t.thread];
  t.barrier();
  for (size_t l = 0; l < P.libs.size(); l++) {
    const Lib& L = P.libs[l];
    for (int i = 0; i < P.topo.ngpus; i++) {
      CUDACHECK(cudaSetDevice(t.gpu[i]));
      for (int k = 0; k < 2; k++) {
        if (B.reg[l][i][k]) NCCLCHECK(L, L.commDeregister(t.comm[l][i], B.reg[l][i][k]));
        if (B.win[l][i][k]) NCCLCHECK(L, L.commWindowDeregister(t.comm[l][i], B.win[l][i][k]));
        B.reg[l][i][k] = nullptr;
        B.win[l][i][k] = nullptr;
      }
    }
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
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
  const size_t bytes = dataBytes();
  for (int i = 0; i < P.topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    B.send[i] = (char*)allocData(P, bytes);
    B.recv[i] = (char*)allocData(P, bytes);
    CUDACHECK(cudaMalloc(&B.bad[i], sizeof(unsigned long long)));
    CUDACHECK(cudaMemset(B.send[i], 0, bytes));
    CUDACHECK(cudaMemset(B.recv[i], 0, bytes));
    CUDACHECK(cudaDeviceSynchronize());
  }
  CUDACHECK(cudaSetDevice(t.gpu[0]));
  t.barrier();
  registerBufs(t);
  if (t.isMain()) {
    printDevices(P);
    printf("#\n");
    printTableStart(P.libs);
    fflush(stdout);
  }
  // Rooted collectives: the -r root, or every rank in turn with -r -1 (nccl-tests); else -1.
  const int n = P.topo.nranks();
  const int root0 = !O.coll->rooted ? -1 : O.root < 0 ? 0 : O.root;
  const int root1 = !O.coll->rooted ? -1 : O.root < 0 ? n - 1 : O.root;
  for (const TypeDesc* type : g_types)
    for (const OpDesc* op : g_ops)
      for (int root = root0; root <= root1; root++) timeTest(t, type, op, root);
  deregisterBufs(t);
  destroyComms(t);
  for (int i = 0; i < P.topo.ngpus; i++) {
    CUDACHECK(cudaSetDevice(t.gpu[i]));
    freeData(P, B.send[i]);
    freeData(P, B.recv[i]);
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

// The header of the run (process 0), as nccl-tests' plus the libraries.
static void printRunHeader(const std::vector<Lib>& libs) {
  const int nl = (int)libs.size();
  printf("# rccl-tests-compat (nccl-tests 2.19.6 format) nccl-headers=%d\n", NCCL_VERSION_CODE);
  printf("# Collective test starting: %s\n", O.prog.c_str());
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "agg iters: %d validation: %d graph: %d\n",
         O.topo.nthreads, O.topo.ngpus, O.minBytes, O.maxBytes,
         O.stepFactor > 1 ? (size_t)O.stepFactor : O.stepBytes, O.stepFactor > 1 ? "factor" : "bytes",
         O.warmup, O.iters, O.agg, O.check, O.graphs);
  printf("# nProcs %d (forked, no MPI)  nRanks %d  libraries:", O.topo.nprocs, O.topo.nranks());
  for (const Lib& L : libs) printf(" %s", L.name.c_str());
  printf("\n");
  if (O.blocking) printf("# Blocking Enabled: -z %d\n", O.blocking);
  if (O.parallelInit) printf("# Parallel Init Enabled: threads call into NcclInitRank concurrently\n");
  if (O.reg == 1) printf("# Buffer registration: -R 1, cudaMalloc buffers registered with ncclCommRegister\n");
  if (O.reg == 2)
    printf("# Buffer registration: -R 2, ncclMemAlloc buffers (library %s) registered as symmetric windows "
           "(ncclCommWindowRegister) with every library\n", libs[0].name.c_str());
  if (nl > 1) {
    for (const Lib& L : libs) {
      printf("# library %s: %s ncclGetVersion=%d", L.name.c_str(), L.path.c_str(), L.version);
      for (const auto& kv : L.env) printf(" %s=%s", kv.first.c_str(), kv.second.c_str());
      printf("\n");
    }
    if (O.compare)
      printf("# --compare: every library's table, then the comparison, print at the end; library %s decides "
             "NCCL_TESTS_MIN_BW and fills the JSON top level\n", libs[O.table].name.c_str());
    else
      printf("# Table: library %s (--table NAME picks another); the other libraries and the comparison "
             "follow it as '#' lines (--compare: as plain tables)\n", libs[O.table].name.c_str());
  }
  printf("#\n");
}

static Shared* g_shared = nullptr;

static int perfProc(int proc) {
  static Proc P;
  if (proc == 0 && g_jsonFd >= 0) {  // only process 0 writes the JSON file
    g_jsonProc = &P;
    g_dieHook = jsonOnDie;
  }
  procSetup(P, proc, O.topo, g_shared, O.libs);
  checkRegSymbols(P);
  resolveTypesOps(P);
  g_bufs.assign(O.topo.nthreads, Bufs());
  if (proc == 0) {
    printRunHeader(P.libs);
    fflush(stdout);
  }
  runThreads(P, perfThread);
  if (proc != 0) return g_errors ? 1 : 0;
  const bool ok = printTableEnd(P.libs);
  jsonWrite(true, true);
  return ok ? 0 : 1;
}

static void usage(const char* prog) {
  printf("USAGE: %s [options]   (nccl-tests 2.19.6 flags, plus the rccl-tests-compat ones)\n"
         "Exit status: 0 ok; 1 wrong values or NCCL_TESTS_MIN_BW not met; 2 usage, setup, CUDA or NCCL\n"
         "error; 124 timeout; 128+N killed by signal N.\n"
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
         "  -r,--root N            root rank of rooted collectives (broadcast, reduce); -1: every rank in turn (0)\n"
         "  -z,--blocking 0..3     0 async; 1 sync+barrier per op; 2 sync per op; 3 sync per iteration (0)\n"
         "  -y,--stream_null 0/1   use the NULL stream (0)\n"
         "  -G,--cudagraph N       capture the -n iterations in a CUDA graph, launch it N times (0)\n"
         "  -C,--report_cputime 0/1  report CPU time instead of wall time (0)\n"
         "  -a,--average 0..3      cross-rank time: 0 rank 0, 1 average, 2 min, 3 max (1)\n"
         "  -R,--local_register 0..2  buffer registration (0): 0 none (cudaMalloc); 1 ncclCommRegister;\n"
         "                         2 buffers from ncclMemAlloc of the first library, registered with every\n"
         "                         library as symmetric windows (ncclCommWindowRegister, NCCL >= 2.27)\n"
         "  -P,--nprocs N          fork N processes (no MPI); ranks = N x t x g (1)\n"
         "  -T,--timeout S         kill everything after S seconds (600; 0 = never)\n"
         "  -J,--output_file F     also write the results as JSON to F (must end in .json; an existing\n"
         "                         file is kept and F.0, F.1, ... used instead), like nccl-tests 2.19\n"
         "  --libs NAME=PATH[,NAME=PATH...]  libraries to compare ($RCCLX_BENCH_LIBS, else nccl=libnccl.so.2);\n"
         "                         NAME[VAR=VALUE;...]=PATH sets variables while that library loads and\n"
         "                         creates its communicators (when rcclx reads its switches; a copy of the\n"
         "                         file runs beside the original with other settings)\n"
         "  --table NAME           the library whose nccl-tests table stdout shows (default: the last in\n"
         "                         --libs); the other libraries and the comparison follow as '#' lines\n"
         "  --compare              print every library's table, then the comparison, as plain rows at\n"
         "                         the end (the earlier layout; not one nccl-tests table)\n"
         "  --coll C               %s\n"
         "                         (default: from the program name)\n"
         "  --capture-mode M       global|thread|relaxed stream capture for -G (global; thread with -t > 1)\n",
         prog, collNames("|").c_str());
}

// The command line into O; opens the JSON file (-J). A usage error (unknown option, missing
// argument, bad value, invalid root, unknown --table) ends the program with status 2. Returns
// false after --help.
static bool parseArgs(int argc, char** argv) {
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
      {"output_file", required_argument, 0, 'J'}, {"output-file", required_argument, 0, 'J'},
      {"local_register", required_argument, 0, 'R'},
      {"libs", required_argument, 0, 1}, {"coll", required_argument, 0, 2},
      {"capture-mode", required_argument, 0, 3}, {"table", required_argument, 0, 4},
      {"compare", no_argument, 0, 5}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  // Usage errors (unknown option, missing argument, bad value) end the program with status 2.
  auto size = [](const char* s, const char* what) {
    double v = parseSize(s);
    if (v < 0) usageError("invalid size '%s' for %s (bytes, or with a K/M/G suffix)", s, what);
    return (size_t)v;
  };
  const long long kInt = 0x7fffffff;
  auto num = [&](const char* v, char opt, long long lo, long long hi) {
    const char name[3] = {'-', opt, 0};
    return (int)parseIntArg(v, name, lo, hi);
  };
  std::string table;
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:a:P:J:R:h", longopts, nullptr)) != -1) {
    const char* v = optarg;
    switch (c) {
      case 't': O.topo.nthreads = num(v, 't', 1, kMaxThreads); break;
      case 'g': O.topo.ngpus = num(v, 'g', 1, kMaxGpusPerThread); break;
      case 'b': O.minBytes = size(v, "-b/--minbytes"); break;
      case 'e': O.maxBytes = size(v, "-e/--maxbytes"); break;
      case 'i': O.stepBytes = size(v, "-i/--stepbytes"); break;
      case 'f': O.stepFactor = num(v, 'f', 0, kInt); break;
      case 'n': O.iters = num(v, 'n', 1, kInt); break;
      case 'm': O.agg = num(v, 'm', 1, kInt); break;
      case 'w': O.warmup = num(v, 'w', 0, kInt); break;
      case 'N': O.cycles = num(v, 'N', 1, kInt); break;
      case 'p': O.parallelInit = num(v, 'p', 0, 1); break;
      case 'c': O.check = num(v, 'c', 0, kInt); break;
      case 'o': O.opArg = v; break;
      case 'd': O.typeArg = v; break;
      case 'r': O.root = num(v, 'r', -1, kMaxRanks - 1); break;
      case 'z': O.blocking = num(v, 'z', 0, 3); break;
      case 'y': O.nullStream = num(v, 'y', 0, 1); break;
      case 'T': O.timeout = num(v, 'T', 0, kInt); break;
      case 'G': O.graphs = num(v, 'G', 0, kInt); break;
      case 'C': O.cputime = num(v, 'C', 0, 1); break;
      case 'a': O.average = num(v, 'a', 0, 3); break;
      case 'P': O.topo.nprocs = num(v, 'P', 1, kMaxThreads); break;
      case 'J': O.jsonFile = v; break;
      case 'R': O.reg = num(v, 'R', 0, 2); break;
      case 1: O.libs = v; break;
      case 2: O.coll = findColl(v); if (!O.coll) usageError("unknown --coll '%s': need %s", v, collNames(", ").c_str()); break;
      case 3: O.capture = v; break;
      case 4: table = v; break;
      case 5: O.compare = true; break;
      case 'h': usage(O.prog.c_str()); return false;
      default:  // getopt has printed what is wrong
        fprintf(stderr, "%s: --help lists the options\n", O.prog.c_str());
        exit(2);
    }
  }
  if (optind < argc) usageError("unexpected argument '%s'", argv[optind]);
  if (!O.coll) usageError("%s: cannot tell the collective from the program name; use --coll", O.prog.c_str());
  if (O.minBytes > O.maxBytes) usageError("invalid sizes: minbytes %zu > maxbytes %zu", O.minBytes, O.maxBytes);
  if (O.coll->rooted && O.root >= O.topo.nranks())
    usageError("invalid root %d: need -1 (every rank) or 0..%d", O.root, O.topo.nranks() - 1);
  if (O.graphs && O.nullStream) usageError("-G cannot capture the NULL stream (-y 1)");
  if (!validTypeList(O.typeArg)) usageError("unknown datatype in '%s'", O.typeArg.c_str());
  if (!validOpList(O.opArg)) usageError("unknown op in '%s'", O.opArg.c_str());
  captureMode(O.capture, O.topo.nthreads);  // validates the name
  const std::vector<Lib> libs = parseLibs(O.libs);  // validates the list before forking
  O.table = (int)libs.size() - 1;
  if (!table.empty()) {
    std::string names;
    O.table = -1;
    for (size_t i = 0; i < libs.size(); i++) {
      if (libs[i].name == table) O.table = (int)i;
      names += (i ? ", " : "") + libs[i].name;
    }
    if (O.table < 0) usageError("--table %s: no library of that name in --libs (%s)", table.c_str(), names.c_str());
  }
  if (!O.jsonFile.empty()) {
    g_args.assign(argv, argv + argc);
    g_env = relevantEnv();  // after setDefaultEnv(): what the libraries see
    jsonOpen(O.jsonFile);
  }
  return true;
}

#ifndef RCCLX_PERF_NO_MAIN  // test/report_test.cu includes this file with its own main()
int main(int argc, char** argv) {
  setlinebuf(stdout);
  setDefaultEnv();
  if (!parseArgs(argc, argv)) return 0;
  g_shared = createShared(O.topo, 0);
  return launch(O.topo.nprocs, O.timeout, perfProc);
}
#endif
