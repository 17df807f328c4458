#!/usr/bin/env bash
# Quick end-to-end run of the rccl-tests-compat binaries on a 2-GPU machine.
#   STOCK=/path/libnccl.so.2 [RCCLX=/path/librcclx.so] [SECTIONS="host perf check faults"] \
#     rccl-tests-compat/selftest.sh [outdir]
# Section "host" needs no GPU and no NCCL library (SECTIONS=host runs it alone, e.g. in CI after
# build.sh): usage errors exit with status 2, and build/report_test (the benchmark's option
# parsing and output on made-up results) prints one nccl-tests table with the comparison as
# '#' lines, and JSON that bench/ratios.py (and bench/plot.py, with matplotlib) read.
# Without RCCLX the stock library is compared with itself (tests the harness, not rcclx).
# Section "faults" runs the harness against build/libfaultshim.so (stock NCCL plus injected
# corruption / out-of-bounds writes / hangs / crashes) and checks that each is reported.
# Every command runs under `timeout`; the summary lists each command's exit status. The exit
# status is 1 when a host check, a fault test or a benchmark table check failed.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
B="$HERE/build"
OUT="${1:-$HERE/build/selftest}"
mkdir -p "$OUT"
SECTIONS="${SECTIONS:-host perf check faults}"
has() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }
n=0
summary=()
FAILS=0
LAST_RC=0
LAST_LOG=

# ---- host: no GPU, no NCCL library ----------------------------------------------------------
hres() {  # hres NAME PASS|FAIL TEXT
  [ "$2" = PASS ] || FAILS=$((FAILS + 1))
  summary+=("$(printf '%-4s  host: %s: %s' "$2" "$1" "$3")")
}
hrun() {  # hrun NAME WANT_RC CMD...: stdout into $HOUT, stderr into ${HOUT%.out}.err
  local name="$1" want="$2"; shift 2
  n=$((n + 1))
  HOUT="$OUT/$(printf '%02d' $n)-${name//[^A-Za-z0-9_.=-]/_}.out"
  timeout -k 5 60 "$@" >"$HOUT" 2>"${HOUT%.out}.err"
  LAST_RC=$?
  if [ "$LAST_RC" = "$want" ]; then hres "$name" PASS "exit status $want"
  else hres "$name" FAIL "exit status $LAST_RC, want $want ($(head -c 300 "${HOUT%.out}.err"))"; fi
}
husage() {  # husage NAME CMD...: a usage error: exit status 2 and the usage hint (not a setup error)
  local name="$1"; shift
  hrun "$name" 2 "$@"
  grep -q -- "--help lists the options" "${HOUT%.out}.err" ||
    hres "$name" FAIL "not a usage error: $(head -c 300 "${HOUT%.out}.err")"
}
hcheck() {  # hcheck NAME TEXT CMD...: CMD must succeed
  local name="$1" text="$2"; shift 2
  if "$@" >/dev/null 2>&1; then hres "$name" PASS "$text"; else hres "$name" FAIL "$text"; fi
}
# What nccl-tests parsers read: the lines not starting with '#' are the rows (13 fields each; ROWS
# of them when given), plus one "# Out of bounds values" and one "# Avg bus bandwidth" line.
# selftest.sh's own log lines ("== NAME: ...") are skipped.
nccl_table() {  # nccl_table FILE [ROWS]
  awk -v want="${2:--1}" '
    /^== / || /^$/ { next }
    /^#/ { if (/^# Out of bounds values : /) oob++; if (/^# Avg bus bandwidth    : /) avg++; next }
    { rows++; if (NF != 13) bad++ }
    END { exit !((want < 0 || rows == want) && rows > 0 && !bad && oob == 1 && avg == 1) }' "$1"
}
count() { [ "$(grep -cE -- "$2" "$1")" = "$3" ]; }  # count FILE REGEX N: N lines match

if has host; then
  P="$B/all_reduce_perf"
  hrun help 0 "$P" --help
  hcheck help "--help documents --table and --compare" grep -q -- "--compare" "$HOUT"
  # Usage errors: unknown option, missing argument, bad values, invalid root, unknown --table.
  for bad in "--bogus" "-n" "-n abc" "-n 0" "-g 2x" "-z 7" "-R 3" "-b 1X" "-b 2M -e 1M" "-d nope" \
             "-o nope" "--coll nope" "--capture-mode nope" "extra" "--libs a[X]=/p" "--libs a=/x,a=/y" \
             "--libs a=/x --table b" "-G 5 -y 1"; do
    read -ra args <<<"$bad"
    husage "usage all_reduce_perf $bad" "$P" "${args[@]}"
  done
  husage "usage broadcast_perf -g 2 -r 2" "$B/broadcast_perf" -g 2 -r 2
  husage "usage broadcast_perf -r -2" "$B/broadcast_perf" -r -2
  husage "usage reduce_perf -g 2 -r 2" "$B/reduce_perf" -g 2 -r 2
  husage "usage rcclx_check --bogus" "$B/rcclx_check" --bogus
  husage "usage rcclx_check one library" "$B/rcclx_check" --libs a=/x
  husage "usage rcclx_check --counts 0" "$B/rcclx_check" --libs a=/x,b=/y --counts 0
  husage "usage rcclx_check --rel-tol x" "$B/rcclx_check" --libs a=/x,b=/y --rel-tol x
  # A library that cannot be loaded is a setup error: status 2 too, from the run, not the parser.
  hrun "setup error: no library" 2 "$P" --libs a=/none/libnccl.so.2 -b 1K -e 1K
  hcheck "setup error: no library" "names the library" grep -q "cannot load library a=/none/libnccl.so.2" "${HOUT%.out}.err"

  # The output, on made-up results (build/report_test): 1K..1M by 4 = 6 sizes; library l takes
  # 1/(1 + l/2) of the first library's time.
  R=("$B/report_test" --coll all_reduce -g 2 -b 1K -e 1M -f 4)
  L2="stock=/none/libnccl.so.2,rcclx=/none/librcclx.so"
  rm -f "$OUT"/report-*.json*
  hrun report-1lib 0 "${R[@]}" --libs nccl=/none/libnccl.so.2
  hcheck report-1lib "one nccl-tests table of 6 rows" nccl_table "$HOUT" 6
  hcheck report-1lib "no comparison" count "$HOUT" "Comparison|geomean|^# Table" 0
  hrun report-2libs 0 "${R[@]}" --libs "$L2" -J "$OUT/report-2libs.json"
  hcheck report-2libs "one nccl-tests table of 6 rows" nccl_table "$HOUT" 6
  hcheck report-2libs "the table is the last library's" grep -q "^# Table: library rcclx " "$HOUT"
  hcheck report-2libs "stock's rows and the comparison's as # lines" count "$HOUT" "^# +[0-9]+ " 12
  hcheck report-2libs "the geomean line" \
    grep -q "^# geomean ratio stock/rcclx over 6 sizes: out-of-place 1.500  in-place 1.500" "$HOUT"
  hcheck report-2libs "JSON: complete, top level = the table library, every library kept" \
    python3 - "$OUT/report-2libs.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("version", "start_time", "args", "env", "nccl_version", "generator", "config", "libraries",
          "ratio_definition", "table_library", "results", "out_of_bounds", "average_bus_bandwidth",
          "geomean_ratio", "errors", "complete", "end_time"):
    assert k in d, k
assert d["complete"] is True and d["errors"] == [] and d["table_library"] == "rcclx"
libs = d["libraries"]
assert [lib["name"] for lib in libs] == ["stock", "rcclx"]
assert d["average_bus_bandwidth"] == libs[1]["average_bus_bandwidth"]
assert d["out_of_bounds"] == libs[1]["out_of_bounds"] == {"count": 0, "okay": "true"}
assert len(d["results"]) == 6
for r in d["results"]:
    per = r["per_library"]
    assert list(per) == ["stock", "rcclx"] and list(r["ratio"]) == ["rcclx"]
    for lay in ("out_of_place", "in_place"):
        assert r[lay] == per["rcclx"][lay]
        assert abs(r["ratio"]["rcclx"][lay] - per["stock"][lay]["time"] / per["rcclx"][lay]["time"]) < 1e-6
assert abs(d["geomean_ratio"]["rcclx"]["out_of_place"] - 1.5) < 1e-6
EOF
  hrun report-table-first 0 "${R[@]}" --libs "$L2" --table stock
  hcheck report-table-first "one table, stock's" nccl_table "$HOUT" 6
  hcheck report-table-first "--table stock" grep -q "^# Table: library stock " "$HOUT"
  hrun report-compare 0 "${R[@]}" --libs "$L2" --compare
  hcheck report-compare "both tables and the comparison as plain rows" count "$HOUT" "^ +[0-9]+ " 18
  hcheck report-compare "two Avg bus bandwidth lines" count "$HOUT" "^# Avg bus bandwidth" 2
  hrun report-wrong-other 1 env REPORT_TEST_WRONG=stock "${R[@]}" --libs "$L2"
  hcheck report-wrong-other "stock's wrong values as a # line" \
    grep -q "^# library stock: 12 results with wrong values (FAILED)" "$HOUT"
  hcheck report-wrong-other "the table (rcclx) is clean" grep -q "^# Out of bounds values : 0 OK" "$HOUT"
  hrun report-wrong-table 1 env REPORT_TEST_WRONG=rcclx "${R[@]}" --libs "$L2"
  hcheck report-wrong-table "12 FAILED" grep -q "^# Out of bounds values : 12 FAILED" "$HOUT"
  hrun report-min-bw 1 env NCCL_TESTS_MIN_BW=1000000 "${R[@]}" --libs "$L2"
  hcheck report-min-bw "Avg bus bandwidth FAILED" grep -qE "^# Avg bus bandwidth    : [0-9.e+]+ FAILED" "$HOUT"
  hrun report-broadcast 0 "$B/report_test" --coll broadcast -g 2 -b 8 -e 512 -f 8 -r -1 --libs "$L2"
  hcheck report-broadcast "one table: 3 sizes x 2 roots" nccl_table "$HOUT" 6
  hrun report-alltoall 0 "$B/report_test" --coll alltoall -g 2 -b 1K -e 1M -f 4 --libs "$L2"
  hcheck report-alltoall "one table (in place: N/A)" nccl_table "$HOUT" 6
  hrun report-cycles 0 "${R[@]}" --libs "$L2,int8=/none/copy.so" -N 3 -J "$OUT/report-cycles.json"
  hcheck report-cycles "one table of 3 x 6 rows" nccl_table "$HOUT" 18
  hrun bench-ratios 0 python3 "$REPO/bench/ratios.py" --versus rcclx "$OUT/report-cycles.json"
  hcheck bench-ratios "bench/ratios.py reads the JSON" grep -q "^| 1 MiB | 1.50 (1.50) | 1.50 (1.50) | 2.00 (2.00)" "$HOUT"
  if python3 -c "import matplotlib" 2>/dev/null; then
    hrun bench-plot 0 python3 "$REPO/bench/plot.py" "$OUT/report-2libs.json" "$OUT/report-cycles.json" --outdir "$OUT/plots"
  else
    summary+=("skip  host: bench/plot.py (matplotlib is not installed)")
  fi
fi
if ! has perf && ! has check && ! has faults; then
  echo "== summary ($OUT)"
  printf '%s\n' "${summary[@]}"
  [ "$FAILS" = 0 ]
  exit
fi

# ---- on 2 GPUs -----------------------------------------------------------------------------
if [ -z "${STOCK:-}" ]; then
  for c in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2 \
           "$HERE/build/nccl-2.28.9/nvidia/nccl/lib/libnccl.so.2"; do
    if [ -f "$c" ]; then STOCK="$c"; break; fi
  done
fi
if [ -z "${STOCK:-}" ]; then
  STOCK="$(python3 -c 'import glob, nvidia.nccl as m; print(glob.glob(list(m.__path__)[0] + "/lib/libnccl.so.2")[0])' 2>/dev/null || true)"
fi
[ -n "${STOCK:-}" ] || { echo "selftest: set STOCK=/path/to/libnccl.so.2" >&2; exit 1; }
LIBS="stock=$STOCK,${RCCLX:+rcclx=$RCCLX}"
[ -n "${RCCLX:-}" ] || LIBS="stock=$STOCK,stock2=$STOCK"
echo "selftest: --libs $LIBS"
export NCCL_NVLS_ENABLE=0
ulimit -c 0  # the crash tests abort()

run() {  # run NAME SECONDS CMD...; with RUN_STDERR=FILE, stderr goes there instead of the log
  local name="$1" secs="$2"; shift 2
  n=$((n + 1))
  LAST_LOG="$OUT/$(printf '%02d' $n)-$name.log"
  echo "== $name: $*" | tee "$LAST_LOG"
  local t0=$SECONDS
  if [ -n "${RUN_STDERR:-}" ]; then
    timeout -k 5 "$secs" "$@" >>"$LAST_LOG" 2>"$RUN_STDERR"
  else
    timeout -k 5 "$secs" "$@" >>"$LAST_LOG" 2>&1
  fi
  LAST_RC=$?
  summary+=("$(printf 'rc=%-3d %4ds  %s' $LAST_RC $((SECONDS - t0)) "$name")")
  tail -n 25 "$LAST_LOG"
  [ -z "${RUN_STDERR:-}" ] || tail -n 10 "$RUN_STDERR"
}
frun() {  # frun NAME WANT_RC PATTERN SECONDS CMD...: must fail that way
  local name="$1" want="$2" pat="$3" secs="$4"; shift 4
  run "$name" "$secs" "$@"
  local ok=PASS
  [ "$LAST_RC" = "$want" ] && grep -Eq -- "$pat" "$LAST_LOG" || ok=FAIL
  [ "$ok" = PASS ] || FAILS=$((FAILS + 1))
  summary[-1]="${summary[-1]}   [fault test: want rc=$want and /$pat/: $ok]"
}
prun() {  # prun NAME SECONDS CMD...: a benchmark run; its stdout must be one nccl-tests table
  RUN_STDERR="$OUT/$(printf '%02d' $((n + 1)))-$1.err" run "$@"
  local ok=PASS
  nccl_table "$LAST_LOG" || ok=FAIL
  [ "$ok" = PASS ] || FAILS=$((FAILS + 1))
  summary[-1]="${summary[-1]}   [one nccl-tests table: $ok]"
}

if has perf; then
prun ar-g2        120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 4
prun ar-P2        120 "$B/all_reduce_perf" --libs "$LIBS" -P 2 -g 1 -b 1K -e 64M -f 4
prun ar-g2-G50    120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 4M -f 4 -G 50
prun ar-P2-G50    120 "$B/all_reduce_perf" --libs "$LIBS" -P 2 -b 1K -e 4M -f 4 -G 50
prun ar-t2        120 "$B/all_reduce_perf" --libs "$LIBS" -t 2 -b 1K -e 1M -f 8
prun ar-all       180 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 64 -e 64K -f 32 -d all -o all -n 5
prun ag-g2        120 "$B/all_gather_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 8 -d all -n 5
prun rs-g2        120 "$B/reduce_scatter_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 8 -d all -o all -n 5
prun a2a-P2       120 "$B/alltoall_perf" --libs "$LIBS" -P 2 -b 1K -e 64M -f 8 -d all -n 5
# Broadcast: every root in turn (-r -1), one thread for both GPUs; root 1 per process under graphs.
prun bc-g2-allroots 120 "$B/broadcast_perf" --libs "$LIBS" -g 2 -b 8 -e 64M -f 8 -d all -n 5 -r -1
prun bc-P2-r1-G50 120 "$B/broadcast_perf" --libs "$LIBS" -P 2 -b 8 -e 4M -f 4 -G 50 -r 1
# Reduce: every root in turn, every type and op; root 1 per process under graphs.
prun rd-g2-allroots 120 "$B/reduce_perf" --libs "$LIBS" -g 2 -b 8 -e 64M -f 8 -d all -o all -n 5 -r -1
prun rd-P2-r1-G50 120 "$B/reduce_perf" --libs "$LIBS" -P 2 -b 8 -e 4M -f 4 -G 50 -r 1
# Buffer registration: symmetric windows registered in a group by one thread (-g 2) and per
# process under graphs (-P 2 -G 50); ncclCommRegister by the first thread for two threads (-t 2).
prun ar-g2-R2     120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 16M -f 4 -R 2
prun ag-P2-R2-G50 120 "$B/all_gather_perf" --libs "$LIBS" -P 2 -b 1K -e 4M -f 4 -R 2 -G 50
prun rs-t2-R1     120 "$B/reduce_scatter_perf" --libs "$LIBS" -t 2 -b 1K -e 1M -f 8 -R 1
fi
if has check; then
run check-g2     300 "$B/rcclx_check" --libs "$LIBS" -g 2 --coll all -d all -o all
run check-P2     300 "$B/rcclx_check" --libs "$LIBS" -P 2 --coll all_reduce,reduce_scatter -d float,bfloat16,int32 -o all
run check-rand   300 "$B/rcclx_check" --libs "$LIBS" -g 2 --coll all -d float -o sum --random-sizes 3000
run check-graph  300 "$B/rcclx_check" --libs "$LIBS" -P 2 --coll all -d float,half -o sum,max --graph --graph-replays 7
fi
if has faults; then
  SHIM="$B/libfaultshim.so"
  F=(env SHIM_REAL="$STOCK")
  frun f-check-corrupt 1 '^MISMATCH +all_reduce' 120 "${F[@]}" SHIM_FAULT=corrupt \
    "$B/rcclx_check" --libs "stock=$STOCK,shim=$SHIM" -P 2 --coll all_reduce,all_gather -d float,int32 -o sum --counts 7,4099
  frun f-check-oob     1 '^MISMATCH +reduce_scatter' 120 "${F[@]}" SHIM_FAULT=oob \
    "$B/rcclx_check" --libs "stock=$STOCK,shim=$SHIM" -P 2 --coll all -d float -o sum --counts 7,1023
  frun f-perf-corrupt  1 'Out of bounds values : [1-9][0-9]* FAILED' 120 "${F[@]}" SHIM_FAULT=corrupt \
    "$B/all_reduce_perf" --libs "stock=$STOCK,shim=$SHIM" -P 2 -b 1K -e 64K -f 8
  # Wrong values in a library that is not the table's: exit status 1, and a '#' line says so.
  frun f-perf-corrupt-other 1 '^# library shim: [1-9][0-9]* results with wrong values \(FAILED\)' 120 \
    "${F[@]}" SHIM_FAULT=corrupt "$B/all_reduce_perf" --libs "stock=$STOCK,shim=$SHIM" --table stock -P 2 -b 1K -e 64K -f 8
  frun f-perf-hang     124 'timeout' 60 "${F[@]}" SHIM_FAULT=hang \
    "$B/all_reduce_perf" --libs "shim=$SHIM" -P 2 -b 1K -e 1K -T 15
  frun f-inproc-hang   124 'timeout' 60 "${F[@]}" SHIM_FAULT=hang \
    "$B/all_reduce_perf" --libs "shim=$SHIM" -g 2 -b 1K -e 1K -T 10
  frun f-perf-crash    134 'killed by signal 6' 60 "${F[@]}" SHIM_FAULT=crash \
    "$B/all_reduce_perf" --libs "shim=$SHIM" -P 2 -b 1K -e 1K
  frun f-check-crash   134 'killed by signal 6' 60 "${F[@]}" SHIM_FAULT=crash \
    "$B/rcclx_check" --libs "stock=$STOCK,shim=$SHIM" -P 2 --coll all_reduce -d float -o sum
fi

echo "== summary ($OUT)"
printf '%s\n' "${summary[@]}"
[ "$FAILS" = 0 ]
