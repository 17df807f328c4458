//! Build script of the GPU test programs: compiles the self-test's kernels
//! (`hip_kernels/selftest.cu`) once per GPU target with the main crate's compiler helpers, and
//! writes `$OUT_DIR/selftest_kernels.rs` (the `CODE_OBJECTS` table that `src/bin/selftest.rs`
//! includes). The kernels live in the test program only, never in `librcclx.so`.
//!
//! Environment, as for the library (`build/main.rs`): `RCCLX_REQUIRE_KERNELS=1` makes a missing
//! compiler or a failed compile an error, `RCCLX_KERNEL_REPORT=1` prints per-kernel resource
//! use, `RCCLX_NO_KERNELS=1` builds no kernels (the selftest program then has none to load).

use std::env;
use std::path::PathBuf;

#[path = "../build/isa_check.rs"]
mod isa_check;
#[path = "../build/report.rs"]
mod report;
#[path = "../build/toolchain.rs"]
mod toolchain;

/// The translation unit and the headers it includes, relative to the repository root.
const SOURCES: [&str; 4] =
    ["hip_kernels/selftest.cu", "hip_kernels/selftest.cuh", "hip_kernels/rcclx_port.h", "build/isa_check.rs"];
const WHAT: &str = "selftest kernels";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest.parent().expect("gpu-tests/ is inside the repository").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    for src in SOURCES {
        println!("cargo:rerun-if-changed={}", repo.join(src).display());
    }
    for var in toolchain::ENV_VARS.iter().chain(&[
        "RCCLX_REQUIRE_KERNELS",
        "RCCLX_KERNEL_REPORT",
        "RCCLX_NO_KERNELS",
        "RCCLX_CUOBJDUMP",
    ]) {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let table = out_dir.join("selftest_kernels.rs");
    let resources = out_dir.join("selftest-resources.txt");
    let require = toolchain::flag("RCCLX_REQUIRE_KERNELS");
    let report = require || toolchain::flag("RCCLX_KERNEL_REPORT");

    if toolchain::flag("RCCLX_NO_KERNELS") {
        assert!(!require, "RCCLX_NO_KERNELS=1 and RCCLX_REQUIRE_KERNELS=1 contradict each other");
        println!("cargo:warning={WHAT}: RCCLX_NO_KERNELS=1: none built; the selftest program has no kernels to load");
        report::write_if_changed(&table, &report::code_object_table(&[]));
        report::write_if_changed(&resources, "kernels disabled by RCCLX_NO_KERNELS=1\n");
        return;
    }

    let unit = toolchain::Unit {
        src: &repo.join(SOURCES[0]),
        include: &repo.join("hip_kernels"),
        stem: "selftest",
        out_dir: &out_dir,
        repo: &repo,
    };
    let outcomes = toolchain::compile_all(&unit);
    let (mut built, resource_report) = report::collect(WHAT, &outcomes, require, report);
    let (rejected, isa_report) = isa_check::enforce(WHAT, &outcomes, unit.src, &repo, require);
    built.retain(|(t, _)| !rejected.contains(t));
    report::write_if_changed(&out_dir.join("selftest-isa-check.txt"), &isa_report);
    report::write_if_changed(&table, &report::code_object_table(&built));
    report::write_if_changed(&resources, &resource_report);
}
