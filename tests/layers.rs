//! The crate's layering stays true: no module of `src/` refers to a module of a higher layer,
//! and the modules' references form no cycle. The layers are the table in `src/lib.rs`'s
//! doc; a new module must be added to [`LAYERS`] (the test fails on an unknown one).
//!
//! Inside the folders of [`FLAT_FOLDERS`] the same holds one level down: a child file never
//! refers to its parent `mod.rs` (which only declares and re-exports its children), and the
//! children form no cycle.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules by layer, lowest first. A module may use modules of its own layer or below.
const LAYERS: &[&[&str]] = &[
    &["types", "collective", "env", "config", "tuning", "log", "nvtx", "kernel_table", "nccl_api"],
    &["upstream", "kernels", "intercept"],
    &["gpu"],
    &["error"],
    &["clique"],
    &["dda", "lowp"],
    &["comm"],
    &["abi"],
];

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is not in tests/layers.rs LAYERS: add it to its layer"))
}

/// The top-level module a file of `src/` belongs to (`src/comm/order.rs` -> `comm`).
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// Folders of `src/` whose children must not import from their `mod.rs` (a child names its
/// sibling: `super::args::MAX_RANKS`, never `super::MAX_RANKS`).
const FLAT_FOLDERS: &[&str] = &["clique"];

/// A source text without its `//` comments.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level modules a source text refers to: `crate::m`, `$crate::m`, `use crate::{m, ...}`.
fn references(text: &str) -> BTreeSet<String> {
    paths_after(&code_of(text), "crate::")
}

/// The first names after each `prefix` of `code`: `prefix m` and `prefix {m, n::x, ...}`.
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module -> the other top-level modules it refers to.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = common::repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel == Path::new("lib.rs") {
            continue;
        }
        let m = module_of(rel);
        let text = std::fs::read_to_string(&f).unwrap();
        // Macro names exported at the crate root (`crate::nccl_api!`) belong to their module.
        let refs: BTreeSet<String> = references(&text).into_iter().filter(|r| *r != m).collect();
        g.entry(m).or_default().extend(refs);
    }
    g
}

#[test]
fn no_module_uses_a_higher_layer() {
    let mut wrong = Vec::new();
    for (m, refs) in graph() {
        for r in refs {
            if layer(&r) > layer(&m) {
                wrong.push(format!("{m} (layer {}) uses {r} (layer {})", layer(&m), layer(&r)));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that run up a layer:\n  {}", wrong.join("\n  "));
}

/// A cycle of `g`, if it has one (depth-first search for a back edge).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        m: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| *p == m).unwrap();
                let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(m, 1);
        path.push(m);
        for r in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(r, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m, 2);
        None
    }
    let mut state = BTreeMap::new();
    g.keys().find_map(|m| visit(m, g, &mut state, &mut Vec::new()))
}

#[test]
fn modules_form_no_cycle() {
    if let Some(c) = cycle(&graph()) {
        panic!("modules refer to each other in a cycle: {}", c.join(" -> "));
    }
}

/// A child file's code outside its `#[cfg(test)] mod tests` (whose `super` is the file itself).
fn code_outside_tests(text: &str) -> String {
    let code = code_of(text);
    match code.find("\nmod tests {") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

/// For a folder of `src/`: child -> the siblings it refers to, and the names it takes from the
/// parent `mod.rs` (anything after `super::` or `crate::FOLDER::` that is not a sibling).
fn folder_graph(folder: &str) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let dir = common::repo().join("src").join(folder);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && !p.ends_with("mod.rs"))
        .collect();
    files.sort();
    let stem = |p: &Path| p.file_stem().unwrap().to_string_lossy().into_owned();
    let children: BTreeSet<String> = files.iter().map(|p| stem(p)).collect();
    let (mut g, mut upward) = (BTreeMap::new(), Vec::new());
    for f in &files {
        let me = stem(f);
        let code = code_outside_tests(&std::fs::read_to_string(f).unwrap());
        let mut names = paths_after(&code, "super::");
        names.extend(paths_after(&code, &format!("crate::{folder}::")));
        let mut siblings = BTreeSet::new();
        for n in names {
            if children.contains(&n) {
                siblings.insert(n);
            } else {
                upward.push(format!("src/{folder}/{me}.rs takes `{n}` from src/{folder}/mod.rs"));
            }
        }
        siblings.remove(&me);
        g.insert(me, siblings);
    }
    (g, upward)
}

#[test]
fn no_child_imports_from_its_parent() {
    for folder in FLAT_FOLDERS {
        let (g, upward) = folder_graph(folder);
        assert!(upward.is_empty(), "imports that run up to a parent:\n  {}", upward.join("\n  "));
        if let Some(c) = cycle(&g) {
            panic!("files of src/{folder} refer to each other in a cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_references() {
    let refs = references(
        "use crate::{gpu, error::Error};\nfn f() { crate::comm::lookup(); $crate::abi::x(); }\n// crate::dda in a comment\n",
    );
    assert_eq!(refs, ["abi", "comm", "error", "gpu"].iter().map(|s| s.to_string()).collect());
    let code =
        code_outside_tests("use super::{args::X, lease};\nfn f() { super::Up; }\nmod tests {\n    use super::*;\n}\n");
    assert_eq!(paths_after(&code, "super::"), ["Up", "args", "lease"].iter().map(|s| s.to_string()).collect());
    // A cycle is found, and a chain is not one.
    let g = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert!(cycle(&g(&[("a", "b"), ("b", "c")])).is_none());
    assert_eq!(cycle(&g(&[("a", "b"), ("b", "a")])).unwrap(), ["a", "b", "a"]);
    // Every module of src/ is placed in a layer.
    for m in graph().keys() {
        layer(m);
    }
}
