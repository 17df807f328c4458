#!/usr/bin/env bash
# NVTX ranges of a GPU run, seen through NVTX's injection interface (what Nsight Systems uses):
#
#   bash scripts/nvtx-check.sh OUT -- COMMAND [ARGS...]
#
# Builds tests/c/nvtx_record.c (a recording injection library) into OUT/, runs COMMAND with
# NVTX_INJECTION64_PATH=OUT/libnvtx_record.so and NVTX_RECORD_DIR=OUT (one OUT/nvtx.<pid>.log
# per process: every NVTX instance's domains, pushes and pops, with the library that made each),
# then prints per process the ranges by library and name. It fails (exit 1) when COMMAND fails,
# when no range came from rcclx, when a process's pushes and pops do not pair up, when one of
# rcclx's ranges is not domain NCCL, a collective's name and NCCL's payload (the payload
# extension's, decoded through its schema, with a non-zero size), or when rcclx registered a
# schema or enum that the stock library registered differently in the same process. rcclx's
# ranges are those made by an object whose file name matches NVTX_CHECK_FROM (a Python regular
# expression; default `rcclx|^ranks$`: librcclx.so, or gpu-tests' `ranks`, which links rcclx in).
#
# Example (1 H200, several ranks on it; rcclx runs the collectives):
#   bash scripts/nvtx-check.sh /tmp/nvtx -- .carry/ranks --nranks 4 --gpus 1 --suite dda --quick
set -euo pipefail

if [ $# -lt 3 ] || [ "$2" != "--" ]; then
  echo "usage: bash scripts/nvtx-check.sh OUT -- COMMAND [ARGS...]" >&2
  exit 2
fi
OUT="$1"
shift 2
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT"
rm -f "$OUT"/nvtx.*.log
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -O1 -shared -fPIC "$REPO/tests/c/nvtx_record.c" \
  -ldl -lpthread -o "$OUT/libnvtx_record.so"

rc=0
NVTX_INJECTION64_PATH="$OUT/libnvtx_record.so" NVTX_RECORD_DIR="$OUT" "$@" || rc=$?
echo "nvtx-check: command exit status $rc"

python3 - "$OUT" "$rc" "${NVTX_CHECK_FROM:-rcclx|^ranks\$}" <<'PY'
import collections, glob, os, re, sys
out, rc, mine = sys.argv[1], int(sys.argv[2]), re.compile(sys.argv[3])
names = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclBroadcast", "ncclReduce"}
bad, rcclx_ranges = [], 0
for path in sorted(glob.glob(os.path.join(out, "nvtx.*.log"))):
    pushes, pops = collections.Counter(), collections.Counter()
    registered = collections.defaultdict(set)  # "schema NCCL 5" / "enum NCCL 20" -> {(mine, text)}
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"(schema|enum) (\S+) (\d+) (.*) from=(\S+)$", line)
        if m:
            registered[m.group(1, 2, 3)].add((bool(mine.search(m.group(5))), m.group(4)))
            continue
        m = re.match(r"push (\S+) (\S+) payloadType=(\S+) payload=(.*) from=(\S+)$", line)
        if m:
            dom, name, ptype, payload, lib = m.groups()
            pushes[(lib, dom, name)] += 1
            if mine.search(lib):
                rcclx_ranges += 1
                size = re.match(r"\d+\{NCCL communicator ID=\d+,Message size \[bytes\]=(\d+)", payload)
                if dom != "NCCL" or name not in names or ptype != "ext" or not size or size.group(1) == "0":
                    bad.append(f"{path}: rcclx range {line.strip()}")
            continue
        m = re.match(r"pop (\S+) from=(\S+)", line)
        if m:
            pops[(m.group(2), m.group(1))] += 1
    for key, texts in sorted(registered.items()):
        if len({t for _, t in texts}) > 1 and {m for m, _ in texts} == {True, False}:
            bad.append(f"{path}: {' '.join(key)} differs between rcclx and the stock library: {sorted(texts)}")
    print(f"{os.path.basename(path)}:")
    for (lib, dom, name), n in sorted(pushes.items()):
        print(f"  {n:8d}  {lib:16s} {dom} {name}")
    for lib, dom in {(l, d) for l, d, _ in pushes} | set(pops):
        n_push = sum(n for (l, d, _), n in pushes.items() if (l, d) == (lib, dom))
        if n_push != pops[(lib, dom)]:
            bad.append(f"{path}: {lib} {dom}: {n_push} pushes, {pops[(lib, dom)]} pops")
if rcclx_ranges == 0:
    bad.append("no range from rcclx (no collective ran on rcclx's kernels, or no NVTX)")
if rc != 0:
    bad.append(f"the command failed (exit status {rc})")
for b in bad:
    print("FAIL:", b)
print(f"nvtx-check: {rcclx_ranges} ranges from rcclx; " + ("PASS" if not bad else "FAIL"))
sys.exit(1 if bad else 0)
PY
