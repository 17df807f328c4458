//! Failure paths: no stock library, a bad RCCLX_UPSTREAM_LIB, bad configuration values.
//! In every case the program keeps running (exit status 0, no abort), the calls return clear
//! error codes (`ncclSystemError` when there is no stock library) and rcclx logs exactly one
//! line naming the variable to fix.

mod common;

use common::Run;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

const SYSTEM_ERROR: &str = "2";

/// Every NCCL call of the probe returned ncclSystemError, error strings come from rcclx's own
/// table, and rcclx's own API still works.
fn assert_no_upstream_results(r: &Run) {
    r.assert_ok();
    for p in ["", "p"] {
        let expect = |key: &str, value: &str| {
            let key = format!("{p}{key}");
            assert_eq!(r.get(&key), value, "{key}:\n{}", r.dump());
        };
        expect("ncclGetVersion", "2 -1");
        for key in [
            "ncclGetVersion(NULL)",
            "ncclGetUniqueId(NULL)",
            "ncclCommCount(NULL,NULL)",
            "ncclCommGetAsyncError(NULL)",
            "ncclAllReduce(comm=NULL)",
            "ncclBcast(comm=NULL)",
            "ncclBroadcast(comm=NULL)",
            "ncclCommDestroy(NULL)",
        ] {
            expect(key, SYSTEM_ERROR);
        }
        expect("ncclGetUniqueId", "2 nonzero=0");
        expect("ncclCommInitRank(1,0)", "2 comm=NULL");
        expect("ncclGroupStart+End", "2 2");
        for code in 0..=9 {
            expect(&format!("ncclGetErrorString({code})"), common::nccl_error_string(code));
        }
        // rcclx's reason: what was tried and what to set (PyTorch shows this text).
        let last = r.get(&format!("{p}ncclGetLastError(NULL)"));
        assert!(
            last.starts_with("rcclx could not load the stock NCCL/RCCL library") && last.contains("RCCLX_UPSTREAM_LIB"),
            "{p}ncclGetLastError(NULL): {last}\n{}",
            r.dump()
        );
    }
    let code = rcclx::abi::own::RCCLX_VERSION_CODE;
    assert_eq!(r.get("rcclxGetVersion"), format!("0 {code}"), "{}", r.dump());
    assert_eq!(r.get("rcclxGetUpstreamPath"), "(null)", "{}", r.dump());
    // rcclx's own AllToAllv needs no stock library to refuse a communicator it does not know.
    assert_eq!(r.get("rcclxAllToAllvDynamic(unknown comm)"), "5", "{}", r.dump());
}

/// Exactly one rcclx log line, a WARN, containing every one of `needles` (besides the one the
/// probe provokes on purpose).
fn assert_one_warning(r: &Run, needles: &[&str]) {
    let log = r.rcclx_log_unprovoked();
    assert_eq!(log.len(), 1, "expected exactly one rcclx log line:\n{}", r.dump());
    let (level, msg) = log[0];
    assert_eq!(level, "WARN", "{}", r.dump());
    for n in needles {
        assert!(msg.contains(n), "the log line does not mention `{n}`: {msg}");
    }
}

/// rcclx installed as libnccl.so.2, and a probe linked against that name.
fn installed(dir: &Path) -> (PathBuf, PathBuf) {
    let prefix = dir.join("prefix");
    common::install(&prefix);
    let probe = common::linked_probe(dir, &prefix.join("lib/libnccl.so.2"));
    (prefix, probe)
}

/// No RCCLX_UPSTREAM_LIB and nothing to find: LD_LIBRARY_PATH holds only rcclx (installed as
/// libnccl.so.2, which it must recognise as itself), the environment has no VIRTUAL_ENV,
/// CONDA_PREFIX or PYTHONPATH (`common::run` starts from an empty environment).
#[test]
fn missing_upstream_installed_as_libnccl() {
    let dir = common::scratch("fail-missing-installed");
    let (prefix, probe) = installed(&dir);
    let prefix_lib = prefix.join("lib");
    let r = common::run(
        &dir,
        "no upstream, installed",
        &probe,
        &["all".as_ref()],
        &[("LD_LIBRARY_PATH", prefix_lib.as_os_str())],
    );
    assert_no_upstream_results(&r);
    assert_one_warning(&r, &["RCCLX_UPSTREAM_LIB", "no stock NCCL/RCCL library"]);
}

#[test]
fn missing_upstream_dlopen() {
    let dir = common::scratch("fail-missing-dlopen");
    let probe = common::dlopen_probe(&dir);
    let lib = common::lib();
    let r = common::run(
        &dir,
        "no upstream, dlopen",
        &probe,
        &["all".as_ref(), lib.as_os_str()],
        &[("LD_LIBRARY_PATH", "".as_ref())],
    );
    assert_no_upstream_results(&r);
    assert_one_warning(&r, &["RCCLX_UPSTREAM_LIB", "no stock NCCL/RCCL library"]);
}

/// The libc the test itself runs with (a real shared library that is not NCCL).
fn libc_path() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let p = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.rsplit('/').next().is_some_and(|b| b.starts_with("libc.so") || b.starts_with("libc-")))
        .expect("libc in /proc/self/maps");
    PathBuf::from(p)
}

/// RCCLX_UPSTREAM_LIB that cannot be used: rcclx reports it and does not fall back to another
/// library (the stock one is on LD_LIBRARY_PATH when the wheel is available).
#[test]
fn bad_upstream_lib() {
    let dir = common::scratch("fail-bad-upstream");
    let probe = common::dlopen_probe(&dir);
    let lib = common::lib();
    let prefix = dir.join("prefix");
    common::install(&prefix);
    let fallback = common::nccl_2_28().map(|n| n.dir()).unwrap_or_default();
    let cases: [(PathBuf, &str); 4] = [
        (PathBuf::from("/nonexistent/libnccl.so.2"), "cannot open shared object file"),
        (libc_path(), "not an NCCL/RCCL library"),
        // The same file as the running rcclx (found by comparing paths) ...
        (lib.clone(), "is rcclx itself"),
        // ... and another copy of rcclx under the stock name (found by its marker symbol).
        (prefix.join("lib/libnccl.so.2"), "is rcclx itself"),
    ];
    for (value, reason) in &cases {
        let r = common::run(
            &dir,
            &format!("RCCLX_UPSTREAM_LIB={}", value.display()),
            &probe,
            &["all".as_ref(), lib.as_os_str()],
            &[("RCCLX_UPSTREAM_LIB", value.as_os_str()), ("LD_LIBRARY_PATH", fallback.as_os_str())],
        );
        assert_no_upstream_results(&r);
        assert_one_warning(&r, &[&format!("RCCLX_UPSTREAM_LIB={}", value.display()), reason]);
    }
}

/// Invalid values: one warning naming the variable, defaults used, results equal to the stock
/// library run with the same environment (NCCL_DEBUG is read by NCCL too: a value that is not
/// one of its words silences both).
#[test]
fn bad_config_values() {
    let Some(nccl) = common::nccl_2_28() else { return };
    let dir = common::scratch("fail-bad-config");
    let probe = common::dlopen_probe(&dir);
    let lib = common::lib();
    let nccl_dir = nccl.dir();
    for (var, value) in
        [("RCCL_DDA_MAX_BLOCKS", "many"), ("RCCLX_DISABLE", "maybe"), ("NCCL_DEBUG", "LOUD"), ("RCCLX_LOG", "rcclx=[")]
    {
        let env: [(&str, &OsStr); 2] = [(var, value.as_ref()), ("LD_LIBRARY_PATH", nccl_dir.as_os_str())];
        let what = format!("{var}={value}");
        let stock = common::run(&dir, &format!("stock {what}"), &probe, &["all".as_ref(), nccl.lib.as_os_str()], &env);
        stock.assert_ok();
        let r = common::run(&dir, &format!("rcclx {what}"), &probe, &["all".as_ref(), lib.as_os_str()], &env);
        r.assert_ok();
        common::assert_same_results(&stock, &r);
        assert_eq!(r.get("rcclxGetVersion"), format!("0 {}", rcclx::abi::own::RCCLX_VERSION_CODE));
        if var == "NCCL_DEBUG" {
            // Not one of NCCL's words: NCCL prints nothing, and so does rcclx.
            assert!(r.rcclx_log().is_empty() && stock.stdout.trim().is_empty(), "{}", r.dump());
            continue;
        }
        assert_one_warning(&r, &[&format!("{var}=\"{value}\"")]);
    }
}
