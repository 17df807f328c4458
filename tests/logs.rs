//! rcclx's log lines have the shape of NCCL 2.28.9's, checked against the real stock library
//! (nvidia-nccl-cu13 2.28.9) in the same process with the same settings: `tests/c/probe.c`
//! dlopens `librcclx.so`, which loads the stock library, and both write to the probe's stdout
//! (or their `NCCL_DEBUG_FILE`s). Each line's shape is the line with its variable parts
//! (timestamp digits, host, pid, tid, device, file and line, message) replaced; for every
//! level both libraries print, the shapes must be equal. Also: nothing at all without
//! `NCCL_DEBUG`, NCCL's configuration file, `ncclResetDebugInit`, and `NCCL_P2P_DISABLE=1`.

mod common;

use common::{Nccl, Run, UNSET};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Who wrote a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Stock,
    Rcclx,
}

/// One log line taken apart: who wrote it, its level word (`VERSION` for the bare version
/// line) and its shape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    who: Who,
    level: String,
    shape: String,
}

/// Every digit run becomes `N`.
fn digits(s: &str) -> String {
    let mut out = String::new();
    let mut in_num = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !in_num {
                out.push('N');
            }
            in_num = true;
        } else {
            out.push(c);
            in_num = false;
        }
    }
    out
}

/// The shape of a log line (`None`: not a log line, e.g. the empty line before a WARN).
/// `host` is the host name both libraries must write (cut at the first dot).
fn shape(line: &str, host: &str) -> Option<Shape> {
    for (who, start) in [(Who::Stock, "NCCL version "), (Who::Rcclx, "rcclx version ")] {
        if let Some(at) = line.find(start)
            && !line[..at].contains(" NCCL ")
            && !line[..at].contains(':')
        {
            return Some(Shape { who, level: "VERSION".into(), shape: format!("{}MSG", digits(&line[..at])) });
        }
    }
    let (head, rest) = line.split_once(" NCCL ")?;
    let (level, msg) = rest.split_once(' ').unwrap_or((rest, ""));
    let who = if msg.starts_with("rcclx: ") || msg.starts_with("rcclx version ") { Who::Rcclx } else { Who::Stock };
    // The last word of the head before `host:pid:tid` is part of the timestamp; find the
    // `host:` word.
    let words: Vec<&str> = head.split(' ').collect();
    let at = words.iter().position(|w| w.starts_with(&format!("{host}:")))?;
    let mut out: Vec<String> = words[..at].iter().map(|w| digits(w)).collect();
    out.push(format!("HOST:{}", digits(&words[at][host.len() + 1..])));
    for (i, w) in words[at + 1..].iter().enumerate() {
        let last = at + 1 + i == words.len() - 1;
        if last && (level == "WARN" || level == "TRACE") {
            out.push("FILE:N".into()); // the source file and line (NCCL: file or function)
        } else {
            out.push(digits(w));
        }
    }
    out.push(format!("NCCL {level} MSG"));
    Some(Shape { who, level: level.into(), shape: out.join(" ") })
}

/// The shapes of every log line in `text`; also checks that each WARN line comes after an
/// empty line (NCCL's leading newline).
fn shapes(text: &str, host: &str) -> Vec<Shape> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(s) = shape(l, host) else {
            assert!(!l.contains(" NCCL "), "not NCCL's shape (host name {host:?}?): {l:?}\n{text}");
            continue;
        };
        if s.level == "WARN" {
            assert!(i > 0 && lines[i - 1].is_empty(), "a WARN line without the empty line before it: {l:?}\n{text}");
        }
        out.push(s);
    }
    out
}

/// For every level the two libraries print, the same set of shapes; returns the levels
/// compared. `need` are levels both must have printed.
fn same_shapes(text: &str, host: &str, need: &[&str], what: &str) -> BTreeSet<String> {
    let all = shapes(text, host);
    let by = |who: Who, level: &str| -> BTreeSet<String> {
        all.iter().filter(|s| s.who == who && s.level == level).map(|s| s.shape.clone()).collect()
    };
    let levels: BTreeSet<String> = all.iter().map(|s| s.level.clone()).collect();
    let mut compared = BTreeSet::new();
    for level in &levels {
        let (stock, mine) = (by(Who::Stock, level), by(Who::Rcclx, level));
        if stock.is_empty() || mine.is_empty() {
            continue;
        }
        assert_eq!(stock, mine, "{what}: {level} lines differ in shape (stock left, rcclx right):\n{text}");
        compared.insert(level.clone());
    }
    for n in need {
        assert!(compared.contains(*n), "{what}: no {n} line from both libraries to compare:\n{text}");
    }
    compared
}

struct Setup {
    dir: PathBuf,
    nccl: Nccl,
    probe: PathBuf,
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        let nccl = common::nccl_2_28()?;
        let dir = common::scratch(&format!("logs-{test}"));
        let probe = common::dlopen_probe(&dir);
        Some(Setup { dir, nccl, probe })
    }

    /// The probe in `mode` through rcclx (which loads the stock library), run by `exe` (the
    /// probe itself, or a wrapper that runs it).
    fn run_with(&self, exe: &Path, mode: &str, env: &[(&str, &OsStr)]) -> Run {
        let nccl_dir = self.nccl.dir();
        let lib = common::lib();
        let mut e: Vec<(&str, &OsStr)> = vec![("LD_LIBRARY_PATH", nccl_dir.as_os_str())];
        e.extend_from_slice(env);
        let what = format!("{mode} {env:?}");
        let r = common::run(&self.dir, &what, exe, &[mode.as_ref(), lib.as_os_str()], &e);
        r.assert_ok();
        r
    }

    fn run(&self, mode: &str, env: &[(&str, &OsStr)]) -> Run {
        self.run_with(&self.probe, mode, env)
    }

    /// A wrapper that runs the probe in a new UTS namespace whose host name is `host`, or
    /// `None` where this machine allows no such namespace.
    fn with_host_name(&self, host: &str) -> Option<PathBuf> {
        for flags in ["-u", "-r -u"] {
            let ok = std::process::Command::new("unshare")
                .args(flags.split(' '))
                .args(["sh", "-c", &format!("hostname {host}")])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                let wrapper = self.dir.join(format!("uts{}", flags.len()));
                let script = format!(
                    "#!/bin/sh\nexec unshare {flags} sh -c 'hostname {host} && exec \"$0\" \"$@\"' {} \"$@\"\n",
                    self.probe.display()
                );
                std::fs::write(&wrapper, script).unwrap();
                let mut perm = std::fs::metadata(&wrapper).unwrap().permissions();
                std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
                std::fs::set_permissions(&wrapper, perm).unwrap();
                return Some(wrapper);
            }
        }
        None
    }
}

fn host() -> String {
    rcclx::log::hostname()
}

/// WARN: the leading empty line, `[ts] host:pid:tid [dev] file:line NCCL WARN`; the version
/// line bare (stock's `NCCL version ...`, rcclx's `rcclx version ...`).
#[test]
fn warn_and_version_lines_have_stocks_shape() {
    let Some(s) = Setup::new("warn") else { return };
    let r = s.run("all", &[("NCCL_DEBUG", "WARN".as_ref())]);
    same_shapes(&r.stdout, &host(), &["WARN"], "NCCL_DEBUG=WARN");
    // Without a GPU the stock library fails before its version line (`showVersion` runs after
    // the CUDA check of ncclCommInitRank); its form is the bare `NCCL version 2.28.9+cuda13.0`
    // (`VERSION(...)` in `init.cc`), which rcclx's must have.
    assert_bare_version_line(&r);
    assert!(r.stderr.trim().is_empty(), "nothing on stderr:\n{}", r.stderr);
}

/// INFO (the version line becomes an INFO line there, for both) and ABORT, which is above INFO.
#[test]
fn info_lines_have_stocks_shape() {
    let Some(s) = Setup::new("info") else { return };
    for level in ["INFO", "ABORT"] {
        let r = s.run("all", &[("NCCL_DEBUG", level.as_ref()), ("NCCL_DEBUG_SUBSYS", "ALL".as_ref())]);
        same_shapes(&r.stdout, &host(), &["WARN", "INFO"], &format!("NCCL_DEBUG={level}"));
        let versions = r.rcclx_log().iter().filter(|(l, m)| *l == "INFO" && m.starts_with("rcclx version ")).count();
        assert_eq!(versions, 1, "NCCL_DEBUG={level}: one version line, an INFO one:\n{}", r.dump());
    }
}

/// TRACE: the stock library's `NCCL CALL` lines, no `NCCL TRACE rcclx: ncclX` lines of rcclx
/// for the calls it forwards (the stock library writes those calls' CALL lines).
#[test]
fn trace_adds_no_call_lines_for_forwarded_calls() {
    let Some(s) = Setup::new("trace") else { return };
    let r = s.run("all", &[("NCCL_DEBUG", "TRACE".as_ref()), ("NCCL_DEBUG_SUBSYS", "ALL".as_ref())]);
    let all = shapes(&r.stdout, &host());
    let calls: Vec<&Shape> = all.iter().filter(|s| s.level == "CALL").collect();
    assert!(!calls.is_empty() && calls.iter().all(|s| s.who == Who::Stock), "{}", r.dump());
    assert_eq!(calls[0].shape, "HOST:N:N NCCL CALL MSG", "{}", r.dump());
    assert!(!all.iter().any(|s| s.who == Who::Rcclx && (s.level == "TRACE" || s.level == "CALL")), "{}", r.dump());
    same_shapes(&r.stdout, &host(), &["WARN", "INFO"], "NCCL_DEBUG=TRACE");
}

/// Timestamps on every level in a format with `_` (a space, for both) and fractions.
#[test]
fn timestamps_have_stocks_shape() {
    let Some(s) = Setup::new("timestamps") else { return };
    let r = s.run(
        "all",
        &[
            ("NCCL_DEBUG", "INFO".as_ref()),
            ("NCCL_DEBUG_TIMESTAMP_LEVELS", "ALL".as_ref()),
            ("NCCL_DEBUG_TIMESTAMP_FORMAT", "[%F_%T.%3f]_".as_ref()),
        ],
    );
    let compared = same_shapes(&r.stdout, &host(), &["WARN", "INFO"], "timestamps");
    let info = shapes(&r.stdout, &host()).into_iter().find(|s| s.who == Who::Rcclx && s.level == "INFO").unwrap();
    assert!(info.shape.starts_with("[N-N-N N:N:N.N] HOST:"), "{info:?} ({compared:?})");
}

/// Without `NCCL_DEBUG` neither library prints a line, and with `NCCL_DEBUG_FILE` set neither
/// makes a file.
#[test]
fn nothing_without_nccl_debug() {
    let Some(s) = Setup::new("unset") else { return };
    let pattern = s.dir.join("unset.%p.log");
    let r = s.run("all", &[("NCCL_DEBUG", UNSET.as_ref()), ("NCCL_DEBUG_FILE", pattern.as_os_str())]);
    assert!(r.stdout.trim().is_empty(), "lines without NCCL_DEBUG:\n{}", r.dump());
    let files: Vec<_> = std::fs::read_dir(&s.dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("unset."))
        .collect();
    assert!(files.is_empty(), "NCCL_DEBUG unset made files: {:?}", files.iter().map(|e| e.path()).collect::<Vec<_>>());
    // NCCL_DEBUG=VERSION: the version lines, on stdout (NCCL uses its file only above VERSION).
    let r = s.run("all", &[("NCCL_DEBUG", "VERSION".as_ref()), ("NCCL_DEBUG_FILE", pattern.as_os_str())]);
    let all = shapes(&r.stdout, &host());
    assert!(all.iter().all(|s| s.level == "VERSION"), "{}", r.dump());
    assert_bare_version_line(&r);
}

/// One rcclx version line, bare: no timestamp (VERSION is not in the default
/// `NCCL_DEBUG_TIMESTAMP_LEVELS`), no `host:pid:tid`, as stock's `NCCL version ...`.
fn assert_bare_version_line(r: &Run) {
    let mine: Vec<Shape> =
        shapes(&r.stdout, &host()).into_iter().filter(|s| s.who == Who::Rcclx && s.level == "VERSION").collect();
    assert_eq!(mine.len(), 1, "{}", r.dump());
    assert_eq!(mine[0].shape, "MSG", "{}", r.dump());
    assert_eq!(shape("NCCL version 2.28.9+cuda13.0", &host()).unwrap().shape, mine[0].shape);
}

/// `NCCL_DEBUG_FILE` with `%h`, `%p` and `%%`, on a host name with dots (a UTS namespace):
/// rcclx's file is the stock library's name plus `.rcclx`, both use the host name cut at the
/// first dot, in the file name and in the lines.
#[test]
fn debug_file_beside_stocks_on_a_dotted_host_name() {
    let Some(s) = Setup::new("file") else { return };
    let (exe, host) = match s.with_host_name("node7.cluster.example.com") {
        Some(w) => (w, "node7".to_string()),
        None => {
            // A container without CAP_SYS_ADMIN or user namespaces: the rest still runs.
            eprintln!("NOTE: no UTS namespace here (unshare -u, unshare -r -u): the dotted host name is not tested");
            (s.probe.clone(), host())
        }
    };
    let pattern = s.dir.join("dbg.%h.%p.100%%.log");
    let r = s.run_with(&exe, "all", &[("NCCL_DEBUG", "INFO".as_ref()), ("NCCL_DEBUG_FILE", pattern.as_os_str())]);
    assert!(r.stdout.trim().is_empty(), "lines went to stdout, not the files:\n{}", r.dump());
    let names: Vec<String> = std::fs::read_dir(&s.dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dbg."))
        .collect();
    let stock = names.iter().find(|n| !n.ends_with(".rcclx")).unwrap_or_else(|| panic!("no stock file: {names:?}"));
    assert!(stock.starts_with(&format!("dbg.{host}.")) && stock.ends_with(".100%.log"), "{stock}");
    assert!(names.contains(&format!("{stock}.rcclx")), "rcclx's file is not beside {stock}: {names:?}");
    let text = |n: &str| std::fs::read_to_string(s.dir.join(n)).unwrap();
    let both = format!("{}\n{}", text(stock), text(&format!("{stock}.rcclx")));
    same_shapes(&both, &host, &["WARN", "INFO"], "NCCL_DEBUG_FILE");
}

/// NCCL's configuration file: `NCCL_DEBUG=INFO` there turns on both libraries' INFO lines; the
/// environment wins over it.
#[test]
fn nccl_conf_file_is_read() {
    let Some(s) = Setup::new("conf") else { return };
    let conf = s.dir.join("nccl.conf");
    std::fs::write(&conf, "# cluster settings\nNCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=ENV,INIT\n").unwrap();
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let r = s.run("all", &[("NCCL_DEBUG", UNSET.as_ref()), ("NCCL_CONF_FILE", conf.as_os_str())]);
    same_shapes(&r.stdout, &host(), &["INFO"], "NCCL_CONF_FILE");
    // The environment wins: NCCL_DEBUG=WARN there, INFO in the file.
    let r = s.run("all", &[("NCCL_DEBUG", "WARN".as_ref()), ("NCCL_CONF_FILE", conf.as_os_str())]);
    assert!(!shapes(&r.stdout, &host()).iter().any(|s| s.level == "INFO"), "{}", r.dump());
}

/// `ncclResetDebugInit` after `setenv("NCCL_DEBUG", "WARN")`: both libraries start logging.
#[test]
fn reset_debug_init_reads_the_variables_again() {
    let Some(s) = Setup::new("reset") else { return };
    let r = s.run("reset", &[("NCCL_DEBUG", UNSET.as_ref())]);
    assert_eq!(r.get("ncclResetDebugInit"), "present");
    let (before, after) = r.stdout.split_once("--- ncclResetDebugInit\n").expect("the probe's marker");
    assert!(before.trim().is_empty(), "lines before the reset:\n{}", r.dump());
    same_shapes(after, &host(), &["WARN"], "after ncclResetDebugInit");
}

/// `NCCL_P2P_DISABLE=1` and `NCCL_P2P_LEVEL=LOC`: one INFO line says every call goes to the
/// stock library, and the version line says so too; results as stock's.
#[test]
fn p2p_disable_forwards_everything() {
    let Some(s) = Setup::new("p2p") else { return };
    for (var, value) in [("NCCL_P2P_DISABLE", "1"), ("NCCL_P2P_LEVEL", "LOC")] {
        let r = s.run("all", &[("NCCL_DEBUG", "INFO".as_ref()), (var, value.as_ref())]);
        let log = r.rcclx_log();
        let said = format!("{var}={value}: rcclx's kernels are off; every call goes to the stock library");
        assert_eq!(log.iter().filter(|(l, m)| *l == "INFO" && *m == said).count(), 1, "{}", r.dump());
        assert!(
            log.iter().any(|(_, m)| m.starts_with("rcclx version ") && m.contains(&format!("off by {var}={value}"))),
            "{}",
            r.dump()
        );
    }
}

/// `NCCL_PROFILER_PLUGIN`: rcclx cannot feed the plugin the collectives it runs, and says so
/// once, at INFO.
#[test]
fn profiler_plugin_limit_is_said_once() {
    let Some(s) = Setup::new("profiler") else { return };
    let r =
        s.run("all", &[("NCCL_DEBUG", "INFO".as_ref()), ("NCCL_PROFILER_PLUGIN", "/nonexistent/libprof.so".as_ref())]);
    let said = r
        .rcclx_log()
        .iter()
        .filter(|(l, m)| *l == "INFO" && m.starts_with("NCCL_PROFILER_PLUGIN=/nonexistent/libprof.so: the plugin sees"))
        .count();
    assert_eq!(said, 1, "{}", r.dump());
}

/// NCCL_ALGO / NCCL_PROTO steer the stock library only: one INFO line each says so.
#[test]
fn nccl_algo_and_proto_are_said_not_to_steer_rcclx() {
    let Some(s) = Setup::new("algo") else { return };
    let r = s.run(
        "all",
        &[("NCCL_DEBUG", "INFO".as_ref()), ("NCCL_ALGO", "Ring".as_ref()), ("NCCL_PROTO", "Simple".as_ref())],
    );
    for want in ["NCCL_ALGO=Ring: steers the stock library's", "NCCL_PROTO=Simple: steers the stock library's"] {
        let said = r.rcclx_log().iter().filter(|(l, m)| *l == "INFO" && m.starts_with(want)).count();
        assert_eq!(said, 1, "{want}\n{}", r.dump());
    }
}

/// A tuning file another rcclx version wrote, or one that does not parse: one WARN line in
/// NCCL's format names the file and why, and the file is ignored (`src/tuning.rs`).
#[test]
fn stale_or_malformed_tuning_file_is_warned() {
    let Some(s) = Setup::new("tuning") else { return };
    let file = s.dir.join("tuning.toml");
    let head = "[[measured]]\ngpu = \"NVIDIA H200\"\nnranks = 2\nallreduce = 1048576\n";
    for (text, why) in [
        (format!("rcclx_version = \"0.0.1\"\n{head}"), "was written for rcclx 0.0.1"),
        (format!("rcclx_version = \"{}\"\n{head}[allreduce]\n", env!("CARGO_PKG_VERSION")), "is malformed (line 6"),
    ] {
        std::fs::write(&file, text).unwrap();
        let r = s.run("all", &[("NCCL_DEBUG", "WARN".as_ref()), ("RCCLX_TUNING_FILE", file.as_os_str())]);
        let want = format!("tuning file {} {why}", file.display());
        let warned: Vec<_> = r.rcclx_log().into_iter().filter(|(l, m)| *l == "WARN" && m.starts_with(&want)).collect();
        assert_eq!(warned.len(), 1, "{want}\n{}", r.dump());
        assert!(warned[0].1.ends_with("it is ignored (run `python -m rcclx tune` again)"), "{}", r.dump());
    }
}

#[test]
fn shapes_of_known_lines() {
    let h = "node7";
    let w = shape("[2026-12-02 00:42:23] node7:2007:2007 [0] misc/argcheck.cc:30 NCCL WARN x", h).unwrap();
    assert_eq!(w.shape, "[N-N-N N:N:N] HOST:N:N [N] FILE:N NCCL WARN MSG");
    assert_eq!(w.who, Who::Stock);
    let i = shape("node7:1:2 [0] NCCL INFO rcclx: hi", h).unwrap();
    assert_eq!((i.who, i.shape.as_str()), (Who::Rcclx, "HOST:N:N [N] NCCL INFO MSG"));
    let v = shape("rcclx version 0.1.0+abc over /x (NCCL 2.28.9); y", h).unwrap();
    assert_eq!((v.who, v.level.as_str(), v.shape.as_str()), (Who::Rcclx, "VERSION", "MSG"));
    let v = shape("NCCL version 2.28.9+cuda13.0", h).unwrap();
    assert_eq!((v.who, v.shape.as_str()), (Who::Stock, "MSG"));
    assert!(shape("node7.cluster:1:2 [0] NCCL INFO x", h).is_none(), "an uncut host name is not NCCL's shape");
}
