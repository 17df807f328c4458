#!/usr/bin/env python3
"""Compare the stock library and rcclx on simulated hosts (scripts/gpu-tests.sh, step sim).

Reads the step's output folder (OUT, as gpu-tests.sh writes it: OUT/sim/*.json, OUT/sim/train/,
OUT/sim-*.log, OUT/summary.txt) and writes a markdown table, one row per program and world size:
cases, wrong (rcclx / stock), the routes rcclx's calls took, the worst error against its bound,
PASS or FAIL. The last line says PASS or FAIL; the exit status is 1 on FAIL or when a part left
nothing to compare.

The bounds (stated here once; docs/RESULTS.md quotes them):

- torch cases (tests/gpu/torch_cases.py): exact where the inputs make every reduction order
  exact (small integers, copies); AVG and sums of random floats within
  (world + 1) * u * sum|x| per element (the docstring there). Routes: at every world size each of
  the six collectives took an rcclx kernel in section coll, and sections graph, coalesced and
  nonblocking took one each (subgroup too from 4 ranks: at 2 and 3 its groups have 1-2 ranks).
- training (bench/train_e2e.py, 20 steps): rcclx's losses against stock's, every rank and step,
  relative. Exact collectives: TRAIN_RTOL = 2^-9 (half a bf16 step). Both libraries reduce in
  fp32 but in different orders (stock's ring, rcclx's rank order), so gradients differ in their
  last fp32 bits; the forward rounds every weight to bf16 (DDP's autocast, FSDP2's bf16
  parameters), where such a difference shows only when it moves a weight across a bf16 rounding
  boundary (2^-8 relative, for a few weights). A loss that moved by half a bf16 step is more
  than rounding. Low precision (RCCL_LOW_PRECISION_ENABLE=1): TRAIN_LOWP_RTOL = 2^-4, the
  relative error of one E4M3 rounding (3 significand bits): block-scaled FP8 gradients and
  parameter gathers must not move the loss by more than one FP8 step.
- tensor-parallel decode (bench/e2e/tp_model.py): the relative L2 error of rcclx's prefill
  last-token logits and of its decode-step logits (CUDA graph) against stock's must not exceed the
  model's own sensitivity, measured in the same step: the error of stock's prefill logits when
  every input element moves by one bf16 step (--perturb). rcclx's all-reduces differ from stock's
  in rounding only (at most a few bf16 steps on some elements), less than that perturbation.
- benchmark (rccl-tests-compat): rcclx_check's cases all pass (its own bounds: bit-exact but for
  nranks * epsilon of the type on reductions, as its --help says) with every call's route checked
  against its model; each *_perf run with -c 1 has no result with wrong values in either library.

  python3 bench/sim_compare.py OUT [--out OUT/sim/summary.md] [--mps 1]
"""
import argparse
import ast
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_compare  # noqa: E402

TRAIN_RTOL = 2.0 ** -9
TRAIN_LOWP_RTOL = 2.0 ** -4
COLLS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce")
# Sections that must show rcclx kernels, from this many ranks on.
SECTIONS = {"coll": 2, "coalesced": 2, "graph": 2, "nonblocking": 2, "subgroup": 4}


def rcclx_routes(routes):
    """{route: calls} without the forwarded entry."""
    return {k: v for k, v in (routes or {}).items() if k != "forwarded" and v}


def fmt_routes(counts):
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def exit_codes(out):
    """{run name: exit status} from OUT/summary.txt."""
    codes = {}
    try:
        with open(os.path.join(out, "summary.txt")) as f:
            for line in f:
                m = re.match(r"(\S+)\s+rc=(\d+)", line)
                if m:
                    codes[m.group(1)] = int(m.group(2))
    except OSError:
        pass
    return codes


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def load(path):
    with open(path) as f:
        return json.load(f)


def torch_rows(sim, codes):
    rows = []
    for path in sorted(glob.glob(os.path.join(sim, "torch-cases-rcclx-w*.json")),
                       key=lambda p: int(re.search(r"-w(\d+)", p).group(1))):
        w = int(re.search(r"-w(\d+)", path).group(1))
        rx = load(path)
        why = []
        try:
            st = load(os.path.join(sim, f"torch-cases-stock-w{w}.json"))
        except OSError:
            st, why = None, ["no stock run"]
        if not rx["rcclx"]:
            why.append("rcclx was not loaded in the rcclx run")
        if st and st["rcclx"]:
            why.append("rcclx was loaded in the stock run")
        for lib, r in (("rcclx", rx), ("stock", st)):
            if r and r["errors"]:
                why.append(f"{lib}: a section failed: {r['errors']}")
            if codes.get(f"sim-torch-{lib}-w{w}", 0) != 0:
                why.append(f"{lib}: exit status {codes[f'sim-torch-{lib}-w{w}']}")
        wrong_rx = sum(bool(c["wrong_ranks"]) for c in rx["cases"])
        wrong_st = sum(bool(c["wrong_ranks"]) for c in st["cases"]) if st else 0
        if wrong_rx or wrong_st:
            why.append(f"wrong cases: rcclx {wrong_rx}, stock {wrong_st}")
        same = inexact = 0
        if st:
            by_name = {c["name"]: c for c in st["cases"]}
            if set(by_name) != {c["name"] for c in rx["cases"]}:
                why.append("the two runs ran different cases")
            for c in rx["cases"]:
                o = by_name.get(c["name"])
                if o is None:
                    continue
                if c["exact"]:
                    same += c["crc"] == o["crc"]
                else:
                    inexact += 1
        exact = sum(c["exact"] for c in rx["cases"])
        if st and same != exact:
            why.append(f"exact cases with other bits than stock's: {exact - same}")
        # Routes: rcclx kernels per collective (section coll) and per section.
        per_section, per_coll = {}, {}
        for c in rx["cases"]:
            got = rcclx_routes(c["routes"])
            if got:
                per_section[c["section"]] = per_section.get(c["section"], 0) + sum(got.values())
            for k, v in got.items():
                if c["section"] == "coll":
                    coll = k.split(".")[0]
                    per_coll[coll] = per_coll.get(coll, 0) + v
        missing = [k for k in COLLS if not per_coll.get(k)]
        if missing:
            why.append(f"no rcclx kernel for {', '.join(missing)} in section coll")
        for s, from_w in SECTIONS.items():
            if w >= from_w and not per_section.get(s):
                why.append(f"no rcclx kernel in section {s}")
        totals = {}
        for c in rx["cases"]:
            for k, v in (c["routes"] or {}).items():
                totals[k] = totals.get(k, 0) + v
        worst = max((c["err"] for c in rx["cases"] if not c["exact"]), default=0.0)
        rows.append({
            "program": "PyTorch cases", "world": w, "cases": len(rx["cases"]),
            "wrong": f"{wrong_rx} / {wrong_st}" if st else f"{wrong_rx} / -",
            "routes": fmt_routes(totals),
            "error": f"exact {exact} ({same} bit-identical to stock); bounded {inexact}: worst {worst:.3g} of bound",
            "why": why})
    return rows


def wrong_rows(out, sim, codes):
    """RCCLX_SIM_HOSTID set wrong: every call forwarded, every case right, a WARN on every rank."""
    rows = []
    for label, warn in (("wrong-ids", "more than one simulated host"),
                        ("wrong-unmapped", "could not map its peers")):
        path = os.path.join(sim, f"torch-cases-{label}-w4.json")
        log = read(os.path.join(out, f"sim-{label}.log")) or ""
        if not os.path.exists(path) and not log:
            continue
        why = []
        r = load(path) if os.path.exists(path) else None
        if r is None:
            why.append("no result file")
        else:
            wrong = sum(bool(c["wrong_ranks"]) for c in r["cases"])
            if wrong:
                why.append(f"{wrong} wrong cases")
            own = {}
            for c in r["cases"]:
                for k, v in rcclx_routes(c["routes"]).items():
                    own[k] = own.get(k, 0) + v
            if own:
                why.append(f"rcclx kernels ran: {fmt_routes(own)}")
            if not r["rcclx"]:
                why.append("rcclx was not loaded")
        warned = len(re.findall(r"WARN .*" + re.escape(warn), log))
        if warned < 4:
            why.append(f"{warned} of 4 ranks warned ({warn!r})")
        if codes.get(f"sim-{label}", 0):
            why.append(f"exit status {codes[f'sim-{label}']}")
        rows.append({"program": f"RCCLX_SIM_HOSTID set wrong ({label})", "world": 4,
                     "cases": len(r["cases"]) if r else 0, "wrong": "-", "routes": "forwarded" if r else "-",
                     "error": f"{warned} WARN lines", "why": why})
    return rows


def budget_rows(out, codes):
    """NCCL's SM budget (NCCL_MAX_CTAS=4, =1): the script's own check (its exit status) and how
    many ranks said so."""
    rows = []
    for b, what in ((4, "grids capped at 4 blocks"), (1, "forwarded")):
        log = read(os.path.join(out, f"sim-budget-{b}.log"))
        if log is None:
            continue
        m = re.search(r"ranks saying .*: (\d+) of 4", log)
        said = int(m.group(1)) if m else 0
        why = [f"{said} of 4 ranks said so"] if said != 4 else []
        if codes.get(f"sim-budget-{b}", 1):
            why.append(f"exit status {codes.get(f'sim-budget-{b}', 'missing')}")
        rows.append({"program": f"rcclx_check, NCCL_MAX_CTAS={b}", "world": 4, "cases": "-", "wrong": "-",
                     "routes": what, "error": f"{said} of 4 ranks", "why": why})
    return rows


def train_rows(sim, codes):
    rows = []
    tdir = os.path.join(sim, "train")
    for mode in ("ddp", "fsdp2"):
        paths = {lab: os.path.join(tdir, f"train-{mode}-{lab}.json") for lab in ("stock", "rcclx", "rcclx-lowp")}
        runs = {lab: load(p) for lab, p in paths.items() if os.path.exists(p)}
        if not runs:
            continue
        ref = runs.get("stock")
        for lab in ("rcclx", "rcclx-lowp"):
            why = []
            r = runs.get(lab)
            if r is None or ref is None:
                rows.append({"program": f"training {mode} ({lab})", "world": "-", "cases": 0, "wrong": "-",
                             "routes": "-", "error": "-", "why": [f"missing run: {lab if r is None else 'stock'}"]})
                continue
            for name, run in (("stock", ref), (lab, r)):
                if run["failures"]:
                    why.append(f"{name}: {'; '.join(run['failures'])}")
                code = codes.get(f"sim-train-{mode}-{name}", 0)
                if code:
                    why.append(f"{name}: exit status {code}")
            cmp = train_compare.compare(r, ref)
            if cmp["config_diff"]:
                why.append(f"configurations differ in {cmp['config_diff']}")
            tol = TRAIN_LOWP_RTOL if r["low_precision"] else TRAIN_RTOL
            if not cmp["max_rel"] <= tol:
                why.append(f"loss off by {cmp['max_rel']:.3g} relative, bound {tol:.3g}")
            rx = r["rcclx"]
            kernel = {k: v["calls"] for k, v in (rx.get("process_routes") or {}).items() if k != "forwarded"}
            if not rx.get("kernel_calls"):
                why.append("no rcclx kernel ran")
            if r["low_precision"] and not rx.get("lowp_calls"):
                why.append("no low-precision kernel ran")
            first = "bit-identical" if cmp["first_diff"] is None else f"first differs at step {cmp['first_diff']}"
            rows.append({
                "program": f"training {mode} ({lab})", "world": r["config"]["world"], "cases": len(r["steps"]),
                "wrong": "-", "routes": f"{fmt_routes(kernel)}; forwarded {rx.get('forwarded_calls', 0)}",
                "error": f"loss {cmp['max_rel']:.3g} relative, {cmp['max_rel'] / tol:.3g} of bound ({first}); "
                         f"final loss {float(ref['steps'][-1]['loss']):.4f} stock, {float(r['steps'][-1]['loss']):.4f}",
                "why": why})
    return rows


def result(text, kind):
    """The key=value fields of the last `RESULT <kind>` line of a log."""
    found = None
    for line in (text or "").splitlines():
        if f"RESULT {kind} " in line:
            found = dict(kv.split("=", 1) for kv in line[line.index("RESULT"):].split()[2:] if "=" in kv)
    return found


def tp_rows(out, codes):
    stock, perturb, rx = (read(os.path.join(out, f"sim-tp-{n}.log")) for n in ("stock", "stock-perturb", "rcclx"))
    if rx is None and stock is None:
        return []
    why = []
    for n in ("stock", "stock-perturb", "rcclx"):
        if codes.get(f"sim-tp-{n}", 0):
            why.append(f"{n}: exit status {codes[f'sim-tp-{n}']}")
    p = result(perturb, "accuracy")
    a = result(rx, "accuracy")
    d = result(rx, "decode-accuracy")
    if not (p and a and d):
        why.append("missing RESULT lines (perturbation, prefill or decode accuracy)")
        return [{"program": "tensor-parallel decode", "world": "-", "cases": 0, "wrong": "-", "routes": "-",
                 "error": "-", "why": why}]
    scale = float(p["last_logits_rel_l2"])
    pre, dec = float(a["last_logits_rel_l2"]), float(d["decode_logits_rel_l2"])
    for name, v in (("prefill logits", pre), ("decode logits", dec)):
        if not v <= scale:
            why.append(f"{name} off by {v:.3g}, more than the model's sensitivity {scale:.3g}")
    routes = {}
    m = re.search(r"INFO rcclx routes \(rank 0, calls\): (\{.*\})", rx or "")
    if m:
        routes = ast.literal_eval(m.group(1))
    if not rcclx_routes(routes):
        why.append("no rcclx kernel ran")
    tp = re.search(r"tp=(\d+)", rx or "")
    return [{"program": "tensor-parallel decode", "world": int(tp.group(1)) if tp else "-",
             "cases": 2, "wrong": "-",
             "routes": fmt_routes(routes),
             "error": f"logits rel L2: prefill {pre:.3g}, decode {dec:.3g} (graph, {d['steps']} steps, argmax agree "
                      f"{d['decode_argmax_agree']}); bound {scale:.3g} (input moved by one bf16 step)",
             "why": why}]


def bench_rows(out, codes):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "sim-check*-w*.log"))):
        name = os.path.basename(path)[:-4]
        text = read(path) or ""
        why = []
        m = re.search(r"^(\d+) passed, (\d+) failed", text, re.M)
        if not m:
            why.append("no result line")
        elif int(m.group(2)):
            why.append(f"{m.group(2)} cases failed")
        if "# routes: every call of" not in text:
            why.append("routes were not checked")
        if codes.get(name, 0):
            why.append(f"exit status {codes[name]}")
        rows.append({"program": f"rcclx_check ({name})", "world": int(name.rsplit("-w", 1)[1]),
                     "cases": int(m.group(1)) + int(m.group(2)) if m else 0,
                     "wrong": m.group(2) if m else "-",
                     "routes": "every call as the route model expects" if not why else "-",
                     "error": "within the checker's bounds" if m and not int(m.group(2)) else "-", "why": why})
    perf = sorted(glob.glob(os.path.join(out, "sim-perf-*-w*.log")))
    if perf:
        why, wrong, libs, bw = [], 0, set(), {}
        for path in perf:
            name = os.path.basename(path)[:-4]
            text = read(path) or ""
            # The table's library has nccl-tests' footer, each other one a "# library" line.
            others = re.findall(r"# library (\S+): (\d+) results with wrong values.*?, average busbw ([0-9.eE+-]+)", text)
            names = set(re.findall(r"# library (\S+): /", text))
            table = sorted(names - {o[0] for o in others})
            bad = re.search(r"# Out of bounds values : (\d+)", text)
            b = re.search(r"# Avg bus bandwidth {4}: ([0-9.eE+-]+)", text)
            found = others + ([(table[0], bad.group(1), b.group(1))] if len(table) == 1 and bad and b else [])
            if len(found) < 2:
                why.append(f"{name}: not both libraries' results")
            for lib, bad, b in found:
                libs.add(lib)
                wrong += int(bad)
                bw.setdefault(lib, []).append(float(b))
            if codes.get(name, 0):
                why.append(f"{name}: exit status {codes[name]}")
        if wrong:
            why.append(f"{wrong} results with wrong values")
        w = int(perf[0].rsplit("-w", 1)[1][:-4])
        rows.append({"program": f"*_perf -c 1 ({len(perf)} collectives)", "world": w, "cases": len(perf),
                     "wrong": str(wrong), "routes": "(rcclx_check checks them)",
                     "error": "average busbw " + ", ".join(f"{k} {sum(v) / len(v):.3g} GB/s" for k, v in sorted(bw.items())),
                     "why": why})
    return rows


def compare(out):
    """(rows, ok) for gpu-tests.sh's output folder `out`."""
    sim = os.path.join(out, "sim")
    codes = exit_codes(out)
    rows = torch_rows(sim, codes) + train_rows(sim, codes) + tp_rows(out, codes) + bench_rows(out, codes)
    rows += budget_rows(out, codes) + wrong_rows(out, sim, codes)
    return rows, bool(rows) and all(not r["why"] for r in rows)


def markdown(rows, ok, mps):
    lines = [f"# Simulated hosts: stock against rcclx, N processes on one GPU (MPS={mps})", "",
             "| program | world | cases | wrong (rcclx / stock) | rcclx routes (calls) | worst error | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "PASS" if not r["why"] else "FAIL: " + "; ".join(r["why"])
        lines.append(f"| {r['program']} | {r['world']} | {r['cases']} | {r['wrong']} | {r['routes']} | {r['error']} | "
                     f"{verdict} |")
    lines += ["", f"Bounds: bench/sim_compare.py (training {TRAIN_RTOL:.3g} relative, low precision "
              f"{TRAIN_LOWP_RTOL:.3g}; logits: the model's sensitivity to one bf16 step).", "",
              f"{'PASS' if ok else 'FAIL'}: {len(rows)} rows, {sum(bool(r['why']) for r in rows)} failed"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="gpu-tests.sh's output folder")
    ap.add_argument("--out", dest="md", help="markdown file (default: stdout only)")
    ap.add_argument("--mps", default="?", help="whether MPS ran (for the table's heading)")
    args = ap.parse_args()
    rows, ok = compare(args.out)
    text = markdown(rows, ok, args.mps)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    print(text, end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
