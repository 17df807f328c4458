#!/usr/bin/env bash
# Runs the fidelity program twice, with stock NCCL and with rcclx preloaded in front of it, and
# compares the result lines. Needs 2 GPUs.
#
#   bash gpu-tests/fidelity/run.sh OUTDIR [CASE...]
#
# Environment:
#   RCCLX_LIB        librcclx.so to preload (default .carry/librcclx.so)
#   STOCK_NCCL       the stock libnccl.so.2 (default: nvidia/nccl/lib/libnccl.so.2 of python3's
#                    nvidia.nccl package)
#   FIDELITY_BIN     the program (default .carry/fidelity, else gpu-tests/fidelity/build/fidelity)
#   FIDELITY_RUN_TIMEOUT_S  bound on each of the two runs (default 3600)
#   FIDELITY_CASE_TIMEOUT_S, FIDELITY_SLOW_MS, FIDELITY_LEAK_CYCLES: passed to the program
#
# Writes OUTDIR/fidelity-stock.log and OUTDIR/fidelity-rcclx.log (stdout of each run),
# OUTDIR/fidelity-{stock,rcclx}.stderr, and OUTDIR/fidelity-diff.txt (the differences and the
# failing lines). The compared lines are those starting with "CASE " (the program prints only
# "CASE" and "#" lines; anything else on stdout comes from the libraries, e.g. NCCL_DEBUG).
# Exit status 0 only if both runs printed identical CASE lines, none of them has ok=0, TIMEOUT
# or FAILED, both runs exited with status 0, and the rcclx run took rcclx's own routes.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
if [ $# -lt 1 ]; then
  echo "usage: bash gpu-tests/fidelity/run.sh OUTDIR [CASE...]" >&2
  exit 2
fi
OUT="$1"
shift
mkdir -p "$OUT" || exit 2

RCCLX_LIB="${RCCLX_LIB:-$REPO/.carry/librcclx.so}"
if [ -z "${STOCK_NCCL:-}" ]; then
  STOCK_NCCL="$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)"
fi
if [ -z "${FIDELITY_BIN:-}" ]; then
  FIDELITY_BIN="$REPO/.carry/fidelity"
  [ -x "$FIDELITY_BIN" ] || FIDELITY_BIN="$HERE/build/fidelity"
fi
for f in "$RCCLX_LIB" "$STOCK_NCCL" "$FIDELITY_BIN"; do
  if [ -z "$f" ] || [ ! -f "$f" ]; then
    echo "run.sh: not found: '${f}' (set RCCLX_LIB, STOCK_NCCL or FIDELITY_BIN; build with gpu-tests/fidelity/build.sh)" >&2
    exit 2
  fi
done
RCCLX_LIB="$(cd "$(dirname "$RCCLX_LIB")" && pwd)/$(basename "$RCCLX_LIB")"
STOCK_NCCL="$(cd "$(dirname "$STOCK_NCCL")" && pwd)/$(basename "$STOCK_NCCL")"
LIMIT="${FIDELITY_RUN_TIMEOUT_S:-3600}"

# Multicast/NVLS off everywhere (the GPUs are lent without it).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The program is linked against libnccl.so.2 without an rpath: the stock one is found here.
export LD_LIBRARY_PATH="$(dirname "$STOCK_NCCL")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "run.sh: $FIDELITY_BIN; stock $STOCK_NCCL; rcclx $RCCLX_LIB; outputs in $OUT"
# `env` puts LD_PRELOAD on the program only, not on `timeout`.
timeout -k 30 "$LIMIT" "$FIDELITY_BIN" "$@" >"$OUT/fidelity-stock.log" 2>"$OUT/fidelity-stock.stderr"
RC_STOCK=$?
timeout -k 30 "$LIMIT" env LD_PRELOAD="$RCCLX_LIB" RCCLX_UPSTREAM_LIB="$STOCK_NCCL" "$FIDELITY_BIN" "$@" \
  >"$OUT/fidelity-rcclx.log" 2>"$OUT/fidelity-rcclx.stderr"
RC_RCCLX=$?

grep '^CASE ' "$OUT/fidelity-stock.log" >"$OUT/fidelity-stock.cases"
grep '^CASE ' "$OUT/fidelity-rcclx.log" >"$OUT/fidelity-rcclx.cases"
DIFF="$OUT/fidelity-diff.txt"
diff -u --label stock --label rcclx "$OUT/fidelity-stock.cases" "$OUT/fidelity-rcclx.cases" >"$DIFF"
DIFF_RC=$?
NDIFF=$(grep -c '^[-+][^-+]' "$DIFF")
BAD_RE='(^CASE .* ok=0$)|(^CASE [^ ]+ TIMEOUT)|(^CASE [^ ]+ FAILED)'
BAD_STOCK=$(grep -cE "$BAD_RE" "$OUT/fidelity-stock.cases")
BAD_RCCLX=$(grep -cE "$BAD_RE" "$OUT/fidelity-rcclx.cases")
{
  echo "# failing CASE lines of the stock run ($BAD_STOCK):"
  grep -E "$BAD_RE" "$OUT/fidelity-stock.cases"
  echo "# failing CASE lines of the rcclx run ($BAD_RCCLX):"
  grep -E "$BAD_RE" "$OUT/fidelity-rcclx.cases"
  echo "# exit status: stock $RC_STOCK, rcclx $RC_RCCLX (124: the run's time limit expired)"
} >>"$DIFF"
# Leaks: rcclx's RSS growth over the create/destroy cycles may exceed the stock library's own by
# at most 4 MiB (device memory and file descriptors are judged absolutely, in the CASE line).
RSS_STOCK=$(sed -n 's/^# leaks rss_max=//p' "$OUT/fidelity-stock.log" | head -n 1)
RSS_RCCLX=$(sed -n 's/^# leaks rss_max=//p' "$OUT/fidelity-rcclx.log" | head -n 1)
RSS_OK=1
if [ -n "$RSS_STOCK" ] && [ -n "$RSS_RCCLX" ]; then
  [ "$RSS_RCCLX" -le $((RSS_STOCK + 4 * 1024 * 1024)) ] || RSS_OK=0
  echo "# leaks: RSS growth stock $RSS_STOCK B, rcclx $RSS_RCCLX B (allowed: stock + 4 MiB): ok=$RSS_OK" >>"$DIFF"
fi
# The rcclx run must have taken rcclx's own routes (a run in which everything forwarded would
# compare the stock library with itself): route lines with calls on a `<collective>.<algorithm>`.
OWN=$(grep -E '^# .* routes:' "$OUT/fidelity-rcclx.log" | grep -cE ' [a-z]+\.[a-z0-9_]+=[1-9]')
OWN_OK=1
[ "$OWN" -gt 0 ] || OWN_OK=0
echo "# rcclx's own routes: $OWN route lines with calls on them: ok=$OWN_OK" >>"$DIFF"
# Per case: every rank's calls took the routes its case states (ROUTES lines of the rcclx run,
# fidelity.cu's kCases): none may fail, and the cases that state routes must have printed them.
NROUTES=$(grep -c '^ROUTES ' "$OUT/fidelity-rcclx.log")
BAD_ROUTES=$(grep -c '^ROUTES .* ok=0$' "$OUT/fidelity-rcclx.log")
ROUTES_OK=1
{ [ "$NROUTES" -gt 0 ] && [ "$BAD_ROUTES" -eq 0 ]; } || ROUTES_OK=0
{
  echo "# routes per case: $NROUTES ROUTES lines, $BAD_ROUTES not as expected: ok=$ROUTES_OK"
  grep '^ROUTES .* ok=0$' "$OUT/fidelity-rcclx.log"
} >>"$DIFF"
NCASES=$(wc -l <"$OUT/fidelity-stock.cases")
rm -f "$OUT/fidelity-stock.cases" "$OUT/fidelity-rcclx.cases"

if [ "$DIFF_RC" -eq 0 ] && [ "$BAD_STOCK" -eq 0 ] && [ "$BAD_RCCLX" -eq 0 ] && [ "$RC_STOCK" -eq 0 ] \
  && [ "$RC_RCCLX" -eq 0 ] && [ "$NCASES" -gt 0 ] && [ "$RSS_OK" -eq 1 ] && [ "$OWN_OK" -eq 1 ] \
  && [ "$ROUTES_OK" -eq 1 ]; then
  echo "fidelity: PASS ($NCASES CASE lines identical, none failing)"
  exit 0
fi
echo "fidelity: FAIL ($NDIFF differing lines; failing lines: stock $BAD_STOCK, rcclx $BAD_RCCLX; rss ok $RSS_OK; own routes ok $OWN_OK;" \
  "routes per case ok $ROUTES_OK ($BAD_ROUTES wrong);" \
  "exit status: stock $RC_STOCK, rcclx $RC_RCCLX) -- see $DIFF"
exit 1
