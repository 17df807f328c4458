//! Logging in NCCL 2.28's line format and under NCCL's own variables (`src/debug.cc` of NCCL
//! v2.28.9 is the reference), so that tools reading NCCL logs read rcclx's lines too. rcclx's
//! modules log with the `tracing` macros; [`Logger`] is the one `tracing::Subscriber`, about
//! what NCCL's `ncclDebugLog` is:
//!
//! * `NCCL_DEBUG`: unset (or not one of NCCL's words) prints nothing; `VERSION` the version
//!   line; `WARN`; `INFO`; `ABORT` (between INFO and TRACE, as in NCCL); `TRACE`.
//! * `NCCL_DEBUG_SUBSYS`: NCCL's names (`INIT`, `COLL`, `P2P`, `SHM`, `NET`, `GRAPH`, `TUNING`,
//!   `ENV`, `ALLOC`, `CALL`, `PROXY`, `NVLS`, `BOOTSTRAP`, `REG`, `PROFILE`, `RAS`, `ALL`; a
//!   leading `^` inverts; default `INIT,BOOTSTRAP,ENV`). Each rcclx module belongs to one
//!   subsystem ([`SUBSYSTEMS`]); route choices are `TUNING`'s, as NCCL's algorithm choices are.
//! * Lines (one `write` each), with `ts` from `NCCL_DEBUG_TIMESTAMP_LEVELS` (default `WARN`) in
//!   `NCCL_DEBUG_TIMESTAMP_FORMAT` (strftime, default `[%F %T] `, `%Nf`: N digits of the second's
//!   fraction, `_` becomes a space) and `host` the host name cut at its first dot:
//!   - WARN: `\n` `ts` `host:pid:tid [dev] file:line NCCL WARN rcclx: message`;
//!   - INFO: `ts` `host:pid:tid [dev] NCCL INFO rcclx: message`;
//!   - CALL: `ts` `host:pid:tid NCCL CALL ncclAllReduce(...)`, NCCL's replayable form, only for
//!     calls rcclx runs itself (the stock library prints its own for the calls it runs);
//!   - TRACE: `ts` `host:pid:tid [dev] <ms since init> file:line NCCL TRACE rcclx: message`;
//!   - the version line: bare (`rcclx version ...`) at `VERSION` and `WARN`, an INFO line above.
//! * Where: stdout, as NCCL. With `NCCL_DEBUG_FILE` (`%h` host, `%p` pid, `%%` a `%`) and a
//!   level above `VERSION`, the file named there plus `.rcclx`, opened on the first line and
//!   appended to: the stock library truncates its own file and writes it at its own offset,
//!   which would overwrite lines another writer added.
//! * `RCCLX_LOG` (a developer's filter: `level` or `target=level` items, comma-separated, the
//!   longest matching target wins, e.g. `rcclx=trace`) wins over `NCCL_DEBUG` and its
//!   subsystems; the format stays NCCL's.
//! * [`reset`] (`ncclResetDebugInit`) reads the variables again at the next line.
//!
//! The variables are read through [`crate::env::env`], so NCCL's configuration files count, by
//! `Settings::read` alone (the library and the tests call it the same way). They are not fields
//! of `config::Config`: reading the configuration logs, so logging comes first, and [`reset`]
//! reads them again.
//!
//! Layer: base.

use parking_lot::Mutex;
use std::cell::Cell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The target of the version line (shown from `NCCL_DEBUG=VERSION` up).
pub const VERSION_TARGET: &str = "rcclx::version";
/// The target of the call lines (`CALL`, at TRACE): `ncclAllReduce(...)` in NCCL's form.
pub const CALL_TARGET: &str = "rcclx::call";
/// The target of the per-collective route lines (`TUNING`, at INFO).
pub const COLL_TARGET: &str = "rcclx::tuning";
/// The target of rcclx's per-export lines (`ncclBcast`, a call re-entered from the stock
/// library): a developer's aid shown only through `RCCLX_LOG`; `NCCL_DEBUG` never selects it
/// (the stock library writes NCCL's own `CALL` lines).
pub const ENTRY_TARGET: &str = "rcclx::entry";

/// NCCL's levels (`ncclDebugLogLevel`).
pub const NONE: i32 = 0;
pub const VERSION: i32 = 1;
pub const WARN: i32 = 2;
pub const INFO: i32 = 3;
pub const ABORT: i32 = 4;
pub const TRACE: i32 = 5;

/// NCCL's subsystems (`ncclDebugLogSubSys`), by name.
pub const SUBSYS_NAMES: &[(&str, u64)] = &[
    ("INIT", 0x1),
    ("COLL", 0x2),
    ("P2P", 0x4),
    ("SHM", 0x8),
    ("NET", 0x10),
    ("GRAPH", 0x20),
    ("TUNING", 0x40),
    ("ENV", 0x80),
    ("ALLOC", 0x100),
    ("CALL", 0x200),
    ("PROXY", 0x400),
    ("NVLS", 0x800),
    ("BOOTSTRAP", 0x1000),
    ("REG", 0x2000),
    ("PROFILE", 0x4000),
    ("RAS", 0x8000),
    ("ALL", !0),
];

const INIT_BIT: u64 = 0x1;
const DEFAULT_MASK: u64 = 0x1 | 0x1000 | 0x80; // INIT | BOOTSTRAP | ENV

/// rcclx's modules and targets by NCCL subsystem (the longest matching path wins).
pub const SUBSYSTEMS: &[(&str, &[&str])] = &[
    ("INIT", &["rcclx::clique", "rcclx::comm::lifecycle", "rcclx::upstream", "rcclx::summary"]),
    ("BOOTSTRAP", &["rcclx::clique::exchange", "rcclx::clique::record", "rcclx::clique::host"]),
    ("COLL", &["rcclx::comm", "rcclx::dda", "rcclx::lowp"]),
    ("TUNING", &["rcclx::intercept", "rcclx::collective", COLL_TARGET]),
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

// ---- settings ---------------------------------------------------------------------------

/// `RCCLX_LOG`: `(target prefix, max tracing level)` items; `None` as the level is `off`.
#[derive(Debug, Clone, PartialEq)]
struct Directives(Vec<(String, Option<Level>)>);

impl Directives {
    fn parse(spec: &str) -> Result<Directives, String> {
        let mut out = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (target, level) = match item.split_once('=') {
                Some((t, l)) => (t.trim().to_string(), l.trim()),
                None => (String::new(), item),
            };
            if target.chars().any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
                return Err(format!("{target:?} is not a target"));
            }
            let level = match level.to_ascii_lowercase().as_str() {
                "off" => None,
                "error" => Some(Level::ERROR),
                "warn" => Some(Level::WARN),
                "info" => Some(Level::INFO),
                "debug" => Some(Level::DEBUG),
                "trace" => Some(Level::TRACE),
                other => return Err(format!("{other:?} is not off, error, warn, info, debug or trace")),
            };
            out.push((target, level));
        }
        Ok(Directives(out))
    }

    fn enabled(&self, target: &str, level: &Level) -> bool {
        let best = self
            .0
            .iter()
            .filter(|(t, _)| target.starts_with(t.as_str()))
            .max_by_key(|(t, _)| t.len())
            .map(|(_, l)| *l)
            .unwrap_or(Some(Level::WARN));
        best.is_some_and(|max| *level <= max)
    }
}

/// Everything the variables say, read at the first line and again after [`reset`].
#[derive(Debug, Clone)]
struct Settings {
    /// NCCL's level (`NONE` for unset or an unknown word, as NCCL).
    level: i32,
    mask: u64,
    directives: Option<Directives>,
    /// Bit `1 << level` for each NCCL level whose lines carry a timestamp.
    ts_levels: u32,
    ts_format: String,
    host: String,
    pid: u32,
    /// rcclx's own file (the stock library's name plus `.rcclx`), when lines go to a file.
    file: Option<String>,
    epoch: std::time::Instant,
}

/// Whether a NCCL-style list (`A,B`, a leading `^` inverts, case-insensitive) names a value,
/// as the mask of the names it lists (`names` gives each name's bits).
fn list_mask(spec: &str, names: &[(&str, u64)]) -> u64 {
    let (invert, list) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let mut mask = if invert { !0 } else { 0 };
    for item in list.split(',').filter(|s| !s.is_empty()) {
        if let Some((_, bits)) = names.iter().find(|(n, _)| n.eq_ignore_ascii_case(item)) {
            if invert {
                mask &= !bits;
            } else {
                mask |= bits;
            }
        }
    }
    mask
}

const LEVEL_NAMES: &[(&str, u64)] = &[
    ("VERSION", 1 << VERSION),
    ("WARN", 1 << WARN),
    ("INFO", 1 << INFO),
    ("ABORT", 1 << ABORT),
    ("TRACE", 1 << TRACE),
    ("ALL", !0),
];

/// NCCL's level of an `NCCL_DEBUG` value.
pub fn nccl_level(value: Option<&str>) -> i32 {
    let Some(v) = value else { return NONE };
    match v.to_ascii_uppercase().as_str() {
        "VERSION" => VERSION,
        "WARN" => WARN,
        "INFO" => INFO,
        "ABORT" => ABORT,
        "TRACE" => TRACE,
        _ => NONE,
    }
}

impl Settings {
    /// The settings for the variables `env` gives; the second value is a warning to log.
    fn read(env: impl Fn(&str) -> Option<String>, host: String, pid: u32) -> (Settings, Option<String>) {
        let level = nccl_level(env("NCCL_DEBUG").as_deref());
        let mask = env("NCCL_DEBUG_SUBSYS").map(|s| list_mask(&s, SUBSYS_NAMES)).unwrap_or(DEFAULT_MASK);
        let mut warning = None;
        let directives = match env("RCCLX_LOG").filter(|s| !s.trim().is_empty()) {
            None => None,
            Some(spec) => match Directives::parse(&spec) {
                Ok(d) => Some(d),
                Err(e) => {
                    warning = Some(format!("RCCLX_LOG={spec:?} is not a valid filter ({e}); using warn"));
                    Some(Directives(vec![(String::new(), Some(Level::WARN))]))
                }
            },
        };
        let ts_levels =
            env("NCCL_DEBUG_TIMESTAMP_LEVELS").map(|s| list_mask(&s, LEVEL_NAMES) as u32).unwrap_or(1 << WARN);
        let mut ts_format = env("NCCL_DEBUG_TIMESTAMP_FORMAT").unwrap_or_else(|| "[%F %T] ".into());
        if ts_format.len() > 255 {
            ts_format = "[%F %T] ".into();
        }
        // NCCL: "hard to put spaces in command line parameters".
        let ts_format = ts_format.replace('_', " ");
        let file = env("NCCL_DEBUG_FILE")
            .filter(|_| level > VERSION || directives.is_some())
            .map(|pattern| own_debug_file(&pattern, &host, pid))
            .filter(|f| f != ".rcclx");
        let s = Settings {
            level,
            mask,
            directives,
            ts_levels,
            ts_format,
            host,
            pid,
            file,
            epoch: std::time::Instant::now(),
        };
        (s, warning)
    }

    /// Whether a line at tracing level `level` with target `target` is written.
    fn enabled(&self, target: &str, level: &Level) -> bool {
        if let Some(d) = &self.directives {
            return d.enabled(target, level);
        }
        let need = match *level {
            Level::ERROR | Level::WARN => WARN,
            Level::INFO if target == VERSION_TARGET => VERSION,
            Level::INFO => INFO,
            Level::DEBUG | Level::TRACE => TRACE,
        };
        let bits = if need <= WARN || target == VERSION_TARGET { !0 } else { subsystem_of(target) };
        self.level >= need && self.mask & bits != 0
    }
}

/// The subsystem bits of a target (the longest matching module path; INIT if none; none for
/// [`ENTRY_TARGET`]).
fn subsystem_of(target: &str) -> u64 {
    if target == ENTRY_TARGET {
        return 0;
    }
    let mut best: Option<(&str, usize)> = None;
    for (name, paths) in SUBSYSTEMS {
        for p in *paths {
            let hit = target == *p || target.strip_prefix(p).is_some_and(|rest| rest.starts_with("::"));
            if hit && best.is_none_or(|(_, len)| p.len() > len) {
                best = Some((name, p.len()));
            }
        }
    }
    let name = best.map(|(n, _)| n).unwrap_or("INIT");
    SUBSYS_NAMES.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).unwrap_or(INIT_BIT)
}

/// Where rcclx's lines go with `NCCL_DEBUG_FILE=pattern`: the stock library's file (NCCL's
/// expansion: `%h` host, `%p` pid, `%%` a `%`, any other `%x` kept) plus `.rcclx`.
pub fn own_debug_file(pattern: &str, host: &str, pid: u32) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('h') => out.push_str(host),
            Some('p') => out.push_str(&pid.to_string()),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out.push_str(".rcclx");
    out
}

/// The host name as NCCL writes it: `gethostname`, cut at the first dot.
pub fn hostname() -> String {
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it or fails.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    if !ok {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0 || b == b'.').unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

// ---- the logger -------------------------------------------------------------------------

/// The level in effect (`-1`: not read yet, or reset), for the quick check of every event.
static LEVEL: AtomicI32 = AtomicI32::new(-1);
static MASK: AtomicU64 = AtomicU64::new(0);

struct State {
    settings: Option<Arc<Settings>>,
    /// rcclx's debug file, once opened (`Err` after opening failed: lines go to stdout).
    file: Option<Result<std::fs::File, ()>>,
}

static STATE: Mutex<State> = Mutex::new(State { settings: None, file: None });

/// The settings, read now if they were not (or were reset).
fn settings() -> Arc<Settings> {
    let mut st = STATE.lock();
    if let Some(s) = &st.settings {
        return s.clone();
    }
    let (s, warning) = Settings::read(crate::env::env, hostname(), std::process::id());
    let s = Arc::new(s);
    st.settings = Some(s.clone());
    st.file = None;
    MASK.store(if s.directives.is_some() { !0 } else { s.mask }, Ordering::Relaxed);
    LEVEL.store(if s.directives.is_some() { TRACE } else { s.level }, Ordering::Release);
    drop(st);
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    s
}

/// `ncclResetDebugInit`: the variables are read again at the next line, and rcclx's debug file
/// (if one is open) is closed, as NCCL does with its own.
pub fn reset() {
    let mut st = STATE.lock();
    st.settings = None;
    st.file = None;
    LEVEL.store(-1, Ordering::Release);
}

/// Installs rcclx's logger once (a no-op if this copy of `tracing` already has a global one).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Logger);
    });
}

/// rcclx's `tracing` subscriber: NCCL's filter and line format.
pub struct Logger;

impl Subscriber for Logger {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // Asked each time: the settings can change (ncclResetDebugInit).
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        if metadata.is_span() {
            return false;
        }
        let level = LEVEL.load(Ordering::Acquire);
        if level == NONE {
            return false;
        }
        // Quick rejections before any lock: lines above the level in effect.
        if (0..TRACE).contains(&level) {
            let need = match *metadata.level() {
                Level::ERROR | Level::WARN => WARN,
                Level::INFO if metadata.target() == VERSION_TARGET => VERSION,
                Level::INFO => INFO,
                _ => TRACE,
            };
            if level < need {
                return false;
            }
        }
        if level >= 0 && MASK.load(Ordering::Relaxed) == 0 {
            return false;
        }
        settings().enabled(metadata.target(), metadata.level())
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let s = settings();
        let meta = event.metadata();
        if !s.enabled(meta.target(), meta.level()) {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let kind = Kind::of(meta.target(), meta.level(), s.level, s.directives.is_some());
        let place = Place { file: meta.file().unwrap_or("rcclx"), line: meta.line().unwrap_or(0) };
        let line = format_line(&s, kind, place, &message.0, std::time::SystemTime::now());
        write_line(&s, line.as_bytes());
    }
}

/// The fields of one event: the message, then any other field as ` name=value`.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// The form of one line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// NCCL's VERSION line: the message alone.
    Version,
    Warn,
    Info,
    Call,
    Trace,
}

impl Kind {
    fn of(target: &str, level: &Level, nccl: i32, directives: bool) -> Kind {
        match *level {
            Level::ERROR | Level::WARN => Kind::Warn,
            Level::INFO if target == VERSION_TARGET && !directives && nccl <= WARN => Kind::Version,
            Level::INFO | Level::DEBUG => Kind::Info,
            Level::TRACE if target == CALL_TARGET => Kind::Call,
            Level::TRACE => Kind::Trace,
        }
    }

    /// NCCL's level of the line, for `NCCL_DEBUG_TIMESTAMP_LEVELS`.
    fn nccl_level(self) -> i32 {
        match self {
            Kind::Version => VERSION,
            Kind::Warn => WARN,
            Kind::Info => INFO,
            Kind::Call | Kind::Trace => TRACE,
        }
    }
}

/// Where a line was logged from (WARN and TRACE lines show it, as NCCL's do).
#[derive(Debug, Clone, Copy)]
struct Place<'a> {
    file: &'a str,
    line: u32,
}

/// The tag before rcclx's messages, so that its lines are told from the stock library's. The
/// version line and the call lines have none: they read as NCCL's do (`rcclx version ...`,
/// `ncclAllReduce(...)`).
const TAG: &str = "rcclx: ";

/// One line, `\n` included.
fn format_line(s: &Settings, kind: Kind, place: Place<'_>, message: &str, now: std::time::SystemTime) -> String {
    let mut out = String::new();
    if kind == Kind::Warn {
        out.push('\n');
    }
    if s.ts_levels & (1 << kind.nccl_level()) != 0 && !s.ts_format.is_empty() {
        let now = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        out.push_str(&timestamp(&s.ts_format, now.as_secs() as i64, now.subsec_nanos()));
    }
    if kind != Kind::Version {
        // SAFETY: the gettid system call has no preconditions (called raw: glibc's wrapper is
        // 2.30, newer than the manylinux_2_28 the wheel targets).
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let _ = write!(out, "{}:{}:{tid} ", s.host, s.pid);
    }
    let file = place.file.strip_prefix("src/").unwrap_or(place.file);
    let tag = if message.starts_with(TAG) || message.starts_with("rcclx version ") { "" } else { TAG };
    match kind {
        Kind::Version => out.push_str(message),
        Kind::Warn => {
            let _ = write!(out, "[{}] {file}:{} NCCL WARN {tag}{message}", device_of_this_thread(), place.line);
        }
        Kind::Info => {
            let _ = write!(out, "[{}] NCCL INFO {tag}{message}", device_of_this_thread());
        }
        Kind::Call => {
            let _ = write!(out, "NCCL CALL {message}");
        }
        Kind::Trace => {
            let ms = s.epoch.elapsed().as_secs_f64() * 1000.0;
            let _ =
                write!(out, "[{}] {ms:.6} {file}:{} NCCL TRACE {tag}{message}", device_of_this_thread(), place.line);
        }
    }
    out.push('\n');
    out
}

unsafe extern "C" {
    /// glibc's `stdout` stream: rcclx's lines go through it, in order with the stock library's.
    static stdout: *mut libc::FILE;
}

/// Writes one line (one `write` to rcclx's file, or one `fwrite` plus `fflush` to stdout).
fn write_line(s: &Settings, line: &[u8]) {
    if let Some(path) = &s.file {
        let mut st = STATE.lock();
        let same = st.settings.as_ref().is_some_and(|cur| std::ptr::eq(&**cur, s));
        if same {
            let f = st.file.get_or_insert_with(|| {
                std::fs::OpenOptions::new().append(true).create(true).open(path).map_err(|_| ())
            });
            if let Ok(f) = f {
                let _ = f.write_all(line);
                return;
            }
        }
    }
    // SAFETY: `stdout` is glibc's stream, valid for the life of the process; `line` is readable
    // for its length. fwrite locks the stream, so the line is never cut by another writer.
    unsafe {
        let out = stdout;
        libc::fwrite(line.as_ptr().cast(), 1, line.len(), out);
        libc::fflush(out);
    }
}

/// The timestamp for `secs.nanos` in `format` (NCCL's: the first `%Nf`, N = 1..9, becomes N
/// digits of the second's fraction; then strftime in local time).
fn timestamp(format: &str, secs: i64, nanos: u32) -> String {
    strftime_local(&with_fraction(format, nanos), secs)
}

/// `format` with its first `%Nf` (N = 1..9) replaced by the first N digits of the fraction.
fn with_fraction(format: &str, nanos: u32) -> String {
    let digits = format!("{nanos:09}");
    let b = format.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && b.get(i + 1) == Some(&b'%') {
            i += 2;
            continue;
        }
        if b[i] == b'%' && matches!(b.get(i + 1), Some(b'1'..=b'9')) && b.get(i + 2) == Some(&b'f') {
            let n = (b[i + 1] - b'0') as usize;
            return format!("{}{}{}", &format[..i], &digits[..n], &format[i + 3..]);
        }
        i += 1;
    }
    format.to_string()
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
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is writable for its length, `fmt` is NUL-terminated, `tm` initialised.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm) };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[allow(clippy::too_many_arguments)]
/// NCCL's `CALL` line of a collective (`enqueue.cc`: `nccl<Op>(send,recv,count,datatype,op,
/// root,comm,stream)`, the buffers in hex without `0x`, the handles as `%p`).
pub fn call_line(
    op_name: &str,
    send: *const std::ffi::c_void,
    recv: *const std::ffi::c_void,
    count: usize,
    datatype: i32,
    op: i32,
    root: i32,
    comm: *const std::ffi::c_void,
    stream: *const std::ffi::c_void,
) -> String {
    format!(
        "nccl{op_name}({:x},{:x},{count},{datatype},{op},{root},{},{})",
        send as usize,
        recv as usize,
        c_pointer(comm),
        c_pointer(stream)
    )
}

/// A pointer as glibc's `%p` writes it (`(nil)` for NULL).
fn c_pointer(p: *const std::ffi::c_void) -> String {
    if p.is_null() { "(nil)".into() } else { format!("{p:p}") }
}

/// Whether CALL lines are written now (so that callers build them only then).
pub fn calls_on() -> bool {
    let level = LEVEL.load(Ordering::Acquire);
    if (0..TRACE).contains(&level) {
        return false;
    }
    init();
    settings().enabled(CALL_TARGET, &Level::TRACE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> (Settings, Option<String>) {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::read(|k| m.get(k).cloned(), "node7".into(), 42)
    }

    fn at(s: &Settings, target: &str, level: Level) -> bool {
        s.enabled(target, &level)
    }

    #[test]
    fn nothing_when_nccl_debug_is_unset_or_unknown() {
        for env in [&[][..], &[("NCCL_DEBUG", "LOUD")][..], &[("NCCL_DEBUG", "")][..]] {
            let (s, w) = read(env);
            assert_eq!(s.level, NONE);
            assert!(w.is_none());
            assert!(!at(&s, "rcclx::clique", Level::WARN) && !at(&s, VERSION_TARGET, Level::INFO));
        }
    }

    #[test]
    fn levels_in_nccls_order() {
        let (warn, _) = read(&[("NCCL_DEBUG", "warn")]);
        assert!(at(&warn, "rcclx::comm", Level::WARN) && at(&warn, VERSION_TARGET, Level::INFO));
        assert!(!at(&warn, "rcclx::clique", Level::INFO));
        let (version, _) = read(&[("NCCL_DEBUG", "VERSION")]);
        assert!(at(&version, VERSION_TARGET, Level::INFO) && !at(&version, "rcclx::comm", Level::WARN));
        // ABORT is above INFO: INFO lines show, TRACE ones do not.
        let (abort, _) = read(&[("NCCL_DEBUG", "ABORT")]);
        assert!(at(&abort, "rcclx::clique", Level::INFO) && !at(&abort, CALL_TARGET, Level::TRACE));
        let (trace, _) = read(&[("NCCL_DEBUG", "TRACE"), ("NCCL_DEBUG_SUBSYS", "CALL")]);
        assert!(at(&trace, CALL_TARGET, Level::TRACE) && !at(&trace, COLL_TARGET, Level::INFO));
    }

    #[test]
    fn subsystems_are_nccls() {
        let (info, _) = read(&[("NCCL_DEBUG", "INFO")]);
        assert!(at(&info, "rcclx::clique", Level::INFO) && at(&info, "rcclx::config", Level::INFO));
        assert!(at(&info, "rcclx::clique::exchange", Level::INFO), "BOOTSTRAP is on by default");
        assert!(!at(&info, "rcclx::comm", Level::INFO) && !at(&info, COLL_TARGET, Level::INFO));
        let (tuning, _) = read(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "tuning")]);
        assert!(at(&tuning, COLL_TARGET, Level::INFO) && !at(&tuning, "rcclx::clique", Level::INFO));
        let (boot, _) = read(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "BOOTSTRAP")]);
        assert!(at(&boot, "rcclx::clique::exchange", Level::INFO) && !at(&boot, "rcclx::clique", Level::INFO));
        let (not_init, _) = read(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "^INIT")]);
        assert!(!at(&not_init, "rcclx::clique", Level::INFO) && at(&not_init, "rcclx::gpu", Level::INFO));
        // The version line and warnings belong to every subsystem (NCCL_ALL), but not to none.
        assert!(at(&not_init, VERSION_TARGET, Level::INFO) && at(&not_init, "rcclx::clique", Level::WARN));
        let (none, _) = read(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "^ALL")]);
        assert!(!at(&none, "rcclx::clique", Level::WARN));
        assert_eq!(subsystem_of("rcclx::commx"), INIT_BIT, "a path prefix must end at `::`");
    }

    #[test]
    fn rcclx_log_wins() {
        let (s, w) = read(&[("RCCLX_LOG", "rcclx=trace")]);
        assert!(w.is_none() && at(&s, CALL_TARGET, Level::TRACE) && at(&s, "rcclx::gpu", Level::DEBUG));
        let (s, _) = read(&[("RCCLX_LOG", "warn,rcclx::gpu=debug")]);
        assert!(at(&s, "rcclx::gpu::cuda", Level::DEBUG) && !at(&s, "rcclx::comm", Level::INFO));
        let (s, w) = read(&[("RCCLX_LOG", "rcclx=[")]);
        assert!(w.unwrap().contains("RCCLX_LOG") && at(&s, "rcclx::comm", Level::WARN));
        assert!(!at(&s, "rcclx::comm", Level::INFO));
    }

    fn now() -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::new(1_800_000_000, 123_456_789)
    }

    /// Each form against the pattern of NCCL 2.28.9's line (`src/debug.cc`).
    #[test]
    fn lines_in_nccls_format() {
        let (s, _) = read(&[("NCCL_DEBUG", "TRACE"), ("NCCL_DEBUG_TIMESTAMP_LEVELS", "")]);
        let at = Place { file: "src/comm/mod.rs", line: 77 };
        let pid_tid = |l: &str| -> String {
            let (host, rest) = l.split_once(':').unwrap();
            let (pid, rest) = rest.split_once(':').unwrap();
            let (tid, rest) = rest.split_once(' ').unwrap();
            assert_eq!((host, pid), ("node7", "42"), "{l:?}");
            assert!(tid.parse::<u32>().is_ok(), "{l:?}");
            rest.to_string()
        };
        let w = format_line(&s, Kind::Warn, at, "rcclx: already tagged", now());
        assert!(w.starts_with('\n') && w.ends_with('\n'));
        assert!(pid_tid(&w[1..]).ends_with("] comm/mod.rs:77 NCCL WARN rcclx: already tagged\n"), "{w:?}");
        let i = format_line(&s, Kind::Info, at, "hello", now());
        assert!(pid_tid(&i).ends_with("] NCCL INFO rcclx: hello\n"), "{i:?}");
        let c = format_line(&s, Kind::Call, at, "ncclAllReduce(1,2,3,7,0,0,(nil),(nil))", now());
        assert_eq!(pid_tid(&c), "NCCL CALL ncclAllReduce(1,2,3,7,0,0,(nil),(nil))\n");
        let t = pid_tid(&format_line(&s, Kind::Trace, at, "x", now()));
        let parts: Vec<&str> = t.split(' ').collect();
        assert!(parts[0].starts_with('[') && parts[1].contains('.') && parts[1].parse::<f64>().is_ok(), "{t:?}");
        assert_eq!(&parts[2..], ["comm/mod.rs:77", "NCCL", "TRACE", "rcclx:", "x\n"]);
        let v = format_line(&s, Kind::Version, at, "rcclx version 1", now());
        assert_eq!(v, "rcclx version 1\n");
        let vi = format_line(&s, Kind::Info, at, "rcclx version 1", now());
        assert!(vi.ends_with("] NCCL INFO rcclx version 1\n"), "{vi:?}");
    }

    #[test]
    fn version_line_is_bare_at_version_and_warn() {
        assert_eq!(Kind::of(VERSION_TARGET, &Level::INFO, WARN, false), Kind::Version);
        assert_eq!(Kind::of(VERSION_TARGET, &Level::INFO, VERSION, false), Kind::Version);
        assert_eq!(Kind::of(VERSION_TARGET, &Level::INFO, INFO, false), Kind::Info);
        assert_eq!(Kind::of(CALL_TARGET, &Level::TRACE, TRACE, false), Kind::Call);
        assert_eq!(Kind::of("rcclx::gpu", &Level::DEBUG, TRACE, false), Kind::Info);
    }

    #[test]
    fn timestamps_follow_nccls_variables() {
        let (s, _) = read(&[("NCCL_DEBUG", "INFO")]);
        assert_eq!(s.ts_levels, 1 << WARN);
        let at = Place { file: "x.rs", line: 1 };
        assert!(format_line(&s, Kind::Info, at, "m", now()).starts_with("node7:"));
        let w = format_line(&s, Kind::Warn, at, "m", now());
        // "\n[2027-01-15 08:00:00] node7:..."
        assert!(w.starts_with("\n[20") && w[1..].find("] node7:") == Some(20), "{w:?}");
        let (s, _) = read(&[("NCCL_DEBUG_TIMESTAMP_LEVELS", "ALL"), ("NCCL_DEBUG_TIMESTAMP_FORMAT", "%s.%3f|%%|%3f_")]);
        assert_eq!(s.ts_format, "%s.%3f|%%|%3f ", "`_` is a space");
        assert_eq!(timestamp(&s.ts_format, 1_800_000_000, 123_456_789), "1800000000.123|%|%3f ");
        let (s, _) = read(&[("NCCL_DEBUG_TIMESTAMP_LEVELS", "^WARN")]);
        assert!(s.ts_levels & (1 << INFO) != 0 && s.ts_levels & (1 << WARN) == 0);
        assert_eq!(with_fraction("%F %6f %Z", 123_456_789), "%F 123456 %Z");
        assert_eq!(with_fraction("%%6f", 1), "%%6f");
    }

    #[test]
    fn own_file_is_the_stock_librarys_plus_rcclx() {
        assert_eq!(own_debug_file("/tmp/nccl.%h.%p.log", "node1", 42), "/tmp/nccl.node1.42.log.rcclx");
        assert_eq!(own_debug_file("pct%%.%q.log", "h", 1), "pct%.%q.log.rcclx");
        // The file is only used above VERSION (below it NCCL writes to stdout).
        let (s, _) = read(&[("NCCL_DEBUG", "VERSION"), ("NCCL_DEBUG_FILE", "/tmp/x")]);
        assert_eq!(s.file, None);
        let (s, _) = read(&[("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG_FILE", "/tmp/x.%h")]);
        assert_eq!(s.file.as_deref(), Some("/tmp/x.node7.rcclx"));
        let (s, _) = read(&[("NCCL_DEBUG_FILE", "/tmp/x")]);
        assert_eq!(s.file, None, "NCCL_DEBUG unset: no file");
    }

    #[test]
    fn host_name_is_cut_at_the_first_dot() {
        let h = hostname();
        assert!(!h.contains('.') && !h.is_empty(), "{h}");
    }

    #[test]
    fn call_lines_are_replayable() {
        let p = 0x7f00_1234_5000usize as *const std::ffi::c_void;
        assert_eq!(
            call_line("AllReduce", p, p, 16, 7, 0, 0, std::ptr::null(), p),
            "ncclAllReduce(7f0012345000,7f0012345000,16,7,0,0,(nil),0x7f0012345000)"
        );
    }
}
