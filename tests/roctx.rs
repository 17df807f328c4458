//! rcclx's ranges as roctx ranges on the HIP runtime (`src/nvtx.rs`), without a GPU:
//! `tests/c/roctx_record.c` stands in for ROCm's roctx library at `$ROCM_PATH/lib/libroctx64.so.4`.
//! Before the HIP runtime is in use no roctx library is loaded; after `nvtx::use_roctx` (what
//! `gpu::runtime` calls when it loads HIP) each range is one `roctxRangePushA(name)` and one
//! `roctxRangePop()`, nested as opened. Not run on an AMD GPU (none here).

mod common;

use rcclx::collective::Coll;
use rcclx::nvtx;
use rcclx::nvtx::Payload;

const P: Payload = Payload { comm: 0, bytes: 8, ints: [0; 2] };

#[test]
fn ranges_reach_roctx_on_hip() {
    let dir = common::scratch("roctx");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    common::roctx_recorder(&lib.join("libroctx64.so.4"));
    // SAFETY: the only test of this binary, before any other thread reads the environment.
    unsafe {
        std::env::set_var("ROCM_PATH", &dir);
        std::env::set_var("ROCTX_RECORD_DIR", &dir);
        std::env::remove_var("NVTX_INJECTION64_PATH");
        std::env::remove_var("NCCL_NVTX_DISABLE");
    }
    let record = dir.join(format!("roctx.{}.log", std::process::id()));
    // Not HIP yet: no range, nothing recorded.
    assert!(nvtx::range(Coll::AllReduce, P).is_none());
    assert!(!record.exists());
    nvtx::use_roctx();
    let outer = nvtx::range(Coll::AllGather, P);
    assert!(outer.is_some(), "no range: the roctx recorder was not loaded");
    drop(nvtx::range(Coll::Broadcast, P));
    drop(outer);
    let log = std::fs::read_to_string(&record).expect("the record");
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["push ncclAllGather level=0", "push ncclBroadcast level=1", "pop level=1", "pop level=0"],
        "{log}"
    );
}
