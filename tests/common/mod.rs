//! Helpers shared by the integration tests: where the built library and the stock NCCL
//! libraries are, compiling the C programs of `tests/c/`, running them with a clean
//! environment, and reading their result files and rcclx's log lines.
//!
//! Inputs come from environment variables set by `ci/test.sh` (which downloads the wheels):
//!
//! | variable | what |
//! |---|---|
//! | `RCCLX_TEST_NCCL_2_28` | `libnccl.so.2` of nvidia-nccl-cu13 2.28.9 (what PyTorch 2.11 uses) |
//! | `RCCLX_TEST_NCCL_2_32` | `libnccl.so.2` of nvidia-nccl-cu13 2.32.3 |
//! | `RCCLX_TEST_NCCL_INCLUDE` | the 2.32.3 wheel's include dir (`nccl.h`, `nccl_device.h`) |
//! | `RCCLX_TEST_CUDA_INCLUDE` | CUDA headers (`.tools/cuda/nvidia/cu13/include`) |
//! | `RCCLX_TEST_LIB` | optional: the `librcclx.so` to test (default: the one of this build) |
//!
//! A missing input fails the test when `CI` is set, and skips it with a printed note otherwise.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `python3 ARGS` in the repository root and fails the test, with its output and `hint`,
/// unless it exits 0 (the Python checks of `bench/`; `ci/test.sh` checks that python3 exists).
pub fn python_passes(args: &[&str], hint: &str) {
    let out = Command::new("python3")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("python3 runs (ci/test.sh checks that it is installed)");
    assert!(
        out.status.success(),
        "python3 {}: {}{}{hint}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// True when running in CI (`CI` set to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// The path in environment variable `var`: `None` (with a note) when unset outside CI.
/// Panics when unset in CI, or when set to a path that does not exist.
pub fn input(var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(v) => {
            let p = PathBuf::from(v);
            assert!(p.exists(), "{var}={} does not exist ({what})", p.display());
            Some(p)
        }
        None if in_ci() => panic!("{var} is not set ({what}); CI must provide it: run `bash ci/test.sh`"),
        None => {
            eprintln!("NOTE: {var} is not set ({what}); skipping. `bash ci/test.sh` sets it.");
            None
        }
    }
}

/// The `librcclx.so` under test: `RCCLX_TEST_LIB`, else the one cargo built next to this test
/// binary (`target/<profile>/deps/`; `cargo test` builds the cdylib there but does not always
/// copy it up to `target/<profile>/`), else `target/<profile>/librcclx.so`.
pub fn lib() -> PathBuf {
    if let Some(p) = std::env::var_os("RCCLX_TEST_LIB") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "RCCLX_TEST_LIB={} is not a file", p.display());
        return p.canonicalize().unwrap();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a parent dir");
    for cand in [deps.join("librcclx.so"), deps.join("../librcclx.so")] {
        if cand.is_file() {
            return cand.canonicalize().unwrap();
        }
    }
    panic!("librcclx.so not found next to {} (build with `cargo build --release`)", exe.display());
}

/// A stock NCCL library from a wheel.
#[derive(Clone, Debug)]
pub struct Nccl {
    pub version: &'static str,
    /// `NCCL_VERSION_CODE`, what its `ncclGetVersion` reports.
    pub code: i32,
    /// `.../nvidia/nccl/lib/libnccl.so.2`
    pub lib: PathBuf,
}

impl Nccl {
    pub fn dir(&self) -> PathBuf {
        self.lib.parent().unwrap().to_path_buf()
    }
    /// For scratch directory names.
    pub fn tag(&self) -> String {
        self.version.replace('.', "_")
    }
}

/// nvidia-nccl-cu13 2.28.9 (`RCCLX_TEST_NCCL_2_28`).
pub fn nccl_2_28() -> Option<Nccl> {
    let lib = input("RCCLX_TEST_NCCL_2_28", "libnccl.so.2 of nvidia-nccl-cu13 2.28.9")?;
    Some(Nccl { version: "2.28.9", code: 22809, lib: lib.canonicalize().unwrap() })
}

/// nvidia-nccl-cu13 2.32.3 (`RCCLX_TEST_NCCL_2_32`).
pub fn nccl_2_32() -> Option<Nccl> {
    let lib = input("RCCLX_TEST_NCCL_2_32", "libnccl.so.2 of nvidia-nccl-cu13 2.32.3")?;
    Some(Nccl { version: "2.32.3", code: 23203, lib: lib.canonicalize().unwrap() })
}

/// A fresh, empty directory for one test, under cargo's `target/tmp`. Left in place after the
/// test so a failure can be inspected.
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rcclx-tests").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// C and C++ compilers (`CC`, `CXX`, default `cc`, `c++`).
pub fn cc() -> Command {
    Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
}
pub fn cxx() -> Command {
    Command::new(std::env::var_os("CXX").unwrap_or_else(|| "c++".into()))
}

/// Runs a compiler (or any tool) and panics with its output if it fails.
pub fn must(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{cmd:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a tool and returns its stdout; panics if it fails.
pub fn stdout_of(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

pub const C_FLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"];

fn c_src(name: &str) -> PathBuf {
    repo().join("tests/c").join(name)
}

/// `tests/c/probe.c` linked with `-lnccl` against `nccl_lib` through a `libnccl.so` symlink in
/// `dir` (the way nccl-tests links), so its `DT_NEEDED` is the library's SONAME,
/// `libnccl.so.2` (the stock library's, or that of rcclx's copy installed under that name). A
/// library without a SONAME is linked as `-l:libnccl.so.2`, which records that name as well.
pub fn linked_probe(dir: &Path, nccl_lib: &Path) -> PathBuf {
    let link_dir = dir.join("link");
    std::fs::create_dir_all(&link_dir).unwrap();
    for name in ["libnccl.so", "libnccl.so.2"] {
        let link = link_dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(nccl_lib, &link).unwrap();
    }
    let has_soname = stdout_of(Command::new("readelf").arg("-d").arg(nccl_lib), "readelf -d").contains("(SONAME)");
    let exe = dir.join("probe_linked");
    must(
        cc().args(C_FLAGS)
            .arg("-DPROBE_LINKED")
            .arg(c_src("probe.c"))
            .arg("-L")
            .arg(&link_dir)
            .arg(if has_soname { "-lnccl" } else { "-l:libnccl.so.2" })
            .arg("-ldl")
            .arg("-o")
            .arg(&exe),
        "compiling the linked probe",
    );
    let dynamic = stdout_of(Command::new("readelf").arg("-d").arg(&exe), "readelf -d");
    assert!(dynamic.contains("Shared library: [libnccl.so.2]"), "probe must need libnccl.so.2:\n{dynamic}");
    exe
}

/// `tests/c/nvtx_record.c`, the recording NVTX injection library, built into `dir`.
pub fn nvtx_recorder(dir: &Path) -> PathBuf {
    nvtx_recorder_with(dir, "libnvtx_record.so", &[])
}

/// The NVTX recorder built as `dir/name` with extra compiler flags (`-DNVTX_RECORD_NO_EXT`: a
/// tool without NVTX's payload extension).
pub fn nvtx_recorder_with(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let lib = dir.join(name);
    must(
        cc().args(C_FLAGS)
            .args(flags)
            .args(["-shared", "-fPIC"])
            .arg(c_src("nvtx_record.c"))
            .args(["-ldl", "-lpthread", "-o"])
            .arg(&lib),
        "compiling the NVTX recorder",
    );
    lib
}

/// `tests/c/roctx_record.c` built as `lib` (a stand-in for ROCm's roctx library).
pub fn roctx_recorder(lib: &Path) {
    must(
        cc().args(C_FLAGS).args(["-shared", "-fPIC"]).arg(c_src("roctx_record.c")).arg("-o").arg(lib),
        "compiling the roctx recorder",
    );
}

/// `tests/c/probe.c` built to `dlopen` the library given on its command line.
pub fn dlopen_probe(dir: &Path) -> PathBuf {
    let exe = dir.join("probe_dlopen");
    must(cc().args(C_FLAGS).arg(c_src("probe.c")).arg("-ldl").arg("-o").arg(&exe), "compiling the dlopen probe");
    exe
}

/// Installs rcclx into `prefix` with `scripts/install.sh` (the library under test, no build).
pub fn install(prefix: &Path) {
    must(
        Command::new("bash").arg(repo().join("scripts/install.sh")).arg(prefix).env("RCCLX_LIB", lib()),
        "scripts/install.sh",
    );
    // A copy per stock name, its SONAME that name; the unversioned names are symlinks.
    for (file, link) in
        [("librcclx.so.0", "librcclx.so"), ("libnccl.so.2", "libnccl.so"), ("librccl.so.1", "librccl.so")]
    {
        let f = prefix.join("lib").join(file);
        let dynamic = stdout_of(Command::new("readelf").arg("-d").arg(&f), "readelf -d");
        assert!(dynamic.contains(&format!("Library soname: [{file}]")), "{}:\n{dynamic}", f.display());
        let l = prefix.join("lib").join(link);
        let target = std::fs::read_link(&l).unwrap_or_else(|e| panic!("{} is not a symlink: {e}", l.display()));
        assert_eq!(target, Path::new(file), "{}", l.display());
    }
    assert!(prefix.join("include/rcclx.h").is_file());
}

/// One run of a probe.
pub struct Run {
    pub what: String,
    pub status: ExitStatus,
    /// The `name=result` lines of the result file.
    pub results: Vec<String>,
    pub stdout: String,
    pub stderr: String,
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// A value for [`run`]'s `env` that leaves the variable out of the environment.
pub const UNSET: &str = "<unset>";

/// Runs `exe args...` with an empty environment except `PATH`, `NCCL_SOCKET_IFNAME=lo` (the
/// bootstrap of `ncclGetUniqueId` stays on loopback), `NCCL_DEBUG=WARN` (unless `env` names
/// `NCCL_DEBUG`; the value [`UNSET`] leaves it out) and `env`. The result file goes into
/// `dir`; stdout/stderr are captured (NCCL and rcclx log to stdout). Panics after 120 s.
pub fn run(dir: &Path, what: &str, exe: &Path, args: &[&OsStr], env: &[(&str, &OsStr)]) -> Run {
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let results = dir.join(format!("run{n}.results"));
    let (out_path, err_path) = (dir.join(format!("run{n}.stdout")), dir.join(format!("run{n}.stderr")));
    let mut cmd = Command::new(exe);
    cmd.arg(&results)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NCCL_SOCKET_IFNAME", "lo")
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap());
    if !env.iter().any(|(k, _)| *k == "NCCL_DEBUG") {
        cmd.env("NCCL_DEBUG", "WARN");
    }
    for (k, v) in env {
        if v.to_str() != Some(UNSET) {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start {}: {e}", exe.display()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: {} did not finish in 120 s (hang?); output in {}", exe.display(), dir.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let r = Run {
        what: format!("{what} [{}: run{n}]", dir.display()),
        status,
        results: read(&results).lines().map(str::to_string).collect(),
        stdout: read(&out_path),
        stderr: read(&err_path),
    };
    std::fs::write(dir.join(format!("run{n}.what")), format!("{what}\n{cmd:?}\n")).unwrap();
    r
}

impl Run {
    /// Exit status 0 and a complete result file (last line `end`).
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success() && self.results.last().map(String::as_str) == Some("end"),
            "{}: exit status {}, result file incomplete ({} lines)\n--- results\n{}\n--- stdout\n{}\n--- stderr\n{}",
            self.what,
            self.status,
            self.results.len(),
            self.results.join("\n"),
            self.stdout,
            self.stderr
        );
        self
    }

    /// The result of `key` (`key=value` line), if any.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.results.iter().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    }

    /// The result of `key`; panics if the probe did not print it.
    pub fn get(&self, key: &str) -> &str {
        self.value(key).unwrap_or_else(|| panic!("{}: no `{key}=` line in\n{}", self.what, self.results.join("\n")))
    }

    /// Results of NCCL functions (everything but rcclx's own `rcclx*` lines).
    pub fn nccl_results(&self) -> Vec<&str> {
        self.results.iter().map(String::as_str).filter(|l| !l.starts_with("rcclx")).collect()
    }

    /// rcclx's log lines (`[time] host:pid:tid [dev] NCCL LEVEL rcclx: message`, and its
    /// version line) as (LEVEL, message); the stock library's own lines (no `rcclx:` tag) are
    /// left out.
    pub fn rcclx_log(&self) -> Vec<(&str, &str)> {
        self.stdout.lines().filter_map(rcclx_line).collect()
    }

    /// rcclx's log lines other than its bare version line, those the probe provokes on purpose
    /// ([`PROBE_A2AV_WARNING`], [`PROBE_A2AV_WIRE_WARNING`], [`PROBE_MISSING_WARNING`]) and, in a build without kernels
    /// (`RCCLX_NO_KERNELS=1`), the warning that says so.
    pub fn rcclx_log_unprovoked(&self) -> Vec<(&str, &str)> {
        let no_kernels = rcclx::kernels::CODE_OBJECTS.is_empty();
        self.rcclx_log()
            .into_iter()
            .filter(|l| *l != PROBE_A2AV_WARNING && *l != PROBE_A2AV_WIRE_WARNING)
            .filter(|(level, m)| !(*level == "WARN" && m.starts_with(PROBE_MISSING_WARNING)))
            .filter(|(level, _)| *level != "VERSION")
            .filter(|(_, m)| !(no_kernels && m.starts_with("this librcclx.so was built without GPU kernels")))
            .collect()
    }

    /// Everything the run printed, for failure messages.
    pub fn dump(&self) -> String {
        format!(
            "{}\n--- results\n{}\n--- stderr\n{}--- stdout\n{}",
            self.what,
            self.results.join("\n"),
            self.stderr,
            self.stdout
        )
    }
}

/// Asserts that two runs gave the same NCCL results, line by line.
pub fn assert_same_results(stock: &Run, rcclx: &Run) {
    let (a, b) = (stock.nccl_results(), rcclx.nccl_results());
    assert!(a.len() > 2, "{}: the stock run produced no results:\n{}", stock.what, stock.dump());
    let mut diffs = Vec::new();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).copied().unwrap_or("<none>"), b.get(i).copied().unwrap_or("<none>"));
        if x != y {
            diffs.push(format!(
                "  line {}: stock `{x}`\n  {:>width$}  rcclx `{y}`",
                i + 1,
                "",
                width = 5 + (i + 1).to_string().len()
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "results differ between\n  {}\n  {}\n{}\n=== rcclx run:\n{}",
        stock.what,
        rcclx.what,
        diffs.join("\n"),
        rcclx.dump()
    );
}

/// The C spelling of a type written the way `rcclx::abi::table::EXPORTS` writes it (Rust
/// tokens, with the C type names already used for NCCL's own types).
pub fn c_type(rust: &str) -> String {
    // A type passed through two macros is stringified with spaces: `* mut T`.
    let t = rust.trim().replace("* mut", "*mut").replace("* const", "*const");
    let t = t.as_str();
    if t == "()" {
        return "void".into();
    }
    if let Some(inner) = t.strip_prefix("*mut") {
        return format!("{}*", c_type(inner));
    }
    if let Some(inner) = t.strip_prefix("*const") {
        let inner = c_type(inner);
        // `*const *mut T` is `T* const*`; `*const T` is `const T*`.
        return if inner.ends_with('*') { format!("{inner} const*") } else { format!("const {inner}*") };
    }
    let base = match t {
        "c_void" => "void",
        "c_char" => "char",
        "c_schar" => "signed char",
        "c_uchar" => "unsigned char",
        "c_short" => "short",
        "c_ushort" => "unsigned short",
        "c_int" => "int",
        "c_uint" | "unsigned_int" => "unsigned int",
        "c_long" => "long",
        "c_ulong" => "unsigned long",
        "c_longlong" => "long long",
        "c_ulonglong" => "unsigned long long",
        "c_float" | "f32" => "float",
        "c_double" | "f64" => "double",
        "usize" | "size_t" => "size_t",
        "isize" => "ptrdiff_t",
        "i8" => "int8_t",
        "i16" => "int16_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "bool" => "bool",
        other => {
            assert!(
                !other.is_empty()
                    && other.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !other.starts_with(|c: char| c.is_ascii_digit()),
                "type `{rust}` has no C spelling here; extend tests/common/mod.rs c_type()"
            );
            other
        }
    };
    base.into()
}

/// `ret name(params);` for one export, under `name` (e.g. the `p` twin's name).
pub fn c_declaration(e: &rcclx::abi::Export, name: &str) -> String {
    let params = if e.params.is_empty() {
        "void".to_string()
    } else {
        e.params.iter().map(|(n, t)| format!("{} {n}", c_type(t))).collect::<Vec<_>>().join(", ")
    };
    format!("{} {name}({params});", c_type(e.ret))
}

/// The files of `src/abi/own/`, sorted: rcclx's own C API.
pub fn own_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("src/abi/own"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    files
}

/// rcclx's own exported functions (all `#[unsafe(no_mangle)]` exports, declared in
/// `include/rcclx.h`): every `extern "C" fn` written out in `src/abi/own/`, and the AllToAllv
/// forms its macro generates (`rcclx::abi::own::ALLTOALLV_EXPORTS`).
pub fn own_functions() -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for file in own_files() {
        let src = std::fs::read_to_string(file).unwrap();
        v.extend(
            src.lines()
                .filter_map(|l| l.split_once("extern \"C\" fn ").map(|(_, rest)| rest))
                .map(|rest| rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
                .filter(|n| !n.is_empty()), // the macro's `$name`
        );
    }
    for e in rcclx::abi::own::ALLTOALLV_EXPORTS {
        v.extend([e.name.to_string(), e.ex.to_string()]);
    }
    assert!(v.iter().any(|n| n == "rcclxGetVersion"), "no rcclxGetVersion in src/abi/own/: {v:?}");
    v
}

/// Symbol names of `tests/data/nccl-symbols-cu13.txt`: the `T name` / `W name` lines of its
/// per-version sections (`## nvidia-nccl-cu13 <version>`), each section checked against its
/// `## count: N` line. The later sections (differences, PLT calls) only repeat names.
pub fn nccl_symbols() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("tests/data/nccl-symbols-cu13.txt")).unwrap();
    let mut all = Vec::new();
    let mut sections = 0;
    let mut section: Option<(String, Vec<String>, Option<usize>)> = None;
    let mut close = |sec: Option<(String, Vec<String>, Option<usize>)>, all: &mut Vec<String>| {
        if let Some((title, names, count)) = sec {
            assert_eq!(Some(names.len()), count, "nccl-symbols-cu13.txt section `{title}`: count line vs lines");
            all.extend(names);
            sections += 1;
        }
    };
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            if title.starts_with("nvidia-nccl-cu13 ") {
                close(section.take(), &mut all);
                section = Some((title.to_string(), Vec::new(), None));
            } else if let (Some(sec), Some(n)) = (section.as_mut(), title.strip_prefix("count: ")) {
                sec.2 = n.split_whitespace().next().and_then(|n| n.parse().ok());
            } else if !title.starts_with("wheel:") && !title.starts_with("nvidia-nccl-cu12") {
                close(section.take(), &mut all);
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(sec) = section.as_mut() {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert!(f.len() == 2 && matches!(f[0], "T" | "W"), "bad line in nccl-symbols-cu13.txt: {line}");
            sec.1.push(f[1].to_string());
        }
    }
    close(section.take(), &mut all);
    assert_eq!(sections, 2, "nccl-symbols-cu13.txt: expected the 2.32.3 and 2.28.9 sections");
    all.sort();
    all.dedup();
    all
}

pub fn rccl_api() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(repo().join("tests/data/rccl-api.txt")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), 3, "bad line in rccl-api.txt: {l}");
            (f[0].trim().to_string(), f[1].trim().to_string(), f[2].trim().to_string())
        })
        .collect()
}

/// Which string `ncclGetErrorString` gives for `code` (NCCL 2.30+ wording).
pub fn nccl_error_string(code: i32) -> &'static str {
    match code {
        0 => "no error",
        1 => "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        2 => "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        3 => "internal error - please report this issue to the NCCL developers",
        4 => "invalid argument (run with NCCL_DEBUG=WARN for details)",
        5 => "invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => "remote process exited or there was a network error",
        7 => "NCCL operation in progress",
        8 => "timeout",
        _ => "unknown result code",
    }
}

/// The WARN line of the probe's AllToAllv on a communicator rcclx does not know (`tests/c/probe.c`).
pub const PROBE_A2AV_WARNING: (&str, &str) = (
    "WARN",
    "rcclxAllToAllvDynamic: comm 0x7f00 is not a communicator rcclx knows: ncclInvalidUsage (the counts are in \
     device memory, so the stock library cannot stand in)",
);

/// The start of the WARN line of the probe's call of RCCL's `ncclAllToAllv`, which no stock NCCL has
/// (the line goes on with the stock library's path).
pub const PROBE_MISSING_WARNING: &str = "ncclAllToAllv: not provided by the stock library ";

/// The WARN line of the probe's AllToAllv with an unknown `rcclxAllToAllvOptions::wire`.
pub const PROBE_A2AV_WIRE_WARNING: (&str, &str) = (
    "WARN",
    "rcclxAllToAllvDynamic: rcclxAllToAllvOptions::wire 7 is not RCCLX_WIRE_PLAIN, RCCLX_WIRE_FP8 or \
     RCCLX_WIRE_INT8: ncclInvalidArgument",
);

/// (LEVEL, message) of one of rcclx's log lines, `None` for any other line. The version line
/// is `VERSION` when bare (`NCCL_DEBUG=VERSION` or `WARN`), and its message keeps its
/// `rcclx version` start.
pub fn rcclx_line(l: &str) -> Option<(&str, &str)> {
    let Some((_, rest)) = l.split_once(" NCCL ") else {
        let at = l.find("rcclx version ")?;
        return Some(("VERSION", &l[at..]));
    };
    let (level, msg) = rest.split_once(' ')?;
    if msg.starts_with("rcclx version ") {
        return Some((level, msg));
    }
    Some((level, msg.strip_prefix("rcclx: ")?))
}
