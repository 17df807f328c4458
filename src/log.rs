//! Logging with `tracing`, laid out and controlled like NCCL's own:
//! `host:pid:tid [dev] RCCLX LEVEL message`, where `tid` is the OS thread id and `dev` the
//! device of the communicator the thread is working on, on stderr or in `NCCL_DEBUG_FILE`
//! (`%h` host, `%p` pid).
//!
//! Filter: `RCCLX_LOG` (tracing-subscriber `EnvFilter` syntax, e.g. `rcclx=trace`) wins;
//! otherwise `NCCL_DEBUG` (`VERSION`: the version line only; `WARN`; `INFO`; `TRACE`) and
//! `NCCL_DEBUG_SUBSYS` (which subsystems log at INFO/TRACE: `INIT`, `COLL`, `ENV`, `ALLOC`, `CALL`,
//! `ALL`, a leading `^` inverts; default `INIT,ENV`, NCCL's default). Each rcclx module belongs
//! to one subsystem ([`SUBSYSTEMS`]). Warnings always show.
//!
//! Layer: base.

use std::cell::Cell;
use std::fmt;
use std::sync::Once;
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the one-line version banner (shown from `NCCL_DEBUG=VERSION` up).
pub const VERSION_TARGET: &str = "rcclx::version";

/// rcclx's modules by NCCL subsystem (the most specific module path wins).
pub const SUBSYSTEMS: &[(&str, &[&str])] = &[
    ("INIT", &["rcclx::clique", "rcclx::comm::lifecycle", "rcclx::upstream", "rcclx::summary"]),
    ("COLL", &["rcclx::comm", "rcclx::dda", "rcclx::lowp", "rcclx::intercept"]),
    ("ENV", &["rcclx::config"]),
    ("ALLOC", &["rcclx::gpu"]),
    ("CALL", &["rcclx::abi"]),
];

thread_local! {
    /// The device of the communicator this thread is working on, for the log prefix.
    static DEVICE: Cell<i32> = const { Cell::new(-1) };
}

/// Sets the device shown in this thread's log lines.
pub fn set_device(device: i32) {
    DEVICE.with(|d| d.set(device));
}

/// Installs the subscriber once. If the host program already installed a global tracing
/// subscriber, rcclx's events go to that one instead.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let env = |k: &str| std::env::var(k).ok();
        let (filter, bad) = filter_from(env("RCCLX_LOG"), env("NCCL_DEBUG"), env("NCCL_DEBUG_SUBSYS"));
        let host = hostname();
        let writer = match env("NCCL_DEBUG_FILE").filter(|f| !f.is_empty()) {
            Some(pattern) => {
                let path = pattern.replace("%h", &host).replace("%p", &std::process::id().to_string());
                match std::fs::File::create(&path) {
                    Ok(f) => BoxMakeWriter::new(std::sync::Mutex::new(f)),
                    Err(e) => {
                        eprintln!("rcclx: NCCL_DEBUG_FILE={path}: {e}; logging to stderr");
                        BoxMakeWriter::new(std::io::stderr)
                    }
                }
            }
            None => BoxMakeWriter::new(std::io::stderr),
        };
        let sub = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .event_format(NcclStyle { host })
            .finish();
        let installed = tracing::subscriber::set_global_default(sub).is_ok();
        if let (true, Some(bad)) = (installed, bad) {
            tracing::warn!("{bad}");
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

/// Whether `NCCL_DEBUG_SUBSYS` (`None`: NCCL's default `INIT,ENV`) enables subsystem `name`.
fn subsystem_on(spec: Option<&str>, name: &str) -> bool {
    let spec = spec.filter(|s| !s.trim().is_empty()).unwrap_or("INIT,ENV").trim().to_ascii_uppercase();
    let (invert, list) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest.to_string()),
        None => (false, spec),
    };
    let listed = list.split(',').map(str::trim).any(|s| s == name || s == "ALL");
    listed != invert
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

struct NcclStyle {
    host: String,
}

impl<S, N> FormatEvent<S, N> for NcclStyle
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let dev = DEVICE.with(|d| d.get());
        write!(w, "{}:{}:{tid} ", self.host, std::process::id())?;
        if dev >= 0 {
            write!(w, "[{dev}] ")?;
        }
        write!(w, "RCCLX {} ", event.metadata().level())?;
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
    }
}
