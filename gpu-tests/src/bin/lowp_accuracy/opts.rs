//! The command line (the options of `main.rs`'s doc) and the environment it sets for rcclx.

use rcclx::clique::MAX_RANKS;
use rcclx::config::LowpCodec;

use crate::cases::{self, Case, codec_name};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Procs,
    OneProcess,
    Toggle,
    Child(usize),
}

#[derive(Clone, Debug)]
pub struct Opts {
    pub mode: Mode,
    pub nranks: usize,
    pub quick: bool,
    pub filter: Option<String>,
    pub no_lp: bool,
    /// `--default-min-bytes`: RCCLX_LP_MIN_BYTES is not set to 0.
    pub default_min_bytes: bool,
    pub seed: u64,
    pub list: bool,
    pub host_check: bool,
    /// The low-precision codec (`--codec`, else `RCCLX_LOW_PRECISION_CODEC`, else FP8).
    pub codec: LowpCodec,
    /// `--world G`: the harness's communicators, the ranks on G GPUs.
    pub world: Option<usize>,
    pub idfile: Option<String>,
    /// The arguments as given (passed on to children).
    pub raw: Vec<String>,
}

impl Opts {
    /// The cases these options select, in run order.
    pub fn cases(&self) -> Vec<Case> {
        cases::cases(self.nranks, self.quick, self.filter.as_deref())
    }
}

pub fn parse_args(args: Vec<String>) -> Result<Opts, String> {
    let mut o = Opts {
        mode: Mode::Procs,
        nranks: 2,
        quick: false,
        filter: None,
        no_lp: false,
        default_min_bytes: false,
        seed: 1,
        list: false,
        host_check: false,
        codec: LowpCodec::Fp8,
        world: None,
        idfile: None,
        raw: args.clone(),
    };
    let mut it = args.into_iter();
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?.parse::<u64>().map_err(|e| format!("{what}: {e}"))
    };
    let mut child = None;
    let mut codec = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--procs" => o.nranks = num(it.next(), "--procs")? as usize,
            "--one-process" => o.mode = Mode::OneProcess,
            "--world" => o.world = Some(num(it.next(), "--world")? as usize),
            "--toggle" => o.mode = Mode::Toggle,
            "--quick" => o.quick = true,
            "--no-lp" => o.no_lp = true,
            "--default-min-bytes" => o.default_min_bytes = true,
            "--list" => o.list = true,
            "--host-check" => o.host_check = true,
            "--seed" => o.seed = num(it.next(), "--seed")?,
            "--filter" => o.filter = Some(it.next().ok_or("--filter needs a value")?),
            "--codec" => {
                let v = it.next().ok_or("--codec needs a value")?;
                codec = Some(parse_codec(&v).ok_or(format!("--codec {v:?}: fp8 or int8"))?);
            }
            "--child" => {
                child = Some(num(it.next(), "--child")? as usize);
                o.idfile = Some(it.next().ok_or("--child needs RANK IDFILE")?);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    o.codec = match (codec, std::env::var(CODEC_VAR)) {
        (Some(c), _) => c,
        (None, Ok(v)) if !v.trim().is_empty() => parse_codec(&v).ok_or(format!("{CODEC_VAR}={v:?}: fp8 or int8"))?,
        (None, _) => LowpCodec::Fp8,
    };
    if !(2..=MAX_RANKS).contains(&o.nranks) {
        return Err(format!("--procs must be 2..={MAX_RANKS}"));
    }
    if o.world.is_some_and(|g| !(1..=o.nranks).contains(&g)) {
        return Err("--world G needs 1 <= G <= the rank count".into());
    }
    if o.world.is_some() && o.mode == Mode::Toggle {
        return Err("--world and --toggle do not combine".into());
    }
    if let Some(r) = child {
        if r >= o.nranks {
            return Err(format!("--child rank {r} >= {}", o.nranks));
        }
        o.mode = Mode::Child(r);
    }
    Ok(o)
}

pub const USAGE: &str = "usage: lowp_accuracy [--procs N | --one-process | --toggle] [--world G] [--codec fp8|int8] [--quick] [--filter TEXT] [--no-lp] [--default-min-bytes] [--seed N] [--list] [--host-check]";

/// rcclx's codec variable.
const CODEC_VAR: &str = "RCCLX_LOW_PRECISION_CODEC";

/// `fp8` or `int8` (as rcclx reads `RCCLX_LOW_PRECISION_CODEC`: case and surrounding spaces
/// ignored).
fn parse_codec(s: &str) -> Option<LowpCodec> {
    match s.trim().to_ascii_lowercase().as_str() {
        "fp8" => Some(LowpCodec::Fp8),
        "int8" => Some(LowpCodec::Int8),
        _ => None,
    }
}

/// Sets the LP switches, the codec and the rest of the test's environment. The switches the
/// checks depend on are the test's own, whatever was exported (an exported
/// `RCCL_LOW_PRECISION_ENABLE=0` or a large `RCCLX_LP_MIN_BYTES` would otherwise turn the run into
/// an exact-path test that passes with no low-precision coverage): the LP switch (off only with
/// `--no-lp`), the codec, and `RCCLX_LP_MIN_BYTES=0` (removed, so the library's default holds,
/// with `--default-min-bytes`). `NCCL_NVLS_ENABLE` only when unset.
pub fn set_default_env(no_lp: bool, default_min_bytes: bool, codec: LowpCodec) {
    let lp = if no_lp { "0" } else { "1" };
    let set = |k: &str, v: Option<&str>| {
        let old = std::env::var(k).ok();
        if old.as_deref() != v
            && let Some(old) = &old
        {
            println!("INFO {k}={old} from the environment replaced by the test's own ({})", v.unwrap_or("unset"));
        }
        // SAFETY: called at the start of main, before any other thread exists.
        unsafe {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
    };
    set("RCCL_LOW_PRECISION_ENABLE", Some(lp));
    set(CODEC_VAR, Some(codec_name(codec)));
    set("RCCLX_LP_MIN_BYTES", if default_min_bytes { None } else { Some("0") });
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        set("NCCL_NVLS_ENABLE", Some("0"));
    }
}
