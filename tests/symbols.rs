//! Symbol completeness of the built `librcclx.so` against the stock symbol lists in
//! `tests/data/`:
//! * `nccl-symbols-cu13.txt`: every `nccl*` / `pnccl*` symbol exported by libnccl.so.2 2.28.9
//!   and 2.32.3 (a consumer linked against either must find all of them; PyTorch binds with
//!   RTLD_NOW, so one missing symbol breaks `import torch`);
//! * `rccl-api.txt`: every function of the newest RCCL header and its `p` twin.
//!
//! Checked twice: `nm -D --defined-only` (the dynamic symbol table) and `dlsym` from C.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

/// Names the library must export.
fn required() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = common::nccl_symbols().into_iter().collect();
    assert!(names.len() >= 193, "nccl-symbols-cu13.txt lists too few symbols ({})", names.len());
    for (name, _, _) in common::rccl_api() {
        names.insert(format!("p{name}"));
        names.insert(name);
    }
    names
}

/// The library's defined dynamic symbols, name -> nm type letter.
fn nm_exports() -> BTreeMap<String, String> {
    let out = common::stdout_of(Command::new("nm").args(["-D", "--defined-only"]).arg(common::lib()), "nm -D");
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[2].to_string(), f[1].to_string()))
        })
        .collect()
}

#[test]
fn nm_lists_every_stock_symbol_as_a_defined_function() {
    let exports = nm_exports();
    let mut problems = Vec::new();
    for name in required() {
        match exports.get(&name).map(String::as_str) {
            Some("T") | Some("W") => {}
            Some(other) => problems.push(format!("{name}: nm type {other}, expected T (text)")),
            None => problems.push(format!("{name}: not exported")),
        }
    }
    assert!(problems.is_empty(), "librcclx.so ({}):\n{}", common::lib().display(), problems.join("\n"));
}

#[test]
fn dlsym_resolves_every_stock_symbol() {
    let dir = common::scratch("symbols-dlsym");
    let exe = dir.join("dlsym_check");
    common::must(
        common::cc()
            .args(common::C_FLAGS)
            .arg(common::repo().join("tests/c/dlsym_check.c"))
            .arg("-ldl")
            .arg("-o")
            .arg(&exe),
        "compiling dlsym_check.c",
    );
    let names = required();
    let own = common::own_functions();
    let mut child = Command::new(&exe)
        .arg(common::lib())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for n in names.iter().chain(&own) {
            writeln!(stdin, "{n}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "dlsym_check: {}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("found {}", names.len() + own.len())), "{stdout}");
}

/// The export list is exactly the table (`nccl*`/`msccl*` and their `p` twins) plus rcclx's
/// own API: nothing missing from the table, and no Rust-internal symbol leaks out.
#[test]
fn exports_are_exactly_the_table_and_the_own_api() {
    let exports: BTreeSet<String> = nm_exports().into_keys().collect();
    let mut expected: BTreeSet<String> = common::own_functions().into_iter().collect();
    for e in rcclx::abi::table::EXPORTS {
        assert!(expected.insert(e.name.to_string()), "{} is twice in the table", e.name);
        expected.insert(format!("p{}", e.name));
    }
    let missing: Vec<_> = expected.difference(&exports).collect();
    let extra: Vec<_> = exports.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "in the table but not exported: {missing:?}\nexported but not in the table: {extra:?}"
    );
}

/// librcclx.so's SONAME is `librcclx.so.0`, the 13 bytes `scripts/set-soname.py` rewrites in
/// the copies installed under the stock names; it has a GNU build ID (debuggers and debuginfod
/// find its debug file by it); it loads on a machine without a GPU stack (GPU runtimes and
/// NCCL are loaded at run time).
#[test]
fn soname_build_id_and_no_gpu_or_nccl_dependency() {
    let dynamic = common::stdout_of(Command::new("readelf").arg("-d").arg(common::lib()), "readelf -d");
    assert!(dynamic.contains("Library soname: [librcclx.so.0]"), "librcclx.so's SONAME:\n{dynamic}");
    let notes = common::stdout_of(Command::new("readelf").arg("-n").arg(common::lib()), "readelf -n");
    assert!(notes.contains("Build ID: "), "librcclx.so has no GNU build ID:\n{notes}");
    for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
        for bad in ["cuda", "nvrtc", "nvidia", "hip", "hsa", "amd", "nccl", "rccl"] {
            assert!(!line.contains(bad), "librcclx.so must not link {bad} at load time: {line}");
        }
    }
}
