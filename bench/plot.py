#!/usr/bin/env python3
"""Plot rccl-tests-compat JSON results: latency, bus bandwidth and speed-up against size.

Reads one or more JSON files written by the rccl-tests-compat benchmarks with ``-J FILE.json``
(``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``; format in
``rccl-tests-compat/README.md``, section "JSON output"). For every (type, op) of a file it draws
one row of three panels, with the message size on a log2 x axis:

  1. latency (us) against size, log-log, one line per library (e.g. stock and rcclx);
  2. bus bandwidth (GB/s) against size, log-log, one line per library;
  3. ratio = time(first library) / time(other library), e.g. stock time / rcclx time
     (> 1: the other library is faster), with the geometric mean in the legend.

Output: one PNG per JSON file, ``<name>.png`` next to the JSON file (or in ``--outdir``). With
``--split`` (automatic above 8 type/op groups), one PNG per collective/type/op instead:
``<name>-<type>-<op>.png``. Repeated sizes (``-N`` cycles) are reduced to their median. Plain
nccl-tests JSON files (no ``per_library``) are drawn as one library.

``--speedup PNG`` draws instead one panel for all the files: the ratio against size, one line
per file (the README's plot). A file can be ``ARCHIVE.tar.gz:MEMBER``, a JSON file inside a
results folder's ``logs.tar.gz``.

Only matplotlib is needed (headless "Agg" backend; no display).

Usage:
  python3 bench/plot.py RESULT.json [MORE.json ...] [--outdir DIR] [--split]
                        [--place out_of_place|in_place|both] [--dpi N] [--title TEXT]

Examples:
  python3 bench/plot.py bench/results/DATE/ar-P2-eager.json          # -> .../ar-P2-eager.png
  python3 bench/plot.py bench/results/DATE/*.json --outdir /tmp/plots --place both
  python3 bench/plot.py --speedup docs/speedup.png R/logs.tar.gz:speed/a.json R/logs.tar.gz:speed/b.json
"""
import argparse
import json
import math
import os
import statistics
import sys
import tarfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

PLACES = ("out_of_place", "in_place")
PLACE_SHORT = {"out_of_place": "oop", "in_place": "ip"}
AUTO_SPLIT_GROUPS = 8


def fmt_bytes(x, _pos=None):
    """1024 -> '1K', 4194304 -> '4M' (binary units, as the benchmark's -b/-e)."""
    if x <= 0:
        return "0"
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if x >= scale:
            v = x / scale
            return f"{v:.0f}{unit}" if abs(v - round(v)) < 1e-9 else f"{v:.3g}{unit}"
    return f"{x:.0f}"


def load(path):
    """The JSON document, with the libraries in order and the time key (time or cpu_time).
    ``ARCHIVE.tar.gz:MEMBER`` reads a file inside a results folder's ``logs.tar.gz``."""
    archive, sep, member = path.partition(".tar.gz:")
    if sep:
        with tarfile.open(archive + ".tar.gz") as tar:
            f = tar.extractfile(member)
            if f is None:
                raise ValueError(f"{member} is not a file in {archive}.tar.gz")
            doc = json.loads(f.read().decode("utf-8"))
    else:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    if not isinstance(doc, dict) or "results" not in doc:
        raise ValueError("no 'results': not a benchmark JSON file")
    libs = [lib["name"] for lib in doc.get("libraries", [])]
    if not libs:  # plain nccl-tests file: one library, the top-level out_of_place/in_place
        libs = ["nccl"]
    return doc, libs


def lib_result(res, lib, first, place):
    """{'time'/'cpu_time', 'alg_bw', 'bus_bw', 'nwrong'} of one library, or None."""
    per = res.get("per_library")
    if per is not None:
        return (per.get(lib) or {}).get(place)
    return res.get(place) if lib == first else None


def time_of(r):
    if not r:
        return None
    t = r.get("time", r.get("cpu_time"))
    return t if isinstance(t, (int, float)) and t > 0 else None


def groups_of(doc):
    """[(type, op)] in the order of first appearance."""
    seen = []
    for res in doc["results"]:
        key = (res.get("type", "?"), res.get("redop", "?"))
        if key not in seen:
            seen.append(key)
    return seen


def series(doc, libs, dtype, op, place):
    """Per library: sorted sizes with median time, busbw and wrong count; ratios vs libs[0]."""
    rows = [r for r in doc["results"] if r.get("type") == dtype and r.get("redop") == op]
    out = {}
    for lib in libs:
        by_size = {}
        for res in rows:
            r = lib_result(res, lib, libs[0], place)
            t = time_of(r)
            if t is None:
                continue
            d = by_size.setdefault(res["size"], {"t": [], "bw": [], "wrong": 0})
            d["t"].append(t)
            d["bw"].append(r.get("bus_bw") or 0.0)
            d["wrong"] += r.get("nwrong") or 0
        sizes = sorted(s for s in by_size if s > 0)
        out[lib] = {
            "size": sizes,
            "time": [statistics.median(by_size[s]["t"]) for s in sizes],
            "busbw": [statistics.median(by_size[s]["bw"]) for s in sizes],
            "wrong": sum(by_size[s]["wrong"] for s in sizes),
        }
    ratios = {}
    base = dict(zip(out[libs[0]]["size"], out[libs[0]]["time"]))
    for lib in libs[1:]:
        pts = [(s, base[s] / t) for s, t in zip(out[lib]["size"], out[lib]["time"]) if s in base]
        ratios[lib] = pts
    return out, ratios


def geomean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def log2_size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4, numticks=40))
    ax.xaxis.set_major_formatter(FuncFormatter(fmt_bytes))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size (bytes)")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def log_y_axis(ax):
    """Log y axis with plain numbers (0.5, 20, 300) instead of 5x10^-1; minor labels when the
    axis spans little more than a decade."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))

    def minor(v, _pos):
        lo, hi = ax.get_ylim()
        if lo <= 0 or v <= 0 or math.log10(hi / lo) > 1.3:
            return ""
        mant = v / 10 ** math.floor(math.log10(v) + 1e-9)
        shown = range(1, 10) if math.log10(hi / lo) < 0.5 else (2, 3, 5)
        return f"{v:g}" if round(mant) in shown and abs(mant - round(mant)) < 1e-6 else ""

    ax.yaxis.set_minor_formatter(FuncFormatter(minor))
    ax.tick_params(axis="y", which="minor", labelsize=7)


def describe(doc):
    """One line about the run: collective, ranks, processes/GPUs, eager or graph."""
    cfg = doc.get("config", {})
    coll = cfg.get("collective") or os.path.basename(str((doc.get("args") or ["?"])[0]))
    bits = [coll]
    if "nranks" in cfg:
        bits.append(f"{cfg['nranks']} ranks")
    layout = []
    if cfg.get("nprocs", 1) > 1:
        layout.append(f"-P {cfg['nprocs']}")
    if cfg.get("nthreads", 1) > 1:
        layout.append(f"-t {cfg['nthreads']}")
    if cfg.get("ngpus", 1) > 1:
        layout.append(f"-g {cfg['ngpus']}")
    if layout:
        bits.append(" ".join(layout))
    bits.append(f"CUDA graph x{cfg['graph']}" if cfg.get("graph") else "eager")
    devs = cfg.get("devices") or []
    if devs:
        bits.append(str(devs[0].get("device_info", "")).strip())
    if doc.get("complete") is False:
        bits.append("INCOMPLETE RUN")
    if doc.get("errors"):
        bits.append(f"{len(doc['errors'])} error(s)")
    return ", ".join(b for b in bits if b)


def draw(doc, libs, groups, places, title, png, dpi):
    nrows = len(groups)
    fig, axes = plt.subplots(nrows, 3, figsize=(17, 4.3 * nrows + 0.8), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = {"out_of_place": "-", "in_place": "--"}
    for row, (dtype, op) in enumerate(groups):
        ax_t, ax_bw, ax_r = axes[row]
        for place in places:
            data, ratios = series(doc, libs, dtype, op, place)
            suffix = f" ({PLACE_SHORT[place]})" if len(places) > 1 else ""
            for i, lib in enumerate(libs):
                d = data[lib]
                if not d["size"]:
                    continue
                label = lib + suffix + (f"  [{d['wrong']} wrong]" if d["wrong"] else "")
                kw = dict(color=colors[i % len(colors)], ls=styles[place], marker="o", ms=3.5, lw=1.6)
                ax_t.plot(d["size"], d["time"], label=label, **kw)
                ax_bw.plot(d["size"], d["busbw"], label=label, **kw)
            for i, lib in enumerate(libs[1:], start=1):
                pts = ratios[lib]
                if not pts:
                    continue
                xs, ys = zip(*pts)
                g = geomean(ys)
                ax_r.plot(xs, ys, color=colors[i % len(colors)], ls=styles[place], marker="o", ms=3.5,
                          lw=1.6, label=f"{libs[0]} / {lib}{suffix}  (geomean {g:.2f}x)")
                for x, y in zip(xs, ys):
                    if len(xs) <= 16 and place == places[0]:
                        ax_r.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 5),
                                      ha="center", fontsize=7, color=colors[i % len(colors)])
        label = f"{dtype} {op}" if op not in ("none", "?") else dtype
        ax_t.set_title(f"{label}: latency")
        ax_t.set_ylabel("time (us)")
        log_y_axis(ax_t)
        log2_size_axis(ax_t)
        ax_bw.set_title(f"{label}: bus bandwidth")
        ax_bw.set_ylabel("busbw (GB/s)")
        log_y_axis(ax_bw)
        log2_size_axis(ax_bw)
        ax_r.set_title(f"{label}: speed-up, time({libs[0]}) / time(other)")
        ax_r.set_ylabel("ratio (> 1: faster than " + libs[0] + ")")
        ax_r.axhline(1.0, color="0.3", lw=1, ls=":")
        log2_size_axis(ax_r)
        lo, hi = ax_r.get_ylim()
        ax_r.set_ylim(min(lo, 0.9), max(hi, 1.1) + 0.05 * (hi - lo))  # room for the labels
        if len(libs) < 2:
            ax_r.cla()
            ax_r.axis("off")
            ax_r.text(0.5, 0.5, "one library: no ratio", transform=ax_r.transAxes, ha="center", va="center")
        for ax in (ax_t, ax_bw, ax_r):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8, loc="best")
    fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (4.3 * nrows + 0.8)))
    fig.savefig(png, dpi=dpi)
    plt.close(fig)


def safe(s):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))


def plot_file(path, outdir, split, places, dpi, title):
    doc, libs = load(path)
    groups = groups_of(doc)
    if not groups:
        print(f"{path}: no results, nothing to plot", file=sys.stderr)
        return []
    stem = os.path.splitext(os.path.basename(path))[0]
    outdir = outdir or os.path.dirname(os.path.abspath(path))
    os.makedirs(outdir, exist_ok=True)
    head = (title or stem) + "\n" + describe(doc)
    if not split and len(groups) > AUTO_SPLIT_GROUPS:
        print(f"{path}: {len(groups)} type/op groups, writing one PNG per group", file=sys.stderr)
        split = True
    written = []
    if split:
        for dtype, op in groups:
            png = os.path.join(outdir, f"{stem}-{safe(dtype)}-{safe(op)}.png")
            draw(doc, libs, [(dtype, op)], places, head, png, dpi)
            written.append(png)
    else:
        png = os.path.join(outdir, stem + ".png")
        draw(doc, libs, groups, places, head, png, dpi)
        written.append(png)
    return written


def plot_speedup(paths, png, dpi, title, place="out_of_place"):
    """One panel for several files: time(first library) / time(second) against size, one line
    per file (its collective, eager or graph, and type), e.g. the README's summary plot."""
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = None
    for i, path in enumerate(paths):
        doc, libs = load(path)
        if len(libs) < 2:
            raise ValueError(f"{path}: one library, no ratio")
        names = names or libs[:2]
        dtype, op = groups_of(doc)[0]
        _, ratios = series(doc, libs[:2], dtype, op, place)
        pts = ratios[libs[1]]
        if not pts:
            continue
        cfg = doc.get("config", {})
        how = "CUDA graph" if cfg.get("graph") else "eager"
        label = f"{cfg.get('collective', '?')}, {dtype}, {how} (geomean {geomean([y for _, y in pts]):.2f}x)"
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", ms=3.5, lw=1.6, color=colors[i % len(colors)], label=label)
    ax.axhline(1.0, color="0.3", lw=1, ls=":")
    log2_size_axis(ax)
    ax.set_ylabel(f"time({names[0]}) / time({names[1]})" if names else "ratio")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.9), hi)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or "speed-up", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=dpi)
    plt.close(fig)
    return png


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring / bench/README.md for details.")
    ap.add_argument("json", nargs="+", help="JSON files written with -J by the *_perf benchmarks")
    ap.add_argument("--outdir", "-o", help="folder for the PNGs (default: next to each JSON file)")
    ap.add_argument("--split", action="store_true", help="one PNG per collective/type/op")
    ap.add_argument("--place", choices=("out_of_place", "in_place", "both"), default="out_of_place",
                    help="which results to draw (default out_of_place; both: in-place dashed)")
    ap.add_argument("--dpi", type=int, default=110)
    ap.add_argument("--title", help="title prefix (default: the JSON file name)")
    ap.add_argument("--speedup", metavar="PNG",
                    help="instead: one plot of every file's speed-up (first library / second) in PNG")
    args = ap.parse_args(argv)
    places = PLACES if args.place == "both" else (args.place,)
    if args.speedup:
        try:
            print(plot_speedup(args.json, args.speedup, args.dpi, args.title, places[0]))
            return 0
        except (OSError, ValueError, KeyError, TypeError, tarfile.TarError) as e:
            print(f"--speedup: {e}", file=sys.stderr)
            return 1
    rc = 0
    for path in args.json:
        try:
            for png in plot_file(path, args.outdir, args.split, places, args.dpi, args.title):
                print(png)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
