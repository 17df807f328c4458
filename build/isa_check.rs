//! The machine-code check: what the kernels' correctness and speed rest on, proven on the code
//! objects of every build (docs/memory-model.md), because no NVIDIA run can show it for AMD and
//! the compilers have broken it before. Rules:
//!
//! | rule | targets | fails when |
//! |---|---|---|
//! | `release-without-wait` | gfx942, gfx950 | a `buffer_wbl2` (the L2 writeback of a release) reaches a store, an atomic, `s_barrier` or a branch before an `s_waitcnt vmcnt(0)` |
//! | `scratch` | gfx942, gfx950 | a kernel has a private segment (scratch) or a dynamic stack |
//! | `spill` | sm_90 | a kernel has a stack frame or local memory |
//!
//! What is read: gfx942, the code object itself (`llvm-objdump -d`, `llvm-readelf --notes`, LLVM
//! 17 or later); gfx950, which LLVM 19 cannot disassemble, the assembly the compiler assembled into the
//! code object (`-save-temps=obj`, `toolchain.rs`; gfx942 falls back to it too); sm_90,
//! `cuobjdump -res-usage` of the fatbin. Outside CI an AMD object it cannot read is left out
//! (`enforce`) unless `RCCLX_ISA_CHECK=off`. The NVIDIA release needs no rule: ptxas emits it as
//! `MEMBAR.*.SYS` (which itself waits) followed by the store, with nothing a compiler can drop.
//! Used by `build/main.rs`, `gpu-tests/build.rs` and `tests/isa_check.rs`. Uses only `std`.
#![allow(dead_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::toolchain::{Outcome, Target};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    ReleaseWithoutWait,
    Scratch,
    Spill,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::ReleaseWithoutWait => "release-without-wait",
            Rule::Scratch => "scratch",
            Rule::Spill => "spill",
        }
    }
}

/// One broken rule in one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kernel: String,
    pub rule: Rule,
    pub detail: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.rule.name(), self.kernel, self.detail)
    }
}

/// What was checked for one target's code object.
pub struct Checked {
    pub target: Target,
    /// How the machine code was read (for the report).
    pub source: String,
    pub kernels: usize,
    pub findings: Vec<Finding>,
}

/// The functions of a disassembly (`llvm-objdump -d`) or of a clang assembly file, each with
/// its instructions (mnemonic and operands, comments dropped), in address order.
pub fn functions(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_text = true;
    // An assembly file ends with its metadata (YAML), which is no code.
    let code = text.split(".amdgpu_metadata").next().unwrap_or(text);
    for raw in code.lines() {
        // objdump: `0000000000001600 <name>:`
        if let Some(rest) = raw.split_once(" <")
            && rest.0.chars().all(|c| c.is_ascii_hexdigit())
            && !rest.0.is_empty()
            && let Some(name) = rest.1.strip_suffix(">:")
        {
            out.push((name.to_owned(), Vec::new()));
            continue;
        }
        let line = raw.split("//").next().unwrap_or("");
        let line = line.split(';').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        // Assembly: sections other than code hold data and metadata.
        if line.starts_with(".section") || line.starts_with(".text") || line.starts_with(".rodata") {
            in_text = line.starts_with(".text") || line.contains(".text");
            continue;
        }
        if let Some(label) = line.strip_suffix(':') {
            // A kernel's label in assembly (local labels start with `.`).
            if !label.starts_with('.') && !label.contains(' ') && in_text {
                out.push((label.to_owned(), Vec::new()));
            }
            continue;
        }
        if line.starts_with('.') {
            continue;
        }
        if let Some((_, insts)) = out.last_mut()
            && in_text
        {
            insts.push(line.to_owned());
        }
    }
    out.retain(|(_, insts)| !insts.is_empty());
    out
}

fn mnemonic(inst: &str) -> &str {
    inst.split_whitespace().next().unwrap_or("")
}

/// Rule `release-without-wait` over the functions of one AMD code object.
pub fn release_without_wait(funcs: &[(String, Vec<String>)]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, insts) in funcs {
        let mut pending: Option<usize> = None;
        for (i, inst) in insts.iter().enumerate() {
            let m = mnemonic(inst);
            if m == "buffer_wbl2" {
                pending = Some(i);
            } else if m == "s_waitcnt" && inst.contains("vmcnt(0)") {
                pending = None;
            } else if let Some(at) = pending {
                let publishes = (m.contains("_store") || m.contains("_atomic")) && !m.starts_with("ds_");
                let leaves = m == "s_barrier"
                    || m.starts_with("s_branch")
                    || m.starts_with("s_cbranch")
                    || m.starts_with("s_setpc");
                if publishes || leaves {
                    out.push(Finding {
                        kernel: name.clone(),
                        rule: Rule::ReleaseWithoutWait,
                        detail: format!(
                            "`{}` (instruction {at}) reaches `{inst}` with no `s_waitcnt vmcnt(0)`",
                            insts[at]
                        ),
                    });
                    pending = None;
                }
            }
        }
    }
    out
}

/// The kernels of AMDGPU metadata (the YAML of `llvm-readelf --notes`, or an assembly file's
/// `.amdgpu_metadata` block) with their kernel-level keys.
pub fn amd_kernels(metadata: &str) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = Vec::new();
    for line in metadata.lines() {
        let (start, body) = if let Some(b) = line.strip_prefix("  - .") {
            (true, b)
        } else if let Some(b) = line.strip_prefix("    .") {
            (false, b)
        } else {
            continue;
        };
        if start {
            out.push(Vec::new());
        }
        if let (Some(kernel), Some((k, v))) = (out.last_mut(), body.split_once(':')) {
            kernel.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    out.retain(|k| k.iter().any(|(key, _)| key == "name"));
    out
}

/// Rule `scratch` over AMDGPU metadata.
pub fn amd_scratch(metadata: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for kernel in amd_kernels(metadata) {
        let get = |key: &str| kernel.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or("");
        let private: u64 = get("private_segment_fixed_size").parse().unwrap_or(0);
        let dynamic = get("uses_dynamic_stack") == "true";
        if private > 0 || dynamic {
            out.push(Finding {
                kernel: get("name").to_owned(),
                rule: Rule::Scratch,
                detail: format!(
                    "{private} B of scratch per lane{} ({} VGPRs spilled)",
                    if dynamic { ", dynamic stack" } else { "" },
                    get("vgpr_spill_count")
                ),
            });
        }
    }
    out
}

/// Kernel count in AMDGPU metadata.
pub fn amd_kernel_count(metadata: &str) -> usize {
    amd_kernels(metadata).len()
}

/// The kernels of `cuobjdump -res-usage` with their `STACK` and `LOCAL` bytes.
pub fn sm90_usage(res_usage: &str) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    for line in res_usage.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("Function ") {
            name = Some(n.trim_end_matches(':').to_owned());
        } else if line.starts_with("REG:")
            && let Some(n) = name.take()
        {
            let field = |key: &str| -> u64 {
                line.split_whitespace().find_map(|f| f.strip_prefix(key)).and_then(|v| v.parse().ok()).unwrap_or(0)
            };
            out.push((n, field("STACK:"), field("LOCAL:")));
        }
    }
    out
}

/// Rule `spill` over `cuobjdump -res-usage`.
pub fn sm90_spills(res_usage: &str) -> Vec<Finding> {
    sm90_usage(res_usage)
        .into_iter()
        .filter(|(_, stack, local)| *stack > 0 || *local > 0)
        .map(|(kernel, stack, local)| Finding {
            kernel,
            rule: Rule::Spill,
            detail: format!("{stack} B stack frame, {local} B local memory"),
        })
        .collect()
}

/// The metadata block of an AMD assembly file.
fn assembly_metadata(asm: &str) -> &str {
    let start = asm.find(".amdgpu_metadata").unwrap_or(asm.len());
    let end = asm[start..].find(".end_amdgpu_metadata").map(|e| start + e).unwrap_or(asm.len());
    &asm[start..end]
}

fn run(tool: &Path, args: &[&str], file: &Path) -> Result<String, String> {
    let out = Command::new(tool)
        .args(args)
        .arg(file)
        .output()
        .map_err(|e| format!("{} could not run: {e}", tool.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {} {} failed: {}",
            tool.display(),
            args.join(" "),
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An LLVM tool (`llvm-objdump`, `llvm-readelf`) that knows gfx942: next to the clang that
/// compiled it, versioned on PATH, then unversioned.
pub fn llvm_tool(name: &str, compiler: Option<&Path>) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) =
        compiler.and_then(|c| std::fs::canonicalize(c).ok()).and_then(|c| c.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for v in (17..=25).rev() {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(format!("{name}-{v}"))));
    }
    candidates.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    candidates.push(PathBuf::from(format!("/opt/rocm/llvm/bin/{name}")));
    candidates.into_iter().find(|p| p.is_file())
}

/// `cuobjdump`: `RCCLX_CUOBJDUMP`, `.tools/` (ci/install-toolchains.sh), next to nvcc, PATH.
pub fn cuobjdump(repo: &Path, nvcc: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RCCLX_CUOBJDUMP").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let mut candidates = vec![repo.join(".tools/cuobjdump/nvidia/cu13/bin/cuobjdump")];
    if let Some(dir) = nvcc.and_then(Path::parent) {
        candidates.push(dir.join("cuobjdump"));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    candidates.extend(std::env::split_paths(&path).map(|d| d.join("cuobjdump")));
    candidates.push(PathBuf::from("/usr/local/cuda/bin/cuobjdump"));
    candidates.into_iter().find(|p| p.is_file())
}

/// Checks one built code object. `compiler` is the tool that built it (to find its LLVM tools),
/// `src` the translation unit (to find the assembly). Err: the code could not be read.
pub fn check(
    target: Target,
    object: &Path,
    src: &Path,
    compiler: Option<&Path>,
    repo: &Path,
) -> Result<Checked, String> {
    match target {
        Target::Sm90 => {
            let tool = cuobjdump(repo, compiler)
                .ok_or("no cuobjdump (ci/install-toolchains.sh installs it; or set RCCLX_CUOBJDUMP)")?;
            let usage = run(&tool, &["-res-usage"], object)?;
            let kernels = sm90_usage(&usage).len();
            if kernels == 0 {
                return Err(format!("{} -res-usage {} listed no kernel", tool.display(), object.display()));
            }
            Ok(Checked {
                target,
                source: format!("{} -res-usage", tool.display()),
                kernels,
                findings: sm90_spills(&usage),
            })
        }
        Target::Gfx942 | Target::Gfx950 => {
            let objdump = llvm_tool("llvm-objdump", compiler);
            let readelf = llvm_tool("llvm-readelf", compiler);
            let (source, asm, metadata) = match (target, objdump, readelf) {
                (Target::Gfx942, Some(objdump), Some(readelf)) => {
                    let asm = run(&objdump, &["-d", "--mcpu=gfx942"], object)?;
                    let notes = run(&readelf, &["--notes"], object)?;
                    (format!("{} -d, {} --notes", objdump.display(), readelf.display()), asm, notes)
                }
                _ => {
                    let path = crate::toolchain::amd_assembly(src, object, target);
                    let asm = std::fs::read_to_string(&path)
                        .map_err(|e| format!("{}: {e} (the assembly of -save-temps=obj)", path.display()))?;
                    let metadata = assembly_metadata(&asm).to_owned();
                    (format!("{} (assembled into the code object)", path.display()), asm, metadata)
                }
            };
            let funcs = functions(&asm);
            let kernels = amd_kernel_count(&metadata);
            if funcs.is_empty() || kernels == 0 {
                return Err(format!("{source}: no kernel found"));
            }
            // A listing cut short, or an assembly file of another build, lists other functions
            // than the object's metadata names: what the rules saw would not be the object.
            if funcs.len() != kernels {
                return Err(format!(
                    "{source}: {} functions listed, {kernels} kernels in the code object's metadata",
                    funcs.len()
                ));
            }
            let mut findings = release_without_wait(&funcs);
            findings.extend(amd_scratch(&metadata));
            Ok(Checked { target, source, kernels, findings })
        }
    }
}

/// The variable that, set to `off`, lets an AMD code object the check cannot read ship
/// unchecked (with a warning) instead of being left out.
pub const OFF_VAR: &str = "RCCLX_ISA_CHECK";

/// Whether [`OFF_VAR`] is `off`.
pub fn turned_off() -> bool {
    std::env::var(OFF_VAR).is_ok_and(|v| v.trim() == "off")
}

/// Checks every built code object of a build script and applies the policy: with `require`
/// (CI), a finding or a code object that could not be read panics; otherwise each is a cargo
/// warning, and a target with a release that lacks its wait is left out (its GPUs forward:
/// wrong results are worse than none), as is an AMD target whose code object could not be read
/// (its memory model is proven by this check alone) unless `unchecked_ok` ([`turned_off`]).
/// Returns the targets to leave out and the report for `isa-check.txt`.
pub fn enforce(
    what: &str,
    outcomes: &[(Target, Outcome)],
    src: &Path,
    repo: &Path,
    require: bool,
    unchecked_ok: bool,
) -> (Vec<Target>, String) {
    let mut report = String::new();
    let mut rejected = Vec::new();
    let mut failures = Vec::new();
    for (target, outcome) in outcomes {
        let Outcome::Built { tool, path, .. } = outcome else {
            continue;
        };
        match check(*target, path, src, Some(tool.path()), repo) {
            Ok(c) => {
                report.push_str(&format!(
                    "# {}: {} kernels, {} findings ({})\n",
                    target.name(),
                    c.kernels,
                    c.findings.len(),
                    c.source
                ));
                for f in &c.findings {
                    report.push_str(&format!("{} {f}\n", target.name()));
                    failures.push(format!("{} {f}", target.name()));
                    if !require {
                        println!("cargo:warning={what}: machine-code check: {} {f}", target.name());
                    }
                }
                if c.findings.iter().any(|f| f.rule == Rule::ReleaseWithoutWait) {
                    rejected.push(*target);
                    if !require {
                        println!(
                            "cargo:warning={what}: {} left out: a release without its wait gives wrong results",
                            target.name()
                        );
                    }
                }
            }
            Err(e) => {
                report.push_str(&format!("# {}: NOT CHECKED: {e}\n", target.name()));
                failures.push(format!("{} not checked: {e}", target.name()));
                let amd = matches!(target, Target::Gfx942 | Target::Gfx950);
                if !require && amd && !unchecked_ok {
                    rejected.push(*target);
                    println!(
                        "cargo:warning={what}: {} left out: its machine code could not be checked ({e}); \
                         {OFF_VAR}=off ships it unchecked",
                        target.name()
                    );
                } else if !require {
                    println!("cargo:warning={what}: machine code of {} not checked: {e}", target.name());
                }
            }
        }
    }
    if require && !failures.is_empty() {
        panic!(
            "{what}: the machine-code check failed (RCCLX_REQUIRE_KERNELS=1; rules: build/isa_check.rs, \
             docs/memory-model.md):\n{}",
            failures.join("\n")
        );
    }
    (rejected, report)
}
