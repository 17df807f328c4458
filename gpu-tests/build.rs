//! Build script of the GPU test programs: compiles their kernels (`hip_kernels/selftest.cu`, the
//! self-test's; `hip_kernels/bench.cu`, the timing proxy's) once per GPU target with the main
//! crate's compiler helpers, and writes `$OUT_DIR/<stem>_kernels.rs` (the `CODE_OBJECTS` table
//! that `src/bin/selftest.rs` and `src/bin/ranks/bench.rs` include). The kernels live in the test
//! programs only, never in `librcclx.so`.
//!
//! Environment, as for the library (`build/main.rs`): `RCCLX_REQUIRE_KERNELS=1` makes a missing
//! compiler or a failed compile an error, `RCCLX_KERNEL_REPORT=1` prints per-kernel resource
//! use, `RCCLX_NO_KERNELS=1` builds no kernels (the selftest program then has none to load).

use std::env;
use std::path::PathBuf;

#[path = "../build/cache.rs"]
mod cache;
#[path = "../build/isa_check.rs"]
mod isa_check;
#[path = "../build/report.rs"]
mod report;
#[path = "../build/toolchain.rs"]
mod toolchain;

/// A translation unit of the test programs: its `.cu` file, what the messages call it, and the
/// stem of its outputs in `OUT_DIR` (`<stem>_kernels.rs`, `<stem>-resources.txt`,
/// `<stem>-isa-check.txt`).
struct TestUnit {
    src: &'static str,
    what: &'static str,
    stem: &'static str,
}

/// The self-test's kernels (`src/bin/selftest.rs`) and the timing proxy's (`ranks --suite
/// bench`: the traffic twins, which include the library's DDA kernels, and the microbenchmarks).
const UNITS: [TestUnit; 2] = [
    TestUnit { src: "hip_kernels/selftest.cu", what: "selftest kernels", stem: "selftest" },
    TestUnit { src: "hip_kernels/bench.cu", what: "bench kernels", stem: "bench" },
];
/// The headers the units include and the check they pass, relative to the repository root.
const HEADERS: [&str; 10] = [
    "hip_kernels/selftest.cuh",
    "hip_kernels/rcclx_port.h",
    "hip_kernels/common.cuh",
    "hip_kernels/allreduce.cuh",
    "hip_kernels/allgather.cuh",
    "hip_kernels/alltoall.cuh",
    "hip_kernels/reducescatter.cuh",
    "hip_kernels/broadcast.cuh",
    "build/isa_check.rs",
    "build/toolchain.rs",
];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest.parent().expect("gpu-tests/ is inside the repository").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    for src in UNITS.iter().map(|u| u.src).chain(HEADERS) {
        println!("cargo:rerun-if-changed={}", repo.join(src).display());
    }
    for var in toolchain::ENV_VARS.iter().chain(&[
        "RCCLX_REQUIRE_KERNELS",
        "RCCLX_KERNEL_REPORT",
        "RCCLX_NO_KERNELS",
        "RCCLX_CUOBJDUMP",
        isa_check::OFF_VAR,
    ]) {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let require = toolchain::flag("RCCLX_REQUIRE_KERNELS");
    let report = require || toolchain::flag("RCCLX_KERNEL_REPORT");
    for u in &UNITS {
        let table = out_dir.join(format!("{}_kernels.rs", u.stem));
        let resources = out_dir.join(format!("{}-resources.txt", u.stem));
        if toolchain::flag("RCCLX_NO_KERNELS") {
            assert!(!require, "RCCLX_NO_KERNELS=1 and RCCLX_REQUIRE_KERNELS=1 contradict each other");
            println!("cargo:warning={}: RCCLX_NO_KERNELS=1: none built; the programs have none to load", u.what);
            report::write_if_changed(&table, &report::code_object_table(&[]));
            report::write_if_changed(&resources, "kernels disabled by RCCLX_NO_KERNELS=1\n");
            continue;
        }
        // Every input of the compile: the unit, the kernel sources, the build helpers, the compilers.
        let unchecked_ok = isa_check::turned_off();
        let digest = cache::digest(
            &format!("{}\n{}\nunchecked ok: {unchecked_ok}", u.src, toolchain::available(&repo)),
            &[&repo.join("hip_kernels"), &repo.join("build")],
            require,
        );
        if cache::restore(&out_dir, u.stem, &digest).is_some() {
            continue;
        }
        let unit = toolchain::Unit {
            src: &repo.join(u.src),
            include: &repo.join("hip_kernels"),
            stem: u.stem,
            out_dir: &out_dir,
            repo: &repo,
        };
        let outcomes = toolchain::compile_all(&unit);
        let (mut built, resource_report) = report::collect(u.what, &outcomes, require, report);
        let (rejected, isa_report) = isa_check::enforce(u.what, &outcomes, unit.src, &repo, require, unchecked_ok);
        built.retain(|(t, _)| !rejected.contains(t));
        report::write_if_changed(&out_dir.join(format!("{}-isa-check.txt", u.stem)), &isa_report);
        report::write_if_changed(&table, &report::code_object_table(&built));
        report::write_if_changed(&resources, &resource_report);
        let mut files: Vec<String> = [
            format!("{}_kernels.rs", u.stem),
            format!("{}-resources.txt", u.stem),
            format!("{}-isa-check.txt", u.stem),
        ]
        .into();
        files.extend(built.iter().filter_map(|(_, p)| p.file_name()?.to_str().map(String::from)));
        cache::store(&out_dir, u.stem, &digest, &files, &toolchain::tools_used(&outcomes));
    }
}
