//! Logging with `tracing`: lines marked `RCCLX`, in the layout NCCL users know
//! (`host:pid:tid RCCLX LEVEL message`), on stderr.
//!
//! Filter: `RCCLX_LOG` (tracing-subscriber `EnvFilter` syntax, e.g. `rcclx=trace`) wins;
//! otherwise `NCCL_DEBUG` (`WARN`, `INFO`, `TRACE`; `VERSION` counts as WARN); default WARN.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Once;
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Installs the subscriber once. If the host program already installed a global tracing
/// subscriber, rcclx's events go to that one instead.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let (filter, bad) = filter_from(std::env::var("RCCLX_LOG").ok(), std::env::var("NCCL_DEBUG").ok());
        let sub = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .event_format(NcclStyle { host: hostname() })
            .finish();
        let installed = tracing::subscriber::set_global_default(sub).is_ok();
        if let (true, Some(bad)) = (installed, bad) {
            tracing::warn!("{bad}");
        }
    });
}

/// The filter directive for the two variables; the second value is a warning to log.
fn filter_from(rcclx_log: Option<String>, nccl_debug: Option<String>) -> (EnvFilter, Option<String>) {
    if let Some(spec) = rcclx_log.filter(|s| !s.is_empty()) {
        return match EnvFilter::try_new(&spec) {
            Ok(f) => (f, None),
            Err(e) => {
                (EnvFilter::new("warn"), Some(format!("RCCLX_LOG={spec:?} is not a valid filter ({e}); using warn")))
            }
        };
    }
    let level = match nccl_debug.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None | Some("") | Some("WARN") | Some("VERSION") => "warn",
        Some("INFO") => "info",
        Some("TRACE") => "trace",
        Some("ABORT") => "error",
        Some(other) => {
            return (
                EnvFilter::new("warn"),
                Some(format!("NCCL_DEBUG={other:?} is not WARN, INFO or TRACE; using WARN")),
            );
        }
    };
    (EnvFilter::new(level), None)
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
        let tid = std::thread::current().id();
        let tid = format!("{tid:?}");
        let tid = tid.trim_start_matches("ThreadId(").trim_end_matches(')');
        write!(w, "{}:{}:{} RCCLX {} ", self.host, std::process::id(), tid, event.metadata().level())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_debug_levels() {
        assert!(filter_from(None, Some("INFO".into())).1.is_none());
        assert!(filter_from(None, Some("trace".into())).1.is_none());
        assert!(filter_from(None, Some("LOUD".into())).1.unwrap().contains("NCCL_DEBUG"));
        assert!(filter_from(Some("rcclx=[".into()), None).1.unwrap().contains("RCCLX_LOG"));
        assert!(filter_from(Some("rcclx=trace".into()), None).1.is_none());
    }
}
