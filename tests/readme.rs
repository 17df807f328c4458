//! README.md stays in step with the code: every configuration variable of `src/config.rs` is in
//! its table, and the test command it names is the one CI runs.

mod common;

fn readme() -> String {
    std::fs::read_to_string(common::repo().join("README.md")).expect("README.md")
}

#[test]
fn every_config_variable_is_documented() {
    let readme = readme();
    let missing: Vec<&str> = rcclx::config::variables()
        .iter()
        .map(|v| v.name)
        .filter(|name| !readme.contains(&format!("| `{name}` |")))
        .collect();
    assert!(missing.is_empty(), "README.md's variable table lacks: {missing:?}");
    for name in ["RCCLX_LOG", "NCCL_DEBUG"] {
        assert!(readme.contains(&format!("| `{name}` |")), "README.md's variable table lacks {name}");
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = readme();
    assert!(readme.contains("\nbash ci/test.sh\n"), "README.md must give `bash ci/test.sh` as the test command");
    assert!(readme.contains("\nbash scripts/run.sh\n"), "README.md must give `bash scripts/run.sh` as the run command");
    let run = std::fs::read_to_string(common::repo().join(".ci/run")).expect(".ci/run");
    assert!(run.lines().any(|l| l.trim() == "exec bash ci/test.sh"), ".ci/run must run `bash ci/test.sh`:\n{run}");
}
