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

/// Gives the device provider `rp` the trait an agent's `[[cleaning]]` rule gives it
/// (the server's built-in fake devices have no agent).
async fn give_cleaning_rule(placement: &str, rp: &str) {
    let client = reqwest::Client::new();
    let req = |m: reqwest::Method, path: String| {
        client
            .request(m, format!("{placement}{path}"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
    };
    let t = "CUSTOM_ACCEL_CLEANED_ON_RELEASE";
    let made = req(reqwest::Method::PUT, format!("/traits/{t}"))
        .send()
        .await
        .unwrap();
    assert!(made.status().is_success(), "{}", made.status());
    let path = format!("/resource_providers/{rp}/traits");
    let traits: Value = req(reqwest::Method::GET, path.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut names = traits["traits"].as_array().unwrap().clone();
    names.push(Value::from(t));
    let put = req(reqwest::Method::PUT, path)
        .json(&serde_json::json!({
            "traits": names,
            "resource_provider_generation": traits["resource_provider_generation"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
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

        // No [[cleaning]] rule matches the device: nothing would clean it, so asking
        // for a cleaning is refused and changes nothing (issue 41).
        let no_rule = s.accel(&["device", "clean", &rp]).await;
        assert!(
            !no_rule.ok()
                && no_rule.stderr.contains("HTTP 409")
                && no_rule.stderr.contains("has no cleaning rule"),
            "{}",
            no_rule.stderr
        );
        let list = s.accel(&["device", "list", "-f", "json"]).await.json();
        assert_eq!(state(&list), "clean");

        give_cleaning_rule(&s.placement, &rp).await;
        let placement = |method: reqwest::Method, path: String, body: Option<Value>| {
            let mut r = reqwest::Client::new()
                .request(method, format!("{}{path}", s.placement))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.39");
            if let Some(b) = body {
                r = r.json(&b);
            }
            async move { r.send().await.unwrap().status().as_u16() }
        };

        // A device in use is neither cleaned nor released under its tenant.
        let held = placement(
            reqwest::Method::PUT,
            format!("/allocations/{INSTANCE}"),
            Some(serde_json::json!({
                "allocations": {&rp: {"resources": {"FPGA": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
                "consumer_type": "INSTANCE",
            })),
        )
        .await;
        assert_eq!(held, 204);
        for action in ["clean", "release"] {
            let refused = s.accel(&["device", action, &rp]).await;
            assert!(
                !refused.ok()
                    && refused.stderr.contains("HTTP 409")
                    && refused.stderr.contains("is in use"),
                "{action}: {}",
                refused.stderr
            );
        }
        let list = s.accel(&["device", "list", "-f", "json"]).await.json();
        assert_eq!(state(&list), "clean");
        assert_eq!(
            placement(
                reqwest::Method::DELETE,
                format!("/allocations/{INSTANCE}"),
                None
            )
            .await,
            204
        );
        // Its tenant gone, the release started a cleaning; the operator releases it
        // after a manual check, then asks for a cleaning again.
        let list = s.accel(&["device", "list", "-f", "json"]).await.json();
        assert_eq!(state(&list), "cleaning", "{list}");
        let released = s
            .accel(&["device", "release", &rp, "-f", "json"])
            .await
            .json();
        assert_eq!(state(&released), "clean", "{released}");

        // An operator asks for a cleaning (nothing holds the device), then releases it.
        // (The release re-applied the agent's report, which carries no rule here.)
        give_cleaning_rule(&s.placement, &rp).await;
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

/// Issue 29 item 4: the client commands find the cloud as the OpenStack clients do,
/// `--os-cloud` with clouds.yaml or the `OS_AUTH_URL` variables: a password token from
/// Keystone (the test kit's fake Keystone v3) and both APIs from its catalog, against
/// accel in keystone mode, which refuses noauth's `admin`. An explicit URL still wins.
#[tokio::test]
async fn os_cloud_and_the_os_variables_find_both_apis_in_keystones_catalog() {
    use accel_server::auth::keystone::{Keystone, KeystoneConfig};
    use accel_server::auth::AuthStrategy;
    use accel_testkit::keystone::{catalog_service, FakeKeystone, Subject};
    use serde_json::json;
    let ks = FakeKeystone::start().await;
    ks.add_user("secret", Subject::project("accel", "service", &["service"]));
    ks.add_user(
        "s3cret",
        Subject::project("operator", "ops", &["admin", "member", "reader"]),
    );
    let cfg: KeystoneConfig = serde_json::from_value(json!({
        "auth_url": format!("{}/v3", ks.url), "username": "accel",
        "password": "secret", "project_name": "service",
    }))
    .unwrap();
    let store = accel_testkit::server::store(Backend::Sqlite).await;
    let server = TestServer::start(
        accel_testkit::server::builder(store)
            .fake_devices(Some("compute1".to_owned()))
            .config(accel_server::ServerConfig {
                auth_strategy: AuthStrategy::Keystone,
                keystone: Some(std::sync::Arc::new(Keystone::new(cfg).unwrap())),
                allocation_conflict_retry_count: 10,
                max_allocation_candidates: 1000,
                ..Default::default()
            }),
    )
    .await;
    ks.set_catalog(json!([
        catalog_service("placement", "placement", &server.placement, "RegionOne"),
        catalog_service(
            "accelerator",
            "cyborg",
            &format!("{}/accelerator/v2", server.accel),
            "RegionOne"
        ),
    ]));
    let dir = tempfile::tempdir().unwrap();
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!(
            "clouds:\n  test:\n    auth:\n      auth_url: {}/v3\n      username: operator\n      \
             password: s3cret\n      project_name: ops-name\n      user_domain_name: Default\n      \
             project_domain_name: Default\n    region_name: RegionOne\n",
            ks.url
        ),
    )
    .unwrap();
    let clouds = clouds.to_string_lossy().into_owned();
    let with_file = [("OS_CLIENT_CONFIG_FILE", clouds.as_str())];

    // Placement through --os-cloud.
    let providers = common::accel(
        &["provider", "list", "-f", "json", "--os-cloud", "test"],
        &with_file,
    )
    .await;
    let listed = providers.json();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"compute1_FakeDevice"), "{names:?}");

    // The accelerator API through the OS_* variables; read back through OS_CLOUD.
    let auth_url = format!("{}/v3", ks.url);
    let os_vars = [
        ("OS_AUTH_URL", auth_url.as_str()),
        ("OS_USERNAME", "operator"),
        ("OS_PASSWORD", "s3cret"),
        ("OS_PROJECT_NAME", "ops-name"),
    ];
    let created = common::accel(
        &[
            "device-profile",
            "create",
            "dp1",
            "--group",
            "resources:FPGA=1",
        ],
        &os_vars,
    )
    .await;
    assert!(created.ok(), "{}", created.stderr);
    let listed = common::accel(
        &["device-profile", "list", "-f", "json"],
        &[
            ("OS_CLOUD", "test"),
            ("OS_CLIENT_CONFIG_FILE", clouds.as_str()),
        ],
    )
    .await;
    assert_eq!(listed.json()[0]["name"], "dp1");
    // accel explain and its two APIs.
    let explained = common::accel(
        &[
            "explain",
            "--resources",
            "FPGA=1",
            "-f",
            "json",
            "--os-cloud",
            "test",
        ],
        &with_file,
    )
    .await;
    assert!(explained.ok(), "{}", explained.stderr);

    // Without a cloud the token is noauth's admin, which Keystone mode refuses.
    let accelerator = format!("{}/accelerator", server.accel);
    let refused = common::accel(
        &["device-profile", "list"],
        &[("ACCEL_URL", accelerator.as_str())],
    )
    .await;
    assert!(
        !refused.ok() && refused.stderr.contains("401"),
        "{}",
        refused.stderr
    );
    // An explicit URL wins over the catalog.
    let overridden = common::accel(
        &[
            "device-profile",
            "list",
            "--os-cloud",
            "test",
            "--url",
            "http://127.0.0.1:9",
        ],
        &with_file,
    )
    .await;
    assert!(
        !overridden.ok() && overridden.stderr.contains("127.0.0.1:9"),
        "{}",
        overridden.stderr
    );
    // Bad names and passwords say where they came from.
    let unknown = common::accel(&["provider", "list", "--os-cloud", "nope"], &with_file).await;
    assert!(
        unknown
            .stderr
            .contains("--os-cloud \"nope\": no such cloud in"),
        "{}",
        unknown.stderr
    );
    let wrong = common::accel(
        &["provider", "list"],
        &[
            ("OS_AUTH_URL", auth_url.as_str()),
            ("OS_USERNAME", "operator"),
            ("OS_PASSWORD", "wrong"),
            ("OS_PROJECT_NAME", "ops-name"),
        ],
    )
    .await;
    assert!(
        !wrong.ok()
            && wrong
                .stderr
                .contains("authenticating with the OS_* variables"),
        "{}",
        wrong.stderr
    );

    // The agent: with a [keystone] table and no `server`, the catalog's accelerator
    // endpoint (`.../accelerator/v2`, as devstack registers Cyborg's).
    let fs = accel_agent::testing::FakeSysfs::new(dir.path().join("sys"));
    accel_agent::testing::pac_opae(&fs, 0x5e, 2);
    let agent_toml = dir.path().join("agent.toml");
    std::fs::write(
        &agent_toml,
        format!(
            "node = \"edge-1\"\nnode_provider = \"own\"\nsysfs_root = \"{}\"\n\
             [keystone]\nauth_url = \"{auth_url}\"\nusername = \"accel\"\n\
             password = \"secret\"\nproject_name = \"service\"\n",
            fs.root.display()
        ),
    )
    .unwrap();
    let agent_toml = agent_toml.to_string_lossy().into_owned();
    let reported = common::accel(
        &["agent", "--once", "--config", &agent_toml],
        &[("ACCEL_LOG", "info")],
    )
    .await;
    assert!(reported.ok(), "{}", reported.stderr);
    assert_eq!(
        reported.stdout.trim(),
        "reported: 1 added, 0 removed, 0 kept, 0 vanished"
    );
    assert!(
        reported.stderr.contains(&format!(
            "accelerator API found in Keystone's catalog server={}/accelerator",
            server.accel
        )),
        "{}",
        reported.stderr
    );
    server.stop().await;
}
