//! The CPU-only part of the GPU suite, run in CI: `lowp_accuracy --host-check --quick` feeds the
//! codec model through the program's own checks (bounds, tolerances, verdicts) as if it were
//! the GPU's output, and plants errors that they must catch. No GPU needed. Both codecs; 2
//! ranks (AllReduce's exchange form) and 3 (its re-quantizing form).

use std::process::Command;

/// Runs `lowp_accuracy --host-check --quick ARGS` and checks that all `passed` cases passed.
fn host_check(args: &[&str], passed_want: usize) {
    let out = Command::new(env!("CARGO_BIN_EXE_lowp_accuracy"))
        .args(["--host-check", "--quick"])
        .args(args)
        .output()
        .expect("run lowp_accuracy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default();
    println!("{args:?}: {summary}");
    assert!(
        out.status.success(),
        "lowp_accuracy --host-check --quick {args:?} exited with {}; FAIL lines:\n{}\nstderr:\n{}",
        out.status,
        stdout.lines().filter(|l| !l.starts_with("PASS")).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    let (passed, failed) = summary
        .split_once(" passed, ")
        .and_then(|(p, rest)| Some((p.parse::<usize>().ok()?, rest.strip_suffix(" failed")?.parse::<usize>().ok()?)))
        .unwrap_or_else(|| panic!("no `N passed, M failed` summary, last line {summary:?}"));
    assert_eq!(failed, 0, "{args:?}: {summary}");
    assert_eq!(passed, passed_want, "{args:?}: {summary}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("PASS ")).count(), passed);
    assert!(stdout.lines().any(|l| l.starts_with("PASS lp-coverage")), "no low-precision coverage line");
}

#[test]
fn a_filter_that_matches_nothing_fails() {
    let out = Command::new(env!("CARGO_BIN_EXE_lowp_accuracy"))
        .args(["--host-check", "--quick", "--filter", "no such case"])
        .output()
        .expect("run lowp_accuracy");
    assert!(!out.status.success(), "a run that checked nothing passed:\n{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn lowp_accuracy_host_check_passes() {
    // 5 collectives x 3 types x 5 counts x 3 distributions x 2 placements, and one
    // low-precision coverage line per collective.
    host_check(&["--codec", "fp8"], 450 + 5);
}

#[test]
fn lowp_accuracy_host_check_passes_int8() {
    host_check(&["--codec", "int8"], 450 + 5);
}

#[test]
fn lowp_accuracy_host_check_passes_3_ranks() {
    // AllReduce x 3 types x 5 counts x 3 distributions x 2 placements: the re-quantizing form.
    for codec in ["fp8", "int8"] {
        host_check(&["--codec", codec, "--procs", "3", "--filter", "allreduce"], 90 + 1);
    }
}
