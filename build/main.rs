//! Build script: compiles rcclx's GPU kernels ahead of time and embeds them in the library.
//!
//! 1. `instances.cu` in `$OUT_DIR`: one `extern "C"` kernel per entry of the kernel table
//!    (`src/kernel_table.rs`, included here as it is), instantiating the device functions of
//!    `hip_kernels/rcclx.cuh`.
//! 2. That translation unit is compiled once per GPU target (`toolchain.rs`: sm_90, gfx942,
//!    gfx950); a target without a compiler is skipped with one warning (the library then only
//!    forwards on that GPU).
//! 3. `$OUT_DIR/kernels.rs` lists the built code objects (`CODE_OBJECTS`, included by
//!    `src/kernels.rs`); `$OUT_DIR/kernel-resources.txt` holds per-kernel register use.
//! 4. `isa_check.rs` reads the machine code of every code object (releases keep their waits, no
//!    scratch, no spills) and writes `$OUT_DIR/isa-check.txt`; with `RCCLX_REQUIRE_KERNELS=1` a
//!    finding fails the build.
//!
//! The compiles are skipped when nothing they depend on changed since the last run (a stamp of
//! the translation unit, `hip_kernels/` and the compiler settings), and copied from
//! `cache.rs` when another run of this target directory made them (clippy's): the script also
//! re-runs when the git commit changes, to embed the commit hash (`RCCLX_GIT_HASH`) in the library.
//!
//! Environment (besides the compiler paths of `toolchain.rs`):
//! * `RCCLX_REQUIRE_KERNELS=1` (CI): a missing compiler or a failed compile is an error.
//! * `RCCLX_KERNEL_REPORT=1`: print per-kernel resource usage as warnings (also on with REQUIRE).
//! * `RCCLX_NO_KERNELS=1`: build no kernels at all (forward-only library, fastest build).

use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

mod cache;
mod isa_check;
#[path = "../src/kernel_table.rs"]
#[allow(dead_code)]
mod kernel_table;
mod report;
mod toolchain;

fn main() {
    println!("cargo:rerun-if-changed=hip_kernels");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=src/kernel_table.rs");
    for var in toolchain::ENV_VARS.iter().chain(&[
        "RCCLX_REQUIRE_KERNELS",
        "RCCLX_KERNEL_REPORT",
        "RCCLX_NO_KERNELS",
        "RCCLX_CUOBJDUMP",
        isa_check::OFF_VAR,
    ]) {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let repo = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rustc-env=RCCLX_GIT_HASH={}", git_hash(&repo));
    // The library's own SONAME; scripts/install.sh rewrites it in the copies it installs under
    // the stock names (scripts/set-soname.py: a name of up to these 13 bytes fits in place).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librcclx.so.0");
    let require = toolchain::flag("RCCLX_REQUIRE_KERNELS");
    let report = require || toolchain::flag("RCCLX_KERNEL_REPORT");

    if toolchain::flag("RCCLX_NO_KERNELS") {
        assert!(!require, "RCCLX_NO_KERNELS=1 and RCCLX_REQUIRE_KERNELS=1 contradict each other");
        println!("cargo:warning=rcclx: RCCLX_NO_KERNELS=1: no GPU kernels built; the library will only forward");
        report::write_if_changed(&out_dir.join("kernels.rs"), &report::code_object_table(&[]));
        // The empty table replaced the built one: a later build with kernels must not take the
        // stamp of the last compile as "unchanged" (it would keep this empty table).
        let _ = std::fs::remove_file(out_dir.join("kernels.stamp"));
        report::write_if_changed(&out_dir.join("kernel-resources.txt"), "kernels disabled by RCCLX_NO_KERNELS=1\n");
        return;
    }

    let src = out_dir.join("instances.cu");
    let tu = instances();
    report::write_if_changed(&src, &tu);
    // The compile commands' source is part of the stamp: a changed flag recompiles.
    let unchecked_ok = isa_check::turned_off();
    let inputs = format!(
        "{tu}\n{}\n{}\n{}\nunchecked ok: {unchecked_ok}",
        toolchain::available(&repo),
        include_str!("toolchain.rs"),
        include_str!("isa_check.rs")
    );
    let stamp = cache::digest(&inputs, &[&repo.join("hip_kernels")], require);
    let stamp_file = out_dir.join("kernels.stamp");
    if let Ok(old) = std::fs::read_to_string(&stamp_file)
        && let Some((first, tools)) = old.split_once('\n')
        && first == stamp
        && out_dir.join("kernels.rs").exists()
    {
        // Unchanged: keep the code objects of the last run (and watch the same compilers).
        for tool in tools.lines() {
            println!("cargo:rerun-if-changed={tool}");
        }
        return;
    }
    // Compiled before in another OUT_DIR of this target directory (clippy's, the other profile's
    // run of the same settings): a copy.
    if let Some(tools) = cache::restore(&out_dir, "rcclx", &stamp) {
        report::write_if_changed(&stamp_file, &format!("{stamp}\n{}", tools.join("\n")));
        return;
    }
    let unit = toolchain::Unit {
        src: &src,
        include: &repo.join("hip_kernels"),
        stem: "rcclx",
        out_dir: &out_dir,
        repo: &repo,
    };
    let outcomes = toolchain::compile_all(&unit);
    let (mut built, resources) = report::collect("rcclx kernels", &outcomes, require, report);
    let (rejected, isa_report) = isa_check::enforce("rcclx kernels", &outcomes, &src, &repo, require, unchecked_ok);
    built.retain(|(t, _)| !rejected.contains(t));
    report::write_if_changed(&out_dir.join("isa-check.txt"), &isa_report);
    report::write_if_changed(&out_dir.join("kernels.rs"), &report::code_object_table(&built));
    report::write_if_changed(&out_dir.join("kernel-resources.txt"), &resources);
    let tools = toolchain::tools_used(&outcomes);
    report::write_if_changed(&stamp_file, &format!("{stamp}\n{}", tools.join("\n")));
    let mut files: Vec<String> = ["kernels.rs", "kernel-resources.txt", "isa-check.txt"].map(String::from).into();
    files.extend(built.iter().filter_map(|(_, p)| p.file_name()?.to_str().map(String::from)));
    cache::store(&out_dir, "rcclx", &stamp, &files, &tools);
}

/// The short hash of the checked-out commit (`unknown` outside a git checkout). The script
/// re-runs when HEAD or the branch it names moves.
fn git_hash(repo: &std::path::Path) -> String {
    let git = repo.join(".git");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        println!("cargo:rerun-if-changed={}", git.join("HEAD").display());
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed={}", git.join(r).display());
            // A missing file counts as changed on every build: name packed-refs only if it exists.
            if git.join("packed-refs").exists() {
                println!("cargo:rerun-if-changed={}", git.join("packed-refs").display());
            }
        }
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The translation unit: the device code, then one instantiation per kernel of the table.
fn instances() -> String {
    let mut cu = String::from(
        "// @generated by build/main.rs from src/kernel_table.rs: do not edit.\n\
         #include \"rcclx.cuh\"\n\n",
    );
    for (f, t, op) in kernel_table::kernels() {
        let fam = &kernel_table::FAMILIES[f];
        let name = kernel_table::kernel_name(f, t, op);
        let (args, blocks, func) = (fam.args.cxx(), fam.min_blocks, fam.device_fn);
        match op {
            Some(op) => writeln!(cu, "RCCLX_KERNEL({name}, {args}, {blocks}, {func}, {}, {})", t.cxx, op.cxx),
            None => writeln!(cu, "RCCLX_KERNEL({name}, {args}, {blocks}, {func}, {})", t.cxx),
        }
        .expect("write to String");
    }
    cu
}
