//! C ABI check: every function rcclx exports is declared from `rcclx::abi::table::EXPORTS` (the
//! Rust-spelled signatures the exports are generated from), and the declarations are compiled
//! together with the stock headers with warnings as errors. A parameter or return type that
//! differs from the stock header is a "conflicting types" error in C, and a "conflicting
//! declaration of C function" error for `extern "C"` functions in C++.
//!
//! * Functions of `nccl.h` (NVIDIA 2.32.3, the newest): C11, `-Wall -Wextra -Werror -pedantic`.
//! * Device-API host functions (`nccl_device/host.h`, a C++ header needing CUDA headers): C++17.
//! * RCCL-only functions: against a small header generated from `tests/data/rccl-api.txt`.
//! * `include/rcclx.h` compiles, alone and after `nccl.h`, in C and C++, and its struct layout
//!   and version macro agree with the Rust definitions.
//!
//! Each generated file is left in `target/tmp/rcclx-tests/` for inspection. Negative controls
//! show that a wrong declaration really fails to compile.

mod common;

use rcclx::abi::Export;
use rcclx::abi::table::EXPORTS;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Declared by `nccl_device/host.h`, not `nccl.h`.
fn is_device_api(name: &str) -> bool {
    name.starts_with("ncclTeam")
        || (name.starts_with("ncclGet") && name.contains("Device"))
        || name.starts_with("ncclDevComm")
        || name.ends_with("CreateRequirement")
        || name == "ncclLLA2ACalcSlots"
        || name == "ncclCommQueryProperties"
}

/// Declared in `nccl_device/host.h` only inside `#if defined(NCCL_OS_WINDOWS)`, so there is
/// nothing to compare against on Linux (libnccl.so.2 2.32.3 exports them all the same).
const WINDOWS_ONLY: &[&str] = &["ncclGinOutboxCreateRequirement", "ncclGinInboxA2ACreateRequirement"];

/// Exported by libnccl.so.2 but declared in no header (internal to NCCL's debug reset).
const UNDECLARED: &[&str] = &["ncclResetDebugInitInternal"];

/// RCCL extensions: in rccl.h (tests/data/rccl-api.txt) but not in NVIDIA's nccl.h.
const RCCL_ONLY: &[&str] = &[
    "ncclAllReduceWithBias",
    "ncclAlltoAllv",
    "ncclAllToAll",
    "ncclAllToAllv",
    "mscclLoadAlgo",
    "mscclRunAlgo",
    "mscclUnloadAlgo",
];

enum Group {
    NcclH,
    Device,
    RcclOnly,
    Skipped,
}

fn group(name: &str) -> Group {
    if WINDOWS_ONLY.contains(&name) || UNDECLARED.contains(&name) {
        Group::Skipped
    } else if RCCL_ONLY.contains(&name) {
        Group::RcclOnly
    } else if is_device_api(name) {
        Group::Device
    } else {
        Group::NcclH
    }
}

fn exports(g: fn(&Group) -> bool) -> Vec<&'static Export> {
    EXPORTS.iter().filter(|e| g(&group(e.name))).collect()
}

/// The stock include dirs: (2.32.3 wheel include, CUDA include).
fn includes() -> Option<(PathBuf, PathBuf)> {
    let nccl = common::input("RCCLX_TEST_NCCL_INCLUDE", "include dir of the nvidia-nccl-cu13 2.32.3 wheel")?;
    let cuda = common::input("RCCLX_TEST_CUDA_INCLUDE", "CUDA headers, .tools/cuda/nvidia/cu13/include")?;
    let h = std::fs::read_to_string(nccl.join("nccl.h")).expect("nccl.h in RCCLX_TEST_NCCL_INCLUDE");
    let code: u32 = h
        .lines()
        .find_map(|l| l.strip_prefix("#define NCCL_VERSION_CODE "))
        .and_then(|v| v.trim().parse().ok())
        .expect("NCCL_VERSION_CODE in nccl.h");
    assert!(code >= 23203, "RCCLX_TEST_NCCL_INCLUDE must be the 2.32.3 headers (the newest), found {code}");
    assert!(cuda.join("cuda_runtime.h").is_file(), "no cuda_runtime.h in {}", cuda.display());
    Some((nccl, cuda))
}

/// The C parameter types of `e`, without names, for a function pointer type.
fn c_param_types(e: &Export) -> String {
    if e.params.is_empty() {
        "void".into()
    } else {
        e.params.iter().map(|(_, t)| common::c_type(t)).collect::<Vec<_>>().join(", ")
    }
}

/// Compiles `src` (written to `dir/file`) with `cmd`; returns (success, diagnostics).
fn compile(mut cmd: Command, dir: &Path, file: &str, src: &str) -> (bool, String) {
    let path = dir.join(file);
    std::fs::write(&path, src).unwrap();
    let out = cmd.arg(&path).output().expect("running the compiler");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn c_compiler(dir: &Path, nccl: &Path, cuda: &Path) -> Command {
    let mut c = common::cc();
    // NCCL_OS_LINUX: what NCCL's own build defines on Linux; nccl.h 2.32 declares
    // ncclResetDebugInit only then (and otherwise makes it an empty macro).
    c.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-DNCCL_OS_LINUX", "-c", "-o"])
        .arg(dir.join("out.o"))
        .arg("-isystem")
        .arg(nccl)
        .arg("-isystem")
        .arg(cuda);
    c
}

fn cxx_compiler(nccl: &Path, cuda: &Path) -> Command {
    let mut c = common::cxx();
    c.args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-DNCCL_OS_LINUX"])
        .arg("-isystem")
        .arg(nccl)
        .arg("-isystem")
        .arg(cuda);
    c
}

/// The C translation unit for the nccl.h group: first a function that takes the address of
/// every name (an undeclared name is an error, so nccl.h must declare each one), then
/// rcclx's declaration of each export and its `p` twin.
fn nccl_h_unit(decls: &[&Export], tweak: impl Fn(String) -> String) -> String {
    let mut s = String::from(
        "/* Generated by tests/c_abi.rs: rcclx's exports vs the stock nccl.h. */\n#include <nccl.h>\n\n\
         /* ncclResetDebugInit is deprecated; naming it here is intended. */\n\
         #pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"\n\n\
         void rcclx_nccl_h_declares_all(void);\nvoid rcclx_nccl_h_declares_all(void) {\n",
    );
    for e in decls {
        writeln!(s, "  (void)&{0};\n  (void)&p{0};", e.name).unwrap();
    }
    s.push_str("}\n\n/* rcclx::abi::table::EXPORTS */\n");
    for e in decls {
        writeln!(s, "{}", tweak(common::c_declaration(e, e.name))).unwrap();
        writeln!(s, "{}", tweak(common::c_declaration(e, &format!("p{}", e.name)))).unwrap();
    }
    s
}

#[test]
fn type_spelling() {
    use common::c_type;
    assert_eq!(c_type("*mut *mut c_void"), "void**");
    assert_eq!(c_type("*mut *const c_char"), "const char**");
    assert_eq!(c_type("*mut *mut *const c_char"), "const char***");
    assert_eq!(c_type("*const *mut c_void"), "void* const*");
    assert_eq!(c_type("*const size_t"), "const size_t*");
    assert_eq!(c_type("usize"), "size_t");
    assert_eq!(c_type("u64"), "uint64_t");
    assert_eq!(c_type("i8"), "int8_t");
    assert_eq!(c_type("unsigned_int"), "unsigned int");
    assert_eq!(c_type("()"), "void");
    assert_eq!(c_type("ncclComm_t"), "ncclComm_t");
}

/// Every export is in exactly one checked group, or skipped for a stated reason.
#[test]
fn every_export_is_checked() {
    let names: BTreeSet<&str> = EXPORTS.iter().map(|e| e.name).collect();
    for n in WINDOWS_ONLY.iter().chain(UNDECLARED).chain(RCCL_ONLY) {
        assert!(names.contains(n), "{n} is listed in c_abi.rs but is not in the export table");
    }
    let rccl: BTreeSet<String> = common::rccl_api().into_iter().map(|(n, _, _)| n).collect();
    for n in RCCL_ONLY {
        assert!(rccl.contains(*n), "{n} is not in rccl-api.txt");
    }
    let checked = EXPORTS.iter().filter(|e| !matches!(group(e.name), Group::Skipped)).count();
    assert_eq!(checked + WINDOWS_ONLY.len() + UNDECLARED.len(), EXPORTS.len());
}

#[test]
fn exports_match_nccl_h() {
    let Some((nccl, cuda)) = includes() else { return };
    let dir = common::scratch("c_abi-nccl_h");
    let decls = exports(|g| matches!(g, Group::NcclH));
    assert!(decls.len() > 60, "only {} exports in the nccl.h group", decls.len());
    let unit = nccl_h_unit(&decls, |d| d);
    let (ok, diag) = compile(c_compiler(&dir, &nccl, &cuda), &dir, "nccl_h.c", &unit);
    assert!(ok, "rcclx's declarations do not match nccl.h ({}):\n{diag}", dir.join("nccl_h.c").display());
}

/// A named edit of generated declarations (the negative controls).
type Tweak = (&'static str, Box<dyn Fn(String) -> String>);

/// Negative controls: a wrong pointee type, a dropped `const` and a missing declaration in
/// nccl.h each fail to compile, so the check above can fail.
#[test]
fn wrong_declarations_fail_against_nccl_h() {
    let Some((nccl, cuda)) = includes() else { return };
    let dir = common::scratch("c_abi-negative");
    let decls = exports(|g| matches!(g, Group::NcclH));
    let cases: [Tweak; 2] = [
        (
            "long version",
            Box::new(|d: String| d.replace("ncclGetVersion(int* version)", "ncclGetVersion(long* version)")),
        ),
        (
            "non-const sendbuff",
            Box::new(|d: String| d.replace(" ncclAllReduce(const void* sendbuff", " ncclAllReduce(void* sendbuff")),
        ),
    ];
    for (what, tweak) in cases {
        let unit = nccl_h_unit(&decls, &tweak);
        assert_ne!(unit, nccl_h_unit(&decls, |d| d), "{what}: the tweak changed nothing");
        let (ok, diag) = compile(c_compiler(&dir, &nccl, &cuda), &dir, "negative.c", &unit);
        assert!(!ok, "{what}: a wrong declaration compiled");
        assert!(diag.contains("conflicting types"), "{what}: unexpected diagnostics:\n{diag}");
    }
    // A name nccl.h does not declare is an error in the "declares all" function.
    let unit = nccl_h_unit(&decls, |d| d).replace("(void)&ncclGetVersion;", "(void)&ncclNotInTheHeader;");
    let (ok, _) = compile(c_compiler(&dir, &nccl, &cuda), &dir, "negative.c", &unit);
    assert!(!ok, "an undeclared name compiled");
}

fn device_unit(decls: &[&Export], tweak: impl Fn(String) -> String) -> String {
    let mut s = String::from(
        "// Generated by tests/c_abi.rs: rcclx's device-API exports vs nccl_device.h.\n\
         #include <nccl.h>\n#include <nccl_device.h>\n\n\
         // The header must declare each function with exactly this type (selects the overload).\n\
         void rcclx_device_h_declares_all();\nvoid rcclx_device_h_declares_all() {\n",
    );
    for e in decls {
        writeln!(s, "  (void)static_cast<{} (*)({})>(&{});", common::c_type(e.ret), c_param_types(e), e.name).unwrap();
    }
    // The header declares no p twins for the device API: nothing to compare them with.
    s.push_str("}\n\n// rcclx::abi::table::EXPORTS\nextern \"C\" {\n");
    for e in decls {
        writeln!(s, "{}", tweak(common::c_declaration(e, e.name))).unwrap();
    }
    s.push_str("}\n");
    s
}

#[test]
fn device_api_exports_match_nccl_device_h() {
    let Some((nccl, cuda)) = includes() else { return };
    let dir = common::scratch("c_abi-device");
    let decls = exports(|g| matches!(g, Group::Device));
    assert!(decls.len() >= 20, "only {} device-API exports", decls.len());
    let unit = device_unit(&decls, |d| d);
    let (ok, diag) = compile(cxx_compiler(&nccl, &cuda), &dir, "device.cpp", &unit);
    assert!(ok, "rcclx's declarations do not match nccl_device.h ({}):\n{diag}", dir.join("device.cpp").display());

    // Negative control: a wrong parameter type of an extern "C" function fails in C++ too.
    let unit = device_unit(&decls, |d| d.replace("ncclTeamWorld(ncclComm_t comm)", "ncclTeamWorld(int comm)"));
    let (ok, diag) = compile(cxx_compiler(&nccl, &cuda), &dir, "device_negative.cpp", &unit);
    assert!(!ok && diag.contains("ncclTeamWorld"), "a wrong device-API declaration compiled:\n{diag}");
}

/// A C header generated from rccl-api.txt (`name|ret|params`), with RCCL's `hipStream_t` as
/// `cudaStream_t` and `mscclAlgoHandle_t` as `int`, then rcclx's declarations of every
/// rccl-api function (the RCCL-only ones are checked nowhere else) and their `p` twins.
#[test]
fn rccl_api_exports_match_rccl_api_txt() {
    let Some((nccl, cuda)) = includes() else { return };
    let dir = common::scratch("c_abi-rccl");
    let api = common::rccl_api();
    let mut h = String::from(
        "/* Generated by tests/c_abi.rs from tests/data/rccl-api.txt. */\n#ifndef RCCL_API_H\n#define RCCL_API_H\n\
         #include <nccl.h>\ntypedef cudaStream_t hipStream_t;\ntypedef int mscclAlgoHandle_t;\n",
    );
    for (name, ret, params) in &api {
        writeln!(h, "{ret} {name}({params});\n{ret} p{name}({params});").unwrap();
    }
    h.push_str("#endif\n");
    std::fs::write(dir.join("rccl_api.h"), &h).unwrap();

    let by_name = |n: &str| EXPORTS.iter().find(|e| e.name == n);
    let mut unit = String::from(
        "/* Generated by tests/c_abi.rs: rcclx's exports vs rccl-api.txt. */\n#include \"rccl_api.h\"\n\
         #pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"\n",
    );
    for (name, _, _) in &api {
        let e = by_name(name).unwrap_or_else(|| panic!("{name} (rccl-api.txt) is not in the export table"));
        writeln!(unit, "{}\n{}", common::c_declaration(e, name), common::c_declaration(e, &format!("p{name}")))
            .unwrap();
    }
    let mut cc = c_compiler(&dir, &nccl, &cuda);
    cc.arg("-I").arg(&dir);
    let (ok, diag) = compile(cc, &dir, "rccl.c", &unit);
    assert!(ok, "rcclx's declarations do not match rccl-api.txt ({}):\n{diag}", dir.join("rccl.c").display());
    for n in RCCL_ONLY {
        assert!(unit.contains(&format!(" {n}(")), "{n} was not checked");
    }
}

/// include/rcclx.h compiles in C and C++, alone (it includes nccl.h itself) and after nccl.h,
/// and `rcclxCommStats` / `RCCLX_VERSION_CODE` agree with the Rust side.
#[test]
fn rcclx_h_compiles_with_nccl_h() {
    let Some((nccl, cuda)) = includes() else { return };
    let dir = common::scratch("c_abi-rcclx_h");
    use rcclx::abi::own::{RCCLX_VERSION_CODE, rcclxCommStats};
    let checks = format!(
        "STATIC_ASSERT(sizeof(rcclxCommStats) == {}, \"rcclxCommStats size\");\n\
         STATIC_ASSERT(offsetof(rcclxCommStats, forwardedCalls) == {}, \"forwardedCalls offset\");\n\
         STATIC_ASSERT(offsetof(rcclxCommStats, forwardedByReason) == {}, \"forwardedByReason offset\");\n\
         STATIC_ASSERT(RCCLX_VERSION_CODE == {}, \"RCCLX_VERSION_CODE\");\n\
         ncclResult_t (*const rcclx_check_1)(int*) = rcclxGetVersion;\n\
         const char* (*const rcclx_check_2)(void) = rcclxGetUpstreamPath;\n\
         ncclResult_t (*const rcclx_check_3)(ncclComm_t, rcclxCommStats*) = rcclxCommGetStats;\n\
         const char* (*const rcclx_check_4)(int) = rcclxForwardReasonName;\n\
         ncclResult_t (*const rcclx_check_5)(rcclxCommStats*) = rcclxGetProcessStats;\n",
        std::mem::size_of::<rcclxCommStats>(),
        std::mem::offset_of!(rcclxCommStats, forwardedCalls),
        std::mem::offset_of!(rcclxCommStats, forwardedByReason),
        RCCLX_VERSION_CODE
    );
    let include = common::repo().join("include");
    let include = include.to_str().unwrap();
    for (first, name) in [("#include <rcclx.h>\n", "alone"), ("#include <nccl.h>\n#include <rcclx.h>\n", "after_nccl")]
    {
        let c = format!("{first}#include <stddef.h>\n#define STATIC_ASSERT _Static_assert\n{checks}");
        let mut cmd = c_compiler(&dir, &nccl, &cuda);
        cmd.args(["-I", include]);
        let (ok, diag) = compile(cmd, &dir, &format!("rcclx_h_{name}.c"), &c);
        assert!(ok, "include/rcclx.h ({name}) does not compile as C:\n{diag}");
        let cpp = format!("{first}#include <cstddef>\n#define STATIC_ASSERT static_assert\n{checks}");
        let mut cmd = cxx_compiler(&nccl, &cuda);
        cmd.args(["-pedantic", "-I", include]);
        let (ok, diag) = compile(cmd, &dir, &format!("rcclx_h_{name}.cpp"), &cpp);
        assert!(ok, "include/rcclx.h ({name}) does not compile as C++:\n{diag}");
    }
}

/// (size, align, [(field, offset)]) of a Rust type, for a static_assert against the C type.
macro_rules! layout {
    ($t:ty $(; $($f:ident),* )?) => {
        (
            stringify!($t).rsplit("::").next().unwrap().trim(),
            std::mem::size_of::<$t>(),
            std::mem::align_of::<$t>(),
            vec![$($( (stringify!($f), std::mem::offset_of!($t, $f)) ),*)?],
        )
    };
}

/// The C types that cross the boundary by value (or whose fields rcclx reads) have the same
/// size, alignment and field offsets in `rcclx::types` as in the stock headers: matching type
/// names (checked above) are not enough for an ABI.
#[test]
fn type_layouts_match_the_headers() {
    let Some((nccl, cuda)) = includes() else { return };
    let dir = common::scratch("c_abi-layouts");
    use rcclx::types::*;
    let types = [
        layout!(ncclResult_t),
        layout!(ncclDataType_t),
        layout!(ncclRedOp_t),
        layout!(ncclScalarResidence_t),
        layout!(ncclCommMemStat_t),
        layout!(ncclUniqueId; internal),
        layout!(ncclWaitSignalDesc_t; opCnt, peer, sigIdx, ctx),
        layout!(ncclSimInfo_t; size, magic, version, estimatedTime),
        layout!(ncclTeam_t; nRanks, rank, stride),
        layout!(rcclx::types::ncclMultimemHandle_t; mcBasePtr),
        layout!(ncclConfig_t; size, magic, version, blocking, cgaClusterSize, minCTAs, maxCTAs, netName, splitShare,
            trafficClass, commName, collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer,
            nvlinkCentricSched, graphUsageMode, numRmaCtx, maxP2pPeers, graphStreamOrdering, launchOrderImplicit,
            numRmaSig, rmaEagerInit, hostCftMode, nvlsHostMode),
    ];
    let mut s = String::from(
        "// Generated by tests/c_abi.rs: layouts of rcclx::types vs the stock headers.\n\
         #include <nccl.h>\n#include <nccl_device.h>\n#include <cstddef>\n",
    );
    for (name, size, align, fields) in &types {
        writeln!(s, "static_assert(sizeof({name}) == {size}, \"sizeof {name}\");").unwrap();
        writeln!(s, "static_assert(alignof({name}) == {align}, \"alignof {name}\");").unwrap();
        for (f, off) in fields {
            writeln!(s, "static_assert(offsetof({name}, {f}) == {off}, \"offset of {name}::{f}\");").unwrap();
        }
    }
    let (ok, diag) = compile(cxx_compiler(&nccl, &cuda), &dir, "layouts.cpp", &s);
    assert!(ok, "rcclx's type layouts differ from the headers ({}):\n{diag}", dir.join("layouts.cpp").display());
}
