//! The machine-code check: what the kernels' correctness and speed rest on, proven on the code
//! objects of every build (docs/memory-model.md), because no NVIDIA run can show it for AMD and
//! the compilers have broken it before. Rules:
//!
//! | rule | targets | fails when |
//! |---|---|---|
//! | `release-without-wait` | gfx942, gfx950 | a `buffer_wbl2` (the L2 writeback of a release) reaches a store, an atomic, `s_barrier` or a branch before an `s_waitcnt vmcnt(0)` |
//! | `release-missing` | gfx942, gfx950 | a flag store (32-bit, `sc0 sc1`) is reached from the kernel's start or the previous flag store with no `buffer_wbl2` |
//! | `publish-without-wait` | gfx942, gfx950 | a vector memory instruction reaches the `s_barrier` before a block's release with no `s_waitcnt vmcnt(0)` |
//! | `acquire-missing` | gfx942, gfx950 | a flag wait has an exit with no path to `buffer_inv sc0 sc1` before a vector load or `s_barrier`, or a `buffer_inv` reaches `s_barrier` before `s_waitcnt vmcnt(0)` |
//! | `poll-bits` | gfx942, gfx950 | a wait (the loop around an `s_sleep`) loads without `sc0 sc1`, loads a 32-bit word through the scalar cache, or polls nothing |
//! | `system-shape` | gfx942, gfx950 | a system-scope global or buffer store is not a flag (`dword`), an LL word (`dwordx2`) or an LL128 lane (`buffer_store_dwordx4`) |
//! | `scratch` | gfx942, gfx950 | a kernel has a private segment (scratch) or a dynamic stack |
//! | `spill` | sm_90 | a kernel has a stack frame or local memory |
//!
//! The flow rules read each kernel's branches, loops and waits; what they cannot tell from
//! machine code alone, and how rcclx's primitives make it visible, is in docs/memory-model.md.
//!
//! What is read: the AMD code object itself (`llvm-objdump -d`, `llvm-readelf --notes`: LLVM 17
//! or later for gfx942, 20 or later for gfx950, which ci/install-toolchains.sh installs as
//! Debian's llvm-22); where no such LLVM is found, the assembly the compiler assembled into the
//! code object (`-save-temps=obj`, `toolchain.rs`); sm_90,
//! `cuobjdump -res-usage` of the fatbin. Outside CI an AMD object it cannot read is left out
//! (`enforce`) unless `RCCLX_ISA_CHECK=off`. The NVIDIA release needs no rule: ptxas emits it as
//! `MEMBAR.*.SYS` (which itself waits) followed by the store, with nothing a compiler can drop.
//! Used by `build/main.rs`, `gpu-tests/build.rs` and `tests/isa_check.rs`. Uses only `std`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::toolchain::{Outcome, Target};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    ReleaseWithoutWait,
    PublishWithoutWait,
    ReleaseMissing,
    AcquireMissing,
    PollBits,
    SystemShape,
    Scratch,
    Spill,
}

impl Rule {
    /// Whether the rule is one of the memory model's (a kernel that breaks it may give wrong
    /// results), not one of speed.
    pub fn memory_model(self) -> bool {
        !matches!(self, Rule::Scratch | Rule::Spill)
    }

    pub fn name(self) -> &'static str {
        match self {
            Rule::ReleaseWithoutWait => "release-without-wait",
            Rule::PublishWithoutWait => "publish-without-wait",
            Rule::ReleaseMissing => "release-missing",
            Rule::AcquireMissing => "acquire-missing",
            Rule::PollBits => "poll-bits",
            Rule::SystemShape => "system-shape",
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

/// One function of a disassembly or an assembly file: its instructions (mnemonic and operands,
/// comments dropped) in address order, and where each branch goes.
#[derive(Clone, Debug, Default)]
pub struct Function {
    pub name: String,
    pub insts: Vec<String>,
    /// The instruction a branch (`s_branch`, `s_cbranch_*`) goes to, by index; `None` for other
    /// instructions and for a branch whose target was not found.
    pub target: Vec<Option<usize>>,
}

/// The functions of a disassembly (`llvm-objdump -d`) or of a clang assembly file, each with
/// its instructions (mnemonic and operands, comments dropped), in address order, and its
/// branches' targets (objdump: the `<name+0x..>` of the comment; assembly: the local labels).
pub fn functions(text: &str) -> Vec<Function> {
    // Per function: its start address (objdump), each instruction's address or the labels
    // before it, and each branch's target as written.
    struct Raw {
        f: Function,
        start: u64,
        addr: Vec<Option<u64>>,
        labels: Vec<(String, usize)>,
        dest: Vec<Option<String>>,
    }
    let mut out: Vec<Raw> = Vec::new();
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
            let start = u64::from_str_radix(rest.0, 16).unwrap_or(0);
            let f = Function { name: name.to_owned(), ..Function::default() };
            out.push(Raw { f, start, addr: Vec::new(), labels: Vec::new(), dest: Vec::new() });
            continue;
        }
        let (body, comment) = raw.split_once("//").unwrap_or((raw, ""));
        let line = body.split(';').next().unwrap_or("").trim();
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
                let f = Function { name: label.to_owned(), ..Function::default() };
                out.push(Raw { f, start: 0, addr: Vec::new(), labels: Vec::new(), dest: Vec::new() });
            } else if let Some(r) = out.last_mut() {
                r.labels.push((label.to_owned(), r.f.insts.len()));
            }
            continue;
        }
        if line.starts_with('.') {
            continue;
        }
        if let Some(r) = out.last_mut()
            && in_text
        {
            // objdump's comment: `// 000000001C88: BF870007 <k+0xa8>`.
            let comment = comment.trim();
            let addr = comment.split_once(':').and_then(|(a, _)| u64::from_str_radix(a.trim(), 16).ok());
            let m = mnemonic(line);
            let dest = if m == "s_branch" || m.starts_with("s_cbranch") {
                if let Some(t) = comment.rsplit_once('<').and_then(|(_, t)| t.strip_suffix('>')) {
                    // `<name+0xa8>` (or `<name>` for the start), relative to the function.
                    let off = t.rsplit_once("+0x").and_then(|(_, o)| u64::from_str_radix(o, 16).ok()).unwrap_or(0);
                    Some(format!("@{:x}", r.start + off))
                } else {
                    line.split_whitespace().nth(1).map(str::to_owned)
                }
            } else {
                None
            };
            r.f.insts.push(line.to_owned());
            r.addr.push(addr);
            r.dest.push(dest);
        }
    }
    out.retain(|r| !r.f.insts.is_empty());
    out.into_iter()
        .map(|mut r| {
            let n = r.f.insts.len();
            let by_addr: HashMap<u64, usize> =
                r.addr.iter().enumerate().filter_map(|(i, a)| a.map(|a| (a, i))).collect();
            let by_label: HashMap<&str, usize> =
                r.labels.iter().filter(|(_, i)| *i < n).map(|(l, i)| (l.as_str(), *i)).collect();
            let index = |d: &str| -> Option<usize> {
                match d.strip_prefix('@') {
                    Some(a) => by_addr.get(&u64::from_str_radix(a, 16).ok()?).copied(),
                    None => by_label.get(d).copied(),
                }
            };
            r.f.target = r.dest.iter().map(|d| d.as_deref().and_then(index)).collect();
            r.f
        })
        .collect()
}

/// Rule `release-without-wait` over the functions of one AMD code object.
pub fn release_without_wait(funcs: &[Function]) -> Vec<Finding> {
    let mut out = Vec::new();
    for Function { name, insts, .. } in funcs {
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

fn mnemonic(inst: &str) -> &str {
    inst.split_whitespace().next().unwrap_or("")
}

// ---- control flow ---------------------------------------------------------------------------

fn is_branch(m: &str) -> bool {
    m == "s_branch" || m.starts_with("s_cbranch")
}

/// The successors of each instruction of `f`: the next one unless it ends the path
/// (`s_branch`, `s_endpgm`, `s_setpc`), and a branch's target.
pub fn successors(f: &Function) -> Vec<Vec<usize>> {
    let n = f.insts.len();
    (0..n)
        .map(|i| {
            let m = mnemonic(&f.insts[i]);
            let ends = m == "s_branch" || m.starts_with("s_endpgm") || m.starts_with("s_setpc");
            let mut s = Vec::with_capacity(2);
            if !ends && i + 1 < n {
                s.push(i + 1);
            }
            if let Some(t) = f.target[i]
                && !s.contains(&t)
            {
                s.push(t);
            }
            s
        })
        .collect()
}

fn predecessors(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut pred = vec![Vec::new(); succ.len()];
    for (i, s) in succ.iter().enumerate() {
        for &j in s {
            pred[j].push(i);
        }
    }
    pred
}

/// What a [`walk`] does at an instruction: go on to its neighbours, look no further on this
/// path, or stop the whole walk there.
enum Visit {
    Go,
    Prune,
    Stop,
}

/// Visits every instruction reachable from `start` along `next` (the successors or the
/// predecessors), each once; the instruction where `visit` stopped the walk, if it did.
fn walk(start: &[usize], next: &[Vec<usize>], mut visit: impl FnMut(usize) -> Visit) -> Option<usize> {
    let mut seen = vec![false; next.len()];
    let mut stack = start.to_vec();
    while let Some(x) = stack.pop() {
        if std::mem::replace(&mut seen[x], true) {
            continue;
        }
        match visit(x) {
            Visit::Go => stack.extend(&next[x]),
            Visit::Prune => {}
            Visit::Stop => return Some(x),
        }
    }
    None
}

/// The loops of a function: for each header, the instructions of its loop. A header is the
/// target of a back edge (an edge to an instruction on the depth-first search's path from the
/// start: the compiler's control flow is reducible); its loop is the header and every
/// instruction that reaches one of its back edges without passing the header (the natural loop,
/// back edges of one header merged).
pub fn loops(succ: &[Vec<usize>], pred: &[Vec<usize>]) -> Vec<(usize, Vec<bool>)> {
    let n = succ.len();
    let mut back: Vec<(usize, usize)> = Vec::new();
    let (mut visited, mut on_path) = (vec![false; n], vec![false; n]);
    if n > 0 {
        let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
        visited[0] = true;
        on_path[0] = true;
        while let Some(top) = stack.last_mut() {
            let (x, k) = *top;
            if let Some(&y) = succ[x].get(k) {
                top.1 += 1;
                if on_path[y] {
                    back.push((x, y));
                } else if !visited[y] {
                    visited[y] = true;
                    on_path[y] = true;
                    stack.push((y, 0));
                }
            } else {
                on_path[x] = false;
                stack.pop();
            }
        }
    }
    let mut out: Vec<(usize, Vec<bool>)> = Vec::new();
    for (latch, header) in back {
        let at = match out.iter().position(|(h, _)| *h == header) {
            Some(at) => at,
            None => {
                out.push((header, vec![false; n]));
                out.len() - 1
            }
        };
        let body = &mut out[at].1;
        body[header] = true;
        let mut stack = vec![latch];
        while let Some(x) = stack.pop() {
            if !body[x] {
                body[x] = true;
                stack.extend(&pred[x]);
            }
        }
    }
    out
}

/// The waits of a function: the innermost loop around each `s_sleep` (every rcclx wait pauses
/// between its polls, `rcclx_poll_pause`, `rcclx_backoff`; no other loop sleeps).
pub fn waits(f: &Function, succ: &[Vec<usize>], pred: &[Vec<usize>]) -> Vec<Vec<bool>> {
    let all = loops(succ, pred);
    let mut out: Vec<Vec<bool>> = Vec::new();
    for (i, inst) in f.insts.iter().enumerate() {
        if mnemonic(inst) != "s_sleep" {
            continue;
        }
        let inner = all.iter().filter(|(_, b)| b[i]).min_by_key(|(_, b)| b.iter().filter(|x| **x).count());
        if let Some((_, body)) = inner
            && !out.contains(body)
        {
            out.push(body.clone());
        }
    }
    out
}

// ---- instruction classes ----------------------------------------------------------------------

fn vmem_load(m: &str) -> bool {
    ["global_load", "buffer_load", "flat_load", "scratch_load"].iter().any(|p| m.starts_with(p))
}
fn vmem_store(m: &str) -> bool {
    ["global_store", "buffer_store", "flat_store", "scratch_store"].iter().any(|p| m.starts_with(p))
}
fn vmem_atomic(m: &str) -> bool {
    ["global_atomic", "buffer_atomic", "flat_atomic"].iter().any(|p| m.starts_with(p))
}
fn vmem(m: &str) -> bool {
    vmem_load(m) || vmem_store(m) || vmem_atomic(m)
}
/// A 32-bit load through the scalar cache (`s_load_dword`, `s_buffer_load_dword`): a flag read
/// that became scalar. Wider scalar loads in a wait are the kernel's arguments (pointers)
/// loaded again on its rare paths (the abort check), which the host wrote before the launch.
fn flag_smem_load(m: &str) -> bool {
    matches!(m, "s_load_dword" | "s_buffer_load_dword")
}
/// A system-scope access: both cache-coherence bits (`sc0 sc1`, AMDGPUUsage's "system" row).
fn system_scope(inst: &str) -> bool {
    let mut w = inst.split_whitespace().skip(1);
    let (mut sc0, mut sc1) = (false, false);
    for t in &mut w {
        sc0 |= t == "sc0";
        sc1 |= t == "sc1";
    }
    sc0 && sc1
}
fn waits_vmcnt0(inst: &str) -> bool {
    mnemonic(inst) == "s_waitcnt" && inst.contains("vmcnt(0)")
}
/// The store of a flag: a 32-bit system-scope store (LL words are 8 bytes, LL128 lanes 16).
fn flag_store(inst: &str) -> bool {
    matches!(mnemonic(inst), "global_store_dword" | "flat_store_dword" | "buffer_store_dword") && system_scope(inst)
}

fn finding(kernel: &str, rule: Rule, detail: String) -> Finding {
    Finding { kernel: kernel.to_owned(), rule, detail }
}

/// Rule `poll-bits` over the functions of one AMD code object: every wait (the innermost loop
/// around an `s_sleep`) loads memory with system-scope vector loads only (`sc0 sc1`), and loads
/// some: a plain load may return a stale cached copy forever, a scalar load reads the scalar
/// cache (not coherent with other agents), and a wait with no load has had its poll hoisted out.
pub fn poll_bits(funcs: &[Function]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in funcs {
        let succ = successors(f);
        let pred = predecessors(&succ);
        for body in waits(f, &succ, &pred) {
            let mut polls = 0;
            let mut bad: Option<&str> = None;
            for (i, inst) in f.insts.iter().enumerate().filter(|(i, _)| body[*i]) {
                let m = mnemonic(inst);
                if vmem_load(m) && system_scope(inst) {
                    polls += 1;
                } else if (vmem_load(m) || flag_smem_load(m)) && bad.is_none() {
                    bad = Some(&f.insts[i]);
                }
            }
            let first = f.insts[body.iter().position(|b| *b).unwrap_or(0)].as_str();
            if let Some(inst) = bad {
                out.push(finding(
                    &f.name,
                    Rule::PollBits,
                    format!("the wait at `{first}` polls with `{inst}` (not a system-scope vector load)"),
                ));
            } else if polls == 0 {
                out.push(finding(
                    &f.name,
                    Rule::PollBits,
                    format!("the wait at `{first}` loads nothing with `sc0 sc1` (a poll hoisted out of its loop)"),
                ));
            }
        }
    }
    out
}

/// Rule `acquire-missing`: a flag wait (a wait whose polls are all 32-bit `global_load_dword` /
/// `flat_load_dword` with `sc0 sc1`; LL and LL128 waits poll 8- and 16-byte words or buffer
/// loads, their data or credits being the polled words) is an acquire: each edge that leaves
/// the loop has a path to `buffer_inv sc0 sc1` that passes no vector load and no `s_barrier`,
/// and every path from a `buffer_inv sc0 sc1` reaches `s_waitcnt vmcnt(0)` before an `s_barrier`
/// (the invalidate done before the barrier hands the acquire to the block). The check follows
/// paths, not values: it cannot tell the exit that saw the flag from one that gave up (which
/// the compiler may merge and then split again on a saved condition), so it asks for a path to
/// the acquire from every exit, not for the acquire on every path; an exit whose path reaches a
/// `buffer_wbl2` first is a wait that gave up and reports it (`rcclx_should_stop`).
pub fn acquire_missing(funcs: &[Function]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in funcs {
        let succ = successors(f);
        let pred = predecessors(&succ);
        for body in waits(f, &succ, &pred) {
            let polls: Vec<usize> = (0..f.insts.len())
                .filter(|i| body[*i] && vmem_load(mnemonic(&f.insts[*i])) && system_scope(&f.insts[*i]))
                .collect();
            if polls.is_empty()
                || polls.iter().any(|p| !matches!(mnemonic(&f.insts[*p]), "global_load_dword" | "flat_load_dword"))
            {
                continue;
            }
            let exits: Vec<(usize, usize)> = (0..f.insts.len())
                .filter(|x| body[*x])
                .flat_map(|x| succ[x].iter().filter(|y| !body[**y]).map(move |y| (x, *y)))
                .collect();
            for (from, to) in exits {
                let acquired = walk(&[to], &succ, |x| {
                    let inst = &f.insts[x];
                    let m = mnemonic(inst);
                    if (m == "buffer_inv" && system_scope(inst)) || m == "buffer_wbl2" {
                        Visit::Stop
                    } else if vmem_load(m) || m == "s_barrier" {
                        Visit::Prune
                    } else {
                        Visit::Go
                    }
                });
                if acquired.is_none() {
                    out.push(finding(
                        &f.name,
                        Rule::AcquireMissing,
                        format!(
                            "the wait polling `{}` leaves at instruction {from} with no path to `buffer_inv sc0 sc1` \
                             before a vector load or `s_barrier`",
                            f.insts[polls[0]]
                        ),
                    ));
                    break;
                }
            }
        }
        for (i, inst) in f.insts.iter().enumerate() {
            if mnemonic(inst) != "buffer_inv" || !system_scope(inst) {
                continue;
            }
            let barrier = walk(&succ[i], &succ, |x| {
                if waits_vmcnt0(&f.insts[x]) {
                    Visit::Prune
                } else if mnemonic(&f.insts[x]) == "s_barrier" {
                    Visit::Stop
                } else {
                    Visit::Go
                }
            });
            if let Some(x) = barrier {
                out.push(finding(
                    &f.name,
                    Rule::AcquireMissing,
                    format!(
                        "`{inst}` (instruction {i}) reaches `s_barrier` (instruction {x}) with no `s_waitcnt vmcnt(0)`"
                    ),
                ));
            }
        }
    }
    out
}

/// Rule `publish-without-wait`: a release after a workgroup barrier (`s_barrier`, then
/// `buffer_wbl2` with no vector store, atomic, poll (system-scope load) or pause (`s_sleep`)
/// between: one thread releasing for the block, not a wait reporting that it gave up) needs
/// every wave's memory operations complete before the barrier (`rcclx_block_publish`): on every
/// path into that `s_barrier`, an `s_waitcnt vmcnt(0)` comes after the last memory instruction.
pub fn publish_without_wait(funcs: &[Function]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in funcs {
        let pred = predecessors(&successors(f));
        let mut barriers: Vec<(usize, usize)> = Vec::new();
        for (w, inst) in f.insts.iter().enumerate() {
            if mnemonic(inst) != "buffer_wbl2" {
                continue;
            }
            walk(&pred[w], &pred, |x| {
                let m = mnemonic(&f.insts[x]);
                let poll = vmem_load(m) && system_scope(&f.insts[x]);
                if m == "s_barrier" {
                    if !barriers.iter().any(|(b, _)| *b == x) {
                        barriers.push((x, w));
                    }
                    Visit::Prune
                } else if !vmem_store(m) && !vmem_atomic(m) && !poll && m != "buffer_wbl2" && m != "s_sleep" {
                    Visit::Go
                } else {
                    Visit::Prune
                }
            });
        }
        for (b, w) in barriers {
            let unwaited = walk(&pred[b], &pred, |x| {
                let inst = &f.insts[x];
                // A release's own store (a flag store, after its `s_waitcnt vmcnt(0)`) needs no
                // wait before a later barrier: the next release's wave waits for it.
                if waits_vmcnt0(inst) || flag_store(inst) {
                    Visit::Prune
                } else if vmem(mnemonic(inst)) {
                    Visit::Stop
                } else {
                    Visit::Go
                }
            });
            if let Some(x) = unwaited {
                out.push(finding(
                    &f.name,
                    Rule::PublishWithoutWait,
                    format!(
                        "`{}` (instruction {x}) reaches the `s_barrier` (instruction {b}) before the release's `{}` \
                         (instruction {w}) with no `s_waitcnt vmcnt(0)`",
                        f.insts[x], f.insts[w]
                    ),
                ));
            }
        }
    }
    out
}

/// Rule `release-missing`: every flag store (a 32-bit store with `sc0 sc1`: rcclx has no relaxed
/// 32-bit system-scope store, `rcclx_port.h`) is a release: on every path into it a
/// `buffer_wbl2` comes after the previous flag store (and `release-without-wait` puts its
/// `s_waitcnt vmcnt(0)` between them).
pub fn release_missing(funcs: &[Function]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in funcs {
        let pred = predecessors(&successors(f));
        for (s, inst) in f.insts.iter().enumerate() {
            if !flag_store(inst) {
                continue;
            }
            let unreleased = walk(&[s], &pred, |x| {
                if x != s && mnemonic(&f.insts[x]) == "buffer_wbl2" {
                    Visit::Prune
                } else if (x != s && flag_store(&f.insts[x])) || pred[x].is_empty() {
                    Visit::Stop
                } else {
                    Visit::Go
                }
            });
            let bad = unreleased.map(|x| {
                if x != s && flag_store(&f.insts[x]) {
                    format!("after the flag store `{}` (instruction {x})", f.insts[x])
                } else {
                    "from the kernel's start".to_owned()
                }
            });
            if let Some(from) = bad {
                out.push(finding(
                    &f.name,
                    Rule::ReleaseMissing,
                    format!(
                        "`{inst}` (instruction {s}) is reached {from} with no `buffer_wbl2` (a relaxed flag store)"
                    ),
                ));
            }
        }
    }
    out
}

/// The system-scope stores to global memory rcclx makes, by shape: a flag
/// (`global_store_dword`, a release's store), an LL word (`global_store_dwordx2`: 8 bytes, its
/// flag and payload one single-copy atomic access) and an LL128 lane (`buffer_store_dwordx4`:
/// one 16-byte store per lane, the lanes of a line in one instruction).
pub const SYSTEM_STORES: [&str; 3] = ["global_store_dword", "global_store_dwordx2", "buffer_store_dwordx4"];

/// Rule `system-shape`: every system-scope (`sc0 sc1`) `global_store_*` or `buffer_store_*` is
/// one of [`SYSTEM_STORES`]: an LL word written as two 4-byte stores or as part of a 16-byte
/// one, or an LL128 lane split into halves or moved off the buffer instructions, breaks it.
/// Stores only: the writer's instruction is the unit that arrives whole, and the compiler
/// narrows a reader's LL128 load whose other half it does not use (`buffer_load_dwordx2`).
/// `flat_store_*` is left out: with `sc0 sc1` it is a volatile store through a generic pointer
/// (to shared memory in rcclx: `s_fail`, the bench's per-warp times), which no peer reads.
pub fn system_shape(funcs: &[Function]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in funcs {
        for (i, inst) in f.insts.iter().enumerate() {
            let m = mnemonic(inst);
            if (m.starts_with("global_store") || m.starts_with("buffer_store"))
                && system_scope(inst)
                && !SYSTEM_STORES.contains(&m)
            {
                out.push(finding(
                    &f.name,
                    Rule::SystemShape,
                    format!(
                        "`{inst}` (instruction {i}) is none of rcclx's system-scope stores (flag `global_store_dword`, \
                         LL word `global_store_dwordx2`, LL128 lane `buffer_store_dwordx4`)"
                    ),
                ));
            }
        }
    }
    out
}

/// Every memory-model rule over the functions of one AMD code object.
pub fn memory_model(funcs: &[Function]) -> Vec<Finding> {
    let mut out = release_without_wait(funcs);
    out.extend(publish_without_wait(funcs));
    out.extend(release_missing(funcs));
    out.extend(acquire_missing(funcs));
    out.extend(poll_bits(funcs));
    out.extend(system_shape(funcs));
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
pub fn assembly_metadata(asm: &str) -> &str {
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

/// The major version of an LLVM tool (`--version`: "LLVM version 22.1.8").
fn llvm_major(tool: &Path) -> Option<u32> {
    let out = Command::new(tool).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.split("LLVM version ").nth(1)?;
    v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// An LLVM tool (`llvm-objdump`, `llvm-readelf`) of LLVM `min` or later (17 knows gfx942, 20
/// gfx950): the versioned names on PATH (newest first), then the one next to the compiler that
/// built the object, the unversioned ones on PATH and ROCm's.
pub fn llvm_tool_from(name: &str, compiler: Option<&Path>, min: u32) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut candidates: Vec<PathBuf> = Vec::new();
    for v in (min..=25).rev() {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(format!("{name}-{v}"))));
    }
    if let Some(dir) =
        compiler.and_then(|c| std::fs::canonicalize(c).ok()).and_then(|c| c.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(name));
    }
    candidates.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    candidates.push(PathBuf::from(format!("/opt/rocm/llvm/bin/{name}")));
    candidates.into_iter().filter(|p| p.is_file()).find(|p| llvm_major(p).is_some_and(|v| v >= min))
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
            // gfx950 needs LLVM 20 or later to disassemble (ci/install-toolchains.sh installs
            // LLVM 22); without one it is read from the assembly clang assembled.
            let min = if target == Target::Gfx950 { 20 } else { 17 };
            let objdump = llvm_tool_from("llvm-objdump", compiler, min);
            let readelf = llvm_tool_from("llvm-readelf", compiler, min);
            let (source, asm, metadata) = match (objdump, readelf) {
                (Some(objdump), Some(readelf)) => {
                    let asm = run(&objdump, &["-d", &format!("--mcpu={}", target.name())], object)?;
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
            check_listing(target, &asm, &metadata, source)
        }
    }
}

/// The AMD rules over one code object's listing (a disassembly or the assembly it was
/// assembled from) and metadata; `source` says where they came from. Err: the listing is not
/// the object's (no kernel, other functions than the metadata's kernels, a branch whose target
/// it does not show).
pub fn check_listing(target: Target, listing: &str, metadata: &str, source: String) -> Result<Checked, String> {
    let funcs = functions(listing);
    let kernels = amd_kernel_count(metadata);
    if funcs.is_empty() || kernels == 0 {
        return Err(format!("{source}: no kernel found"));
    }
    // A listing cut short, or an assembly file of another build, lists other functions than
    // the object's metadata names: what the rules saw would not be the object.
    if funcs.len() != kernels {
        return Err(format!(
            "{source}: {} functions listed, {kernels} kernels in the code object's metadata",
            funcs.len()
        ));
    }
    // The flow rules follow branches: one whose target is not known would cut a path.
    for f in &funcs {
        if let Some(i) = (0..f.insts.len()).find(|i| is_branch(mnemonic(&f.insts[*i])) && f.target[*i].is_none()) {
            return Err(format!(
                "{source}: {}: the target of `{}` (instruction {i}) is not in the listing",
                f.name, f.insts[i]
            ));
        }
    }
    let mut findings = memory_model(&funcs);
    findings.extend(amd_scratch(metadata));
    Ok(Checked { target, source, kernels, findings })
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
/// warning, and a target with a kernel that breaks a memory-model rule is left out (its GPUs forward:
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
                if let Some(f) = c.findings.iter().find(|f| f.rule.memory_model()) {
                    rejected.push(*target);
                    if !require {
                        println!(
                            "cargo:warning={what}: {} left out: a kernel breaks the memory model ({}), which gives \
                             wrong results",
                            target.name(),
                            f.rule.name()
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
