//! The agent's start-up check of its `[[cleaning]]` rules (issue 41 item 3): a rule
//! that cannot work for a device stops the agent naming the device and the reason;
//! reset files are opened for writing; an `fpga-default` image is asked of Glance (a
//! stand-in here), whose "no", and only that, stops the agent.

use accel_agent::cleaner::resolve::SearchPath;
use accel_agent::cleaning::{validate, CleaningFile};
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::{Agent, Settings};

fn rules(text: &str) -> Vec<accel_agent::cleaning::Rule> {
    #[derive(serde::Deserialize)]
    struct Doc {
        cleaning: Vec<CleaningFile>,
    }
    validate(toml::from_str::<Doc>(text).unwrap().cleaning).unwrap()
}

#[tokio::test]
async fn the_agent_refuses_to_start_naming_each_device_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let drive = testing::nvme(&fs, 0x5e, "vfio-pci");
    let qat = testing::qat(&fs, 0x3d, 2);
    testing::stand_in(dir.path(), "nvme");
    let search = SearchPath::new(dir.path());
    let text =
        "[[cleaning]]\nmethod = \"command\"\ncommand = [\"nvme\", \"format\", \"{device}\"]\n\
                [cleaning.selector]\ndevice_type = \"SSD\"\n\
                [[cleaning]]\nmethod = \"pci-reset\"\n[cleaning.selector]\ndevice_type = \"QAT\"\n";
    let mut s = Settings::new("http://127.0.0.1:9", "cn1", &fs.root);
    s.cleaning = rules(text);
    let e = Agent::new(s.clone())
        .unwrap()
        .check_cleaning_with(&search)
        .await
        .unwrap_err();
    assert_eq!(e.0.len(), 2, "{e}");
    let said = e.to_string();
    assert!(
        said.starts_with("2 [[cleaning]] problem(s), so the agent does not start"),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "device {drive} (cn1_{drive}): cleaning[0] (command) cannot work: command: the argument \"{{device}}\" names {{device}}, but the function has no device node (it is bound to vfio-pci, for passthrough)"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "device {qat} (cn1_{qat}): cleaning[1] (pci-reset) cannot work: pci-reset: {} does not exist",
            fs.root.join(format!("bus/pci/devices/{qat}/reset")).display()
        )),
        "{said}"
    );

    // Fixed: the drive by its address, the QAT with a reset the kernel offers.
    fs.reset_file(&qat);
    s.cleaning = rules(&text.replace("{device}", "{address}"));
    let agent = Agent::new(s).unwrap();
    agent.check_cleaning_with(&search).await.unwrap();
    // Without rules there is nothing to check.
    let empty = Settings::new("http://127.0.0.1:9", "cn1", &fs.root);
    Agent::new(empty)
        .unwrap()
        .check_cleaning_with(&SearchPath::new(""))
        .await
        .unwrap();
}

/// A reset file no one may open for writing (a read-only sysfs attribute stands in
/// for the read-only /sys of the shipped unit): check cannot tell, start-up can.
#[tokio::test]
async fn at_start_up_a_reset_file_the_agent_cannot_write_is_a_problem() {
    let read_only = std::path::Path::new("/sys/devices/system/cpu/online");
    if !read_only.is_file() {
        eprintln!("skipped: no {} on this machine", read_only.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let qat = testing::qat(&fs, 0x3d, 2);
    std::os::unix::fs::symlink(
        read_only,
        fs.root.join(format!("bus/pci/devices/{qat}/reset")),
    )
    .unwrap();
    let mut s = Settings::new("http://127.0.0.1:9", "cn1", &fs.root);
    s.cleaning = rules("[[cleaning]]\nmethod = \"pci-reset\"\n");
    let search = SearchPath::new(dir.path());
    let c = Agent::offline(s.clone()).unwrap().check_with(&search);
    assert!(c.problems().is_empty(), "{:#?}", c.problems());
    let e = Agent::new(s)
        .unwrap()
        .check_cleaning_with(&search)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "device {qat} (cn1_{qat}): cleaning[0] (pci-reset) cannot work: pci-reset: the agent cannot open"
        )) && e.contains("ProtectKernelTunables=yes"),
        "{e}"
    );
}

/// A stand-in Glance: `default` is active with a checksum, `queued` is not active,
/// `unchecked` has no checksum, anything else is 404.
async fn fake_glance() -> String {
    use axum::extract::Path;
    use axum::http::StatusCode;
    use axum::Json;
    use serde_json::json;
    let app = axum::Router::new().route(
        "/v2/images/{id}",
        axum::routing::get(|Path(id): Path<String>| async move {
            match id.as_str() {
                "default" => Ok(Json(
                    json!({"id": "default", "status": "active", "checksum": "900150983cd24fb0d6963f7d28e17f72"}),
                )),
                "queued" => Ok(Json(json!({"id": "queued", "status": "queued"}))),
                "unchecked" => Ok(Json(json!({"id": "unchecked", "status": "active"}))),
                _ => Err(StatusCode::NOT_FOUND),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::test]
async fn fpga_default_images_are_asked_of_glance_at_start_up() {
    let glance = fake_glance().await;
    let dir = tempfile::tempdir().unwrap();
    let search = SearchPath::new(dir.path());
    let settings = |image: &str, glance: &str| {
        let mut s = Settings::new("http://127.0.0.1:9", "cn1", dir.path());
        s.drivers = Some(vec!["fake".into()]);
        s.driver.fake = vec![toml::from_str("type = \"FPGA\"\nmodel = \"demo\"\n").unwrap()];
        s.glance_url = Some(glance.to_owned());
        s.cleaning = rules(&format!(
            "[[cleaning]]\nmethod = \"fpga-default\"\nimage = \"{image}\"\n"
        ));
        s
    };
    Agent::new(settings("default", &glance))
        .unwrap()
        .check_cleaning_with(&search)
        .await
        .unwrap();
    for (image, why) in [
        ("gone", "the image service has no such image"),
        ("queued", "it is queued, not active"),
        ("unchecked", "it has no checksum"),
    ] {
        let e = Agent::new(settings(image, &glance))
            .unwrap()
            .check_cleaning_with(&search)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("device 00fa:00:00.0 (cn1_00fa:00:00.0")
                && e.contains(&format!(
                    "cleaning[0] (fpga-default) cannot work: fpga-default: image {image}: {why}"
                )),
            "{image}: {e}"
        );
    }
    // An image service that cannot be reached says nothing about the image: the agent
    // starts (and logs it), as it waits out an unreachable server.
    Agent::new(settings("gone", "http://127.0.0.1:9"))
        .unwrap()
        .check_cleaning_with(&search)
        .await
        .unwrap();
}
