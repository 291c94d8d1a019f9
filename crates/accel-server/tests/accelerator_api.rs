//! The accelerator (Cyborg v2) API over HTTP: the real server on port 0 with a fresh
//! database per test, on SQLite and PostgreSQL.

mod common;

use accel_testkit::server::TestServer;
use common::{Backend, BACKENDS};
use reqwest::Method;
use serde_json::{json, Value};

struct AccelApp {
    base: String,
    placement: String,
    client: reqwest::Client,
    _server: TestServer,
}

/// Who sends a request.
#[derive(Clone, Copy)]
enum As<'a> {
    Admin,
    /// A project member (roles member, reader) of the given project.
    Member(&'a str),
    /// Nova: a project member with a service token.
    Nova(&'a str),
    Anonymous,
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Reply {
    /// The `faultstring` inside Cyborg's `error_message` envelope.
    fn fault(&self) -> String {
        let inner = self.body["error_message"]
            .as_str()
            .unwrap_or_else(|| panic!("no error envelope in {}", self.body));
        let fault: Value = serde_json::from_str(inner).expect("fault JSON inside the envelope");
        assert_eq!(fault["debuginfo"], Value::Null);
        let code = if self.status < 500 {
            "Client"
        } else {
            "Server"
        };
        assert_eq!(fault["faultcode"], code);
        fault["faultstring"].as_str().unwrap().to_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

const INSTANCE: &str = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e";

impl AccelApp {
    async fn spawn(backend: Backend, fake_host: Option<&str>) -> AccelApp {
        let store = accel_testkit::server::store(backend).await;
        let server = TestServer::start(
            accel_testkit::server::builder(store).fake_devices(fake_host.map(str::to_owned)),
        )
        .await;
        AccelApp {
            base: server.accel.clone(),
            placement: server.placement.clone(),
            client: reqwest::Client::new(),
            _server: server,
        }
    }

    async fn call(
        &self,
        who: As<'_>,
        method: Method,
        path: &str,
        version: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut r = self.client.request(method, format!("{}{path}", self.base));
        r = match who {
            As::Admin => r.header("x-auth-token", "admin"),
            As::Member(p) => r
                .header("x-auth-token", format!("user-{p}:{p}"))
                .header("x-roles", "member,reader"),
            As::Nova(p) => r
                .header("x-auth-token", format!("nova-{p}:{p}"))
                .header("x-roles", "member,reader")
                .header("x-service-roles", "service"),
            As::Anonymous => r,
        };
        if let Some(v) = version {
            r = r.header("openstack-api-version", v);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        Reply {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    async fn get(&self, who: As<'_>, path: &str) -> Reply {
        self.call(who, Method::GET, path, None, None).await
    }

    async fn create_profile(&self, name: &str, groups: Value) -> Value {
        let r = self
            .call(
                As::Admin,
                Method::POST,
                "/accelerator/v2/device_profiles",
                None,
                Some(json!([{"name": name, "groups": groups}])),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body
    }

    async fn create_arqs(&self, who: As<'_>, profile: &str) -> Vec<Value> {
        let r = self
            .call(
                who,
                Method::POST,
                "/v2/accelerator_requests",
                None,
                Some(json!({"device_profile_name": profile})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body["arqs"].as_array().unwrap().clone()
    }

    async fn placement_get(&self, path: &str) -> Value {
        let r = self
            .client
            .get(format!("{}{path}", self.placement))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }
}

#[tokio::test]
async fn version_documents_and_microversion_headers() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, None).await;
        for path in ["/", "/accelerator", "/accelerator/"] {
            let r = app.get(As::Anonymous, path).await;
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(r.body["name"], "OpenStack Cyborg API");
            assert_eq!(r.body["default_version"]["id"], "v2");
            assert_eq!(r.body["versions"][0]["max_version"], "2.3");
            assert_eq!(r.body["versions"][0]["min_version"], "2.0");
            assert_eq!(r.body["versions"][0]["status"], "CURRENT");
            let href = r.body["versions"][0]["links"][0]["href"].as_str().unwrap();
            assert!(href.ends_with("/accelerator/v2"), "{href}");
            assert_eq!(
                r.header("openstack-api-maximum-version"),
                None,
                "no version headers on /"
            );
        }
        let r = app.get(As::Anonymous, "/accelerator/v2").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["id"], "v2.0");
        assert!(r.body["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with("/accelerator/v2/"));
        assert_eq!(r.header("openstack-api-version"), Some("accelerator 2.0"));
        assert_eq!(r.header("openstack-api-minimum-version"), Some("2.0"));
        assert_eq!(r.header("openstack-api-maximum-version"), Some("2.3"));
        assert_eq!(r.header("vary"), Some("OpenStack-API-Version"));

        for (sent, answered) in [
            ("accelerator 2.2", "accelerator 2.2"),
            ("2.1", "accelerator 2.1"),
            ("accelerator latest", "accelerator 2.3"),
        ] {
            let r = app
                .call(
                    As::Admin,
                    Method::GET,
                    "/v2/device_profiles",
                    Some(sent),
                    None,
                )
                .await;
            assert_eq!(r.status, 200);
            assert_eq!(r.header("openstack-api-version"), Some(answered), "{sent}");
        }
        for (sent, message) in [
            ("accelerator 2.9", "Version 2.9 was requested but the minor version is not supported by this service. The supported version range is: [2.0, 2.3]."),
            ("accelerator 3.0", "Mutually exclusive versions requested. Version 3.0 requested but not supported by this service. The supported version range is: [2.0, 2.3]."),
            ("accelerator two", "Invalid value for OpenStack-API-Version header"),
        ] {
            let r = app
                .call(As::Admin, Method::GET, "/accelerator/v2/device_profiles", Some(sent), None)
                .await;
            assert_eq!(r.status, 406, "{sent}");
            assert_eq!(r.fault(), message);
            assert_eq!(r.header("openstack-api-maximum-version"), Some("2.3"));
        }

        let r = app.get(As::Anonymous, "/v2/device_profiles").await;
        assert_eq!(r.status, 401);
        assert_eq!(r.body["error"]["code"], 401);
        let r = app.get(As::Admin, "/v2/no_such_thing").await;
        assert_eq!(r.status, 404);
        assert_eq!(r.fault(), "The resource could not be found.");
        let r = app
            .call(As::Admin, Method::PUT, "/v2/device_profiles", None, None)
            .await;
        assert_eq!(r.status, 405);
        assert_eq!(r.header("allow"), Some("GET, POST, DELETE"));
    }
}

#[tokio::test]
async fn profile_create_validation() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, None).await;
        let g = |group: Value| json!([{"name": "dp", "groups": [group]}]);
        let cases: Vec<(Value, &str)> = vec![
            (json!({"name": "dp", "groups": [{"resources:FPGA": "1"}]}), "Only one device profile allowed per POST request for now."),
            (json!([{"name": "a", "groups": [{"resources:FPGA": "1"}]}, {"name": "b", "groups": [{"resources:FPGA": "1"}]}]), "Only one device profile allowed per POST request for now."),
            (json!([]), "Only one device profile allowed per POST request for now."),
            (json!([{"groups": [{"resources:FPGA": "1"}]}]), "DeviceProfile name needed."),
            (json!([{"name": "", "groups": [{"resources:FPGA": "1"}]}]), "DeviceProfile name needed."),
            (json!([{"name": "bad name!", "groups": [{"resources:FPGA": "1"}]}]), "Device profile name must be of the form ^[a-zA-Z0-9-_]+$"),
            (json!([{"name": "a".repeat(256), "groups": [{"resources:FPGA": "1"}]}]), "Device profile name must be at most 255 characters long."),
            (json!([{"name": "dp"}]), "DeviceProfile needs groups field."),
            (json!([{"name": "dp", "groups": []}]), "DeviceProfile needs groups field."),
            (json!([{"name": "dp", "groups": ["x"]}]), "Device profile groups must be JSON objects."),
            (g(json!({})), "Device profile group 0 is empty."),
            (g(json!({"resource:FPGA": "1"})), "Device profile group keys must be of the form ^(resources:|trait:|accel:)"),
            (g(json!({"trait:CUSTOM_A": "maybe"})), "Unsupported trait value maybe, the value must be one among ['required', 'forbidden']"),
            (g(json!({"trait:NOT_A_TRAIT": "required"})), "Unsupported trait name format NOT_A_TRAIT, should start with CUSTOM_"),
            (g(json!({"resources:BOGUS": "1"})), "Unsupported resource class BOGUS"),
            (g(json!({"resources:FPGA": "0"})), "Resources number 0 is invalid"),
            (g(json!({"resources:FPGA": "-2"})), "Resources number -2 is invalid"),
            (g(json!({"resources:FPGA": "one"})), "Resources number one is invalid"),
            (g(json!({"resources:FPGA": true})), "Device profile group values must be strings or integers, not a boolean (key resources:FPGA)."),
            (g(json!({"resources:FPGA": "1", "resources: fpga": "1"})), "Duplicate key resources:FPGA in device profile group 0."),
            (g(json!({"resources:FPGA": "1", "accel:attach_target": "cloud"})), "Invalid value cloud for accel:attach_target: one of VM, host, none is expected"),
            (g(json!({"resources:FPGA": "1", "accel:bitstream_id": "nope"})), "Invalid value nope for accel:bitstream_id: a UUID is expected"),
            (json!([{"name": "dp", "uuid": "nope", "groups": [{"resources:FPGA": "1"}]}]), "Expected a uuid but received nope."),
        ];
        for (body, message) in cases {
            let r = app
                .call(
                    As::Admin,
                    Method::POST,
                    "/v2/device_profiles",
                    None,
                    Some(body.clone()),
                )
                .await;
            assert_eq!(r.status, 400, "{body}: {}", r.body);
            assert_eq!(r.fault(), message, "{body}");
        }
        let listed = app.get(As::Admin, "/v2/device_profiles").await;
        assert_eq!(
            listed.body["device_profiles"],
            json!([]),
            "nothing was written"
        );
    }
}

#[tokio::test]
async fn profiles_lifecycle_and_admin_only_writes() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, None).await;
        let created = app
            .create_profile(
                "dp1",
                json!([
                    {"trait:custom_fpga-1": "required", "resources:fpga": 2, "accel:attach_target": "VM"},
                    {"resources:PGPU": "1"}
                ]),
            )
            .await;
        assert_eq!(
            created["groups"],
            json!([
                {"trait:CUSTOM_FPGA_1": "required", "resources:FPGA": "2", "accel:attach_target": "VM"},
                {"resources:PGPU": "1"}
            ]),
            "names translated, values as strings, order kept"
        );
        assert_eq!(created["updated_at"], Value::Null);
        assert!(created["created_at"].as_str().unwrap().ends_with("+00:00"));
        let uuid = created["uuid"].as_str().unwrap().to_owned();
        assert!(created["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/accelerator/v2/device_profiles/{uuid}")));

        let dup = app
            .call(
                As::Admin,
                Method::POST,
                "/v2/device_profiles",
                None,
                Some(json!([{"name": "dp1", "groups": [{"resources:FPGA": "1"}]}])),
            )
            .await;
        assert_eq!(dup.status, 409);
        assert_eq!(
            dup.fault(),
            "A device_profile with name dp1 already exists."
        );
        let dup_uuid = app
            .call(
                As::Admin,
                Method::POST,
                "/v2/device_profiles",
                None,
                Some(json!([{"name": "other", "uuid": uuid, "groups": [{"resources:FPGA": "1"}]}])),
            )
            .await;
        assert_eq!(dup_uuid.status, 409);
        assert_eq!(
            dup_uuid.fault(),
            format!("DeviceProfile with uuid {uuid} already exists.")
        );

        let member = app
            .call(
                As::Member("p1"),
                Method::POST,
                "/v2/device_profiles",
                None,
                Some(json!([{"name": "mine", "groups": [{"resources:FPGA": "1"}]}])),
            )
            .await;
        assert_eq!(member.status, 403);
        assert_eq!(
            member.fault(),
            "Access was denied to the following resource: cyborg:device_profile:create"
        );
        let member_del = app
            .call(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/device_profiles/{uuid}"),
                None,
                None,
            )
            .await;
        assert_eq!(member_del.status, 403);

        let listed = app
            .get(As::Member("p1"), "/v2/device_profiles?name=dp1,nope")
            .await;
        assert_eq!(listed.status, 200);
        assert_eq!(listed.body["device_profiles"].as_array().unwrap().len(), 1);

        let by_uuid = app
            .get(As::Member("p1"), &format!("/v2/device_profiles/{uuid}"))
            .await;
        assert_eq!(by_uuid.status, 200);
        assert_eq!(by_uuid.body["device_profile"]["name"], "dp1");
        assert_eq!(by_uuid.body["device_profile"]["updated_at"], "None");
        assert!(by_uuid.body["device_profile"]["created_at"]
            .as_str()
            .unwrap()
            .contains(' '));

        let by_name_old = app.get(As::Admin, "/v2/device_profiles/dp1").await;
        assert_eq!(by_name_old.status, 406);
        assert_eq!(
            by_name_old.fault(),
            "Request not acceptable. The minimal required API version should be 2.2"
        );
        let by_name = app
            .call(
                As::Admin,
                Method::GET,
                "/v2/device_profiles/dp1",
                Some("accelerator 2.2"),
                None,
            )
            .await;
        assert_eq!(by_name.status, 200);
        assert_eq!(by_name.body["device_profile"]["uuid"], uuid.as_str());
        let missing = app
            .call(
                As::Admin,
                Method::GET,
                "/v2/device_profiles/nope",
                Some("accelerator 2.2"),
                None,
            )
            .await;
        assert_eq!(missing.status, 404);
        assert_eq!(missing.fault(), "Device Profile not found with name=nope");
        let missing = app
            .get(
                As::Admin,
                "/v2/device_profiles/5f0bd7b4-0f0b-4f8b-9ad4-3c3d8e1b2a10",
            )
            .await;
        assert_eq!(missing.status, 404);

        // In use by ARQs: 409, not a 500.
        app.create_arqs(As::Member("p1"), "dp1").await;
        let in_use = app
            .call(
                As::Admin,
                Method::DELETE,
                &format!("/v2/device_profiles/{uuid}"),
                None,
                None,
            )
            .await;
        assert_eq!(in_use.status, 409);
        assert!(in_use.fault().contains("in use"), "{}", in_use.fault());

        app.create_profile("a", json!([{"resources:FPGA": "1"}]))
            .await;
        app.create_profile("b", json!([{"resources:FPGA": "1"}]))
            .await;
        let partial = app
            .call(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles?value=a,nope",
                None,
                None,
            )
            .await;
        assert_eq!(partial.status, 404);
        assert_eq!(partial.fault(), "Device Profile not found with name=nope");
        let still = app.get(As::Admin, "/v2/device_profiles?name=a").await;
        assert_eq!(
            still.body["device_profiles"].as_array().unwrap().len(),
            1,
            "all or nothing"
        );
        let both = app
            .call(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles?value=a,b",
                None,
                None,
            )
            .await;
        assert_eq!(both.status, 204);
        let by_name = app
            .call(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles/dp-none",
                None,
                None,
            )
            .await;
        assert_eq!(by_name.status, 404);
        let empty = app
            .call(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles/",
                None,
                None,
            )
            .await;
        assert_eq!(empty.status, 400);
        assert_eq!(empty.fault(), "Missing argument: \"value\"");
        let left = app.get(As::Admin, "/v2/device_profiles").await;
        let names: Vec<&str> = left.body["device_profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dp1"]);
    }
}

#[tokio::test]
async fn arqs_counts_isolation_and_deletes() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile(
            "dp",
            json!([{"resources:FPGA": "2", "resources:CUSTOM_X": "1"}, {"resources:PGPU": "1"}]),
        )
        .await;
        let mine = app.create_arqs(As::Member("p1"), "dp").await;
        assert_eq!(mine.len(), 4);
        let groups: Vec<i64> = mine
            .iter()
            .map(|a| a["device_profile_group_id"].as_i64().unwrap())
            .collect();
        assert_eq!(groups, [0, 0, 0, 1]);
        let a0 = &mine[0];
        assert_eq!(a0["state"], "Initial");
        assert_eq!(a0["device_profile_name"], "dp");
        assert_eq!(a0["project_id"], "p1");
        assert_eq!(
            (a0["hostname"].clone(), a0["instance_uuid"].clone()),
            (Value::Null, Value::Null)
        );
        assert_eq!(a0["attach_handle_type"], "");
        assert_eq!(a0["attach_handle_info"], json!({}));
        assert_eq!(a0["attach_handle_uuid"], Value::Null);
        let only_group = app
            .call(
                As::Member("p1"),
                Method::POST,
                "/v2/accelerator_requests",
                None,
                Some(json!({"device_profile_name": "dp", "device_profile_group_id": 1})),
            )
            .await;
        assert_eq!(only_group.body["arqs"].as_array().unwrap().len(), 1);

        for (name, code) in [("", 404), ("fake_dp", 404), ("!@#$%^&*()=-[]", 404)] {
            let r = app
                .call(
                    As::Member("p1"),
                    Method::POST,
                    "/v2/accelerator_requests",
                    None,
                    Some(json!({"device_profile_name": name})),
                )
                .await;
            assert_eq!(r.status, code);
            assert_eq!(
                r.fault(),
                format!("Device Profile not found with name={name}")
            );
        }

        // Another project sees none of p1's ARQs and cannot touch them.
        let theirs = app.get(As::Member("p2"), "/v2/accelerator_requests").await;
        assert_eq!(theirs.body["arqs"], json!([]));
        let uuid = a0["uuid"].as_str().unwrap();
        let shown = app
            .get(
                As::Member("p2"),
                &format!("/v2/accelerator_requests/{uuid}"),
            )
            .await;
        assert_eq!(shown.status, 404);
        assert_eq!(shown.fault(), format!("ExtArq not found with uuid={uuid}"));
        let deleted = app
            .call(
                As::Member("p2"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={uuid}"),
                None,
                None,
            )
            .await;
        assert_eq!(deleted.status, 404);
        let ours = app.get(As::Member("p1"), "/v2/accelerator_requests").await;
        assert_eq!(ours.body["arqs"].as_array().unwrap().len(), 5);
        let all = app.get(As::Admin, "/v2/accelerator_requests").await;
        assert_eq!(all.body["arqs"].as_array().unwrap().len(), 5);
        let shown = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests/{uuid}"),
            )
            .await;
        assert_eq!(shown.status, 200);
        assert_eq!(shown.body["uuid"], uuid);
        let bad = app
            .get(As::Member("p1"), "/v2/accelerator_requests/not-a-uuid")
            .await;
        assert_eq!(bad.status, 400);

        // Unknown uuid in a batch: 404 and nothing deleted.
        let unknown = "11111111-2222-3333-4444-555555555555";
        let r = app
            .call(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={uuid},{unknown}"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 404);
        assert_eq!(r.fault(), format!("ExtArq not found with uuid={unknown}"));
        assert_eq!(
            app.get(As::Member("p1"), "/v2/accelerator_requests")
                .await
                .body["arqs"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        let r = app
            .call(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests/{uuid}"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 204);
        let neither = app
            .call(
                As::Member("p1"),
                Method::DELETE,
                "/v2/accelerator_requests",
                None,
                None,
            )
            .await;
        assert_eq!(neither.status, 400);

        // Bind one ARQ to an instance: 423 while unresolved, filters done in SQL.
        let rp = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        let rp_uuid = rp["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let target = mine[1]["uuid"].as_str().unwrap();
        let bind = json!({target: [
            {"op": "add", "path": "/hostname", "value": "compute1"},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": INSTANCE},
        ]});
        let no_token = app
            .call(
                As::Member("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                None,
                Some(bind.clone()),
            )
            .await;
        assert_eq!(no_token.status, 403);
        assert!(no_token
            .fault()
            .starts_with("This operation requires a service token."));
        let r = app
            .call(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                None,
                Some(bind.clone()),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let hot_add = app
            .call(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                None,
                Some(bind),
            )
            .await;
        assert_eq!(hot_add.status, 400);
        assert!(hot_add.fault().contains("already has accelerator requests"));
        let shown = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests/{target}"),
            )
            .await;
        assert_eq!(shown.body["state"], "BindStarted");
        assert_eq!(shown.body["instance_uuid"], INSTANCE);
        assert_eq!(shown.body["hostname"], "compute1");

        let locked = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests?instance={INSTANCE}&bind_state=resolved"),
            )
            .await;
        assert_eq!(locked.status, 423);
        assert_eq!(locked.body, json!({"error_message": "null"}));
        let by_instance = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests?instance={INSTANCE}"),
            )
            .await;
        assert_eq!(by_instance.body["arqs"].as_array().unwrap().len(), 1);
        let resolved = app
            .get(
                As::Member("p1"),
                "/v2/accelerator_requests?bind_state=resolved",
            )
            .await;
        assert_eq!(resolved.body["arqs"], json!([]));
        let bad_state = app
            .get(As::Member("p1"), "/v2/accelerator_requests?bind_state=done")
            .await;
        assert_eq!(bad_state.status, 400);
        let bad_instance = app
            .get(As::Member("p1"), "/v2/accelerator_requests?instance=x")
            .await;
        assert_eq!(bad_instance.status, 400);

        // A bound ARQ is Nova's to delete; delete by instance needs the service token
        // and is idempotent.
        let r = app
            .call(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={target}"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 403);
        let path = format!("/v2/accelerator_requests?instance={INSTANCE}");
        let r = app
            .call(As::Member("p1"), Method::DELETE, &path, None, None)
            .await;
        assert_eq!(r.status, 403);
        for _ in 0..2 {
            let r = app
                .call(As::Nova("p1"), Method::DELETE, &path, None, None)
                .await;
            assert_eq!(r.status, 204);
        }
        let gone = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests/{target}"),
            )
            .await;
        assert_eq!(gone.status, 404);
    }
}

#[tokio::test]
async fn arq_patch_rules() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile("dp", json!([{"resources:FPGA": "1"}]))
            .await;
        let arq = app.create_arqs(As::Nova("p1"), "dp").await.remove(0);
        let u = arq["uuid"].as_str().unwrap();
        let patch = |ops: Value| json!({ u: ops });
        let cases = [
            (patch(json!([{"op": "add", "path": "/hostname", "value": "h"}, {"op": "remove", "path": "/instance_uuid"}])),
             None, 400, "Couldn't apply patch. Reason: Every op must be add or remove".to_owned()),
            (patch(json!([{"op": "add", "path": "/state", "value": "Bound"}])),
             None, 400, "Couldn't apply patch. Reason: Invalid path in patch /state".to_owned()),
            (patch(json!([{"op": "add", "path": "/hostname", "value": "h"}])),
             None, 400, "Couldn't apply patch. Reason: Fields absent in patch device_rp_uuid,instance_uuid".to_owned()),
            (patch(json!([{"op": "add", "path": "/project_id", "value": "p9"}])),
             None, 406, "Request not acceptable. The minimal required API version should be 2.1".to_owned()),
            (patch(json!([{"op": "add", "path": "/project_id", "value": "p9"}])),
             Some("accelerator 2.1"), 403, "Access was denied to the following resource: cyborg:arq:update".to_owned()),
            (patch(json!([
                {"op": "add", "path": "/hostname", "value": "compute1"},
                {"op": "add", "path": "/device_rp_uuid", "value": "00000000-0000-0000-0000-000000000001"},
                {"op": "add", "path": "/instance_uuid", "value": INSTANCE}])),
             None, 404, "Deployable not found with resource provider uuid=00000000-0000-0000-0000-000000000001".to_owned()),
        ];
        for (body, version, status, message) in cases {
            let r = app
                .call(
                    As::Nova("p1"),
                    Method::PATCH,
                    "/v2/accelerator_requests",
                    version,
                    Some(body.clone()),
                )
                .await;
            assert_eq!(r.status, status, "{body}");
            assert_eq!(r.fault(), message, "{body}");
        }
        // The single-ARQ form on the item URL (openstacksdk), then unbind.
        let rp = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        let rp_uuid = rp["resource_providers"][0]["uuid"].as_str().unwrap();
        let r = app
            .call(
                As::Nova("p1"),
                Method::PATCH,
                &format!("/v2/accelerator_requests/{u}"),
                None,
                Some(patch(json!([
                      {"op": "add", "path": "/hostname", "value": "compute1"},
                      {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                      {"op": "add", "path": "/instance_uuid", "value": INSTANCE}]))),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let r = app
            .call(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                None,
                Some(patch(json!([
                      {"op": "remove", "path": "/hostname"},
                      {"op": "remove", "path": "/device_rp_uuid"},
                      {"op": "remove", "path": "/instance_uuid"}]))),
            )
            .await;
        assert_eq!(r.status, 202);
        let shown = app
            .get(As::Nova("p1"), &format!("/v2/accelerator_requests/{u}"))
            .await;
        assert_eq!(shown.body["state"], "Unbound");
        assert_eq!(shown.body["instance_uuid"], Value::Null);
        assert_eq!(shown.body["project_id"], "p1");
    }
}

#[tokio::test]
async fn fake_devices_in_hardware_api_and_placement() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        let r = app.get(As::Admin, "/v2/devices").await;
        assert_eq!(r.status, 200);
        let devices = r.body["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!(
            (
                d["type"].as_str(),
                d["vendor"].as_str(),
                d["hostname"].as_str()
            ),
            (Some("FPGA"), Some("0xABCD"), Some("compute1"))
        );
        assert!(d.get("status").is_none(), "status only from 2.3");
        let uuid = d["uuid"].as_str().unwrap().to_owned();
        let at23 = app
            .call(
                As::Admin,
                Method::GET,
                &format!("/v2/devices/{uuid}"),
                Some("accelerator 2.3"),
                None,
            )
            .await;
        assert_eq!(at23.body["status"], "enabled");
        for (q, n) in [
            ("?type=FPGA", 1),
            ("?hostname=compute1&vendor=0xABCD", 1),
            ("?hostname=other", 0),
            ("?filters.field=model&filters.value=miss%20model%20info", 1),
        ] {
            let r = app.get(As::Admin, &format!("/v2/devices{q}")).await;
            assert_eq!(r.body["devices"].as_array().unwrap().len(), n, "{q}");
        }
        let r = app
            .get(
                As::Admin,
                "/v2/devices/00000000-0000-0000-0000-000000000000",
            )
            .await;
        assert_eq!(r.status, 404);

        // Hardware reads are for admins and managers only (CVE-2026-40213).
        for path in ["/v2/devices", "/v2/deployables", "/v2/attributes"] {
            let r = app.get(As::Member("p1"), path).await;
            assert_eq!(r.status, 403, "{path}");
        }

        let r = app.get(As::Admin, "/v2/deployables").await;
        let deps = r.body["deployables"].as_array().unwrap();
        assert_eq!(deps.len(), 1);
        let dep = &deps[0];
        assert_eq!(dep["name"], "compute1_FakeDevice");
        assert_eq!(dep["num_accelerators"], 16);
        assert_eq!(dep["driver_name"], "fake");
        assert_eq!(
            dep["attributes_list"],
            "[{\"traits1\": \"CUSTOM_FAKE_DEVICE\"}, {\"rc\": \"FPGA\"}]"
        );
        let rp_uuid = dep["rp_uuid"].as_str().unwrap().to_owned();
        let dep_uuid = dep["uuid"].as_str().unwrap().to_owned();
        let one = app
            .get(As::Admin, &format!("/v2/deployables/{dep_uuid}"))
            .await;
        assert_eq!(one.body["rp_uuid"], rp_uuid.as_str());
        let filtered = app
            .get(
                As::Admin,
                "/v2/deployables?filters.field=name&filters.value=compute1_FakeDevice",
            )
            .await;
        assert_eq!(filtered.body["deployables"].as_array().unwrap().len(), 1);

        // Placement: the compute node and its device child with FPGA x16 and the trait.
        let compute = app.placement_get("/resource_providers?name=compute1").await;
        let compute_uuid = compute["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let child = app
            .placement_get(&format!("/resource_providers/{rp_uuid}"))
            .await;
        assert_eq!(child["name"], "compute1_FakeDevice");
        assert_eq!(child["parent_provider_uuid"], compute_uuid.as_str());
        let inv = app
            .placement_get(&format!("/resource_providers/{rp_uuid}/inventories"))
            .await;
        assert_eq!(inv["inventories"]["FPGA"]["total"], 16);
        assert_eq!(inv["inventories"]["FPGA"]["max_unit"], 16);
        let with_trait = app
            .placement_get("/resource_providers?required=CUSTOM_FAKE_DEVICE")
            .await;
        assert_eq!(
            with_trait["resource_providers"][0]["uuid"],
            rp_uuid.as_str()
        );
        let candidates = app
            .placement_get("/allocation_candidates?resources=FPGA:1&required=CUSTOM_FAKE_DEVICE")
            .await;
        assert_eq!(
            candidates["allocation_requests"].as_array().unwrap().len(),
            1
        );

        // Disable reserves the inventory, enable frees it.
        let r = app
            .call(
                As::Member("p1"),
                Method::POST,
                &format!("/v2/devices/{uuid}/disable"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 403);
        let r = app
            .call(
                As::Admin,
                Method::POST,
                &format!("/v2/devices/{uuid}/disable"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 200);
        let inv = app
            .placement_get(&format!("/resource_providers/{rp_uuid}/inventories"))
            .await;
        assert_eq!(inv["inventories"]["FPGA"]["reserved"], 16);
        let at23 = app
            .call(
                As::Admin,
                Method::GET,
                &format!("/v2/devices/{uuid}"),
                Some("accelerator 2.3"),
                None,
            )
            .await;
        assert_eq!(at23.body["status"], "maintaining");
        let r = app
            .call(
                As::Admin,
                Method::POST,
                &format!("/v2/devices/{uuid}/enable"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 200);
        let inv = app
            .placement_get(&format!("/resource_providers/{rp_uuid}/inventories"))
            .await;
        assert_eq!(inv["inventories"]["FPGA"]["reserved"], 0);
    }
}

#[tokio::test]
async fn attributes_crud_and_agent_report() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        let deps = app.get(As::Admin, "/v2/deployables").await;
        let dep_id = deps.body["deployables"][0]["device_id"].as_i64().unwrap();
        let attrs = app.get(As::Admin, "/v2/attributes").await;
        let real_dep_id = attrs.body["attributes"][0]["deployable_id"]
            .as_i64()
            .unwrap();
        assert!(dep_id > 0);
        let body = json!({"deployable_id": real_dep_id, "key": "k1", "value": "v1"});
        let r = app
            .call(
                As::Member("p1"),
                Method::POST,
                "/v2/attributes",
                None,
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status, 403);
        let r = app
            .call(As::Admin, Method::POST, "/v2/attributes", None, Some(body))
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let uuid = r.body["uuid"].as_str().unwrap().to_owned();
        let listed = app
            .get(
                As::Admin,
                &format!("/v2/attributes?deployable_id={real_dep_id}&key=k1"),
            )
            .await;
        assert_eq!(listed.body["attributes"].as_array().unwrap().len(), 1);
        let shown = app.get(As::Admin, &format!("/v2/attributes/{uuid}")).await;
        assert_eq!(shown.body["value"], "v1");
        let bad = app
            .call(
                As::Admin,
                Method::POST,
                "/v2/attributes",
                None,
                Some(json!({"deployable_id": 424242, "key": "k", "value": "v"})),
            )
            .await;
        assert_eq!(bad.status, 404);
        let r = app
            .call(
                As::Admin,
                Method::DELETE,
                &format!("/v2/attributes/{uuid}"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 204);
        let r = app
            .call(
                As::Admin,
                Method::DELETE,
                &format!("/v2/attributes/{uuid}"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 404);

        // An agent's report replaces the host's records: the fake device goes, a GPU comes.
        let report = json!({"devices": [{
            "type": "GPU", "vendor": "10de", "model": "T4",
            "std_board_info": "{}", "vendor_board_info": null,
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": "{\"bus\": \"af\"}"},
            "deployables": [{"name": "compute1_0000:af:00.0", "num_accelerators": 1, "driver_name": "NVIDIA",
                "attributes": [{"key": "rc", "value": "PGPU"}, {"key": "trait0", "value": "CUSTOM_NVIDIA_1EB8"}],
                "attach_handles": [{"attach_type": "PCI", "attach_info": "{\"bus\": \"af\"}", "in_use": false}]}]}]});
        let path = "/v2/agent/hosts/compute1/devices";
        let r = app
            .call(
                As::Member("p1"),
                Method::PUT,
                path,
                None,
                Some(report.clone()),
            )
            .await;
        assert_eq!(r.status, 403);
        let r = app
            .call(
                As::Admin,
                Method::PUT,
                "/v2/agent/hosts/unknown/devices",
                None,
                Some(report.clone()),
            )
            .await;
        assert_eq!(r.status, 400);
        let r = app
            .call(As::Admin, Method::PUT, path, None, Some(report))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            (
                r.body["devices_added"].as_i64(),
                r.body["devices_removed"].as_i64()
            ),
            (Some(1), Some(1))
        );
        let devices = app.get(As::Admin, "/v2/devices").await;
        assert_eq!(devices.body["devices"][0]["type"], "GPU");
        let gone = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        assert_eq!(gone["resource_providers"], json!([]));
        let gpu = app
            .placement_get("/resource_providers?required=CUSTOM_NVIDIA_1EB8&resources=PGPU:1")
            .await;
        assert_eq!(
            gpu["resource_providers"][0]["name"],
            "compute1_0000:af:00.0"
        );
    }
}
