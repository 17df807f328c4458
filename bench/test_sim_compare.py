"""bench/sim_compare.py on the committed run of the sim step (no GPU): one H100, 2-8 ranks as
processes on it, stock NCCL 2.28.9 against rcclx (bench/results/2026-12-07-h100x1-sim). The
run passes; each way it could have gone wrong, planted in a copy of its logs, fails it with a
reason that names it. Counts are recomputed here from the JSON files, not copied from a run.

    python3 -m unittest bench/test_sim_compare.py     (tests/sim_compare.rs runs it)
"""
import glob
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sim_compare as sc  # noqa: E402

RUN = "2026-12-07-h100x1-sim"
LOGS = os.path.join(HERE, "results", RUN, "logs.tar.gz")


def load(path):
    with open(path) as f:
        return json.load(f)


def save(path, r):
    with open(path, "w") as f:
        json.dump(r, f)


def edit(path, change):
    """Rewrites the text file at path as change(text)."""
    with open(path) as f:
        text = change(f.read())
    with open(path, "w") as f:
        f.write(text)


class SimCompare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        with tarfile.open(LOGS) as t:
            t.extractall(cls.tmp, filter="data")
        cls.out = os.path.join(cls.tmp, RUN)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def planted(self, change):
        """sim_compare's rows for a copy of the run that `change(out)` edited."""
        out = tempfile.mkdtemp(dir=self.tmp)
        shutil.copytree(self.out, out, dirs_exist_ok=True)
        change(out)
        return sc.compare(out)

    def failed(self, rows, needle):
        why = [w for r in rows for w in r["why"]]
        self.assertTrue(any(needle in w for w in why), f"{needle!r} not among the failures {why}")

    def test_the_committed_run_passes(self):
        rows, ok = sc.compare(self.out)
        self.assertTrue(ok, [r for r in rows if r["why"]])
        torch_rows = [r for r in rows if r["program"] == "PyTorch cases"]
        self.assertEqual([r["world"] for r in torch_rows], [2, 3, 4, 6, 8])
        for r in torch_rows:
            cases = load(os.path.join(self.out, "sim", f"torch-cases-rcclx-w{r['world']}.json"))["cases"]
            self.assertEqual(r["cases"], len(cases))
            self.assertEqual(r["wrong"], "0 / 0")
        programs = {r["program"] for r in rows}
        for p in ("training ddp (rcclx)", "training ddp (rcclx-lowp)", "training fsdp2 (rcclx)",
                  "training fsdp2 (rcclx-lowp)", "tensor-parallel decode", "rcclx_check (sim-check-w8)",
                  "RCCLX_SIM_HOSTID set wrong (wrong-ids)", "RCCLX_SIM_HOSTID set wrong (wrong-unmapped)"):
            self.assertIn(p, programs)
        check = next(r for r in rows if r["program"].startswith("rcclx_check"))
        text = sc.read(os.path.join(self.out, "sim-check-w8.log"))
        passed = int(re.search(r"^(\d+) passed, 0 failed", text, re.M).group(1))
        self.assertEqual(check["cases"], passed)

    def test_the_sm_budget_rows_need_every_rank_and_the_exit_status(self):
        def plant(said, rc):
            def change(out):
                with open(os.path.join(out, "sim-budget-4.log"), "w") as f:
                    f.write(f'ranks saying "every grid at most 4 blocks": {said} of 4\n')
                with open(os.path.join(out, "summary.txt"), "a") as f:
                    f.write(f"sim-budget-4                 rc={rc}\n")
            return change
        rows = self.planted(plant(4, 0))[0]
        row = next(r for r in rows if r["program"] == "rcclx_check, NCCL_MAX_CTAS=4")
        self.assertEqual(row["why"], [])
        self.failed(self.planted(plant(3, 1))[0], "3 of 4 ranks said so")
        self.failed(self.planted(plant(4, 1))[0], "exit status 1")

    def test_a_wrong_case_fails(self):
        def plant(out):
            path = os.path.join(out, "sim", "torch-cases-rcclx-w6.json")
            r = load(path)
            r["cases"][17]["wrong_ranks"] = [4]
            save(path, r)
        self.failed(self.planted(plant)[0], "wrong cases: rcclx 1")

    def test_a_collective_that_never_reached_rcclx_fails(self):
        def plant(out):  # every broadcast of the 8-rank run forwarded
            path = os.path.join(out, "sim", "torch-cases-rcclx-w8.json")
            r = load(path)
            for c in r["cases"]:
                if c["routes"] and any(k.startswith("broadcast.") for k in c["routes"]):
                    c["routes"] = {"forwarded": 1}
            save(path, r)
        self.failed(self.planted(plant)[0], "no rcclx kernel for broadcast in section coll")

    def test_other_bits_than_stock_on_an_exact_case_fail(self):
        def plant(out):
            path = os.path.join(out, "sim", "torch-cases-rcclx-w4.json")
            r = load(path)
            next(c for c in r["cases"] if c["exact"])["crc"] ^= 1
            save(path, r)
        self.failed(self.planted(plant)[0], "exact cases with other bits than stock's: 1")

    def test_a_loss_past_its_bound_fails(self):
        def plant(out):  # rcclx's fsdp2 losses 1 % off stock's: past 2^-9
            path = os.path.join(out, "sim", "train", "train-fsdp2-rcclx.json")
            r = load(path)
            for s in r["steps"]:
                s["rank_loss_f32_hex"] = ["0x" + ((int(h, 16) + 0x28000) & 0xFFFFFFFF).to_bytes(4, "big").hex()
                                          for h in s["rank_loss_f32_hex"]]
            save(path, r)
        self.failed(self.planted(plant)[0], "loss off by")

    def test_low_precision_that_did_not_run_fails(self):
        def plant(out):
            path = os.path.join(out, "sim", "train", "train-ddp-rcclx-lowp.json")
            r = load(path)
            r["rcclx"]["lowp_calls"] = 0
            save(path, r)
        self.failed(self.planted(plant)[0], "no low-precision kernel ran")

    def test_logits_past_the_models_sensitivity_fail(self):
        def plant(out):
            edit(os.path.join(out, "sim-tp-rcclx.log"),
                 lambda t: re.sub(r"decode_logits_rel_l2=\S+", "decode_logits_rel_l2=5.0e-02", t))
        self.failed(self.planted(plant)[0], "decode logits off by 0.05")

    def test_a_failed_checker_case_fails(self):
        def plant(out):
            edit(os.path.join(out, "sim-check-w8.log"),
                 lambda t: re.sub(r"^(\d+) passed, 0 failed", r"\1 passed, 1 failed", t, flags=re.M))
        self.failed(self.planted(plant)[0], "1 cases failed")

    def test_a_misconfiguration_without_its_warnings_fails(self):
        def plant(out):
            edit(os.path.join(out, "sim-wrong-ids.log"),
                 lambda t: "\n".join(line for line in t.splitlines() if "simulated host" not in line))
        self.failed(self.planted(plant)[0], "0 of 4 ranks warned")

    def test_a_missing_part_fails(self):
        def plant(out):
            for f in glob.glob(os.path.join(out, "sim", "torch-cases-stock-w3.json")):
                os.remove(f)
        self.failed(self.planted(plant)[0], "no stock run")


if __name__ == "__main__":
    unittest.main()
