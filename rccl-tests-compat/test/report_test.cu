// Host-only test of the *_perf output: no GPU, and no NCCL library is loaded. It runs the
// benchmark's own option parsing (src/perf.cu, included below) and its text and JSON output on
// made-up results, so that selftest.sh can check without a GPU that stdout is one nccl-tests
// table, that the comparison is there as '#' lines, and that the JSON file is complete.
//   report_test [benchmark options: --libs --table --compare --coll -b -e -f -i -N -d -o -r -g -c -J ...]
// Made-up results: every library reports ncclGetVersion 22809; library l takes 1/(1 + l/2) of
// the first library's time; the results of the library named by $REPORT_TEST_WRONG have wrong
// values. The collective comes from the program name or --coll, as for the benchmark. Exit
// status: the benchmark's (0, 1 for wrong values or NCCL_TESTS_MIN_BW, 2 for usage errors).
#define RCCLX_PERF_NO_MAIN
#include "../src/perf.cu"

int main(int argc, char** argv) {
  setlinebuf(stdout);
  if (!parseArgs(argc, argv)) return 0;
  static Proc P;
  P.topo = O.topo;
  P.libs = parseLibs(O.libs);
  for (Lib& L : P.libs) {
    L.version = 22809;
    L.alltoallSym = "ncclAlltoAll";
  }
  g_types = resolveTypes(O.typeArg, 22809, 9);
  g_ops = O.coll->reduces ? resolveOps(O.opArg, 22809) : std::vector<const OpDesc*>{&kOpNone};
  if (g_jsonFd >= 0) g_jsonProc = &P;
  const char* wrongLib = getenv("REPORT_TEST_WRONG");

  printRunHeader(P.libs);
  printTableStart(P.libs);
  const int n = O.topo.nranks(), nl = (int)P.libs.size();
  const int root0 = !O.coll->rooted ? -1 : O.root < 0 ? 0 : O.root;
  const int root1 = !O.coll->rooted ? -1 : O.root < 0 ? n - 1 : O.root;
  for (const TypeDesc* type : g_types)
    for (const OpDesc* op : g_ops)
      for (int root = root0; root <= root1; root++)
        for (int cyc = 0; cyc < O.cycles; cyc++)
          for (size_t s = O.minBytes; s <= O.maxBytes; s = nextSize(s)) {  // as timeTest
            const Cur c = setup(s, type, op, root);
            Row row;
            row.bytes = std::max(c.sendBytes, c.recvBytes);
            row.count = c.lay.count;
            row.type = type;
            row.op = op;
            row.cycle = cyc;
            row.root = root;
            for (int li = 0; li < nl; li++)
              for (int h = 0; h < 2; h++) {
                Half& x = row.r[li][h];
                x.us = (5.0 + (double)row.bytes / 2.0e4) / (1.0 + 0.5 * li) * (h ? 1.01 : 1.0);
                getBw(O.coll->id, c.lay.count, type->size, x.us * 1e-6, n, &x.algbw, &x.busbw);
                const bool checked = O.check && !(h == 1 && !O.coll->inPlaceDefined);
                x.wrong = !checked ? -1 : wrongLib && P.libs[li].name == wrongLib ? 3 : 0;
                if (x.wrong > 0) g_errors++;
              }
            g_rows.push_back(row);
            printMeasured(P.libs, row);
          }
  const bool ok = printTableEnd(P.libs);
  jsonWrite(true, true);
  (void)&perfProc;  // the benchmark's run (not called here: it needs GPUs)
  return ok ? 0 : 1;
}
