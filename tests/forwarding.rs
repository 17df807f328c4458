//! Forwarding against the real stock library (nvidia-nccl-cu13 2.28.9, what PyTorch 2.11 uses,
//! and 2.32.3), on a machine without a GPU. `tests/c/probe.c` calls host functions that work
//! without a GPU (version, error strings, last error, unique id, a failing
//! `ncclCommInitRank(nranks=1)`, calls with NULL pointers, and the same through the `pnccl*`
//! twins) and writes `name=result` lines. Each test runs it against the stock library alone
//! and through rcclx, and diffs the results line by line.
//!
//! Three ways rcclx gets into a process:
//! 1. `Installed`: the probe is linked with `-lnccl` (DT_NEEDED libnccl.so.2) and finds rcclx
//!    installed as `libnccl.so.2` by `scripts/install.sh` through LD_LIBRARY_PATH; the stock
//!    library is given by RCCLX_UPSTREAM_LIB and loaded with RTLD_DEEPBIND.
//! 2. `Preload`: the same probe with `LD_PRELOAD=librcclx.so`; the dynamic linker maps the
//!    stock library itself (no DEEPBIND possible) and rcclx finds it mapped.
//! 3. `Dlopen`: a probe that dlopens `librcclx.so` by path; rcclx finds the stock library on
//!    LD_LIBRARY_PATH.

mod common;

use common::{Nccl, Run};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Installed,
    Preload,
    Dlopen,
}

/// Probes and an install prefix for one stock version, in one scratch directory.
struct Setup {
    dir: PathBuf,
    nccl: Nccl,
    linked: PathBuf,
    dlopen: PathBuf,
    prefix: PathBuf,
}

impl Setup {
    fn new(test: &str, nccl: Nccl) -> Setup {
        let dir = common::scratch(&format!("{test}-{}", nccl.tag()));
        let linked = common::linked_probe(&dir, &nccl.lib);
        let dlopen = common::dlopen_probe(&dir);
        let prefix = dir.join("prefix");
        common::install(&prefix);
        Setup { dir, nccl, linked, dlopen, prefix }
    }

    /// The probe with the stock library alone (no rcclx), in the form `mode` uses.
    fn stock(&self, mode: Mode, what: &str, env: &[(&str, &OsStr)]) -> Run {
        let nccl_dir = self.nccl.dir();
        let mut e: Vec<(&str, &OsStr)> = vec![("LD_LIBRARY_PATH", nccl_dir.as_os_str())];
        e.extend_from_slice(env);
        let r = match mode {
            Mode::Installed | Mode::Preload => common::run(
                &self.dir,
                &format!("stock {} linked {what}", self.nccl.version),
                &self.linked,
                &[what.as_ref()],
                &e,
            ),
            Mode::Dlopen => common::run(
                &self.dir,
                &format!("stock {} dlopen {what}", self.nccl.version),
                &self.dlopen,
                &[what.as_ref(), self.nccl.lib.as_os_str()],
                &e,
            ),
        };
        r.assert_ok();
        assert_eq!(r.get("ncclGetVersion"), format!("0 {}", self.nccl.code), "{}", r.dump());
        if what == "all" {
            assert_eq!(r.get("rcclx"), "absent", "the stock run must not see rcclx:\n{}", r.dump());
        }
        r
    }

    /// The probe with rcclx in the way `mode` says.
    fn rcclx(&self, mode: Mode, what: &str, env: &[(&str, &OsStr)]) -> Run {
        let lib = common::lib();
        let prefix_lib = self.prefix.join("lib");
        let nccl_dir = self.nccl.dir();
        let mut e: Vec<(&str, &OsStr)> = match mode {
            Mode::Installed => {
                vec![("LD_LIBRARY_PATH", prefix_lib.as_os_str()), ("RCCLX_UPSTREAM_LIB", self.nccl.lib.as_os_str())]
            }
            Mode::Preload => vec![("LD_PRELOAD", lib.as_os_str()), ("LD_LIBRARY_PATH", nccl_dir.as_os_str())],
            Mode::Dlopen => vec![("LD_LIBRARY_PATH", nccl_dir.as_os_str())],
        };
        e.extend_from_slice(env);
        let label = format!("rcclx {mode:?} over {} {what}", self.nccl.version);
        let r = match mode {
            Mode::Installed | Mode::Preload => common::run(&self.dir, &label, &self.linked, &[what.as_ref()], &e),
            Mode::Dlopen => common::run(&self.dir, &label, &self.dlopen, &[what.as_ref(), lib.as_os_str()], &e),
        };
        r.assert_ok();
        r
    }
}

/// rcclx is really in the process (its own API answers) and forwards to the expected library.
/// `disabled`: `RCCLX_DISABLE=1`, where `ncclGetLastError` is the stock library's alone.
fn assert_rcclx_present(r: &Run, upstream: &Path, disabled: bool) {
    let code = rcclx::abi::own::RCCLX_VERSION_CODE;
    assert_eq!(r.get("rcclxGetVersion"), format!("0 {code}"), "{}", r.dump());
    // ncclInvalidArgument for NULL pointers, as NCCL does for its own functions.
    assert_eq!(r.get("rcclxGetVersion(NULL)"), "4", "{}", r.dump());
    assert_eq!(r.get("rcclxCommGetStats(NULL,NULL)"), "4", "{}", r.dump());
    assert_eq!(r.get("rcclxForwardReasonName(-1)"), "(null)", "{}", r.dump());
    assert_eq!(r.get("rcclxGetProcessStats(NULL)"), "4", "{}", r.dump());
    // The GPU-resident AllToAllv: argument errors first, then ncclInvalidUsage on a communicator
    // without rcclx kernels (never a crash, never a forward: the stock library has no such call).
    assert_eq!(r.get("rcclxAllToAllvDynamic(comm=NULL)"), "4", "{}", r.dump());
    assert_eq!(r.get("rcclxAllToAllvDynamic(unknown comm)"), "5", "{}", r.dump());
    assert_eq!(r.get("rcclxAllToAllvDynamic(bad type)"), "4", "{}", r.dump());
    assert_eq!(r.get("rcclxAllToAllvDynamicPacked(unit overflow)"), "4", "{}", r.dump());
    assert_eq!(r.get("rcclxAllToAllvDynamicPackedEx(bad wire)"), "4", "{}", r.dump());
    assert_eq!(r.get("rcclxAllToAllvDynamicPackedEx(fp8, unknown comm)"), "5", "{}", r.dump());
    let said = r.rcclx_log().into_iter().filter(|l| *l == common::PROBE_A2AV_WARNING).count();
    assert_eq!(said, 3, "one WARN line per AllToAllv on an unknown communicator (plain, FP8, plain):\n{}", r.dump());
    // ncclGetLastError: rcclx's text after rcclx's error; the stock library's after a newer
    // stock error, even one whose text equals the stock error before rcclx's.
    let own = r.get("rcclxLastError(rcclx's)");
    assert!(
        disabled || own.starts_with("rcclx: rcclxAllToAllvDynamic: comm 0x7f00 is not a communicator"),
        "{}",
        r.dump()
    );
    assert_eq!(r.get("rcclxLastError(stock's again)"), "AllReduce : comm argument is NULL", "{}", r.dump());
    // A function the stock library lacks: ncclInvalidUsage, and ncclGetLastError says why (with
    // rcclx disabled, its text is the stock library's alone).
    assert_eq!(r.get("rcclxMissing(ncclAllToAllv)"), "5", "{}", r.dump());
    let missing = r.get("rcclxLastError(missing)");
    assert!(disabled || missing.starts_with("rcclx: ncclAllToAllv: not provided by the stock library"), "{}", r.dump());
    let said = r.rcclx_log().into_iter().filter(|l| *l == common::PROBE_A2AV_WIRE_WARNING).count();
    assert_eq!(said, 1, "one WARN line for the unknown wire:\n{}", r.dump());
    let path = r.get("rcclxGetUpstreamPath");
    assert!(Path::new(path) == upstream, "rcclxGetUpstreamPath {path}, expected {}:\n{}", upstream.display(), r.dump());
}

fn forwarding(mode: Mode, nccl: Option<Nccl>) {
    let Some(nccl) = nccl else { return };
    let s = Setup::new(&format!("fwd-{mode:?}"), nccl);
    let stock = s.stock(mode, "all", &[]);
    let r = s.rcclx(mode, "all", &[]);
    common::assert_same_results(&stock, &r);
    assert_rcclx_present(&r, &s.nccl.lib, false);
    // Nothing to warn about: no rcclx log line at the default level.
    assert!(r.rcclx_log_unprovoked().is_empty(), "unexpected rcclx log lines:\n{}", r.dump());
}

#[test]
fn installed_as_libnccl_over_2_28() {
    forwarding(Mode::Installed, common::nccl_2_28());
}

#[test]
fn installed_as_libnccl_over_2_32() {
    forwarding(Mode::Installed, common::nccl_2_32());
}

#[test]
fn ld_preload_over_2_28() {
    forwarding(Mode::Preload, common::nccl_2_28());
}

#[test]
fn ld_preload_over_2_32() {
    forwarding(Mode::Preload, common::nccl_2_32());
}

#[test]
fn dlopen_over_2_28() {
    forwarding(Mode::Dlopen, common::nccl_2_28());
}

#[test]
fn dlopen_over_2_32() {
    forwarding(Mode::Dlopen, common::nccl_2_32());
}

/// `RCCLX_DISABLE=1`: pure pass-through, results equal to stock in every mode.
#[test]
fn disable_is_pass_through() {
    let Some(nccl) = common::nccl_2_28() else { return };
    let s = Setup::new("disable", nccl);
    let stock = s.stock(Mode::Installed, "all", &[]);
    let stock_dl = s.stock(Mode::Dlopen, "all", &[]);
    for mode in [Mode::Installed, Mode::Preload, Mode::Dlopen] {
        let r = s.rcclx(mode, "all", &[("RCCLX_DISABLE", "1".as_ref()), ("RCCLX_LOG", "rcclx=debug".as_ref())]);
        common::assert_same_results(if mode == Mode::Dlopen { &stock_dl } else { &stock }, &r);
        assert_rcclx_present(&r, &s.nccl.lib, true);
        // The setting was read and honoured (the ENV line and the banner say so).
        assert!(
            r.rcclx_log().iter().any(|(lvl, m)| *lvl == "INFO" && *m == "RCCLX_DISABLE set by environment to 1"),
            "{mode:?}: no ENV line for RCCLX_DISABLE:\n{}",
            r.dump()
        );
        assert!(
            r.rcclx_log().iter().any(|(_, m)| m.starts_with("rcclx ") && m.contains("disabled by RCCLX_DISABLE=1")),
            "{mode:?}: the banner does not say rcclx is disabled:\n{}",
            r.dump()
        );
        assert!(!r.rcclx_log_unprovoked().iter().any(|(lvl, _)| *lvl == "WARN" || *lvl == "ERROR"), "{}", r.dump());
    }
}

/// The stock `ncclBcast` calls `ncclBroadcast` through its PLT. With RTLD_DEEPBIND (modes
/// Installed and Dlopen) that call binds inside the stock library and never reaches rcclx;
/// under LD_PRELOAD the dynamic linker binds it to rcclx, whose re-entrancy guard passes it
/// straight back (one TRACE line saying so) instead of treating it as a user call.
fn reentrancy(nccl: Option<Nccl>) {
    let Some(nccl) = nccl else { return };
    let s = Setup::new("reentrancy", nccl);
    for mode in [Mode::Installed, Mode::Preload, Mode::Dlopen] {
        let stock = s.stock(mode, "bcast", &[]);
        let r = s.rcclx(mode, "bcast", &[("RCCLX_LOG", "rcclx=trace".as_ref())]);
        common::assert_same_results(&stock, &r);
        assert_eq!(r.get("ncclBcast(comm=NULL)"), "4", "{}", r.dump());
        let log = r.rcclx_log();
        let bcast = log.iter().filter(|(lvl, m)| *lvl == "TRACE" && *m == "ncclBcast").count();
        assert_eq!(bcast, 1, "{mode:?}: expected exactly one `ncclBcast` TRACE line:\n{}", r.dump());
        let broadcast: Vec<&str> = log.iter().filter(|(_, m)| m.contains("ncclBroadcast")).map(|(_, m)| *m).collect();
        match mode {
            Mode::Installed | Mode::Dlopen => {
                assert!(broadcast.is_empty(), "{mode:?} (DEEPBIND): ncclBroadcast came back to rcclx:\n{}", r.dump())
            }
            Mode::Preload => assert_eq!(
                broadcast,
                ["ncclBroadcast: re-entered from the stock library, passed straight back"],
                "LD_PRELOAD: expected exactly the re-entry line:\n{}",
                r.dump()
            ),
        }
    }
}

#[test]
fn reentrancy_2_28() {
    reentrancy(common::nccl_2_28());
}

#[test]
fn reentrancy_2_32() {
    reentrancy(common::nccl_2_32());
}

/// The very first exported call of a process is traced too (the logger must be set up before
/// the call's TRACE line, not only when the stock library is loaded inside the call).
#[test]
fn first_call_is_traced() {
    let Some(nccl) = common::nccl_2_28() else { return };
    let s = Setup::new("first-call", nccl);
    let r = s.rcclx(Mode::Dlopen, "bcast-first", &[("RCCLX_LOG", "rcclx=trace".as_ref())]);
    let n = r.rcclx_log().iter().filter(|(lvl, m)| *lvl == "TRACE" && *m == "ncclBcast").count();
    assert_eq!(n, 1, "the first call's TRACE line is missing:\n{}", r.dump());
}

/// NCCL's logging variables: `NCCL_DEBUG=INFO` gives one version line naming rcclx's version
/// and commit and the stock library's path and version; `NCCL_DEBUG_FILE` (with `%h`, `%p`)
/// receives the lines, in rcclx's file beside the stock library's; each line carries host, pid
/// and OS thread id. (tests/logs.rs compares the lines' shapes with the stock library's.)
#[test]
fn version_banner_in_the_nccl_debug_file() {
    let Some(nccl) = common::nccl_2_28() else { return };
    let s = Setup::new("debug-file", nccl);
    let pattern = s.dir.join("log.%h.%p");
    let r = s.rcclx(Mode::Preload, "all", &[("NCCL_DEBUG", "INFO".as_ref()), ("NCCL_DEBUG_FILE", pattern.as_os_str())]);
    r.assert_ok();
    let logs: Vec<_> = std::fs::read_dir(&s.dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name().to_string_lossy().starts_with("log.") && e.file_name().to_string_lossy().ends_with(".rcclx")
        })
        .collect();
    assert_eq!(logs.len(), 1, "one NCCL_DEBUG_FILE per process, %h and %p expanded");
    let name = logs[0].file_name().to_string_lossy().into_owned();
    assert!(!name.contains('%'), "{name}");
    let text = std::fs::read_to_string(logs[0].path()).unwrap();
    let banner: Vec<&str> = text.lines().filter(|l| l.contains(" NCCL INFO rcclx version ")).collect();
    assert_eq!(banner.len(), 1, "one version line:\n{text}");
    let expected = format!("over {} (NCCL 2.28.9)", s.nccl.lib.display());
    assert!(
        banner[0].contains(&format!("rcclx version {}+", env!("CARGO_PKG_VERSION"))) && banner[0].contains(&expected),
        "{}",
        banner[0]
    );
    // host:pid:tid [dev] prefix, the tid a number (the OS thread id).
    let mut words = banner[0].split(' ');
    let prefix: Vec<&str> = words.next().unwrap().split(':').collect();
    assert_eq!(prefix.len(), 3, "{}", banner[0]);
    assert!(prefix[1].parse::<u32>().is_ok() && prefix[2].parse::<u32>().is_ok(), "{}", banner[0]);
    let dev = words.next().unwrap();
    assert!(
        dev.starts_with('[') && dev.ends_with(']') && dev[1..dev.len() - 1].parse::<i32>().is_ok(),
        "{}",
        banner[0]
    );
    assert!(!r.rcclx_log().iter().any(|(_, m)| m.starts_with("rcclx ")), "the banner went to the file, not stdout");
}

/// `NCCL_DEBUG_FILE` at TRACE, written by the stock library and by rcclx at once: the stock
/// library truncates its file and writes it at its own offset, so rcclx writes the same name
/// plus `.rcclx` (appending). Every line of both files arrives whole, each file holds only its
/// writer's lines, and rcclx's are in NCCL's format.
#[test]
fn both_libraries_log_to_nccl_debug_file_at_trace_without_losing_lines() {
    let Some(nccl) = common::nccl_2_28() else { return };
    let s = Setup::new("debug-file-trace", nccl);
    let pattern = s.dir.join("trace.%p");
    let env = [
        ("NCCL_DEBUG", "TRACE".as_ref()),
        ("NCCL_DEBUG_SUBSYS", "ALL".as_ref()),
        ("NCCL_DEBUG_FILE", pattern.as_os_str()),
    ];
    s.rcclx(Mode::Preload, "all", &env).assert_ok();
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&s.dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("trace."))
        .collect();
    let own: Vec<&std::path::PathBuf> = files.iter().filter(|p| p.extension().is_some_and(|e| e == "rcclx")).collect();
    assert_eq!(own.len(), 1, "rcclx's file next to the stock library's: {files:?}");
    let stock_file = own[0].with_extension("");
    let mine = std::fs::read(own[0]).unwrap();
    assert!(!mine.contains(&0) && mine.ends_with(b"\n"), "rcclx's file has NUL bytes or a cut line");
    let mine = String::from_utf8(mine).unwrap();
    let lines = mine.lines().filter(|l| common::rcclx_line(l).is_some()).count();
    assert!(lines >= 5, "rcclx wrote {lines} lines:\n{mine}");
    for l in mine.lines().filter(|l| !l.is_empty()) {
        assert!(common::rcclx_line(l).is_some(), "not an rcclx line in NCCL's format: {l:?}");
    }
    // The stock library's own file is whole and its own.
    let theirs = std::fs::read(&stock_file).expect("the stock library's file");
    assert!(!theirs.contains(&0), "NUL bytes in the stock library's file");
    let theirs = String::from_utf8_lossy(&theirs);
    assert!(theirs.contains(" NCCL CALL "), "the stock library's CALL lines:\n{theirs}");
    assert!(!theirs.lines().any(|l| common::rcclx_line(l).is_some()), "rcclx wrote into the stock library's file");
}
