//! Keystone auth mode, against the fake Keystone in `common::keystone`: both APIs on
//! port 0 with a fresh database, tokens validated over HTTP, the validation cache,
//! the service-token gate and the 401/503 renderings.
//!
//! Against Keystone 30.0.0 itself, `scripts/keystone-real.sh` (in the test command)
//! checks the same behaviours once per run; the fake stays here where each test says
//! why: speed on every backend, exact counts, a moved clock, or what a real Keystone
//! cannot do on cue (an outage, a slow answer).

mod common;

use accel_server::auth::keystone::{Keystone, KeystoneConfig};
use accel_server::auth::AuthStrategy;
use accel_server::ServerConfig;
use accel_testkit::placement_request;
use accel_testkit::server::TestServer;
use common::keystone::{FakeKeystone, Subject};
use common::reply::Reply;
use common::{Backend, BACKENDS};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const INSTANCE: &str = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e";

struct App {
    accel: String,
    placement: String,
    ks: FakeKeystone,
    client: reqwest::Client,
    /// Seconds added to the validation cache's clock.
    clock_offset: Arc<AtomicU64>,
    server: TestServer,
}

/// A request's tokens and extra headers.
#[derive(Default, Clone)]
struct Auth<'a> {
    token: Option<&'a str>,
    service: Option<&'a str>,
    extra: Vec<(&'a str, &'a str)>,
}

fn user(token: &str) -> Auth<'_> {
    Auth {
        token: Some(token),
        ..Default::default()
    }
}

/// A user's token with a service token beside it (Nova calling on a user's behalf).
fn with_service<'a>(token: &'a str, service: &'a str) -> Auth<'a> {
    Auth {
        token: Some(token),
        service: Some(service),
        ..Default::default()
    }
}

impl App {
    /// Fake Keystone with the service user `accel` (project `service`, role
    /// `service`), then accel in keystone mode pointed at it; `tweak` edits the
    /// `[keystone_authtoken]` table.
    async fn spawn(
        backend: Backend,
        fake_host: Option<&str>,
        tweak: impl FnOnce(&mut KeystoneConfig),
    ) -> App {
        let ks = FakeKeystone::start().await;
        ks.add_user("secret", Subject::project("accel", "service", &["service"]));
        let mut cfg: KeystoneConfig = serde_json::from_value(json!({
            "auth_url": format!("{}/v3", ks.url),
            "username": "accel",
            "password": "secret",
            "project_name": "service",
        }))
        .unwrap();
        tweak(&mut cfg);
        let offset = Arc::new(AtomicU64::new(0));
        let clock_offset = offset.clone();
        let base = Instant::now();
        let keystone = Keystone::new(cfg)
            .unwrap()
            .with_cache_clock(Arc::new(move || {
                base + base.elapsed() + Duration::from_secs(offset.load(Ordering::SeqCst))
            }));
        let store = accel_testkit::server::store(backend).await;
        let server = TestServer::start(
            accel_testkit::server::builder(store)
                .fake_devices(fake_host.map(str::to_owned))
                .config(ServerConfig {
                    auth_strategy: AuthStrategy::Keystone,
                    keystone: Some(Arc::new(keystone)),
                    allocation_conflict_retry_count: 10,
                    max_allocation_candidates: 1000,
                    ..Default::default()
                }),
        )
        .await;
        App {
            accel: server.accel.clone(),
            placement: server.placement.clone(),
            ks,
            client: reqwest::Client::new(),
            clock_offset,
            server,
        }
    }

    fn admin_token(&self) -> String {
        self.ks.issue(Subject::project(
            "admin",
            "admin-project",
            &["admin", "member", "reader"],
        ))
    }

    fn member_token(&self, project: &str) -> String {
        self.ks.issue(Subject::project(
            &format!("user-{project}"),
            project,
            &["member", "reader"],
        ))
    }

    /// Nova's service token.
    fn service_token(&self) -> String {
        self.ks
            .issue(Subject::project("nova", "service", &["service", "admin"]))
    }

    async fn send(
        &self,
        url: String,
        auth: &Auth<'_>,
        method: Method,
        body: Option<Value>,
    ) -> Reply {
        let mut r = self.client.request(method, url);
        if let Some(t) = auth.token {
            r = r.header("x-auth-token", t);
        }
        if let Some(t) = auth.service {
            r = r.header("x-service-token", t);
        }
        for (k, v) in &auth.extra {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        Reply::read(r.send().await.unwrap()).await
    }

    async fn accel(
        &self,
        auth: &Auth<'_>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        self.send(format!("{}{path}", self.accel), auth, method, body)
            .await
    }

    async fn accel_get(&self, auth: &Auth<'_>, path: &str) -> Reply {
        self.accel(auth, Method::GET, path, None).await
    }

    /// `PATCH /v2/accelerator_requests` with `body`.
    async fn patch_arqs(&self, body: &Value, auth: Auth<'_>) -> Reply {
        self.accel(
            &auth,
            Method::PATCH,
            "/v2/accelerator_requests",
            Some(body.clone()),
        )
        .await
    }

    async fn placement(
        &self,
        auth: &Auth<'_>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut auth = auth.clone();
        auth.extra.push(("openstack-api-version", "placement 1.39"));
        self.send(format!("{}{path}", self.placement), &auth, method, body)
            .await
    }

    async fn placement_get(&self, auth: &Auth<'_>, path: &str) -> Reply {
        self.placement(auth, Method::GET, path, None).await
    }

    async fn create_profile(&self, admin: &str, name: &str) {
        let r = self
            .accel(
                &user(admin),
                Method::POST,
                "/v2/device_profiles",
                Some(json!([{"name": name, "groups": [
                    {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]}])),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }

    async fn create_arq(&self, token: &str, profile: &str) -> String {
        let r = self
            .accel(
                &user(token),
                Method::POST,
                "/v2/accelerator_requests",
                Some(json!({"device_profile_name": profile})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body["arqs"][0]["uuid"].as_str().unwrap().to_owned()
    }

    fn keystone_uri(&self) -> String {
        format!("Keystone uri=\"{}/v3\"", self.ks.url)
    }
}

// Fake Keystone, for speed on every backend; Keystone 30 itself: keystone-real.sh's role matrix.
#[tokio::test]
async fn admin_token_reads_and_writes_device_profiles() {
    for backend in BACKENDS {
        let app = App::spawn(backend, None, |_| {}).await;
        let admin = app.admin_token();
        app.create_profile(&admin, "dp1").await;
        let list = app.accel_get(&user(&admin), "/v2/device_profiles").await;
        assert_eq!(list.status, 200);
        assert_eq!(list.body["device_profiles"][0]["name"], "dp1");

        // A member reads profiles but may not write them, whatever X-Roles says:
        // identity headers are keystonemiddleware's to set, never the client's.
        let member = app.member_token("p1");
        let read = app.accel_get(&user(&member), "/v2/device_profiles").await;
        assert_eq!(read.status, 200);
        let spoof = Auth {
            token: Some(&member),
            extra: vec![("x-roles", "admin"), ("x-project-id", "admin-project")],
            ..Default::default()
        };
        let denied = app
            .accel(
                &spoof,
                Method::POST,
                "/v2/device_profiles",
                Some(json!([{"name": "dp2", "groups": [{"resources:FPGA": "1"}]}])),
            )
            .await;
        assert_eq!(denied.status, 403, "{}", denied.body);
        assert_eq!(
            denied.fault(),
            "Access was denied to the following resource: cyborg:device_profile:create"
        );

        let gone = app
            .accel(
                &user(&admin),
                Method::DELETE,
                "/v2/device_profiles/dp1",
                None,
            )
            .await;
        assert_eq!(gone.status, 204, "{}", gone.body);
        let empty = app.accel_get(&user(&admin), "/v2/device_profiles").await;
        assert_eq!(empty.body["device_profiles"], json!([]));
    }
}

// Fake Keystone, for speed on every backend; Keystone 30 itself: keystone-real.sh's isolation.
#[tokio::test]
async fn members_see_only_their_own_projects_arqs() {
    for backend in BACKENDS {
        let app = App::spawn(backend, Some("compute1"), |_| {}).await;
        let admin = app.admin_token();
        app.create_profile(&admin, "dp1").await;
        let p = app.member_token("project-p");
        let q = app.member_token("project-q");
        let mine = app.create_arq(&p, "dp1").await;
        let theirs = app.create_arq(&q, "dp1").await;

        let list = app.accel_get(&user(&p), "/v2/accelerator_requests").await;
        assert_eq!(list.status, 200);
        let uuids: Vec<&str> = list.body["arqs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["uuid"].as_str().unwrap())
            .collect();
        assert_eq!(uuids, [mine.as_str()]);

        // Q's ARQ does not exist for P, even when P claims Q's project in a header.
        let spoof = Auth {
            token: Some(&p),
            extra: vec![("x-project-id", "project-q")],
            ..Default::default()
        };
        for auth in [user(&p), spoof] {
            let r = app
                .accel_get(&auth, &format!("/v2/accelerator_requests/{theirs}"))
                .await;
            assert_eq!(r.status, 404, "{}", r.body);
            let r = app
                .accel(
                    &auth,
                    Method::DELETE,
                    &format!("/v2/accelerator_requests/{theirs}"),
                    None,
                )
                .await;
            assert_eq!(r.status, 404, "{}", r.body);
        }

        let all = app
            .accel_get(&user(&admin), "/v2/accelerator_requests")
            .await;
        assert_eq!(all.body["arqs"].as_array().unwrap().len(), 2);

        // Hardware reads need a manager or an admin.
        let devices = app.accel_get(&user(&p), "/v2/devices").await;
        assert_eq!(devices.status, 403);
        let devices = app.accel_get(&user(&admin), "/v2/devices").await;
        assert_eq!(devices.status, 200);
        assert_eq!(devices.body["devices"][0]["hostname"], "compute1");
    }
}

// Fake Keystone: revoked and expired tokens without waiting; Keystone 30: keystone-real.sh.
#[tokio::test]
async fn missing_invalid_and_expired_tokens_are_401_with_www_authenticate() {
    let app = App::spawn(Backend::Sqlite, None, |_| {}).await;
    let expired = app.ks.issue_until(
        Subject::project("admin", "admin-project", &["admin"]),
        SystemTime::now() - Duration::from_secs(5),
    );
    let revoked = app.admin_token();
    app.ks.revoke(&revoked);
    let cases = [
        Auth::default(),
        user("no-such-token"),
        user(&expired),
        user(&revoked),
    ];
    for auth in &cases {
        let r = app.accel_get(auth, "/accelerator/v2/device_profiles").await;
        assert_eq!(r.status, 401, "{:?}", auth.token);
        assert_eq!(
            r.body,
            json!({"error": {"code": 401, "title": "Unauthorized",
                "message": "The request you have made requires authentication."}})
        );
        assert_eq!(
            r.header("www-authenticate"),
            Some(app.keystone_uri().as_str())
        );

        let r = app.placement_get(auth, "/resource_providers").await;
        assert_eq!(r.status, 401, "{:?}", auth.token);
        let err = &r.body["errors"][0];
        assert_eq!(err["status"], 401);
        assert_eq!(err["title"], "Unauthorized");
        assert_eq!(
            err["detail"],
            "The request you have made requires authentication."
        );
        assert!(err["request_id"].as_str().unwrap().starts_with("req-"));
        assert_eq!(
            r.header("www-authenticate"),
            Some(app.keystone_uri().as_str())
        );
    }
    // The version documents stay public.
    for path in ["/", "/accelerator/", "/v2", "/accelerator/v2"] {
        let r = app.accel_get(&Auth::default(), path).await;
        assert_eq!(r.status, 200, "{path}");
    }
    let r = app.placement_get(&Auth::default(), "/").await;
    assert_eq!(r.status, 200);
}

// Fake Keystone, for speed; Keystone 30: keystone-real.sh (Placement's rules, both modes).
#[tokio::test]
async fn placement_api_in_keystone_mode() {
    let app = App::spawn(Backend::Sqlite, None, |_| {}).await;
    let admin = app.admin_token();
    let created = app
        .placement(
            &user(&admin),
            Method::POST,
            "/resource_providers",
            Some(json!({"name": "cn1"})),
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let list = app
        .placement_get(&user(&admin), "/resource_providers")
        .await;
    assert_eq!(list.body["resource_providers"][0]["name"], "cn1");
    // Placement's default policy is admin-only; a member's X-Roles claim is ignored.
    let member = app.member_token("p1");
    let spoof = Auth {
        token: Some(&member),
        extra: vec![("x-roles", "admin")],
        ..Default::default()
    };
    let denied = app.placement_get(&spoof, "/resource_providers").await;
    assert_eq!(denied.status, 403, "{}", denied.body);
}

// Fake Keystone: exact validation counts and a moved cache clock (Keystone 30: keystone-real.sh).
#[tokio::test]
async fn validations_are_cached_until_the_ttl_then_asked_again() {
    let app = App::spawn(Backend::Sqlite, None, |c| c.token_cache_time = 300).await;
    let admin = app.admin_token();
    for _ in 0..3 {
        let r = app.accel_get(&user(&admin), "/v2/device_profiles").await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(app.ks.validations(), 1, "two hits from the cache");
    assert_eq!(app.ks.password_auths(), 1, "one own token, reused");

    // Revoked in Keystone: the cached validation still answers until it expires...
    app.ks.revoke(&admin);
    let r = app.accel_get(&user(&admin), "/v2/device_profiles").await;
    assert_eq!(r.status, 200);
    assert_eq!(app.ks.validations(), 1);
    // ...then the token is validated again, and refused.
    app.clock_offset.store(301, Ordering::SeqCst);
    let r = app.accel_get(&user(&admin), "/v2/device_profiles").await;
    assert_eq!(r.status, 401);
    assert_eq!(app.ks.validations(), 2);
}

// Fake Keystone: counts every validation exactly, which a real Keystone's logs only approximate.
#[tokio::test]
async fn cache_disabled_asks_keystone_every_time() {
    let app = App::spawn(Backend::Sqlite, None, |c| c.token_cache_time = -1).await;
    let admin = app.admin_token();
    for n in 1..=2 {
        let r = app.accel_get(&user(&admin), "/v2/device_profiles").await;
        assert_eq!(r.status, 200);
        assert_eq!(app.ks.validations(), n);
    }
    app.ks.revoke(&admin);
    let r = app.accel_get(&user(&admin), "/v2/device_profiles").await;
    assert_eq!(r.status, 401);
}

// Fake Keystone: it forgets accel's own token and shortens its lifetime on cue.
#[tokio::test]
async fn own_token_is_renewed_when_refused_or_about_to_expire() {
    let app = App::spawn(Backend::Sqlite, None, |_| {}).await;
    let admin = app.admin_token();
    let r = app.accel_get(&user(&admin), "/v2/device_profiles").await;
    assert_eq!(r.status, 200);
    assert_eq!(app.ks.password_auths(), 1);
    // Keystone forgets our token: the validation is refused with 401, accel logs in
    // again and asks once more.
    app.ks.revoke_user("accel");
    let other = app.member_token("p1");
    let r = app.accel_get(&user(&other), "/v2/device_profiles").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(app.ks.password_auths(), 2);

    // A token with less than two minutes left is replaced before it is used.
    app.ks.set_password_token_lifetime(Duration::from_secs(60));
    app.ks.revoke_user("accel");
    for (i, p) in ["p2", "p3"].iter().enumerate() {
        let t = app.member_token(p);
        let r = app.accel_get(&user(&t), "/v2/device_profiles").await;
        assert_eq!(r.status, 200);
        assert_eq!(app.ks.password_auths(), 3 + i);
    }
}

// A fake Keystone: the password is changed on cue mid-test (scripts/keystone-real.sh
// does the same against Keystone 30 itself).
#[tokio::test]
async fn a_rotated_service_password_fails_readiness_and_is_retried_with_backoff() {
    let app = App::spawn(Backend::Sqlite, None, |_| {}).await;
    let readyz = |app: &App| {
        let url = format!("{}/readyz", app.server.metrics);
        let client = app.client.clone();
        async move {
            let r = client.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let admin = app.admin_token();
    assert_eq!(
        app.accel_get(&user(&admin), "/v2/device_profiles")
            .await
            .status,
        200
    );
    assert_eq!(readyz(&app).await.0, 200);
    assert_eq!(app.ks.password_auths(), 1);

    // The password changes in Keystone (which revokes the user's tokens).
    app.ks.add_user(
        "rotated",
        Subject::project("accel", "service", &["service"]),
    );
    app.ks.revoke_user("accel");
    for p in 0..20 {
        let t = app.member_token(&format!("p{p}"));
        let r = app.accel_get(&user(&t), "/v2/device_profiles").await;
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.body["title"], "Service Unavailable");
    }
    // 20 requests, a handful of password attempts (the first, then one per backoff
    // period of 1 s, 2 s, ...), not 20.
    let tried = app.ks.password_auths() - 1;
    assert!((1..=3).contains(&tried), "{tried} password attempts");
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("[-]keystone failed: Keystone refuses the service credentials (user accel, project service)"),
        "{body}"
    );
    let metrics = app
        .client
        .get(format!("{}/metrics", app.server.metrics))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("accel_keystone_credentials_refused 1"),
        "{metrics}"
    );

    // The operator puts the old password back: readiness probes alone (no request
    // reaches a server that is not ready) find it at the next attempt.
    app.ks
        .add_user("secret", Subject::project("accel", "service", &["service"]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = readyz(&app).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still not ready: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = app.member_token("after");
    assert_eq!(
        app.accel_get(&user(&t), "/v2/device_profiles").await.status,
        200
    );
}

// Fake Keystone, for speed on every backend; Keystone 30: keystone-real.sh's service tokens.
#[tokio::test]
async fn service_token_gates_bind() {
    for backend in BACKENDS {
        let app = App::spawn(backend, Some("compute1"), |_| {}).await;
        let admin = app.admin_token();
        app.create_profile(&admin, "dp1").await;
        let nova_user = app.member_token("p1");
        let arq = app.create_arq(&nova_user, "dp1").await;
        let rps = app
            .placement_get(
                &user(&admin),
                "/resource_providers?name=compute1_FakeDevice",
            )
            .await;
        let rp = rps.body["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let bind = json!({&arq: [
            {"op": "add", "path": "/hostname", "value": "compute1"},
            {"op": "add", "path": "/device_rp_uuid", "value": rp},
            {"op": "add", "path": "/instance_uuid", "value": INSTANCE},
        ]});

        // No service token, or a header claiming one: 403 from Cyborg's gate.
        for extra in [vec![], vec![("x-service-roles", "service")]] {
            let r = app
                .patch_arqs(
                    &bind,
                    Auth {
                        token: Some(&nova_user),
                        extra,
                        ..Default::default()
                    },
                )
                .await;
            assert_eq!(r.status, 403, "{}", r.body);
            assert!(r
                .fault()
                .starts_with("This operation requires a service token."));
        }
        // An invalid service token, or one without a service role
        // (service_token_roles_required): keystonemiddleware's 401.
        let not_service = app.member_token("p1");
        for service in ["bogus", not_service.as_str()] {
            let r = app
                .patch_arqs(&bind, with_service(&nova_user, service))
                .await;
            assert_eq!(r.status, 401, "{}", r.body);
            assert_eq!(
                r.header("www-authenticate"),
                Some(app.keystone_uri().as_str())
            );
        }
        // Nova's user token with its service token: accepted.
        let service = app.service_token();
        let r = app
            .patch_arqs(&bind, with_service(&nova_user, &service))
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let shown = app
            .accel_get(
                &user(&nova_user),
                &format!("/v2/accelerator_requests/{arq}"),
            )
            .await;
        assert_eq!(shown.body["instance_uuid"], INSTANCE);
        assert_eq!(shown.body["hostname"], "compute1");
    }
}

// Fake Keystone: a custom service role on cue; Keystone 30: keystone-real.sh (roles optional).
#[tokio::test]
async fn service_token_without_role_is_not_a_service_when_roles_are_optional() {
    let app = App::spawn(Backend::Sqlite, Some("compute1"), |c| {
        c.service_token_roles_required = false;
        c.service_token_roles = vec!["nova-service".into()];
    })
    .await;
    let member = app.member_token("p1");
    let admin = app.admin_token();
    app.create_profile(&admin, "dp1").await;
    let arq = app.create_arq(&member, "dp1").await;
    // A valid token whose roles miss service_token_roles passes authentication
    // but is no service: the delete of ?instance= needs one.
    let plain = app.member_token("p1");
    let r = app
        .accel(
            &with_service(&member, &plain),
            Method::DELETE,
            &format!("/v2/accelerator_requests?instance={INSTANCE}"),
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // A token with the configured role counts as a service.
    let svc = app
        .ks
        .issue(Subject::project("nova", "service", &["nova-service"]));
    let r = app
        .accel(
            &with_service(&member, &svc),
            Method::DELETE,
            &format!("/v2/accelerator_requests?instance={INSTANCE}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let still = app
        .accel_get(&user(&member), &format!("/v2/accelerator_requests/{arq}"))
        .await;
    assert_eq!(still.status, 200, "an ARQ of no instance is not deleted");
}

// Fake Keystone: a token already expired, no wait; Keystone 30: keystone-real.sh (4 s tokens).
#[tokio::test]
async fn expired_user_token_is_accepted_with_a_service_token() {
    let app = App::spawn(Backend::Sqlite, None, |_| {}).await;
    let expired = app.ks.issue_until(
        Subject::project("alice", "p1", &["member", "reader"]),
        SystemTime::now() - Duration::from_secs(30),
    );
    let alone = app
        .accel_get(&user(&expired), "/v2/accelerator_requests")
        .await;
    assert_eq!(alone.status, 401);
    let service = app.service_token();
    let with_service = app
        .accel(
            &with_service(&expired, &service),
            Method::GET,
            "/v2/accelerator_requests",
            None,
        )
        .await;
    assert_eq!(with_service.status, 200, "{}", with_service.body);
}

// Fake Keystone, for speed; Keystone 30 itself: keystone-real.sh (system and domain scopes).
#[tokio::test]
async fn system_scoped_admin_is_refused_by_project_scoped_rules() {
    let app = App::spawn(Backend::Sqlite, Some("compute1"), |_| {}).await;
    let system_admin = app
        .ks
        .issue(Subject::system("sysadmin", &["admin", "reader"]));
    let r = app.accel_get(&user(&system_admin), "/v2/devices").await;
    assert_eq!(r.status, 403, "{}", r.body);
}

// No Keystone at all: an outage, which a real Keystone cannot give on cue.
#[tokio::test]
async fn keystone_unreachable_is_503() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let app = App::spawn(Backend::Sqlite, None, |c| {
        c.auth_url = format!("http://{addr}/v3");
        c.www_authenticate_uri = Some("http://keystone.example/identity".into());
    })
    .await;
    let r = app.accel_get(&user("any"), "/v2/device_profiles").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["title"], "Service Unavailable");
    let r = app.placement_get(&user("any"), "/resource_providers").await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.body["errors"][0]["detail"],
        "The Keystone service is temporarily unavailable."
    );
    // No token is a 401 without asking Keystone, naming the configured public URI.
    let r = app.accel_get(&Auth::default(), "/v2/device_profiles").await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Keystone uri=\"http://keystone.example/identity\"")
    );
}

// No Keystone: a listener recording the TLS handshake, which a real Keystone over http cannot show.
#[tokio::test]
async fn keystone_over_https_speaks_tls() {
    // A listener that records the first bytes it is sent: an https auth_url must
    // open with a TLS handshake record (0x16, version 3.x), not plain HTTP.
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let first = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 3];
        sock.read_exact(&mut buf).await.unwrap();
        buf
    });
    let app = App::spawn(Backend::Sqlite, None, |c| {
        c.auth_url = format!("https://{addr}/v3");
    })
    .await;
    let r = app.accel_get(&user("any"), "/v2/device_profiles").await;
    // The handshake never completes (the listener closes): Keystone is unavailable.
    assert_eq!(r.status, 503, "{}", r.body);
    let bytes = tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .expect("nothing reached the https endpoint")
        .unwrap();
    assert_eq!(bytes[0], 0x16, "not a TLS handshake record: {bytes:?}");
    assert_eq!(bytes[1], 0x03, "not a TLS version: {bytes:?}");
}

// Fake Keystone: revokes the agent's tokens on cue and counts its password logins exactly.
#[tokio::test]
async fn the_agent_reports_with_its_own_keystone_session() {
    use accel_agent::config::{FakeDevice, Settings};
    for backend in BACKENDS {
        // No validation cache: a revoked token is refused at once.
        let app = App::spawn(backend, None, |c| c.token_cache_time = -1).await;
        app.ks.add_user(
            "agent-pw",
            Subject::project("accel-agent", "service", &["service"]),
        );
        let admin = app.admin_token();
        let created = app
            .placement(
                &user(&admin),
                Method::POST,
                "/resource_providers",
                Some(json!({"name": "cn-ks"})),
            )
            .await;
        assert_eq!(created.status, 200, "{}", created.body);
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::new(&app.accel, "cn-ks", dir.path());
        settings.drivers = Some(vec!["fake".into()]);
        settings.driver.fake = vec![FakeDevice {
            device_type: "GPU".into(),
            vendor: "abcd".into(),
            product: String::new(),
            model: "fake".into(),
            family: None,
            count: 1,
            class: None,
            numa_node: None,
            regions: 1,
            interface_id: None,
            function_id: None,
            memory_mib: None,
            memory_kind: None,
            healthy: true,
        }];
        settings.keystone = Some(
            serde_json::from_value(json!({
                "auth_url": app.ks.url, "username": "accel-agent",
                "password": "agent-pw", "project_name": "service",
            }))
            .unwrap(),
        );
        let agent = accel_agent::Agent::new(settings.clone()).unwrap();
        let before = app.ks.password_auths();
        agent.check_node().await.unwrap();
        let o = agent.step().await.unwrap();
        assert_eq!(o.added, 1, "{backend:?}: {o:?}");
        assert_eq!(app.ks.password_auths(), before + 1, "one token, reused");

        // Its tokens revoked (a password rotation): the next call gets a 401, the
        // agent authenticates again and the report goes through.
        app.ks.revoke_user("accel-agent");
        let o = agent.step().await.unwrap();
        assert!(o.unchanged, "the same devices: {o:?}");
        assert_eq!(app.ks.password_auths(), before + 2);

        // A wrong password is a clear error, not a crash.
        let mut bad = settings.clone();
        if let Some(k) = bad.keystone.as_mut() {
            k.password = "nope".into();
        }
        let err = accel_agent::Agent::new(bad)
            .unwrap()
            .step()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("refused the credentials"), "{err}");
    }
}

/// The external Placement client against a Placement in keystone mode: a password
/// token, the endpoint from the catalog (interface and region), a fresh token when
/// the old one is refused.
// Fake Keystone: a catalog of several regions and interfaces; the client's tokens revoked on cue.
#[tokio::test]
async fn external_placement_push_with_a_password_token_and_the_catalog() {
    use accel_core::capacity::Limits;
    use accel_server::external::{push, Client, PlacementConfig, Pushed};
    use accel_store::accelerator::pushes::{LocalInventory, LocalProvider, LocalTree};
    for backend in BACKENDS {
        let app = App::spawn(backend, None, |c| c.token_cache_time = -1).await;
        app.ks
            .add_user("pw", Subject::project("cyborg", "service", &["admin"]));
        app.ks.set_catalog(json!([
            {"type": "compute", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "http://127.0.0.1:9"}]},
            {"type": "placement", "endpoints": [
                {"interface": "internal", "region_id": "RegionOne", "url": "http://127.0.0.1:9"},
                {"interface": "public", "region_id": "RegionTwo", "url": "http://127.0.0.1:9"},
                {"interface": "public", "region_id": "RegionOne", "url": app.placement}]},
        ]));
        let admin = app.ks.issue(Subject::project("admin", "admin", &["admin"]));
        let url = format!("{}/resource_providers", app.placement);
        let r = placement_request(Method::POST, &url, &admin, "1.39")
            .json(&json!({"name": "cn1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let cfg: PlacementConfig = serde_json::from_value(json!({
            "auth_url": format!("{}/v3", app.ks.url), "username": "cyborg",
            "password": "pw", "project_name": "service", "region_name": "RegionOne",
        }))
        .unwrap();
        let client = Client::new(cfg).unwrap();
        let name = "cn1_0000:3b:00.0";
        let uuid = accel_store::accelerator::report::provider_uuid(name);
        let tree = LocalTree {
            compute_node: None,
            providers: vec![LocalProvider {
                uuid: uuid.clone(),
                name: name.into(),
                parent: None,
                inventories: vec![LocalInventory {
                    class: "CUSTOM_ACCELERATOR_GPU".into(),
                    limits: Limits {
                        total: 2,
                        reserved: 0,
                        min_unit: 1,
                        max_unit: 2,
                        step_size: 1,
                        allocation_ratio: 1.0,
                    },
                }],
                traits: vec!["CUSTOM_GPU_NVIDIA".into()],
            }],
        };
        let p = push(&client, "cn1", &tree).await.unwrap();
        assert_eq!((p.created, p.deleted), (1, 0));
        assert_eq!(client.endpoint().await, app.placement);
        let url = format!("{}/resource_providers/{uuid}/traits", app.placement);
        let r = placement_request(Method::GET, &url, &admin, "1.39")
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        let mut traits: Vec<&str> = v["traits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        traits.sort();
        assert_eq!(traits, ["CUSTOM_GPU_NVIDIA", "CUSTOM_OWNER_ACCEL"]);

        // Keystone forgets the token: the client gets a new one; in sync, nothing written.
        app.ks.revoke_user("cyborg");
        let p = push(&client, "cn1", &tree).await.unwrap();
        assert_eq!(p, Pushed::default());
    }
}
