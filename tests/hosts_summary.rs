//! The judge of issue 47's hosts step (`bench/hosts_summary.py`, written by
//! `scripts/gpu-tests.sh`'s hosts step) on a made-up run: inside every bound it passes, and every
//! planted failure (a failed run, an error past its bound, ranks that disagree, the rail kernels
//! never taken, a special block broken, a loss past its bound, no low-precision call, a missing
//! file) fails it (`bench/test_hosts_summary.py`).

mod common;

#[test]
fn hosts_summary_judges_a_made_up_run() {
    common::python_passes(&["-m", "unittest", "-v", "bench/test_hosts_summary.py"], "");
}
