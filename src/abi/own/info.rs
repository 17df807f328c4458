//! What this library is: its version, the stock library it forwards to, and `rcclxGetInfo`.

use std::ffi::{c_char, c_int};

use crate::abi::boundary;
use crate::types::ncclResult_t;

/// rcclx version as `MAJOR*10000 + MINOR*100 + PATCH`, from Cargo.toml's version (cbindgen
/// cannot evaluate it: tests/header.rs writes the header's `#define`).
/// cbindgen:ignore
pub const RCCLX_VERSION_CODE: c_int = {
    const fn num(s: &str) -> c_int {
        let (b, mut i, mut n) = (s.as_bytes(), 0, 0);
        while i < b.len() {
            n = n * 10 + (b[i] - b'0') as c_int;
            i += 1;
        }
        n
    }
    num(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + num(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + num(env!("CARGO_PKG_VERSION_PATCH"))
};

/// Writes rcclx's own version (`MAJOR*10000 + MINOR*100 + PATCH`) to `version`.
///
/// Returns `ncclInvalidArgument` if `version` is NULL.
///
/// # Safety
/// `version` must be NULL or point to writable memory for one `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcclxGetVersion(version: *mut c_int) -> ncclResult_t {
    boundary("rcclxGetVersion", || {
        if version.is_null() {
            return ncclResult_t::InvalidArgument;
        }
        // SAFETY: checked non-null; the caller guarantees it is writable.
        unsafe { version.write(RCCLX_VERSION_CODE) };
        ncclResult_t::Success
    })
}

/// The path of the stock library rcclx forwards to, or NULL if none could be loaded.
/// The string lives as long as the process.
#[unsafe(no_mangle)]
pub extern "C" fn rcclxGetUpstreamPath() -> *const c_char {
    boundary("rcclxGetUpstreamPath", || {
        static PATH: std::sync::OnceLock<Option<std::ffi::CString>> = std::sync::OnceLock::new();
        PATH.get_or_init(|| {
            let u = crate::upstream::get().ok()?;
            std::ffi::CString::new(u.path.to_string_lossy().into_owned()).ok()
        })
        .as_ref()
        .map_or(std::ptr::null(), |s| s.as_ptr())
    })
}

/// What this library is and how it is set up, as one JSON object: `version`, `commit`,
/// `gpu_targets` (the kernels it carries), `fp8_formats` (per target, the FP8 E4M3 encoding its
/// kernels produce: `"e4m3fn"` or `"e4m3fnuz"`), `stock_library` (`path`, `version`, or
/// `error`), `disabled`, `settings` (every variable rcclx reads: its value, or null and the
/// default), `gpu_runtime` (`vendor`, `library`, or `error`) and `devices` (per visible device:
/// `device`, `arch`, `kernels`, the target of the kernels rcclx runs there or null, and
/// `fp8_format`, the FP8 format of those kernels' codes or null; or `device` and `error`), and
/// `tuning_file` (null when none is found; else `path` and `entries`, each `gpu`, `nranks` and
/// `max_bytes` per collective it sets; or `path` and `error`, why it is ignored).
/// Computed once, at the first call (which loads the GPU runtime); the string lives as long as
/// the process. `python -m rcclx info` prints it.
#[unsafe(no_mangle)]
pub extern "C" fn rcclxGetInfo() -> *const c_char {
    boundary("rcclxGetInfo", || {
        static INFO: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
        INFO.get_or_init(|| std::ffi::CString::new(info_json()).unwrap_or_default()).as_ptr()
    })
}

/// The text of `rcclxGetInfo`.
fn info_json() -> String {
    let q = |s: &str| {
        let mut o = String::from('"');
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                c => o.push(c),
            }
        }
        o.push('"');
        o
    };
    let targets: Vec<String> = crate::kernels::CODE_OBJECTS.iter().map(|c| q(c.target)).collect();
    let stock = match crate::upstream::get() {
        Ok(u) => format!("{{\"path\": {}, \"version\": {}}}", q(&u.path.to_string_lossy()), q(&u.version())),
        Err(_) => {
            format!("{{\"error\": {}}}", q(crate::upstream::load_error().map_or("", |c| c.to_str().unwrap_or(""))))
        }
    };
    let formats: Vec<String> =
        crate::kernels::CODE_OBJECTS.iter().map(|c| format!("{}: {}", q(c.target), q(c.fp8_format().name()))).collect();
    let (runtime, devices) = match crate::gpu::runtime() {
        Ok(rt) => {
            let device = |d: i32| match rt.device_info(d) {
                Ok(info) => {
                    let code = crate::kernels::for_arch(&info.arch);
                    format!(
                        "{{\"device\": {d}, \"arch\": {}, \"kernels\": {}, \"fp8_format\": {}}}",
                        q(&info.arch),
                        code.map_or("null".into(), |c| q(c.target)),
                        code.map_or("null".into(), |c| q(c.fp8_format().name()))
                    )
                }
                Err(e) => format!("{{\"device\": {d}, \"error\": {}}}", q(&e.to_string())),
            };
            let runtime = format!("{{\"vendor\": {}, \"library\": {}}}", q(rt.vendor().name()), q(rt.library()));
            (runtime, (0..rt.device_count()).map(device).collect::<Vec<_>>())
        }
        Err(e) => (format!("{{\"error\": {}}}", q(&e.to_string())), Vec::new()),
    };
    let settings: Vec<String> = crate::config::variables()
        .iter()
        .map(|v| {
            let value = crate::config::env(v.name).map_or("null".into(), |x| q(&x));
            format!("{}: {{\"value\": {value}, \"default\": {}}}", q(v.name), q(&v.default))
        })
        .collect();
    let t = &crate::config::get().tuning;
    let tuning = match (&t.path, &t.tuning) {
        (None, _) => "null".into(),
        (Some(path), Some(f)) => {
            let entries: Vec<String> = f
                .entries
                .iter()
                .map(|e| {
                    let limits: Vec<String> = crate::collective::COLLS
                        .iter()
                        .zip(e.max_bytes)
                        .filter_map(|(s, max)| Some(format!("{}: {}", q(s.name), max?)))
                        .collect();
                    format!(
                        "{{\"gpu\": {}, \"nranks\": {}, \"max_bytes\": {{{}}}}}",
                        q(&e.gpu),
                        e.nranks,
                        limits.join(", ")
                    )
                })
                .collect();
            format!("{{\"path\": {}, \"entries\": [{}]}}", q(path), entries.join(", "))
        }
        (Some(path), None) => format!("{{\"path\": {}, \"error\": {}}}", q(path), q(t.error.as_deref().unwrap_or(""))),
    };
    format!(
        "{{\"version\": {}, \"commit\": {}, \"gpu_targets\": [{}], \"fp8_formats\": {{{}}}, \"stock_library\": {stock}, \"disabled\": {}, \"settings\": {{{}}}, \"tuning_file\": {tuning}, \"gpu_runtime\": {runtime}, \"devices\": [{}]}}",
        q(env!("CARGO_PKG_VERSION")),
        q(env!("RCCLX_GIT_HASH")),
        targets.join(", "),
        formats.join(", "),
        crate::config::get().disable,
        settings.join(", "),
        devices.join(", ")
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn info_reports_the_fp8_format_of_each_target_and_device() {
        let info = super::info_json();
        assert!(info.contains("\"fp8_formats\": {"), "{info}");
        for c in crate::kernels::CODE_OBJECTS {
            let entry = format!("\"{}\": \"{}\"", c.target, c.fp8_format().name());
            assert!(info.contains(&entry), "{entry} not in {info}");
        }
        assert!(info.contains("\"gpu_runtime\": {") && info.contains("\"devices\": ["), "{info}");
        match crate::gpu::runtime() {
            // CI: no GPU runtime, no devices, and the reason.
            Err(_) => assert!(info.contains("\"gpu_runtime\": {\"error\": ") && info.ends_with("\"devices\": []}")),
            Ok(rt) => {
                for d in 0..rt.device_count() {
                    let code = rt.device_info(d).ok().and_then(|i| crate::kernels::for_arch(&i.arch));
                    let format = code.map_or("null".to_string(), |c| format!("\"{}\"", c.fp8_format().name()));
                    assert!(info.contains(&format!("\"fp8_format\": {format}}}")), "device {d}: {info}");
                }
            }
        }
    }
}
