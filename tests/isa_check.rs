//! The machine-code checker (`build/isa_check.rs`) fails on what it must: rules on text written
//! for them, then every rule on planted kernels compiled by the build's own compilers (at least
//! one per rule, `tests/data/isa/planted.cu`), while a kernel written with the port's primitives
//! passes them all.

mod common;

#[path = "../build/isa_check.rs"]
mod isa_check;
#[path = "../build/toolchain.rs"]
mod toolchain;

use isa_check::Rule;
use toolchain::{Outcome, Target};

fn rules_of(findings: &[isa_check::Finding], kernel: &str) -> Vec<Rule> {
    findings.iter().filter(|f| f.kernel == kernel).map(|f| f.rule).collect()
}

#[test]
fn release_rule_on_disassembly() {
    let dump = "\
0000000000001600 <bad>:
\tbuffer_wbl2 sc0 sc1                                        // 000000001650: E0A0C000 00000000
\ts_barrier                                                  // 000000001658: BF8A0000
0000000000001700 <good>:
\tbuffer_wbl2 sc0 sc1                                        // 000000001668: E0A0C000 00000000
\ts_waitcnt vmcnt(0)                                         // 00000000166c: BF8C0F70
\tglobal_store_dword v1, v0, s[4:5] sc0 sc1                  // 000000001670: DE718000 00040001
0000000000001800 <branch>:
\tbuffer_wbl2 sc0 sc1
\tv_mov_b32_e32 v0, s13
\ts_cbranch_execz 5                                          // 000000001660: BF880005 <k+0x78>
\ts_waitcnt vmcnt(0)
0000000000001900 <lds>:
\tbuffer_wbl2 sc0 sc1
\tds_write_b32 v23, v25 offset:4
\tglobal_load_dword v2, v66, s[2:3] sc0 sc1
\ts_waitcnt vmcnt(0) lgkmcnt(0)
\tflat_atomic_add v1, v2
";
    let funcs = isa_check::functions(dump);
    assert_eq!(funcs.len(), 4);
    let f = isa_check::release_without_wait(&funcs);
    assert_eq!(rules_of(&f, "bad"), [Rule::ReleaseWithoutWait]);
    assert_eq!(rules_of(&f, "branch"), [Rule::ReleaseWithoutWait]);
    assert!(rules_of(&f, "good").is_empty() && rules_of(&f, "lds").is_empty(), "{f:?}");
}

#[test]
fn release_rule_on_assembly() {
    let asm = "\t.text\nk:\n\tbuffer_wbl2 sc0 sc1\n\tglobal_store_dword v1, v0, s[4:5] sc0 sc1 ; publish\n\
               .LBB0_1:\n\ts_endpgm\n\t.section\t.rodata\n\t.amdgpu_metadata\namdhsa.kernels:\n  - .name: k\n";
    let f = isa_check::release_without_wait(&isa_check::functions(asm));
    assert_eq!(rules_of(&f, "k"), [Rule::ReleaseWithoutWait]);
}

/// The control flow of both listings (objdump's `<name+0x..>` targets, assembly's labels), and
/// the flow rules on it: a paused poll loop with and without its acquire.
#[test]
fn flow_rules_on_disassembly_and_assembly() {
    let dump = "\
0000000000001c00 <good>:
\tglobal_load_dword v1, v5, s[6:7] sc0 sc1                    // 000000001C00: DE518000 01060005
\ts_waitcnt vmcnt(0)                                          // 000000001C08: BF8C0F70
\ts_cbranch_vccnz 2                                           // 000000001C0C: BF870002 <good+0x18>
\ts_sleep 1                                                   // 000000001C10: BF8E0001
\ts_branch 65530                                              // 000000001C14: BF82FFFA <good>
\tbuffer_inv sc0 sc1                                          // 000000001C18: E0A4C000 00000000
\ts_waitcnt vmcnt(0)                                          // 000000001C20: BF8C0F70
\ts_barrier                                                   // 000000001C24: BF8A0000
\tglobal_load_dword v2, v[0:1], off                           // 000000001C28: DC508000 027F0000
\ts_endpgm                                                    // 000000001C30: BF810000
";
    let asm = "\t.text\nbad:\n.LBB0_1:\n\tglobal_load_dword v1, v5, s[6:7] sc0 sc1\n\ts_waitcnt vmcnt(0)\n\
               \ts_cbranch_vccnz .LBB0_2\n\ts_sleep 1\n\ts_branch .LBB0_1\n.LBB0_2:\n\ts_barrier\n\
               \tglobal_load_dword v2, v[0:1], off\n\ts_endpgm\n";
    let mut funcs = isa_check::functions(dump);
    funcs.extend(isa_check::functions(asm));
    assert_eq!(funcs.len(), 2);
    for f in &funcs {
        assert_eq!(f.target[2], Some(5), "{}: the forward branch", f.name);
        assert_eq!(f.target[4], Some(0), "{}: the backward branch", f.name);
        let succ = isa_check::successors(f);
        let pred: Vec<Vec<usize>> =
            (0..succ.len()).map(|i| (0..succ.len()).filter(|j| succ[*j].contains(&i)).collect()).collect();
        let loops = isa_check::loops(&succ, &pred);
        assert_eq!(loops.len(), 1, "{}", f.name);
        assert_eq!(loops[0].1.iter().filter(|x| **x).count(), 5, "{}: the loop is the poll and its pause", f.name);
    }
    let found = isa_check::memory_model(&funcs);
    assert_eq!(rules_of(&found, "bad"), [Rule::AcquireMissing], "{found:?}");
    assert!(rules_of(&found, "good").is_empty(), "{found:?}");
}

#[test]
fn scratch_and_spill_rules_on_metadata() {
    let notes = "amdhsa.kernels:\n  - .agpr_count:     0\n    .args:\n      - .name: a\n        .size: 8\n\
                 \x20   .name:           spills\n    .private_segment_fixed_size: 768\n    .uses_dynamic_stack: false\n\
                 \x20   .vgpr_spill_count: 527\n  - .agpr_count:     0\n    .name:           clean\n\
                 \x20   .private_segment_fixed_size: 0\n    .uses_dynamic_stack: false\n";
    assert_eq!(isa_check::amd_kernel_count(notes), 2);
    let f = isa_check::amd_scratch(notes);
    assert_eq!(rules_of(&f, "spills"), [Rule::Scratch]);
    assert!(rules_of(&f, "clean").is_empty());

    let usage = " Function spills:\n  REG:64 STACK:16 SHARED:0 LOCAL:0 CONSTANT[0]:560\n Function clean:\n  REG:40 STACK:0 SHARED:8 LOCAL:0\n";
    let f = isa_check::sm90_spills(usage);
    assert_eq!(rules_of(&f, "spills"), [Rule::Spill]);
    assert!(rules_of(&f, "clean").is_empty());
}

/// The planted kernels through the real compilers and disassemblers: every target must flag
/// exactly the rule its planted kernel breaks, and nothing in `planted_clean`.
#[test]
fn planted_kernels_fail_their_rules() {
    let repo = common::repo();
    let out = std::env::temp_dir().join(format!("rcclx-isa-check-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let src = repo.join("tests/data/isa/planted.cu");
    let unit =
        toolchain::Unit { src: &src, include: &repo.join("hip_kernels"), stem: "planted", out_dir: &out, repo: &repo };
    let outcomes = toolchain::compile_all(&unit);
    let mut checked = Vec::new();
    for (target, outcome) in &outcomes {
        match outcome {
            Outcome::Built { tool, path, .. } => {
                let c = isa_check::check(*target, path, &src, Some(tool.path()), &repo).unwrap_or_else(|e| {
                    panic!("{}: the checker could not read the planted kernels: {e}", target.name())
                });
                checked.push(c);
            }
            Outcome::Failed { command, log } => {
                panic!("{}: planted kernels did not compile: {command}\n{log}", target.name())
            }
            Outcome::Missing { note } => {
                assert!(
                    !common::in_ci(),
                    "{}: no compiler in CI ({note}): run ci/install-toolchains.sh",
                    target.name()
                );
                eprintln!("NOTE: {}: no compiler ({note}); not checked", target.name());
            }
        }
    }
    // An assembly listing that does not match its object (cut short, or of another build) is
    // refused: the planted gfx950 assembly without one kernel's label. And gfx950 is read from
    // its object where an LLVM of 20 or later is installed (CI: ci/install-toolchains.sh).
    for (target, outcome) in &outcomes {
        if let (Target::Gfx950, Outcome::Built { path, .. }) = (target, outcome) {
            let asm_path = toolchain::amd_assembly(&src, path, *target);
            let asm = std::fs::read_to_string(&asm_path).unwrap();
            assert!(asm.contains("\nplanted_scratch:"), "the listing names its kernels");
            let cut = asm.replacen("\nplanted_scratch:", "\n", 1);
            let metadata = isa_check::assembly_metadata(&asm);
            match isa_check::check_listing(*target, &cut, metadata, "cut".into()) {
                Err(e) => assert!(e.contains("functions listed"), "{e}"),
                Ok(c) => panic!("a listing without a kernel passed: {} kernels, {:?}", c.kernels, c.findings),
            }
            // The same assembly whole: the same kernels and findings as the object.
            let whole = isa_check::check_listing(*target, &asm, metadata, "whole".into()).unwrap();
            let from_object = checked.iter().find(|c| c.target == Target::Gfx950).unwrap();
            assert_eq!(whole.kernels, from_object.kernels);
            assert_eq!(whole.findings.len(), from_object.findings.len(), "{:?}", from_object.findings);
            if common::in_ci() {
                assert!(
                    from_object.source.contains("llvm-objdump"),
                    "CI reads gfx950 from its object: {}",
                    from_object.source
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    for c in &checked {
        let name = c.target.name();
        assert!(rules_of(&c.findings, "planted_clean").is_empty(), "{name}: {:?}", c.findings);
        match c.target {
            Target::Sm90 => assert_eq!(rules_of(&c.findings, "planted_scratch"), [Rule::Spill], "{name}"),
            Target::Gfx942 | Target::Gfx950 => {
                assert_eq!(rules_of(&c.findings, "planted_scratch"), [Rule::Scratch], "{name}");
                // Each planted hazard is caught by its rule and by no other.
                for (kernel, rule) in [
                    ("planted_release_without_wait", Rule::ReleaseWithoutWait),
                    ("planted_publish_without_wait", Rule::PublishWithoutWait),
                    ("planted_release_missing", Rule::ReleaseMissing),
                    ("planted_acquire_missing", Rule::AcquireMissing),
                    ("planted_acquire_unwaited", Rule::AcquireMissing),
                    ("planted_poll_plain", Rule::PollBits),
                    ("planted_poll_scalar", Rule::PollBits),
                    ("planted_system_shape", Rule::SystemShape),
                ] {
                    let found = rules_of(&c.findings, kernel);
                    assert!(!found.is_empty() && found.iter().all(|r| *r == rule), "{name} {kernel}: {found:?}");
                }
                // Two shapes planted: a 16-byte LL unit and a 2-byte store.
                assert_eq!(rules_of(&c.findings, "planted_system_shape").len(), 2, "{name}");
            }
        }
    }
    if common::in_ci() {
        assert_eq!(checked.len(), 3, "CI checks all three targets");
    }
}

/// A code object the check cannot read: an AMD target is left out (its memory model rests on
/// this check alone) unless `RCCLX_ISA_CHECK=off`; NVIDIA's (whose rule is about speed) ships
/// with a warning.
#[test]
fn unreadable_amd_code_objects_are_left_out_unless_the_check_is_off() {
    let repo = common::repo();
    let missing = std::path::PathBuf::from("/nonexistent/rcclx-isa-check/kernels.bin");
    let built = |target, tool| (target, Outcome::Built { tool, log: String::new(), path: missing.clone() });
    let outcomes = [
        built(Target::Sm90, toolchain::Tool::Nvcc("/nonexistent/nvcc".into())),
        built(Target::Gfx942, toolchain::Tool::Clang("/nonexistent/clang".into())),
        built(Target::Gfx950, toolchain::Tool::Clang("/nonexistent/clang".into())),
    ];
    let src = repo.join("tests/data/isa/planted.cu");
    let (rejected, report) = isa_check::enforce("test", &outcomes, &src, &repo, false, false);
    assert_eq!(rejected, [Target::Gfx942, Target::Gfx950], "{report}");
    assert_eq!(report.matches("NOT CHECKED").count(), 3, "{report}");
    let (rejected, _) = isa_check::enforce("test", &outcomes, &src, &repo, false, true);
    assert!(rejected.is_empty());
}
