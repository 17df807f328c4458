#!/usr/bin/env python3
"""rcclx against the stock library at 2, 4 and 8 ranks on H200 and MI300X: an analytical MODEL.

Not a measurement. The stock curves at 2 ranks and a few rcclx constants are measured on 2x H200
(each constant below names its run); everything at 4 and 8 ranks, everything on MI300X and every
"proposed" time (issue 39's pipelined "stream" kernels and LL128: built, off by default, not yet
timed on 2 GPUs) is
derived or assumed as the constant's source says. Times in microseconds (kernel time, as in a
CUDA graph), sizes in bytes (AllReduce: the message; AllGather / ReduceScatter: the whole
buffer, S/n per rank).

    python3 bench/model.py           print the tables (Markdown)
    python3 bench/model.py --write   rewrite the model section of docs/RESULTS.md
    python3 bench/model.py --check   exit status 1 if docs/RESULTS.md's model section, or the
                                     AllReduce one-shot limits in src/collective.rs
                                     (AR_ONE_SHOT_MAX), differ from what this file computes
                                     (tests/model.rs runs it)

H200 (NVSwitch): one bandwidth B per GPU and direction shared by all its peers. MI300X (xGMI
mesh): one link of B_l per pair; links run in parallel, so a pattern's time is the bytes on its
busiest link over B_l.
"""
import math
import os
import re
import sys

KiB, MiB = 1 << 10, 1 << 20
SIZES = [1 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
RANKS = [2, 4, 8]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "RESULTS.md")
COLLECTIVE_RS = os.path.join(REPO, "src", "collective.rs")
BEGIN = "<!-- bench/model.py: begin (generated: python3 bench/model.py --write) -->"
END = "<!-- bench/model.py: end -->"


class Const:
    """A model constant: its value, unit and where it comes from."""

    def __init__(self, value, unit, source):
        self.value, self.unit, self.source = value, unit, source


T29 = "bench/results/2026-11-29-h200x2 tune/tune-flat-P2-graph.log"
V2 = "bench/results/2026-11-30-h200x2-v2"
H200 = {
    "B": Const(325.0, "GB/s", "measured: SM pulls, 2x H200, both GPUs copying (docs/scaling.md)"),
    "HBM": Const(3600.0, "GB/s", "measured: a local copy on one H200 moved 1805 GB/s (3.6 TB/s of traffic)"),
    "a_LL": Const(2.6, "us", "measured: LL AllReduce <= 64 KiB in a graph, 2.6-3.5 us (docs/RESULTS.md, v3 run)"),
    "a_flat": Const(3.5, "us", f"fit: today's flat AllReduce, 1-64 MiB, 2x H200 ({T29}, {V2})"),
    "c_win": Const(1.0, "us", "fit: each further 8 MiB window of the flat kernel (same runs)"),
    "a_st": Const(4.0, "us", "assumed (range 3-6): stream kernel launch + head + tail (issue 39)"),
    "hop": Const(1.2, "us", "assumed: one more flag hop (two-shot's second phase)"),
    "peer": Const(0.3, "us", "assumed: fixed cost per peer beyond the first"),
}
MI300X = {
    "B": Const(48.0, "GB/s", "assumed: usable per xGMI link and direction (AMD: ~48 of 64 GB/s)"),
    "HBM": Const(4200.0, "GB/s", "assumed: 80 % of 5.3 TB/s"),
    "a_LL": Const(5.0, "us", "assumed: published AMD custom all-reduce floors are 3-7 us"),
    "a_flat": Const(7.0, "us", "assumed"),
    "c_win": Const(2.0, "us", "assumed"),
    "a_st": Const(7.0, "us", "assumed"),
    "hop": Const(2.0, "us", "assumed"),
    "peer": Const(0.3, "us", "assumed"),
}
LL128 = 128 / 120  # bytes on the wire per payload byte (NVIDIA: 120 B of 128)
LL64 = 64 / 56  # gfx9: the non-tearing unit is 64 bytes
W_DDA = 8 * MiB  # today's window: half of the 16 MiB staging buffer

# Stock NCCL 2.28.9 at 2 ranks, 2x H200, CUDA graph, float, out of place: bytes -> us.
STOCK2_SOURCE = f"AllReduce: {T29} (stock column); AllGather, ReduceScatter: {V2} speed/bench-*-P2-graph-float, 32-64 MiB recheck/new-*-graph"
STOCK_AR2 = {1 * KiB: 5.96, 4 * KiB: 6.19, 16 * KiB: 6.78, 64 * KiB: 7.05, 256 * KiB: 8.22, 512 * KiB: 9.67,
             1 * MiB: 14.53, 2 * MiB: 28.33, 4 * MiB: 33.80, 8 * MiB: 48.71, 16 * MiB: 77.03, 32 * MiB: 138.97,
             64 * MiB: 248.51}
STOCK_AG2 = {1 * KiB: 5.34, 4 * KiB: 5.54, 16 * KiB: 6.14, 64 * KiB: 6.31, 256 * KiB: 6.93, 1 * MiB: 10.60,
             4 * MiB: 26.01, 16 * MiB: 52.79, 32 * MiB: 89.61, 64 * MiB: 156.81}
STOCK_RS2 = {1 * KiB: 5.29, 4 * KiB: 5.46, 16 * KiB: 5.92, 64 * KiB: 6.06, 256 * KiB: 6.77, 1 * MiB: 9.96,
             4 * MiB: 23.60, 16 * MiB: 50.58, 32 * MiB: 90.42, 64 * MiB: 159.47}
# Today's flat AllReduce at 2 ranks, same run as STOCK_AR2 (rcclx column): the model's check.
RCCLX_AR2 = {1 * MiB: 8.13, 4 * MiB: 18.90, 16 * MiB: 65.97, 64 * MiB: 238.78}
# Stock RCCL on MI300X (assumed; fit of eta to TP2 16 MB 356 us and TP4 8 MB 118 us published by
# vLLM's QuickReduce work): fixed cost and link efficiency per rank count.
RCCL_A = {2: 10.0, 4: 14.0, 8: 22.0}
RCCL_ETA = {2: 0.98, 4: 0.90, 8: 0.90}

# rcclx's defaults that the model takes as they are (src/collective.rs): LL per rank by rank row,
# DDA limits (max) of AllReduce, AllGather, ReduceScatter by row (2, <= 4, <= 8 ranks).
LL_MAX = [256 * KiB, 64 * KiB, 32 * KiB]
DDA_MAX = {"ar": [64 * MiB, 16 * MiB, 8 * MiB], "ag": [64 * MiB, 16 * MiB, 16 * MiB], "rs": [64 * MiB, 8 * MiB, 8 * MiB]}
TITLES = {"ar": "AllReduce", "ag": "AllGather", "rs": "ReduceScatter"}


def row(n):
    return 0 if n <= 2 else (1 if n <= 4 else 2)


def us(nbytes, gbps):
    return nbytes / (gbps * 1e3)


def interp(table, x):
    """Log-log interpolation (linear in log space past the ends)."""
    xs = sorted(table)
    lo, hi = (xs[0], xs[1]) if x <= xs[0] else (xs[-2], xs[-1])
    for a, b in zip(xs, xs[1:]):
        if a <= x <= b:
            lo, hi = a, b
            break
    t = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp(math.log(table[lo]) + t * (math.log(table[hi]) - math.log(table[lo])))


def one_shot_crossover(platform, n):
    """Bytes above which two-shot beats one-shot (same fixed costs but one more hop)."""
    if n <= 2:
        return 64 * MiB  # same bytes either way: one-shot to the DDA limit
    c = H200 if platform == "h200" else MI300X
    if platform == "h200":  # (n-1) S / B against 2 (n-1) S / (n B) + hop
        return c["hop"].value * c["B"].value * 1e3 / ((n - 1) * (1 - 2 / n))
    return c["hop"].value * c["B"].value * 1e3 / (1 - 2 / n)  # per link: S against 2 S / n


def one_shot_default(platform, n):
    """The crossover rounded to 8 KiB: the default of src/collective.rs."""
    x = one_shot_crossover(platform, n)
    return x if n <= 2 else int(round(x / (8 * KiB))) * 8 * KiB


# ---- stock ----------------------------------------------------------------------------------

def stock(platform, coll, n, S):
    if platform == "h200":
        # The 2-rank curve at the same bytes per rank, plus the ring's extra steps.
        s_eq = 2 * (n - 1) / n * S
        steps = 2 * (n - 2) if coll == "ar" else n - 2
        t2 = interp({"ar": STOCK_AR2, "ag": STOCK_AG2, "rs": STOCK_RS2}[coll], s_eq)
        return t2 + steps * (0.6 if s_eq <= 256 * KiB else 1.0)  # NCCL's LL hop, a bit more above
    per_link = 2 * S / n if coll == "ar" else S / n
    return RCCL_A[n] + us(per_link, MI300X["B"].value * RCCL_ETA[n])


# ---- rcclx today (the kernels of this repository with its defaults) -------------------------

def rcclx_today(platform, coll, n, S):
    """(us, algorithm) of today's kernels under the defaults; "stock" where rcclx forwards."""
    c = H200 if platform == "h200" else MI300X
    v = lambda k: c[k].value
    mesh = platform != "h200"
    fixed_ll = v("a_LL") + v("peer") * (n - 2)
    fixed = v("a_flat") + v("peer") * (n - 2)
    copy = lambda x: us(2 * x, v("HBM"))
    # Bytes through the busiest link (mesh) or the GPU's bandwidth (switch).
    link = lambda switch_bytes, mesh_bytes: us(mesh_bytes if mesh else switch_bytes, v("B"))
    r = row(n)
    if coll == "ar":
        if S <= LL_MAX[r]:
            return fixed_ll + link(2 * (n - 1) * S, 2 * S), "LL"
        w = math.ceil(S / W_DDA)
        if S <= one_shot_default(platform, n):
            return fixed + copy(min(S, W_DDA)) + link((n - 1) * S, S) + (w - 1) * v("c_win"), "flat"
        if S <= DDA_MAX["ar"][r]:
            two = link(2 * (n - 1) / n * S, 2 * S / n)
            return fixed + v("hop") + copy(min(S, W_DDA)) + two + (w - 1) * 2 * v("c_win"), "two-shot"
        return stock(platform, coll, n, S), "stock"
    s = S / n
    if s <= LL_MAX[r]:
        return fixed_ll + link(2 * (n - 1) * s, 2 * s), "LL"
    if S <= DDA_MAX[coll][r]:
        win = W_DDA if coll == "ag" else W_DDA / n
        w = math.ceil(s / win)
        # AllGather stages its own block and copies it to its output; ReduceScatter stages a
        # window of every block.
        copy_in = 2 * copy(min(s, win)) if coll == "ag" else copy(min(S, W_DDA))
        return fixed + copy_in + link((n - 1) * s, s) + (w - 1) * v("c_win"), "flat"
    return stock(platform, coll, n, S), "stock"


# ---- rcclx proposed (issue 39: stream rings, LL128 / LL64) -----------------------------------

def rcclx_proposed(platform, coll, n, S):
    """(us, algorithm): the fastest of LL, LL128 (LL64 on AMD), stream one- and two-shot."""
    t = proposed_times(platform, coll, n, S)
    best = min(t, key=t.get)
    return t[best], best


def proposed_times(platform, coll, n, S):
    """{algorithm: us} of every proposed algorithm (bench/x2_summary.py compares "stream" with the
    measured stream kernels)."""
    c = H200 if platform == "h200" else MI300X
    v = lambda k: c[k].value
    mesh = platform != "h200"
    line, lname = (LL64, "LL64") if mesh else (LL128, "LL128")
    a_ll = v("a_LL") + v("peer") * (n - 2)
    a_st = v("a_st") + v("peer") * (n - 2)
    link = lambda switch_bytes, mesh_bytes: us(mesh_bytes if mesh else switch_bytes, v("B"))
    if coll == "ar":
        t = {"LL": a_ll + link(2 * (n - 1) * S, 2 * S),
             lname: a_ll + 0.2 + link(line * (n - 1) * S, line * S),
             "stream": a_st + link((n - 1) * S, S)}
        if n > 2:
            t[lname + " two-shot"] = a_ll + 0.2 + v("hop") + link(line * 2 * (n - 1) / n * S, line * 2 * S / n)
            t["stream two-shot"] = a_st + v("hop") + link(2 * (n - 1) / n * S, 2 * S / n)
    else:
        s = S / n
        t = {"LL": a_ll + link(2 * (n - 1) * s, 2 * s),
             lname: a_ll + 0.2 + link(line * (n - 1) * s, line * s),
             "stream": a_st + link((n - 1) * s, s)}
    return t


# ---- across hosts (issue 47) ------------------------------------------------------------------

# H hosts of 8 GPUs (H200), one NIC per GPU, rail-aligned: each rail (one GPU per host) has its
# own NICs. Bytes per element on the rails: bf16 2, FP8/INT8 codes 1 + 4/128.
NET = {
    "B_net": Const(46.0, "GB/s", "assumed: 400 Gb/s per GPU less protocol overhead (NCCL's bus bandwidth on 400G IB/RoCE is 40-48 GB/s); also 23 GB/s (200 Gb/s)"),
    "a_net": Const(25.0, "us", "assumed: fixed cost of one stock call across hosts (a few network round trips)"),
}
L_HOST = 8
CODE = 1 + 4 / 128


def across_hosts(H, S, elem=2, b=None):
    """{plan: us} of an AllReduce of S bytes per rank (elem-byte elements) on H hosts of 8 GPUs,
    b GB/s per NIC: stock (a ring over rail-aligned channels, NVLink and NICs busy at once), the
    exact hierarchy and low precision across hosts as rcclx runs them (host ReduceScatter, rail
    step, host AllGather one after another), and low precision with the three phases overlapped
    across windows (not built: the time of the slowest phase)."""
    N, L = H * L_HOST, L_HOST
    b = b or NET["B_net"].value
    a = NET["a_net"].value
    ring = 2 * (N - 1) / N * S
    stock_t = a + max(us(ring, H200["B"].value), us(ring / L, b))
    nvl = us((L - 1) / L * S, H200["B"].value) + H200["a_flat"].value  # one DDA phase in the host
    rail = 2 * (H - 1) / H * S / L  # the hierarchy's bytes per NIC
    codec = us(4 * S / L, H200["HBM"].value)  # encode and decode passes over the shard
    net_lp = 2 * a + us(rail * CODE / elem, b)
    return {"stock": stock_t, "exact": 2 * nvl + a + us(rail, b), "lowp": 2 * nvl + net_lp + codec,
            "lowp_overlapped": max(nvl, net_lp) + codec}


def hosts_table():
    out = ["**Across hosts** (issue 47; H hosts of 8 H200, one NIC per GPU; AllReduce of 64 MiB per rank, bf16 "
           "in; ms: stock / exact hierarchy / low precision as built / low precision with its phases overlapped "
           "(not built), and stock / each low precision)", "",
           "| hosts | 400 Gb/s per GPU | 200 Gb/s per GPU |", "|---|---|---|"]
    S = 64 * MiB
    for H in (2, 4, 8, 16):
        cells = []
        for b in (NET["B_net"].value, NET["B_net"].value / 2):
            t = across_hosts(H, S, b=b)
            cells.append(f"{t['stock'] / 1e3:.2f} / {t['exact'] / 1e3:.2f} / {t['lowp'] / 1e3:.2f} / "
                         f"{t['lowp_overlapped'] / 1e3:.2f} ({t['stock'] / t['lowp']:.2f}x, "
                         f"{t['stock'] / t['lowp_overlapped']:.2f}x)")
        out.append(f"| {H} | " + " | ".join(cells) + " |")
    out += ["", "What it predicts: with a NIC per GPU, a host's ranks move 1/8 of the message each across hosts, "
            "so the network phase takes about as long as each NVLink phase; run one after another (as built), "
            "the hierarchy is slower than stock's ring, which keeps NVLink and NICs busy at once, whatever the "
            "codec. Low precision pays where the network phase dominates (fewer NICs than GPUs, slower links; "
            "the simulated hosts' loopback is the extreme) or once the phases overlap across windows (the next "
            "step: the model's last column). Constants:", ""]
    out += [f"- {k}: {c.value:g} {c.unit} ({c.source})" for k, c in NET.items()]
    return out + [""]


# ---- tables -----------------------------------------------------------------------------------

def fmt(x):
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def size_name(S):
    return f"{S // MiB} MiB" if S >= MiB else f"{S // KiB} KiB"


def cell(platform, coll, n, S):
    st = stock(platform, coll, n, S)
    now, _ = rcclx_today(platform, coll, n, S)
    new, _ = rcclx_proposed(platform, coll, n, S)
    new = min(new, st)  # a call forwards where stock is faster
    return f"{fmt(st)} / {fmt(now)} ({st / now:.2f}x) / {fmt(new)} ({st / new:.2f}x)"


def tables():
    out = []
    for platform, name in [("h200", "H200 (NVSwitch)"), ("mi300x", "MI300X (xGMI mesh)")]:
        for coll in ["ar", "ag", "rs"]:
            out += [f"**{name}, {TITLES[coll]}** (stock / rcclx today (x) / rcclx proposed (x), us)", "",
                    "| size | " + " | ".join(f"{n} ranks" for n in RANKS) + " |",
                    "|---|" + "---|" * len(RANKS)]
            for S in SIZES:
                out.append(f"| {size_name(S)} | " + " | ".join(cell(platform, coll, n, S) for n in RANKS) + " |")
            out.append("")
    return out


def crossover_table():
    out = ["**AllReduce one-shot -> two-shot** (the defaults of `src/collective.rs` `AR_ONE_SHOT_MAX`; "
           "before: 1 MiB at 3-4 ranks, 256 KiB at 5-8)", "",
           "| ranks | H200: model | default | MI300X: model | default |", "|---|---|---|---|---|"]
    for n in range(3, 9):
        out.append(f"| {n} | {one_shot_crossover('h200', n) / KiB:.0f} KiB | {one_shot_default('h200', n) // KiB} KiB | "
                   f"{one_shot_crossover('mi300x', n) / KiB:.0f} KiB | {one_shot_default('mi300x', n) // KiB} KiB |")
    return out + [""]


def constants_table():
    out = ["**Constants** (each with where it comes from)", "", "| constant | H200 | MI300X | source (H200; MI300X) |",
           "|---|---|---|---|"]
    for k in H200:
        h, m = H200[k], MI300X[k]
        out.append(f"| {k} | {h.value:g} {h.unit} | {m.value:g} {m.unit} | {h.source}; {m.source} |")
    out.append(f"| stock, 2 ranks | measured curves | RCCL: a = {RCCL_A} us, eta = {RCCL_ETA} (assumed) | {STOCK2_SOURCE} |")
    return out + [""]


def check_table():
    out = ["**The model against today's measured 2-rank AllReduce** (rcclx column of the stock curve's run)", "",
           "| size | model | measured |", "|---|---|---|"]
    for S, t in RCCLX_AR2.items():
        out.append(f"| {size_name(S)} | {fmt(rcclx_today('h200', 'ar', 2, S)[0])} | {fmt(t)} |")
    return out + [""]


def ratios(platform, coll, n, sizes):
    """(today, proposed) ratio ranges stock / rcclx over `sizes`, as text."""
    today, new = [], []
    for S in sizes:
        st = stock(platform, coll, n, S)
        today.append(st / rcclx_today(platform, coll, n, S)[0])
        new.append(st / min(st, rcclx_proposed(platform, coll, n, S)[0]))
    span = lambda v: f"{min(v):.2f}x" if f"{min(v):.2f}" == f"{max(v):.2f}" else f"{min(v):.2f}-{max(v):.2f}x"
    return span(today), span(new)


def summary():
    bands = [("up to 1 MiB", [S for S in SIZES if S <= MiB]), ("4 MiB", [4 * MiB]), ("16 MiB", [16 * MiB]),
             ("64 MiB", [64 * MiB])]
    out = ["**What 8-GPU users can expect** (model; stock / rcclx, today -> with issue 39's kernels; 1.00x: "
           "rcclx forwards there):", ""]
    for platform, name in [("h200", "8x H200 (NVSwitch, stock without NVLS)"), ("mi300x", "8x MI300X (xGMI)")]:
        for coll in ["ar", "ag", "rs"]:
            parts = []
            for label, sizes in bands:
                today, new = ratios(platform, coll, 8, sizes)
                parts.append(f"{label} {today} -> {new}")
            out.append(f"- {name}, {TITLES[coll]}: " + "; ".join(parts) + ".")
    out += ["", "With NVLS (NVSwitch multicast) on, stock NCCL's AllReduce moves S(1 + 1/n) per GPU instead of "
            "2S(n-1)/n and is expected to win above ~8 MiB at 8 ranks; rcclx forwards above 8 MiB at 5-8 ranks "
            "(its DDA limit), so it stays out of NVLS's way.", ""]
    return out


def section():
    lines = [BEGIN, "",
             "A **model**, not a measurement: `python3 bench/model.py` (its docstring has the formulas' "
             "assumptions). Kernel time as in a CUDA graph. Stock at 4 and 8 ranks is the measured 2-rank "
             "curve at the same bytes per rank plus the ring's extra steps (NVLS off), +-30 %; every MI300X "
             "figure is assumed (no rcclx kernel has run on AMD). \"Today\": this repository's kernels with its "
             "defaults (forwarding where they forward); \"proposed\": issue 39's stream rings and LL128 (LL64 on "
             "AMD), built but off by default and not yet timed on 2 GPUs. Ratios are stock / rcclx.", ""]
    lines += summary() + constants_table() + check_table() + crossover_table() + hosts_table() + tables()
    lines.append(END)
    return "\n".join(lines) + "\n"


def collective_rs_limits():
    """AR_ONE_SHOT_MAX of src/collective.rs: {"switch": [...], "mesh": [...]} in bytes."""
    text = open(COLLECTIVE_RS).read()
    block = text[text.index("pub const AR_ONE_SHOT_MAX"):]
    block = block[:block.index("};")]
    out = {}
    for key in ["switch", "mesh"]:
        items = re.search(key + r":\s*\[([^\]]*)\]", block).group(1)
        vals = []
        for item in items.split(","):
            m = re.fullmatch(r"\s*(\d+)\s*\*\s*(KIB|MIB)\s*", item)
            if m:
                vals.append(int(m.group(1)) * (KiB if m.group(2) == "KIB" else MiB))
        out[key] = vals
    return out


def check():
    problems = []
    text = open(RESULTS).read()
    if BEGIN not in text or END not in text:
        problems.append(f"{RESULTS}: no model section (run python3 bench/model.py --write)")
    else:
        current = text[text.index(BEGIN):text.index(END) + len(END)] + "\n"
        if current != section():
            problems.append(f"{RESULTS}: the model section differs from the model (run python3 bench/model.py --write)")
    limits = collective_rs_limits()
    for key, platform in [("switch", "h200"), ("mesh", "mi300x")]:
        want = [one_shot_default(platform, n) for n in range(2, 9)]
        if limits.get(key) != want:
            problems.append(f"src/collective.rs AR_ONE_SHOT_MAX.{key} = {limits.get(key)}, the model says {want}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


def write():
    text = open(RESULTS).read()
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section() + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n## What to expect at 2, 4 and 8 GPUs (a model)\n\n" + section()
    open(RESULTS, "w").write(text)


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else ""
    if arg == "--check":
        sys.exit(check())
    if arg == "--write":
        write()
    elif arg == "":
        sys.stdout.write(section())
    else:
        sys.exit(__doc__)
