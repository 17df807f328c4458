#!/usr/bin/env python3
"""Issue 41's 2-GPU run in one table: the protocols against stock, the issue's targets, proposed
defaults, and the model (bench/model.py) against the measurement.

    python3 bench/x2_summary.py DIR_OR_FILE... [--out x2-summary.md] [--json x2-summary.json]
                                [--margin 0.05]

Inputs: rccl-tests-compat JSON files (``-J``; a folder is searched recursively, a ``.tar.gz`` is
read in place) and ``x2-link.log`` (link_perf's ``LINK`` lines), as ``scripts/gpu-tests.sh``'s
x2 step writes them. Each JSON row has ``per_library`` times; the libraries are named:

    stock    the stock library (every ratio is stock time / the library's time)
    default  rcclx with its defaults (older runs: ``rcclx``)
    window   rcclx, DDA limits raised, RCCLX_PROTO=window (older runs: ``rcclx`` or ``default``
             stands in: the windowed kernels were the only protocol)
    stream   rcclx, DDA limits raised, RCCLX_PROTO=stream (absent in older runs: no stream rows)
    ll128    rcclx, DDA limits raised, RCCLX_LL128_MAX_BYTES=4M (LL128 above the LL sizes up to
             4 MiB where the one-shot would run; absent in older runs)
    fp8/int8 rcclx with RCCL_LOW_PRECISION_ENABLE=1 and that codec (AllReduce of bf16)

Medians are those of ``python -m rcclx tune`` (python/rcclx/tune.py ``select``): per size and
mode, the median over every sample (types, out of place and in place, cycles). Proposed
defaults, per collective: the stream protocol from the smallest size at and above which it is
faster than the windowed kernel and than stock by ``--margin``, eager and graph (up to the largest
size where it is); the DDA limit is then tune's: the largest size up to which that composite is
faster than stock at every size. LL128 gets a column of ratios, no proposal (on one H200 it is
2-5x slower than LL and flat: bench/results/2026-12-02-h200x1-ll128/).
"""
import argparse
import json
import os
import statistics
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
from rcclx import tune  # noqa: E402  (the selection of `python -m rcclx tune`)
import model  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
COLLS = ["all_reduce", "all_gather", "reduce_scatter", "alltoall"]
MODEL_COLL = {"all_reduce": "ar", "all_gather": "ag", "reduce_scatter": "rs"}
LAYOUTS = tune.LAYOUTS
# Forwarding measures 1.00 within noise; below this an intercepting rcclx loses.
FLOOR = 0.98


def human(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB" if n >= KiB else f"{n} B"


# ---- reading ----------------------------------------------------------------------------------

class Row:
    """One result row: collective, mode, type, size, {library: {layout: time}}."""

    def __init__(self, coll, mode, dtype, size, times, nranks, gpu):
        self.coll, self.mode, self.dtype, self.size = coll, mode, dtype, size
        self.times, self.nranks, self.gpu = times, nranks, gpu


def rows_of(doc, name):
    cfg = doc["config"]
    coll = cfg["collective"]
    mode = "graph" if int(cfg.get("graph") or 0) > 0 else "eager"
    gpus = {d.get("device_info") for d in cfg.get("devices", [])}
    gpu = gpus.pop() if len(gpus) == 1 else None
    out = []
    for r in doc.get("results", []):
        per = r.get("per_library") or {}
        if "stock" not in per:
            continue
        times = {}
        for lib, lay in per.items():
            # Older runs call rcclx with its defaults `rcclx`.
            lib = "default" if lib == "rcclx" else lib
            times[lib] = {k: lay[k]["time"] for k in LAYOUTS if k in lay and lay[k]["time"] > 0}
        out.append(Row(coll, mode, r["type"], int(r["size"]), times, int(cfg["nranks"]), gpu))
    return out


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def load(paths):
    """(rows, link text, file names read)."""
    rows, link, names = [], "", []

    def take(name, read):
        nonlocal link
        base = os.path.basename(name)
        if base.endswith(".json"):
            try:
                doc = json.loads(read())
            except ValueError:
                return
            if isinstance(doc, dict) and "config" in doc and "results" in doc:
                got = rows_of(doc, name)
                if got:
                    rows.extend(got)
                    names.append(name)
        elif base.endswith(".log") and "link" in base:
            text = read().decode("utf-8", "replace")
            if "LINK " in text:
                link += text
                names.append(name)

    for p in paths:
        if p.endswith(".tar.gz"):
            with tarfile.open(p) as t:
                for m in t.getmembers():
                    if m.isfile():
                        take(f"{p}:{m.name}", lambda m=m: t.extractfile(m).read())
        elif os.path.isdir(p):
            for d, _, files in sorted(os.walk(p)):
                for f in sorted(files):
                    full = os.path.join(d, f)
                    take(full, lambda full=full: read_file(full))
        else:
            take(p, lambda p=p: read_file(p))
    return rows, link, names


def parse_link(text):
    """link_perf's LINK lines -> list of {key: value} (numbers as float where they are)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("LINK "):
            continue
        d = {}
        for kv in line.split()[1:]:
            k, _, v = kv.partition("=")
            try:
                d[k] = float(v)
            except ValueError:
                d[k] = v
        out.append(d)
    return out


# ---- ratios (tune.select's medians) -----------------------------------------------------------

class Pairs:
    """What tune.select reads: a mode and, per size, ratio samples (ref time / lib time)."""

    def __init__(self, mode, ratios):
        self.mode, self.ratios = mode, ratios


def pairs(rows, coll, ref, lib, pick=None):
    """Per mode, Pairs of ref / lib over the rows of `coll` (both layouts). `pick(size)` -> the
    library to use at that size instead of `lib` (a composite of protocols)."""
    by_mode = {}
    for r in rows:
        if r.coll != coll:
            continue
        use = pick(r.size) if pick else lib
        a, b = r.times.get(ref), r.times.get(use)
        if not a or not b:
            continue
        for lay in LAYOUTS:
            if lay in a and lay in b:
                by_mode.setdefault(r.mode, {}).setdefault(r.size, []).append(a[lay] / b[lay])
    return [Pairs(m, v) for m, v in sorted(by_mode.items())]


def medians(rows, coll, ref, lib, pick=None, margin=0.0):
    """{size: ({mode: median}, faster)} and tune's limit."""
    limit, table = tune.select(pairs(rows, coll, ref, lib, pick), margin)
    return {size: (m, fast) for size, m, fast in table}, limit


def libs_of(rows, coll):
    have = set()
    for r in rows:
        if r.coll == coll:
            have |= set(r.times)
    # The windowed kernels stand in for themselves where a run has no `window` column.
    order = [lib for lib in ["default", "window", "stream", "ll128", "fp8", "int8"] if lib in have]
    return order


def window_name(libs):
    return "window" if "window" in libs else ("default" if "default" in libs else None)


# ---- proposals --------------------------------------------------------------------------------

def propose(rows, coll, margin):
    """{stream_min_bytes or None, dda_max, ...} for one collective, from its window and stream
    columns (eager and graph wherever both were measured)."""
    libs = libs_of(rows, coll)
    win = window_name(libs)
    if win is None:
        return None
    out = {"window_column": win, "stream_min_bytes": None, "stream_sizes": []}
    if "stream" in libs:
        vs_win, _ = medians(rows, coll, win, "stream", margin=margin)
        vs_stock, _ = medians(rows, coll, "stock", "stream", margin=margin)
        ok = {s: vs_win[s][1] and s in vs_stock and vs_stock[s][1] for s in vs_win}
        good = [s for s in sorted(ok) if ok[s]]
        out["stream_sizes"] = good
        if good:
            top = good[-1]
            lo = top
            for s in sorted((s for s in ok if s <= top), reverse=True):
                if not ok[s]:
                    break
                lo = s
            out["stream_min_bytes"] = lo
            out["stream_max_good"] = top
    smin = out["stream_min_bytes"]
    pick = (lambda size: "stream" if smin is not None and size >= smin else win)
    table, limit = medians(rows, coll, "stock", None, pick=pick, margin=margin)
    out["dda_max"] = limit
    out["composite"] = table
    out["pick"] = pick
    return out


# ---- targets ----------------------------------------------------------------------------------

TARGETS = [
    # (name, collective, library key, mode, sizes, minimum)
    ("AllReduce 16 MiB eager >= 1.4x", "all_reduce", "proposed", "eager", [16 * MiB], 1.4),
    ("AllReduce 64 MiB eager >= 1.2x", "all_reduce", "proposed", "eager", [64 * MiB], 1.2),
    ("AllReduce 16 MiB graph >= 1.3x", "all_reduce", "proposed", "graph", [16 * MiB], 1.3),
    ("AllReduce 64 MiB graph >= 1.1x", "all_reduce", "proposed", "graph", [64 * MiB], 1.1),
    ("AllGather 16 MiB eager >= 1.6x", "all_gather", "proposed", "eager", [16 * MiB], 1.6),
    ("ReduceScatter 16 MiB eager >= 1.6x", "reduce_scatter", "proposed", "eager", [16 * MiB], 1.6),
    ("AllToAll 32 MiB eager >= 1.3x", "alltoall", "proposed", "eager", [32 * MiB], 1.3),
    ("FP8 AllReduce of bf16 16 MiB eager >= 2.3x", "all_reduce", "fp8", "eager", [16 * MiB], 2.3),
]


def column(rows, coll, lib, proposals):
    """{size: {mode: median}} of one column ('proposed': the composite of the proposal)."""
    if lib == "proposed":
        p = proposals.get(coll)
        return {s: m for s, (m, _) in p["composite"].items()} if p else {}
    sub = [r for r in rows if r.coll == coll and (lib not in ("fp8", "int8") or r.dtype == "bfloat16")]
    table, _ = medians(sub, coll, "stock", lib)
    return {s: m for s, (m, _) in table.items()}


def check_targets(rows, proposals):
    out = []
    for name, coll, lib, mode, sizes, want in TARGETS:
        col = column(rows, coll, lib, proposals)
        got = [col[s][mode] for s in sizes if s in col and mode in col[s]]
        if not got:
            out.append((name, None, "not measured"))
            continue
        out.append((name, min(got), "met" if min(got) >= want else "MISSED"))
    # <= 64 KiB in a graph, every collective, today's defaults.
    for coll in COLLS:
        col = column(rows, coll, "default", proposals)
        got = [(s, col[s]["graph"]) for s in col if s <= 64 * KiB and "graph" in col[s]]
        name = f"{coll} <= 64 KiB graph >= 2.0x (defaults)"
        if not got:
            out.append((name, None, "not measured"))
        else:
            worst = min(got, key=lambda x: x[1])
            out.append((name, worst[1], ("met" if worst[1] >= 2.0 else "MISSED") + f" (worst at {human(worst[0])})"))
    # Nothing below 1.0x where rcclx intercepts: today's defaults (a forwarded size measures
    # 1.00 within noise), and the proposal up to its limit.
    for coll in COLLS:
        for lib in ["default", "proposed"]:
            col = column(rows, coll, lib, proposals)
            limit = proposals[coll]["dda_max"] if lib == "proposed" and proposals.get(coll) else None
            low = [(s, mode, m) for s, ms in col.items() for mode, m in ms.items()
                   if m < FLOOR and (limit is None or s <= limit)]
            name = f"{coll} no size below {FLOOR:.2f}x ({lib})"
            if not col:
                out.append((name, None, "not measured"))
            elif low:
                s, mode, m = min(low, key=lambda x: x[2])
                out.append((name, m, f"MISSED ({len(low)} size/mode; worst {human(s)} {mode})"))
            else:
                out.append((name, min(m for ms in col.values() for m in ms.values()), "met"))
    return out


# ---- the model against the measurement --------------------------------------------------------

def measured_times(rows, coll, lib, mode="graph"):
    """{size: median out-of-place time (us)} of one library."""
    t = {}
    for r in rows:
        if r.coll == coll and r.mode == mode and lib in r.times and "out_of_place" in r.times[lib]:
            t.setdefault(r.size, []).append(r.times[lib]["out_of_place"])
    return {s: statistics.median(v) for s, v in t.items()}


def model_rows(rows, B=None):
    """[(coll, column, size, model us, measured us)] at 2 ranks, graph (the model's kernel time).
    `B`: the link bandwidth to put into the model instead of its constant."""
    saved = model.H200["B"].value
    if B:
        model.H200["B"].value = B
    try:
        out = []
        for coll, mc in MODEL_COLL.items():
            libs = libs_of(rows, coll)
            win = window_name(libs)
            ll_max = model.LL_MAX[0] * (1 if mc == "ar" else 2)  # whole message at 2 ranks
            cols = [("stock", lambda S: model.stock("h200", mc, 2, S))]
            if win:
                cols.append((win, lambda S: model.rcclx_today("h200", mc, 2, S)[0]
                             if model.rcclx_today("h200", mc, 2, S)[1] != "stock" else None))
            if "stream" in libs:
                cols.append(("stream", lambda S: model.proposed_times("h200", mc, 2, S)["stream"] if S > ll_max else None))
            for lib, predict in cols:
                for S, t in sorted(measured_times(rows, coll, lib).items()):
                    p = predict(S)
                    if p is not None and S >= KiB:
                        out.append((coll, lib, S, p, t))
        return out
    finally:
        model.H200["B"].value = saved


def error_stats(mrows):
    """{(coll, lib): (median |err|, max |err|, n)}, err = model / measured - 1."""
    by = {}
    for coll, lib, _, p, t in mrows:
        by.setdefault((coll, lib), []).append(abs(p / t - 1))
    return {k: (statistics.median(v), max(v), len(v)) for k, v in by.items()}


# ---- report -----------------------------------------------------------------------------------

def fmt_modes(ms):
    return " / ".join(f"{ms[m]:.2f}" if m in ms else "-" for m in ("eager", "graph"))


def report(rows, link, names, margin):
    lines = ["# Issue 41 on 2 GPUs: protocols, targets, defaults, model", ""]
    gpus = sorted({str(r.gpu) for r in rows})
    ranks = sorted({r.nranks for r in rows})
    lines += [f"{len(names)} inputs; GPUs {', '.join(gpus) or '-'}; ranks {ranks}; types "
              f"{sorted({r.dtype for r in rows})}. Ratios: stock time / rcclx time (tune.py's median; "
              f"eager / graph). LL128: a column where the run has one, no proposal.", ""]
    summary = {"inputs": names, "targets": [], "proposals": {}, "model": {}, "link": []}

    link_rows = parse_link(link)
    summary["link"] = link_rows
    B_meas = None
    if link_rows:
        lines += ["## Link (link_perf)", "", "| test | mode / where | blocks | value |", "|---|---|---|---|"]
        for d in link_rows:
            if d.get("test") == "bidir":
                lines.append(f"| bidir {human(int(d['bytes']))} | {d['mode']} | {int(d['blocks'])} | {d['gbps_per_gpu']:.0f} GB/s per GPU |")
            elif d.get("test") == "flag":
                lines.append(f"| flag one-way | {d['where']} | 1 | {d['us_one_way']:.2f} us |")
            elif d.get("test") == "release":
                lines.append(f"| release after copy | {d['mode']} | {int(d['blocks'])} | median {d['ns_median']:.0f} ns, max {d['ns_max']:.0f} ns |")
        pulls = [d["gbps_per_gpu"] for d in link_rows if d.get("test") == "bidir" and d.get("mode") == "pull"]
        if pulls:
            B_meas = max(pulls)
            lines += ["", f"Model constant B: {model.H200['B'].value:g} GB/s; measured SM pull (best grid): {B_meas:.0f} GB/s."]
        flags = [d["us_one_way"] for d in link_rows if d.get("test") == "flag"]
        if flags:
            lines.append(f"Flag one-way {min(flags):.2f} us; the model's assumed extra hop: {model.H200['hop'].value:g} us.")
        lines.append("")

    proposals = {coll: p for coll in COLLS if (p := propose(rows, coll, margin))}
    targets = check_targets(rows, proposals)
    lines += ["## Targets (issue 41; 'proposed' = the proposed defaults below)", "", "| target | ratio | verdict |", "|---|---|---|"]
    for name, got, verdict in targets:
        lines.append(f"| {name} | {'-' if got is None else f'{got:.2f}x'} | {verdict} |")
        summary["targets"].append({"target": name, "ratio": got, "verdict": verdict})
    lines.append("")

    lines += ["## Ratios per size (eager / graph)", ""]
    for coll in COLLS:
        libs = libs_of(rows, coll)
        if not libs:
            continue
        cols = {lib: column(rows, coll, lib, proposals) for lib in libs}
        if coll in proposals:
            cols["proposed"] = column(rows, coll, "proposed", proposals)
        extra = []
        if "stream" in libs and window_name(libs):
            sw, _ = medians(rows, coll, window_name(libs), "stream")
            extra = [("stream vs window", {s: m for s, (m, _) in sw.items()})]
        heads = list(cols) + [e[0] for e in extra]
        lines += [f"**{coll}**", "", "| size | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
        sizes = sorted({s for c in list(cols.values()) + [e[1] for e in extra] for s in c})
        for s in sizes:
            cells = [fmt_modes(c[s]) if s in c else "-" for c in cols.values()] + [fmt_modes(e[1][s]) if s in e[1] else "-" for e in extra]
            lines.append(f"| {human(s)} | " + " | ".join(cells) + " |")
        lines.append("")

    lines += ["## Proposed defaults", "",
              f"A protocol only where faster than the windowed kernel and than stock by {margin:.0%}, eager and graph; "
              "the DDA limit: tune.py's rule on that composite.", "",
              "| collective | window column | stream from | stream faster at | DDA limit |", "|---|---|---|---|---|"]
    for coll, p in proposals.items():
        smin = p["stream_min_bytes"]
        lim = p["dda_max"]
        lines.append(f"| {coll} | {p['window_column']} | {human(smin) if smin is not None else 'no (windowed kernels)'} | "
                     f"{', '.join(human(s) for s in p['stream_sizes']) or '-'} | {human(lim) if lim else 'forward'} |")
        summary["proposals"][coll] = {"stream_min_bytes": smin, "stream_sizes": p["stream_sizes"], "dda_max": lim,
                                      "window_column": p["window_column"]}
    chosen = {c: p["stream_min_bytes"] for c, p in proposals.items() if p["stream_min_bytes"] is not None}
    if chosen:
        # RCCLX_PROTO names collectives as the kernel table does (allreduce); the sweeps as nccl-tests (all_reduce).
        per_coll = ",".join(f"{c.replace('_', '')}=stream" for c in chosen)
        lines += ["", f"RCCLX_PROTO selects per collective, RCCLX_STREAM_MIN_BYTES is one bound for all: "
                  f"`RCCLX_PROTO={per_coll} RCCLX_STREAM_MIN_BYTES={max(chosen.values())}` gives each chosen "
                  "collective the stream kernels from the largest of the sizes above."]
    else:
        lines += ["", "No collective has a size where the stream protocol beats both the windowed kernel and stock: "
                  "keep RCCLX_PROTO=window."]
    lines.append("")

    lines += ["## The model (bench/model.py) against the measurement", "",
              "2 ranks, CUDA graph, out of place (the model is kernel time). err = model / measured - 1.", ""]
    for label, B in [("model constants", None)] + ([(f"B = measured {B_meas:.0f} GB/s", B_meas)] if B_meas else []):
        mrows = model_rows(rows, B)
        stats = error_stats(mrows)
        summary["model"][label] = {f"{c}/{l}": {"median_abs_err": m, "max_abs_err": x, "sizes": n}
                                   for (c, l), (m, x, n) in stats.items()}
        lines += [f"**{label}**", "", "| collective | column | sizes | median abs err | max abs err |", "|---|---|---|---|---|"]
        for (c, l), (m, x, n) in sorted(stats.items()):
            lines.append(f"| {c} | {l} | {n} | {m:.0%} | {x:.0%} |")
        lines.append("")
        if B is None:
            lines += ["| collective | column | size | model us | measured us | err |", "|---|---|---|---|---|---|"]
            for c, l, S, p, t in mrows:
                lines.append(f"| {c} | {l} | {human(S)} | {p:.1f} | {t:.1f} | {p / t - 1:+.0%} |")
            lines.append("")
    return "\n".join(lines) + "\n", summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("--margin", type=float, default=tune.DEFAULT_MARGIN)
    a = ap.parse_args(argv)
    rows, link, names = load(a.inputs)
    if not rows:
        print("x2_summary: no benchmark rows with a stock column in " + " ".join(a.inputs), file=sys.stderr)
        return 2
    text, summary = report(rows, link, names, a.margin)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
