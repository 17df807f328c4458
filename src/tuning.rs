//! The tuning file `python -m rcclx tune` writes: per GPU model and rank count it was run at,
//! per collective, the largest message rcclx's kernels serve on this node (its `Spec::max_var`
//! limit), measured against the stock library.
//!
//! Found at `RCCLX_TUNING_FILE` (empty: no file), else `$XDG_CONFIG_HOME/rcclx/tuning.toml`,
//! else `$HOME/.config/rcclx/tuning.toml`. A small TOML subset, written by the tuner, one
//! `[[measured]]` table per run (a new run replaces the entry of its GPU and rank count and
//! keeps the others):
//!
//! ```toml
//! rcclx_version = "0.1.0"
//!
//! [[measured]]
//! gpu = "NVIDIA H200"
//! nranks = 2
//! allreduce = 67108864
//!
//! [[measured]]
//! gpu = "NVIDIA H200"
//! nranks = 8
//! allreduce = 8388608
//! ```
//!
//! A file that does not parse, or that another rcclx version wrote, is ignored at startup with
//! a warning. A communicator takes the entry of its GPU's name and rank count; for one the file
//! has no entry for, the file is ignored with a warning (the GPU name and rank count are known
//! only at a communicator's setup), and the entry taken is logged (INFO) once per GPU and rank
//! count. Set variables win over the file (`intercept::Policies::tuned`).
//!
//! Layer: base (uses `collective` only).
#![forbid(unsafe_code)]

use crate::collective::{COLLS, COUNT};

/// A tuning file that parsed and matches this rcclx version: its entries, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuning {
    pub entries: Vec<Entry>,
}

/// One run of the tuner: where it was measured, and what it found.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `gpu`: the GPU's name as its runtime reports it (`DeviceInfo::name`).
    pub gpu: String,
    /// `nranks`: the communicator size it was measured at.
    pub nranks: usize,
    /// `<collective> = <bytes>`, in `Coll` order (`None`: the collective is not in the entry).
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
/// (with its line number). `rcclx_version` is required once, and at least one `[[measured]]`
/// entry, each with `gpu` and `nranks` once and any collectives' limits.
pub fn parse(text: &str) -> Result<(Tuning, String), String> {
    struct Open {
        gpu: Option<String>,
        nranks: Option<usize>,
        max_bytes: [Option<u64>; COUNT],
        line: usize,
    }
    let mut version = None;
    let mut entries: Vec<Entry> = Vec::new();
    let mut open: Option<Open> = None;
    let close = |o: Open, entries: &mut Vec<Entry>| -> Result<(), String> {
        let at = |what: &str| format!("is malformed (the entry of line {}: no {what})", o.line);
        let (gpu, nranks) = (o.gpu.ok_or_else(|| at("gpu"))?, o.nranks.ok_or_else(|| at("nranks"))?);
        if entries.iter().any(|e| e.gpu == gpu && e.nranks == nranks) {
            return Err(format!("is malformed (line {}: a second entry for {gpu} at {nranks} ranks)", o.line));
        }
        entries.push(Entry { gpu, nranks, max_bytes: o.max_bytes });
        Ok(())
    };
    for (n, raw) in text.lines().enumerate() {
        let at = |what: String| format!("is malformed (line {}: {what})", n + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            if name.trim_end() != "[measured]]" {
                return Err(at(format!("unknown table {line} (the tables are [[measured]])")));
            }
            if let Some(o) = open.take() {
                close(o, &mut entries)?;
            }
            open = Some(Open { gpu: None, nranks: None, max_bytes: [None; COUNT], line: n + 1 });
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| at("expected `key = value`".into()))?;
        let (key, value) = (key.trim(), strip_comment(value.trim()));
        let twice = || at(format!("{key} twice"));
        let Some(o) = open.as_mut() else {
            match key {
                "rcclx_version" if version.is_none() => version = Some(string(value).ok_or_else(|| at(value.into()))?),
                "rcclx_version" => return Err(twice()),
                _ => return Err(at(format!("unknown key {key} (outside a [[measured]] entry)"))),
            }
            continue;
        };
        match key {
            "gpu" if o.gpu.is_some() => return Err(twice()),
            "gpu" => o.gpu = Some(string(value).ok_or_else(|| at(value.into()))?),
            "nranks" if o.nranks.is_some() => return Err(twice()),
            "nranks" => {
                let v = integer(value).filter(|&v| v >= 2).ok_or_else(|| at(format!("nranks = {value}")))?;
                o.nranks = Some(v as usize);
            }
            _ => {
                let i = COLLS.iter().position(|s| s.name == key).ok_or_else(|| at(format!("unknown key {key}")))?;
                if o.max_bytes[i].is_some() {
                    return Err(twice());
                }
                o.max_bytes[i] = Some(integer(value).ok_or_else(|| at(format!("{key} = {value}")))?);
            }
        }
    }
    if let Some(o) = open.take() {
        close(o, &mut entries)?;
    }
    let version = version.ok_or_else(|| "is malformed (no rcclx_version)".to_string())?;
    if entries.is_empty() {
        return Err("is malformed (no [[measured]] entry)".into());
    }
    Ok((Tuning { entries }, version))
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
    /// The limits for a communicator of `nranks` ranks on GPU `gpu` (its entry), or why the file
    /// does not describe it.
    pub fn limits_for(&self, gpu: &str, nranks: usize) -> Result<&[Option<u64>; COUNT], String> {
        match self.entries.iter().find(|e| e.gpu == gpu && e.nranks == nranks) {
            Some(e) => Ok(&e.max_bytes),
            None => {
                let has: Vec<String> =
                    self.entries.iter().map(|e| format!("{} at {} ranks", e.gpu, e.nranks)).collect();
                Err(format!("has no entry for {gpu} at {nranks} ranks (it has {})", has.join(", ")))
            }
        }
    }
}

impl State {
    /// The file's limits for a communicator (`None`: no file, or it does not describe this
    /// communicator). Logs once per GPU and rank count which entry it takes (INFO), or warns
    /// that it has none.
    pub fn limits_for(&self, gpu: &str, nranks: usize) -> Option<&[Option<u64>; COUNT]> {
        static SEEN: parking_lot::Mutex<Vec<(String, usize)>> = parking_lot::Mutex::new(Vec::new());
        let (t, path) = (self.tuning.as_ref()?, self.path.as_deref()?);
        let found = t.limits_for(gpu, nranks);
        let mut seen = SEEN.lock();
        if !seen.iter().any(|(g, n)| g == gpu && *n == nranks) {
            seen.push((gpu.to_string(), nranks));
            match &found {
                Ok(_) => tracing::info!("tuning file {path}: the entry of {gpu} at {nranks} ranks sets rcclx's limits"),
                Err(why) => tracing::warn!("tuning file {path} {why}; it is ignored for this communicator"),
            }
        }
        found.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Coll;
    use std::collections::HashMap;

    const FILE: &str = "# written by python -m rcclx tune\nrcclx_version = \"0.1.0\"\n\n[[measured]]\ngpu = \"NVIDIA H200\" # the name\nnranks = 2\nallreduce = 67_108_864\nalltoall = 16777216\n\n[[measured]]\ngpu = \"NVIDIA H200\"\nnranks = 8\nallreduce = 8388608\n";

    #[test]
    fn parses_what_the_tuner_writes() {
        let (t, v) = parse(FILE).unwrap();
        assert_eq!(v, "0.1.0");
        assert_eq!(t.entries.len(), 2);
        let e = &t.entries[0];
        assert_eq!((e.gpu.as_str(), e.nranks), ("NVIDIA H200", 2));
        let mut want = [None; COUNT];
        want[Coll::AllReduce as usize] = Some(64 << 20);
        want[Coll::AllToAll as usize] = Some(16 << 20);
        assert_eq!(e.max_bytes, want);
        assert_eq!(t.entries[1].nranks, 8);
        assert_eq!(t.entries[1].max_bytes[Coll::AllReduce as usize], Some(8 << 20));
    }

    #[test]
    fn malformed_files_name_the_line() {
        let cases = [
            (FILE.replace("alltoall =", "alltoallv ="), "line 8: unknown key alltoallv"),
            (FILE.replace("nranks = 2", "nranks = 1"), "line 6: nranks = 1"),
            (FILE.replace("nranks = 2", "nranks = two"), "line 6"),
            (FILE.replace("67_108_864", "-1"), "line 7: allreduce = -1"),
            (FILE.replace("67_108_864", "64M"), "line 7"),
            (FILE.replace("gpu = \"NVIDIA H200\" #", "gpu = NVIDIA #"), "line 5"),
            (FILE.replace("alltoall = 16777216", "allreduce = 1"), "line 8: allreduce twice"),
            (FILE.replace("nranks = 2", "nranks = 2\nnranks = 4"), "nranks twice"),
            (FILE.replace("nranks = 8", "nranks = 2"), "line 10: a second entry for NVIDIA H200 at 2 ranks"),
            (FILE.replace("nranks = 2\n", ""), "the entry of line 4: no nranks"),
            (FILE.replace("gpu = \"NVIDIA H200\"\nnranks = 8", "nranks = 8"), "the entry of line 10: no gpu"),
            (FILE.replace("[[measured]]", "[allreduce]"), "line 4: unknown table [allreduce]"),
            (FILE.replace("rcclx_version = \"0.1.0\"\n", ""), "no rcclx_version"),
            ("rcclx_version = \"0.1.0\"\ngpu = \"x\"\n".into(), "line 2: unknown key gpu (outside"),
            ("rcclx_version = \"0.1.0\"\n".into(), "no [[measured]] entry"),
            ("just text".into(), "line 1: expected `key = value`"),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(&text);
            assert!(err.starts_with("is malformed") && err.contains(want), "{err} / {want}");
        }
    }

    #[test]
    fn a_communicator_takes_the_entry_of_its_gpu_and_rank_count() {
        let (t, _) = parse(FILE).unwrap();
        assert_eq!(t.limits_for("NVIDIA H200", 2).unwrap()[Coll::AllReduce as usize], Some(64 << 20));
        assert_eq!(t.limits_for("NVIDIA H200", 8).unwrap()[Coll::AllReduce as usize], Some(8 << 20));
        let gpu = t.limits_for("NVIDIA H100 80GB HBM3", 2).unwrap_err();
        assert!(gpu.contains("no entry for NVIDIA H100 80GB HBM3 at 2 ranks"), "{gpu}");
        let ranks = t.limits_for("NVIDIA H200", 4).unwrap_err();
        assert!(ranks.contains("it has NVIDIA H200 at 2 ranks, NVIDIA H200 at 8 ranks"), "{ranks}");
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
        assert_eq!(s.tuning.as_ref().unwrap().entries[0].max_bytes[0], Some(64 << 20));
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
