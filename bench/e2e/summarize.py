#!/usr/bin/env python3
"""Markdown tables of an end-to-end run (bench/e2e/run.sh OUTDIR): stock NCCL vs rcclx, and the
accuracy of rcclx's low-precision (FP8, INT8) all-reduce on the model's prefill output.

Reads the RESULT lines that tp_model.py wrote to OUTDIR/<run>.log or <run>-<i>.log (repeat i;
REPEATS in run.sh), for the runs stock, stock-perturb, rcclx, rcclx-fp8 (rcclx-lowp in older
result folders) and rcclx-int8; takes the median over repeats, and prints:

- time per token (decode) or per prefill, and how much less time rcclx takes (% less =
  (stock - rcclx) / stock x 100; positive: rcclx faster), exact and low precision;
- for the prefill: time, speedup vs stock (stock / run), and the error of the output against the
  exact one saved by the stock run (RESULT accuracy): relative L2 of the final hidden states
  (all tokens) and of the last token's logits, top-1 agreement over all positions and of the last
  token. The stock row is a second identical prefill of the stock run (run-to-run noise); the
  stock-perturb row is the scale: the same model, exact collectives, input moved by one bf16 ulp.

Also lists the --check results, the rcclx routes each run took and each run's exit status
(OUTDIR/status.txt).

Usage: python3 bench/e2e/summarize.py OUTDIR > OUTDIR/summary.md
"""
import glob
import os
import re
import statistics
import sys

RESULT = re.compile(r"^RESULT (decode|prefill|accuracy) (.*)$")
RUN_NAME = re.compile(r"^(.*?)(?:-(\d+))?\.log$")
ALIASES = {"rcclx-lowp": "rcclx-fp8"}  # the FP8 run's name before the INT8 codec was added
RUNS = ("stock", "stock-perturb", "rcclx", "rcclx-fp8", "rcclx-int8")
ACC_KEYS = ("hidden_rel_l2", "last_logits_rel_l2", "argmax_agree", "last_argmax_same", "input_rel_l2",
            "ranks_same")


def parse(path):
    """{"times": {("decode", batch) or ("prefill", tokens): ms}, "acc": {ref: {key: value}},
    "prefill": the prefill RESULT fields, "info": INFO lines}."""
    out = {"times": {}, "acc": {}, "prefill": {}, "info": []}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            m = RESULT.match(line)
            if m:
                kv = dict(x.split("=", 1) for x in m.group(2).split() if "=" in x)
                if m.group(1) == "decode":
                    out["times"][("decode", int(kv["batch"]))] = float(kv["ms_per_token"])
                elif m.group(1) == "prefill":
                    out["times"][("prefill", int(kv["tokens"]))] = float(kv["ms_per_prefill"])
                    out["prefill"] = kv
                else:
                    out["acc"][kv.get("ref", "saved")] = kv
            elif line.startswith("INFO ") and line not in out["info"]:
                out["info"].append(line)
    return out


def collect(outdir):
    """{run: [parse() of each repeat]}, runs named as in RUNS."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(outdir, "*.log"))):
        m = RUN_NAME.match(os.path.basename(path))
        name = ALIASES.get(m.group(1), m.group(1)) if m else None
        if name in RUNS:
            runs.setdefault(name, []).append(parse(path))
    return runs


def median_times(reps):
    per_key = {}
    for r in reps:
        for k, v in r["times"].items():
            per_key.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in per_key.items()}, {k: len(v) for k, v in per_key.items()}


def median_acc(reps, ref):
    """{key: median over the repeats} of the RESULT accuracy lines with ref=ref."""
    out = {}
    for key in ACC_KEYS:
        vals = [float(r["acc"][ref][key]) for r in reps if key in r["acc"].get(ref, {})]
        if vals:
            out[key] = statistics.median(vals)
    return out


def less(stock, other):
    if stock is None or other is None or stock <= 0:
        return ""
    return f"{(stock - other) / stock * 100:+.1f} %"


def fmt(v, spec=".3f"):
    return "" if v is None else format(v, spec)


def collectives(name, reps):
    """What the run's all-reduce was, from its RESULT prefill line (lowp=, codec=)."""
    lib = "NCCL" if name.startswith("stock") else "rcclx"
    kv = next((r["prefill"] for r in reps if r["prefill"]), {})
    if kv.get("lowp", "0") in ("", "0"):
        return f"{lib}, exact" + (", input +-1 bf16 ulp" if name == "stock-perturb" else "")
    codec = kv.get("codec", "fp8")  # logs from before the codec field: FP8, the only codec then
    return f"{lib}, {'FP8 E4M3' if codec == 'fp8' else codec.upper()} block-scaled"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = sys.argv[1]
    runs = collect(outdir)
    times, counts = {}, {}
    for name, reps in runs.items():
        times[name], counts[name] = median_times(reps)
    stock, rcclx, fp8, int8 = (times.get(n, {}) for n in ("stock", "rcclx", "rcclx-fp8", "rcclx-int8"))
    keys = sorted(set(stock) | set(rcclx) | set(fp8) | set(int8), key=lambda k: (k[0] != "decode", k[1]))
    info_all = [i for n in ("stock", "rcclx") for r in runs.get(n, []) for i in r["info"]]
    tps = sorted({m.group(1) for i in info_all for m in [re.search(r" tp=(\d+)", i)] if m})
    print(f"# End to end: TP={'/'.join(tps) or '?'} Llama-3-8B-shaped model, stock NCCL vs rcclx\n")
    print("`bench/e2e/tp_model.py` run by `bench/e2e/run.sh`; times are the maximum over the ranks, "
          "median over repeats. **% less** = (stock - rcclx) / stock: positive means rcclx takes less "
          "time. Decode: one token per sequence per step, the whole step replayed from a CUDA graph. "
          "Prefill: one sequence, eager. FP8: `RCCL_LOW_PRECISION_ENABLE=1`; INT8: also "
          "`RCCLX_LOW_PRECISION_CODEC=int8` (prefill only).\n")
    if not keys:
        print("No RESULT lines found (see the logs and status.txt).\n")
    else:
        print("| measurement | stock | rcclx | % less (rcclx) | rcclx FP8 | % less (FP8) "
              "| rcclx INT8 | % less (INT8) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for k in keys:
            name = f"decode batch {k[1]} (ms/token)" if k[0] == "decode" else f"prefill {k[1]} tokens (ms)"
            s, r, f8, i8 = stock.get(k), rcclx.get(k), fp8.get(k), int8.get(k)
            print(f"| {name} | {fmt(s)} | {fmt(r)} | {less(s, r)} | {fmt(f8)} | {less(s, f8)} "
                  f"| {fmt(i8)} | {less(s, i8)} |")
        reps = sorted({c for n in ("stock", "rcclx", "rcclx-fp8", "rcclx-int8")
                       for c in counts.get(n, {}).values()})
        print(f"\nRepeats per number: {', '.join(map(str, reps))}.\n")
    accuracy_table(runs, times)
    for path in sorted(glob.glob(os.path.join(outdir, "check*.log"))):
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.startswith("CHECK ")]
        verdict = [ln for ln in lines if ln.startswith(("CHECK PASS", "CHECK FAIL"))]
        print(f"`{os.path.basename(path)}`: {verdict[-1] if verdict else 'no verdict (see the log)'}\n")
    info = [i for i in info_all
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


def accuracy_table(runs, times):
    """The prefill: time, speedup and error against the exact output, one row per run."""
    pkeys = [k for k in times.get("stock", {}) if k[0] == "prefill"]
    pkey = pkeys[0] if pkeys else next((k for t in times.values() for k in t if k[0] == "prefill"), None)
    if pkey is None and not any(r["acc"] for reps in runs.values() for r in reps):
        return
    scale = median_acc(runs.get("stock-perturb", []), "saved")
    rows = []
    for name in ("stock", "rcclx", "rcclx-fp8", "rcclx-int8", "stock-perturb"):
        if name not in runs:
            continue
        # stock has no saved reference to compare with: its row is its own repeat (ref=repeat).
        acc = median_acc(runs[name], "repeat" if name == "stock" else "saved")
        ms = times[name].get(pkey) if name != "stock-perturb" else None  # that run is for its error only
        s = times.get("stock", {}).get(pkey)
        speed = f"{s / ms:.3f}x" if s and ms else ""
        h, sh = acc.get("hidden_rel_l2"), scale.get("hidden_rel_l2")
        ratio = f"{h / sh:.2f}" if h is not None and sh else ""
        same = acc.get("last_argmax_same")
        same = "" if same is None else ("yes" if same >= 0.5 else "no")
        label = {"stock-perturb": "stock-perturb (scale)"}.get(name, name)
        rows.append(f"| {label} | {collectives(name, runs[name])} | {fmt(ms)} | {speed} "
                    f"| {fmt(h, '.3e')} | {ratio} | {fmt(acc.get('last_logits_rel_l2'), '.3e')} "
                    f"| {fmt(acc.get('argmax_agree'), '.4f')} | {same} |")
    tokens = pkey[1] if pkey else "?"
    inp = f"; input rel L2 {scale['input_rel_l2']:.2e}" if "input_rel_l2" in scale else ""
    print(f"## Prefill ({tokens} tokens, batch 1): time and error of the output\n")
    print("Error against the output of the stock run (exact collectives, saved by `--save-output`; one "
          "more prefill of the same tokens after the timed ones): **rel L2** = ||out - exact|| / ||exact|| "
          "of the final hidden states (after the final RMSNorm, all tokens) and of the last token's logits; "
          "**top-1** = fraction of positions whose most likely token is the exact one's, and whether the "
          "last token's is. **x scale** = hidden rel L2 / that of stock-perturb. The *stock* row's error: a "
          "second identical prefill in the stock run against the first (run-to-run noise). "
          "*stock-perturb (scale)*: the same model and exact collectives with each element of the "
          "embedding output moved to a neighbouring bf16 value (x (1 +- 2^-8), random signs, rounded to "
          f"bf16{inp}): how much the model itself "
          "amplifies a bf16-rounding-size change of its input. **speedup** = stock / run.\n")
    print("| run | all-reduce | prefill ms | speedup vs stock | hidden rel L2 | x scale "
          "| last-token logits rel L2 | top-1 agreement | last-token top-1 same |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(r)
    print()
    # Replicas that differ between ranks: the all-reduce did not give every rank the same result.
    for name in RUNS:
        bad = [r["acc"][k].get("ranks_same") for r in runs.get(name, []) for k in r["acc"]]
        if "0" in bad:
            print(f"Note: {name}: the ranks' hidden states differ (ranks_same=0 in its log): the all-reduce "
                  "results were not identical on every rank.\n")
    # Low precision only applies to messages of at least RCCLX_LP_MIN_BYTES (for AllReduce 1 MiB
    # by default at 2 ranks, 16 MiB with more).
    for name in ("rcclx-fp8", "rcclx-int8"):
        kv = next((r["prefill"] for r in runs.get(name, []) if r["prefill"]), {})
        if kv.get("allreduce_bytes", "").isdigit() and int(kv["allreduce_bytes"]) < 1 << 20:
            print(f"Note: {name}: the prefill all-reduces are {int(kv['allreduce_bytes'])} bytes, under the "
                  "default RCCLX_LP_MIN_BYTES (1 MiB for AllReduce at 2 ranks): exact unless that was lowered.\n")
    routes = [(n, i) for n in ("rcclx", "rcclx-fp8", "rcclx-int8") for r in runs.get(n, [])[:1]
              for i in r["info"] if i.startswith("INFO rcclx routes")]
    if routes:
        print("rcclx routes taken (rank 0, calls; first repeat):\n")
        print("```")
        for n, i in routes:
            print(f"{n:<11} {i.split(':', 1)[1].strip()}")
        print("```\n")


if __name__ == "__main__":
    sys.exit(main())
