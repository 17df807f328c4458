#!/usr/bin/env python3
"""Markdown table of an end-to-end run (bench/e2e/run.sh OUTDIR): stock NCCL vs rcclx.

Reads the RESULT lines of OUTDIR/stock*.log, rcclx*.log (not rcclx-lowp) and rcclx-lowp*.log
written by tp_model.py, takes the median over repeats (REPEATS in run.sh), and prints a
markdown table: time per token (decode) or per prefill, and how much less time rcclx takes
(% less = (stock - rcclx) / stock x 100; positive: rcclx faster). Also lists the --check result
and each run's exit status (OUTDIR/status.txt).

Usage: python3 bench/e2e/summarize.py OUTDIR > OUTDIR/summary.md
"""
import glob
import os
import re
import statistics
import sys

RESULT = re.compile(r"^RESULT (decode|prefill) (.*)$")


def parse(path):
    """{("decode", batch) or ("prefill", tokens): ms}, plus the INFO lines."""
    out, info = {}, []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            m = RESULT.match(line)
            if m:
                kv = dict(x.split("=", 1) for x in m.group(2).split() if "=" in x)
                if m.group(1) == "decode":
                    out[("decode", int(kv["batch"]))] = float(kv["ms_per_token"])
                else:
                    out[("prefill", int(kv["tokens"]))] = float(kv["ms_per_prefill"])
            elif line.startswith("INFO ") and line not in info:
                info.append(line)
    return out, info


def collect(outdir, pattern, exclude=None):
    per_key, info = {}, []
    for path in sorted(glob.glob(os.path.join(outdir, pattern))):
        if exclude and exclude in os.path.basename(path):
            continue
        res, inf = parse(path)
        info += [i for i in inf if i not in info]
        for k, v in res.items():
            per_key.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in per_key.items()}, {k: len(v) for k, v in per_key.items()}, info


def less(stock, other):
    if stock is None or other is None or stock <= 0:
        return ""
    return f"{(stock - other) / stock * 100:+.1f} %"


def fmt(v):
    return "" if v is None else f"{v:.3f}"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = sys.argv[1]
    stock, n_stock, info_s = collect(outdir, "stock*.log")
    rcclx, n_rcclx, info_r = collect(outdir, "rcclx*.log", exclude="lowp")
    lowp, n_lowp, _ = collect(outdir, "rcclx-lowp*.log")
    keys = sorted(set(stock) | set(rcclx) | set(lowp), key=lambda k: (k[0] != "decode", k[1]))
    tps = sorted({m.group(1) for i in info_s + info_r for m in [re.search(r" tp=(\d+)", i)] if m})
    print(f"# End to end: TP={'/'.join(tps) or '?'} Llama-3-8B-shaped model, stock NCCL vs rcclx\n")
    print("`bench/e2e/tp_model.py` run by `bench/e2e/run.sh`; times are the maximum over the ranks, "
          "median over repeats. **% less** = (stock - rcclx) / stock: positive means rcclx takes less "
          "time. Decode: one token per sequence per step, the whole step replayed from a CUDA graph. "
          "Prefill: one sequence, eager. FP8: `RCCL_LOW_PRECISION_ENABLE=1` (prefill only).\n")
    if not keys:
        print("No RESULT lines found (see the logs and status.txt).\n")
    else:
        print("| measurement | stock | rcclx | % less (rcclx) | rcclx FP8 | % less (FP8) |")
        print("|---|---:|---:|---:|---:|---:|")
        for k in keys:
            name = f"decode batch {k[1]} (ms/token)" if k[0] == "decode" else f"prefill {k[1]} tokens (ms)"
            s, r, lp = stock.get(k), rcclx.get(k), lowp.get(k)
            print(f"| {name} | {fmt(s)} | {fmt(r)} | {less(s, r)} | {fmt(lp)} | {less(s, lp)} |")
        reps = sorted(set(n_stock.values()) | set(n_rcclx.values()) | set(n_lowp.values()))
        print(f"\nRepeats per number: {', '.join(map(str, reps))}.\n")
    for path in sorted(glob.glob(os.path.join(outdir, "check*.log"))):
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.startswith("CHECK ")]
        verdict = [ln for ln in lines if ln.startswith(("CHECK PASS", "CHECK FAIL"))]
        print(f"`{os.path.basename(path)}`: {verdict[-1] if verdict else 'no verdict (see the log)'}\n")
    info = [i for i in info_s + info_r
            if i.startswith(("INFO torch", "INFO config", "INFO libraries mapped", "INFO rcclx routes"))]
    if info:
        print("```")
        seen = set()
        for i in info:
            if i not in seen:
                print(i)
                seen.add(i)
        print("```\n")
    status = os.path.join(outdir, "status.txt")
    if os.path.exists(status):
        print("Exit status of each run (124: timeout):\n")
        print("```")
        with open(status) as f:
            print(f.read().rstrip())
        print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
