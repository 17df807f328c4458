#!/usr/bin/env python3
"""Side-by-side benchmark summary: stock time / rcclx time per size, over repeated cycles.

Reads the JSON files of `rccl-tests-compat *_perf --libs stock=...,rcclx=... -N CYCLES -J F`
(one row per size and cycle). For each size and layout (out of place / in place) it reports the
ratio of the two libraries' median times over the cycles, the lowest single-cycle ratio, and
how many single measurements of each library took more than STALL x that library's median
("stalls": a 20-iteration sample that includes one slow iteration). A stall hitting both
libraries alike points at the machine, one hitting only rcclx at rcclx.

usage: bench/ratios.py FILE.json... [--min-bytes B] [--stall 1.3]
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


def summarize(path, min_bytes, stall):
    with open(path) as f:
        d = json.load(f)
    times = defaultdict(lambda: defaultdict(list))  # size -> (lib, layout) -> [us]
    for r in d["results"]:
        if r["size"] < min_bytes:
            continue
        for lib in ("stock", "rcclx"):
            for lay in LAYOUTS:
                times[r["size"]][(lib, lay)].append(r["per_library"][lib][lay]["time"])
    rows, stalls = [], {"stock": 0, "rcclx": 0}
    samples = 0
    for size in sorted(times):
        t = times[size]
        row = [human(size)]
        for lay in LAYOUTS:
            s, x = t[("stock", lay)], t[("rcclx", lay)]
            med = statistics.median(s) / statistics.median(x)
            low = min(a / b for a, b in zip(s, x))
            row.append(f"{med:.2f} ({low:.2f})")
            for lib, v in (("stock", s), ("rcclx", x)):
                m = statistics.median(v)
                stalls[lib] += sum(1 for y in v if y > stall * m)
            samples += len(s)
        rows.append(row)
    return rows, stalls, samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--min-bytes", type=int, default=0)
    ap.add_argument("--stall", type=float, default=1.3)
    a = ap.parse_args()
    total = {"stock": 0, "rcclx": 0}
    n = 0
    for path in a.files:
        rows, stalls, samples = summarize(path, a.min_bytes, a.stall)
        n += samples
        for k in total:
            total[k] += stalls[k]
        print(f"\n### {os.path.basename(path)}\n")
        print("| size | out of place: median (lowest) | in place: median (lowest) |")
        print("|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print(f"\nstalls (> {a.stall}x the library's median): stock {stalls['stock']}, rcclx {stalls['rcclx']} of {samples} each")
    print(f"\n**All files: stalls stock {total['stock']}, rcclx {total['rcclx']} of {n} samples each.**")


if __name__ == "__main__":
    main()
