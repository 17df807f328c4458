#!/usr/bin/env python3
"""Compare training runs of bench/train_e2e.py: step time and whether the losses are bit-identical.

Reads two or more JSON files (OUT/train-<variant>-<label>.json) and prints markdown, per variant
(ddp, fsdp2, fsdp2-sum, ddp-fp32: the mode and its options), against a reference run of that
variant (--ref LABEL; default: the first full-precision run whose label starts with "stock", else
the first file of the variant):

- the median step time and the ratio reference / run (> 1: the run is faster);
- the losses: bit-identical (every rank's fp32 loss of every step has the same bits as the
  reference's), or the first step that differs and the largest absolute and relative difference
  over the steps and ranks; and whether the final parameters' checksums are the same;
- rcclx's calls per route kind (rcclx kernels, of which low precision, forwarded);
- the loss of every step of the reference and each run's difference to it.

Runs with RCCL_LOW_PRECISION_ENABLE=1 (FP8/INT8 collectives) are expected to differ: their
differences are reported, not judged. Every other run must be bit-identical to its reference
(stock against stock shows the training is deterministic; rcclx against stock that rcclx gives the
same bits); a run whose configuration differs from the reference's cannot be compared and fails.

The last line says PASS or FAIL; the exit status is 1 on FAIL (0 with --report-only).

  python3 bench/train_compare.py OUT/train-ddp-stock-1.json OUT/train-ddp-stock-2.json OUT/train-ddp-rcclx.json
  python3 bench/train_compare.py --out OUT/summary.md OUT/train-*.json
"""
import argparse
import json
import math
import struct
import sys

#: configuration keys that may differ between runs that are still compared bit for bit
FREE_KEYS = ("expect",)


def load(path):
    with open(path) as f:
        r = json.load(f)
    r["_path"] = path
    return r


def f32(h):
    return struct.unpack(">f", bytes.fromhex(h[2:]))[0]


def mean_f32(step):
    """The mean over the ranks of a step's fp32 losses (from their bits), in float64."""
    v = [f32(h) for h in step["rank_loss_f32_hex"]]
    return math.fsum(v) / len(v)


def compare(run, ref):
    """{identical, first_diff, max_abs, max_rel, params_same, config_diff}."""
    cfg = {k: v for k, v in run["config"].items() if k not in FREE_KEYS}
    rcfg = {k: v for k, v in ref["config"].items() if k not in FREE_KEYS}
    config_diff = sorted(k for k in set(cfg) | set(rcfg) if cfg.get(k) != rcfg.get(k))
    first, max_abs, max_rel = None, 0.0, 0.0
    for a, b in zip(run["steps"], ref["steps"]):
        ha, hb = a["rank_loss_f32_hex"], b["rank_loss_f32_hex"]
        if ha != hb and first is None:
            first = a["step"]
        for x, y in zip(ha, hb):
            x, y = f32(x), f32(y)
            d = abs(x - y) if math.isfinite(x) and math.isfinite(y) else (0.0 if x == y or (x != x and y != y)
                                                                          else math.inf)
            max_abs = max(max_abs, d)
            if d:
                max_rel = max(max_rel, d / abs(y) if y else math.inf)
    if len(run["steps"]) != len(ref["steps"]) and first is None:
        first = min(len(run["steps"]), len(ref["steps"]))
    return {"identical": first is None and not config_diff, "first_diff": first, "max_abs": max_abs,
            "max_rel": max_rel, "params_same": run.get("param_checksums") == ref.get("param_checksums"),
            "config_diff": config_diff}


def routes(r):
    rx = r.get("rcclx") or {}
    if not rx.get("loaded"):
        return "not loaded"
    reasons = ((rx.get("process_routes") or {}).get("forwarded") or {}).get("reasons") or {}
    why = f" ({', '.join(f'{k} {v}' for k, v in reasons.items())})" if reasons else ""
    return f"{rx.get('kernel_calls', 0)} ({rx.get('lowp_calls', 0)} lowp), {rx.get('forwarded_calls', 0)} fwd{why}"


def lowp_name(r):
    if not r.get("low_precision"):
        return "-"
    return (r.get("env") or {}).get("RCCLX_LOW_PRECISION_CODEC", "fp8")


def pick_ref(runs, want):
    if want:
        for r in runs:
            if r["label"] == want:
                return r
    for r in runs:
        if r["label"].startswith("stock") and not r.get("low_precision"):
            return r
    return runs[0]


def report(groups, want_ref):
    lines, verdicts, failed = [], [], False
    for mode, runs in groups.items():
        ref = pick_ref(runs, want_ref)
        c = ref["config"]
        lines += [
            f"## {mode}: against `{ref['label']}`",
            "",
            f"{c.get('params', 0) / 1e6:.1f} M parameters, {c.get('world')} ranks x batch {c.get('batch')} x "
            f"{c.get('seq')} tokens, {c.get('steps')} steps (median over steps {c.get('warmup')}..), "
            f"{ref.get('device')}, torch {ref.get('torch')}, NCCL {ref.get('nccl') or '-'}. {ref.get('wrapping')}.",
            "",
            "| run | low precision | median ms/step | ref / run | losses vs ref | first differing step | "
            "max abs diff | max rel diff | final params | rcclx calls: kernels (lowp), forwarded | peak GiB |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in runs:
            is_ref = r is ref
            cmp = compare(r, ref)
            ratio = ref["median_step_ms"] / r["median_step_ms"] if r["median_step_ms"] else math.nan
            if is_ref:
                state = "reference"
            elif cmp["config_diff"]:
                state = f"not comparable (config: {', '.join(cmp['config_diff'])})"
            else:
                state = "**bit-identical**" if cmp["identical"] else "differ"
            lines.append(
                f"| {r['label']} | {lowp_name(r)} | {r['median_step_ms']:.2f} | {ratio:.3f}x | {state} | "
                f"{'-' if cmp['first_diff'] is None else cmp['first_diff']} | "
                f"{'-' if not cmp['max_abs'] else format(cmp['max_abs'], '.3e')} | "
                f"{'-' if not cmp['max_rel'] else format(cmp['max_rel'], '.3e')} | "
                f"{'same' if cmp['params_same'] else 'differ'} | {routes(r)} | "
                f"{r.get('peak_memory_allocated_bytes', 0) / 2**30:.2f} |")
            if is_ref:
                continue
            what = f"{mode}: {r['label']} vs {ref['label']}"
            if r.get("failures"):
                failed = True
                verdicts.append(f"FAIL {what}: the run reported {'; '.join(r['failures'])}")
            elif cmp["config_diff"]:
                failed = True
                verdicts.append(f"FAIL {what}: configurations differ in {', '.join(cmp['config_diff'])}")
            elif r.get("low_precision"):
                verdicts.append(
                    f"INFO {what}: low precision ({lowp_name(r)}), "
                    + ("losses bit-identical (no low-precision call changed a bit; lowp calls: "
                       f"{(r.get('rcclx') or {}).get('lowp_calls', 0)})" if cmp["identical"] else
                       f"losses differ from step {cmp['first_diff']}, max abs {cmp['max_abs']:.3e}, "
                       f"max rel {cmp['max_rel']:.3e}"))
            elif cmp["identical"] and cmp["params_same"]:
                verdicts.append(f"PASS {what}: bit-identical losses ({len(r['steps'])} steps) and final parameters; "
                                f"step time ref/run {ratio:.3f}x")
            else:
                failed = True
                verdicts.append(
                    f"FAIL {what}: " + (f"losses differ from step {cmp['first_diff']} (max abs {cmp['max_abs']:.3e}, "
                                        f"max rel {cmp['max_rel']:.3e})" if not cmp["identical"] else
                                        "losses bit-identical but the final parameters differ"))
        # The loss of every step: the reference's, and each run's difference.
        others = [r for r in runs if r is not ref]
        lines += ["", f"Loss per step (mean over ranks, float64) of `{ref['label']}`, and each run's difference "
                      "(run - ref; 0: every rank's fp32 loss has the same bits):", "",
                  "| step | " + " | ".join([ref["label"]] + [r["label"] for r in others]) + " |",
                  "|---|" + "---|" * (1 + len(others))]
        for i, s in enumerate(ref["steps"]):
            cells = [f"{float(s['loss']):.9f} ({s['loss_hex']})"]
            for r in others:
                if i >= len(r["steps"]):
                    cells.append("-")
                    continue
                o = r["steps"][i]
                cells.append("0" if o["rank_loss_f32_hex"] == s["rank_loss_f32_hex"] else
                             f"{mean_f32(o) - mean_f32(s):+.3e}")
            lines.append(f"| {s['step']} | " + " | ".join(cells) + " |")
        lines += ["", "Files: " + ", ".join(f"`{r['_path']}`" for r in runs), ""]
    lines += ["## Verdict", ""] + [f"- {v}" for v in verdicts] + [""]
    return lines, failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="JSON files of bench/train_e2e.py")
    ap.add_argument("--ref", help="label of the reference run of each variant (default: the first stock run)")
    ap.add_argument("--out", help="also write the markdown to this file")
    ap.add_argument("--report-only", action="store_true", help="exit 0 even when a run differs")
    args = ap.parse_args(argv)
    runs = [load(p) for p in args.files]
    if len(runs) < 2:
        ap.error("give at least two JSON files")
    groups = {}
    for r in runs:
        groups.setdefault(r.get("variant", r["mode"]), []).append(r)
    lines, failed = report(groups, args.ref)
    n_exact = sum(1 for r in runs if not r.get("low_precision"))
    lines.append(f"{'FAIL' if failed else 'PASS'} train compare: {len(runs)} runs of {len(groups)} variant(s), "
                 f"{n_exact} at full precision{' (a run differs or failed)' if failed else ' bit-identical'}, "
                 f"{len(runs) - n_exact} low precision reported")
    text = "# Training end to end: stock NCCL vs rcclx\n\n" + "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if failed and not args.report_only else 0


if __name__ == "__main__":
    sys.exit(main())
