//! The comparison of issue 46's simulated hosts (`bench/sim_compare.py`, written by
//! `scripts/gpu-tests.sh`'s sim step) on the committed one-H100 logs: the run passes, and every
//! failure planted in a copy of its logs (a wrong case, a collective that never reached rcclx,
//! a loss or logits past their bound, a missing part, a misconfiguration without its warnings)
//! fails it for that reason (`bench/test_sim_compare.py`).

mod common;

#[test]
fn sim_compare_on_the_committed_h100_logs() {
    common::python_passes(&["-m", "unittest", "-v", "bench/test_sim_compare.py"], "");
}
