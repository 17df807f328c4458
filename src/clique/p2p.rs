//! Whether the stock library would let every pair of a host's GPUs talk peer to peer
//! (`topo`: NCCL's path types and P2P level). rcclx's kernels read peers' memory directly, so a
//! host with one pair farther apart than the level keeps them off: each rank checks its host's
//! pairs after the verdict and, refusing, takes no part (the next exchange turns the kernels off
//! on every rank). Every rank of a host reads the same machine, so they agree.

use std::path::Path;

use super::record::Record;
use crate::gpu::{self, Vendor};
use crate::topo::{self, PathType};

/// The farthest pair of `gpus` (PCI bus ids) whose path `path(a, b)` knows, with that path
/// (ranks sharing a GPU: `LOC`); pairs of unknown path are left out (nothing is refused on a
/// guess).
fn farthest(gpus: &[String], path: impl Fn(&str, &str) -> Option<PathType>) -> Option<(PathType, usize, usize)> {
    let mut worst: Option<(PathType, usize, usize)> = None;
    for i in 0..gpus.len() {
        for j in i + 1..gpus.len() {
            let Some(p) = (if gpus[i] == gpus[j] { Some(PathType::Loc) } else { path(&gpus[i], &gpus[j]) }) else {
                continue;
            };
            if worst.is_none_or(|(w, ..)| p > w) {
                worst = Some((p, i, j));
            }
        }
    }
    worst
}

/// Why the ranks of `host` (their records, by local index) may not go peer to peer at `level`
/// (`NCCL_P2P_LEVEL`; `None`: NCCL's default), given `path(a, b)` between two bus ids and
/// whether the CPU is AMD's; `None` when they may.
pub(super) fn refusal_by(
    host: &[Record],
    level: Option<PathType>,
    amd_cpu: bool,
    path: impl Fn(&str, &str) -> Option<PathType>,
) -> Option<String> {
    let gpus: Vec<String> = host.iter().map(Record::pci_bus).collect();
    if gpus.iter().any(String::is_empty) {
        return None; // a rank that could not say (no kernels: it refuses on its own)
    }
    let mut distinct = gpus.clone();
    distinct.sort();
    distinct.dedup();
    let (allowed, whose) = match level {
        Some(l) => (l, "NCCL_P2P_LEVEL"),
        None => (topo::default_level(amd_cpu, distinct.len()), "NCCL's default level"),
    };
    let (worst, i, j) = farthest(&gpus, path)?;
    (worst > allowed).then(|| {
        format!(
            "the path between GPUs {} (local rank {i}) and {} (local rank {j}) is {}, farther than {whose} {}: \
             the stock library would not go peer to peer there",
            gpus[i],
            gpus[j],
            worst.name(),
            allowed.name()
        )
    })
}

/// [`refusal_by`] on this machine: NVLink from NVML, xGMI from KFD's topology, else PCI paths
/// from sysfs.
pub(super) fn refusal(host: &[Record], level: Option<PathType>) -> Option<String> {
    let root = Path::new("/");
    let vendor = gpu::runtime().map(|rt| rt.vendor()).ok()?;
    let linked = |a: &str, b: &str| match vendor {
        Vendor::Cuda => gpu::nvml::nvlink_between(a, b),
        Vendor::Hip => topo::xgmi_linked(root, a, b),
    };
    refusal_by(host, level, topo::amd_cpu(root), |a, b| topo::path_between(root, a, b, linked(a, b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(buses: &[&str]) -> Vec<Record> {
        buses
            .iter()
            .map(|b| {
                let mut r = Record::zeroed();
                r.pci_bus[..b.len()].copy_from_slice(b.as_bytes());
                r
            })
            .collect()
    }

    #[test]
    fn a_host_goes_peer_to_peer_where_the_stock_library_would() {
        use PathType::*;
        // Buses 1 and 2 share an NVLink, 3 is on a PCIe switch with 1, 4 behind a host bridge;
        // 5's paths are unknown.
        let path = |a: &str, b: &str| -> Option<PathType> {
            let mut k = [a, b];
            k.sort();
            match k {
                [_, "5"] => None,
                ["1", "2"] => Some(Nvl),
                ["1", "3"] | ["2", "3"] => Some(Pix),
                [_, "4"] => Some(Phb),
                _ => Some(Sys),
            }
        };
        let refused = |buses: &[&str], level, amd| refusal_by(&host(buses), level, amd, path);
        assert_eq!(refused(&["1", "2"], None, false), None);
        assert_eq!(refused(&["1", "2", "3"], None, false), None, "PIX is within PXB");
        let why = refused(&["1", "2", "4"], None, false).expect("PHB is beyond PXB");
        assert!(why.contains("is PHB, farther than NCCL's default level PXB"), "{why}");
        // NCCL_P2P_LEVEL=NVL keeps an NVLink pair (the old rule turned rcclx off for any level
        // below SYS), and refuses the PCIe one.
        assert_eq!(refused(&["1", "2"], Some(Nvl), false), None);
        assert!(refused(&["1", "3"], Some(Nvl), false).is_some_and(|w| w.contains("NCCL_P2P_LEVEL NVL")));
        assert_eq!(refused(&["1", "4"], Some(Sys), false), None);
        // An AMD CPU with two GPUs: SYS by default; with three, PXB again.
        assert_eq!(refused(&["1", "4"], None, true), None);
        assert!(refused(&["1", "2", "4"], None, true).is_some());
        // Ranks sharing a GPU are LOC; an unknown path refuses nothing, a known one still does.
        assert_eq!(refused(&["1", "1"], Some(Nvl), false), None);
        assert_eq!(refused(&["1", "5"], Some(Loc), false), None);
        assert!(refused(&["1", "5", "4"], None, false).is_some_and(|w| w.contains("PHB")));
    }
}
