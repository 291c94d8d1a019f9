//! vGPU types a GPU offers, read from sysfs, and mdevs made and removed there.
//!
//! Two kernel interfaces (reference gpu-sharing-2026 §1.4):
//!
//! ```text
//! mdev (<= Ampere, or kernel < 6.8): a parent (the PF, or each VF on SR-IOV Ampere)
//!   <parent>/mdev_supported_types/nvidia-1122/{name, description, available_instances,
//!                                               create, devices/}
//!   create: write a UUID to .../create; remove: write 1 to /sys/bus/mdev/devices/<uuid>/remove
//! vendor-specific VFIO (Ada, Hopper; kernel >= 6.8; vGPU 17+): SR-IOV VFs on `nvidia`
//!   <VF>/nvidia/creatable_vgpu_types   "ID    : vGPU Name" header, then "1145  : NVIDIA L40S-1B"
//!   <VF>/nvidia/current_vgpu_type      0, or the type id the VF carries
//! ```
//!
//! A type's `max_instances` is what the GPU holds of it with none created: for mdev the
//! parents' `available_instances` plus the mdevs that exist under the type, for vendor
//! VFIO the VFs that list it as creatable or carry it (the list shrinks as VFs are
//! typed, so this is a best-effort count). Memory comes from the mdev `description`'s
//! `framebuffer=` when there is one, else from the type name's size (`-10C`: 10 GiB).
//! A MIG-backed type (`NVIDIA H100-1-10C`, `H200-1-18CME`) names the MIG profile it
//! needs (`1g.10gb`, `1g.18gb+me`).

use super::PartitionError;
use crate::pci::{PciAddress, PciFunction};
use crate::sysfs::Sysfs;
use accel_api::partitions::{MigProfile, VgpuType};
use std::collections::BTreeMap;
use std::path::Path;

/// The vGPU types of the GPU `pf` with `vfs`, sorted by type id.
pub fn vgpu_types(
    sysfs: &Sysfs,
    pf: &PciFunction,
    vfs: &[&PciFunction],
    profiles: &[MigProfile],
) -> Vec<VgpuType> {
    let mut types: BTreeMap<String, VgpuType> = BTreeMap::new();
    let parents = std::iter::once(pf).chain(vfs.iter().copied());
    for parent in parents {
        let dir = parent.path.join("mdev_supported_types");
        for type_id in sysfs.list(&dir) {
            let t = dir.join(&type_id);
            let name = sysfs.read_opt(&t.join("name")).unwrap_or_default();
            let available = sysfs
                .read_int(&t.join("available_instances"))
                .unwrap_or(0)
                .max(0) as u32;
            let existing = sysfs.list(&t.join("devices")).len() as u32;
            let memory = sysfs
                .read_opt(&t.join("description"))
                .and_then(|d| framebuffer_mib(&d))
                .or_else(|| name_memory_mib(&name));
            let entry = types.entry(type_id.clone()).or_insert_with(|| VgpuType {
                type_id: type_id.clone(),
                name: name.clone(),
                memory_mib: memory.unwrap_or(0),
                max_instances: 0,
                mig_profile_id: mig_profile(&name, profiles),
            });
            entry.max_instances += available + existing;
        }
    }
    for vf in vfs {
        let dir = vf.path.join("nvidia");
        let current = sysfs
            .read_opt(&dir.join("current_vgpu_type"))
            .filter(|c| c != "0");
        let Some(list) = sysfs.read_opt(&dir.join("creatable_vgpu_types")) else {
            continue;
        };
        let mut offered: Vec<(String, String)> = creatable(&list);
        if let Some(c) = &current {
            // A typed VF lists nothing more; it still holds one of its type.
            if !offered.iter().any(|(id, _)| id == c) {
                let known = types.get(c).map(|t| t.name.clone()).unwrap_or_default();
                offered.push((c.clone(), known));
            }
            offered.retain(|(id, _)| id == c);
        }
        for (type_id, name) in offered {
            let entry = types.entry(type_id.clone()).or_insert_with(|| VgpuType {
                type_id: type_id.clone(),
                name: name.clone(),
                memory_mib: name_memory_mib(&name).unwrap_or(0),
                max_instances: 0,
                mig_profile_id: mig_profile(&name, profiles),
            });
            if entry.name.is_empty() {
                entry.name = name;
            }
            entry.max_instances += 1;
        }
    }
    types.into_values().collect()
}

/// `(type id, name)` lines of a `creatable_vgpu_types` file (its header skipped).
pub fn creatable(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (id, name) = l.split_once(':')?;
            let id = id.trim();
            id.parse::<u32>().ok()?;
            Some((id.to_owned(), name.trim().to_owned()))
        })
        .collect()
}

/// `framebuffer=2048M` of an mdev type's description.
fn framebuffer_mib(description: &str) -> Option<i64> {
    let v = description
        .split([',', ' ', '\n'])
        .find_map(|kv| kv.trim().strip_prefix("framebuffer="))?;
    let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: i64 = n.parse().ok()?;
    Some(match unit.trim() {
        "G" | "GB" => n * 1024,
        "K" | "KB" => n / 1024,
        _ => n,
    })
}

/// The size a vGPU type name ends with: `GRID A100-4C` and `NVIDIA H100-1-10C` (GiB).
fn name_memory_mib(name: &str) -> Option<i64> {
    let last = name.rsplit(['-', ' ']).next()?;
    let digits: String = last.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<i64>().ok().map(|g| g * 1024)
}

/// The MIG profile a MIG-backed type needs: `<model>-<slices>-<GB>C[ME]` to
/// `<slices>g.<GB>gb[+me]`.
fn mig_profile(name: &str, profiles: &[MigProfile]) -> Option<u32> {
    let mut parts = name.rsplit('-');
    let last = parts.next()?;
    let slices: u32 = parts.next()?.parse().ok()?;
    let gb: String = last.chars().take_while(char::is_ascii_digit).collect();
    let suffix = &last[gb.len()..];
    let me = suffix.ends_with("ME");
    let want = format!("{slices}g.{gb}gb{}", if me { "+me" } else { "" });
    profiles.iter().find(|p| p.name == want).map(|p| p.id)
}

/// Writes `text` to a sysfs attribute, naming the path in the error.
fn write(path: &Path, text: &str) -> Result<(), PartitionError> {
    std::fs::write(path, text).map_err(|e| PartitionError::Mdev {
        path: path.display().to_string(),
        cause: e.to_string(),
    })
}

/// Creates the mdev `uuid` of `type_id` under `parent`.
pub fn create_mdev(
    sysfs_root: &Path,
    parent: PciAddress,
    type_id: &str,
    uuid: &str,
) -> Result<(), PartitionError> {
    let dir = sysfs_root
        .join("bus/pci/devices")
        .join(parent.to_string())
        .join("mdev_supported_types")
        .join(type_id);
    if !dir.is_dir() {
        return Err(PartitionError::Mdev {
            path: dir.display().to_string(),
            cause: format!("{parent} offers no mdev type {type_id}"),
        });
    }
    write(&dir.join("create"), uuid)
}

/// Where an mdev is (`/sys/bus/mdev/devices/<uuid>`).
pub fn mdev_path(sysfs_root: &Path, uuid: &str) -> std::path::PathBuf {
    sysfs_root.join("bus/mdev/devices").join(uuid)
}

/// Removes the mdev `uuid`.
pub fn remove_mdev(sysfs_root: &Path, uuid: &str) -> Result<(), PartitionError> {
    let dir = mdev_path(sysfs_root, uuid);
    if !dir.is_dir() {
        return Err(PartitionError::Mdev {
            path: dir.display().to_string(),
            cause: format!("no mdev {uuid}"),
        });
    }
    write(&dir.join("remove"), "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_profiles_come_from_names_and_descriptions() {
        assert_eq!(
            framebuffer_mib("num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=4096x2160, max_instance=10"),
            Some(4096)
        );
        assert_eq!(name_memory_mib("GRID A100-4C"), Some(4096));
        assert_eq!(name_memory_mib("NVIDIA H100-1-10C"), Some(10240));
        assert_eq!(name_memory_mib("NVIDIA L40S-1B"), Some(1024));
        let p = |id, name: &str| MigProfile {
            id,
            name: name.into(),
            compute_slices: 1,
            engines: Default::default(),
            placements: Vec::new(),
        };
        let profiles = [p(19, "1g.18gb"), p(20, "1g.18gb+me"), p(9, "3g.71gb")];
        assert_eq!(mig_profile("NVIDIA H200-1-18C", &profiles), Some(19));
        assert_eq!(mig_profile("NVIDIA H200-1-18CME", &profiles), Some(20));
        assert_eq!(mig_profile("NVIDIA H200-3-71C", &profiles), Some(9));
        assert_eq!(mig_profile("NVIDIA H200-35C", &profiles), None);
        assert_eq!(
            creatable("ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1147  : NVIDIA L40S-1Q\n"),
            [
                ("1145".to_owned(), "NVIDIA L40S-1B".to_owned()),
                ("1147".to_owned(), "NVIDIA L40S-1Q".to_owned())
            ]
        );
        assert!(creatable("ID    : vGPU Name\n").is_empty());
    }
}
