//! Kernel compilers: finding nvcc / clang / zig for each GPU target and compiling one
//! translation unit into one code object per target. Used by `build/main.rs` (the shipped
//! kernels) and `gpu-tests/build.rs` (the self-test kernels). Uses only `std`.
//!
//! | target | compiler | output |
//! |---|---|---|
//! | `sm_90`  | nvcc 13.0: sm_90 cubin + compute_90 PTX (JIT on newer GPUs) | `<stem>.sm_90.fatbin` |
//! | `gfx942` | clang >= 19 `-x hip` (Debian clang-19), else zig's clang   | `<stem>.gfx942.hsaco` |
//! | `gfx950` | zig 0.17 (`zig clang`, clang 22), else a clang that knows gfx950 | `<stem>.gfx950.hsaco` |
//!
//! Environment: `RCCLX_TARGETS` (comma list) limits the targets; `RCCLX_NVCC`, `RCCLX_CLANG`
//! (gfx942), `RCCLX_ZIG` (gfx950) name a compiler;
//! when set, only that compiler is used for its target (a nonexistent path disables the target).
//! Otherwise: `.tools/` from `ci/install-toolchains.sh`, then `PATH`, then the usual places.
//! Why each flag: nvcc 13.0 writes PTX 9.0, which every CUDA-13 driver can JIT; `-fmad=false` /
//! `-ffp-contract=off` keep the FP8 arithmetic rounding like the CPU reference model and the
//! reductions like the stock library's separate multiply and add; AMD code object v5 because
//! `rcclx_port.h` reads gridDim from its hidden arguments; `-fuse-cuid=none` for reproducible
//! output.
#![allow(dead_code)]

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables that change what the compilers produce (for `cargo:rerun-if-env-changed`).
pub const ENV_VARS: [&str; 5] = ["RCCLX_NVCC", "RCCLX_CLANG", "RCCLX_ZIG", "RCCLX_TARGETS", "PATH"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    Sm90,
    Gfx942,
    Gfx950,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Sm90, Target::Gfx942, Target::Gfx950];

    /// The targets to build: `RCCLX_TARGETS` (a comma list, e.g. `sm_90` for a machine that only
    /// runs NVIDIA GPUs: smaller binaries), else all of them.
    pub fn selected() -> Vec<Target> {
        match env::var("RCCLX_TARGETS").ok().filter(|v| !v.trim().is_empty()) {
            Some(list) => Self::ALL.into_iter().filter(|t| list.split(',').any(|n| n.trim() == t.name())).collect(),
            None => Self::ALL.to_vec(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Target::Sm90 => "sm_90",
            Target::Gfx942 => "gfx942",
            Target::Gfx950 => "gfx950",
        }
    }

    pub fn file_name(self, stem: &str) -> String {
        match self {
            Target::Sm90 => format!("{stem}.sm_90.fatbin"),
            Target::Gfx942 => format!("{stem}.gfx942.hsaco"),
            Target::Gfx950 => format!("{stem}.gfx950.hsaco"),
        }
    }

    /// What the user should install, for messages.
    pub fn wants(self) -> &'static str {
        match self {
            Target::Sm90 => "nvcc",
            Target::Gfx942 => "clang >= 19",
            Target::Gfx950 => "zig 0.17 or a clang that knows gfx950",
        }
    }
}

#[derive(Clone, Debug)]
pub enum Tool {
    Nvcc(PathBuf),
    /// A clang driver with HIP support (Debian clang-19, ROCm's clang, ...).
    Clang(PathBuf),
    /// The zig binary; run as `zig clang` (zig bundles a clang driver and lld).
    Zig(PathBuf),
}

impl Tool {
    pub fn path(&self) -> &Path {
        match self {
            Tool::Nvcc(p) | Tool::Clang(p) | Tool::Zig(p) => p,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Tool::Nvcc(p) | Tool::Clang(p) => p.display().to_string(),
            Tool::Zig(p) => format!("{} clang", p.display()),
        }
    }
}

pub enum Outcome {
    Built { tool: Tool, log: String, path: PathBuf },
    Missing { note: String },
    Failed { command: String, log: String },
}

/// The compilers that built something among `outcomes` (a build script watches them).
pub fn tools_used(outcomes: &[(Target, Outcome)]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Built { tool, .. } => Some(tool.path().display().to_string()),
            _ => None,
        })
        .collect()
}

/// One translation unit to compile for every target.
pub struct Unit<'a> {
    /// The `.cu` file.
    pub src: &'a Path,
    /// Extra include directory (`hip_kernels/`).
    pub include: &'a Path,
    /// Output names are `<stem>.<target>.<ext>` in `out_dir`.
    pub stem: &'a str,
    pub out_dir: &'a Path,
    /// The repository root (for `.tools/`).
    pub repo: &'a Path,
}

/// Compiles `unit` for every target side by side (the compiles are independent).
pub fn compile_all(unit: &Unit) -> Vec<(Target, Outcome)> {
    let lld_wrapper_dir = unit.out_dir.join("zigbin");
    let candidates: Vec<(Target, Vec<Tool>, Vec<String>)> = Target::selected()
        .iter()
        .map(|&t| {
            let (tools, notes) = candidates(t, unit.repo);
            (t, tools, notes)
        })
        .collect();
    if candidates.iter().any(|(_, tools, _)| tools.iter().any(|t| matches!(t, Tool::Zig(_)))) {
        write_lld_wrapper(&lld_wrapper_dir);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|(target, tools, notes)| {
                let wrapper = &lld_wrapper_dir;
                s.spawn(move || (*target, build_target(*target, tools, notes, unit, wrapper)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("compile thread panicked")).collect()
    })
}

/// The compilers each target would try, for a build stamp (a newly installed compiler must
/// trigger a rebuild).
pub fn available(repo: &Path) -> String {
    Target::ALL
        .iter()
        .map(|&t| {
            let (tools, _) = candidates(t, repo);
            format!("{}: {}", t.name(), tools.iter().map(Tool::describe).collect::<Vec<_>>().join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `1`, `true`, `yes`, `on` (any case) count as set.
pub fn flag(name: &str) -> bool {
    env::var(name)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// An env var holding a path; empty counts as unset.
fn env_path(name: &str) -> Option<PathBuf> {
    env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}
fn is_executable(p: &Path) -> bool {
    match fs::metadata(p) {
        #[cfg(unix)]
        Ok(m) => {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(m) => m.is_file(),
        Err(_) => false,
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path).map(|dir| dir.join(name)).find(|f| is_executable(f))
}

/// Major version from `clang --version` ("... clang version 19.1.7 ...").
fn clang_major(path: &Path) -> Option<u32> {
    let out = Command::new(path).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = &text[text.find("clang version ")? + "clang version ".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Ordered compiler candidates for a target, and notes for the "missing" message.
/// An explicit env var is the only candidate for its target.
fn candidates(target: Target, repo: &Path) -> (Vec<Tool>, Vec<String>) {
    let tools = repo.join(".tools");
    let mut notes = Vec::new();
    let mut out: Vec<Tool> = Vec::new();
    let explicit = |var: &str, make: fn(PathBuf) -> Tool, notes: &mut Vec<String>| {
        env_path(var).map(|p| {
            if is_executable(&p) {
                vec![make(p)]
            } else {
                notes.push(format!("{var}={} is not an executable", p.display()));
                Vec::new()
            }
        })
    };
    let zigs = |notes: &mut Vec<String>| -> Vec<Tool> {
        if let Some(list) = explicit("RCCLX_ZIG", Tool::Zig, notes) {
            return list;
        }
        [Some(tools.join("zig/ziglang/zig")), which("zig")]
            .into_iter()
            .flatten()
            .filter(|p| is_executable(p))
            .map(Tool::Zig)
            .collect()
    };
    // Clangs found without an env var, with a minimum major version (0: don't check).
    let clangs_on_path = |min_major: u32| -> Vec<Tool> {
        let mut v = Vec::new();
        let versioned = ["clang++-19", "clang++-20", "clang++-21", "clang++-22", "clang++-23"];
        for (i, name) in versioned.iter().enumerate() {
            if 19 + i as u32 >= min_major {
                v.extend(which(name));
            }
        }
        if let Some(p) = which("clang++")
            && clang_major(&p).is_some_and(|m| m >= min_major.max(19))
        {
            v.push(p);
        }
        let rocm = PathBuf::from("/opt/rocm/llvm/bin/clang++");
        if is_executable(&rocm) {
            v.push(rocm);
        }
        v.into_iter().map(Tool::Clang).collect()
    };

    match target {
        Target::Sm90 => match explicit("RCCLX_NVCC", Tool::Nvcc, &mut notes) {
            Some(list) => out = list,
            None => {
                out = [
                    Some(tools.join("cuda/nvidia/cu13/bin/nvcc")),
                    which("nvcc"),
                    Some(PathBuf::from("/usr/local/cuda/bin/nvcc")),
                ]
                .into_iter()
                .flatten()
                .filter(|p| is_executable(p))
                .map(Tool::Nvcc)
                .collect();
            }
        },
        Target::Gfx942 => match explicit("RCCLX_CLANG", Tool::Clang, &mut notes) {
            Some(list) => out = list,
            None => {
                out.extend(clangs_on_path(19));
                out.extend(zigs(&mut notes));
            }
        },
        Target::Gfx950 => {
            if env_path("RCCLX_ZIG").is_some() {
                out = zigs(&mut notes);
            } else {
                // zig first (tested with gfx950); a clang is kept only if it accepts gfx950,
                // which build_target finds out by trying.
                let mut z = zigs(&mut notes).into_iter();
                out.extend(z.next());
                if let Some(p) = env_path("RCCLX_CLANG").filter(|p| is_executable(p)) {
                    out.push(Tool::Clang(p));
                }
                out.extend(z);
                out.extend(clangs_on_path(20));
            }
        }
    }

    // The same binary reached twice (clang++ -> clang++-19 symlink ...): keep the first.
    let mut seen = Vec::new();
    out.retain(|t| {
        let key = (matches!(t, Tool::Zig(_)), fs::canonicalize(t.path()).unwrap_or_else(|_| t.path().to_path_buf()));
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
    (out, notes)
}

/// Compiles `source` (C++ text, read from stdin) for gfx942 with `include` on the include path,
/// syntax only (no code generated), with the first compiler that builds gfx942: a header of
/// `hip_kernels/` checked on its own (`tests/kernel_headers.rs`). `None` when no such compiler
/// exists; `Err` holds the compiler's messages.
pub fn syntax_check(repo: &Path, include: &Path, source: &str) -> Option<Result<(), String>> {
    use std::io::Write as _;
    let tool = candidates(Target::Gfx942, repo).0.into_iter().next()?;
    let mut c = match &tool {
        Tool::Nvcc(_) => return None,
        Tool::Clang(clang) => Command::new(clang),
        Tool::Zig(zig) => {
            let mut c = Command::new(zig);
            c.arg("clang").arg("-resource-dir").arg(zig.parent().unwrap_or(Path::new(".")).join("lib"));
            c
        }
    };
    c.args(["-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "-nogpulib", "-nogpuinc"])
        .args(["-std=c++17", "-fsyntax-only", "-fno-color-diagnostics", "-I"])
        .arg(include)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut run = || -> std::io::Result<std::process::Output> {
        let mut child = c.spawn()?;
        child.stdin.take().expect("piped stdin").write_all(source.as_bytes())?;
        child.wait_with_output()
    };
    Some(match run() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))),
        Err(e) => Err(format!("{} could not run: {e}", tool.describe())),
    })
}

/// clang's AMDGPU link step runs `lld -flavor gnu ...` found on PATH; zig has lld built in
/// as `zig ld.lld`. The zig binary comes from RCCLX_LLD_ZIG, set per compile.
fn write_lld_wrapper(dir: &Path) {
    fs::create_dir_all(dir).expect("create zigbin dir");
    let path = dir.join("lld");
    let script = "#!/bin/sh\n[ \"$1\" = \"-flavor\" ] && shift 2\nexec \"$RCCLX_LLD_ZIG\" ld.lld \"$@\"\n";
    fs::write(&path, script).expect("write lld wrapper");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod lld wrapper");
    }
}

/// The assembly file `-save-temps=obj` leaves beside `object` for an AMD target: clang names it
/// after the source file.
pub fn amd_assembly(src: &Path, object: &Path, target: Target) -> PathBuf {
    let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("input");
    object.with_file_name(format!("{stem}-hip-amdgcn-amd-amdhsa-{}.s", target.name()))
}

fn build_target(target: Target, tools: &[Tool], notes: &[String], unit: &Unit, lld_wrapper_dir: &Path) -> Outcome {
    let out = unit.out_dir.join(target.file_name(unit.stem));
    // Never embed a stale object from an earlier build, nor check its assembly.
    let _ = fs::remove_file(&out);
    if target != Target::Sm90 {
        let _ = fs::remove_file(amd_assembly(unit.src, &out, target));
    }
    let mut notes = notes.to_vec();
    for tool in tools {
        let mut cmd = command(target, tool, unit, &out, lld_wrapper_dir);
        let shown = show(&cmd);
        let result = cmd.output();
        let output = match result {
            Ok(o) => o,
            Err(e) => {
                notes.push(format!("{} could not run: {e}", tool.describe()));
                continue;
            }
        };
        let mut log = String::from_utf8_lossy(&output.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&output.stderr));
        // ptxas prints wall times: drop them so the report is stable.
        let log: String = log.lines().filter(|l| !l.contains("Compile time =")).map(|l| format!("{l}\n")).collect();
        let ok = output.status.success() && fs::metadata(&out).map(|m| m.len() > 0).unwrap_or(false);
        if ok {
            return Outcome::Built { tool: tool.clone(), log, path: out };
        }
        let _ = fs::remove_file(&out);
        if rejects_target(&log) {
            notes.push(format!("{} does not know {}", tool.describe(), target.name()));
            continue;
        }
        return Outcome::Failed { command: shown, log };
    }
    Outcome::Missing { note: notes.join("; ") }
}

/// `program arg ...` without the environment (zig's PATH would drown the message).
fn show(cmd: &Command) -> String {
    let mut s = format!("{:?}", cmd.get_program());
    for arg in cmd.get_args() {
        let _ = write!(s, " {arg:?}");
    }
    s
}

/// The compiler does not support the offload arch at all (e.g. clang-19 and gfx950).
fn rejects_target(log: &str) -> bool {
    ["invalid target ID", "unknown target CPU", "Unsupported CUDA gpu architecture", "invalid offload arch"]
        .iter()
        .any(|m| log.contains(m))
}

fn command(target: Target, tool: &Tool, unit: &Unit, out: &Path, lld_wrapper_dir: &Path) -> Command {
    match tool {
        Tool::Nvcc(nvcc) => {
            let mut c = Command::new(nvcc);
            // -fmad=false: no fused multiply-add (see the module doc).
            c.args(["-fatbin", "-O3", "-std=c++17", "-fmad=false", "-Xptxas", "-v"])
                .args(["-gencode", "arch=compute_90,code=sm_90"])
                .args(["-gencode", "arch=compute_90,code=compute_90"])
                .arg("-I")
                .arg(unit.include)
                .arg("-o")
                .arg(out)
                .arg(unit.src);
            c
        }
        Tool::Clang(clang) => {
            let mut c = Command::new(clang);
            hip_args(&mut c, target, unit, out);
            c
        }
        Tool::Zig(zig) => {
            let mut c = Command::new(zig);
            // zig ships clang's builtin headers (stddef.h ...) in <zig dir>/lib/include.
            let resource_dir = zig.parent().unwrap_or(Path::new(".")).join("lib");
            c.arg("clang").arg("-resource-dir").arg(resource_dir);
            hip_args(&mut c, target, unit, out);
            let mut path = vec![lld_wrapper_dir.to_path_buf()];
            if let Some(p) = env::var_os("PATH") {
                path.extend(env::split_paths(&p));
            }
            c.env("PATH", env::join_paths(path).expect("PATH"));
            c.env("RCCLX_LLD_ZIG", zig);
            c
        }
    }
}

fn hip_args(c: &mut Command, target: Target, unit: &Unit, out: &Path) {
    c.args(["-x", "hip"])
        .arg(format!("--offload-arch={}", target.name()))
        .args(["--cuda-device-only", "--no-gpu-bundle-output", "-nogpulib", "-nogpuinc"])
        // code object v5: rcclx_port.h reads gridDim from the COv5 hidden arguments.
        .args([
            "-O3",
            "-std=c++17",
            "-mcode-object-version=5",
            "-fuse-cuid=none",
            // No fused multiply-add (HIP contracts by default; see the module doc).
            "-ffp-contract=off",
        ])
        .arg("-I")
        .arg(unit.include)
        .args(["-Rpass-analysis=kernel-resource-usage", "-fno-caret-diagnostics"])
        // The assembly the object is assembled from, beside it: isa_check.rs reads it where no
        // disassembler knows the target (gfx950 before LLVM 20).
        .arg("-save-temps=obj")
        .arg("-fno-color-diagnostics")
        .arg("-c")
        .arg("-o")
        .arg(out)
        .arg(unit.src);
}

pub fn is_compiler_warning(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("warning") && !l.contains("remark:") && !l.starts_with("ptxas info")
}
