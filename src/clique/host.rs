//! Host identity: which ranks share a host (and so can map each other's memory).

/// Where this process runs, as its setup records tell its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Ranks with equal ids are on one host and may form a clique: [`host_id`].
    pub host: u64,
    /// The running kernel (a hash of its boot id; processes in containers of one host share
    /// it): ranks under different kernels never map each other's memory, whatever host ids they
    /// were given.
    pub machine: u64,
    /// The host id is `RCCLX_SIM_HOSTID`'s (a simulated host).
    pub simulated: bool,
}

/// `RCCLX_SIM_HOSTID`'s value when it names a simulated host: set and not empty.
pub fn simulated_host(sim_hostid: Option<&str>) -> Option<&str> {
    sim_hostid.filter(|s| !s.is_empty())
}

impl Identity {
    /// This process's identity: a simulated host when `sim_hostid` (`RCCLX_SIM_HOSTID`) names
    /// one ([`simulated_host`]).
    pub fn of_process(sim_hostid: Option<&str>) -> Identity {
        let sim = simulated_host(sim_hostid);
        Identity {
            host: sim.map_or_else(host_id, |s| fnv1a(format!("rcclx-sim:{s}").as_bytes())),
            machine: fnv1a(boot_id().as_bytes()),
            simulated: sim.is_some(),
        }
    }
}

/// An identifier of this host, equal in every process on it and different across hosts (with
/// overwhelming probability): a hash of the host name and the kernel boot id, like NCCL's host
/// hash. `NCCL_HOSTID` replaces both, as in NCCL. Ranks with equal ids can use IPC.
/// (`RCCLX_SIM_HOSTID` replaces this for rcclx alone: [`Identity::of_process`].)
pub fn host_id() -> u64 {
    let text = match crate::config::env("NCCL_HOSTID") {
        Some(id) if !id.is_empty() => id,
        _ => format!("{}{}", read_trimmed("/proc/sys/kernel/hostname"), boot_id()),
    };
    fnv1a(text.as_bytes())
}

/// The kernel's boot id: random per boot of a machine, shared by every container on it.
fn boot_id() -> String {
    read_trimmed("/proc/sys/kernel/random/boot_id")
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`; 0 if it cannot be read):
/// equal pids name one process only within one namespace (containers on one host have their
/// own), as NCCL's pid hash also knows.
pub fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

/// An identifier of a GPU, the same in every process of the host whatever its device numbering
/// (`CUDA_VISIBLE_DEVICES`): a hash of its PCI bus id.
pub fn gpu_id(pci_bus_id: &str) -> u64 {
    fnv1a(pci_bus_id.trim().to_ascii_lowercase().as_bytes())
}

/// 64-bit FNV-1a: stable across builds and processes (unlike `std`'s `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_id_is_stable() {
        assert_eq!(host_id(), host_id());
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(gpu_id("0000:1B:00.0"), gpu_id("0000:1b:00.0"));
        assert_ne!(gpu_id("0000:1b:00.0"), gpu_id("0000:1c:00.0"));
        assert_eq!(pid_namespace(), pid_namespace());
        assert_ne!(pid_namespace(), 0, "Linux has /proc/self/ns/pid");
    }

    #[test]
    fn a_simulated_host_replaces_the_host_id_but_not_the_machine() {
        let real = Identity::of_process(None);
        assert_eq!(real, Identity { host: host_id(), machine: fnv1a(boot_id().as_bytes()), simulated: false });
        assert_eq!(Identity::of_process(Some("")), real, "an empty RCCLX_SIM_HOSTID is unset");
        let (a, b) = (Identity::of_process(Some("a")), Identity::of_process(Some("b")));
        assert!(a.simulated && b.simulated);
        assert_ne!(a.host, b.host);
        assert_ne!(a.host, real.host);
        assert_eq!(a, Identity::of_process(Some("a")), "the same id names the same host in every process");
        assert_eq!((a.machine, b.machine), (real.machine, real.machine), "one machine whatever the id");
    }
}
