#!/usr/bin/env python3
"""Summary of a one-GPU proxy run (`ranks --suite bench`; scripts/gpu-tests.sh step bench1).

    python3 bench/proxy_report.py bench1-n2.csv > bench1-n2.md

Reads the CSV the step gathers (columns: gpu-tests/src/bin/ranks/bench.rs `COLUMNS`) and prints
Markdown: per family and size the per-call time back to back and in graph replays with its traffic
twin's and T_kernel / T_twin; the window sweep's cost per window (least-squares slope of the time
against the number of windows, at fixed message size, over the staging sizes); the flag round trip
and the fence under load. All ranks share one GPU: the times are not NVLink times (see the
proxy's caveats in docs/RESULTS.md).
"""
import csv
import sys
from collections import defaultdict


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def size(b):
    b = int(b)
    if b >= 1 << 20:
        return f"{b >> 20} MiB"
    if b >= 1 << 10:
        return f"{b >> 10} KiB"
    return f"{b} B"


def slope(points):
    """Least-squares (slope, intercept) of y against x; None with fewer than 2 distinct x."""
    xs = [p[0] for p in points]
    if len(set(xs)) < 2:
        return None
    n = len(points)
    mx = sum(xs) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    k = sxy / sxx
    return k, my - k * mx


def families(rows):
    out = ["## Families: per-call time (us), kernel / traffic twin", "",
           "| family | size | blocks | windows | eager | twin | eager/twin | graph | twin | graph/twin | check |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    by = defaultdict(dict)
    for r in rows:
        by[(r["family"], int(r["bytes"]))][r["mode"]] = r
    for (fam, b), modes in sorted(by.items()):
        e, g = modes.get("eager", {}), modes.get("graph", {})
        any_row = e or g
        checks = {m.get("check", "") for m in (e, g) if m}
        out.append(f"| {fam} | {size(b)} | {any_row.get('blocks', '')} | {any_row.get('windows', '')} | "
                   f"{e.get('us_per_call', '')} | {e.get('twin_us', '')} | {e.get('kernel_over_twin', '')} | "
                   f"{g.get('us_per_call', '')} | {g.get('twin_us', '')} | {g.get('kernel_over_twin', '')} | "
                   f"{'/'.join(sorted(checks))} |")
    return out


def ll128(rows):
    """LL128 beside LL and flat, per collective and size (issue 39: LL128 faster than both between
    256 KiB and 4 MiB); empty when the run timed no LL128 family."""
    times = {(r["coll"], r["algo"], int(r["bytes"]), r["mode"]): num(r["us_per_call"]) for r in rows}
    colls = sorted({c for (c, a, _, _) in times if a == "ll128"})
    if not colls:
        return []
    out = ["## LL128 against LL and flat (us per call; ratio < 1: LL128 faster)", "",
           "| collective | size | mode | ll | ll128 | flat | ll128/ll | ll128/flat |",
           "|---|---|---|---|---|---|---|---|"]

    def ratio(x, y):
        return f"{x / y:.3f}" if x is not None and y else ""

    def show(x):
        return "" if x is None else f"{x:.3f}"

    for c in colls:
        for b in sorted({b for (cc, a, b, _) in times if cc == c and a == "ll128"}):
            for mode in ("eager", "graph"):
                ll, l128, flat = (times.get((c, a, b, mode)) for a in ("ll", "ll128", "flat"))
                if l128 is None:
                    continue
                out.append(f"| {c} | {size(b)} | {mode} | {show(ll)} | {show(l128)} | {show(flat)} | "
                           f"{ratio(l128, ll)} | {ratio(l128, flat)} |")
    return out


def sweep(rows):
    out = ["## Window sweep: cost per window (slope of time against windows, fixed size)", "",
           "| family | size | mode | points (windows: us) | us per window | fixed us | twin us per window |",
           "|---|---|---|---|---|---|---|"]
    by = defaultdict(list)
    for r in rows:
        by[(r["family"], int(r["bytes"]), r["mode"])].append(r)
    for (fam, b, mode), rs in sorted(by.items()):
        pts = sorted((int(r["windows"]), num(r["us_per_call"])) for r in rs if num(r["us_per_call"]) is not None)
        tw = sorted((int(r["windows"]), num(r["twin_us"])) for r in rs if num(r["twin_us"]) is not None)
        fit, tfit = slope(pts), slope(tw)
        shown = ", ".join(f"{w}: {t:.1f}" for w, t in pts)
        out.append(f"| {fam} | {size(b)} | {mode} | {shown} | "
                   f"{'' if fit is None else f'{fit[0]:.2f}'} | {'' if fit is None else f'{fit[1]:.1f}'} | "
                   f"{'' if tfit is None else f'{tfit[0]:.2f}'} |")
    return out


def micro(rows, part, title):
    out = [f"## {title}", "", "| name | us | count | check | details |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['family']} | {r['us_per_call']} | {r['calls']} | {r['check']} | {r['extra']} |")
    return out


def main(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("part") and r["part"] != "part"]
    parts = defaultdict(list)
    for r in rows:
        parts[r["part"]].append(r)
    nranks = sorted({r["nranks"] for r in rows})
    lines = [f"# One-GPU proxy: {path} ({len(rows)} rows, ranks {', '.join(nranks)})", "",
             "All ranks are streams of one process on one GPU: link bandwidth and latency do not transfer to "
             "NVLink; instruction counts, HBM passes, serialized phases and synchronization against the same "
             "traffic do.", ""]
    failed = [r for r in rows if r.get("check") in ("FAILED", "TIMEOUT", "NO-PLAN")]
    if failed:
        lines += [f"**{len(failed)} row(s) failed their check** (see the log).", ""]
    if parts["families"]:
        lines += families(parts["families"]) + [""]
        lines += ll128(parts["families"]) + [""]
    if parts["sweep"]:
        lines += sweep(parts["sweep"]) + [""]
    if parts["flag"]:
        lines += micro(parts["flag"], "flag", "Flag round trip (one release + one acquire each way)") + [""]
    if parts["fence"]:
        lines += micro(parts["fence"], "fence", "Fence under load (us per system-scope release store)") + [""]
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: proxy_report.py TABLE.csv")
    sys.exit(main(sys.argv[1]))
