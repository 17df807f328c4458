//! What each rank tells the others at setup, and the verdict every rank draws from the
//! gathered records alone (so every rank reaches the same one).

use super::args::{MAX_COMM_RANKS, MAX_RANKS};
use super::rankmap::RankMap;
use crate::intercept::Policies;

/// One rank's record (plain bytes on the wire; identical layout everywhere because every rank
/// runs the same rcclx build, which the magic checks).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Record {
    pub magic: u64,
    pub host: u64,
    /// Random per setup; rank 0's names the clique's lease (`lease.rs`).
    pub nonce: u64,
    /// The pid and its namespace (`host::pid_namespace`): together they name one process.
    pub pid: u32,
    pub device: i32,
    /// 1 when this rank has kernels for its GPU (first exchange), and allocated its buffers
    /// (second exchange, whose record also carries their handles and pointers).
    pub capable: u32,
    /// Keeps `arch` 8-byte aligned: the record is sent as bytes, so it has no implicit padding.
    pub pad: u32,
    pub arch: [u8; 32],
    pub staging_ipc: [u8; 64],
    pub flags_ipc: [u8; 64],
    pub ll_ipc: [u8; 64],
    pub staging_ptr: u64,
    pub flags_ptr: u64,
    pub ll_ptr: u64,
    pub staging_bytes: u64,
    /// The DDA kernels' grid cap (RCCL_DDA_MAX_BLOCKS).
    pub max_blocks: u64,
    /// Multiprocessors (SMs or CUs) of the rank's GPU.
    pub multiprocessors: u64,
    /// Rank 0's is adopted by everyone (with `policies`), so all ranks decide alike; the other
    /// fields are each rank's own, or checked equal by the verdict.
    pub timeout_ms: u64,
    /// The rank's GPU, the same in every process (a hash of its PCI bus id; `host::gpu_id`).
    pub gpu: u64,
    /// The setup's `Sharing`: 1 if ranks may share a GPU; the grid cap (0: none).
    pub shared_gpus: u32,
    pub grid_cap: u32,
    pub pidns: u64,
    /// The running kernel's identity (`host::Identity::machine`): ranks whose differ cannot map
    /// each other's memory, whatever their host ids say.
    pub machine: u64,
    /// 1 when the host id is `RCCLX_SIM_HOSTID`'s (a simulated host; `host::Identity`).
    pub simulated: u32,
    pub pad2: u32,
    /// How each collective is routed (rank 0's: every rank decides alike); `ll_max` also sizes
    /// the LL inboxes, so it must agree.
    pub policies: Policies,
    /// The GPU's PCI bus id (`0000:1b:00.0`, NUL-padded): where it sits in the machine (`p2p.rs`).
    pub pci_bus: [u8; 16],
}

/// "rcclx_ve": bumped whenever the layout or meaning of a field, or the exchanges, change.
pub const MAGIC: u64 = 0x7263_636c_785f_7667;
pub const BYTES: usize = std::mem::size_of::<Record>();
const _: () = assert!(BYTES.is_multiple_of(8));

impl Record {
    /// The GPU's PCI bus id.
    pub fn pci_bus(&self) -> String {
        let end = self.pci_bus.iter().position(|&b| b == 0).unwrap_or(self.pci_bus.len());
        String::from_utf8_lossy(&self.pci_bus[..end]).into_owned()
    }

    pub fn zeroed() -> Self {
        // SAFETY: Record is plain integers and byte arrays; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: plain data without padding (every field is an 8- or 4-byte multiple, in
        // order, and the total is a multiple of 8).
        unsafe { std::slice::from_raw_parts(self as *const Self as *const u8, BYTES) }
    }
    pub fn from_bytes(b: &[u8]) -> Self {
        assert!(b.len() >= BYTES, "record of {} bytes", b.len());
        let mut r = Self::zeroed();
        // SAFETY: copies exactly BYTES into a plain-data value (any bytes are valid).
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), &mut r as *mut Self as *mut u8, BYTES) };
        r
    }
    /// The records of every rank, from the gathered bytes.
    pub fn all(gathered: &[u8]) -> Vec<Record> {
        gathered.chunks(BYTES).map(Record::from_bytes).collect()
    }
}

/// Whether two ranks' records come from one process (so each can use the other's pointers as
/// they are): same host, same pid, same pid namespace.
pub fn same_process(a: &Record, b: &Record) -> bool {
    a.host == b.host && a.pid == b.pid && a.pidns == b.pidns
}

/// `hipErrorInvalidContext`: what HIP's `hipIpcOpenMemHandle` returns for a handle whose owner
/// pid is the caller's own.
const HIP_ERROR_INVALID_CONTEXT: i32 = 201;

/// Why opening `peer`'s IPC handle failed with `e`, when the cause is HIP's pid check: `None`
/// for any other failure. HIP (ROCm/clr `hipIpcOpenMemHandle`) refuses a handle whose owner's pid,
/// as seen in its own pid namespace, equals the caller's, with `hipErrorInvalidContext`. Ranks in
/// different containers (pid namespaces) often have equal pids, and [`same_process`] rightly
/// tells them apart, so they use IPC and HIP refuses it. CUDA has no such check. `peer_rank`: the
/// rank whose record `peer` is.
pub fn same_pid_refusal(e: &crate::gpu::Error, me: &Record, peer_rank: usize, peer: &Record) -> Option<String> {
    let crate::gpu::Error::Runtime { call: "hipIpcOpenMemHandle", runtime: "hip", code, .. } = e else { return None };
    (*code == HIP_ERROR_INVALID_CONTEXT && peer.host == me.host && peer.pid == me.pid && peer.pidns != me.pidns).then(
        || {
            format!(
                "rcclx kernels off: rank {} runs in another pid namespace (container) with this process's pid {}, \
                 and HIP refuses to open an IPC handle whose owner pid equals the caller's \
                 (hipIpcOpenMemHandle: hipErrorInvalidContext); every call forwards to the stock library. \
                 Fix: run the ranks in one pid namespace (e.g. docker/podman run --pid=host, or all ranks \
                 in one container)",
                peer_rank, me.pid
            )
        },
    )
}

/// Each rank's pid where it names a process this one can check (same host and pid namespace);
/// `None` for the others (a container's pid 7 is not ours).
pub fn visible_pids(recs: &[Record], me: &Record) -> Vec<Option<u32>> {
    recs.iter().map(|r| (r.pidns == me.pidns && r.host == me.host).then_some(r.pid)).collect()
}

/// The verdict, and the map of the ranks it holds for. Every rank capable, same arch and sizes,
/// and either all on one host (and one machine) with 2..=[`MAX_RANKS`] ranks, or, where the agreed
/// policies ask for it ([`Policies::across_hosts`]), on several hosts of the same number of ranks
/// each (at most [`MAX_RANKS`]; one only with low precision, the rail then being the whole step),
/// each host on one machine. Ranks of one host are each on a GPU of their own unless every
/// rank's setup allows sharing (`super::Sharing`).
pub fn verdict(nranks: usize, recs: &[Record]) -> Result<RankMap, String> {
    if recs.len() != nranks || !(2..=MAX_COMM_RANKS).contains(&nranks) {
        return Err(format!("{nranks} ranks (rcclx serves 2..={MAX_COMM_RANKS})"));
    }
    for (p, r) in recs.iter().enumerate() {
        if r.magic != MAGIC {
            return Err(format!("rank {p} runs another rcclx version"));
        }
        if r.capable == 0 {
            return Err(format!("rank {p} cannot take part (no kernels for its GPU)"));
        }
        if r.simulated != recs[0].simulated {
            let (set, unset) = if r.simulated == 1 { (p, 0) } else { (0, p) };
            return Err(format!("RCCLX_SIM_HOSTID is set on rank {set} and not on rank {unset}"));
        }
        if r.arch != recs[0].arch
            || r.staging_bytes != recs[0].staging_bytes
            || r.max_blocks != recs[0].max_blocks
            || r.multiprocessors != recs[0].multiprocessors
            || r.policies.ll_max != recs[0].policies.ll_max
        {
            return Err(format!("rank {p} differs in GPU arch, multiprocessor count or buffer sizes"));
        }
        if r.shared_gpus != recs[0].shared_gpus || r.grid_cap != recs[0].grid_cap {
            return Err(format!("rank {p} differs in GPU sharing or grid cap (NCCL_MAX_CTAS, maxCTAs)"));
        }
    }
    // The stream kernels run in pairs of blocks: a budget of one block is below every route's.
    if recs[0].grid_cap == 1 {
        return Err("its SM budget is one block per grid (NCCL_MAX_CTAS / maxCTAs = 1): rcclx's kernels need 2".into());
    }
    let map = RankMap::of(&recs.iter().map(|r| r.host).collect::<Vec<_>>());
    let simulated = recs[0].simulated == 1;
    if map.hosts() > 1 {
        let policies = &recs[0].policies;
        if !policies.across_hosts() {
            return Err(if simulated {
                "ranks on more than one simulated host (RCCLX_SIM_HOSTID differs), and nothing runs across hosts \
                 (RCCL_LOW_PRECISION_ENABLE / RCCLX_HIER_EXACT unset)"
                    .into()
            } else {
                "ranks on more than one host, and nothing runs across hosts (RCCL_LOW_PRECISION_ENABLE / \
                 RCCLX_HIER_EXACT unset)"
                    .into()
            });
        }
        let Some(local) = map.uniform() else {
            return Err(format!(
                "hosts of different rank counts {:?}: the rails need the same count on every host",
                map.sizes()
            ));
        };
        if local > MAX_RANKS {
            return Err(format!("{local} ranks per host (rcclx kernels serve at most {MAX_RANKS})"));
        }
        if local == 1 && !policies.lowp_across_hosts() {
            return Err("one rank per host, and low precision off: the exact hierarchy would be the stock call".into());
        }
    } else if nranks > MAX_RANKS {
        return Err(format!("{nranks} ranks on one host (rcclx kernels serve 2..={MAX_RANKS})"));
    }
    for h in 0..map.hosts() {
        let ranks = map.host(h);
        let first = &recs[ranks[0]];
        if ranks.iter().any(|&p| recs[p].machine != first.machine) {
            return Err(if simulated {
                "ranks on more than one machine (their boot ids differ), though RCCLX_SIM_HOSTID names one host: \
                 they cannot map each other's memory"
                    .into()
            } else {
                "ranks on more than one host".into()
            });
        }
        if recs[0].shared_gpus == 0 {
            for (i, &p) in ranks.iter().enumerate() {
                if let Some(&q) = ranks[..i].iter().find(|&&q| recs[q].gpu == recs[p].gpu) {
                    return Err(format!("ranks {q} and {p} are on one GPU"));
                }
            }
        }
    }
    Ok(map)
}

/// Whether any rank's host is simulated (`RCCLX_SIM_HOSTID`): then a verdict that does not
/// hold is a misconfiguration, which every rank reports as a warning.
pub fn simulated(recs: &[Record]) -> bool {
    recs.iter().any(|r| r.simulated == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(n: usize) -> Vec<Record> {
        (0..n)
            .map(|r| {
                let mut x = Record::zeroed();
                x.magic = MAGIC;
                x.host = 7;
                x.capable = 1;
                x.staging_bytes = 1 << 20;
                x.gpu = 100 + r as u64;
                x
            })
            .collect()
    }

    #[test]
    fn round_trip() {
        let mut r = recs(1).remove(0);
        r.pid = 42;
        r.arch[..5].copy_from_slice(b"sm_90");
        let back = Record::from_bytes(r.as_bytes());
        assert_eq!(back.as_bytes(), r.as_bytes());
    }

    #[test]
    fn every_disagreement_turns_the_kernels_off() {
        assert!(verdict(2, &recs(2)).is_ok());
        assert!(verdict(1, &recs(1)).is_err());
        assert!(verdict(9, &recs(9)).is_err());
        for change in 0..9 {
            let mut v = recs(3);
            match change {
                0 => v[2].capable = 0,
                1 => v[1].host = 8,
                2 => v[2].staging_bytes = 2 << 20,
                3 => v[2].gpu = v[0].gpu,
                4 => v[1].shared_gpus = 1,
                5 => v[2].grid_cap = 16,
                6 => v[2].machine = 9,
                7 => v[1].simulated = 1,
                _ => v[1].magic = 1,
            }
            for rank in 0..3 {
                assert!(verdict(3, &v).is_err(), "change {change} rank {rank}");
            }
        }
    }

    #[test]
    fn an_sm_budget_of_one_block_forwards_and_two_do_not() {
        for (cap, ok) in [(0, true), (1, false), (2, true), (64, true)] {
            let mut v = recs(2);
            v.iter_mut().for_each(|r| r.grid_cap = cap);
            assert_eq!(verdict(2, &v).is_ok(), ok, "grid cap {cap}");
        }
    }

    #[test]
    fn one_process_is_one_pid_in_one_namespace() {
        let v = recs(2);
        let (mut a, mut b) = (v[0], v[1]);
        a.pid = 7;
        b.pid = 7;
        a.pidns = 4026531836;
        b.pidns = 4026531836;
        assert!(same_process(&a, &b));
        b.pidns = 4026532000; // another container's pid 7
        assert!(!same_process(&a, &b));
        b.pidns = a.pidns;
        b.host ^= 1;
        assert!(!same_process(&a, &b));
    }

    #[test]
    fn hip_refusing_a_same_pid_peer_in_another_container_is_named() {
        let v = recs(2);
        let (mut me, mut peer) = (v[0], v[1]);
        (me.pid, me.pidns, peer.pid, peer.pidns) = (7, 4026531836, 7, 4026532000);
        let err = |call, runtime, code| crate::gpu::Error::Runtime {
            call,
            detail: "on device 0".into(),
            runtime,
            code,
            message: String::new(),
        };
        let refused = err("hipIpcOpenMemHandle", "hip", HIP_ERROR_INVALID_CONTEXT);
        let why = same_pid_refusal(&refused, &me, 1, &peer).expect("HIP's pid check");
        for needle in ["rank 1", "pid 7", "pid namespace", "hipErrorInvalidContext", "--pid=host", "kernels off"] {
            assert!(why.contains(needle), "{needle:?} not in {why:?}");
        }
        // Anything else is another failure: another code, call or runtime, another pid, one
        // namespace (then it is one process, which never opens IPC), another host.
        assert_eq!(same_pid_refusal(&err("hipIpcOpenMemHandle", "hip", 1), &me, 1, &peer), None);
        assert_eq!(same_pid_refusal(&err("hipIpcGetMemHandle", "hip", 201), &me, 1, &peer), None);
        assert_eq!(same_pid_refusal(&err("cuIpcOpenMemHandle", "cuda", 201), &me, 1, &peer), None);
        assert_eq!(same_pid_refusal(&crate::gpu::Error::NoDevice, &me, 1, &peer), None);
        let mut other = peer;
        other.pid = 8;
        assert_eq!(same_pid_refusal(&refused, &me, 1, &other), None);
        other = peer;
        other.pidns = me.pidns;
        assert_eq!(same_pid_refusal(&refused, &me, 1, &other), None);
        other = peer;
        other.host ^= 1;
        assert_eq!(same_pid_refusal(&refused, &me, 1, &other), None);
    }

    /// With `RCCLX_PRINT_IDENTITY` set (the test below runs this binary so, in a new pid
    /// namespace): prints this process's identity as a record sees it.
    #[test]
    fn print_identity() {
        if std::env::var_os("RCCLX_PRINT_IDENTITY").is_some() {
            let (host, pid, pidns) =
                (super::super::host::host_id(), std::process::id(), super::super::host::pid_namespace());
            println!("identity {host} {pid} {pidns}");
        }
    }

    #[test]
    fn a_process_in_another_pid_namespace_is_another_process() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("unshare")
            .args(["--pid", "--fork"])
            .arg(&exe)
            .args(["--exact", "clique::record::tests::print_identity", "--nocapture", "--test-threads=1"])
            .env("RCCLX_PRINT_IDENTITY", "1")
            .output();
        let text = out.as_ref().map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
        // (The test harness may print the test's name on the same line.)
        let Some(line) = text.lines().find_map(|l| l.rfind("identity ").map(|i| &l[i..])) else {
            eprintln!("SKIP: no new pid namespace here (unshare --pid --fork: {:?})", out.map(|o| o.status));
            return;
        };
        let f: Vec<u64> = line.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
        let mut me = recs(2).remove(0);
        (me.host, me.pid, me.pidns) =
            (super::super::host::host_id(), std::process::id(), super::super::host::pid_namespace());
        let mut peer = me;
        (peer.host, peer.pid, peer.pidns) = (f[0], f[1] as u32, f[2]);
        assert_eq!(peer.host, me.host, "one host");
        assert_ne!(peer.pidns, me.pidns, "unshare made a new pid namespace");
        assert!(!same_process(&me, &peer));
        // Even with our own pid (pids repeat across namespaces), the peer is another process,
        // and its pid says nothing about liveness here.
        peer.pid = me.pid;
        assert!(!same_process(&me, &peer));
        assert_eq!(visible_pids(&[me, peer], &me), vec![Some(me.pid), None]);
    }

    /// Ranks of one GPU as simulated hosts (RCCLX_SIM_HOSTID), and the ways it can be set
    /// wrong: every rank reaches the same refusal, which names the variable, and warns.
    #[test]
    fn simulated_hosts_join_only_ranks_of_one_machine_that_agree() {
        let sim = |n: usize| {
            let mut v = recs(n);
            for r in &mut v {
                (r.simulated, r.shared_gpus, r.grid_cap, r.gpu, r.machine) = (1, 1, 16, 100, 5);
            }
            v
        };
        let all_refuse = |v: &[Record], needle: &str| {
            let n = v.len();
            let first = verdict(n, v).expect_err("a wrong simulated host was accepted");
            for rank in 0..n {
                assert_eq!(verdict(n, v).as_ref(), Err(&first), "rank {rank} reached another verdict");
            }
            assert!(first.contains(needle), "{needle:?} not in {first:?}");
            assert!(simulated(v), "a refusal of simulated hosts is warned");
        };
        // One id on one machine: 8 ranks on one GPU form one clique.
        assert_eq!(verdict(8, &sim(8)).map(|m| m.hosts()), Ok(1));
        assert!(!simulated(&recs(2)));
        // Different ids on ranks that share memory.
        let mut v = sim(8);
        v[5].host = 8;
        all_refuse(&v, "more than one simulated host (RCCLX_SIM_HOSTID differs)");
        // The same id on ranks that cannot map each other (another machine: another boot id).
        let mut v = sim(4);
        v[3].machine = 6;
        all_refuse(&v, "more than one machine");
        // Set on some ranks only (their host ids may even agree).
        let mut v = sim(3);
        v[2].simulated = 0;
        all_refuse(&v, "RCCLX_SIM_HOSTID is set on rank 0 and not on rank 2");
        let mut v = sim(3);
        v[0].simulated = 0;
        all_refuse(&v, "RCCLX_SIM_HOSTID is set on rank 1 and not on rank 0");
    }

    /// Ranks on several hosts form one clique per host when the agreed policies run something
    /// across hosts (rank 0's), with the same number of ranks on every host.
    #[test]
    fn several_hosts_form_a_clique_each_when_something_runs_across_them() {
        let hosts = |ids: &[u64], lowp: bool| {
            let mut v = recs(ids.len());
            for (r, &id) in v.iter_mut().zip(ids) {
                (r.host, r.machine) = (id, id);
                r.policies.colls[crate::intercept::Coll::AllReduce as usize].lowp = lowp as u64;
            }
            v
        };
        let refusal = |v: &[Record]| verdict(v.len(), v).expect_err("accepted");
        assert!(refusal(&hosts(&[1, 1, 2, 2], false)).contains("more than one host, and nothing runs across"));
        let m = verdict(4, &hosts(&[1, 2, 1, 2], true)).unwrap();
        assert_eq!((m.hosts(), m.uniform(), m.host(1), m.place(3)), (2, Some(2), &[1, 3][..], (1, 1)));
        let mut exact = hosts(&[1, 1, 2, 2], false);
        exact[0].policies.hier_exact = 1;
        assert_eq!(verdict(4, &exact).map(|m| m.hosts()), Ok(2));
        assert!(refusal(&hosts(&[1, 1, 2], true)).contains("different rank counts [2, 1]"));
        assert_eq!(verdict(4, &hosts(&[1, 2, 3, 4], true)).map(|m| m.uniform()), Ok(Some(1)));
        let mut exact = hosts(&[1, 2, 3, 4], false);
        exact[0].policies.hier_exact = 1;
        assert!(refusal(&exact).contains("one rank per host"));
        assert!(refusal(&hosts(&[[1; 9], [2; 9]].concat(), true)).contains("9 ranks per host"));
        assert!(verdict(16, &hosts(&[[1; 8], [2; 8]].concat(), true)).is_ok());
        let mut v = hosts(&[1, 1, 2, 2], true);
        v[1].machine = 9;
        assert!(refusal(&v).contains("more than one host"));
        // A GPU id may repeat on another host, never within one (unless sharing is allowed).
        let mut v = hosts(&[1, 1, 2, 2], true);
        v[2].gpu = v[0].gpu;
        assert!(verdict(4, &v).is_ok());
        v[1].gpu = v[0].gpu;
        assert_eq!(refusal(&v), "ranks 0 and 1 are on one GPU");
    }

    #[test]
    fn ranks_share_a_gpu_only_when_every_setup_allows_it() {
        let mut v = recs(4);
        v[3].gpu = v[1].gpu;
        assert_eq!(verdict(4, &v), Err("ranks 1 and 3 are on one GPU".to_string()));
        for r in &mut v {
            r.shared_gpus = 1;
            r.grid_cap = 33;
        }
        assert!(verdict(4, &v).is_ok());
    }
}
