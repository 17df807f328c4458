#!/usr/bin/env bash
# Quick end-to-end run of the rccl-tests-compat binaries on a 2-GPU machine.
#   STOCK=/path/libnccl.so.2 [RCCLX=/path/librcclx.so] rccl-tests-compat/selftest.sh [outdir]
# Without RCCLX the stock library is compared with itself (tests the harness, not rcclx).
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

n=0
summary=()
run() {  # run NAME SECONDS CMD...
  local name="$1" secs="$2"; shift 2
  n=$((n + 1))
  local log="$OUT/$(printf '%02d' $n)-$name.log"
  echo "== $name: $*" | tee "$log"
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >>"$log" 2>&1
  local rc=$?
  summary+=("$(printf 'rc=%-3d %4ds  %s' $rc $((SECONDS - t0)) "$name")")
  tail -n 25 "$log"
}

run ar-g2        120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 4
run ar-P2        120 "$B/all_reduce_perf" --libs "$LIBS" -P 2 -g 1 -b 1K -e 64M -f 4
run ar-g2-G50    120 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 1K -e 4M -f 4 -G 50
run ar-P2-G50    120 "$B/all_reduce_perf" --libs "$LIBS" -P 2 -b 1K -e 4M -f 4 -G 50
run ar-t2        120 "$B/all_reduce_perf" --libs "$LIBS" -t 2 -b 1K -e 1M -f 8
run ar-all       180 "$B/all_reduce_perf" --libs "$LIBS" -g 2 -b 64 -e 64K -f 32 -d all -o all -n 5
run ag-g2        120 "$B/all_gather_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 8 -d all -n 5
run rs-g2        120 "$B/reduce_scatter_perf" --libs "$LIBS" -g 2 -b 1K -e 64M -f 8 -d all -o all -n 5
run a2a-P2       120 "$B/alltoall_perf" --libs "$LIBS" -P 2 -b 1K -e 64M -f 8 -d all -n 5
run check-g2     300 "$B/rcclx_check" --libs "$LIBS" -g 2 --coll all -d all -o all
run check-P2     300 "$B/rcclx_check" --libs "$LIBS" -P 2 --coll all_reduce,reduce_scatter -d float,bfloat16,int32 -o all
run check-rand   300 "$B/rcclx_check" --libs "$LIBS" -g 2 --coll all -d float -o sum --random-sizes 3000
run check-graph  300 "$B/rcclx_check" --libs "$LIBS" -P 2 --coll all -d float,half -o sum,max --graph --graph-replays 7

echo "== summary ($OUT)"
printf '%s\n' "${summary[@]}"
