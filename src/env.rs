//! Where rcclx's settings come from: the process environment (through `secure_getenv`), then
//! NCCL's configuration files, with NCCL's precedence (`src/misc/param.cc` of NCCL 2.28.9).
//! The stock library puts the files' variables into the environment on its first use; rcclx
//! reads them without touching the environment, so its settings do not depend on which library
//! was called first.
//!
//! Layer: base (no other module of the crate).

use std::sync::OnceLock;

/// A variable as the configuration reads it: the process environment through `secure_getenv`
/// (a set-user-ID program ignores these variables, as the dynamic loader does its own), else
/// NCCL's configuration files ([`conf_files`]); non-UTF-8 is unset.
pub fn env(name: &str) -> Option<String> {
    match secure_env(name) {
        Some(v) => v.into_string().ok(),
        None => conf_files().iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
    }
}

/// The variables of NCCL's configuration files, read once, with NCCL's precedence
/// (`src/misc/param.cc`): the environment wins; then `NCCL_CONF_FILE` when set and not empty,
/// else `~/.nccl.conf` (the home directory of the real user, from the password database);
/// then `/etc/nccl.conf`. The stock library puts these into the environment (without
/// overwriting) on its first use; rcclx reads them without touching the environment.
pub fn conf_files() -> &'static [(String, String)] {
    static CONF: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CONF.get_or_init(|| {
        let user = match env_only("NCCL_CONF_FILE").filter(|f| !f.is_empty()) {
            Some(f) => Some(std::path::PathBuf::from(f)),
            None => home_dir().map(|h| h.join(".nccl.conf")),
        };
        let mut out: Vec<(String, String)> = Vec::new();
        for path in user.into_iter().chain([std::path::PathBuf::from("/etc/nccl.conf")]) {
            let Ok(text) = std::fs::read(&path) else { continue };
            for (k, v) in parse_conf(&String::from_utf8_lossy(&text)) {
                if !out.iter().any(|(name, _)| *name == k) {
                    out.push((k, v));
                }
            }
        }
        out
    })
}

pub fn env_only(name: &str) -> Option<String> {
    secure_env(name)?.into_string().ok()
}

/// `KEY=VALUE` lines as NCCL reads them: a line starting with `#` is a comment, a line without
/// `=` is skipped, the value is the rest of the line (not trimmed), both cut to 1023 bytes.
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    let cut = |s: &str| {
        let mut n = s.len().min(1023);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s[..n].to_string()
    };
    text.split('\n')
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (cut(k), cut(v)))
        .collect()
}

/// The real user's home directory (`getpwuid(getuid())`, as NCCL), not `$HOME`.
fn home_dir() -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: all-zero is a valid `passwd` (null pointers); getpwuid_r fills it, pointing into
    // `buf`, which outlives every read below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 16384];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the right size.
    let rc = unsafe { libc::getpwuid_r(libc::getuid(), &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir points to a NUL-terminated string inside `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
}

unsafe extern "C" {
    /// glibc >= 2.17 (`libc` 0.2 does not declare it).
    fn secure_getenv(name: *const std::ffi::c_char) -> *mut std::ffi::c_char;
}

/// `secure_getenv(name)`, unset when the process runs with elevated privileges.
pub fn secure_env(name: &str) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStringExt;
    let key = std::ffi::CString::new(name).ok()?;
    // SAFETY: `key` is NUL-terminated; a non-NULL result points into the environment and is
    // copied at once.
    let p = unsafe { secure_getenv(key.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL result of secure_getenv: a NUL-terminated string.
    Some(std::ffi::OsString::from_vec(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes().to_vec()))
}

/// `strtol(s, NULL, 0)`: leading decimal, `0x` hex or `0` octal digits; 0 when there are none.
pub fn c_strtol(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (radix, digits) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (16, h)
    } else if s.starts_with('0') {
        (8, s)
    } else {
        (10, s)
    };
    let end = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    let v = i64::from_str_radix(&digits[..end], radix).unwrap_or(0);
    if neg { -v } else { v }
}
