//! Builders of fake sysfs trees, for tests and benchmarks: functions under
//! `bus/pci/devices` with the files and links the kernel shows (ids, class, NUMA node,
//! driver and IOMMU links, SR-IOV counts, `physfn`/`virtfn*`), and ready-made cards
//! laid out as their drivers expose them.

use std::path::{Path, PathBuf};

/// A sysfs tree under `root`.
pub struct FakeSysfs {
    pub root: PathBuf,
}

/// One PCI function being built.
pub struct Function {
    pub path: PathBuf,
    pub address: String,
}

fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("create sysfs dir");
    }
    std::fs::write(path, format!("{text}\n")).expect("write sysfs file");
}

fn link(path: &Path, target: &str) {
    let _ = std::fs::remove_file(path);
    std::os::unix::fs::symlink(target, path).expect("sysfs symlink");
}

impl FakeSysfs {
    pub fn new(root: impl Into<PathBuf>) -> FakeSysfs {
        let root = root.into();
        std::fs::create_dir_all(root.join("bus/pci/devices")).expect("create sysfs root");
        FakeSysfs { root }
    }

    /// A function with vendor, device and class (`0x030200`).
    pub fn function(&self, address: &str, vendor: u16, device: u16, class: u32) -> Function {
        let path = self.root.join("bus/pci/devices").join(address);
        write(&path.join("vendor"), &format!("0x{vendor:04x}"));
        write(&path.join("device"), &format!("0x{device:04x}"));
        write(&path.join("class"), &format!("0x{class:06x}"));
        write(&path.join("subsystem_vendor"), &format!("0x{vendor:04x}"));
        write(&path.join("subsystem_device"), "0x0000");
        write(&path.join("numa_node"), "-1");
        Function {
            path,
            address: address.to_owned(),
        }
    }

    /// Gives the function at `address` the `reset` file the kernel shows for a function
    /// it can reset (FLR and the like), which `pci-reset` writes.
    pub fn reset_file(&self, address: &str) {
        write(
            &self
                .root
                .join("bus/pci/devices")
                .join(address)
                .join("reset"),
            "",
        );
    }

    /// Lays the function at `address` out as the kernel does: its directory under
    /// `devices/<root>/<port>/`, `bus/pci/devices/<address>` a relative link to it.
    pub fn behind_root(&self, address: &str, root: &str, port: &str) {
        let entry = self.root.join("bus/pci/devices").join(address);
        let dir = self.root.join("devices").join(root).join(port);
        std::fs::create_dir_all(&dir).expect("create sysfs root complex");
        std::fs::rename(&entry, dir.join(address)).expect("move the function");
        link(&entry, &format!("../../../devices/{root}/{port}/{address}"));
    }

    /// Removes a function (a device that went away).
    pub fn remove(&self, address: &str) {
        let _ = std::fs::remove_dir_all(self.root.join("bus/pci/devices").join(address));
    }
}

impl Function {
    pub fn numa(self, node: i32) -> Self {
        write(&self.path.join("numa_node"), &node.to_string());
        self
    }

    pub fn driver(self, name: &str) -> Self {
        link(
            &self.path.join("driver"),
            &format!("../../../bus/pci/drivers/{name}"),
        );
        self
    }

    pub fn iommu_group(self, n: u32) -> Self {
        link(
            &self.path.join("iommu_group"),
            &format!("../../../kernel/iommu_groups/{n}"),
        );
        self
    }

    /// Any file under the function (`fpga/.../afu_id`).
    pub fn file(self, rel: &str, text: &str) -> Self {
        write(&self.path.join(rel), text);
        self
    }

    pub fn netdev(self, name: &str) -> Self {
        std::fs::create_dir_all(self.path.join("net").join(name)).expect("netdev dir");
        self
    }

    /// Enables VFs: `vfs` are (address, device id); each VF gets the PF's vendor and
    /// class, a `physfn` link, and the PF a `virtfnN` link.
    pub fn sriov(self, fs: &FakeSysfs, total: u32, vfs: &[(String, u16)]) -> (Self, Vec<Function>) {
        write(&self.path.join("sriov_totalvfs"), &total.to_string());
        write(&self.path.join("sriov_numvfs"), &vfs.len().to_string());
        let vendor = std::fs::read_to_string(self.path.join("vendor")).expect("vendor");
        let class = std::fs::read_to_string(self.path.join("class")).expect("class");
        let numa = std::fs::read_to_string(self.path.join("numa_node")).expect("numa");
        let parse =
            |s: &str| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap_or(0);
        let mut out = Vec::new();
        for (i, (addr, device)) in vfs.iter().enumerate() {
            let vf = fs
                .function(addr, parse(&vendor) as u16, *device, parse(&class))
                .file("numa_node", numa.trim());
            link(&vf.path.join("physfn"), &format!("../{}", self.address));
            link(&self.path.join(format!("virtfn{i}")), &format!("../{addr}"));
            out.push(vf);
        }
        (self, out)
    }
}

/// `DDDD:BB:SS.F` for bus `bus`, slot `slot`, function `f`.
pub fn bdf(bus: u8, slot: u8, f: u8) -> String {
    format!("0000:{bus:02x}:{slot:02x}.{f:x}")
}

/// VF addresses after `bus`: 8 per slot, starting at slot 1.
pub fn vf_addresses(bus: u8, n: usize, device: u16) -> Vec<(String, u16)> {
    (0..n)
        .map(|i| (bdf(bus, 1 + (i / 8) as u8, (i % 8) as u8), device))
        .collect()
}

pub const PAC_INTERFACE_ID: &str = "9926ab6d-6c92-5a68-aabc-a7d84c545738";
pub const PAC_AFU_ID: &str = "d8424dc4a4a3c413f89e433683f9040b";

/// 8 NVIDIA A100s: 4 on NUMA node 0 (buses 17, 31, 4b, 65), 4 on node 1 (ca, e3, b1, 98).
pub fn eight_gpus(fs: &FakeSysfs) -> Vec<String> {
    let buses: [(u8, i32); 8] = [
        (0x17, 0),
        (0x31, 0),
        (0x4b, 0),
        (0x65, 0),
        (0x98, 1),
        (0xb1, 1),
        (0xca, 1),
        (0xe3, 1),
    ];
    a100s(fs, &buses)
}

/// The first two of [`eight_gpus`] (`0000:17:00.0`, `0000:31:00.0`; IOMMU groups 40
/// and 41): the pool of the Kubernetes tests.
pub fn two_gpus(fs: &FakeSysfs) -> Vec<String> {
    a100s(fs, &[(0x17, 0), (0x31, 0)])
}

/// A100s bound to vfio-pci at `(bus, NUMA node)`, in IOMMU groups from 40.
fn a100s(fs: &FakeSysfs, buses: &[(u8, i32)]) -> Vec<String> {
    buses
        .iter()
        .enumerate()
        .map(|(i, (bus, numa))| {
            let a = bdf(*bus, 0, 0);
            fs.function(&a, 0x10de, 0x20b0, 0x030200)
                .numa(*numa)
                .driver("vfio-pci")
                .iommu_group(40 + i as u32);
            a
        })
        .collect()
}

/// An Intel PAC Arria 10 in the OPAE `intel-fpga-*` layout, with `vfs` VFs (their
/// ports then in the VFs) or none (the port in the PF).
pub fn pac_opae(fs: &FakeSysfs, bus: u8, vfs: usize) -> String {
    let a = bdf(bus, 0, 0);
    let pf = fs
        .function(&a, 0x8086, 0x09c4, 0x120000)
        .numa(0)
        .driver("intel-fpga-pci")
        .file(
            "fpga/intel-fpga-dev.0/intel-fpga-fme.0/pr/interface_id",
            PAC_INTERFACE_ID,
        );
    if vfs == 0 {
        pf.file("fpga/intel-fpga-dev.0/intel-fpga-port.0/afu_id", PAC_AFU_ID);
    } else {
        let (_, vfs) = pf.sriov(fs, 1, &vf_addresses(bus, vfs, 0x09c5));
        for (i, vf) in vfs.into_iter().enumerate() {
            vf.driver("vfio-pci").file(
                &format!(
                    "fpga/intel-fpga-dev.{}/intel-fpga-port.{}/afu_id",
                    i + 1,
                    i + 1
                ),
                PAC_AFU_ID,
            );
        }
    }
    a
}

/// The same card under the mainline DFL driver (`fpga_region`, `dfl-fme`, `dfl-port`).
pub fn pac_dfl(fs: &FakeSysfs, bus: u8, vfs: usize) -> String {
    let a = bdf(bus, 0, 0);
    let pf = fs
        .function(&a, 0x8086, 0x09c4, 0x120000)
        .numa(1)
        .driver("dfl-pci")
        .file(
            "fpga_region/region0/dfl-fme.0/dfl-fme-region.1/fpga_region/region1/compat_id",
            &PAC_INTERFACE_ID.replace('-', ""),
        );
    if vfs == 0 {
        pf.file("fpga_region/region0/dfl-port.0/afu_id", PAC_AFU_ID);
    } else {
        let (_, vfs) = pf.sriov(fs, 1, &vf_addresses(bus, vfs, 0x09c5));
        for (i, vf) in vfs.into_iter().enumerate() {
            vf.driver("vfio-pci").file(
                &format!("fpga_region/region{}/dfl-port.{}/afu_id", i + 2, i + 1),
                PAC_AFU_ID,
            );
        }
    }
    a
}

/// Region and AFU ids of the DFL tree in [`pac_both_trees`], distinct from the OPAE
/// tree's so a test can tell which tree was read.
pub const PAC_DFL_INTERFACE_ID: &str = "0123456789abcdef0123456789abcdef";
pub const PAC_DFL_AFU_ID: &str = "fedcba9876543210fedcba9876543210";

/// A PAC whose PF shows both the OPAE driver's tree and the kernel's DFL tree (one
/// driver swapped for the other without a reboot), bound to `driver`, without VFs.
pub fn pac_both_trees(fs: &FakeSysfs, bus: u8, driver: &str) -> String {
    let a = bdf(bus, 0, 0);
    fs.function(&a, 0x8086, 0x09c4, 0x120000)
        .numa(0)
        .driver(driver)
        .file(
            "fpga/intel-fpga-dev.0/intel-fpga-fme.0/pr/interface_id",
            PAC_INTERFACE_ID,
        )
        .file("fpga/intel-fpga-dev.0/intel-fpga-port.0/afu_id", PAC_AFU_ID)
        .file(
            "fpga_region/region0/dfl-fme.0/dfl-fme-region.1/fpga_region/region1/compat_id",
            PAC_DFL_INTERFACE_ID,
        )
        .file("fpga_region/region0/dfl-port.0/afu_id", PAC_DFL_AFU_ID);
    a
}

/// A QAT C62x PF (host driver `c6xx`) with `vfs` VFs bound to vfio-pci.
pub fn qat(fs: &FakeSysfs, bus: u8, vfs: usize) -> String {
    let a = bdf(bus, 0, 0);
    let pf = fs
        .function(&a, 0x8086, 0x37c8, 0x0b4000)
        .numa(0)
        .driver("c6xx");
    let (_, vfs) = pf.sriov(fs, 16, &vf_addresses(bus, vfs, 0x37c9));
    for vf in vfs {
        vf.driver("vfio-pci");
    }
    a
}

/// An NVMe controller bound to `driver`.
pub fn nvme(fs: &FakeSysfs, bus: u8, driver: &str) -> String {
    let a = bdf(bus, 0, 0);
    fs.function(&a, 0x144d, 0xa824, 0x010802)
        .numa(0)
        .driver(driver);
    a
}

/// An Intel X710 port `netdev` (driver i40e) with `vfs` VFs (iavf).
pub fn nic(fs: &FakeSysfs, bus: u8, netdev: &str, vfs: usize) -> String {
    let a = bdf(bus, 0, 0);
    let pf = fs
        .function(&a, 0x8086, 0x1572, 0x020000)
        .numa(0)
        .driver("i40e")
        .netdev(netdev);
    let (_, vfs) = pf.sriov(fs, 64, &vf_addresses(bus, vfs, 0x154c));
    for vf in vfs {
        vf.driver("iavf");
    }
    a
}

/// A host bridge and a virtio NIC, which nothing must offer.
pub fn bridge_and_virtio(fs: &FakeSysfs) {
    fs.function("0000:00:00.0", 0x8086, 0x2020, 0x060000);
    fs.function("0000:00:03.0", 0x1af4, 0x1000, 0x020000)
        .driver("virtio-pci");
}

/// An A100 with SR-IOV enabled: `vfs` VFs of the same vendor and class.
pub fn gpu_with_vfs(fs: &FakeSysfs, bus: u8, vfs: usize) -> String {
    let a = bdf(bus, 0, 0);
    let pf = fs
        .function(&a, 0x10de, 0x20b5, 0x030200)
        .numa(1)
        .driver("nvidia");
    let (_, vfs) = pf.sriov(fs, 16, &vf_addresses(bus, vfs, 0x20b5));
    for vf in vfs {
        vf.driver("nvidia");
    }
    a
}

/// An Intel I210 port `netdev` (driver igb): a NIC without SR-IOV, used by the host.
pub fn nic_without_sriov(fs: &FakeSysfs, bus: u8, netdev: &str) -> String {
    let a = bdf(bus, 0, 0);
    fs.function(&a, 0x8086, 0x1533, 0x020000)
        .numa(0)
        .driver("igb")
        .netdev(netdev);
    a
}

/// A few lines of `pci.ids` naming the functions of these builders, written where
/// `accel agent check` looks for it for the sysfs root `<dir>/sys`.
pub fn pci_ids(dir: &Path) -> PathBuf {
    let path = dir.join("usr/share/misc/pci.ids");
    write(
        &path,
        "# test database\n\
         10de  NVIDIA Corporation\n\
         \t20b0  GA100 [A100 SXM4 40GB]\n\
         \t\t10de 1450  A100 SXM4 40GB\n\
         8086  Intel Corporation\n\
         \t1533  I210 Gigabit Network Connection\n\
         \t1572  Ethernet Controller X710 for 10GbE SFP+\n\
         C 02  Network controller\n\
         \t00  Ethernet controller\n\
         C 03  Display controller\n\
         \t02  3D controller\n\
         C 06  Bridge\n\
         \t00  Host bridge",
    );
    path
}

/// An executable `dir/name` that exits 0: a vendor tool's stand-in on a PATH a test
/// controls (the rules' programs are looked up, not run, by the check).
pub fn stand_in(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    write(&path, "#!/bin/sh\nexit 0");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the stand-in executable");
    path
}

/// A `[[cleaning]]` rule's cleaner and verification as shell scripts in a directory,
/// for the cleaning tests: the cleaner appends its first argument to `cleaned` and then
/// does what the file `mode` says: `ok`, `fail` (exits 3), `hang` (30 s, longer than a
/// test's timeout), `gate` (waits for a file `go`). The verification passes while the
/// file `verified` exists.
pub struct FakeCleaner {
    pub dir: PathBuf,
}

const CLEANER: &str = r#"d=$(dirname "$0")
echo "$1" >> "$d/cleaned"
case "$(cat "$d/mode")" in
  ok) exit 0 ;;
  fail) echo "wipe failed" >&2; exit 3 ;;
  hang) exec sleep 30 ;;
  gate) while [ ! -f "$d/go" ]; do sleep 0.02; done ;;
esac
"#;

const VERIFY: &str = r#"[ -f "$(dirname "$0")/verified" ] || { echo "not wiped" >&2; exit 1; }
"#;

impl FakeCleaner {
    /// The scripts written in `dir`, mode `ok`, verification passing.
    pub fn new(dir: impl Into<PathBuf>) -> FakeCleaner {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).expect("create cleaner dir");
        std::fs::write(dir.join("clean.sh"), CLEANER).expect("write clean.sh");
        std::fs::write(dir.join("verify.sh"), VERIFY).expect("write verify.sh");
        std::fs::write(dir.join("verified"), "").expect("write verified");
        let c = FakeCleaner { dir };
        c.mode("ok");
        c
    }

    pub fn mode(&self, m: &str) {
        std::fs::write(self.dir.join("mode"), m).expect("write mode");
    }

    /// Lets a cleaner in mode `gate` finish.
    pub fn open_gate(&self) {
        std::fs::write(self.dir.join("go"), "").expect("write go");
    }

    /// How many times the cleaner has started.
    pub fn started(&self) -> usize {
        std::fs::read_to_string(self.dir.join("cleaned"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// The rule's table: method `command` running the cleaner with `{address}`, the
    /// verification, and `timeout_seconds`.
    pub fn rule(&self, timeout_seconds: u64) -> crate::cleaning::CleaningFile {
        let script = |name: &str| self.dir.join(name).to_string_lossy().into_owned();
        crate::cleaning::CleaningFile {
            method: "command".into(),
            command: vec!["sh".into(), script("clean.sh"), "{address}".into()],
            verify: vec!["sh".into(), script("verify.sh")],
            timeout_seconds: Some(timeout_seconds),
            ..Default::default()
        }
    }

    /// Agent settings for `node` against `server`: the `fake` driver with one healthy
    /// GPU (`00fa:00:00.0`, NUMA node 0) and this cleaner's rule.
    pub fn settings(
        &self,
        server: &str,
        node: &str,
        timeout_seconds: u64,
    ) -> crate::config::Settings {
        let mut s = crate::config::Settings::new(server, node, &self.dir.join("sys"));
        s.drivers = Some(vec!["fake".into()]);
        s.driver.fake = vec![crate::config::FakeDevice {
            device_type: "GPU".into(),
            vendor: "10de".into(),
            product: "20b0".into(),
            model: "fake-gpu".into(),
            family: None,
            count: 1,
            class: None,
            numa_node: Some(0),
            regions: 0,
            interface_id: None,
            function_id: None,
            memory_mib: None,
            memory_kind: None,
            healthy: true,
        }];
        s.cleaning = crate::cleaning::validate(vec![self.rule(timeout_seconds)])
            .expect("the fake cleaner's rule is valid");
        s
    }
}

/// `accel-fake-nvml`'s shared library, built for this test run: `cargo build -p
/// accel-fake-nvml` in a target directory of its own beside this one
/// (`<target>/fake-nvml`, so the cargo running the tests, which holds its own target
/// directory's lock, is not waited on). Built once per test process and every time
/// (a no-op when nothing changed), so the tests always load the current source; a
/// failed build fails the test with cargo's output, never skips it.
pub fn fake_nvml_library() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let exe = std::env::current_exe().expect("the test executable's path");
            // <target>/<profile>/deps/<test>
            let target = exe
                .ancestors()
                .nth(3)
                .expect("a test executable under <target>/<profile>/deps")
                .to_owned();
            let target_dir = target.join("fake-nvml");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
            let out = std::process::Command::new(cargo)
                .args(["build", "-p", "accel-fake-nvml", "--target-dir"])
                .arg(&target_dir)
                .current_dir(&root)
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("CARGO_BUILD_TARGET_DIR")
                .output()
                .expect("run cargo to build accel-fake-nvml");
            assert!(
                out.status.success(),
                "cargo build -p accel-fake-nvml failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let lib = target_dir.join("debug/libaccel_fake_nvml.so");
            assert!(lib.is_file(), "{} was not built", lib.display());
            lib
        })
        .clone()
}

/// One test's NVML: a private copy of [`fake_nvml_library`] in `dir` (a copy is loaded
/// apart from every other, so tests in one process do not share GPUs), the fake's
/// configuration beside it (`accel-fake-nvml.conf`), its state file, and the boot id
/// file the fake and the agent both read.
pub struct FakeNvml {
    pub dir: PathBuf,
    /// What `nvml_library` names.
    pub library: PathBuf,
    pub boot_id_file: PathBuf,
}

impl FakeNvml {
    /// The fake with `config`'s GPUs and failures (see accel-fake-nvml's `config`
    /// module), in boot `boot-1`.
    pub fn new(dir: &Path, config: &str) -> FakeNvml {
        std::fs::create_dir_all(dir).expect("create the fake NVML's directory");
        let library = dir.join("libnvidia-ml.so.1");
        std::fs::copy(fake_nvml_library(), &library).expect("copy the fake NVML");
        let nvml = FakeNvml {
            dir: dir.to_owned(),
            library,
            boot_id_file: dir.join("boot_id"),
        };
        std::fs::write(&nvml.boot_id_file, "boot-1\n").expect("write the boot id");
        nvml.configure(config);
        nvml
    }

    /// Replaces the configuration (read at the next `nvmlInit_v2` after all shut down).
    pub fn configure(&self, config: &str) {
        let text = format!(
            "{config}\nstate_file {}\nboot_id_file {}\n",
            self.dir.join("fake-nvml.state").display(),
            self.boot_id_file.display()
        );
        std::fs::write(self.dir.join("accel-fake-nvml.conf"), text).expect("write the config");
    }

    /// A new boot id: the node rebooted (MIG mode stays, MIG instances are gone).
    pub fn reboot(&self) {
        let n = std::fs::read_to_string(&self.boot_id_file)
            .ok()
            .and_then(|s| s.trim().strip_prefix("boot-")?.parse::<u32>().ok())
            .unwrap_or(1);
        std::fs::write(&self.boot_id_file, format!("boot-{}\n", n + 1)).expect("write the boot id");
    }

    /// Partition settings on this fake, with the agent's state in `dir/state`.
    pub fn partition_settings(&self) -> crate::partitions::PartitionSettings {
        crate::partitions::PartitionSettings {
            nvml_library: self.library.clone(),
            state_dir: self.dir.join("state"),
            boot_id_file: self.boot_id_file.clone(),
            create_mdev_at_bind: true,
        }
    }
}

/// An NVIDIA GPU function at `address` with PCI device id `device`, bound to `nvidia`.
pub fn nvidia_gpu(fs: &FakeSysfs, address: &str, device: u16) -> Function {
    fs.function(address, 0x10de, device, 0x030200)
        .driver("nvidia")
}

/// A node with one H100 SXM5 (`0000:3b:00.0`, MIG on) in a fake sysfs under `dir` and on
/// the fake NVML (`more`: further lines of its configuration, failures to inject),
/// serving DRA with one configuration, `gpu` (CDI specs in `dir/cdi`), named `node`
/// (which it owns) and reported once to the accelerator API at `server`: what the DRA
/// MIG tests and benchmark start from.
pub async fn dra_mig_node(
    server: &str,
    node: &str,
    dir: &Path,
    more: &str,
) -> (crate::Node, FakeNvml) {
    use crate::config::{NodeProvider, Settings};
    let fs = FakeSysfs::new(dir.join("sys"));
    nvidia_gpu(&fs, "0000:3b:00.0", 0x2330).numa(0);
    let conf = format!("gpu bus=0000:3b:00.0 model=h100 mig=on\n{more}");
    let nvml = FakeNvml::new(&dir.join("nvml"), &conf);
    let mut kubernetes = accel_k8s::config::KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .expect("the DRA configuration");
    kubernetes.cdi_dir = dir.join("cdi");
    let mut settings = Settings {
        drivers: Some(vec!["nvidia".into()]),
        node_provider: NodeProvider::Own,
        kubernetes: Some(kubernetes),
        ..Settings::new(server, node, &fs.root)
    };
    settings.driver.nvml = true;
    settings.driver.nvml_library = nvml.library.clone();
    settings.partitions = nvml.partition_settings();
    let n = crate::Node::builder(settings)
        .build()
        .expect("build the node");
    n.agent().check_node().await.expect("the node's provider");
    n.agent().step().await.expect("the node's first report");
    (n, nvml)
}
