//! The summary of issue 41's 2-GPU run (`bench/x2_summary.py`, written by `scripts/gpu-tests.sh`'s
//! x2 step) on the committed 2x H200 logs: its ratios, targets, proposed defaults and model
//! comparison against values recomputed from the JSON files (`bench/test_x2_summary.py`).

mod common;

#[test]
fn x2_summary_on_the_committed_h200x2_logs() {
    common::python_passes(&["-m", "unittest", "-v", "bench/test_x2_summary.py"], "");
}
