//! The CPU-only part of the GPU suite, run in CI: `lowp_accuracy --host-check --quick` feeds the
//! codec model through the program's own checks (bounds, tolerances, verdicts) as if it were
//! the GPU's output, and plants errors that they must catch. No GPU needed.

use std::process::Command;

#[test]
fn lowp_accuracy_host_check_passes() {
    let out = Command::new(env!("CARGO_BIN_EXE_lowp_accuracy"))
        .args(["--host-check", "--quick"])
        .output()
        .expect("run lowp_accuracy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default();
    println!("{summary}");
    assert!(
        out.status.success(),
        "lowp_accuracy --host-check --quick exited with {}; FAIL lines:\n{}\nstderr:\n{}",
        out.status,
        stdout.lines().filter(|l| !l.starts_with("PASS")).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    let (passed, failed) = summary
        .split_once(" passed, ")
        .and_then(|(p, rest)| Some((p.parse::<usize>().ok()?, rest.strip_suffix(" failed")?.parse::<usize>().ok()?)))
        .unwrap_or_else(|| panic!("no `N passed, M failed` summary, last line {summary:?}"));
    assert_eq!(failed, 0, "{summary}");
    // 5 collectives x 3 types x 5 counts x 2 distributions x 2 placements.
    assert_eq!(passed, 300, "{summary}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("PASS ")).count(), passed);
}
