"""bench/hosts_summary.py on a made-up hosts step: a run inside every bound passes, and each
failure planted in a copy (a run that failed, an error past its bound, ranks that disagree, a
run that never took the rail kernels, a special block that broke, a loss past its bound, a
low-precision run whose low-precision calls never ran, a missing file) fails it.

  python3 -m unittest -v bench/test_hosts_summary.py
"""
import copy
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hosts_summary  # noqa: E402

RUNS = ["hosts-exact-2x2 rc=0     12s  3675 passed, 0 failed",
        "hosts-fp8-2x2 rc=0      9s  60 passed, 0 failed",
        "hosts-kill-rcclx rc=0     40s  PASS ended by itself"]


def error_doc(label, scale, hier=True):
    rows = [{"dtype": d, "inputs": k, "elems": 1 << 22, "rel_l2_error": scale * (2 if k == "normal" else 1),
             "identical_on_every_rank": True} for d in ("bfloat16", "float32") for k in ("normal", "common")]
    return {"label": label, "world": 4, "rows": rows,
            "special": {"zeros_stay_zero": True, "nan_stays_in_its_element": True, "huge_block_finite": True},
            "routes": {"allreduce.hier_lowp": 3} if hier else {"allreduce.lowp": 3}}


def train_doc(label, losses, lowp_calls):
    return {"label": label, "steps": [{"step": i, "loss": repr(x)} for i, x in enumerate(losses)],
            "rcclx": {"lowp_calls": lowp_calls}}


class HostsSummary(unittest.TestCase):
    def make(self, plant=None):
        out = tempfile.mkdtemp()
        hosts = os.path.join(out, "hosts")
        os.makedirs(os.path.join(hosts, "train"))
        docs = {
            "hosts-error-stock.json": error_doc("stock", 0.001, hier=False),
            "hosts-error-rcclx-fp8.json": error_doc("rcclx-fp8", 0.036),
            "hosts-error-rcclx-fp8-1host.json": error_doc("rcclx-fp8-1host", 0.035, hier=False),
            "hosts-error-rcclx-int8.json": error_doc("rcclx-int8", 0.0095),
            "hosts-error-rcclx-int8-1host.json": error_doc("rcclx-int8-1host", 0.009, hier=False),
            "train/train-ddp-stock.json": train_doc("stock", [9.0, 8.5, 8.37], 0),
            "train/train-ddp-rcclx-lowp.json": train_doc("rcclx-lowp", [9.0, 8.5001, 8.3702], 40),
        }
        runs = list(RUNS)
        if plant:
            runs = plant(docs, runs) or runs
        with open(os.path.join(out, "summary.txt"), "w") as f:
            f.write("rcclx GPU tests\n" + "\n".join(runs) + "\n")
        for name, doc in docs.items():
            if doc is not None:
                with open(os.path.join(hosts, name), "w") as f:
                    json.dump(doc, f)
        return out

    def verdict(self, out):
        return hosts_summary.main([out])

    def test_a_run_within_every_bound_passes(self):
        self.assertEqual(self.verdict(self.make()), 0)

    def test_every_planted_failure_fails(self):
        def set_row(name, key, value):
            def plant(docs, runs):
                docs[name] = copy.deepcopy(docs[name])
                docs[name]["rows"][1][key] = value
            return plant

        def special(docs, runs):
            docs["hosts-error-rcclx-int8.json"]["special"]["huge_block_finite"] = False

        def routes(docs, runs):
            docs["hosts-error-rcclx-fp8.json"]["routes"] = {"forwarded": 5}

        def loss(docs, runs):
            docs["train/train-ddp-rcclx-lowp.json"] = train_doc("rcclx-lowp", [9.0, 8.6, 8.37], 40)

        def no_lowp(docs, runs):
            docs["train/train-ddp-rcclx-lowp.json"]["rcclx"]["lowp_calls"] = 0

        def missing(docs, runs):
            docs["hosts-error-rcclx-int8-1host.json"] = None

        def failed_run(docs, runs):
            return runs + ["hosts-int8-4x2 rc=1      9s  59 passed, 1 failed"]

        plants = {
            "error past its bound": set_row("hosts-error-rcclx-fp8.json", "rel_l2_error", 0.05),
            "ranks disagree": set_row("hosts-error-rcclx-int8.json", "identical_on_every_rank", False),
            "special block": special,
            "rail kernels never ran": routes,
            "loss past its bound": loss,
            "no low-precision call": no_lowp,
            "missing file": missing,
            "failed run": failed_run,
        }
        for why, plant in plants.items():
            with self.subTest(why):
                self.assertEqual(self.verdict(self.make(plant)), 1, why)


if __name__ == "__main__":
    unittest.main()
