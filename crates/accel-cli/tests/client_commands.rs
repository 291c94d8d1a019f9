//! `accel device-profile ...`, `accel arq ...`, `accel provider ...` and `accel device ...`: the built binary run against the
//! real server (both APIs on port 0, a fresh database per test, the fake device
//! reported), on SQLite and PostgreSQL.

mod common;

use common::Run;

use accel_testkit::server::{Backend, TestServer, BACKENDS};
use serde_json::Value;

const INSTANCE: &str = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e";

/// Both APIs on port 0 (the test kit's server) with compute1's fake device reported.
struct Server {
    accel: String,
    placement: String,
    _server: TestServer,
}

async fn spawn(backend: Backend) -> Server {
    let store = accel_testkit::server::store(backend).await;
    let server = TestServer::start(
        accel_testkit::server::builder(store).fake_devices(Some("compute1".to_owned())),
    )
    .await;
    Server {
        accel: server.accel.clone(),
        placement: server.placement.clone(),
        _server: server,
    }
}

impl Server {
    /// `accel ARGS` with ACCEL_URL pointing here and the given token.
    async fn accel_as(&self, token: &str, args: &[&str]) -> Run {
        let accelerator = format!("{}/accelerator", self.accel);
        common::accel(args, &[("ACCEL_URL", &accelerator), ("ACCEL_TOKEN", token)]).await
    }

    async fn accel(&self, args: &[&str]) -> Run {
        self.accel_as("admin", args).await
    }

    async fn fake_device_rp(&self) -> String {
        let v = common::placement_get(
            &self.placement,
            "/resource_providers?name=compute1_FakeDevice",
        )
        .await;
        v["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

#[tokio::test]
async fn device_profile_create_list_show_delete() {
    for backend in BACKENDS {
        let s = spawn(backend).await;
        let created = s
            .accel(&[
                "device-profile",
                "create",
                "dp1",
                "--group",
                "resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required",
                "--group",
                "resources:CUSTOM_ACCELERATOR_FPGA=2",
                "--description",
                "two groups",
            ])
            .await;
        assert!(created.ok(), "{}", created.stderr);
        // The default output is a Field/Value table.
        let lines: Vec<&str> = created.stdout.lines().collect();
        assert!(lines[1].starts_with("| Field "), "{}", created.stdout);
        assert!(lines
            .iter()
            .any(|l| l.starts_with("| name ") && l.contains(" dp1 ")));
        assert!(lines
            .iter()
            .any(|l| l.starts_with("| description ") && l.contains(" two groups ")));

        let list = s
            .accel(&["device-profile", "list", "-f", "json"])
            .await
            .json();
        assert_eq!(list.as_array().unwrap().len(), 1);
        assert_eq!(list[0]["name"], "dp1");
        assert_eq!(
            list[0]["groups"],
            serde_json::json!([
                {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
                {"resources:CUSTOM_ACCELERATOR_FPGA": "2"}
            ])
        );
        let uuid = list[0]["uuid"].as_str().unwrap().to_owned();
        let table = s.accel(&["device-profile", "list"]).await;
        assert!(table.ok());
        assert!(table.stdout.lines().nth(1).unwrap().starts_with("| uuid "));
        assert!(table.stdout.contains(&uuid));

        // Show by name (microversion 2.2+) and by uuid.
        for key in ["dp1", uuid.as_str()] {
            let shown = s
                .accel(&["device-profile", "show", key, "-f", "json"])
                .await
                .json();
            assert_eq!(shown["uuid"], uuid.as_str());
            assert_eq!(shown["description"], "two groups");
        }

        // A member may not create one; the server's message comes through.
        let denied = s
            .accel_as(
                "alice:p1",
                &[
                    "device-profile",
                    "create",
                    "x",
                    "--group",
                    "resources:FPGA=1",
                ],
            )
            .await;
        assert!(!denied.ok());
        assert!(
            denied.stderr.contains("HTTP 403: Access was denied"),
            "{}",
            denied.stderr
        );
        let bad = s
            .accel(&["device-profile", "create", "y", "--group", "resources:FPGA"])
            .await;
        assert!(!bad.ok());
        assert!(bad.stderr.contains("is not KEY=VALUE"), "{}", bad.stderr);

        let deleted = s.accel(&["device-profile", "delete", "dp1"]).await;
        assert!(deleted.ok(), "{}", deleted.stderr);
        assert_eq!(deleted.stdout, "");
        let list = s
            .accel(&["device-profile", "list", "-f", "json"])
            .await
            .json();
        assert_eq!(list, serde_json::json!([]));
        let missing = s.accel(&["device-profile", "show", &uuid]).await;
        assert!(!missing.ok());
        assert!(missing.stderr.contains("HTTP 404"), "{}", missing.stderr);
    }
}

#[tokio::test]
async fn arq_create_list_show_bind_unbind_delete() {
    for backend in BACKENDS {
        let s = spawn(backend).await;
        let created = s
            .accel(&[
                "device-profile",
                "create",
                "dp1",
                "--groups-json",
                r#"[{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]"#,
            ])
            .await;
        assert!(created.ok(), "{}", created.stderr);

        // Project p1's member creates an ARQ; project p2 does not see it.
        let arqs = s
            .accel_as("alice:p1", &["arq", "create", "dp1", "-f", "json"])
            .await
            .json();
        assert_eq!(arqs.as_array().unwrap().len(), 1);
        assert_eq!(arqs[0]["state"], "Initial");
        assert_eq!(arqs[0]["device_profile_group_id"], 0);
        let arq = arqs[0]["uuid"].as_str().unwrap().to_owned();
        let theirs = s
            .accel_as("bob:p2", &["arq", "list", "-f", "json"])
            .await
            .json();
        assert_eq!(theirs, serde_json::json!([]));
        let mine = s.accel_as("alice:p1", &["arq", "list"]).await;
        assert!(mine.stdout.contains(&arq), "{}", mine.stdout);

        // Bind, as Nova does: the user's token (the ARQ takes the token's project)
        // and a service token (--service-token defaults to the token).
        let rp = s.fake_device_rp().await;
        let bound = s
            .accel_as(
                "alice:p1",
                &[
                    "arq",
                    "bind",
                    &arq,
                    "--hostname",
                    "compute1",
                    "--device-rp-uuid",
                    &rp,
                    "--instance-uuid",
                    INSTANCE,
                    "-f",
                    "json",
                ],
            )
            .await
            .json();
        assert_eq!(bound["uuid"], arq.as_str());
        assert_eq!(bound["instance_uuid"], INSTANCE);
        assert_eq!(bound["hostname"], "compute1");
        assert_eq!(bound["device_rp_uuid"], rp.as_str());
        assert_ne!(bound["state"], "Initial");
        let by_instance = s
            .accel_as(
                "alice:p1",
                &["arq", "list", "--instance", INSTANCE, "-f", "json"],
            )
            .await
            .json();
        assert_eq!(by_instance[0]["uuid"], arq.as_str());

        let unbound = s
            .accel_as("alice:p1", &["arq", "unbind", &arq, "-f", "json"])
            .await
            .json();
        assert_eq!(unbound["state"], "Unbound");
        assert_eq!(unbound["instance_uuid"], Value::Null);

        let shown = s
            .accel_as("alice:p1", &["arq", "show", &arq, "-f", "json"])
            .await
            .json();
        assert_eq!(shown["state"], "Unbound");
        assert_eq!(shown["project_id"], "p1");

        let deleted = s.accel_as("alice:p1", &["arq", "delete", &arq]).await;
        assert!(deleted.ok(), "{}", deleted.stderr);
        let gone = s.accel_as("alice:p1", &["arq", "show", &arq]).await;
        assert!(!gone.ok());
        assert!(gone.stderr.contains("HTTP 404"), "{}", gone.stderr);
        let bad = s.accel(&["arq", "show", "../v2"]).await;
        assert!(!bad.ok());
        assert!(bad.stderr.contains("is not a uuid"), "{}", bad.stderr);
    }
}

/// `accel provider list|show|tree|usage` (issue 31 item 13): Placement reads by name,
/// in both formats, a tree drawn from its root, usage moving with an allocation.
#[tokio::test]
async fn provider_list_show_tree_and_usage() {
    for backend in BACKENDS {
        let s = spawn(backend).await;
        let env = [("ACCEL_PLACEMENT_URL", s.placement.as_str())];
        let run = |args: &'static [&'static str]| common::accel(args, &env);
        let dev = s.fake_device_rp().await;

        let all = run(&["provider", "list", "-f", "json"]).await.json();
        let names: Vec<&str> = all
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["compute1", "compute1_FakeDevice"], "{backend:?}");
        let one = run(&[
            "provider",
            "list",
            "--name",
            "compute1_FakeDevice",
            "-f",
            "json",
        ])
        .await
        .json();
        assert_eq!(one[0]["uuid"], dev.as_str());
        let root = one[0]["root_provider_uuid"].as_str().unwrap().to_owned();
        assert_eq!(one[0]["parent_provider_uuid"], root.as_str());
        let fpga = run(&["provider", "list", "--resources", "FPGA=1", "-f", "json"])
            .await
            .json();
        assert_eq!(fpga.as_array().unwrap().len(), 1);
        let table = run(&["provider", "list"]).await;
        assert!(table.ok(), "{}", table.stderr);
        assert!(table.stdout.starts_with("+-"), "{}", table.stdout);
        assert!(table.stdout.contains(&dev), "{}", table.stdout);

        // show by name and by uuid: the same provider, with traits.
        let by_name = run(&["provider", "show", "compute1_FakeDevice", "-f", "json"])
            .await
            .json();
        let by_uuid = common::accel(&["provider", "show", &dev, "-f", "json"], &env)
            .await
            .json();
        assert_eq!(by_name, by_uuid);
        assert!(by_name["traits"]
            .as_array()
            .unwrap()
            .contains(&Value::from("CUSTOM_FAKE_DEVICE")));
        let missing = run(&["provider", "show", "compute9"]).await;
        assert_eq!(missing.code, Some(1));
        assert!(
            missing.stderr.contains("\"compute9\""),
            "{}",
            missing.stderr
        );

        // tree from any provider of it: the root first, the device under it.
        let tree = run(&["provider", "tree", "compute1_FakeDevice"]).await;
        assert!(tree.ok(), "{}", tree.stderr);
        assert_eq!(
            tree.stdout.trim_end(),
            format!("compute1 ({root})\n└─ compute1_FakeDevice ({dev})")
        );
        let depths = run(&["provider", "tree", "compute1", "-f", "json"])
            .await
            .json();
        assert_eq!(depths[1]["depth"], 1);

        // usage: 16 FPGAs, then 3 used by a consumer.
        let usage = run(&["provider", "usage", "compute1_FakeDevice", "-f", "json"])
            .await
            .json();
        assert_eq!(usage[0]["resource_class"], "FPGA");
        assert_eq!(
            (usage[0]["total"].as_i64(), usage[0]["free"].as_i64()),
            (Some(16), Some(16))
        );
        let put = reqwest::Client::new()
            .put(format!("{}/allocations/{INSTANCE}", s.placement))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .json(&serde_json::json!({
                "allocations": {&dev: {"resources": {"FPGA": 3}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
                "consumer_type": "INSTANCE",
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 204);
        let usage = run(&["provider", "usage", "compute1_FakeDevice", "-f", "json"])
            .await
            .json();
        assert_eq!(
            (usage[0]["used"].as_i64(), usage[0]["free"].as_i64()),
            (Some(3), Some(13))
        );
        let table = run(&["provider", "usage", "compute1_FakeDevice"]).await;
        assert!(
            table
                .stdout
                .starts_with(&format!("compute1_FakeDevice ({dev})\n+-")),
            "{}",
            table.stdout
        );
    }
}

#[tokio::test]
async fn device_list_clean_release() {
    for backend in BACKENDS {
        let s = spawn(backend).await;
        let rp = s.fake_device_rp().await;
        let state = |v: &Value| v[0]["state"].as_str().unwrap_or_default().to_owned();
        let list = s.accel(&["device", "list", "-f", "json"]).await.json();
        assert_eq!(list[0]["rp_uuid"], rp.as_str(), "{backend:?}: {list}");
        assert_eq!(
            (state(&list), list[0]["cleaned_on_release"].clone()),
            ("clean".into(), Value::Bool(false))
        );
        let table = s.accel(&["device", "list", "--hostname", "compute1"]).await;
        assert!(
            table.ok() && table.stdout.contains(" clean "),
            "{}",
            table.stdout
        );

        // An operator asks for a cleaning (nothing holds the device), then releases it.
        let cleaning = s
            .accel(&["device", "clean", &rp, "-f", "json"])
            .await
            .json();
        assert_eq!(state(&cleaning), "cleaning", "{cleaning}");
        let list = s.accel(&["device", "list", "-f", "json"]).await.json();
        assert_eq!(state(&list), "cleaning");
        let released = s
            .accel(&["device", "release", &rp, "-f", "json"])
            .await
            .json();
        assert_eq!(state(&released), "clean", "{released}");

        let refused = s.accel_as("someone:p1", &["device", "list"]).await;
        assert!(
            !refused.ok() && refused.stderr.contains("HTTP 403"),
            "{}",
            refused.stderr
        );
        let unknown = s.accel(&["device", "clean", INSTANCE]).await;
        assert!(
            !unknown.ok() && unknown.stderr.contains("HTTP 404"),
            "{}",
            unknown.stderr
        );
    }
}

/// `arq bind --help` shows what bind itself needs apart from the flags every client
/// command shares (issue 31 item 8).
#[tokio::test]
async fn bind_help_shows_its_own_arguments_apart_from_the_shared_flags() {
    let run = common::accel(&["arq", "bind", "--help"], &[]).await;
    assert!(run.ok(), "{}", run.stderr);
    let help = run.stdout;
    let shared = help
        .find("Connection and output options:")
        .unwrap_or_else(|| panic!("no heading for the shared flags: {help}"));
    let (own, rest) = help.split_at(shared);
    // The shared section ends at the blank line before the examples.
    let rest = rest.split("\n\n").next().unwrap();
    for flag in [
        "--hostname",
        "--device-rp-uuid",
        "--instance-uuid",
        "--wait",
    ] {
        assert!(own.contains(flag) && !rest.contains(flag), "{flag}: {help}");
    }
    for flag in ["--url", "--token", "--format", "--service-token"] {
        assert!(rest.contains(flag) && !own.contains(flag), "{flag}: {help}");
    }
}
