//! rcclx's NVTX instance (`src/nvtx.rs`) through NVTX's injection interface, without a GPU:
//! `tests/c/nvtx_record.c` is the tool (`NVTX_INJECTION64_PATH`); a range opened and closed
//! through `rcclx::nvtx` must reach it as domain `NCCL`, the stock library's name for the call
//! (a registered string), NCCL's payload (the payload extension: the reduction-op enum, each
//! collective's schema, one payload per range, decoded by the recorder), and a pop. Where the
//! stock library 2.28.9 is at hand (`RCCLX_TEST_NCCL_2_28`), the same process calls its
//! collectives with no communicator (which it rejects after opening its range) and rcclx's
//! schemas, enum and payloads must read exactly as the stock library's. On a GPU the same
//! recorder sees one range per collective rcclx runs (`scripts/nvtx-check.sh`).

mod common;

use rcclx::collective::Coll;
use rcclx::nvtx::{Payload, range};
use std::collections::BTreeSet;
use std::ffi::{c_int, c_void};

const SCHEMA_AR: &str = "schema NCCL 5 static size=24 NCCL communicator ID:uint64@0,Message size [bytes]:size@8,Reduction operation:enum20@16";

/// The record's lines of one library (`from=` its file name), without the `from` part.
fn lines_from(log: &str, from: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.rsplit_once(" from=").filter(|(_, f)| *f == from).map(|(l, _)| l.to_string()))
        .collect()
}

/// The stock library's collectives with no communicator (the calls of the test's `calls`).
fn stock_calls(lib: &std::path::Path) {
    type Reducing =
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> c_int;
    type Plain = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, *mut c_void, *mut c_void) -> c_int;
    // SAFETY: the stock library, loaded once for the process; its initialisers need no GPU.
    let nccl = Box::leak(Box::new(unsafe { libloading::Library::new(lib) }.expect("the stock library")));
    let null = std::ptr::null_mut();
    // SAFETY: NCCL's signatures (nccl.h 2.28); with a NULL communicator each returns an error
    // after its NVTX range, touching no buffer.
    unsafe {
        // Initialises the library (its reduction-op enum among others), where this machine lets it.
        let mut id = [0u8; 128];
        let _ = nccl.get::<unsafe extern "C" fn(*mut u8) -> c_int>(b"ncclGetUniqueId\0").unwrap()(id.as_mut_ptr());
        let ar = nccl.get::<Reducing>(b"ncclAllReduce\0").unwrap();
        assert_ne!(ar(null, null, 1024, 7, 2, null, null), 0); // float32, max
        let rs = nccl.get::<Reducing>(b"ncclReduceScatter\0").unwrap();
        assert_ne!(rs(null, null, 3, 9, 4, null, null), 0); // bfloat16, avg
        let ag = nccl.get::<Plain>(b"ncclAllGather\0").unwrap();
        assert_ne!(ag(null, null, 5, 1, null, null), 0); // uint8
        let a2a = nccl.get::<Plain>(b"ncclAlltoAll\0").unwrap();
        assert_ne!(a2a(null, null, 8, 8, null, null), 0); // float64
        let bc = nccl.get::<Reducing>(b"ncclBroadcast\0").unwrap();
        assert_ne!(bc(null, null, 16, 2, 1, null, null), 0); // int32, root 1
        type Rooted = unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            c_int,
            c_int,
            *mut c_void,
            *mut c_void,
        ) -> c_int;
        let reduce = nccl.get::<Rooted>(b"ncclReduce\0").unwrap();
        assert_ne!(reduce(null, null, 10, 6, 3, 1, null, null), 0); // float16, min, root 1
    }
}

#[test]
fn ranges_reach_the_injected_tool() {
    let dir = common::scratch("nvtx");
    let recorder = common::nvtx_recorder(&dir);
    // SAFETY: the only test of this binary, before any other thread reads the environment.
    unsafe {
        std::env::set_var("NVTX_INJECTION64_PATH", &recorder);
        std::env::set_var("NVTX_RECORD_DIR", &dir);
        std::env::remove_var("NCCL_NVTX_DISABLE");
    }
    // The same calls as `stock_calls`: NCCL's sizes are one rank's part, count * type size.
    let calls = [
        (Coll::AllReduce, 4096, 2, 0),
        (Coll::ReduceScatter, 6, 4, 0),
        (Coll::AllGather, 5, 0, 0),
        (Coll::AllToAll, 64, 0, 0),
        (Coll::Broadcast, 64, 0, 1),
        (Coll::Reduce, 20, 3, 1),
    ];
    for (coll, bytes, op, root) in calls {
        let r = range(coll, Payload::new(coll, bytes, op, root));
        assert!(r.is_some(), "no range: the tool was not loaded");
    }
    // Registered once per collective.
    drop(range(Coll::AllReduce, Payload::new(Coll::AllReduce, 8, 0, 0)));
    let record = dir.join(format!("nvtx.{}.log", std::process::id()));
    let exe = std::env::current_exe().unwrap();
    let me = exe.file_name().unwrap().to_str().unwrap();
    let log = std::fs::read_to_string(&record).expect("the record");
    let ours = lines_from(&log, me);
    assert_eq!(
        ours,
        [
            "domain NCCL",
            "ext payload compat=0x103 slots=63 types=28 int=4/4 size=8/8",
            "enum NCCL 20 size=4 Sum=0,Product=1,Max=2,Min=3,Avg=4",
            SCHEMA_AR,
            "push NCCL ncclAllReduce payloadType=ext payload=5{NCCL communicator ID=0,Message size [bytes]=4096,Reduction operation=Max}",
            "pop NCCL",
            "schema NCCL 7 static size=24 NCCL communicator ID:uint64@0,Message size [bytes]:size@8,Reduction operation:enum20@16",
            "push NCCL ncclReduceScatter payloadType=ext payload=7{NCCL communicator ID=0,Message size [bytes]=6,Reduction operation=Avg}",
            "pop NCCL",
            "schema NCCL 4 static size=16 NCCL communicator ID:uint64@0,Message size [bytes]:size@8",
            "push NCCL ncclAllGather payloadType=ext payload=4{NCCL communicator ID=0,Message size [bytes]=5}",
            "pop NCCL",
            "schema NCCL 16 static size=16 NCCL communicator ID:uint64@0,Message size [bytes]:size@8",
            "push NCCL ncclAlltoAll payloadType=ext payload=16{NCCL communicator ID=0,Message size [bytes]=64}",
            "pop NCCL",
            "schema NCCL 6 static size=24 NCCL communicator ID:uint64@0,Message size [bytes]:size@8,Root:int@16",
            "push NCCL ncclBroadcast payloadType=ext payload=6{NCCL communicator ID=0,Message size [bytes]=64,Root=1}",
            "pop NCCL",
            "schema NCCL 8 static size=24 NCCL communicator ID:uint64@0,Message size [bytes]:size@8,Root:int@16,Reduction operation:enum20@20",
            "push NCCL ncclReduce payloadType=ext payload=8{NCCL communicator ID=0,Message size [bytes]=20,Root=1,Reduction operation=Min}",
            "pop NCCL",
            "push NCCL ncclAllReduce payloadType=ext payload=5{NCCL communicator ID=0,Message size [bytes]=8,Reduction operation=Sum}",
            "pop NCCL",
        ],
        "{log}"
    );
    let Some(stock) = common::nccl_2_28() else { return };
    stock_calls(&stock.lib);
    let log = std::fs::read_to_string(&record).expect("the record");
    let theirs = lines_from(&log, "libnccl.so.2");
    // rcclx's domain, extension, schemas and pushes of these calls, as the stock library's (which
    // also has ranges of its other functions, and registers the enum only once initialised).
    let names =
        ["ncclAllReduce ", "ncclReduceScatter ", "ncclAllGather ", "ncclAlltoAll ", "ncclBroadcast ", "ncclReduce "];
    let set = |v: &[String]| -> BTreeSet<String> {
        v.iter()
            .filter(|l| !l.contains("Message size [bytes]=8,") && !l.starts_with("pop ") && !l.starts_with("enum "))
            .filter(|l| !l.starts_with("push ") || names.iter().any(|n| l.starts_with(&format!("push NCCL {n}"))))
            .cloned()
            .collect()
    };
    assert!(theirs.iter().any(|l| l == SCHEMA_AR), "the stock library registered no schema:\n{log}");
    assert_eq!(set(&ours), set(&theirs), "rcclx's NVTX events differ from the stock library's:\n{log}");
    for e in theirs.iter().filter(|l| l.starts_with("enum ")) {
        assert!(ours.contains(e), "the stock library's {e}, not rcclx's:\n{log}");
    }
}
