//! The tuning file `python -m rcclx tune` writes: per collective, the largest message rcclx's
//! kernels serve on this node (its `Spec::max_var` limit), measured against the stock library.
//!
//! Found at `RCCLX_TUNING_FILE` (empty: no file), else `$XDG_CONFIG_HOME/rcclx/tuning.toml`,
//! else `$HOME/.config/rcclx/tuning.toml`. A small TOML subset, written by the tuner:
//!
//! ```toml
//! rcclx_version = "0.1.0"
//! gpu = "NVIDIA H200"
//! nranks = 2
//!
//! [allreduce]
//! max_bytes = 67108864
//! ```
//!
//! A file that does not parse, or that another rcclx version wrote, is ignored at startup with
//! a warning. A file measured on another GPU or rank count is ignored, with a warning, for the
//! communicators it does not describe (the GPU name and rank count are known only at a
//! communicator's setup). Set variables win over the file (`intercept::Policies::tuned`).
//!
//! Layer: base (uses `collective` only).
#![forbid(unsafe_code)]

use crate::collective::{COLLS, COUNT};

/// A tuning file that parsed and matches this rcclx version.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuning {
    /// `gpu`: the GPU's name as its runtime reports it (`DeviceInfo::name`).
    pub gpu: String,
    /// `nranks`: the communicator size it was measured at.
    pub nranks: usize,
    /// `[<collective>] max_bytes`, in `Coll` order (`None`: the collective is not in the file).
    pub max_bytes: [Option<u64>; COUNT],
}

/// What was found where: the file's path (if any) and the tuning it holds, or why not.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct State {
    pub path: Option<String>,
    pub tuning: Option<Tuning>,
    /// Why the file is not used (set only when `path` is).
    pub error: Option<String>,
}

/// The path of the tuning file, through `lookup` (the environment): `None` when
/// `RCCLX_TUNING_FILE` is empty or no default location can be named.
pub fn path(lookup: &impl Fn(&str) -> Option<String>) -> Option<(String, bool)> {
    if let Some(p) = lookup("RCCLX_TUNING_FILE") {
        return (!p.is_empty()).then_some((p, true));
    }
    let base = match lookup("XDG_CONFIG_HOME").filter(|x| x.starts_with('/')) {
        Some(x) => x,
        None => format!("{}/.config", lookup("HOME").filter(|h| !h.is_empty())?),
    };
    Some((format!("{base}/rcclx/tuning.toml"), false))
}

/// Finds and reads the tuning file. The warning (for the caller to log) says why a file that
/// exists, or that `RCCLX_TUNING_FILE` names, is not used.
pub fn load(lookup: &impl Fn(&str) -> Option<String>, version: &str) -> (State, Option<String>) {
    let Some((path, named)) = path(lookup) else { return (State::default(), None) };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return (State::default(), None),
        Err(e) => return failed(path, format!("cannot be read ({e})")),
    };
    match parse(&text).and_then(|(t, v)| check_version(t, &v, version)) {
        Ok(t) => (State { path: Some(path), tuning: Some(t), error: None }, None),
        Err(why) => failed(path, why),
    }
}

fn failed(path: String, why: String) -> (State, Option<String>) {
    let warning = format!("tuning file {path} {why}; it is ignored (run `python -m rcclx tune` again)");
    (State { path: Some(path), tuning: None, error: Some(why) }, Some(warning))
}

fn check_version(t: Tuning, file: &str, ours: &str) -> Result<Tuning, String> {
    if file == ours { Ok(t) } else { Err(format!("was written for rcclx {file}, this is rcclx {ours}")) }
}

/// Parses the file's text: the tuning and the rcclx version that wrote it, or the first error
/// (with its line number). Every key is required once, except the collectives' sections.
pub fn parse(text: &str) -> Result<(Tuning, String), String> {
    let (mut version, mut gpu, mut nranks) = (None, None, None);
    let mut max_bytes = [None; COUNT];
    let mut section: Option<usize> = None;
    for (n, raw) in text.lines().enumerate() {
        let at = |what: String| format!("is malformed (line {}: {what})", n + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let i = COLLS.iter().position(|s| s.name == name.trim());
            let i = i.ok_or_else(|| at(format!("unknown collective [{}]", name.trim())))?;
            if max_bytes[i].is_some() || section == Some(i) {
                return Err(at(format!("[{}] twice", COLLS[i].name)));
            }
            section = Some(i);
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| at("expected `key = value`".into()))?;
        let (key, value) = (key.trim(), strip_comment(value.trim()));
        let twice = || at(format!("{key} twice"));
        match (section, key) {
            (None, "rcclx_version") if version.is_none() => {
                version = Some(string(value).ok_or_else(|| at(value.into()))?)
            }
            (None, "gpu") if gpu.is_none() => gpu = Some(string(value).ok_or_else(|| at(value.into()))?),
            (None, "nranks") if nranks.is_none() => {
                let v = integer(value).filter(|&v| v >= 2).ok_or_else(|| at(format!("nranks = {value}")))?;
                nranks = Some(v as usize);
            }
            (Some(i), "max_bytes") if max_bytes[i].is_none() => {
                max_bytes[i] = Some(integer(value).ok_or_else(|| at(format!("max_bytes = {value}")))?);
            }
            (None, "rcclx_version" | "gpu" | "nranks") | (Some(_), "max_bytes") => return Err(twice()),
            _ => return Err(at(format!("unknown key {key}"))),
        }
    }
    let missing = |k: &str| format!("is malformed (no {k})");
    let version = version.ok_or_else(|| missing("rcclx_version"))?;
    let gpu = gpu.ok_or_else(|| missing("gpu"))?;
    let nranks = nranks.ok_or_else(|| missing("nranks"))?;
    Ok((Tuning { gpu, nranks, max_bytes }, version))
}

/// A value with a trailing `# comment` removed (outside a string).
fn strip_comment(v: &str) -> &str {
    let mut quoted = false;
    for (i, c) in v.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return v[..i].trim_end(),
            _ => {}
        }
    }
    v
}

/// A basic TOML string without escapes (the tuner writes names without `"` or `\`).
fn string(v: &str) -> Option<String> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains(['"', '\\'])).then(|| inner.to_string())
}

/// A TOML decimal integer (`_` between digits allowed), not negative.
fn integer(v: &str) -> Option<u64> {
    let digits: String = v.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || v.starts_with('_') || v.ends_with('_') {
        return None;
    }
    digits.parse().ok()
}

impl Tuning {
    /// The limits for a communicator of `nranks` ranks on GPU `gpu`, or why the file does not
    /// describe it.
    pub fn limits_for(&self, gpu: &str, nranks: usize) -> Result<&[Option<u64>; COUNT], String> {
        if self.gpu != gpu {
            Err(format!("was measured on {}, this communicator runs on {gpu}", self.gpu))
        } else if self.nranks != nranks {
            Err(format!("was measured at {} ranks, this communicator has {nranks}", self.nranks))
        } else {
            Ok(&self.max_bytes)
        }
    }
}

impl State {
    /// The file's limits for a communicator (`None`: no file, or it does not describe this
    /// communicator). Warns once per GPU and rank count the file does not describe.
    pub fn limits_for(&self, gpu: &str, nranks: usize) -> Option<&[Option<u64>; COUNT]> {
        static WARNED: parking_lot::Mutex<Vec<(String, usize)>> = parking_lot::Mutex::new(Vec::new());
        let (t, path) = (self.tuning.as_ref()?, self.path.as_deref()?);
        match t.limits_for(gpu, nranks) {
            Ok(limits) => Some(limits),
            Err(why) => {
                let mut warned = WARNED.lock();
                if !warned.iter().any(|(g, n)| g == gpu && *n == nranks) {
                    warned.push((gpu.to_string(), nranks));
                    tracing::warn!("tuning file {path} {why}; it is ignored for this communicator");
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Coll;
    use std::collections::HashMap;

    const FILE: &str = "# written by python -m rcclx tune\nrcclx_version = \"0.1.0\"\ngpu = \"NVIDIA H200\" # the name\nnranks = 2\n\n[allreduce]\nmax_bytes = 67_108_864\n\n[alltoall]\nmax_bytes = 16777216\n";

    #[test]
    fn parses_what_the_tuner_writes() {
        let (t, v) = parse(FILE).unwrap();
        assert_eq!(v, "0.1.0");
        assert_eq!((t.gpu.as_str(), t.nranks), ("NVIDIA H200", 2));
        let mut want = [None; COUNT];
        want[Coll::AllReduce as usize] = Some(64 << 20);
        want[Coll::AllToAll as usize] = Some(16 << 20);
        assert_eq!(t.max_bytes, want);
    }

    #[test]
    fn malformed_files_name_the_line() {
        let cases = [
            (FILE.replace("[alltoall]", "[alltoallv]"), "line 9: unknown collective"),
            (FILE.replace("nranks = 2", "nranks = 1"), "line 4: nranks = 1"),
            (FILE.replace("nranks = 2", "nranks = two"), "line 4"),
            (FILE.replace("67_108_864", "-1"), "line 7: max_bytes = -1"),
            (FILE.replace("67_108_864", "64M"), "line 7"),
            (FILE.replace("gpu = \"NVIDIA H200\"", "gpu = NVIDIA"), "line 3"),
            (FILE.replace("[alltoall]", "[allreduce]"), "line 9: [allreduce] twice"),
            (FILE.replace("nranks = 2", "nranks = 2\nnranks = 4"), "nranks twice"),
            (FILE.replace("max_bytes = 16777216", "min_bytes = 1"), "unknown key min_bytes"),
            (FILE.replace("nranks = 2\n", ""), "no nranks"),
            (FILE.replace("rcclx_version = \"0.1.0\"\n", ""), "no rcclx_version"),
            ("just text".into(), "line 1: expected `key = value`"),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(&text);
            assert!(err.starts_with("is malformed") && err.contains(want), "{err} / {want}");
        }
    }

    #[test]
    fn stale_files_are_ignored_for_what_they_do_not_describe() {
        let (t, _) = parse(FILE).unwrap();
        assert!(t.limits_for("NVIDIA H200", 2).is_ok());
        let gpu = t.limits_for("NVIDIA H100 80GB HBM3", 2).unwrap_err();
        assert!(gpu.contains("measured on NVIDIA H200"), "{gpu}");
        let ranks = t.limits_for("NVIDIA H200", 8).unwrap_err();
        assert!(ranks.contains("at 2 ranks") && ranks.contains("has 8"), "{ranks}");
        assert!(check_version(t.clone(), "0.1.0", "0.1.0").is_ok());
        let v = check_version(t, "0.0.9", "0.1.0").unwrap_err();
        assert!(v.contains("rcclx 0.0.9") && v.contains("rcclx 0.1.0"), "{v}");
    }

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn path_from_the_variable_then_xdg_then_home() {
        let p = |pairs: &[(&str, &str)]| path(&lookup(pairs));
        assert_eq!(p(&[]), None);
        assert_eq!(p(&[("HOME", "/h")]), Some(("/h/.config/rcclx/tuning.toml".into(), false)));
        assert_eq!(p(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")]), Some(("/x/rcclx/tuning.toml".into(), false)));
        // XDG: a relative path is invalid and ignored.
        assert_eq!(
            p(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "x")]),
            Some(("/h/.config/rcclx/tuning.toml".into(), false))
        );
        assert_eq!(p(&[("HOME", "/h"), ("RCCLX_TUNING_FILE", "/t.toml")]), Some(("/t.toml".into(), true)));
        assert_eq!(p(&[("HOME", "/h"), ("RCCLX_TUNING_FILE", "")]), None);
    }

    #[test]
    fn load_reads_checks_and_warns() {
        let dir = std::env::temp_dir().join(format!("rcclx-tuning-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("rcclx")).unwrap();
        let dir_s = dir.to_str().unwrap();
        // No file at the default path: silent.
        let (s, w) = load(&lookup(&[("XDG_CONFIG_HOME", dir_s)]), "0.1.0");
        assert_eq!((s, w), (State::default(), None));
        // A named file that is missing: a warning.
        let missing = format!("{dir_s}/none.toml");
        let (s, w) = load(&lookup(&[("RCCLX_TUNING_FILE", &missing)]), "0.1.0");
        assert!(s.tuning.is_none() && s.error.is_some() && w.unwrap().contains("cannot be read"));
        let file = dir.join("rcclx/tuning.toml");
        std::fs::write(&file, FILE).unwrap();
        let (s, w) = load(&lookup(&[("XDG_CONFIG_HOME", dir_s)]), "0.1.0");
        assert_eq!(w, None);
        assert_eq!(s.path.as_deref(), file.to_str());
        assert_eq!(s.tuning.as_ref().unwrap().max_bytes[0], Some(64 << 20));
        let (s, w) = load(&lookup(&[("XDG_CONFIG_HOME", dir_s)]), "0.2.0");
        assert!(s.tuning.is_none(), "{s:?}");
        let w = w.unwrap();
        assert!(w.contains("written for rcclx 0.1.0") && w.contains("it is ignored"), "{w}");
        std::fs::write(&file, "gpu = 3\n").unwrap();
        let (s, w) = load(&lookup(&[("XDG_CONFIG_HOME", dir_s)]), "0.1.0");
        assert!(s.tuning.is_none() && w.unwrap().contains("is malformed (line 1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
