//! Configuration from the environment, parsed once into one typed struct.
//!
//! One table ([`config_table!`]) drives the parser, the defaults and the startup log. An
//! invalid value logs a warning naming the variable and falls back to the default. Tests
//! build a `Config` with [`Config::from_lookup`] (no process environment involved).

use std::sync::OnceLock;

use crate::collective::{COLLS, COUNT, Coll, Fabric, LL_MAX, RANK_ROWS, Shape, Spec};
use crate::env::c_strtol;
use crate::env::env_only;
pub use crate::env::{conf_files, env, parse_conf, secure_env};
use crate::topo::PathType;

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

/// A setting whose absence means a default chosen elsewhere (a byte count by rank count,
/// `intercept::Policies`; the codec by the communicator, `Policies::codec`): set, it parses as
/// its value does.
impl<T: Parse> Parse for Option<T> {
    fn parse(s: &str) -> Option<Self> {
        T::parse(s).map(Some)
    }
}

/// The wire codec of the low-precision collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LowpCodec {
    /// Block-scaled FP8 E4M3 (RCCLX's codec).
    #[default]
    Fp8,
    /// Block-scaled symmetric INT8: about 4x less error than FP8, the same bytes.
    Int8,
}

impl LowpCodec {
    /// `fp8` or `int8`, as the variable spells it.
    pub fn name(self) -> &'static str {
        match self {
            LowpCodec::Fp8 => "fp8",
            LowpCodec::Int8 => "int8",
        }
    }
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

/// The protocol of the DDA calls above the LL sizes (`RCCLX_PROTO`): `window` or `stream`
/// (LL and LL128 are chosen by size: `collective::PROTOS`).
pub use crate::collective::Proto;

impl Parse for Proto {
    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "window" => Some(Proto::Window),
            "stream" => Some(Proto::Stream),
            _ => None,
        }
    }
}

/// `RCCLX_PROTO`: the protocol of each collective. One protocol for all (`window`, `stream`), or
/// a comma-separated list of `<collective>=<protocol>`, collectives as `Coll::name` spells them
/// (`allreduce=stream,alltoall=stream`), with at most one bare protocol for the collectives the
/// list does not name (`stream,allgather=window`); without one they take `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protos(pub [Proto; COUNT]);

impl Protos {
    /// Every collective on the windowed kernels (the default).
    pub const WINDOW: Protos = Protos::all(Proto::Window);

    /// Every collective on `proto`.
    pub const fn all(proto: Proto) -> Protos {
        Protos([proto; COUNT])
    }

    pub fn of(&self, coll: Coll) -> Proto {
        self.0[coll as usize]
    }
}

impl Parse for Protos {
    fn parse(s: &str) -> Option<Self> {
        let mut bare = None;
        let mut named = [None; COUNT];
        for item in s.split(',').map(str::trim) {
            let (slot, proto) = match item.split_once('=') {
                None => (&mut bare, item),
                Some((name, proto)) => {
                    let coll = Coll::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(name.trim()))?;
                    (&mut named[coll as usize], proto)
                }
            };
            // A second entry for the same collective (or a second bare one) is a mistake.
            if slot.replace(Proto::parse(proto)?).is_some() {
                return None;
            }
        }
        Some(Protos(std::array::from_fn(|i| named[i].or(bare).unwrap_or(Proto::Window))))
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
        pub struct Config {
            $( #[doc = concat!("`", $var, "`: ", $doc)] pub $field: $ty, )*
            /// The per-collective variables (`collective::Spec` names them).
            pub per_coll: PerColl,
            /// The NCCL variable that leaves every call to the stock library, if one does:
            /// peer-to-peer ([`p2p_off`]) or pointer checks ([`pointer_checks`]).
            pub stock_only: Option<String>,
            /// `NCCL_P2P_LEVEL` ([`p2p_level`]; `None`: NCCL's default, `topo::default_level`).
            pub p2p_level: Option<PathType>,
            /// The tuning file and what it holds (`tuning`; `RCCLX_TUNING_FILE`).
            pub tuning: crate::tuning::State,
        }

        impl Default for Config {
            fn default() -> Self { Self { $( $field: $default, )* per_coll: PerColl::default(), stock_only: None, p2p_level: None, tuning: Default::default() } }
        }

        /// The variables of the table, as (variable, default as text, meaning).
        const SCALARS: &[(&str, &str, &str)] = &[ $( ($var, stringify!($default), $doc), )* ];

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
                            None => warnings.push(invalid($var, &text, $doc, stringify!($default))),
                        }
                    }
                )*
                c.per_coll = PerColl::from_lookup(&lookup, &mut warnings);
                c.stock_only = p2p_off(&lookup).or_else(|| pointer_checks(&lookup));
                c.p2p_level = p2p_level(&lookup);
                let (tuning, warning) = crate::tuning::load(&lookup, env!("CARGO_PKG_VERSION"));
                c.tuning = tuning;
                warnings.extend(warning);
                c.clamp(&mut warnings);
                (c, warnings)
            }
        }
    };
}

fn invalid(var: &str, text: &str, doc: &str, default: &str) -> String {
    format!("{var}={text:?} is not valid ({doc}); using the default ({})", in_words(default))
}

/// A default as its Rust expression reads (`None`, `false`, `LowpCodec::Fp8`), in the words a
/// user sets it with.
fn in_words(default: &str) -> &str {
    match default {
        "None" => "unset",
        "false" => "0",
        "true" => "1",
        "LowpCodec::Fp8" => "fp8",
        "Protos::WINDOW" => "window",
        d => d,
    }
}

/// The settings each collective has, one entry per collective (`Coll` order), from the
/// variables its `collective::Spec` names.
#[derive(Debug, Clone, PartialEq)]
pub struct PerColl {
    /// `Spec::dda_var`: DDA switched on.
    pub dda: [bool; COUNT],
    /// `Spec::max_var` (`None`: by rank count).
    pub max_bytes: [Option<u64>; COUNT],
    /// `Spec::one_shot_var` (`None`: by rank count, or no such variable).
    pub one_shot_max_bytes: [Option<u64>; COUNT],
    /// `Spec::lowp_var`: low precision switched on for this collective.
    pub lowp: [bool; COUNT],
}

impl Default for PerColl {
    fn default() -> Self {
        PerColl {
            dda: [true; COUNT],
            max_bytes: [None; COUNT],
            one_shot_max_bytes: [None; COUNT],
            lowp: [false; COUNT],
        }
    }
}

/// One per-collective setting: which field, its variable, its default and meaning.
enum Setting {
    Dda,
    Max,
    OneShotMax,
    Lowp,
}

impl Setting {
    /// Every per-collective variable: (collective, setting, variable).
    fn all() -> impl Iterator<Item = (&'static Spec, Setting, &'static str)> {
        COLLS.iter().flat_map(|s| {
            [
                Some((s, Setting::Dda, s.dda_var)),
                Some((s, Setting::Max, s.max_var)),
                s.one_shot_var.map(|v| (s, Setting::OneShotMax, v)),
                s.lowp_var.map(|v| (s, Setting::Lowp, v)),
            ]
            .into_iter()
            .flatten()
        })
    }

    fn default_text(&self, s: &Spec) -> String {
        match self {
            Setting::Dda => "1".into(),
            Setting::Max => by_ranks(&s.max),
            Setting::OneShotMax => match &s.one_shot_max {
                None => by_ranks(&s.max),
                Some(_) => {
                    let each = |fabric| grouped((2..=8).map(|n| (n, s.one_shot_default(n, fabric))));
                    format!("by ranks, NVLink: {}; xGMI: {}", each(Fabric::Switch), each(Fabric::Mesh))
                }
            },
            Setting::Lowp => "0".into(),
        }
    }

    fn meaning(&self, s: &Spec) -> String {
        let t = s.title;
        let bytes = match s.shape {
            Shape::Whole => "bytes",
            Shape::PerRank => "bytes (all ranks' blocks)",
        };
        match self {
            Setting::Dda => format!("enable DDA {t}"),
            Setting::Max if s.two_shot => {
                format!("{t}: DDA (two-shot above the one-shot limit) up to this many {bytes}, stock library above")
            }
            Setting::Max => format!("{t}: DDA up to this many {bytes}, stock library above"),
            Setting::OneShotMax => format!("{t}: one-shot (flat) up to this many {bytes}, two-shot above"),
            Setting::Lowp => format!("`1`: low precision {t}"),
        }
    }
}

impl PerColl {
    fn from_lookup(lookup: &impl Fn(&str) -> Option<String>, warnings: &mut Vec<String>) -> PerColl {
        let mut p = PerColl::default();
        for (s, setting, var) in Setting::all() {
            let Some(text) = lookup(var) else { continue };
            let i = s.coll as usize;
            let ok = match setting {
                Setting::Dda => bool::parse(&text).map(|v| p.dda[i] = v),
                Setting::Lowp => bool::parse(&text).map(|v| p.lowp[i] = v),
                Setting::Max => u64::parse(&text).map(|v| p.max_bytes[i] = Some(v)),
                Setting::OneShotMax => u64::parse(&text).map(|v| p.one_shot_max_bytes[i] = Some(v)),
            };
            if ok.is_none() {
                warnings.push(invalid(var, &text, &setting.meaning(s), &setting.default_text(s)));
            }
        }
        p
    }
}

/// A byte count per [`RANK_ROWS`] entry in words, equal neighbours merged:
/// `by ranks: 64 MiB (2), 1 MiB (3-4), 256 KiB (5-8)`, or one value when all are equal.
fn by_ranks(values: &[u64; RANK_ROWS.len()]) -> String {
    let text = grouped(values.iter().enumerate().flat_map(|(i, &v)| {
        let lo = if i == 0 { RANK_ROWS[0] } else { RANK_ROWS[i - 1] + 1 };
        (lo..=RANK_ROWS[i]).map(move |n| (n, v))
    }));
    if text.contains('(') { format!("by ranks: {text}") } else { text }
}

/// `(rank count, bytes)` pairs in rank order as `64 MiB (2), 1 MiB (3-4)`; one value alone
/// without its ranks.
fn grouped(values: impl Iterator<Item = (usize, u64)>) -> String {
    let bytes = |b: u64| match b {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} B"),
    };
    let mut groups: Vec<(usize, usize, u64)> = Vec::new(); // (first rank count, last, value)
    for (n, v) in values {
        match groups.last_mut() {
            Some(g) if g.2 == v => g.1 = n,
            _ => groups.push((n, n, v)),
        }
    }
    if groups.len() == 1 {
        return bytes(groups[0].2);
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|&(lo, hi, v)| if lo == hi { format!("{} ({lo})", bytes(v)) } else { format!("{} ({lo}-{hi})", bytes(v)) })
        .collect();
    parts.join(", ")
}

/// One variable rcclx reads: name, default as text, meaning (the README's table).
pub struct Variable {
    pub name: &'static str,
    pub default: String,
    pub meaning: String,
}

/// Every variable rcclx reads: the table below, each collective's, then those read elsewhere.
pub fn variables() -> Vec<Variable> {
    let scalars = SCALARS.iter().map(|&(name, default, meaning)| Variable {
        name,
        // Unset, these two are the collectives' defaults per rank count.
        default: match name {
            "RCCLX_DDA_LL_MAX_BYTES" => by_ranks(&LL_MAX),
            "RCCLX_LP_MIN_BYTES" => {
                let per_coll: Vec<String> = COLLS
                    .iter()
                    .filter(|s| s.lowp_var.is_some())
                    .map(|s| format!("{} {}", s.title, by_ranks(&s.lowp_min).trim_start_matches("by ranks: ")))
                    .collect();
                format!("by ranks and collective: {}", per_coll.join("; "))
            }
            _ => in_words(default).into(),
        },
        meaning: meaning.into(),
    });
    let per_coll = Setting::all().map(|(s, setting, name)| Variable {
        name,
        default: setting.default_text(s),
        meaning: setting.meaning(s),
    });
    let elsewhere = READ_ELSEWHERE.iter().map(|&(name, default, meaning)| Variable {
        name,
        default: default.into(),
        meaning: meaning.into(),
    });
    scalars.chain(per_coll).chain(elsewhere).collect()
}

config_table! {
    disable: bool = false, "RCCLX_DISABLE", "`1`: pure pass-through to the stock library";
    upstream_lib: Option<String> = None, "RCCLX_UPSTREAM_LIB", "path of the stock `libnccl.so.2` / `librccl.so.1` (unset: searched for)";
    timeout_ms: u64 = 0, "RCCLX_TIMEOUT_MS", "bound on every device spin-wait, in ms (`0`: none); when it fires the communicator is in error. Without it a wait ends when its peer arrives or `ncclCommAbort` is called, as in the stock library";
    setup_timeout_ms: u64 = 600000, "RCCLX_SETUP_TIMEOUT_MS", "bound on rcclx's setup of a communicator, in ms (`0`: none; twice it once the last of its three exchanges is posted, so that ranks a little apart still agree). Past it a blocking creation returns `ncclRemoteError`, a non-blocking one reports it from `ncclCommGetAsyncError`, and every call on the communicator returns it";
    dda_ll_max_bytes: Option<u64> = None, "RCCLX_DDA_LL_MAX_BYTES", "LL one-shot (no barrier) while count x element size is at most this many bytes (the whole message where the count counts it, one rank's block where it counts a block), at most 1M";
    nccl_max_ctas: Option<u64> = None, "NCCL_MAX_CTAS", "NCCL's SM budget (also the stock library's): above 0, most blocks of any rcclx grid, over `ncclConfig_t.maxCTAs` (which rcclx honours too; a split without a config keeps its parent's); a budget of 1 forwards the communicator (rcclx's kernels need 2)";
    dda_max_blocks: u64 = 128, "RCCL_DDA_MAX_BLOCKS", "grid cap of the DDA kernels (the low-precision ones fill the GPU); 1-1024";
    proto: Protos = Protos::WINDOW, "RCCLX_PROTO", "`window` or `stream` for every collective, or per collective (`allreduce=stream,alltoall=stream`; the others `window`, or the list's bare entry): the protocol of DDA calls above the LL sizes; `stream` (pipelined rings, no barrier per window) where a collective has it (AllReduce, AllGather, ReduceScatter, AllToAll), else the windowed kernels";
    stream_min_bytes: u64 = 0, "RCCLX_STREAM_MIN_BYTES", "with `RCCLX_PROTO=stream`: the stream protocol only from this many bytes (as the size limits count them), the windowed kernels below";
    ll128_max_bytes: u64 = 0, "RCCLX_LL128_MAX_BYTES", "LL128 one-shot (flagged 128-byte lines, 64 on AMD; no barrier) above the LL sizes up to this many bytes (as the size limits count them), where the one-shot would run, for the collectives that have it (AllReduce, AllGather); `0`: off";
    dda_sendbuf_bytes: Option<u64> = None, "RCCL_DDA_SENDBUF_BYTES", "per-rank staging buffer of DDA and low precision (unset: 16 MiB, 32 MiB when a low-precision switch is on); at least 64 KiB, whole 4 KiB pages";
    lowp_enable: bool = false, "RCCL_LOW_PRECISION_ENABLE", "`1`: low precision for every collective that has it (AllReduce, AllGather, ReduceScatter, AllToAll)";
    lowp_codec: Option<LowpCodec> = None, "RCCLX_LOW_PRECISION_CODEC", "`fp8` or `int8`: the wire format of the low-precision collectives (block-scaled, same bytes; int8 has about 4x less error); unset: `fp8` on one host (RCCLX's), `int8` on a communicator spanning hosts (measured there: a quarter of FP8's error, as fast or faster)";
    hier_rs: bool = false, "RCCLX_HIER_RS", "`1`: on a communicator spanning hosts with low precision on, ReduceScatter runs rcclx's plan (exact in each host, FP8/INT8 codes between hosts) instead of going to the stock library; off by default until its timings against stock are measured (it ran right on one GPU: simulated hosts)";
    hier_ag: bool = false, "RCCLX_HIER_AG", "`1`: on a communicator spanning hosts with low precision on, AllGather runs rcclx's plan (FP8/INT8 codes between hosts, exact in each host: a rank's block is exact on its own host, decoded once elsewhere, the same on every other rank) instead of going to the stock library; off by default until it has run on a GPU and its timings against stock are measured";
    hier_exact: bool = false, "RCCLX_HIER_EXACT", "`1`: on a communicator spanning hosts, AllReduce calls that low precision does not take run the exact hierarchy (rcclx ReduceScatter in each host, the stock AllReduce across hosts, rcclx AllGather in each host) instead of going to the stock library; off by default, as it has only been measured faster than stock on simulated hosts";
    lowp_min_bytes: Option<u64> = None, "RCCLX_LP_MIN_BYTES", "low precision only for messages of at least this many bytes (set: the same for every collective)";
    gpu_runtime: Option<String> = None, "RCCLX_GPU_RUNTIME", "`cuda` or `hip`: the only GPU runtime rcclx may load (unset: cuda, then hip)";
    hip_lib: Option<String> = None, "RCCLX_HIP_LIB", "path of the HIP runtime to load instead of searching for `libamdhip64` (the tests load a recording one in its place)";
    rocm_path: Option<String> = None, "ROCM_PATH", "where rcclx looks for the HIP runtime and RCCL on AMD (unset: `/opt/rocm`)";
    sim_hostid: Option<String> = None, "RCCLX_SIM_HOSTID", "a simulation setting, for tests on one machine: rcclx's host identity (ranks with equal ids form one host), in place of `NCCL_HOSTID` / host name + boot id, which the stock library keeps using; ranks of several processes may then share one GPU, every grid capped at multiprocessors / (2 x ranks) so that all run at once, beside their other kernels (MPS). One GPU so holds N one-rank hosts for the stock library (a `NCCL_HOSTID` per process) and one N-rank host for rcclx. Ranks that disagree, or cannot map each other's memory, forward (a WARN). Not for real clusters";
    fault_inject: Option<String> = None, "RCCLX_FAULT_INJECT", "tests only (a build with the cargo feature `fault-inject`, as `scripts/gpu-prep.sh` makes; ignored with a warning otherwise): a setup site, optionally `:RANK` (default every rank): `describe`, `alloc`, `lease`, `ipc` or `peer` fails there (kernels off on every rank), `exchange1`..`exchange3` cannot be posted (the communicator in error on every rank); an unknown site is an error";
}

/// Largest `RCCLX_DDA_LL_MAX_BYTES` honoured (the LL inbox takes 32 bytes per message byte).
pub const MAX_LL_BYTES: u64 = 1 << 20;
/// Smallest staging buffer (`RCCL_DDA_SENDBUF_BYTES`); it is a whole number of 4 KiB pages.
pub const MIN_STAGING_BYTES: u64 = 64 << 10;

impl Config {
    /// Brings values the kernels cannot take into range, with one warning each.
    fn clamp(&mut self, warnings: &mut Vec<String>) {
        let mut warn = |var: &str, from: u64, to: u64, why: &str| {
            if from != to {
                warnings.push(format!("{var}={from} {why}; using {to}"));
            }
        };
        let blocks = self.dda_max_blocks.clamp(1, 1024);
        warn("RCCL_DDA_MAX_BLOCKS", self.dda_max_blocks, blocks, "is outside 1..=1024");
        self.dda_max_blocks = blocks;
        if let Some(ll) = self.dda_ll_max_bytes {
            let to = ll.min(MAX_LL_BYTES).next_multiple_of(8);
            warn("RCCLX_DDA_LL_MAX_BYTES", ll, to, "is above 1 MiB or not a multiple of 8");
            self.dda_ll_max_bytes = Some(to);
        }
        if let Some(staging) = self.dda_sendbuf_bytes {
            let to = staging.max(MIN_STAGING_BYTES) & !4095;
            warn("RCCL_DDA_SENDBUF_BYTES", staging, to, "is below 64 KiB or not a multiple of 4 KiB");
            self.dda_sendbuf_bytes = Some(to);
        }
    }

    /// Every call goes to the stock library: `RCCLX_DISABLE=1`, NCCL's peer-to-peer variables
    /// forbid the peer access rcclx's kernels need, or `NCCL_CHECK_POINTERS=1`.
    pub fn forward_all(&self) -> bool {
        self.disable || self.stock_only.is_some()
    }

    /// Low precision switched on for `coll` (its own switch or `RCCL_LOW_PRECISION_ENABLE`).
    pub fn lowp_on(&self, coll: Coll) -> bool {
        coll.spec().lowp_var.is_some() && (self.lowp_enable || self.per_coll.lowp[coll as usize])
    }
}

impl Config {
    /// This configuration with the low-precision switches (`RCCL_LOW_PRECISION_ENABLE*`,
    /// `RCCLX_LOW_PRECISION_CODEC`) as the environment has them now, parsed by the same table.
    /// The library calls it at each communicator's setup, so the switches can differ between
    /// communicators of one process (RCCLX reads them at every call; per communicator keeps
    /// every rank's decision fixed and graph capture safe); every other setting stays as read
    /// at startup, where an invalid value was already reported.
    pub fn with_lowp_now(&self) -> Config {
        self.with_lowp_from(env)
    }

    /// [`Config::with_lowp_now`] with the variables `lookup` gives.
    pub fn with_lowp_from(&self, lookup: impl Fn(&str) -> Option<String>) -> Config {
        let (now, _) = Config::from_lookup(lookup);
        let mut c = self.clone();
        c.lowp_enable = now.lowp_enable;
        c.lowp_codec = now.lowp_codec;
        c.per_coll.lowp = now.per_coll.lowp;
        c
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Why NCCL's peer-to-peer variables turn rcclx's kernels off everywhere (every call then goes
/// to the stock library), read as NCCL reads them (`ncclGetLevel`, `src/graph/paths.cc`):
/// `NCCL_P2P_DISABLE=1`, or `NCCL_P2P_LEVEL=LOC` (or 0): no two GPUs talk peer to peer. Any other
/// level is compared with each pair's path at a communicator's setup ([`p2p_level`]).
pub fn p2p_off(lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    if lookup("NCCL_P2P_DISABLE").is_some_and(|v| c_strtol(&v) == 1) {
        return Some("NCCL_P2P_DISABLE=1".into());
    }
    let v = lookup("NCCL_P2P_LEVEL")?;
    (PathType::level(&v) == Some(PathType::Loc)).then(|| format!("NCCL_P2P_LEVEL={v}"))
}

/// `NCCL_P2P_LEVEL` as NCCL reads it (a name or an old number; `None`: unset or not a level, so
/// NCCL's default applies, `topo::default_level`).
pub fn p2p_level(lookup: impl Fn(&str) -> Option<String>) -> Option<PathType> {
    PathType::level(&lookup("NCCL_P2P_LEVEL")?)
}

/// `NCCL_CHECK_POINTERS=1`: the stock library checks every buffer (a host or wrong-device
/// pointer is `ncclInvalidArgument`, not a fault); rcclx leaves every call to it, so that the
/// answers are the stock library's.
pub fn pointer_checks(lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    lookup("NCCL_CHECK_POINTERS").is_some_and(|v| c_strtol(&v) == 1).then(|| "NCCL_CHECK_POINTERS=1".into())
}

/// The process configuration, read from the environment on first use. Logs, as the stock
/// library does for its own (`ENV`), each variable set, and warns once per invalid value,
/// clamped value and unknown name.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        crate::log::init();
        let (c, warnings) = Config::from_lookup(env);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let mut names: Vec<String> = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
        names.extend(conf_files().iter().map(|(k, _)| k.clone()).filter(|k| env_only(k).is_none()));
        for w in unknown_names(&names) {
            tracing::warn!("{w}");
        }
        for v in variables() {
            if let Some(value) = env(v.name) {
                tracing::info!("{} set by environment to {value}", v.name);
            }
        }
        if let Some(why) = &c.stock_only {
            tracing::info!("{why}: rcclx's kernels are off; every call goes to the stock library");
        }
        if let Some(plugin) = env("NCCL_PROFILER_PLUGIN").filter(|p| !p.is_empty()) {
            tracing::info!(
                "NCCL_PROFILER_PLUGIN={plugin}: the plugin sees the calls the stock library runs, not the \
                 collectives rcclx runs itself (those have NVTX ranges and rcclx's statistics)"
            );
        }
        for name in ["NCCL_ALGO", "NCCL_PROTO"] {
            if let Some(value) = env(name).filter(|v| !v.is_empty()) {
                tracing::info!(
                    "{name}={value}: steers the stock library's own algorithms only; rcclx's routes follow its \
                     limits and RCCLX_PROTO (NCCL_P2P_DISABLE=1 or RCCLX_DISABLE=1 leave every call to the stock library)"
                );
            }
        }
        c
    })
}

/// Variables rcclx reads outside the table above, each in one place: logging (`log.rs`, read
/// before the configuration and again by `ncclResetDebugInit`), peer-to-peer ([`p2p_off`]),
/// pointer checks ([`pointer_checks`]), the
/// profiler note ([`get`]), NVTX (`nvtx.rs`), host identity (`clique/host.rs`), the
/// configuration files (`env.rs`).
const READ_ELSEWHERE: &[(&str, &str, &str)] = &[
    (
        "RCCLX_LOG",
        "unset",
        "developer's log filter: `level` or `target=level` items, comma-separated (e.g. `rcclx=trace`, `warn,rcclx::gpu=debug`); overrides `NCCL_DEBUG`, the format stays NCCL's",
    ),
    (
        "NCCL_DEBUG",
        "unset (silent, as the stock library)",
        "`VERSION` (the version line only), `WARN`, `INFO`, `ABORT` (above INFO) or `TRACE` (also read by the stock library)",
    ),
    (
        "RCCLX_TUNING_FILE",
        "~/.config/rcclx/tuning.toml",
        "the DDA limits `python -m rcclx tune` measured on this node (default under $XDG_CONFIG_HOME when set; empty: none); set variables win over it",
    ),
    (
        "NCCL_DEBUG_SUBSYS",
        "INIT,BOOTSTRAP,ENV",
        "subsystems logged at `INFO`/`TRACE`: `INIT` (setup, teardown), `BOOTSTRAP` (rcclx's record exchange), `COLL` (launches), `TUNING` (one line per intercepted collective and its route, at `INFO`), `ENV` (each variable set), `ALLOC`, `CALL` (NCCL's `NCCL CALL` line of each call rcclx runs, at `TRACE`), `ALL`; a leading `^` excludes",
    ),
    (
        "NCCL_DEBUG_FILE",
        "unset (stdout)",
        "above `VERSION`, the stock library logs to this file (`%h` host cut at its first dot, `%p` pid, `%%` a `%`); rcclx to the same name plus `.rcclx`, made at its first line (the stock library truncates its file and writes it at its own offset, so one file cannot hold both)",
    ),
    ("NCCL_DEBUG_TIMESTAMP_LEVELS", "WARN", "levels whose lines start with a timestamp (`ALL`, a list, `^` excludes)"),
    (
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "[%F %T] ",
        "strftime format of the timestamp; `%Nf`: N digits of the second's fraction; `_` is a space",
    ),
    (
        "NCCL_P2P_DISABLE",
        "0",
        "`1`: rcclx's peer-to-peer kernels are off, every call goes to the stock library (as `RCCLX_DISABLE=1`)",
    ),
    (
        "NCCL_P2P_LEVEL",
        "unset",
        "the farthest path between two GPUs of a host that may go peer to peer, as NCCL reads it (`LOC`, `NVL`, `NVB`, `PIX`, `PXB`, `PHB`, `SYS`, ..., or `0`-`4`): a communicator whose GPUs have a pair farther apart forwards (an NVLink or xGMI link is `NVL`; unset: NCCL's `PXB`, `SYS` on an AMD CPU with at most 2 GPUs); `LOC`: every call goes to the stock library",
    ),
    (
        "NCCL_ALGO",
        "unset",
        "the stock library's algorithms (also `NCCL_PROTO`): they steer only the calls it runs, not rcclx's routes (its limits and `RCCLX_PROTO` do), which rcclx says in one INFO line",
    ),
    ("NCCL_PROTO", "unset", "as `NCCL_ALGO`: the stock library's protocols, not rcclx's"),
    (
        "NCCL_CHECK_POINTERS",
        "0",
        "`1`: the stock library checks every buffer (`ncclInvalidArgument` for a host or wrong-device pointer); rcclx leaves every call to it, so the answers are its",
    ),
    (
        "NCCL_PROFILER_PLUGIN",
        "unset",
        "the stock library's profiler plugin; it sees only the calls the stock library runs, which rcclx says in one INFO line",
    ),
    (
        "NCCL_NVTX_DISABLE",
        "0",
        "`1`: no NVTX ranges for the collectives rcclx runs (the stock library's switch for its own)",
    ),
    (
        "NVTX_INJECTION64_PATH",
        "unset",
        "the NVTX tool's injection library (`nsys` sets it): rcclx loads it at run time and sends it its ranges",
    ),
    (
        "NCCL_CONF_FILE",
        "~/.nccl.conf",
        "NCCL's configuration file (`KEY=VALUE` lines), read after the environment and before `/etc/nccl.conf`",
    ),
    (
        "NCCL_HOSTID",
        "hostname + boot id",
        "host identity (also the stock library's): ranks with equal ids are on one host (rcclx's: unless `RCCLX_SIM_HOSTID` is set)",
    ),
];

/// `RCCLX_*` names of the build, the tests and the scripts: never a typo of a library variable.
/// (tests/readme.rs finds every name the repository's programs read and checks it is here or a
/// library variable.)
pub const TOOL_NAMES: &[&str] = &[
    "RCCLX_TARGETS",
    "RCCLX_REQUIRE_KERNELS",
    "RCCLX_NO_KERNELS",
    "RCCLX_NVCC",
    "RCCLX_CLANG",
    "RCCLX_ZIG",
    "RCCLX_LLD_ZIG",
    "RCCLX_KERNEL_REPORT",
    "RCCLX_ISA_CHECK",
    "RCCLX_GIT_HASH",
    "RCCLX_BLESS",
    "RCCLX_PRINT_IDENTITY",
    "RCCLX_LIB",
    "RCCLX_BENCH_LIBS",
    "RCCLX_BENCH_SIM_HOSTS",
    "RCCLX_BENCH_SIM_LOCAL",
    "RCCLX_BENCH_SIM_INTERLEAVE",
    "RCCLX_BENCH_TAG",
    "RCCLX_CUOBJDUMP",
    "RCCLX_ARTIFACTS",
    "RCCLX_LP_FORCE",
    // The wheel's and the zig link's build variables (python/README.md).
    "RCCLX_WHEEL_ZIG",
    "RCCLX_WHEEL_BENCH",
    "RCCLX_LINK_ZIG",
    "RCCLX_LINK_TARGET",
];

/// One warning per `RCCLX_*` name rcclx does not know, and per `RCCL_*` name two edits or
/// fewer from one it knows (other `RCCL_*` names are the stock RCCL's own), naming the closest.
fn unknown_names(names: &[String]) -> Vec<String> {
    let vars = variables();
    let known: Vec<&str> = vars.iter().map(|v| v.name).collect();
    let mut out = Vec::new();
    for name in names {
        let ours = name.starts_with("RCCLX_");
        if !(ours || name.starts_with("RCCL_"))
            || known.contains(&name.as_str())
            || TOOL_NAMES.contains(&name.as_str())
            || name.starts_with("RCCLX_TEST_")
        {
            continue;
        }
        let Some((closest, d)) = known.iter().map(|k| (*k, edit_distance(name, k))).min_by_key(|x| x.1) else {
            continue;
        };
        if ours || d <= 2 {
            out.push(format!("{name} is not a variable rcclx reads (did you mean {closest}?); it has no effect"));
        }
    }
    out
}

/// Levenshtein distance of two ASCII names.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
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
        assert_eq!(c.per_coll.one_shot_max_bytes[Coll::AllReduce as usize], Some(204_800));
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
        let vars = variables();
        let mut names: Vec<_> = vars.iter().map(|v| v.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), vars.len());
        assert!(vars.iter().any(|v| v.name == "RCCL_ENABLE_DDA_BROADCAST"));
    }

    #[test]
    fn unknown_names_get_the_closest_known_one() {
        let names = |v: &[&str]| unknown_names(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let w = names(&["RCCL_LOW_PRECISION_ENABLED", "RCCL_MSCCL_ENABLE", "RCCLX_DISABLED", "RCCLX_TARGETS", "PATH"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("RCCL_LOW_PRECISION_ENABLED") && w[0].contains("did you mean RCCL_LOW_PRECISION_ENABLE?")
        );
        assert!(w[1].contains("RCCLX_DISABLED") && w[1].contains("RCCLX_DISABLE?"));
        assert!(names(&["RCCL_ENABLE_DDA_BROADCAST", "RCCLX_LOG", "NCCL_DEBUG"]).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn nccl_p2p_variables_as_nccl_reads_them() {
        let off = |pairs: &[(&str, &str)]| parse(pairs).0.stock_only;
        assert_eq!(off(&[]), None);
        assert_eq!(off(&[("NCCL_P2P_DISABLE", "1")]).as_deref(), Some("NCCL_P2P_DISABLE=1"));
        assert_eq!(off(&[("NCCL_P2P_DISABLE", "0x1")]).as_deref(), Some("NCCL_P2P_DISABLE=1"));
        // NCCL: only the value 1 disables; anything else leaves NCCL_P2P_LEVEL in charge.
        assert_eq!(off(&[("NCCL_P2P_DISABLE", "2")]), None);
        assert_eq!(off(&[("NCCL_P2P_DISABLE", "yes")]), None);
        // Levels are compared with each pair's path at setup; only LOC leaves no pair.
        for level in ["LOC", "0"] {
            assert_eq!(off(&[("NCCL_P2P_LEVEL", level)]), Some(format!("NCCL_P2P_LEVEL={level}")));
        }
        for level in ["NVL", "PIX", "PHB", "3", "SYS", "4", "5", "9", "nvl", "bogus"] {
            assert_eq!(off(&[("NCCL_P2P_LEVEL", level)]), None, "{level}");
        }
        let level = |v: &str| parse(&[("NCCL_P2P_LEVEL", v)]).0.p2p_level;
        assert_eq!((level("NVL"), level("3"), level("nvl")), (Some(PathType::Nvl), Some(PathType::Phb), None));
        assert!(!parse(&[("NCCL_P2P_LEVEL", "NVL")]).0.forward_all());
        // Pointer checks: the stock library's answers for bad buffers, so every call is its.
        assert_eq!(off(&[("NCCL_CHECK_POINTERS", "1")]).as_deref(), Some("NCCL_CHECK_POINTERS=1"));
        assert_eq!(off(&[("NCCL_CHECK_POINTERS", "0")]), None);
        assert!(parse(&[("NCCL_CHECK_POINTERS", "1")]).0.forward_all());
        assert_eq!(c_strtol(" 010"), 8);
        assert_eq!(c_strtol("-3x"), -3);
    }

    #[test]
    fn nccl_conf_lines_as_nccl_reads_them() {
        let got = parse_conf("# a comment\nNCCL_DEBUG=INFO\nno equals sign\nA=b=c\n=x\nSPACED = v \n #x=1\n");
        let want: Vec<(String, String)> = [("NCCL_DEBUG", "INFO"), ("A", "b=c"), ("SPACED ", " v "), (" #x", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn out_of_range_values_are_clamped_with_a_warning() {
        let (c, w) = parse(&[
            ("RCCL_DDA_MAX_BLOCKS", "5000"),
            ("RCCLX_DDA_LL_MAX_BYTES", "4M"),
            ("RCCL_DDA_SENDBUF_BYTES", "1000"),
        ]);
        assert_eq!(c.dda_max_blocks, 1024);
        assert_eq!(c.dda_ll_max_bytes, Some(1 << 20));
        assert_eq!(c.dda_sendbuf_bytes, Some(64 << 10));
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w.iter().all(|x| x.contains("using")), "{w:?}");
        let (c, w) = parse(&[("RCCL_DDA_MAX_BLOCKS", "0"), ("RCCL_DDA_SENDBUF_BYTES", "100000")]);
        assert_eq!((c.dda_max_blocks, c.dda_sendbuf_bytes), (1, Some(98304)));
        assert_eq!(w.len(), 2, "{w:?}");
    }

    #[test]
    fn protocol_per_collective() {
        let parse = |text: &str| {
            let (c, warnings) = Config::from_lookup(|v| (v == "RCCLX_PROTO").then(|| text.to_string()));
            (warnings.is_empty()).then_some(c.proto)
        };
        use Proto::{Stream, Window};
        assert_eq!(parse("stream"), Some(Protos::all(Stream)));
        assert_eq!(parse(" Window "), Some(Protos::WINDOW));
        let some = parse("allreduce=stream, AllToAll = stream").unwrap();
        assert_eq!(Coll::ALL.map(|c| some.of(c)), [Stream, Window, Window, Stream, Window, Window]);
        let most = parse("stream,allgather=window").unwrap();
        assert_eq!(Coll::ALL.map(|c| most.of(c)), [Stream, Window, Stream, Stream, Stream, Stream]);
        // Unknown collectives or protocols, repeats and empty entries: invalid, the default.
        for bad in [
            "ll128",
            "allreduce=fast",
            "gather=stream",
            "stream,window",
            "allreduce=stream,allreduce=window",
            "stream,",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
            let (c, _) = Config::from_lookup(|v| (v == "RCCLX_PROTO").then(|| bad.to_string()));
            assert_eq!(c.proto, Protos::WINDOW, "{bad}");
        }
    }

    #[test]
    fn per_collective_variables() {
        let (c, w) = parse(&[
            ("RCCL_ENABLE_DDA_ALL_TO_ALL", "0"),
            ("RCCL_DDA_BROADCAST_MAX_BYTES", "64k"),
            ("RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES", "1M"),
            ("RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER", "1"),
            ("RCCL_ENABLE_DDA_BROADCAST", "perhaps"),
        ]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("RCCL_ENABLE_DDA_BROADCAST"), "{w:?}");
        assert!(!c.per_coll.dda[Coll::AllToAll as usize] && c.per_coll.dda[Coll::Broadcast as usize]);
        assert_eq!(c.per_coll.max_bytes[Coll::Broadcast as usize], Some(64 << 10));
        assert_eq!(c.per_coll.one_shot_max_bytes[Coll::AllReduce as usize], Some(1 << 20));
        assert!(c.lowp_on(Coll::ReduceScatter) && !c.lowp_on(Coll::AllReduce));
        let all = parse(&[("RCCL_LOW_PRECISION_ENABLE", "1")]).0;
        assert!(Coll::ALL.iter().all(|&k| all.lowp_on(k) == k.spec().lowp_var.is_some()));
    }

    #[test]
    fn the_lowp_switches_are_taken_fresh_and_nothing_else() {
        let at_start = |k: &str| match k {
            "RCCL_DDA_MAX_BLOCKS" => Some("64".to_string()),
            "RCCL_LOW_PRECISION_ENABLE" => Some("1".to_string()),
            _ => None,
        };
        let (c, _) = Config::from_lookup(at_start);
        let now = |k: &str| match k {
            "RCCL_DDA_MAX_BLOCKS" => Some("32".to_string()),
            "RCCL_LOW_PRECISION_ENABLE_ALLGATHER" => Some("1".to_string()),
            "RCCLX_LOW_PRECISION_CODEC" => Some("int8".to_string()),
            _ => None,
        };
        let fresh = c.with_lowp_from(now);
        assert_eq!(fresh.dda_max_blocks, 64, "read at startup only");
        assert!(!fresh.lowp_enable && fresh.lowp_codec == Some(LowpCodec::Int8));
        assert!(fresh.lowp_on(Coll::AllGather) && !fresh.lowp_on(Coll::AllReduce));
    }

    #[test]
    fn defaults_by_rank_count_in_words() {
        assert_eq!(by_ranks(&[64 * MIB, MIB, 256 * KIB]), "by ranks: 64 MiB (2), 1 MiB (3-4), 256 KiB (5-8)");
        assert_eq!(by_ranks(&[64 * MIB, 16 * MIB, 16 * MIB]), "by ranks: 64 MiB (2), 16 MiB (3-8)");
        assert_eq!(by_ranks(&[256 * KIB; 3]), "256 KiB");
        assert_eq!(by_ranks(&[100, 100, 3 * KIB]), "by ranks: 100 B (2-4), 3 KiB (5-8)");
    }
}
