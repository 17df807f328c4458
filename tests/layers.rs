//! The crate's layering stays true: no module of `src/` refers to a module of a higher layer,
//! and the modules' references form no cycle. The layers are the table in `src/lib.rs`'s
//! doc; a new module must be added to [`LAYERS`] (the test fails on an unknown one).

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

/// Top-level modules a source text refers to: `crate::m`, `$crate::m`, `use crate::{m, ...}`.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
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

#[test]
fn modules_form_no_cycle() {
    let g = graph();
    // Depth-first search for a back edge.
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
    for m in g.keys() {
        if let Some(cycle) = visit(m, &g, &mut state, &mut Vec::new()) {
            panic!("modules refer to each other in a cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_references() {
    let refs = references(
        "use crate::{gpu, error::Error};\nfn f() { crate::comm::lookup(); $crate::abi::x(); }\n// crate::dda in a comment\n",
    );
    assert_eq!(refs, ["abi", "comm", "error", "gpu"].iter().map(|s| s.to_string()).collect());
    // Every module of src/ is placed in a layer.
    for m in graph().keys() {
        layer(m);
    }
}
