"""Error of a low-precision AllReduce across (simulated) hosts, against the same run's reference.

Run under torchrun, one process per rank on one GPU (scripts/sim-host.sh; SIM_LOCAL=L makes
rcclx see hosts of L ranks, unset: one host). Every rank draws every rank's input from a seeded
generator on the CPU, so each knows the exact sum (float64). Per input type (bf16, fp32) and
distribution (normal; a common part plus 0.5 noise: correlated inputs), one AllReduce of
`--elems` elements; rank 0 writes OUT/hosts-error-<label>.json with the relative L2 error of
the output, whether every rank holds the same bits, and the routes rcclx's calls took. Then the
special blocks: zeros stay zero, a NaN stays NaN in its element only (its block's other
elements finite), a block of 1e30 stays finite. The same program without low precision (stock
alone) gives the stock library's error for the comparison (bench/hosts_summary.py).

  torchrun --nproc_per_node=4 --no-python bash scripts/sim-host.sh python3 tests/gpu/hosts_error.py --out OUT --label rcclx-fp8
"""
import argparse
import json
import os
import sys
import zlib

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
import rcclx  # noqa: E402


def inputs(world, n, kind, seed):
    """Every rank's input, float64 [world, n]."""
    g = torch.Generator().manual_seed(seed)
    if kind == "normal":
        return torch.randn(world, n, generator=g, dtype=torch.float64)
    common = torch.randn(1, n, generator=g, dtype=torch.float64)
    return common + 0.5 * torch.randn(world, n, generator=g, dtype=torch.float64)


def same_bits_everywhere(t):
    crc = zlib.crc32(t.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    crcs = [None] * dist.get_world_size()
    dist.all_gather_object(crcs, crc)
    return all(c == crcs[0] for c in crcs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--elems", type=int, default=1 << 22, help="elements per AllReduce (4 Mi)")
    args = ap.parse_args()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    rows, ok = [], True
    for dtype in (torch.bfloat16, torch.float32):
        for kind in ("normal", "common"):
            x = inputs(world, args.elems, kind, 47).to(dtype)
            ref = x.double().sum(0)
            y = x[rank].to(dev)
            dist.all_reduce(y)
            torch.cuda.synchronize()
            err = ((y.double().cpu() - ref).norm() / ref.norm()).item()
            same = same_bits_everywhere(y)
            ok &= same
            rows.append({"dtype": str(dtype).replace("torch.", ""), "inputs": kind, "elems": args.elems,
                         "rel_l2_error": err, "identical_on_every_rank": same})
    # Special blocks (bf16): zeros, one NaN, huge values.
    n = args.elems
    x = inputs(world, n, "normal", 7).to(torch.bfloat16)
    x[:, 0:128] = 0
    x[:, 1024 + 5] = float("nan") if rank == 0 else 1.0
    x[:, 4096:4096 + 128] = 1e30
    y = x[rank].to(dev)
    dist.all_reduce(y)
    y = y.float().cpu()
    special = {
        "zeros_stay_zero": bool((y[0:128] == 0).all()),
        "nan_stays_in_its_element": bool(y[1024 + 5].isnan() and y[1024:1024 + 128].isnan().sum() == 1),
        "huge_block_finite": bool(y[4096:4096 + 128].isfinite().all()),
    }
    ok &= all(special.values())
    routes = {k: v["calls"] for k, v in rcclx.stats()["process"].items()} if rcclx.is_active() else None
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        doc = {"label": args.label, "world": world, "local": os.environ.get("SIM_LOCAL"), "rows": rows,
               "special": special, "routes": routes}
        with open(os.path.join(args.out, f"hosts-error-{args.label}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        for r in rows:
            print(f"{args.label} {r['dtype']} {r['inputs']}: rel L2 error {r['rel_l2_error']:.4%}, "
                  f"identical on every rank: {r['identical_on_every_rank']}")
        print(f"{'PASS' if ok else 'FAIL'} {args.label} w{world}: special {special} routes {routes}")
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
