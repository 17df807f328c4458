//! Configuration from the environment, parsed once into one typed struct.
//!
//! One table ([`config_table!`]) drives the parser, the defaults and the startup log. An
//! invalid value logs a warning naming the variable and falls back to the default. Tests
//! build a `Config` with [`Config::from_lookup`] (no process environment involved).

use std::sync::OnceLock;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// How a variable's text becomes a value.
trait Parse: Sized {
    fn parse(s: &str) -> Option<Self>;
}

impl Parse for bool {
    fn parse(s: &str) -> Option<bool> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" => Some(false),
            _ => None,
        }
    }
}

/// Byte counts and plain integers: decimal, with an optional binary K/M/G suffix.
impl Parse for u64 {
    fn parse(s: &str) -> Option<u64> {
        let s = s.trim();
        let (num, mul) = match s.char_indices().last()? {
            (i, 'k' | 'K') => (&s[..i], KIB),
            (i, 'm' | 'M') => (&s[..i], MIB),
            (i, 'g' | 'G') => (&s[..i], 1024 * MIB),
            _ => (s, 1),
        };
        num.trim().parse::<u64>().ok()?.checked_mul(mul)
    }
}

impl Parse for Option<bool> {
    fn parse(s: &str) -> Option<Self> {
        bool::parse(s).map(Some)
    }
}

/// A byte count whose absence means "chosen by rank count" (see `intercept::Thresholds`).
impl Parse for Option<u64> {
    fn parse(s: &str) -> Option<Self> {
        u64::parse(s).map(Some)
    }
}

/// The wire codec of the low-precision collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LowpCodec {
    /// Block-scaled FP8 E4M3 (RCCLX's codec).
    #[default]
    Fp8,
    /// Block-scaled symmetric INT8: about 4x less error than FP8, the same bytes.
    Int8,
}

impl Parse for LowpCodec {
    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp8" => Some(LowpCodec::Fp8),
            "int8" => Some(LowpCodec::Int8),
            _ => None,
        }
    }
}

/// Text whose absence means "not set"; an empty value counts as unset too (no warning).
impl Parse for Option<String> {
    fn parse(s: &str) -> Option<Self> {
        Some((!s.is_empty()).then(|| s.to_string()))
    }
}

macro_rules! config_table {
    ( $( $field:ident : $ty:ty = $default:expr, $var:literal, $doc:literal; )* ) => {
        /// Every rcclx setting. Field docs name the variable.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Config { $( #[doc = concat!("`", $var, "`: ", $doc)] pub $field: $ty, )* }

        impl Default for Config {
            fn default() -> Self { Self { $( $field: $default, )* } }
        }

        /// (variable, default as text, meaning) for docs and the startup log.
        pub const VARIABLES: &[(&str, &str, &str)] = &[ $( ($var, stringify!($default), $doc), )* ];

        impl Config {
            /// Parses every variable through `lookup`. Returns the config and one warning per
            /// invalid value (the caller logs them).
            pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
                let mut c = Config::default();
                let mut warnings = Vec::new();
                $(
                    if let Some(text) = lookup($var) {
                        match <$ty as Parse>::parse(&text) {
                            Some(v) => c.$field = v,
                            None => warnings.push(format!(
                                "{}={:?} is not valid ({}); using the default {}",
                                $var, text, $doc, stringify!($default))),
                        }
                    }
                )*
                (c, warnings)
            }
        }
    };
}

config_table! {
    disable: bool = false, "RCCLX_DISABLE", "1: pure pass-through to the stock library";
    upstream_lib: Option<String> = None, "RCCLX_UPSTREAM_LIB", "path of the stock libnccl.so.2 / librccl.so.1";
    timeout_ms: u64 = 0, "RCCLX_TIMEOUT_MS", "bound on every device spin-wait, in ms (0: none, like the stock library; ncclCommAbort always ends them)";
    setup_timeout_ms: u64 = 600000, "RCCLX_SETUP_TIMEOUT_MS", "bound on rcclx's setup of a communicator, in ms (0: none); past it the communicator is in error (ncclRemoteError)";
    dda_all_reduce: bool = true, "RCCL_ENABLE_DDA_ALL_REDUCE", "enable DDA AllReduce";
    dda_all_gather: bool = true, "RCCL_ENABLE_DDA_ALL_GATHER", "enable DDA AllGather";
    dda_reduce_scatter: bool = true, "RCCL_ENABLE_DDA_REDUCE_SCATTER", "enable DDA ReduceScatter";
    dda_all_to_all: bool = true, "RCCL_ENABLE_DDA_ALL_TO_ALL", "enable DDA AllToAll";
    dda_flat_max_bytes: Option<u64> = None, "RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES", "AllReduce: flat (one-shot) up to this many bytes (default by rank count)";
    dda_tree_max_bytes: Option<u64> = None, "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES", "AllReduce: tree (two-shot) up to this many bytes, stock library above (default by rank count)";
    dda_all_gather_max_bytes: Option<u64> = None, "RCCL_DDA_ALL_GATHER_MAX_BYTES", "AllGather: DDA up to this many output bytes, stock library above (default by rank count)";
    dda_reduce_scatter_max_bytes: Option<u64> = None, "RCCL_DDA_REDUCE_SCATTER_MAX_BYTES", "ReduceScatter: DDA up to this many input bytes, stock library above (default by rank count)";
    dda_all_to_all_max_bytes: Option<u64> = None, "RCCL_DDA_ALL_TO_ALL_MAX_BYTES", "AllToAll: DDA up to this many bytes (all blocks), stock library above (default by rank count)";
    dda_ll_max_bytes: Option<u64> = None, "RCCLX_DDA_LL_MAX_BYTES", "LL one-shot (no barrier) up to this many bytes per rank (AllReduce: the message; others: one rank's block), at most 1M (default by rank count)";
    dda_max_blocks: u64 = 128, "RCCL_DDA_MAX_BLOCKS", "grid cap of the DDA kernels (the low-precision ones fill the GPU)";
    dda_sendbuf_bytes: Option<u64> = None, "RCCL_DDA_SENDBUF_BYTES", "per-rank staging buffer of DDA and FP8 (default 16 MiB, 32 MiB when an FP8 switch is on)";
    lowp_enable: bool = false, "RCCL_LOW_PRECISION_ENABLE", "1: low precision (FP8) for AllGather, AllReduce, ReduceScatter, AllToAll";
    lowp_all_gather: bool = false, "RCCL_LOW_PRECISION_ENABLE_ALLGATHER", "1: low precision AllGather";
    lowp_all_reduce: bool = false, "RCCL_LOW_PRECISION_ENABLE_ALLREDUCE", "1: low precision AllReduce";
    lowp_reduce_scatter: bool = false, "RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER", "1: low precision ReduceScatter";
    lowp_all_to_all: bool = false, "RCCL_LOW_PRECISION_ENABLE_ALLTOALL", "1: low precision AllToAll";
    lowp_codec: LowpCodec = LowpCodec::Fp8, "RCCLX_LOW_PRECISION_CODEC", "`fp8` or `int8`: the wire format of the low-precision collectives (block-scaled, same bytes; int8 has about 4x less error)";
    lowp_min_bytes: Option<u64> = None, "RCCLX_LP_MIN_BYTES", "low precision only for messages of at least this many bytes (default by rank count and collective)";
    fault_inject: Option<String> = None, "RCCLX_FAULT_INJECT", "test only: `alloc`, `ipc` or `peer`, optionally `:RANK` (default every rank): that setup step fails, so the communicator must forward";
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The process environment as the configuration reads it: `secure_getenv` (a set-user-ID
/// program ignores these variables, as the dynamic loader does its own); non-UTF-8 is unset.
pub fn env(name: &str) -> Option<String> {
    secure_env(name)?.into_string().ok()
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

/// The process configuration, read from the environment on first use.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        crate::log::init();
        let (c, warnings) = Config::from_lookup(env);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        tracing::debug!("configuration: {c:?}");
        c
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_without_environment() {
        let (c, w) = parse(&[]);
        assert_eq!(c, Config::default());
        assert!(w.is_empty());
    }

    #[test]
    fn values_and_suffixes() {
        let (c, w) = parse(&[
            ("RCCLX_DISABLE", "1"),
            ("RCCL_DDA_SENDBUF_BYTES", "32M"),
            ("RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES", "204800"),
            ("RCCLX_LP_MIN_BYTES", "4k"),
            ("RCCL_LOW_PRECISION_ENABLE", "true"),
            ("RCCLX_UPSTREAM_LIB", "/x/libnccl.so.2"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert!(c.disable && c.lowp_enable);
        assert_eq!(c.dda_sendbuf_bytes, Some(32 * MIB));
        assert_eq!(c.dda_flat_max_bytes, Some(204_800));
        assert_eq!(c.lowp_min_bytes, Some(4096));
        assert_eq!(c.upstream_lib.as_deref(), Some("/x/libnccl.so.2"));
    }

    #[test]
    fn invalid_value_warns_and_keeps_default() {
        let (c, w) = parse(&[
            ("RCCL_DDA_MAX_BLOCKS", "many"),
            ("RCCLX_DISABLE", "maybe"),
            ("RCCLX_TIMEOUT_MS", "99999999999999999999G"),
        ]);
        assert_eq!(c, Config::default());
        assert_eq!(w.len(), 3);
        assert!(w[0].contains("RCCLX_DISABLE") || w.iter().any(|x| x.contains("RCCLX_DISABLE")));
        assert!(w.iter().any(|x| x.contains("RCCL_DDA_MAX_BLOCKS")));
        assert!(w.iter().any(|x| x.contains("RCCLX_TIMEOUT_MS")));
    }

    #[test]
    fn empty_upstream_path_means_unset() {
        let (c, w) = parse(&[("RCCLX_UPSTREAM_LIB", "")]);
        assert_eq!(c.upstream_lib, None);
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn every_variable_is_documented_once() {
        let mut names: Vec<_> = VARIABLES.iter().map(|v| v.0).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), VARIABLES.len());
    }
}
