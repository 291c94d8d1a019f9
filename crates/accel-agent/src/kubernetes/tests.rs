use super::*;
use crate::testing::FakeSysfs;

#[test]
fn nodes_come_from_sysfs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path());
    fs.function("0000:3b:00.0", 0x10de, 0x20b0, 0x030200)
        .driver("vfio-pci")
        .iommu_group(41);
    fs.function("0000:5e:00.0", 0x1002, 0x740f, 0x038000)
        .driver("amdgpu")
        .file("drm/card1/dev", "226:1")
        .file("drm/renderD129/dev", "226:129");
    fs.function("0000:af:00.0", 0x8086, 0x09c4, 0x120000)
        .driver("intel-fpga-pci")
        .file("fpga/intel-fpga-dev.0/intel-fpga-port.0/dev", "240:0")
        .file("fpga/intel-fpga-dev.0/intel-fpga-fme.0/dev", "241:0");
    let paths = |a: &str| -> Vec<String> {
        device_nodes(dir.path(), a)
            .into_iter()
            .map(|n| n.host_path)
            .collect()
    };
    assert_eq!(paths("0000:3b:00.0"), ["/dev/vfio/vfio", "/dev/vfio/41"]);
    assert_eq!(paths("0000:5e:00.0"), ["/dev/dri/renderD129"]);
    assert_eq!(
        paths("0000:af:00.0"),
        ["/dev/intel-fpga-fme.0", "/dev/intel-fpga-port.0"]
    );
    assert!(paths("0000:00:00.0").is_empty());
}

#[test]
fn the_pcie_root_is_the_root_complex_sysfs_links_the_function_under() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path());
    fs.function("0000:17:00.0", 0x10de, 0x20b0, 0x030200)
        .driver("vfio-pci")
        .iommu_group(41);
    fs.function("0000:31:00.0", 0x10de, 0x20b0, 0x030200);
    fs.behind_root("0000:17:00.0", "pci0000:16", "0000:16:01.0");
    assert_eq!(
        pcie_root(dir.path(), "0000:17:00.0").as_deref(),
        Some("pci0000:16")
    );
    // The function is still read through the link (its driver, its IOMMU group).
    let nodes: Vec<String> = device_nodes(dir.path(), "0000:17:00.0")
        .into_iter()
        .map(|n| n.host_path)
        .collect();
    assert_eq!(nodes, ["/dev/vfio/vfio", "/dev/vfio/41"]);
    assert_eq!(pcie_root(dir.path(), "0000:31:00.0"), None);
    assert_eq!(pcie_root(dir.path(), "0000:99:00.0"), None);
}
