#!/usr/bin/env python3
"""Plot bench/moe_a2av.py's JSON: us per layer of every path, one panel per token count.

For each token count of the run, one panel with a group of bars per (routing, expert) row: one
bar per path (PyTorch, rcclx bf16 / FP8 / FP8 coded, eager and graph, local = no exchange), and
the link floors (bf16 and FP8 dispatch) as short horizontal marks. Log y axis.

Only matplotlib is needed (headless "Agg" backend).

Usage:
  python3 bench/plot_moe.py OUTDIR/moe_a2av.json [--out FILE.png] [--dpi N]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

PATHS = [
    ("torch_eager", "PyTorch"),
    ("rcclx_eager", "rcclx bf16 eager"),
    ("rcclx_graph", "rcclx bf16 graph"),
    ("rcclx_fp8_eager", "rcclx FP8 eager"),
    ("rcclx_fp8_graph", "rcclx FP8 graph"),
    ("rcclx_fp8_coded_eager", "rcclx FP8 coded eager"),
    ("rcclx_fp8_coded_graph", "rcclx FP8 coded graph"),
    ("local", "local (no exchange)"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="moe_a2av.json")
    ap.add_argument("--out", help="PNG path (default: next to the JSON, .png)")
    ap.add_argument("--dpi", type=int, default=120)
    a = ap.parse_args()
    with open(a.json) as f:
        result = json.load(f)
    rows = result["rows"]
    tokens = sorted({r["tokens_per_rank"] for r in rows})
    paths = [(p, name) for p, name in PATHS if any(p in r["us_per_layer"] for r in rows)]
    fig, axes = plt.subplots(len(tokens), 1, figsize=(max(8, 1.6 * max(
        sum(r["tokens_per_rank"] == t for r in rows) for t in tokens)), 4.2 * len(tokens)), squeeze=False)
    width = 0.8 / len(paths)
    colors = plt.get_cmap("tab10")
    for ax, t in zip(axes[:, 0], tokens):
        group = [r for r in rows if r["tokens_per_rank"] == t]
        for i, (p, name) in enumerate(paths):
            xs = [g + (i - (len(paths) - 1) / 2) * width for g in range(len(group))]
            ys = [r["us_per_layer"].get(p, float("nan")) for r in group]
            ax.bar(xs, ys, width, label=name, color=colors(i))
        for g, r in enumerate(group):
            for key, style in (("bf16", "-"), ("fp8", "--")):
                floor = r["link_floor_us"][key]
                ax.hlines(floor, g - 0.45, g + 0.45, colors="black", linestyles=style,
                          label=f"link floor, {key} dispatch" if g == 0 else None)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([f"{r['routing']}\n{r['expert']}" + ("" if r["checks_passed"] else "\nCHECKS FAILED")
                            for r in group])
        ax.set_yscale("log")
        ax.set_ylabel("us per layer")
        ax.set_title(f"{t} tokens per rank")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0, 0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(f"MoE layer (dispatch + combine), {result['world']} ranks, hidden {result['hidden']} "
                 f"{result['dtype']}, {result.get('device', '')}; link {result.get('link_gbps', '?')} GB/s")
    fig.tight_layout()
    out = a.out or os.path.splitext(a.json)[0] + ".png"
    fig.savefig(out, dpi=a.dpi)
    print(out)


if __name__ == "__main__":
    main()
