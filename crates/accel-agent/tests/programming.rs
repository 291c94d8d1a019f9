//! FPGA programming through the vendor tools, with stand-in tools (shell scripts) that
//! record their arguments and change the fake sysfs as the real ones change the card.

use accel_agent::config::{DriverSettings, ProgramTools};
use accel_agent::drivers::{self, Host, ProgramError};
use accel_agent::pci::PciBus;
use accel_agent::sysfs::Sysfs;
use accel_agent::testing::{self, FakeSysfs};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const NEW_AFU: &str = "0b0c3c521c4e4d378c382f7a1f9b9d10";

/// A tool that logs its arguments to `<dir>/args`, then runs `then` (shell).
fn tool(dir: &Path, name: &str, then: &str) -> PathBuf {
    let p = dir.join(name);
    let log = dir.join("args");
    std::fs::write(
        &p,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\n{then}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn program(
    fs: &FakeSysfs,
    tools: ProgramTools,
    driver: &str,
    bitstream: &Path,
) -> Result<Option<String>, ProgramError> {
    let cfg = DriverSettings {
        tools,
        ..Default::default()
    };
    let sysfs = Sysfs::new(&fs.root);
    let all = drivers::select(&cfg, Some(&[driver.to_owned()])).unwrap();
    let found = drivers::discover(&sysfs, &cfg, &all, None);
    let device = &found.devices[0];
    let bus = PciBus::scan(&sysfs);
    let host = Host::new(&sysfs, &bus, &cfg);
    all[0].program(&host, device, 0, bitstream)
}

#[test]
fn intel_pac_is_programmed_with_fpgaconf_and_reports_the_new_afu() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let pf = testing::pac_opae(&fs, 0xaf, 0);
    let afu = fs
        .root
        .join("bus/pci/devices")
        .join(&pf)
        .join("fpga/intel-fpga-dev.0/intel-fpga-port.0/afu_id");
    let gbs = dir.path().join("nlb.gbs");
    std::fs::write(&gbs, b"green bitstream").unwrap();
    let fpgaconf = tool(
        dir.path(),
        "fpgaconf",
        &format!("echo {NEW_AFU} > '{}'", afu.display()),
    );
    let got = program(
        &fs,
        ProgramTools {
            fpgaconf: Some(fpgaconf),
            ..Default::default()
        },
        "intel_fpga",
        &gbs,
    )
    .unwrap();
    assert_eq!(got.as_deref(), Some(NEW_AFU));
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert_eq!(
        args.trim(),
        format!(
            "--segment 0x0000 --bus 0xaf --device 0x00 --function 0x0 {}",
            gbs.display()
        )
    );

    // A failing tool is a failure with what it said; the AFU stays.
    std::fs::write(&afu, format!("{}\n", testing::PAC_AFU_ID)).unwrap();
    let failing = tool(dir.path(), "fpgaconf-bad", "echo 'PR IP busy' >&2; exit 3");
    let err = program(
        &fs,
        ProgramTools {
            fpgaconf: Some(failing),
            ..Default::default()
        },
        "intel_fpga",
        &gbs,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("PR IP busy"), "{err}");
    let missing = program(
        &fs,
        ProgramTools {
            fpgaconf: Some(dir.path().join("absent")),
            ..Default::default()
        },
        "intel_fpga",
        &gbs,
    )
    .unwrap_err()
    .to_string();
    assert!(missing.contains("cannot run"), "{missing}");
}

#[test]
fn xilinx_card_is_programmed_with_xbutil_on_its_user_function() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let mgmt = testing::bdf(0x65, 0, 0);
    let user = testing::bdf(0x65, 0, 1);
    fs.function(&mgmt, 0x10ee, 0x5004, 0x120000)
        .driver("xclmgmt");
    fs.function(&user, 0x10ee, 0x5005, 0x120000)
        .driver("vfio-pci");
    let uuid_file = fs
        .root
        .join("bus/pci/devices")
        .join(&user)
        .join("xclbinuuid");
    let xclbin = dir.path().join("k.xclbin");
    std::fs::write(&xclbin, b"xclbin").unwrap();
    let xbutil = tool(
        dir.path(),
        "xbutil",
        &format!("echo {NEW_AFU} > '{}'", uuid_file.display()),
    );
    let got = program(
        &fs,
        ProgramTools {
            xbutil: Some(xbutil),
            ..Default::default()
        },
        "xilinx",
        &xclbin,
    )
    .unwrap();
    assert_eq!(got.as_deref(), Some(NEW_AFU));
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert_eq!(
        args.trim(),
        format!("program --device {user} --user {}", xclbin.display())
    );
}
