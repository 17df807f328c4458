//! Build script: compiles the GPU kernels of `hip_kernels/` ahead of time and embeds them.
//!
//! One code object per target, from the single translation unit `hip_kernels/rcclx_kernels.cu`:
//!
//! | target | compiler | output (in `$OUT_DIR`) |
//! |---|---|---|
//! | `sm_90`  | nvcc 13.0: sm_90 cubin + compute_90 PTX (JIT on newer GPUs) | `rcclx.sm_90.fatbin` |
//! | `gfx942` | clang >= 19 `-x hip` (Debian clang-19), else zig's clang   | `rcclx.gfx942.hsaco` |
//! | `gfx950` | zig 0.17 (`zig clang`, clang 22), else a clang that knows gfx950 | `rcclx.gfx950.hsaco` |
//!
//! `$OUT_DIR/kernels.rs` lists the built ones (`CODE_OBJECTS`); `src/kernels.rs` includes it.
//! A target without a compiler is skipped with one `cargo:warning` (the library then only
//! forwards on that GPU). Per-kernel register usage goes to `$OUT_DIR/kernel-resources.txt`.
//!
//! Environment:
//! * `RCCLX_NVCC`, `RCCLX_CLANG` (gfx942), `RCCLX_ZIG` (gfx950): compiler paths. When set, only
//!   that compiler is used for its target (a nonexistent path disables the target).
//!   Otherwise: `.tools/` from `ci/install-toolchains.sh`, then `PATH`, then the usual places.
//! * `RCCLX_REQUIRE_KERNELS=1` (CI): a missing compiler or a failed compile is an error.
//! * `RCCLX_KERNEL_REPORT=1`: print per-kernel resource usage as warnings (also on with REQUIRE).
//! * `RCCLX_NO_KERNELS=1`: build no kernels at all (forward-only library, fastest build).
//!
//! Uses only `std`. Outputs are deterministic: nvcc output is byte-stable and clang gets
//! `-fuse-cuid=none`. See shared/reference/toolchain.md for every flag.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "hip_kernels/rcclx_kernels.cu";
const ENV_VARS: [&str; 7] = [
    "RCCLX_NVCC",
    "RCCLX_CLANG",
    "RCCLX_ZIG",
    "RCCLX_REQUIRE_KERNELS",
    "RCCLX_KERNEL_REPORT",
    "RCCLX_NO_KERNELS",
    "PATH",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Sm90,
    Gfx942,
    Gfx950,
}

impl Target {
    const ALL: [Target; 3] = [Target::Sm90, Target::Gfx942, Target::Gfx950];

    fn name(self) -> &'static str {
        match self {
            Target::Sm90 => "sm_90",
            Target::Gfx942 => "gfx942",
            Target::Gfx950 => "gfx950",
        }
    }

    fn file_name(self) -> &'static str {
        match self {
            Target::Sm90 => "rcclx.sm_90.fatbin",
            Target::Gfx942 => "rcclx.gfx942.hsaco",
            Target::Gfx950 => "rcclx.gfx950.hsaco",
        }
    }

    /// What the user should install, for messages.
    fn wants(self) -> &'static str {
        match self {
            Target::Sm90 => "nvcc",
            Target::Gfx942 => "clang >= 19",
            Target::Gfx950 => "zig 0.17 or a clang that knows gfx950",
        }
    }
}

#[derive(Clone, Debug)]
enum Tool {
    Nvcc(PathBuf),
    /// A clang driver with HIP support (Debian clang-19, ROCm's clang, ...).
    Clang(PathBuf),
    /// The zig binary; run as `zig clang` (zig bundles a clang driver and lld).
    Zig(PathBuf),
}

impl Tool {
    fn path(&self) -> &Path {
        match self {
            Tool::Nvcc(p) | Tool::Clang(p) | Tool::Zig(p) => p,
        }
    }

    fn describe(&self) -> String {
        match self {
            Tool::Nvcc(p) | Tool::Clang(p) => p.display().to_string(),
            Tool::Zig(p) => format!("{} clang", p.display()),
        }
    }
}

enum Outcome {
    Built { tool: Tool, log: String },
    Missing { note: String },
    Failed { command: String, log: String },
}

fn main() {
    println!("cargo:rerun-if-changed=hip_kernels");
    println!("cargo:rerun-if-changed=build.rs");
    for var in ENV_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let repo = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let require = flag("RCCLX_REQUIRE_KERNELS");
    let report = require || flag("RCCLX_KERNEL_REPORT");

    if flag("RCCLX_NO_KERNELS") {
        if require {
            panic!("RCCLX_NO_KERNELS=1 and RCCLX_REQUIRE_KERNELS=1 contradict each other");
        }
        println!(
            "cargo:warning=rcclx: RCCLX_NO_KERNELS=1: no GPU kernels built; \
             the library will only forward"
        );
        write_outputs(&out_dir, &[], "kernels disabled by RCCLX_NO_KERNELS=1\n");
        return;
    }

    let src = repo.join(SOURCE);
    let lld_wrapper_dir = out_dir.join("zigbin");
    let candidates: Vec<(Target, Vec<Tool>, Vec<String>)> = Target::ALL
        .iter()
        .map(|&t| {
            let (tools, notes) = candidates(t, &repo);
            (t, tools, notes)
        })
        .collect();
    if candidates.iter().any(|(_, tools, _)| tools.iter().any(|t| matches!(t, Tool::Zig(_)))) {
        write_lld_wrapper(&lld_wrapper_dir);
    }

    // The three compiles are independent: run them side by side.
    let outcomes: Vec<(Target, Outcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|(target, tools, notes)| {
                let (src, out_dir, wrapper) = (&src, &out_dir, &lld_wrapper_dir);
                s.spawn(move || (*target, build_target(*target, tools, notes, src, out_dir, wrapper)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("compile thread panicked")).collect()
    });

    let mut built = Vec::new();
    let mut missing = Vec::new();
    let mut resources = String::new();
    let mut raw = String::new();
    for (target, outcome) in &outcomes {
        match outcome {
            Outcome::Built { tool, log } => {
                let path = out_dir.join(target.file_name());
                // A compiler upgrade re-runs this script (only existing paths: a missing one
                // would make cargo re-run it on every build).
                println!("cargo:rerun-if-changed={}", tool.path().display());
                let tool = tool.describe();
                let lines = match target {
                    Target::Sm90 => summarize_ptxas(target.name(), log),
                    _ => summarize_remarks(target.name(), log),
                };
                let _ = writeln!(resources, "# {} ({})", target.name(), tool);
                for line in &lines {
                    let _ = writeln!(resources, "{line}");
                    if report {
                        println!("cargo:warning=rcclx kernels: {line}");
                    }
                }
                for line in log.lines().filter(|l| is_compiler_warning(l)) {
                    println!("cargo:warning=rcclx kernels {}: {}", target.name(), line.trim());
                }
                let _ = writeln!(raw, "## {} ({})\n{}", target.name(), tool, log.trim_end());
                built.push((*target, path));
            }
            Outcome::Missing { note } => missing.push((*target, note.clone())),
            Outcome::Failed { command, log } => {
                if require {
                    panic!(
                        "rcclx: compiling kernels for {} failed (RCCLX_REQUIRE_KERNELS=1)\n\
                         command: {command}\n{log}",
                        target.name()
                    );
                }
                println!(
                    "cargo:warning=rcclx: compiling kernels for {} failed; the library will only \
                     forward on that GPU. Command: {command}",
                    target.name()
                );
                for line in log.lines().filter(|l| l.contains("error")).take(20) {
                    println!("cargo:warning=rcclx kernels {}: {}", target.name(), line.trim());
                }
                let _ = writeln!(resources, "# {} FAILED", target.name());
            }
        }
    }

    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|(t, note)| {
                if note.is_empty() {
                    format!("{} ({})", t.name(), t.wants())
                } else {
                    format!("{} ({}; {note})", t.name(), t.wants())
                }
            })
            .collect();
        if require {
            panic!(
                "rcclx: RCCLX_REQUIRE_KERNELS=1 but no kernel compiler for: {}. \
                 Run ci/install-toolchains.sh or set RCCLX_NVCC / RCCLX_CLANG / RCCLX_ZIG.",
                list.join(", ")
            );
        }
        println!(
            "cargo:warning=rcclx: no kernel compiler for {}: the library will only forward on \
             those GPUs (ci/install-toolchains.sh installs them; or set RCCLX_NVCC / \
             RCCLX_CLANG / RCCLX_ZIG)",
            list.join(", ")
        );
        for (t, _) in &missing {
            let _ = writeln!(resources, "# {} not built: no compiler", t.name());
        }
    }

    if !raw.is_empty() {
        let _ = write!(resources, "\n# raw compiler diagnostics\n{raw}\n");
    }
    write_outputs(&out_dir, &built, &resources);
}

/// `1`, `true`, `yes`, `on` (any case) count as set.
fn flag(name: &str) -> bool {
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

fn build_target(
    target: Target,
    tools: &[Tool],
    notes: &[String],
    src: &Path,
    out_dir: &Path,
    lld_wrapper_dir: &Path,
) -> Outcome {
    let out = out_dir.join(target.file_name());
    let _ = fs::remove_file(&out); // never embed a stale object from an earlier build
    let mut notes = notes.to_vec();
    for tool in tools {
        let mut cmd = command(target, tool, src, &out, lld_wrapper_dir);
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
            return Outcome::Built { tool: tool.clone(), log };
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

fn command(target: Target, tool: &Tool, src: &Path, out: &Path, lld_wrapper_dir: &Path) -> Command {
    match tool {
        Tool::Nvcc(nvcc) => {
            let mut c = Command::new(nvcc);
            // -fmad=false: no fused multiply-add, so FP8 dequantize-and-sum rounds exactly as the
            // CPU reference codec (src/lowp/codec.rs) does.
            c.args(["-fatbin", "-O3", "-std=c++17", "-fmad=false", "-Xptxas", "-v"])
                .args(["-gencode", "arch=compute_90,code=sm_90"])
                .args(["-gencode", "arch=compute_90,code=compute_90"])
                .arg("-o")
                .arg(out)
                .arg(src);
            c
        }
        Tool::Clang(clang) => {
            let mut c = Command::new(clang);
            hip_args(&mut c, target, src, out);
            c
        }
        Tool::Zig(zig) => {
            let mut c = Command::new(zig);
            // zig ships clang's builtin headers (stddef.h ...) in <zig dir>/lib/include.
            let resource_dir = zig.parent().unwrap_or(Path::new(".")).join("lib");
            c.arg("clang").arg("-resource-dir").arg(resource_dir);
            hip_args(&mut c, target, src, out);
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

fn hip_args(c: &mut Command, target: Target, src: &Path, out: &Path) {
    c.args(["-x", "hip"])
        .arg(format!("--offload-arch={}", target.name()))
        .args(["--cuda-device-only", "--no-gpu-bundle-output", "-nogpulib", "-nogpuinc"])
        // code object v5: rcclx_port.h reads gridDim from the COv5 hidden arguments.
        .args([
            "-O3",
            "-std=c++17",
            "-mcode-object-version=5",
            "-fuse-cuid=none",
            // No fused multiply-add (HIP contracts by default): FP8 math rounds as the CPU codec.
            "-ffp-contract=off",
        ])
        .args(["-Rpass-analysis=kernel-resource-usage", "-fno-caret-diagnostics"])
        .arg("-fno-color-diagnostics")
        .arg("-c")
        .arg("-o")
        .arg(out)
        .arg(src);
}

fn is_compiler_warning(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("warning") && !l.contains("remark:") && !l.starts_with("ptxas info")
}

/// One line per kernel from nvcc `-Xptxas -v`:
/// `sm_90 NAME: Used 16 registers, used 1 barriers, 4 bytes smem; 0 bytes stack frame, ...`.
fn summarize_ptxas(target: &str, log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut frame = String::new();
    for line in log.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("ptxas info") {
            let rest = rest.trim_start().trim_start_matches(':').trim();
            if let Some(r) = rest.strip_prefix("Compiling entry function '") {
                current = r.split('\'').next().map(str::to_owned);
                frame.clear();
            } else if rest.starts_with("Used ")
                && let Some(name) = current.take()
            {
                out.push(format!("{target} {name}: {rest}; {frame}"));
            }
        } else if line.contains("bytes stack frame") {
            frame = line.to_owned();
        }
    }
    out
}

/// One line per kernel from clang `-Rpass-analysis=kernel-resource-usage`:
/// `gfx942 NAME: SGPRs 35, VGPRs 8, AGPRs 0, ScratchSize [bytes/lane] 0, ...`.
fn summarize_remarks(target: &str, log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    let flush = |cur: &mut Option<(String, Vec<String>)>, out: &mut Vec<String>| {
        if let Some((name, fields)) = cur.take() {
            out.push(format!("{target} {name}: {}", fields.join(", ")));
        }
    };
    for line in log.lines().filter(|l| l.contains("kernel-resource-usage")) {
        let Some((_, body)) = line.split_once("remark:") else {
            continue;
        };
        let body = body.replace("[-Rpass-analysis=kernel-resource-usage]", "");
        let body = body.trim();
        if let Some(name) = body.strip_prefix("Function Name:") {
            flush(&mut current, &mut out);
            current = Some((name.trim().to_owned(), Vec::new()));
        } else if let (Some((_, fields)), Some((k, v))) = (current.as_mut(), body.split_once(": ")) {
            fields.push(format!("{k} {v}"));
        }
    }
    flush(&mut current, &mut out);
    out
}

/// `$OUT_DIR/kernels.rs` (included by src/kernels.rs) and `$OUT_DIR/kernel-resources.txt`.
fn write_outputs(out_dir: &Path, built: &[(Target, PathBuf)], resources: &str) {
    let mut rs = String::new();
    rs.push_str(
        "// @generated by build.rs from hip_kernels/: do not edit.\n\
         \n\
         /// One ahead-of-time compiled code object, ready for `cuModuleLoadData` /\n\
         /// `hipModuleLoadData`.\n\
         #[derive(Debug, Clone, Copy)]\n\
         pub struct CodeObject {\n\
         \x20   /// `\"sm_90\"` (NVIDIA fatbin: sm_90 cubin + compute_90 PTX) or `\"gfx942\"` /\n\
         \x20   /// `\"gfx950\"` (AMD code object v5, plain ELF, not a bundle).\n\
         \x20   pub target: &'static str,\n\
         \x20   /// The image; its start is 64-byte aligned.\n\
         \x20   pub image: &'static [u8],\n\
         }\n\
         \n\
         /// 64-byte alignment for embedded images (loaders read headers in place).\n\
         #[repr(C, align(64))]\n\
         #[allow(dead_code)] // unused when no kernel was built\n\
         struct AlignedImage<T: ?Sized>(T);\n\n",
    );
    for (i, (target, path)) in built.iter().enumerate() {
        let len = fs::metadata(path).expect("built code object").len();
        let lit = format!("{:?}", path.to_str().expect("OUT_DIR is not UTF-8"));
        let _ = writeln!(
            rs,
            "static IMAGE_{i}: AlignedImage<[u8; {len}]> = AlignedImage(*include_bytes!({lit})); // {}",
            target.name()
        );
    }
    rs.push_str(
        "\n/// The code objects built into this library (only targets whose compiler was found).\n\
         pub static CODE_OBJECTS: &[CodeObject] = &[\n",
    );
    for (i, (target, _)) in built.iter().enumerate() {
        let _ = writeln!(rs, "    CodeObject {{ target: {:?}, image: &IMAGE_{i}.0 }},", target.name());
    }
    rs.push_str("];\n");
    write_if_changed(&out_dir.join("kernels.rs"), &rs);
    write_if_changed(&out_dir.join("kernel-resources.txt"), resources);
}

fn write_if_changed(path: &Path, contents: &str) {
    if fs::read_to_string(path).ok().as_deref() != Some(contents) {
        fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}
