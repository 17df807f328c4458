#!/usr/bin/env python3
"""Side-by-side benchmark summary: stock time / library time per size, over repeated cycles.

Reads the JSON files of `rccl-tests-compat *_perf --libs stock=...,rcclx=...[,variant=...]
-N CYCLES -J F` (one row per size and cycle). For each size, layout (out of place / in place)
and library other than `stock`, it reports the ratio of the median times over the cycles and
the lowest single-cycle ratio, and per file how many single measurements of each library took
more than STALL x that library's median ("stalls": a 20-iteration sample that includes one
slow iteration). A stall hitting every library alike points at the machine, one hitting only
rcclx at rcclx. With --versus NAME it also reports, for every other library, its median time
over NAME's (< 1: faster than NAME), e.g. the INT8 codec against FP8 in one run.

usage: bench/ratios.py FILE.json... [--min-bytes B] [--stall 1.3] [--versus NAME]
"""
import argparse
import json
import os
import statistics
from collections import defaultdict

LAYOUTS = ("out_of_place", "in_place")


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024


def summarize(path, min_bytes, stall, versus):
    with open(path) as f:
        d = json.load(f)
    results = [r for r in d["results"] if r["size"] >= min_bytes]
    libs = list(results[0]["per_library"]) if results else []
    others = [lib for lib in libs if lib != "stock"]
    times = defaultdict(lambda: defaultdict(list))  # size -> (lib, layout) -> [us]
    for r in results:
        for lib in libs:
            for lay in LAYOUTS:
                times[r["size"]][(lib, lay)].append(r["per_library"][lib][lay]["time"])
    rivals = [lib for lib in others if versus in libs and lib != versus]
    rows, vrows, stalls, samples = [], [], {lib: 0 for lib in libs}, 0
    for size in sorted(times):
        t = times[size]
        row = [human(size)]
        vrow = [human(size)]
        for lib in rivals:
            for lay in LAYOUTS:
                vrow.append(f"{statistics.median(t[(lib, lay)]) / statistics.median(t[(versus, lay)]):.3f}")
        vrows.append(vrow)
        for lib in others:
            for lay in LAYOUTS:
                s, x = t[("stock", lay)], t[(lib, lay)]
                med = statistics.median(s) / statistics.median(x)
                low = min(a / b for a, b in zip(s, x))
                row.append(f"{med:.2f} ({low:.2f})")
        for lib in libs:
            for lay in LAYOUTS:
                v = t[(lib, lay)]
                m = statistics.median(v)
                stalls[lib] += sum(1 for y in v if y > stall * m)
        samples += 2 * len(t[("stock", LAYOUTS[0])])
        rows.append(row)
    return others, rows, stalls, samples, rivals, vrows


def print_table(head, rows):
    print("| size | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--min-bytes", type=int, default=0)
    ap.add_argument("--stall", type=float, default=1.3)
    ap.add_argument("--versus", help="also report every other library's median time over this one's")
    a = ap.parse_args()
    total, n = defaultdict(int), 0
    for path in a.files:
        others, rows, stalls, samples, rivals, vrows = summarize(path, a.min_bytes, a.stall, a.versus)
        n += samples
        for k, v in stalls.items():
            total[k] += v
        print(f"\n### {os.path.basename(path)}\n")
        head = [f"{lib} {lay}: median (lowest)" for lib in others for lay in ("out of place", "in place")]
        print_table(head, rows)
        if rivals:
            print()
            print_table([f"{lib} / {a.versus} {lay}: median time" for lib in rivals for lay in ("out of place", "in place")], vrows)
        counts = ", ".join(f"{lib} {v}" for lib, v in stalls.items())
        print(f"\nstalls (> {a.stall}x the library's median): {counts} of {samples} samples each")
    counts = ", ".join(f"{lib} {v}" for lib, v in total.items())
    print(f"\n**All files: stalls {counts} of {n} samples each.**")


if __name__ == "__main__":
    main()
