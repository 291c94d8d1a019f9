//! The standard catalogues Placement ships: resource classes from `os-resource-classes`
//! and traits from `os-traits`.
//!
//! Standard resource classes are ordered and append-only upstream; a class's id is its
//! index, and custom classes start at [`CUSTOM_RC_BASE_ID`]. The trait list is a data
//! file generated from the `os-traits` package by `scripts/os-traits.py`, which CI also
//! runs in `check` mode against the pinned package.

/// The 21 standard resource classes, in upstream order (`os_resource_classes.STANDARDS`).
pub const RESOURCE_CLASSES: [&str; 21] = [
    "VCPU",
    "MEMORY_MB",
    "DISK_GB",
    "PCI_DEVICE",
    "SRIOV_NET_VF",
    "NUMA_SOCKET",
    "NUMA_CORE",
    "NUMA_THREAD",
    "NUMA_MEMORY_MB",
    "IPV4_ADDRESS",
    "VGPU",
    "VGPU_DISPLAY_HEAD",
    "NET_BW_EGR_KILOBIT_PER_SEC",
    "NET_BW_IGR_KILOBIT_PER_SEC",
    "PCPU",
    "MEM_ENCRYPTION_CONTEXT",
    "FPGA",
    "PGPU",
    "NET_PACKET_RATE_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC",
];

/// Ids of custom resource classes start here, as upstream's do.
pub const CUSTOM_RC_BASE_ID: i64 = 10000;

/// The trait that marks a provider as sharing its resources through aggregates.
pub const MISC_SHARES_VIA_AGGREGATE: &str = "MISC_SHARES_VIA_AGGREGATE";

const TRAITS_FILE: &str = include_str!("../data/os-traits.txt");

/// Every standard trait, sorted.
pub fn traits() -> impl Iterator<Item = &'static str> {
    TRAITS_FILE
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

pub fn is_standard_resource_class(name: &str) -> bool {
    RESOURCE_CLASSES.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::is_symbol;

    #[test]
    fn traits_file_is_well_formed() {
        let all: Vec<_> = traits().collect();
        assert!(all.len() > 300);
        assert!(all.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        assert!(all
            .iter()
            .all(|t| is_symbol(t) && !t.starts_with("CUSTOM_")));
        assert!(all.contains(&MISC_SHARES_VIA_AGGREGATE));
    }

    #[test]
    fn classes_are_symbols() {
        assert!(RESOURCE_CLASSES.iter().all(|c| is_symbol(c)));
        assert_eq!(RESOURCE_CLASSES[0], "VCPU");
        assert_eq!(
            RESOURCE_CLASSES[20],
            "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC"
        );
    }
}
