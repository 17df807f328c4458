//! rcclx's NVTX ranges with a tool that has no payload extension (`tests/c/nvtx_record.c` built
//! with `-DNVTX_RECORD_NO_EXT`): nothing is registered, and each range carries the message size
//! as a 64-bit unsigned payload (`NVTX_PAYLOAD_TYPE_UNSIGNED_INT64`), as before the extension.
//! Its own test binary: the NVTX tool is loaded once per process.

mod common;

use rcclx::collective::Coll;
use rcclx::nvtx::{Payload, range};

#[test]
fn size_payload_without_the_extension() {
    let dir = common::scratch("nvtx-no-ext");
    let recorder = common::nvtx_recorder_with(&dir, "libnvtx_record_no_ext.so", &["-DNVTX_RECORD_NO_EXT"]);
    // SAFETY: the only test of this binary, before any other thread reads the environment.
    unsafe {
        std::env::set_var("NVTX_INJECTION64_PATH", &recorder);
        std::env::set_var("NVTX_RECORD_DIR", &dir);
        std::env::remove_var("NCCL_NVTX_DISABLE");
    }
    drop(range(Coll::ReduceScatter, Payload::new(Coll::ReduceScatter, 1 << 20, 0, 0)));
    drop(range(Coll::Broadcast, Payload::new(Coll::Broadcast, 12, 0, 1)));
    let log = std::fs::read_to_string(dir.join(format!("nvtx.{}.log", std::process::id()))).expect("the record");
    let lines: Vec<&str> = log.lines().map(|l| l.split(" from=").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "init",
            "domain NCCL",
            "push NCCL ncclReduceScatter payloadType=1 payload=1048576",
            "pop NCCL",
            "push NCCL ncclBroadcast payloadType=1 payload=12",
            "pop NCCL",
        ],
        "{log}"
    );
}
