//! The crate's layering stays true: no module of `src/` refers to a module of a higher layer,
//! and the modules' references form no cycle. The layers are the table in `src/lib.rs`'s
//! doc; a new module must be added to [`LAYERS`] (the test fails on an unknown one).
//!
//! Inside every folder module of `src/` the same holds one level down: a child never uses an
//! item defined in its parent `mod.rs` (which only declares, re-exports and uses its children),
//! and the children form no cycle (see [`no_child_imports_from_its_parent`]).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules by layer, lowest first. A module may use modules of its own layer or below.
const LAYERS: &[&[&str]] = &[
    &["types", "collective", "env", "config", "tuning", "topo", "log", "nvtx", "kernel_table", "nccl_api"],
    &["upstream", "kernels", "intercept"],
    &["gpu"],
    &["error"],
    &["clique"],
    &["dda", "lowp"],
    &["plan"],
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

/// Module -> the other top-level modules it refers to, of the library (`src/`).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    crate_graph(&common::repo().join("src"), "lib.rs", &[])
}

/// Module -> the other top-level modules it refers to (`crate::m`), of the crate whose root file
/// is `root_file` in `src`; folders of `skip` (other crates: `bin/`) are left out.
fn crate_graph(src: &Path, root_file: &str, skip: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        if rel == Path::new(root_file) || skip.iter().any(|s| rel.starts_with(s)) {
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

/// The other crates of the tree: the GPU test programs' library and each program of several
/// files. (`lib.rs`'s layers are the library's alone; here only cycles are refused.)
#[test]
fn no_crate_of_the_tree_has_a_module_cycle() {
    let gpu = common::repo().join("gpu-tests").join("src");
    let mut crates = vec![(gpu.clone(), "lib.rs", vec!["bin"])];
    for e in std::fs::read_dir(gpu.join("bin")).unwrap().flatten() {
        if e.path().is_dir() {
            crates.push((e.path(), "main.rs", vec![]));
        }
    }
    assert!(crates.len() >= 3, "gpu-tests/src and its programs of several files (ranks, lowp_accuracy)");
    for (src, root, skip) in crates {
        let g = crate_graph(&src, root, &skip);
        assert!(!g.is_empty(), "{}: no modules found", src.display());
        if let Some(c) = cycle(&g) {
            panic!("{}: modules refer to each other in a cycle: {}", src.display(), c.join(" -> "));
        }
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

/// The folder modules of `src/` (a folder with a `mod.rs`), as paths below `src/`: `gpu`, `abi/own`.
fn folder_modules() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let sub = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                if p.join("mod.rs").is_file() {
                    out.push(sub.clone());
                }
                walk(&p, &sub, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&common::repo().join("src"), "", &mut out);
    out.sort();
    out
}

/// The leaves of a `use` tree (`a::{b::C, D as E, f}`): (path segments, name it binds).
fn use_leaves(tree: &str) -> Vec<(Vec<String>, String)> {
    let tree = tree.trim();
    let mut out = Vec::new();
    match tree.find('{') {
        Some(open) => {
            let prefix: Vec<String> =
                tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
            let close = tree.rfind('}').unwrap_or(tree.len());
            let (mut depth, mut from) = (0, open + 1);
            let inner_end = close;
            let bytes = tree.as_bytes();
            for i in open + 1..=inner_end {
                let c = if i < inner_end { bytes[i] } else { b',' };
                match c {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    b',' if depth == 0 => {
                        for (mut path, name) in use_leaves(&tree[from..i]) {
                            let mut full = prefix.clone();
                            full.append(&mut path);
                            out.push((full, name));
                        }
                        from = i + 1;
                    }
                    _ => {}
                }
            }
        }
        None if !tree.is_empty() => {
            let (path, alias) = match tree.split_once(" as ") {
                Some((p, a)) => (p, Some(a.trim().to_string())),
                None => (tree, None),
            };
            let path: Vec<String> = path.split("::").map(|s| s.trim().to_string()).collect();
            let name = alias.unwrap_or_else(|| path.last().unwrap().clone());
            out.push((path, name));
        }
        None => {}
    }
    out
}

/// What a folder's `mod.rs` re-exports from its children: bound name -> the child it comes from
/// (`pub use owners::{DeviceBuffer, ..}` -> `DeviceBuffer` -> `owners`; a glob `handles::*`
/// binds `*`). Names it takes from outside the folder (`use crate::x::Y`) map to `""`: they are
/// not defined there either.
fn reexports(mod_rs: &str, children: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code = code_outside_tests(mod_rs);
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let is_use =
            |&(i, _): &(usize, &str)| !stmt[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        let Some((i, _)) = stmt.match_indices("use ").find(is_use) else { continue };
        let head = stmt[..i].trim();
        let head = head.rsplit(['\n', '}', ']']).next().unwrap_or("").trim();
        if !(head.is_empty() || head.starts_with("pub")) {
            continue;
        }
        for (path, name) in use_leaves(&stmt[i + 4..]) {
            let first = path.iter().find(|s| *s != "self").cloned().unwrap_or_default();
            let from = if children.contains(&first) { first } else { String::new() };
            out.insert(name, from);
        }
    }
    out
}

/// The names after each `prefix` of `code` that stands at the start of a path (not inside
/// `a::prefix`), skipping those that go one level further up (`super::super::`).
fn names_at(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix).map(|i| i + at) {
        let before = code[..i].chars().next_back();
        let starts_path = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        let after = &code[i + prefix.len()..];
        if starts_path && after.starts_with('*') {
            out.insert("*".to_string()); // a glob of the parent takes whatever it defines
        } else if starts_path && !after.starts_with("super::") {
            out.extend(paths_after(&code[i..i + prefix.len() + first_path_len(after)], prefix));
        }
        at = i + prefix.len();
    }
    out
}

/// The length of the path element right after a prefix: a name or a `{...}` group.
fn first_path_len(after: &str) -> usize {
    if after.starts_with('{') {
        after.find('}').map_or(after.len(), |e| e + 1)
    } else {
        after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').map(char::len_utf8).sum()
    }
}

/// The names a child of a folder module takes from the folder's `mod.rs`: what follows
/// `super::` (`super::super::` from a file one folder deeper), `crate::folder::` or
/// `$crate::folder::`, and the `macro_rules!` macros of `mod.rs` it invokes.
fn names_from_parent(child_code: &str, depth: usize, folder: &str, macros: &BTreeSet<String>) -> BTreeSet<String> {
    let mut names = names_at(child_code, &"super::".repeat(depth));
    let path = folder.replace('/', "::");
    names.extend(names_at(child_code, &format!("crate::{path}::")).into_iter().filter(|n| n != "super"));
    names.extend(macros.iter().filter(|m| invokes(child_code, m)).cloned());
    names
}

/// Whether `code` invokes the macro `name!` (not `a_name!` nor a path's `x::name!`).
fn invokes(code: &str, name: &str) -> bool {
    let pat = format!("{name}!");
    code.match_indices(&pat).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// Whether a source text defines the item `name` (outside its tests): a type, trait, function,
/// static, constant, module or `macro_rules!` macro.
fn defines(text: &str, name: &str) -> bool {
    let code = code_outside_tests(text);
    ["struct", "enum", "union", "trait", "type", "fn", "static", "const", "mod", "macro_rules!"].iter().any(|kw| {
        code.match_indices(&format!("{kw} {name}")).any(|(i, m)| {
            let before = code[..i].chars().next_back();
            let after = code[i + m.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

/// The `macro_rules!` names a source text defines.
fn macros_defined(code: &str) -> BTreeSet<String> {
    paths_after(code, "macro_rules! ")
}

/// A file's code without the bodies of its inline modules (`mod profiling { .. }`, also in
/// a macro), and those bodies: there `super` is the file itself, one level less up.
fn split_inline_mods(code: &str) -> (String, Vec<String>) {
    let (mut outside, mut inside, mut rest) = (String::new(), Vec::new(), code);
    while let Some(i) = rest.match_indices("mod ").map(|(i, _)| i).find(|&i| {
        let ident = rest[i + 4..].trim_start_matches(|c: char| c.is_alphanumeric() || c == '_' || c == '$');
        !rest[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_')
            && ident.trim_start().starts_with('{')
    }) {
        let open = i + rest[i..].find('{').unwrap();
        let mut depth = 0;
        let close = rest[open..]
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(rest.len(), |(j, _)| open + j);
        outside.push_str(&rest[..open]);
        inside.push(rest[open..close].to_string());
        rest = &rest[close..];
    }
    outside.push_str(rest);
    (outside, inside)
}

/// The layering of one folder module, from its files' texts (`mod.rs` and each child, a child
/// folder's files under `x/`). Returns child -> the siblings it refers to, and the lines naming
/// each use of something defined in `mod.rs`.
fn folder_graph_of(
    folder: &str,
    mod_rs: &str,
    files: &[(String, String)],
) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let child_of = |rel: &str| rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
    let children: BTreeSet<String> = files.iter().map(|(rel, _)| child_of(rel)).collect();
    let exported = reexports(mod_rs, &children);
    let macros = macros_defined(&code_of(mod_rs));
    let (mut g, mut upward): (BTreeMap<String, BTreeSet<String>>, Vec<String>) = (BTreeMap::new(), Vec::new());
    for (rel, text) in files {
        let me = child_of(rel);
        // `x.rs` and `x/mod.rs` sit one level below the folder, `x/y.rs` two.
        let depth = if rel.ends_with("/mod.rs") || !rel.contains('/') { 1 } else { 2 };
        let (code, inline) = split_inline_mods(&code_outside_tests(text));
        let mut names = names_from_parent(&code, depth, folder, &macros);
        for body in inline {
            names.extend(names_from_parent(&body, depth + 1, folder, &macros));
        }
        let siblings = g.entry(me.clone()).or_default();
        for n in names {
            if children.contains(&n) {
                siblings.insert(n);
            } else if defines(mod_rs, &n) || n == "*" {
                upward.push(format!("src/{folder}/{rel} takes `{n}` from src/{folder}/mod.rs"));
            } else if let Some(from) = exported.get(&n).or_else(|| exported.get("*")) {
                if !from.is_empty() {
                    siblings.insert(from.clone());
                }
            } else {
                upward.push(format!("src/{folder}/{rel} takes `{n}` from src/{folder}/mod.rs"));
            }
        }
        siblings.remove(&me);
    }
    (g, upward)
}

/// [`folder_graph_of`] for a folder module of `src/`, read from disk.
fn folder_graph(folder: &str) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let dir = common::repo().join("src").join(folder);
    let mut paths = Vec::new();
    rust_files(&dir, &mut paths);
    paths.sort();
    let mut files = Vec::new();
    for p in paths {
        let rel = p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
        if rel != "mod.rs" {
            files.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
    folder_graph_of(folder, &std::fs::read_to_string(dir.join("mod.rs")).unwrap(), &files)
}

/// Uses of a parent `mod.rs` still to be moved into a child, as `src/folder/file.rs takes `x``
/// prefixes; each entry is a known debt, and the test fails once it is paid (remove it then).
/// `dda::blocks_for` waits for the branch that is reworking `src/dda`.
const KNOWN_UPWARD: &[&str] = &[];

/// In every folder module of `src/` (a folder with a `mod.rs`, `abi/own` included), the rule of
/// the top-level layers holds one level down:
/// * a child (`x.rs`, or the folder `x/`) never uses an item *defined in* the folder's `mod.rs`
///   (a type, function, static or `macro_rules!` macro), whether as `super::item`,
///   `crate::folder::item` or `item!`; `mod.rs` only declares its children, re-exports them and
///   uses them. A name that `mod.rs` re-exports from a child (`pub use owners::DeviceBuffer`,
///   or any name behind a glob `pub use handles::*`) counts as a use of that child; one it
///   re-exports from outside the folder is not its own either. Code in a child's
///   `#[cfg(test)] mod tests` is not checked (its `super` is the child itself).
/// * the children's uses of each other (direct or through such re-exports) form no cycle.
#[test]
fn no_child_imports_from_its_parent() {
    let mut upward = Vec::new();
    for folder in folder_modules() {
        let (g, up) = folder_graph(&folder);
        upward.extend(up);
        if let Some(c) = cycle(&g) {
            panic!("files of src/{folder} refer to each other in a cycle: {}", c.join(" -> "));
        }
    }
    let known = |u: &String| KNOWN_UPWARD.iter().any(|k| u.starts_with(k));
    let (known_now, new): (Vec<String>, Vec<String>) = upward.into_iter().partition(known);
    assert!(new.is_empty(), "imports that run up to a parent:\n  {}", new.join("\n  "));
    for k in KNOWN_UPWARD {
        assert!(known_now.iter().any(|u| u.starts_with(k)), "`{k}` is fixed: remove it from KNOWN_UPWARD");
    }
}

#[test]
fn the_folder_checker_sees_uses_of_the_parent() {
    let mod_rs = "macro_rules! gen { () => {} }\nmod a;\nmod b;\nmod c;\npub use a::{A, inner::{B as Bee}};\n\
                  pub(crate) use b::*;\nuse crate::other::Far;\npub struct Up;\nfn helper() {}\npub(crate) use gen;\n";
    let files = |a: &str, b: &str| {
        vec![
            ("a.rs".to_string(), a.to_string()),
            ("b.rs".to_string(), b.to_string()),
            ("c/mod.rs".into(), String::new()),
        ]
    };
    // Re-exports of siblings and of outside items are fine; items defined in mod.rs are not.
    let (g, up) = folder_graph_of("f", mod_rs, &files("use super::{Far, b::X};\n", "use super::{A, Bee, Glob};\n"));
    assert!(up.is_empty(), "{up:?}");
    assert_eq!(g["a"], ["b".to_string()].into());
    assert_eq!(g["b"], ["a".to_string()].into());
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "a"]);
    let (_, up) = folder_graph_of(
        "f",
        mod_rs,
        &files(
            "use super::Up;\nuse super::*;\nfn f() { crate::f::helper(); super::Glob; super::Bee; gen!(); super::super::Elsewhere; }\n\
             mod tests {\n    use super::*;\n}\n",
            "",
        ),
    );
    assert_eq!(
        up,
        ["src/f/a.rs takes `*`", "src/f/a.rs takes `Up`", "src/f/a.rs takes `gen`", "src/f/a.rs takes `helper`"]
            .map(|s| format!("{s} from src/f/mod.rs"))
    );
    // A file one folder down reaches the folder's mod.rs with `super::super::`.
    let (_, up) = folder_graph_of("f", mod_rs, &[("c/d.rs".into(), "use super::super::Up;\nuse super::Own;\n".into())]);
    assert_eq!(up, ["src/f/c/d.rs takes `Up` from src/f/mod.rs"]);
    // In an inline module, `super` is the file itself and `super::super` the folder.
    let (_, up) = folder_graph_of(
        "f",
        mod_rs,
        &files("mod profiling {\n    use super::*;\n    fn g() { super::super::helper(); }\n}\n", ""),
    );
    assert_eq!(up, ["src/f/a.rs takes `helper` from src/f/mod.rs"]);
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
