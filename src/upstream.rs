//! The stock library (RCCL or NCCL), loaded at run time.
//!
//! Search order (ARCHITECTURE.md "Loading the upstream library"): `RCCLX_UPSTREAM_LIB`; a
//! stock library already mapped in the process; `librccl.so.1`, `librccl.so`, `libnccl.so.2`,
//! `libnccl.so` on the search path; `/opt/rocm/lib`; the `nvidia/nccl/lib` folder of the
//! active Python environment. rcclx itself is never accepted (it may be installed under the
//! stock file name): a candidate exporting rcclx's marker symbol, or resolving to rcclx's own
//! file, is skipped. The library is opened `RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND` so its
//! internal calls to its own exports bind inside it. When the stock library was already mapped
//! by the dynamic linker (LD_PRELOAD use), DEEPBIND cannot apply; the thread-local re-entrancy
//! guard ([`guarded`], [`pass_through`]) then sends such nested calls straight back to it.
//!
//! Paths come only from what the user set or the loader's own search: a relative or empty
//! `VIRTUAL_ENV` / `CONDA_PREFIX` / `PYTHONPATH` entry is skipped (it would resolve against the
//! current directory), and every variable is read with `secure_getenv`, so a set-user-ID program
//! ignores them as the loader does.
//!
//! Layer: base (above `types`, `config`, `log`, `nccl_api`).
#![allow(non_snake_case)]

use crate::config::secure_env;
use crate::types::*;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::{CStr, OsString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Symbol whose presence marks a library as rcclx (so rcclx never loads itself as upstream).
pub const MARKER_SYMBOL: &[u8] = b"rcclxGetVersion\0";

/// Generates [`UpstreamFns`] from the export list.
macro_rules! upstream_fns {
    ( $( $kind:ident $( ( $($opt:tt)* ) )? fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        /// Function pointers of the stock library, one per export; `None` if it lacks the symbol.
        pub struct UpstreamFns {
            $( pub $name: Option<unsafe extern "C" fn($($ty),*) -> $ret>, )*
        }

        impl UpstreamFns {
            /// Resolves every symbol of the list in `lib`.
            pub fn resolve(lib: &libloading::Library) -> Self {
                Self { $( $name: symbol(lib, stringify!($name)), )* }
            }
        }
    };
}
crate::nccl_api!(upstream_fns);

/// The loaded stock library.
pub struct Upstream {
    pub path: PathBuf,
    pub fns: UpstreamFns,
    _lib: libloading::Library,
}

static UPSTREAM: OnceLock<Result<Upstream, String>> = OnceLock::new();

/// The stock library, loading it on first use. Without one, logs once (naming
/// `RCCLX_UPSTREAM_LIB`) and returns `ncclSystemError`; never aborts.
pub fn get() -> Result<&'static Upstream, ncclResult_t> {
    loaded().as_ref().map_err(|_| ncclResult_t::SystemError)
}

/// The outcome of loading the stock library, which happens on first use.
fn loaded() -> &'static Result<Upstream, String> {
    UPSTREAM.get_or_init(|| {
        crate::log::init();
        let r = load();
        match &r {
            Ok(u) => {
                let targets: Vec<&str> = crate::kernels::CODE_OBJECTS.iter().map(|c| c.target).collect();
                let cfg = crate::config::get();
                let mode = if cfg.disable {
                    "disabled by RCCLX_DISABLE=1: every call goes to the stock library".to_string()
                } else if let Some(why) = &cfg.stock_only {
                    format!("kernels off by {why}: every call goes to the stock library")
                } else if targets.is_empty() {
                    "built without GPU kernels: every call goes to the stock library".to_string()
                } else {
                    format!("kernels for {}", targets.join(", "))
                };
                tracing::info!(
                    target: crate::log::VERSION_TARGET,
                    "rcclx version {}+{} over {} (NCCL {}); {mode}",
                    env!("CARGO_PKG_VERSION"),
                    env!("RCCLX_GIT_HASH"),
                    u.path.display(),
                    u.version()
                );
                if targets.is_empty() && !cfg.forward_all() {
                    tracing::warn!(
                        "this librcclx.so was built without GPU kernels (no kernel compiler at build time): \
                         every call goes to the stock library. Rebuild with `bash scripts/run.sh`"
                    );
                }
            }
            Err(why) => tracing::warn!(
                "no stock NCCL/RCCL library could be loaded ({why}); every call returns ncclSystemError. \
                 Set RCCLX_UPSTREAM_LIB=/path/to/libnccl.so.2 (or librccl.so.1)"
            ),
        }
        r
    })
}

impl Upstream {
    /// The stock library's version as `major.minor.patch` (from `ncclGetVersion`).
    pub fn version(&self) -> String {
        let mut code: c_int = 0;
        let ok = self.fns.ncclGetVersion.is_some_and(|f| {
            // SAFETY: resolved from the stock library with the header's signature; out-pointer
            // to a local.
            guarded(|| unsafe { f(&mut code) }).is_ok()
        });
        if !ok {
            return "version unknown".into();
        }
        // NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
        let (x, y, z) = if code >= 10000 {
            (code / 10000, code % 10000 / 100, code % 100)
        } else {
            (code / 1000, code % 1000 / 100, code % 100)
        };
        format!("{x}.{y}.{z}")
    }
}

/// Why no stock library could be loaded (what was tried, what to set), or `None` if one was.
pub fn load_error() -> Option<&'static CStr> {
    static TEXT: OnceLock<std::ffi::CString> = OnceLock::new();
    let why = loaded().as_ref().err()?;
    Some(TEXT.get_or_init(|| {
        let text = format!(
            "rcclx could not load the stock NCCL/RCCL library ({why}); set RCCLX_UPSTREAM_LIB=/path/to/libnccl.so.2 (or librccl.so.1)"
        );
        std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default()
    }))
}

/// The text of rcclx's own last error (a failed launch, a setup that heard no peer), for
/// `ncclGetLastError`, with the stock library's text as it was then: ours is the last error
/// until the stock library reports a newer one (its text changes).
struct OwnLastError {
    /// NUL-terminated; the address stays valid for the life of the process (as the stock
    /// library's buffer does, its contents may change under a reader).
    text: [u8; 512],
    set: bool,
    stock_then: Vec<u8>,
}

static OWN_LAST_ERROR: Mutex<OwnLastError> =
    Mutex::new(OwnLastError { text: [0; 512], set: false, stock_then: Vec::new() });

/// The stock library's last-error text now (empty when it has none to give).
fn stock_last_error() -> Vec<u8> {
    let Some(f) = get().ok().and_then(|u| u.fns.ncclGetLastError) else { return Vec::new() };
    // SAFETY: `ncclGetLastError` takes any communicator (or NULL) and returns a NUL-terminated
    // string owned by the stock library, or NULL.
    let p = guarded(|| unsafe { f(std::ptr::null_mut()) });
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: non-null, NUL-terminated (see above); copied at once.
    unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()
}

/// Records `text` as the last error `ncclGetLastError` returns (cut to 511 bytes).
/// An rcclx error the application must hear of: one WARN line, and the text `ncclGetLastError`
/// returns (PyTorch puts it into the exception it raises).
pub fn report_error(text: &str) {
    // The log line has its own `rcclx:` tag.
    tracing::warn!("{}", text.strip_prefix("rcclx: ").unwrap_or(text));
    set_last_error(text);
}

/// A forwarded call failed (not `ncclInProgress`): the stock library's error is now the newest,
/// so `ncclGetLastError` returns its text, even when it equals the one before rcclx's error.
pub fn forwarded_error() {
    let mut e = OWN_LAST_ERROR.lock();
    e.set = false;
}

pub fn set_last_error(text: &str) {
    let stock_then = stock_last_error();
    let mut e = OWN_LAST_ERROR.lock();
    let n = text.len().min(e.text.len() - 1);
    e.text[..n].copy_from_slice(&text.as_bytes()[..n]);
    e.text[n] = 0;
    e.text[..n].iter_mut().filter(|b| **b == 0).for_each(|b| *b = b' ');
    e.set = true;
    e.stock_then = stock_then;
}

/// What `ncclGetLastError` returns, given the stock library's answer `stock`: rcclx's own last
/// error while the stock library has reported none since, else `stock`.
///
/// # Safety
/// `stock` is NULL or a NUL-terminated string.
pub unsafe fn last_error(stock: *const c_char) -> *const c_char {
    // SAFETY: the caller's promise.
    let stock_now: &[u8] = if stock.is_null() { b"" } else { unsafe { CStr::from_ptr(stock) }.to_bytes() };
    let mut e = OWN_LAST_ERROR.lock();
    if e.set && e.stock_then == stock_now {
        return e.text.as_ptr().cast();
    }
    e.set = false;
    stock
}

/// Resolves one symbol; `None` if the library lacks it (older NCCL/RCCL).
pub fn symbol<F: Copy>(lib: &libloading::Library, name: &str) -> Option<F> {
    // SAFETY: the caller (the export table) gives `F` the C signature of `name` from the
    // stock header; the pointer stays valid while `lib` lives, which is the whole process.
    unsafe { lib.get::<F>(name.as_bytes()).ok().map(|s| *s) }
}

/// The stock library lacks `name`: logs it once per name, makes it the text `ncclGetLastError`
/// returns (every time, as each call fails), and returns `ncclInvalidUsage`.
pub fn missing_symbol(name: &'static str) -> ncclResult_t {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let path = UPSTREAM.get().and_then(|r| r.as_ref().ok()).map(|u| u.path.display().to_string());
    let text =
        format!("{name}: not provided by the stock library {}; returning ncclInvalidUsage", path.unwrap_or_default());
    if SEEN.lock().get_or_insert_with(HashSet::new).insert(name) {
        tracing::warn!("{text}");
    }
    set_last_error(&format!("rcclx: {text}"));
    ncclResult_t::InvalidUsage
}

thread_local! {
    /// How deep this thread is inside a call to the stock library.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The stock library's asynchronous error of `comm` (`ncclSuccess` without one, or when the
/// library cannot say): a failed proxy, a dead peer of its own operations, an abort.
pub(crate) fn async_error(comm: ncclComm_t) -> ncclResult_t {
    let Some(get) = get().ok().and_then(|u| u.fns.ncclCommGetAsyncError) else { return ncclResult_t::Success };
    let mut state = ncclResult_t::Success;
    // SAFETY: a live stock communicator; the out-pointer is a local.
    let r = guarded(|| unsafe { get(comm, &mut state) });
    if r.is_ok() { state } else { r }
}

/// Runs a call into the stock library with the re-entrancy guard raised.
pub fn guarded<R>(call: impl FnOnce() -> R) -> R {
    struct Lower;
    impl Drop for Lower {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get() - 1));
        }
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let _lower = Lower;
    call()
}

/// One TRACE line per exported call, for `RCCLX_LOG` only ([`crate::log::ENTRY_TARGET`]:
/// NCCL's own `CALL` lines come from the stock library); calls coming back from inside the
/// stock library (it called one of its own exports, bound to rcclx by the dynamic linker) say
/// so.
pub fn trace_entry(name: &'static str) {
    crate::log::init();
    if DEPTH.with(|d| d.get() > 0) {
        tracing::trace!(target: crate::log::ENTRY_TARGET, "{name}: re-entered from the stock library, passed straight back");
    } else {
        tracing::trace!(target: crate::log::ENTRY_TARGET, "{name}");
    }
}

/// True when a hook must behave as a plain forward: the call comes from inside the stock
/// library (it called one of its own exports and the dynamic linker bound it to rcclx),
/// `RCCLX_DISABLE=1`, or an NCCL variable leaves every call to the stock library
/// (`Config::stock_only`: peer-to-peer off, pointer checks).
pub fn pass_through() -> bool {
    DEPTH.with(|d| d.get() > 0) || crate::config::get().forward_all()
}

/// Error strings rcclx can give without the stock library (same wording as NCCL's).
pub fn own_error_string(code: ncclResult_t) -> &'static CStr {
    match code.0 {
        0 => c"no error",
        1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        2 => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        3 => c"internal error - please report this issue to the NCCL developers",
        4 => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        5 => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"NCCL operation in progress",
        8 => c"timeout",
        _ => c"unknown result code",
    }
}

// ---- loading ----------------------------------------------------------------------------

const STOCK_NAMES: &[&str] = &["librccl.so.1", "librccl.so", "libnccl.so.2", "libnccl.so"];

fn load() -> Result<Upstream, String> {
    let cfg = crate::config::get();
    if let Some(path) = &cfg.upstream_lib {
        return open_checked(Path::new(path)).map_err(|e| format!("RCCLX_UPSTREAM_LIB={path}: {e}"));
    }
    let mut tried = Vec::new();
    for cand in candidates() {
        match open_checked(&cand) {
            Ok(u) => return Ok(u),
            Err(e) => {
                tracing::debug!("upstream candidate {}: {e}", cand.display());
                tried.push(cand.display().to_string());
            }
        }
    }
    Err(format!("tried {}", tried.join(", ")))
}

/// Candidate paths, in search order (names without a slash go through the loader's search).
fn candidates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = mapped_stock_libraries();
    out.extend(STOCK_NAMES.iter().map(PathBuf::from));
    out.extend(["librccl.so.1", "librccl.so"].iter().map(|n| Path::new("/opt/rocm/lib").join(n)));
    out.extend(python_nccl_dirs(secure_env).into_iter().map(|d| d.join("libnccl.so.2")));
    out
}

/// Stock libraries the dynamic linker already mapped (e.g. PyTorch's `DT_NEEDED libnccl.so.2`).
fn mapped_stock_libraries() -> Vec<PathBuf> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // A panic must not unwind into the loader: it ends the walk instead.
        let walked = std::panic::catch_unwind(|| {
            // SAFETY: dl_iterate_phdr passes a valid info for the duration of the callback, and
            // `data` is the Vec passed in below.
            let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<PathBuf>)) };
            if !info.dlpi_name.is_null() {
                // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
                let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
                let base = name.rsplit('/').next().unwrap_or("");
                if name.starts_with('/') && (base.starts_with("libnccl.so") || base.starts_with("librccl.so")) {
                    out.push(PathBuf::from(name.as_ref()));
                }
            }
        });
        if walked.is_ok() { 0 } else { 1 }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads the loader's data and writes into `out`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut out as *mut Vec<PathBuf> as *mut c_void) };
    out
}

/// `site-packages/nvidia/nccl/lib` of the active virtualenv / conda env / PYTHONPATH, read
/// through `env`. Only absolute entries count: a relative or empty one would be resolved against
/// the current directory, which the user did not name.
fn python_nccl_dirs(env: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = env(var).map(PathBuf::from).filter(|p| p.is_absolute()) {
            let lib = prefix.join("lib");
            if let Ok(rd) = std::fs::read_dir(&lib) {
                let mut found: Vec<PathBuf> = rd
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
                    .map(|e| e.path().join("site-packages"))
                    .collect();
                found.sort();
                roots.extend(found);
            }
        }
    }
    if let Some(pp) = env("PYTHONPATH") {
        roots.extend(std::env::split_paths(&pp).filter(|p| p.is_absolute()));
    }
    roots.into_iter().map(|r| r.join("nvidia/nccl/lib")).collect()
}

/// Opens `path` with DEEPBIND and rejects it if it is rcclx itself.
fn open_checked(path: &Path) -> Result<Upstream, String> {
    if let (Some(own), Ok(real)) = (own_path(), std::fs::canonicalize(path))
        && real == own
    {
        return Err("is rcclx itself".into());
    }
    let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND;
    // SAFETY: loading a shared library runs its initialisers; the stock NCCL/RCCL libraries
    // are designed to be dlopen'ed.
    let lib = unsafe { libloading::os::unix::Library::open(Some(path), flags) }.map_err(|e| e.to_string())?;
    let lib: libloading::Library = lib.into();
    // SAFETY: only the address is looked at, never called.
    if unsafe { lib.get::<*const c_void>(MARKER_SYMBOL) }.is_ok() {
        return Err("is rcclx itself (exports the rcclx marker)".into());
    }
    let fns = UpstreamFns::resolve(&lib);
    let Some(get_version) = fns.ncclGetVersion else {
        return Err("does not export ncclGetVersion: not an NCCL/RCCL library".into());
    };
    // The file the loader really opened: `path` may be a bare name found on the search path.
    let path = file_of(get_version as *const c_void)
        .or_else(|| std::fs::canonicalize(path).ok())
        .unwrap_or_else(|| path.to_path_buf());
    Ok(Upstream { path, fns, _lib: lib })
}

/// The file rcclx was loaded from (canonical), found through one of its own functions.
pub fn own_path() -> Option<PathBuf> {
    file_of(own_path as *const c_void)
}

/// The file (canonical) of the loaded object that contains `addr`, from `dladdr`.
fn file_of(addr: *const c_void) -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe_zeroed_dl_info();
    // SAFETY: dladdr only reads the loader's tables and writes into `info`; any address is
    // accepted (0 is returned when no loaded object contains it).
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    std::fs::canonicalize(name).ok()
}

fn unsafe_zeroed_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(pairs: &[(&str, &str)]) -> Vec<PathBuf> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        python_nccl_dirs(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn python_path_entries_must_be_absolute() {
        let got = dirs(&[("PYTHONPATH", ":rel/dir::/abs/site:./x:")]);
        assert_eq!(got, vec![PathBuf::from("/abs/site/nvidia/nccl/lib")]);
    }

    #[test]
    fn relative_or_empty_prefixes_are_skipped() {
        let tmp = std::env::temp_dir().join(format!("rcclx-upstream-test-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("lib/python3.12/site-packages")).unwrap();
        let abs = tmp.to_str().unwrap();
        let got = dirs(&[("VIRTUAL_ENV", abs), ("CONDA_PREFIX", "")]);
        assert_eq!(got, vec![tmp.join("lib/python3.12/site-packages/nvidia/nccl/lib")]);
        assert!(dirs(&[("VIRTUAL_ENV", "venv"), ("CONDA_PREFIX", "."), ("PYTHONPATH", "")]).is_empty());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn candidates_name_no_relative_path() {
        for c in candidates() {
            let s = c.to_string_lossy();
            assert!(
                c.is_absolute() || !s.contains('/'),
                "{s}: a relative path would resolve against the current directory"
            );
        }
    }
}
