#!/usr/bin/env python3
"""Judge the `hosts` step of scripts/gpu-tests.sh (issue 47: collectives across simulated hosts).

Reads OUT/summary.txt (every hosts-* run's exit status), OUT/hosts/hosts-error-*.json
(tests/gpu/hosts_error.py), OUT/hosts/train/*.json (bench/train_e2e.py) and OUT/hosts/perf-*.json
(all_reduce_perf, reduce_scatter_perf), and writes markdown. Correctness fails the summary:

- every rcclx_check, graph, split-fault and torch run exited 0;
- error: per codec, the relative L2 error across hosts (2x2) is at most ERROR_BOUND (1.25) x the
  error of the same codec on one host of the same 4 ranks, for every input type and
  distribution; every rank holds the same bits; zeros stay zero, a NaN stays in its element,
  a block of 1e30 stays finite; the across-hosts runs took `allreduce.hier_*`;
- train: the low-precision run's loss differs from stock's by at most LOSS_BOUND (1e-3)
  relative at every step, and its low-precision calls ran.

The speed rows (AllReduce 64 MiB per rank at 2x2 under MPS: FP8 and INT8 against the exact
hierarchy, and against stock; ReduceScatter: FP8 and INT8 against stock) are reported with the issue's goals (1.6x bf16 / 2.5x float over
the exact hierarchy, 3x stock), not judged: one GPU's loopback is not a network.

The last line says PASS or FAIL; exit status 1 on FAIL.

  python3 bench/hosts_summary.py OUT --out OUT/hosts/summary.md --mps 1
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

ERROR_BOUND = 1.25
LOSS_BOUND = 1e-3
GOAL_SIZE = 64 << 20
GOALS = {"bfloat16": 1.6, "float": 2.5}
STOCK_GOAL = 3.0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs(out):
    """(name, rc, tail) of every hosts-* line of OUT/summary.txt."""
    rows = []
    try:
        text = open(os.path.join(out, "summary.txt")).read()
    except OSError:
        return rows
    for line in text.splitlines():
        m = re.match(r"(hosts-\S+)\s+rc=(\S+)\s+\S+\s*(.*)", line)
        if m and m.group(1) != "hosts-summary":
            rows.append((m.group(1), m.group(2), m.group(3)))
        elif re.match(r"hosts-\S+\s+skipped", line):
            rows.append((line.split()[0], "skipped", ""))
    return rows


def error_rows(hosts):
    lines, failed = [], False
    stock = load(os.path.join(hosts, "hosts-error-stock.json"))
    for codec in ("fp8", "int8"):
        across = load(os.path.join(hosts, f"hosts-error-rcclx-{codec}.json"))
        one = load(os.path.join(hosts, f"hosts-error-rcclx-{codec}-1host.json"))
        if not across or not one:
            lines.append(f"| {codec} | - | - | - | - | FAIL: no result |")
            failed = True
            continue
        routes = across.get("routes") or {}
        took = sum(v for k, v in routes.items() if k.startswith("allreduce.hier_"))
        for r, o in zip(across["rows"], one["rows"]):
            s = next((x for x in (stock or {}).get("rows", []) if x["dtype"] == r["dtype"] and x["inputs"] == r["inputs"]), None)
            ratio = r["rel_l2_error"] / o["rel_l2_error"] if o["rel_l2_error"] > 0 else float("inf")
            ok = ratio <= ERROR_BOUND and r["identical_on_every_rank"] and took > 0
            failed |= not ok
            stock_err = f"{s['rel_l2_error']:.3%}" if s else "-"
            lines.append(f"| {codec} | {r['dtype']} {r['inputs']} | {r['rel_l2_error']:.3%} | {o['rel_l2_error']:.3%} | "
                         f"{stock_err} | {ratio:.2f} {'PASS' if ok else 'FAIL'} |")
        if not all(across["special"].values()):
            failed = True
            lines.append(f"| {codec} | special blocks | {across['special']} | | | FAIL |")
    head = ["| codec | inputs | error across hosts (2x2) | one host of 4 | stock | ratio (<= 1.25) |", "|---|---|---|---|---|---|"]
    return head + lines, failed


def train_rows(hosts):
    files = {r.get("label"): r for r in map(load, glob.glob(os.path.join(hosts, "train", "*.json"))) if r}
    stock, lowp = files.get("stock"), files.get("rcclx-lowp")
    if not stock or not lowp:
        return ["train: FAIL (no result)"], True

    def losses(r):
        return [float(s["loss"]) for s in r.get("steps") or []]

    a, b = losses(stock), losses(lowp)
    if not a or len(a) != len(b):
        return [f"train: FAIL (losses: stock {len(a)}, rcclx {len(b)})"], True
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    calls = (lowp.get("rcclx") or {}).get("lowp_calls", 0)
    ok = worst <= LOSS_BOUND and calls > 0
    return [f"train (DDP, 2x2, INT8 across hosts, 20 steps): largest relative loss difference {worst:.2e} "
            f"(bound {LOSS_BOUND:g}), final loss stock {a[-1]:.6f} rcclx {b[-1]:.6f}, low-precision calls {calls}: "
            f"{'PASS' if ok else 'FAIL'}"], not ok


def times(path):
    """{(library, size): median out-of-place time in us} of one *_perf JSON, None if absent."""
    d = load(path)
    if not d:
        return None
    t = {}
    for r in d["results"]:
        for lib, v in r["per_library"].items():
            t.setdefault((lib, r["size"]), []).append(v["out_of_place"]["time"])
    return {k: statistics.median(v) for k, v in t.items()}


def rs_perf_rows(hosts, coll="rs"):
    """ReduceScatter (``coll`` "rs") or AllGather ("ag") at 2x2: stock against FP8 and INT8
    across hosts (each run has both)."""
    lines = ["| type | size | stock ms | FP8 ms | INT8 ms | FP8 / stock | INT8 / stock |", "|---|---|---|---|---|---|---|"]
    for d in ("bfloat16", "float"):
        f8, i8 = (times(os.path.join(hosts, f"perf-{coll}-{k}-{d}.json")) for k in ("fp8", "int8"))
        if not f8 or not i8:
            lines.append(f"| {d} | - | no result |")
            continue
        for size in sorted({s for (_, s) in f8}):
            st, f, i = f8.get(("stock", size)), f8.get(("rcclx", size)), i8.get(("rcclx", size))
            if st and f and i:
                lines.append(f"| {d} | {size >> 20} MiB | {st / 1e3:.2f} | {f / 1e3:.2f} | {i / 1e3:.2f} | "
                             f"{st / f:.2f}x | {st / i:.2f}x |")
    return lines


def perf_rows(hosts):
    lines = ["| type | size | stock ms | exact ms | FP8 ms | INT8 ms | FP8 / exact | INT8 / exact | FP8 / stock | "
             "INT8 / stock | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in ("bfloat16", "float"):
        ex, f8, i8 = (times(os.path.join(hosts, f"perf-{k}-{d}.json")) for k in ("exact", "fp8", "int8"))
        if not ex or not f8:
            lines.append(f"| {d} | - | no result |")
            continue
        for size in sorted({s for (_, s) in ex}):
            st, e, f = ex.get(("stock", size)), ex.get(("rcclx", size)), f8.get(("rcclx", size))
            i = i8.get(("rcclx", size)) if i8 else None
            if not (st and e and f):
                continue
            goal = ""
            if size == GOAL_SIZE:
                def verdict(t):
                    return "met" if t and e / t >= GOALS[d] and st / t >= STOCK_GOAL else "not met"
                goal = f"{GOALS[d]}x exact, {STOCK_GOAL}x stock: FP8 {verdict(f)}, INT8 {verdict(i)}"
            nan = float("nan")
            lines.append(f"| {d} | {size >> 20} MiB | {st / 1e3:.2f} | {e / 1e3:.2f} | {f / 1e3:.2f} | "
                         f"{i / 1e3 if i else nan:.2f} | {e / f:.2f}x | {(e / i) if i else nan:.2f}x | "
                         f"{st / f:.2f}x | {(st / i) if i else nan:.2f}x | {goal} |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the GPU run's OUT folder")
    ap.add_argument("--out", dest="md", help="write the markdown here too")
    ap.add_argument("--mps", default="?")
    args = ap.parse_args(argv)
    hosts = os.path.join(args.out, "hosts")
    lines = [f"# Collectives across simulated hosts (MPS={args.mps})", "", "| run | rc | last line |", "|---|---|---|"]
    failed = False
    rs = runs(args.out)
    for name, rc, tail in rs:
        failed |= rc != "0"
        lines.append(f"| {name} | {rc} | {tail} |")
    if not rs:
        failed = True
        lines.append("| (no hosts-* run) | - | |")
    e, ef = error_rows(hosts)
    t, tf = train_rows(hosts)
    lines += ["", "## Error of the codecs across hosts", ""] + e + ["", "## Training", ""] + t
    lines += ["", "## AllReduce at 2x2 (median, out of place)", ""] + perf_rows(hosts)
    lines += ["", "## ReduceScatter at 2x2 (median, out of place; size: the input per rank)", ""] + rs_perf_rows(hosts)
    lines += ["", "## AllGather at 2x2 (median, out of place; size: the output per rank)", ""] + rs_perf_rows(hosts, "ag")
    failed |= ef or tf
    n = len(rs)
    lines += ["", f"{'FAIL' if failed else 'PASS'}: {n} runs, error and training {'out of' if ef or tf else 'within'} bounds"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.md:
        os.makedirs(os.path.dirname(args.md), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
