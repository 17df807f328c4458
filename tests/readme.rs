//! README.md stays in step with the code: its variable table is generated from
//! `rcclx::config::variables()` and checked byte for byte (`RCCLX_BLESS=1 cargo test --test readme`
//! rewrites it, as tests/header.rs does the header), and the test command it names is the one CI
//! runs.

mod common;

fn readme() -> String {
    std::fs::read_to_string(common::repo().join("README.md")).expect("README.md")
}

/// The first line of the table; it ends at the first empty line after it.
const TABLE_HEAD: &str = "| variable | default | meaning |\n|---|---|---|\n";

/// The table as `variables()` gives it: a default a user would type is code, one in words is not.
fn table(vars: &[rcclx::config::Variable]) -> String {
    let mut out = String::from(TABLE_HEAD);
    for v in vars {
        let d = &v.default;
        let words = d.starts_with("unset") || d.starts_with("by ") || d.contains(" + ") || d.ends_with("iB");
        let default = if words { v.default.clone() } else { format!("`{}`", v.default) };
        assert!(!format!("{}{}", v.default, v.meaning).contains('|'), "{}: a `|` would split its row", v.name);
        out += &format!("| `{}` | {default} | {} |\n", v.name, v.meaning);
    }
    out
}

/// (start, end) of the table in `readme`.
fn table_span(readme: &str) -> (usize, usize) {
    let start = readme.find(TABLE_HEAD).expect("README.md has no variable table (`| variable | default | meaning |`)");
    let end = readme[start..].find("\n\n").map_or(readme.len(), |i| start + i + 1);
    (start, end)
}

#[test]
fn the_variable_table_is_generated() {
    let path = common::repo().join("README.md");
    let readme = readme();
    let (start, end) = table_span(&readme);
    let fresh = table(&rcclx::config::variables());
    if std::env::var("RCCLX_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, format!("{}{fresh}{}", &readme[..start], &readme[end..])).unwrap();
        eprintln!("RCCLX_BLESS=1: wrote the variable table of {}", path.display());
        return;
    }
    let committed = &readme[start..end];
    if committed != fresh {
        let (c, f): (Vec<&str>, Vec<&str>) = (committed.lines().collect(), fresh.lines().collect());
        let first = (0..c.len().max(f.len())).find(|&i| c.get(i) != f.get(i)).unwrap_or(0);
        panic!(
            "README.md's variable table is out of date with rcclx::config::variables(). First difference at \
             row {}:\n  README:    {:?}\n  generated: {:?}\nRegenerate with: RCCLX_BLESS=1 cargo test --test readme",
            first + 1,
            c.get(first),
            f.get(first)
        );
    }
}

/// A variable added without its row fails the check above.
#[test]
fn a_variable_without_its_row_is_caught() {
    let mut vars = rcclx::config::variables();
    let readme = readme();
    let (start, end) = table_span(&readme);
    assert_eq!(&readme[start..end], table(&vars), "see the_variable_table_is_generated");
    vars.push(rcclx::config::Variable { name: "RCCLX_NEW", default: "0".into(), meaning: "new".into() });
    assert_ne!(&readme[start..end], table(&vars));
    for name in ["RCCLX_LOG", "NCCL_DEBUG", "RCCLX_DISABLE", "RCCL_ENABLE_DDA_BROADCAST"] {
        assert!(readme[start..end].contains(&format!("| `{name}` |")), "README.md's variable table lacks {name}");
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

/// Every `RCCLX_*` variable the repository's own programs, scripts and documents set or read
/// (`NAME=`, `$NAME`, `${NAME`, `var("NAME"`, `env("NAME"`, `getenv("NAME"`, `environ["NAME"`,
/// `environ.get("NAME"`, `rerun-if-env-changed=NAME`) is a library variable or one of
/// `rcclx::config::TOOL_NAMES`: rcclx never calls the repository's own names unknown, and the
/// list cannot drift from the tree.
#[test]
fn the_repositorys_own_variables_are_never_called_unknown() {
    let vars = rcclx::config::variables();
    let known = |name: &str| {
        vars.iter().any(|v| v.name == name)
            || rcclx::config::TOOL_NAMES.contains(&name)
            || name.starts_with("RCCLX_TEST_")
    };
    let repo = common::repo();
    let out = std::process::Command::new("git").arg("ls-files").current_dir(&repo).output().expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let files = String::from_utf8(out.stdout).expect("file names");
    let exts = [".rs", ".sh", ".py", ".c", ".h", ".cu", ".cuh", ".toml", ".md", "run"];
    let reads =
        ["$", "${", "var(\"", "var_os(\"", "env(\"", "getenv(\"", "environ[\"", "environ.get(\"", "env-changed="];
    let mut unknown = std::collections::BTreeSet::new();
    let mut seen = 0;
    for file in files.lines().filter(|f| exts.iter().any(|e| f.ends_with(e))) {
        let Ok(text) = std::fs::read_to_string(repo.join(file)) else { continue };
        let b = text.as_bytes();
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        for (at, _) in text.match_indices("RCCLX_") {
            if at > 0 && word(b[at - 1]) {
                continue;
            }
            let end = at + b[at..].iter().take_while(|&&c| word(c)).count();
            let name = &text[at..end];
            let set = b.get(end) == Some(&b'=') && b.get(end + 1) != Some(&b'=');
            if set || reads.iter().any(|r| text[..at].ends_with(r)) {
                seen += 1;
                if !known(name) {
                    unknown.insert(format!("{name} ({file})"));
                }
            }
        }
    }
    assert!(seen > 100, "found only {seen} uses of RCCLX_ variables: the scan is broken");
    assert!(
        unknown.is_empty(),
        "names the repository sets or reads that rcclx would warn about (add them to TOOL_NAMES in \
         src/config.rs, or make them library variables):\n  {}",
        unknown.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}
