//! Logging with `tracing`, in NCCL's own line format and under NCCL's own variables, so that
//! tools reading NCCL logs read rcclx's lines too:
//! `[timestamp] host:pid:tid [dev] NCCL WARN|INFO|TRACE rcclx: message`, where `tid` is the OS
//! thread id, `dev` the device of the communicator the thread is working on (else the current
//! device, as NCCL's `cudaGetDevice`) and the timestamp is written for the levels of
//! `NCCL_DEBUG_TIMESTAMP_LEVELS` (default `WARN`) in `NCCL_DEBUG_TIMESTAMP_FORMAT` (strftime,
//! default `[%F %T] `; `%Nf` adds N digits of the second's fraction).
//!
//! Where: stderr, or with `NCCL_DEBUG_FILE` (`%h` host, `%p` pid) the file named there plus
//! `.rcclx`, opened to append: the stock library truncates its own file and writes it at its
//! own offset, which would overwrite lines another writer added.
//!
//! Filter: `RCCLX_LOG` (tracing-subscriber `EnvFilter` syntax, e.g. `rcclx=trace`) wins;
//! otherwise `NCCL_DEBUG` (`VERSION`: the version line only; `WARN`; `INFO`; `TRACE`) and
//! `NCCL_DEBUG_SUBSYS` (which subsystems log at INFO/TRACE: `INIT`, `COLL`, `ENV`, `ALLOC`,
//! `CALL`, `ALL`, a leading `^` inverts; default `INIT,BOOTSTRAP,ENV`, NCCL's default). Each
//! rcclx module belongs to one subsystem ([`SUBSYSTEMS`]). Warnings always show.
//!
//! Layer: base.

use std::cell::Cell;
use std::fmt;
use std::sync::{Once, OnceLock};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the one-line version banner (shown from `NCCL_DEBUG=VERSION` up).
pub const VERSION_TARGET: &str = "rcclx::version";
/// The target of the per-call lines: one per exported call (`CALL`, at TRACE).
pub const CALL_TARGET: &str = "rcclx::call";
/// The target of the per-collective route lines (`COLL`, at INFO).
pub const COLL_TARGET: &str = "rcclx::coll";

/// rcclx's modules and targets by NCCL subsystem (the most specific path wins).
pub const SUBSYSTEMS: &[(&str, &[&str])] = &[
    ("INIT", &["rcclx::clique", "rcclx::comm::lifecycle", "rcclx::upstream", "rcclx::summary"]),
    ("COLL", &["rcclx::comm", "rcclx::dda", "rcclx::lowp", "rcclx::intercept", COLL_TARGET]),
    ("ENV", &["rcclx::config"]),
    ("ALLOC", &["rcclx::gpu"]),
    ("CALL", &["rcclx::abi", CALL_TARGET]),
];

thread_local! {
    /// The device of the communicator this thread is working on, for the log prefix.
    static DEVICE: Cell<i32> = const { Cell::new(-1) };
}

/// Sets the device shown in this thread's log lines.
pub fn set_device(device: i32) {
    DEVICE.with(|d| d.set(device));
}

/// How a thread that works on no communicator finds its current device (the GPU layer sets it
/// once its runtime is loaded; before that, device 0, as the CUDA runtime's default).
static CURRENT_DEVICE: OnceLock<fn() -> Option<i32>> = OnceLock::new();

/// Called by the GPU layer: how to read the calling thread's current device.
pub fn set_current_device_probe(probe: fn() -> Option<i32>) {
    let _ = CURRENT_DEVICE.set(probe);
}

fn device_of_this_thread() -> i32 {
    let d = DEVICE.with(|d| d.get());
    if d >= 0 {
        return d;
    }
    CURRENT_DEVICE.get().and_then(|probe| probe()).unwrap_or(0)
}

/// Where rcclx's lines go with `NCCL_DEBUG_FILE=pattern`: the stock library's file plus `.rcclx`.
pub fn own_debug_file(pattern: &str, host: &str, pid: u32) -> String {
    format!("{}.rcclx", pattern.replace("%h", host).replace("%p", &pid.to_string()))
}

/// Installs the subscriber once. If the host program already installed a global tracing
/// subscriber, rcclx's events go to that one instead.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let env = |k: &str| std::env::var(k).ok();
        let (filter, bad) = filter_from(env("RCCLX_LOG"), env("NCCL_DEBUG"), env("NCCL_DEBUG_SUBSYS"));
        let host = hostname();
        let mut file_error = None;
        let writer = match env("NCCL_DEBUG_FILE").filter(|f| !f.is_empty()) {
            Some(pattern) => {
                let path = own_debug_file(&pattern, &host, std::process::id());
                match std::fs::OpenOptions::new().append(true).create(true).open(&path) {
                    Ok(f) => BoxMakeWriter::new(std::sync::Mutex::new(f)),
                    Err(e) => {
                        file_error = Some(format!("NCCL_DEBUG_FILE: cannot open {path} ({e}); logging to stderr"));
                        BoxMakeWriter::new(std::io::stderr)
                    }
                }
            }
            None => BoxMakeWriter::new(std::io::stderr),
        };
        let timestamps = Timestamps::from_env(env("NCCL_DEBUG_TIMESTAMP_LEVELS"), env("NCCL_DEBUG_TIMESTAMP_FORMAT"));
        let sub = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .event_format(NcclStyle { host, timestamps })
            .finish();
        let installed = tracing::subscriber::set_global_default(sub).is_ok();
        if installed {
            for w in bad.into_iter().chain(file_error) {
                tracing::warn!("{w}");
            }
        }
    });
}

/// The filter for the three variables; the second value is a warning to log.
fn filter_from(
    rcclx_log: Option<String>,
    nccl_debug: Option<String>,
    subsys: Option<String>,
) -> (EnvFilter, Option<String>) {
    if let Some(spec) = rcclx_log.filter(|s| !s.is_empty()) {
        return match EnvFilter::try_new(&spec) {
            Ok(f) => (f, None),
            Err(e) => {
                (EnvFilter::new("warn"), Some(format!("RCCLX_LOG={spec:?} is not a valid filter ({e}); using warn")))
            }
        };
    }
    let (level, version) = match nccl_debug.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None | Some("") | Some("WARN") => ("warn", false),
        Some("VERSION") => ("warn", true),
        Some("INFO") => ("info", true),
        Some("TRACE") => ("trace", true),
        Some("ABORT") => ("error", false),
        Some(other) => {
            let why = format!("NCCL_DEBUG={other:?} is not VERSION, WARN, INFO or TRACE; using WARN");
            return (EnvFilter::new("warn"), Some(why));
        }
    };
    let mut directives = vec!["warn".to_string()];
    if version {
        directives.push(format!("{VERSION_TARGET}=info"));
    }
    if level != "warn" && level != "error" {
        for (name, modules) in SUBSYSTEMS {
            if subsystem_on(subsys.as_deref(), name) {
                directives.extend(modules.iter().map(|m| format!("{m}={level}")));
            }
        }
    }
    (EnvFilter::new(directives.join(",")), None)
}

/// Whether a NCCL-style list (`A,B`, `ALL`, a leading `^` inverts; `None` or empty:
/// `default`) names `name`.
fn listed(spec: Option<&str>, default: &str, name: &str) -> bool {
    let spec = spec.filter(|s| !s.trim().is_empty()).unwrap_or(default).trim().to_ascii_uppercase();
    let (invert, list) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest.to_string()),
        None => (false, spec),
    };
    let hit = list.split(',').map(str::trim).any(|s| s == name || s == "ALL");
    hit != invert
}

/// Whether `NCCL_DEBUG_SUBSYS` (`None`: NCCL's default `INIT,BOOTSTRAP,ENV`) enables subsystem
/// `name`.
fn subsystem_on(spec: Option<&str>, name: &str) -> bool {
    listed(spec, "INIT,BOOTSTRAP,ENV", name)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// NCCL's name of a level: rcclx's errors are NCCL's WARN lines, its debug lines INFO ones.
fn nccl_level(level: &Level) -> &'static str {
    match *level {
        Level::ERROR | Level::WARN => "WARN",
        Level::INFO | Level::DEBUG => "INFO",
        Level::TRACE => "TRACE",
    }
}

/// The timestamps of `NCCL_DEBUG_TIMESTAMP_LEVELS` and `NCCL_DEBUG_TIMESTAMP_FORMAT`.
struct Timestamps {
    /// NCCL levels (`WARN`, `INFO`, `TRACE`) whose lines carry one.
    levels: Vec<&'static str>,
    format: String,
}

impl Timestamps {
    fn from_env(levels: Option<String>, format: Option<String>) -> Timestamps {
        let levels =
            ["VERSION", "WARN", "INFO", "TRACE"].into_iter().filter(|l| listed(levels.as_deref(), "WARN", l)).collect();
        Timestamps { levels, format: format.unwrap_or_else(|| "[%F %T] ".into()) }
    }

    /// The timestamp of a line at NCCL level `level` (empty when it carries none).
    fn stamp(&self, level: &str) -> String {
        if !self.levels.contains(&level) || self.format.is_empty() {
            return String::new();
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        strftime_local(&with_fraction(&self.format, now.subsec_nanos()), now.as_secs() as i64)
    }
}

/// `format` with every `%Nf` (N = 1..9) replaced by the first N digits of the second's fraction.
fn with_fraction(format: &str, nanos: u32) -> String {
    let digits = format!("{nanos:09}");
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '%' {
            let mut look = chars.clone();
            if let (Some(d @ '1'..='9'), Some('f')) = (look.next(), look.next()) {
                out.push_str(&digits[..d as usize - '0' as usize]);
                chars.next();
                chars.next();
                continue;
            }
            out.push(c);
            if let Some(n) = chars.next() {
                out.push(n); // keep `%%` and other conversions whole
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `strftime(format)` of `secs` since the epoch in local time.
fn strftime_local(format: &str, secs: i64) -> String {
    let Ok(fmt) = std::ffi::CString::new(format) else { return String::new() };
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: all-zero is a valid `tm`; localtime_r fills it from a valid `time_t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to locals that live across the call.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return String::new();
    }
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length, `fmt` is NUL-terminated, `tm` initialised.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm) };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

struct NcclStyle {
    host: String,
    timestamps: Timestamps,
}

impl<S, N> FormatEvent<S, N> for NcclStyle
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        // SAFETY: the gettid system call has no preconditions (called raw: glibc's wrapper is
        // 2.30, newer than the manylinux_2_28 the wheel targets).
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let level = nccl_level(event.metadata().level());
        let stamp = self.timestamps.stamp(level);
        let dev = device_of_this_thread();
        write!(w, "{stamp}{}:{}:{tid} [{dev}] NCCL {level} rcclx: ", self.host, std::process::id())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shows(f: &EnvFilter, target: &str, level: tracing::Level) -> bool {
        // The filter's text form is enough to check which targets get which level.
        let text = f.to_string();
        text.split(',').any(|d| d == format!("{target}={}", level.as_str().to_ascii_lowercase()))
    }

    #[test]
    fn nccl_debug_levels() {
        assert!(filter_from(None, Some("INFO".into()), None).1.is_none());
        assert!(filter_from(None, Some("trace".into()), None).1.is_none());
        assert!(filter_from(None, Some("LOUD".into()), None).1.unwrap().contains("NCCL_DEBUG"));
        assert!(filter_from(Some("rcclx=[".into()), None, None).1.unwrap().contains("RCCLX_LOG"));
        assert!(filter_from(Some("rcclx=trace".into()), None, None).1.is_none());
    }

    #[test]
    fn subsystems_follow_nccl_debug_subsys() {
        let (info, _) = filter_from(None, Some("INFO".into()), None);
        assert!(shows(&info, "rcclx::clique", tracing::Level::INFO), "{info}");
        assert!(shows(&info, VERSION_TARGET, tracing::Level::INFO));
        assert!(!shows(&info, "rcclx::comm", tracing::Level::INFO), "COLL is off by default: {info}");
        let (coll, _) = filter_from(None, Some("INFO".into()), Some("COLL".into()));
        assert!(
            shows(&coll, "rcclx::comm", tracing::Level::INFO) && !shows(&coll, "rcclx::clique", tracing::Level::INFO)
        );
        let (not_init, _) = filter_from(None, Some("INFO".into()), Some("^INIT".into()));
        assert!(
            !shows(&not_init, "rcclx::clique", tracing::Level::INFO)
                && shows(&not_init, "rcclx::gpu", tracing::Level::INFO)
        );
        let (version, _) = filter_from(None, Some("VERSION".into()), None);
        assert!(
            shows(&version, VERSION_TARGET, tracing::Level::INFO)
                && !shows(&version, "rcclx::clique", tracing::Level::INFO)
        );
        assert!(subsystem_on(Some("ALL"), "ALLOC") && !subsystem_on(Some("^ALL"), "INIT"));
        // rcclx's per-call lines are CALL's, its route lines COLL's (NCCL's subsystems).
        let (call, _) = filter_from(None, Some("TRACE".into()), Some("CALL".into()));
        assert!(shows(&call, CALL_TARGET, tracing::Level::TRACE) && !shows(&call, COLL_TARGET, tracing::Level::TRACE));
    }

    #[test]
    fn levels_are_nccls() {
        assert_eq!(nccl_level(&Level::ERROR), "WARN");
        assert_eq!(nccl_level(&Level::DEBUG), "INFO");
        assert_eq!(nccl_level(&Level::TRACE), "TRACE");
    }

    #[test]
    fn timestamps_follow_nccls_variables() {
        let t = Timestamps::from_env(None, None);
        assert_eq!(t.levels, vec!["WARN"]);
        assert!(t.stamp("INFO").is_empty());
        let w = t.stamp("WARN");
        // "[2026-12-01 17:00:00] "
        assert!(w.starts_with("[20") && w.ends_with("] ") && w.len() == 22, "{w:?}");
        let all = Timestamps::from_env(Some("ALL".into()), Some("%s.%3f|%%".into()));
        let s = all.stamp("INFO");
        let (secs, rest) = s.split_once('.').unwrap();
        assert!(secs.parse::<u64>().unwrap() > 1_700_000_000, "{s}");
        assert!(rest.len() == 5 && rest.ends_with("|%") && rest[..3].chars().all(|c| c.is_ascii_digit()), "{s}");
        assert!(Timestamps::from_env(Some("^WARN".into()), None).levels.contains(&"INFO"));
        assert_eq!(with_fraction("%F %6f %Z", 123_456_789), "%F 123456 %Z");
    }

    #[test]
    fn own_file_is_the_stock_librarys_plus_rcclx() {
        assert_eq!(own_debug_file("/tmp/nccl.%h.%p.log", "node1", 42), "/tmp/nccl.node1.42.log.rcclx");
    }
}
