//! `[[cleaning]]` rules checked for real (issue 41 item 3), over fake sysfs trees and
//! programs on a PATH each test controls: `accel agent check` names every device a
//! rule cannot work for and why, and every documented example passes on devices it
//! matches. The agent's start-up check is in `cleaning_startup.rs`, the NVMe helper
//! the examples use in `nvme_helper.rs`.

use accel_agent::check::Check;
use accel_agent::cleaner::resolve::SearchPath;
use accel_agent::cleaning::{validate, CleaningFile};
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::{Agent, Settings};
use std::path::{Path, PathBuf};

/// A host: its sysfs tree at `<dir>/sys`, and `<dir>/bin`, the only directory on the
/// PATH the rules' programs are looked up on.
struct Host {
    dir: tempfile::TempDir,
    fs: FakeSysfs,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path().join("sys"));
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        Host { dir, fs }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn stand_in(&self, name: &str) -> PathBuf {
        testing::stand_in(&self.bin(), name)
    }

    fn search(&self) -> SearchPath {
        SearchPath::new(self.bin())
    }

    /// Settings of node cn1 with these `[[cleaning]]` tables (TOML).
    fn settings(&self, rules: &str) -> Settings {
        let mut s = Settings::new("http://127.0.0.1:9", "cn1", &self.fs.root);
        s.cleaning = validate(parse(rules)).unwrap();
        s
    }

    fn check(&self, rules: &str) -> Check {
        Agent::offline(self.settings(rules))
            .unwrap()
            .check_with(&self.search())
    }
}

fn parse(rules: &str) -> Vec<CleaningFile> {
    #[derive(serde::Deserialize)]
    struct Doc {
        cleaning: Vec<CleaningFile>,
    }
    toml::from_str::<Doc>(rules).unwrap().cleaning
}

/// The one problem `check` has, after checking it names `address` and provider.
fn the_problem(c: &Check, address: &str) -> String {
    let p = c.problems();
    assert_eq!(p.len(), 1, "{p:#?}\n{}", c.text());
    assert!(
        p[0].starts_with(&format!("device {address} (cn1_{address}): cleaning[0] (")),
        "{}",
        p[0]
    );
    p[0].clone()
}

#[test]
fn a_command_whose_program_is_missing_fails_the_check_naming_each_device() {
    let host = Host::new();
    let gpus = testing::two_gpus(&host.fs);
    let rules = "[[cleaning]]\nmethod = \"command\"\ncommand = [\"wipe-gpu\", \"{address}\"]\n\
                 [cleaning.selector]\ndevice_type = \"GPU\"\n";
    let c = host.check(rules);
    let p = c.problems();
    assert_eq!(p.len(), 2, "{p:#?}");
    for (problem, gpu) in p.iter().zip(&gpus) {
        assert!(
            problem.starts_with(&format!(
                "device {gpu} (cn1_{gpu}): cleaning[0] (command) cannot work: command: \"wipe-gpu\" is not on the PATH ({})",
                host.bin().display()
            )),
            "{problem}"
        );
    }
    let text = c.text();
    assert!(
        text.contains(&format!(
            "  device {} (cn1_{}) cleaning[0] command: cannot work",
            gpus[0], gpus[0]
        )),
        "{text}"
    );
    assert!(!text.contains("ok: "), "{text}");

    // A path that is there but not executable, then one that is.
    let tool = host.dir.path().join("wipe-gpu");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    let by_path = format!(
        "[[cleaning]]\nmethod = \"command\"\ncommand = [\"{}\"]\n",
        tool.display()
    );
    let p = host.check(&by_path).problems();
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p.iter().all(|x| x.ends_with(&format!(
            "cannot work: command: {} is not an executable file",
            tool.display()
        ))),
        "{p:#?}"
    );
    host.stand_in("wipe-gpu");
    let c = host.check(rules);
    assert!(c.problems().is_empty(), "{:#?}", c.problems());
    assert!(c.cleaning.iter().all(|d| d.method == "command"));
    assert!(c.text().contains("ok: 2 device(s), no conflict"));
}

#[test]
fn device_on_a_function_without_a_device_node_fails_the_check_saying_what_it_is_bound_to() {
    let host = Host::new();
    let drive = testing::nvme(&host.fs, 0x5e, "vfio-pci");
    host.stand_in("nvme");
    let rules = "[[cleaning]]\nmethod = \"command\"\ncommand = [\"nvme\", \"format\", \"{device}\", \"--ses=1\"]\n\
                 [cleaning.selector]\ndevice_type = \"SSD\"\n";
    let problem = the_problem(&host.check(rules), &drive);
    assert!(
        problem.contains(
            "cleaning[0] (command) cannot work: command: the argument \"{device}\" names {device}, but the function has no device node (it is bound to vfio-pci, for passthrough); {address} always resolves"
        ),
        "{problem}"
    );
    // The same in a verification; {address} always resolves.
    let verify = "[[cleaning]]\nmethod = \"command\"\ncommand = [\"nvme\", \"{address}\"]\n\
                  verify = [\"nvme\", \"sanitize-log\", \"{device}\"]\n";
    let problem = the_problem(&host.check(verify), &drive);
    assert!(
        problem.contains("(command) cannot work: verify: the argument"),
        "{problem}"
    );
    let c = host.check(&verify.replace("{device}", "{address}"));
    assert!(c.problems().is_empty(), "{:#?}", c.problems());

    // A GPU its host driver holds has a node: {device} is it.
    let host = Host::new();
    let gpu = testing::gpu_with_vfs(&host.fs, 0x65, 0);
    let dir = host.fs.root.join("bus/pci/devices").join(&gpu);
    std::fs::create_dir_all(dir.join("drm/renderD128")).unwrap();
    std::fs::write(dir.join("drm/renderD128/dev"), "226:128\n").unwrap();
    host.stand_in("gpu-wipe");
    let c =
        host.check("[[cleaning]]\nmethod = \"command\"\ncommand = [\"gpu-wipe\", \"{device}\"]\n");
    assert!(c.problems().is_empty(), "{:#?}", c.problems());
    assert_eq!(c.cleaning.len(), 1);
}

#[test]
fn pci_reset_without_a_reset_file_fails_the_check() {
    let host = Host::new();
    let qat = testing::qat(&host.fs, 0x3d, 2);
    let rules =
        "[[cleaning]]\nmethod = \"pci-reset\"\n[cleaning.selector]\ndevice_type = \"QAT\"\n";
    let problem = the_problem(&host.check(rules), &qat);
    let reset = host.fs.root.join(format!("bus/pci/devices/{qat}/reset"));
    assert!(
        problem.ends_with(&format!(
            "cleaning[0] (pci-reset) cannot work: pci-reset: {} does not exist: the kernel offers no reset for this function",
            reset.display()
        )),
        "{problem}"
    );
    host.fs.reset_file(&qat);
    let c = host.check(rules);
    assert!(c.problems().is_empty(), "{:#?}", c.problems());
    // check does not write; the agent opens the file at start-up.
    assert!(
        c.cleaning[0].unverified[0].contains("checked by the agent at start-up"),
        "{:?}",
        c.cleaning[0]
    );
}

#[test]
fn fpga_default_needs_a_region_a_programming_tool_and_an_image_service() {
    let host = Host::new();
    let pac = testing::pac_opae(&host.fs, 0x5e, 0);
    let gpu = testing::two_gpus(&host.fs)[0].clone();
    let rules = "[[cleaning]]\nmethod = \"fpga-default\"\nimage = \"default-design\"\n";
    let c = host.check(rules);
    let p = c.problems();
    let of = |a: &str| -> Vec<&String> {
        p.iter()
            .filter(|x| x.starts_with(&format!("device {a} ")))
            .collect()
    };
    // The GPU has no region and its driver programs nothing.
    let g = of(&gpu);
    assert!(
        g.iter()
            .any(|x| x.ends_with("fpga-default: the device has no FPGA region to program")),
        "{g:#?}"
    );
    assert!(
        g.iter()
            .any(|x| x.ends_with("fpga-default: driver nvidia does not program devices")),
        "{g:#?}"
    );
    // The PAC's tool is not on the PATH, and nothing names the image service.
    let f = of(&pac);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(
        f[0].contains("fpga-default's programming tool: \"fpgaconf\" is not on the PATH"),
        "{}",
        f[0]
    );
    assert!(
        f[1].ends_with("neither glance_url nor a [keystone] catalog names the image service to fetch image default-design from"),
        "{}",
        f[1]
    );

    host.stand_in("fpgaconf");
    let mut s = host.settings(
        "[[cleaning]]\nmethod = \"fpga-default\"\nimage = \"default-design\"\n\
         [cleaning.selector]\ndevice_type = \"FPGA\"\n",
    );
    s.glance_url = Some("http://127.0.0.1:9".into());
    let c = Agent::offline(s).unwrap().check_with(&host.search());
    assert!(c.problems().is_empty(), "{:#?}", c.problems());
    assert_eq!(c.cleaning.len(), 1, "only the PAC");
    assert!(
        c.cleaning[0].unverified[0].starts_with("fpga-default: image default-design not verified"),
        "{:?}",
        c.cleaning[0]
    );
    let text = c.text();
    assert!(
        text.contains("not verified: only the image service knows it"),
        "{text}"
    );
}

#[test]
fn a_keystone_catalog_names_the_image_service_for_check() {
    let host = Host::new();
    testing::pac_opae(&host.fs, 0x5e, 0);
    host.stand_in("fpgaconf");
    let mut s = host.settings("[[cleaning]]\nmethod = \"fpga-default\"\nimage = \"i\"\n");
    s.keystone = Some(
        toml::from_str("auth_url = \"http://127.0.0.1:9/v3\"\nusername = \"a\"\npassword = \"b\"\nproject_name = \"p\"\n")
            .unwrap(),
    );
    let c = Agent::offline(s).unwrap().check_with(&host.search());
    assert!(c.problems().is_empty(), "{:#?}", c.problems());
}

/// The `[[cleaning]]` TOML blocks of the README and docs/cleaning.md.
fn documented_blocks() -> Vec<(&'static str, String)> {
    let docs = [
        ("README.md", include_str!("../../../README.md")),
        (
            "docs/cleaning.md",
            include_str!("../../../docs/cleaning.md"),
        ),
    ];
    let mut out = Vec::new();
    for (name, text) in docs {
        for b in text.split("```toml\n").skip(1) {
            let b = b.split("```").next().unwrap_or_default();
            if b.contains("[[cleaning]]") {
                out.push((name, b.to_owned()));
            }
        }
    }
    out
}

/// Every documented example passes the check on a host with devices it matches: GPUs
/// with reset files, an NVMe drive passed through (bound to vfio-pci: no node), an
/// Intel PAC; the vendor tools as stand-ins, the NVMe helper the one in packaging/.
#[test]
fn every_documented_rule_passes_the_check_on_devices_it_matches() {
    let host = Host::new();
    for gpu in testing::two_gpus(&host.fs) {
        host.fs.reset_file(&gpu);
    }
    let drive = testing::nvme(&host.fs, 0x5a, "vfio-pci");
    testing::pac_opae(&host.fs, 0x5e, 0);
    for tool in ["nvidia-smi", "nvme", "fpgaconf"] {
        host.stand_in(tool);
    }
    let helper =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/sbin/accel-nvme-clean");
    std::os::unix::fs::symlink(&helper, host.bin().join("accel-nvme-clean")).unwrap();

    let blocks = documented_blocks();
    assert!(blocks.len() >= 4, "{blocks:#?}");
    let mut methods = Vec::new();
    for (name, block) in &blocks {
        let mut s = host.settings(block);
        s.glance_url = Some("http://127.0.0.1:9".into());
        let c = Agent::offline(s).unwrap().check_with(&host.search());
        assert!(
            c.problems().is_empty(),
            "{name}: {:#?}\n{block}",
            c.problems()
        );
        assert!(
            c.unmatched_rules.is_empty(),
            "{name}: rule(s) {:?} match no device of the test host\n{block}",
            c.unmatched_rules
        );
        methods.extend(c.cleaning.iter().map(|d| d.method));
        // The NVMe examples reach the passed-through drive.
        if block.contains("\"SSD\"") {
            assert!(
                c.cleaning.iter().any(|d| d.device == drive),
                "{name}\n{block}"
            );
        }
    }
    for m in ["pci-reset", "fpga-default", "command"] {
        assert!(
            methods.contains(&m),
            "no documented example of {m} was checked"
        );
    }
}
