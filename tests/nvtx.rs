//! rcclx's NVTX instance (`src/nvtx.rs`) through NVTX's injection interface, without a GPU:
//! `tests/c/nvtx_record.c` is the tool (`NVTX_INJECTION64_PATH`); a range opened and closed
//! through `rcclx::nvtx` must reach it as domain `NCCL`, the stock library's name for the call
//! (a registered string), the size payload, and a pop. On a GPU the same recorder sees one range
//! per collective rcclx runs (`scripts/nvtx-check.sh`).

mod common;

#[test]
fn ranges_reach_the_injected_tool() {
    let dir = common::scratch("nvtx");
    let recorder = common::nvtx_recorder(&dir);
    // SAFETY: the only test of this binary, before any other thread reads the environment.
    unsafe {
        std::env::set_var("NVTX_INJECTION64_PATH", &recorder);
        std::env::set_var("NVTX_RECORD_DIR", &dir);
    }
    for bytes in [4096u64, 1 << 20] {
        let r = rcclx::nvtx::range(rcclx::nvtx::collective_name(rcclx::collective::Coll::AllReduce), bytes);
        assert!(r.is_some(), "no range: the tool was not loaded");
    }
    let r = rcclx::nvtx::range(rcclx::nvtx::collective_name(rcclx::collective::Coll::AllToAll), 8);
    drop(r);
    let log = std::fs::read_to_string(dir.join(format!("nvtx.{}.log", std::process::id()))).expect("the record");
    let lines: Vec<String> = log.lines().map(|l| l.split(" from=").next().unwrap().to_string()).collect();
    assert_eq!(
        lines,
        [
            "init",
            "domain NCCL",
            "push NCCL ncclAllReduce payloadType=1 payload=4096",
            "pop NCCL",
            "push NCCL ncclAllReduce payloadType=1 payload=1048576",
            "pop NCCL",
            "push NCCL ncclAlltoAll payloadType=1 payload=8",
            "pop NCCL",
        ],
        "{log}"
    );
}
