//! How two GPUs of one host are connected, in NCCL's terms, and whether NCCL would let them
//! talk peer to peer (`ncclTopoCheckP2p`, `src/graph/paths.cc`): a pair is P2P when its path
//! type is at most the P2P level, `NCCL_P2P_LEVEL` if set, else `PXB` (`SYS` on an AMD x86 CPU
//! with at most two GPUs). rcclx's kernels read and write peers' memory directly, so they run
//! only where the stock library would use P2P between every pair.
//!
//! The path type comes from the machine, not from a runtime: an NVLink or xGMI link between
//! the two GPUs is `NVL` (NVML on NVIDIA, `gpu::nvml`; KFD's topology in sysfs on AMD, where
//! RCCL also counts xGMI as NVLink); otherwise the PCI path in sysfs: under one PCIe switch
//! `PIX`, through more than one `PXB`, through a CPU's host bridge `PHB`, across CPU sockets
//! (NUMA nodes) `SYS`. Where that cannot be read the path is unknown and nothing is refused
//! (rcclx then relies on the driver's peer access, as before).
//!
//! Layer: base (std only; the sysfs root is a parameter, so tests build fake machines).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// NCCL's path types, nearest first (`topoPathTypeStr`; the order is the comparison).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathType {
    Loc,
    Nvl,
    Nvb,
    C2c,
    Pix,
    Pxb,
    P2c,
    Pxn,
    Phb,
    Sys,
}

impl PathType {
    pub const ALL: [PathType; 10] = [
        PathType::Loc,
        PathType::Nvl,
        PathType::Nvb,
        PathType::C2c,
        PathType::Pix,
        PathType::Pxb,
        PathType::P2c,
        PathType::Pxn,
        PathType::Phb,
        PathType::Sys,
    ];

    /// NCCL's name: `LOC`, `NVL`, ..., `SYS`.
    pub fn name(self) -> &'static str {
        ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"][self as usize]
    }

    /// A level as `NCCL_P2P_LEVEL` gives it (NCCL's `ncclGetLevel`): a name (case matters), or
    /// an old number (0 `LOC`, 1 `PIX`, 2 `PXB`, 3 `PHB`, 4 and above `SYS`, C's `strtol`);
    /// anything else is no level.
    pub fn level(text: &str) -> Option<PathType> {
        if let Some(p) = PathType::ALL.into_iter().find(|p| p.name() == text) {
            return Some(p);
        }
        if !text.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        const OLD: [PathType; 5] = [PathType::Loc, PathType::Pix, PathType::Pxb, PathType::Phb, PathType::Sys];
        Some(OLD[(crate::env::c_strtol(text).max(0) as usize).min(OLD.len() - 1)])
    }
}

/// The P2P level NCCL uses without `NCCL_P2P_LEVEL`: `PXB`, or `SYS` on an AMD x86 CPU with at
/// most two GPUs in the communicator on this host.
pub fn default_level(amd_cpu: bool, gpus: usize) -> PathType {
    if amd_cpu && gpus <= 2 { PathType::Sys } else { PathType::Pxb }
}

/// Whether this machine's CPUs are AMD's (`/proc/cpuinfo` under `root`).
pub fn amd_cpu(root: &Path) -> bool {
    std::fs::read_to_string(root.join("proc/cpuinfo")).is_ok_and(|t| t.contains("AuthenticAMD"))
}

/// The sysfs folder of the PCI device `bus_id` (`0000:1b:00.0`), resolved: its path names
/// every bridge above it.
pub fn pci_device(root: &Path, bus_id: &str) -> Option<PathBuf> {
    std::fs::canonicalize(root.join("sys/bus/pci/devices").join(bus_id.trim().to_ascii_lowercase())).ok()
}

/// The PCI path type between two devices from their sysfs folders ([`pci_device`]): the
/// devices they share above them (bridges), and, without one, whether their root complexes
/// sit on the same NUMA node.
pub fn pci_path(a: &Path, b: &Path) -> PathType {
    // .../pci0000:00/<root port>/<switch upstream>/<downstream>/<device>: the names after the
    // root complex, and the root complex.
    let chain = |p: &Path| -> (String, Vec<String>) {
        let names: Vec<String> = p.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let root = names.iter().position(|n| n.starts_with("pci")).unwrap_or(0);
        (names.get(root).cloned().unwrap_or_default(), names[root + 1..].to_vec())
    };
    let ((root_a, a_chain), (root_b, b_chain)) = (chain(a), chain(b));
    if root_a != root_b {
        let numa =
            |p: &Path| std::fs::read_to_string(p.join("numa_node")).ok().and_then(|t| t.trim().parse::<i64>().ok());
        return match (numa(a), numa(b)) {
            (Some(x), Some(y)) if x != y && x >= 0 && y >= 0 => PathType::Sys,
            _ => PathType::Phb,
        };
    }
    let shared = a_chain.iter().zip(&b_chain).take_while(|(x, y)| x == y).count();
    if shared == 0 {
        return PathType::Phb; // different root ports: through the host bridge
    }
    // One switch: each device right below a downstream port of the shared upstream port.
    if a_chain.len() == shared + 2 && b_chain.len() == shared + 2 { PathType::Pix } else { PathType::Pxb }
}

/// KFD's topology node (`/sys/class/kfd/kfd/topology/nodes/<n>`) of the AMD GPU at `bus_id`:
/// its `properties` hold `domain` and `location_id` (bus << 8 | device << 3 | function).
fn kfd_node(root: &Path, bus_id: &str) -> Option<(PathBuf, u64)> {
    let (domain, rest) = bus_id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let location = hex(bus)? << 8 | hex(dev)? << 3 | hex(func)?;
    let domain = hex(domain)?;
    let nodes = root.join("sys/class/kfd/kfd/topology/nodes");
    for entry in std::fs::read_dir(&nodes).ok()?.flatten() {
        let props = std::fs::read_to_string(entry.path().join("properties")).unwrap_or_default();
        if property(&props, "location_id") == Some(location) && property(&props, "domain").unwrap_or(0) == domain {
            let id = entry.file_name().to_string_lossy().parse().ok()?;
            return Some((entry.path(), id));
        }
    }
    None
}

fn property(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// KFD's link type of an xGMI link (`CRAT_IOLINK_TYPE_XGMI`).
const KFD_LINK_XGMI: u64 = 11;

/// Whether KFD's topology has an xGMI link from the AMD GPU at `a` to the one at `b` (`None`:
/// either is not in it).
pub fn xgmi_linked(root: &Path, a: &str, b: &str) -> Option<bool> {
    let ((node_a, _), (_, id_b)) = (kfd_node(root, a)?, kfd_node(root, b)?);
    let linked = ["io_links", "p2p_links"].iter().any(|dir| {
        std::fs::read_dir(node_a.join(dir)).into_iter().flatten().flatten().any(|link| {
            let props = std::fs::read_to_string(link.path().join("properties")).unwrap_or_default();
            property(&props, "type") == Some(KFD_LINK_XGMI) && property(&props, "node_to") == Some(id_b)
        })
    });
    Some(linked)
}

/// The path type between the GPUs at PCI bus ids `a` and `b`, given whether they share an
/// NVLink/xGMI link (`linked`: `None` when that cannot be told): `LOC` for one GPU, `NVL` when
/// linked, else the PCI path; `None` when neither can be read.
pub fn path_between(root: &Path, a: &str, b: &str, linked: Option<bool>) -> Option<PathType> {
    if a.trim().eq_ignore_ascii_case(b.trim()) {
        return Some(PathType::Loc);
    }
    match linked {
        Some(true) => Some(PathType::Nvl),
        // A link that cannot be ruled out leaves the path unknown: a PCI path read past an
        // NVLink would refuse what NCCL allows.
        None => None,
        Some(false) => Some(pci_path(&pci_device(root, a)?, &pci_device(root, b)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn levels_as_nccl_reads_them() {
        assert_eq!(PathType::level("NVL"), Some(PathType::Nvl));
        assert_eq!(PathType::level("SYS"), Some(PathType::Sys));
        assert_eq!(PathType::level("PXN"), Some(PathType::Pxn));
        assert_eq!(PathType::level("nvl"), None, "NCCL compares names with strcmp");
        assert_eq!(PathType::level("bogus"), None);
        let old = ["0", "1", "2", "3", "4", "9", "0x2"].map(|t| PathType::level(t).unwrap());
        use PathType::*;
        assert_eq!(old, [Loc, Pix, Pxb, Phb, Sys, Sys, Pxb]);
        assert!(Nvl < Pix && Pix < Pxb && Pxb < Phb && Phb < Sys);
        assert_eq!((default_level(false, 8), default_level(true, 2), default_level(true, 3)), (Pxb, Sys, Pxb));
    }

    /// The stock library's own reading of `NCCL_P2P_LEVEL`, value by value: NCCL 2.28.9 (the
    /// `nvidia-nccl-cu13` wheel) on one H100, 2026-12-07, from its INFO line "NCCL_P2P_LEVEL set
    /// by environment to X" (`tests/gpu/p2p_level.c`, `STEPS=p2p bash scripts/gpu-tests.sh`;
    /// `none`: no such line, the default stays). rcclx reads every value the same.
    #[test]
    fn levels_as_the_stock_library_read_them_on_a_gpu() {
        let data = include_str!("../tests/data/nccl-p2p-levels.tsv");
        let mut n = 0;
        for line in data.lines() {
            let (value, stock) = line.split_once('\t').expect("value<TAB>level");
            let want = (stock != "none").then(|| PathType::ALL.into_iter().find(|p| p.name() == stock).unwrap());
            assert_eq!(PathType::level(value), want, "NCCL_P2P_LEVEL={value:?}");
            n += 1;
        }
        assert_eq!(n, 22, "every value the probe asked about");
    }

    /// A fake machine under a temporary folder: PCI devices at the given paths below
    /// `sys/devices`, each linked from `sys/bus/pci/devices/<its name>`, with a NUMA node.
    struct Machine(PathBuf);

    impl Machine {
        fn new(name: &str) -> Machine {
            let root = std::env::temp_dir().join(format!("rcclx-topo-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
            Machine(root)
        }
        fn device(&self, path: &str, numa: i32) -> &Self {
            let dir = self.0.join("sys/devices").join(path);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("numa_node"), format!("{numa}\n")).unwrap();
            let name = Path::new(path).file_name().unwrap();
            std::os::unix::fs::symlink(&dir, self.0.join("sys/bus/pci/devices").join(name)).unwrap();
            self
        }
        fn path(&self, a: &str, b: &str) -> Option<PathType> {
            path_between(&self.0, a, b, Some(false))
        }
    }

    impl Drop for Machine {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn pci_paths_as_nccl_names_them() {
        let m = Machine::new("pci");
        // Two GPUs under one switch, a third under a second switch below the first, a fourth
        // on another root port, a fifth on another root complex of the same NUMA node, a sixth
        // on the other socket.
        let sw = "pci0000:00/0000:00:01.0/0000:01:00.0";
        m.device(&format!("{sw}/0000:02:00.0/0000:03:00.0"), 0)
            .device(&format!("{sw}/0000:02:01.0/0000:04:00.0"), 0)
            .device(&format!("{sw}/0000:02:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"), 0)
            .device("pci0000:00/0000:00:02.0/0000:08:00.0", 0)
            .device("pci0000:40/0000:40:01.0/0000:41:00.0", 0)
            .device("pci0000:80/0000:80:01.0/0000:81:00.0", 1);
        use PathType::*;
        assert_eq!(m.path("0000:03:00.0", "0000:04:00.0"), Some(Pix));
        assert_eq!(m.path("0000:04:00.0", "0000:03:00.0"), Some(Pix));
        assert_eq!(m.path("0000:03:00.0", "0000:07:00.0"), Some(Pxb));
        assert_eq!(m.path("0000:03:00.0", "0000:08:00.0"), Some(Phb));
        assert_eq!(m.path("0000:08:00.0", "0000:41:00.0"), Some(Phb));
        assert_eq!(m.path("0000:41:00.0", "0000:81:00.0"), Some(Sys));
        assert_eq!(m.path("0000:03:00.0", "0000:03:00.0"), Some(Loc));
        assert_eq!(path_between(&m.0, "0000:03:00.0", "0000:04:00.0", Some(true)), Some(Nvl));
        // Unknown: a link that cannot be ruled out, or a device sysfs does not show.
        assert_eq!(path_between(&m.0, "0000:03:00.0", "0000:81:00.0", None), None);
        assert_eq!(m.path("0000:03:00.0", "0000:99:00.0"), None);
    }

    #[test]
    fn xgmi_links_from_kfd_topology() {
        let m = Machine::new("kfd");
        let nodes = m.0.join("sys/class/kfd/kfd/topology/nodes");
        // Node 0 a CPU; nodes 1-3 GPUs at buses 0x0c, 0x22, 0x38; xGMI 1->2, PCIe 1->3.
        let node = |n: u32, location: u64, links: &[(u64, u32)]| {
            let dir = nodes.join(n.to_string());
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("properties"), format!("cpu_cores_count 0\nlocation_id {location}\ndomain 0\n"))
                .unwrap();
            for (i, (kind, to)) in links.iter().enumerate() {
                let l = dir.join("io_links").join(i.to_string());
                fs::create_dir_all(&l).unwrap();
                fs::write(l.join("properties"), format!("type {kind}\nnode_from {n}\nnode_to {to}\nweight 15\n"))
                    .unwrap();
            }
        };
        node(0, 0, &[]);
        node(1, 0x0c << 8, &[(KFD_LINK_XGMI, 2), (2, 3), (2, 0)]);
        node(2, 0x22 << 8, &[(KFD_LINK_XGMI, 1)]);
        node(3, 0x38 << 8, &[(2, 1)]);
        assert_eq!(xgmi_linked(&m.0, "0000:0c:00.0", "0000:22:00.0"), Some(true));
        assert_eq!(xgmi_linked(&m.0, "0000:22:00.0", "0000:0c:00.0"), Some(true));
        assert_eq!(xgmi_linked(&m.0, "0000:0c:00.0", "0000:38:00.0"), Some(false));
        assert_eq!(xgmi_linked(&m.0, "0000:0c:00.0", "0000:99:00.0"), None);
        assert_eq!(xgmi_linked(&m.0, "0001:0c:00.0", "0000:22:00.0"), None, "another PCI domain");
    }
}
