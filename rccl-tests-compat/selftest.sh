#!/usr/bin/env bash
# Quick end-to-end run of the rccl-tests-compat binaries on a 2-GPU machine.
#   STOCK=/path/libnccl.so.2 [RCCLX=/path/librcclx.so] [SECTIONS="perf check faults"] \
#     rccl-tests-compat/selftest.sh [outdir]
# Without RCCLX the stock library is compared with itself (tests the harness, not rcclx).
# Section "faults" runs the harness against build/libfaultshim.so (stock NCCL plus injected
# corruption / out-of-bounds writes / hangs / crashes) and checks that each is reported.
# Every command runs under `timeout`; the summary lists each command's exit status.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
B="$HERE/build"
OUT="${1:-$HERE/build/selftest}"
mkdir -p "$OUT"
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

SECTIONS="${SECTIONS:-perf check faults}"
n=0
summary=()
LAST_RC=0
LAST_LOG=
run() {  # run NAME SECONDS CMD...
  local name="$1" secs="$2"; shift 2
  n=$((n + 1))
  LAST_LOG="$OUT/$(printf '%02d' $n)-$name.log"
  echo "== $name: $*" | tee "$LAST_LOG"
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >>"$LAST_LOG" 2>&1
  LAST_RC=$?
  summary+=("$(printf 'rc=%-3d %4ds  %s' $LAST_RC $((SECONDS - t0)) "$name")")
  tail -n 25 "$LAST_LOG"
}
frun() {  # frun NAME WANT_RC PATTERN SECONDS CMD...: must fail that way
  local name="$1" want="$2" pat="$3" secs="$4"; shift 4
  run "$name" "$secs" "$@"
  local ok=PASS
  [ "$LAST_RC" = "$want" ] && grep -Eq -- "$pat" "$LAST_LOG" || ok=FAIL
  summary[-1]="${summary[-1]}   [fault test: want rc=$want and /$pat/: $ok]"
}
has() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }

if has perf; then
run ar-g2        120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 4
run ar-P2        120 "$B/all_reduce_perf" --libs "$LIBS" -P 2 -g 1 -b 1K -e 64M -f 4
run ar-g2-G50    120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 4M -f 4 -G 50
run ar-P2-G50    120 "$B/all_reduce_perf" --libs "$LIBS" -P 2 -b 1K -e 4M -f 4 -G 50
run ar-t2        120 "$B/all_reduce_perf" --libs "$LIBS" -t 2 -b 1K -e 1M -f 8
run ar-all       180 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 64 -e 64K -f 32 -d all -o all -n 5
run ag-g2        120 "$B/all_gather_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 8 -d all -n 5
run rs-g2        120 "$B/reduce_scatter_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 8 -d all -o all -n 5
run a2a-P2       120 "$B/alltoall_perf" --libs "$LIBS" -P 2 -b 1K -e 64M -f 8 -d all -n 5
# Buffer registration: symmetric windows registered in a group by one thread (-g 2) and per
# process under graphs (-P 2 -G 50); ncclCommRegister by the first thread for two threads (-t 2).
run ar-g2-R2     120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 16M -f 4 -R 2
run ag-P2-R2-G50 120 "$B/all_gather_perf" --libs "$LIBS" -P 2 -b 1K -e 4M -f 4 -R 2 -G 50
run rs-t2-R1     120 "$B/reduce_scatter_perf" --libs "$LIBS" -t 2 -b 1K -e 1M -f 8 -R 1
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
