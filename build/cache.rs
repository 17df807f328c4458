//! Compiled kernels kept by the digest of everything they depend on, in
//! `<target>/<profile>/kernel-cache/<stem>-<digest>/`, so that each is compiled once per
//! checkout. Cargo runs a build script again, in a new `OUT_DIR`, whenever the crate's
//! fingerprint changes: `cargo clippy` (its compiler wrapper) is one, and before this cache the
//! test command compiled every kernel twice. A hit copies the outputs into `OUT_DIR`. Shared by
//! `build/main.rs` and `gpu-tests/build.rs`. Uses only `std`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Entries kept per stem (older ones are removed when one is stored): a few recent versions of
/// the kernels, for switching branches.
const KEEP: usize = 4;
/// What stands for `OUT_DIR` in the cached copies of generated Rust files (their
/// `include_bytes!` paths).
const OUT_DIR_MARK: &str = "@RCCLX_OUT_DIR@";
/// The list of an entry's files, first line the compilers used (for `rerun-if-changed`).
const MANIFEST: &str = "manifest.txt";

/// A digest of `text`, every file of `dirs` (names and contents), the compiler settings of
/// `toolchain::ENV_VARS` and `require`, as 16 hex digits.
pub fn digest(text: &str, dirs: &[&Path], require: bool) -> String {
    let mut all = String::from(text);
    // PATH itself is left out: the compilers it resolves to are in `text`
    // (`toolchain::available`), and pip's isolated builds put a fresh temporary folder on it
    // every time.
    for var in crate::toolchain::ENV_VARS.iter().filter(|v| **v != "PATH") {
        all.push_str(&format!("{var}={:?}\n", std::env::var_os(var)));
    }
    all.push_str(&format!("require={require}"));
    for dir in dirs {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        files.sort();
        for f in files {
            all.push_str(&f.display().to_string());
            all.push_str(&std::fs::read_to_string(&f).unwrap_or_default());
        }
    }
    let h = all.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{h:016x}")
}

/// `<target>/<profile>/kernel-cache`, from `OUT_DIR` (`<target>/<profile>/build/<crate>-<hash>/out`);
/// `None` for any other layout (then nothing is cached).
fn root(out_dir: &Path) -> Option<PathBuf> {
    let build = out_dir.parent()?.parent()?;
    if build.file_name()? != "build" || out_dir.file_name()? != "out" {
        return None;
    }
    Some(build.parent()?.join("kernel-cache"))
}

/// Copies the entry `stem`-`digest` into `out_dir`; the compilers that made it, or `None` when
/// there is no such entry. They are watched as the compile would have (`rerun-if-changed`).
pub fn restore(out_dir: &Path, stem: &str, digest: &str) -> Option<Vec<String>> {
    let dir = root(out_dir)?.join(format!("{stem}-{digest}"));
    let manifest = std::fs::read_to_string(dir.join(MANIFEST)).ok()?;
    let mut lines = manifest.lines();
    let tools = lines.next().unwrap_or_default();
    let out = out_dir.to_str().expect("OUT_DIR is not UTF-8");
    for name in lines {
        let (from, to) = (dir.join(name), out_dir.join(name));
        let copied = if name.ends_with(".rs") {
            std::fs::read_to_string(&from).map(|t| crate::report::write_if_changed(&to, &t.replace(OUT_DIR_MARK, out)))
        } else {
            std::fs::copy(&from, &to).map(drop)
        };
        if copied.is_err() {
            return None; // a broken entry: compile instead
        }
    }
    let tools: Vec<String> = tools.split('\t').filter(|t| !t.is_empty()).map(String::from).collect();
    for tool in &tools {
        println!("cargo:rerun-if-changed={tool}");
    }
    let _ = touch(&dir);
    Some(tools)
}

/// Stores `files` (names in `out_dir`) as the entry `stem`-`digest`, made with `tools`; keeps the
/// newest [`KEEP`] entries of `stem`. Best effort: a cache that cannot be written costs a compile.
pub fn store(out_dir: &Path, stem: &str, digest: &str, files: &[String], tools: &[String]) {
    let Some(root) = root(out_dir) else { return };
    let (dir, tmp) =
        (root.join(format!("{stem}-{digest}")), root.join(format!(".{stem}-{digest}.{}", std::process::id())));
    let out = out_dir.to_str().expect("OUT_DIR is not UTF-8");
    let stored = (|| -> std::io::Result<()> {
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        for name in files {
            let from = out_dir.join(name);
            if name.ends_with(".rs") {
                std::fs::write(tmp.join(name), std::fs::read_to_string(&from)?.replace(out, OUT_DIR_MARK))?;
            } else {
                std::fs::copy(&from, tmp.join(name))?;
            }
        }
        std::fs::write(tmp.join(MANIFEST), format!("{}\n{}\n", tools.join("\t"), files.join("\n")))?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir)
    })();
    if stored.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        return;
    }
    let mut entries: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&root)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&format!("{stem}-"))))
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    entries.sort_by_key(|e| std::cmp::Reverse(e.0));
    for (_, old) in entries.into_iter().skip(KEEP) {
        let _ = std::fs::remove_dir_all(old);
    }
}

/// Marks `dir` as just used (its modification time), so that pruning keeps it.
fn touch(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.set_modified(std::time::SystemTime::now())
}
