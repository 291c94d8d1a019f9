//! packaging/sbin/accel-nvme-clean, docs/cleaning.md's NVMe cleaner, run against a fake
//! sysfs tree and a stand-in for nvme-cli. The fake kernel does nothing on a write, so
//! the tree holds from the start what the nvme driver would create (the controller,
//! its namespaces, the node) and the test reads what the script wrote where: which
//! driver it unbound, what it probed, what it formatted, what it bound back. That is
//! all this proves; the script has not been run on a real drive.

use accel_agent::testing::{self, FakeSysfs};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Tree {
    dir: tempfile::TempDir,
    fs: FakeSysfs,
    address: String,
}

fn helper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/sbin/accel-nvme-clean")
}

/// A drive bound to `driver`; `controller`: the nvme driver's tree is there already.
fn tree(driver: &str, controller: bool) -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let address = testing::nvme(&fs, 0x5e, driver);
    for d in ["vfio-pci", "nvme"] {
        std::fs::create_dir_all(fs.root.join("bus/pci/drivers").join(d)).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("dev")).unwrap();
    if controller {
        let c = fs
            .root
            .join("bus/pci/devices")
            .join(&address)
            .join("nvme/nvme0");
        for (ns, id) in [("nvme0n1", "1"), ("nvme0c0n2", "2")] {
            std::fs::create_dir_all(c.join(ns)).unwrap();
            std::fs::write(c.join(ns).join("nsid"), format!("{id}\n")).unwrap();
        }
        std::fs::write(dir.path().join("dev/nvme0"), "").unwrap();
    }
    // nvme-cli's stand-in logs its arguments and exits with the file `rc`'s number.
    let nvme = dir.path().join("nvme");
    std::fs::write(
        &nvme,
        format!(
            "#!/bin/sh\necho \"$@\" >> {0}/nvme.log\nexit $(cat {0}/rc 2>/dev/null || echo 0)\n",
            dir.path().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&nvme, std::fs::Permissions::from_mode(0o755)).unwrap();
    Tree { dir, fs, address }
}

impl Tree {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("sh")
            .arg(helper())
            .args(args)
            .env("SYSFS", &self.fs.root)
            .env("DEV", self.dir.path().join("dev"))
            .env("NVME", self.dir.path().join("nvme"))
            .env("ACCEL_NVME_CLEAN_WAIT", "0")
            .output()
            .unwrap()
    }

    /// What the script wrote to `rel` under the sysfs root, if anything.
    fn wrote(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.fs.root.join(rel))
            .ok()
            .map(|s| s.trim().to_owned())
    }

    fn override_(&self) -> Option<String> {
        self.wrote(&format!("bus/pci/devices/{}/driver_override", self.address))
    }

    fn nvme_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nvme.log")).unwrap_or_default()
    }
}

#[test]
fn a_passed_through_drive_is_bound_to_nvme_formatted_and_bound_back() {
    let t = tree("vfio-pci", true);
    let out = t.run(&[&t.address]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = t.dir.path().join("dev/nvme0");
    assert_eq!(
        t.nvme_log(),
        format!(
            "format {0} --namespace-id=1 --ses=1 --force\nformat {0} --namespace-id=2 --ses=1 --force\n",
            dev.display()
        )
    );
    let a = Some(t.address.clone());
    assert_eq!(t.wrote("bus/pci/drivers/vfio-pci/unbind"), a);
    assert_eq!(t.wrote("bus/pci/drivers/nvme/unbind"), a);
    assert_eq!(t.wrote("bus/pci/drivers_probe"), a);
    assert_eq!(t.override_().as_deref(), Some("vfio-pci"), "bound back");
}

#[test]
fn a_failed_format_still_binds_the_drive_back_and_fails() {
    let t = tree("vfio-pci", true);
    std::fs::write(t.dir.path().join("rc"), "5").unwrap();
    let out = t.run(&[&t.address]);
    assert!(!out.status.success());
    assert_eq!(
        t.nvme_log().lines().count(),
        1,
        "stopped at the first failure"
    );
    assert_eq!(
        t.wrote("bus/pci/drivers/nvme/unbind"),
        Some(t.address.clone())
    );
    assert_eq!(t.override_().as_deref(), Some("vfio-pci"));
}

#[test]
fn no_controller_or_no_namespace_fails_without_formatting() {
    let t = tree("vfio-pci", false);
    let out = t.run(&[&t.address]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no nvme controller node"), "{err}");
    assert_eq!(t.nvme_log(), "");
    assert_eq!(t.override_().as_deref(), Some("vfio-pci"));
}

#[test]
fn a_drive_the_host_uses_is_refused_untouched() {
    let t = tree("nvme", true);
    let out = t.run(&[&t.address]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the host uses this drive"), "{err}");
    assert_eq!(t.nvme_log(), "");
    assert_eq!(t.override_(), None);
    assert_eq!(t.wrote("bus/pci/drivers_probe"), None);
    // Not an address, or no such function.
    assert!(!t.run(&["/dev/nvme0"]).status.success());
    assert!(!t.run(&["0000:99:00.0"]).status.success());
}

#[test]
fn check_passes_only_on_vfio_pci_without_a_controller() {
    let t = tree("vfio-pci", false);
    assert!(t.run(&["--check", &t.address]).status.success());
    let t = tree("vfio-pci", true);
    let out = t.run(&["--check", &t.address]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("still has the nvme controller nvme0"));
    let t = tree("nvme", false);
    let out = t.run(&["--check", &t.address]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is bound to nvme, not vfio-pci"));
}
