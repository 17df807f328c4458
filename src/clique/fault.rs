//! Setup sites made to fail on purpose (`RCCLX_FAULT_INJECT`, tests only): which site fails on
//! which rank, parsed once per setup.

use crate::error::Error;
use crate::types::ncclResult_t;

/// Setup sites made to fail on purpose (`RCCLX_FAULT_INJECT=SITE[:RANK]`, tests only), one
/// per stage, each with the verdict every rank must reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// `describe`: this rank has no kernels (`capable = 0` in its first record): kernels off.
    pub(super) describe: bool,
    /// `alloc`: its buffers cannot be allocated (`capable = 0` in the second): kernels off.
    pub(super) alloc: bool,
    /// `lease`: its lease file cannot be reserved (a full `/dev/shm`): kernels off.
    pub(super) lease: bool,
    /// `ipc`: opening a peer's IPC handle fails (its "mapped" bit is 0): kernels off.
    pub(super) ipc: bool,
    /// `peer`: enabling peer access fails (its "mapped" bit is 0): kernels off.
    pub(super) peer: bool,
    /// `split`: this rank takes no rail (`NCCL_SPLIT_NOCOLOR`; its "mapped" bit is 0): kernels
    /// off on every rank of a communicator spanning hosts.
    pub(super) split: bool,
    /// `exchange1`..`exchange3`: that exchange cannot be posted (a stock error): the
    /// communicator is in error on this rank, and its peers time out into the same error.
    pub(super) exchange: u8,
}

impl Fault {
    /// The sites, for messages.
    pub const SITES: &'static str = "describe, alloc, lease, ipc, peer, split, exchange1, exchange2, exchange3";

    /// The faults `RCCLX_FAULT_INJECT` asks for on `rank`: only in a build with the cargo
    /// feature `fault-inject` (the GPU test builds, `scripts/gpu-prep.sh`) and in unit tests;
    /// elsewhere the variable is ignored with a warning.
    pub(super) fn from_config(spec: Option<&str>, rank: usize) -> Result<Fault, String> {
        #[cfg(any(test, feature = "fault-inject"))]
        {
            Fault::parse(spec, rank)
        }
        #[cfg(not(any(test, feature = "fault-inject")))]
        {
            let _ = rank;
            static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if spec.is_some_and(|s| !s.trim().is_empty()) && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    "RCCLX_FAULT_INJECT is ignored: this library was built without the test-only feature fault-inject"
                );
            }
            Ok(Fault::default())
        }
    }

    /// `SITE` or `SITE:RANK` (default: every rank), from the configuration read at startup
    /// (`Config::fault_inject`), applied to every setup of the process.
    /// An unknown site or rank is an error (a typo must not pass as a test without a fault).
    #[cfg_attr(not(any(test, feature = "fault-inject")), allow(dead_code))]
    pub fn parse(spec: Option<&str>, rank: usize) -> Result<Fault, String> {
        let mut f = Fault::default();
        let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else { return Ok(f) };
        let (what, on) = match spec.split_once(':') {
            Some((w, r)) => match r.trim().parse::<usize>() {
                Ok(r) => (w.trim(), r == rank),
                Err(_) => return Err(format!("RCCLX_FAULT_INJECT={spec:?}: {r:?} is not a rank")),
            },
            None => (spec, true),
        };
        let mut known = true;
        let set = |flag: &mut bool| *flag = on;
        match what {
            "describe" => set(&mut f.describe),
            "alloc" => set(&mut f.alloc),
            "lease" => set(&mut f.lease),
            "ipc" => set(&mut f.ipc),
            "peer" => set(&mut f.peer),
            "split" => set(&mut f.split),
            "exchange1" => f.exchange = if on { 1 } else { 0 },
            "exchange2" => f.exchange = if on { 2 } else { 0 },
            "exchange3" => f.exchange = if on { 3 } else { 0 },
            _ => known = false,
        }
        if known {
            Ok(f)
        } else {
            Err(format!("RCCLX_FAULT_INJECT={spec:?}: no setup site {what:?} (sites: {})", Self::SITES))
        }
    }

    /// Fails posting exchange `n` (1..=3) when asked to.
    pub(super) fn exchange(&self, n: u8) -> Result<(), Error> {
        if self.exchange == n {
            return Err(Error::new(
                ncclResult_t::SystemError,
                format!("RCCLX_FAULT_INJECT=exchange{n}: posting the exchange fails"),
            ));
        }
        Ok(())
    }
}
