//! The accelerator API with its bind worker, for tests: a server on port 0 over a
//! database a restarted server can reopen, and a fake Nova that records events.

use super::Backend;
use accel_server::accelerator::binder::{self, WorkerConfig};
use accel_server::external::ExternalPlacement;
use accel_store::accelerator::events;
use accel_store::keyed;
use accel_store::Store;
use accel_testkit::server::TestServer;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// A Placement request as the admin at microversion 1.39: status and JSON body
/// (`null` when there is none).
pub async fn placement(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let api = accel_api::placement::Client::new(
        accel_api::http::Http::with_token(&server.placement, "admin").unwrap(),
    );
    let r = api
        .send(
            accel_api::placement::Version::MAX,
            method,
            path,
            body.as_ref(),
        )
        .await
        .unwrap();
    (
        r.status,
        serde_json::from_str(&r.text).unwrap_or(Value::Null),
    )
}

/// Nova's allocation of one GPU of provider `rp` to instance `consumer` (a new
/// consumer, type INSTANCE), which must succeed.
pub async fn allocate_gpu(server: &Server, consumer: &str, rp: &str) {
    let (s, v) = placement(
        server,
        reqwest::Method::PUT,
        &format!("/allocations/{consumer}"),
        Some(serde_json::json!({
            "allocations": {rp: {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": null,
            "consumer_type": "INSTANCE",
        })),
    )
    .await;
    assert_eq!(s, 204, "{v}");
}

/// Creates the compute node provider `name`, as nova-compute does before any agent
/// reports under it, and returns the provider.
pub async fn compute_node(srv: &Server, name: &str) -> Value {
    let (s, v) = placement(
        srv,
        reqwest::Method::POST,
        "/resource_providers",
        Some(json!({ "name": name })),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v
}

/// Deletes `consumer`'s allocations, as Nova does when its instance goes.
pub async fn delete_allocations(srv: &Server, consumer: &str) {
    let path = format!("/allocations/{consumer}");
    let (s, v) = placement(srv, reqwest::Method::DELETE, &path, None).await;
    assert_eq!(s, 204, "{v}");
}

/// How many attach handles of the fake device that `host` reported are in use.
pub async fn handles_in_use(store: &Store, host: &str) -> usize {
    let rp = accel_store::accelerator::report::provider_uuid(&format!("{host}_FakeDevice"));
    store
        .read(move |tx| {
            Box::pin(async move {
                use accel_store::accelerator::hardware::{self, DeployableColumn};
                let dep = hardware::list_deployables(tx, &[(DeployableColumn::RpUuid, rp)]).await?;
                let handles = hardware::handles_of(tx, dep[0].id).await?;
                Ok(handles.iter().filter(|h| h.in_use).count())
            })
        })
        .await
        .unwrap()
}

/// A database both a first and a restarted server can open; a SQLite file is removed
/// when the test is done with it.
pub struct TempDb {
    pub url: String,
    file: Option<std::path::PathBuf>,
}

impl TempDb {
    pub async fn fresh(backend: Backend) -> TempDb {
        match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir()
                    .join(format!("accel-bind-{}.db", uuid::Uuid::new_v4().simple()));
                TempDb {
                    url: format!("sqlite://{}", path.display()),
                    file: Some(path),
                }
            }
            Backend::Postgres => TempDb {
                url: accel_store::testing::fresh_postgres_url().await.unwrap(),
                file: None,
            },
            Backend::MySql => TempDb {
                url: accel_testkit::server::fresh_url(backend).await,
                file: None,
            },
        }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        if let Some(p) = &self.file {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
            }
        }
    }
}

/// Nova's `POST /os-server-external-events`, recording every event it accepts. While
/// `up` is false it answers 503, as a Nova API that is down behind a proxy.
#[derive(Clone)]
pub struct FakeNova {
    pub url: String,
    pub events: Arc<Mutex<Vec<Value>>>,
    /// The microversion header of each accepted POST.
    pub versions: Arc<Mutex<Vec<String>>>,
    pub refused: Arc<Mutex<usize>>,
    pub up: Arc<AtomicBool>,
    /// The X-Auth-Token of each POST that reached the handler.
    pub tokens: Arc<Mutex<Vec<String>>>,
    /// Tokens answered with 401 (a token Keystone revoked).
    pub refuse_tokens: Arc<Mutex<Vec<String>>>,
    /// How long each POST waits before it is answered (a busy Nova).
    pub delay: Arc<Mutex<Duration>>,
    /// POSTs being answered now, and the most there were at once.
    pub in_flight: Arc<Mutex<(usize, usize)>>,
    _stop: Arc<oneshot::Sender<()>>,
}

impl FakeNova {
    pub async fn start(up: bool) -> FakeNova {
        let nova = FakeNova {
            url: String::new(),
            events: Default::default(),
            versions: Default::default(),
            refused: Default::default(),
            up: Arc::new(AtomicBool::new(up)),
            tokens: Default::default(),
            refuse_tokens: Default::default(),
            delay: Default::default(),
            in_flight: Default::default(),
            _stop: Arc::new(oneshot::channel().0),
        };
        let n = nova.clone();
        let app = axum::Router::new().route(
            "/v2.1/os-server-external-events",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, axum::Json(body): axum::Json<Value>| {
                    let n = n.clone();
                    async move {
                        {
                            let mut f = n.in_flight.lock().unwrap();
                            f.0 += 1;
                            f.1 = f.1.max(f.0);
                        }
                        let delay = *n.delay.lock().unwrap();
                        tokio::time::sleep(delay).await;
                        n.in_flight.lock().unwrap().0 -= 1;
                        let token = headers
                            .get("x-auth-token")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        n.tokens.lock().unwrap().push(token.clone());
                        if n.refuse_tokens.lock().unwrap().contains(&token) {
                            return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(json!({})));
                        }
                        if !n.up.load(Ordering::SeqCst) {
                            *n.refused.lock().unwrap() += 1;
                            return (
                                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                                axum::Json(json!({})),
                            );
                        }
                        let version = headers
                            .get("x-openstack-nova-api-version")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        n.versions.lock().unwrap().push(version);
                        let list = body["events"].as_array().cloned().unwrap_or_default();
                        let mut answered = Vec::new();
                        for mut e in list {
                            n.events.lock().unwrap().push(e.clone());
                            e["code"] = 200.into();
                            answered.push(e);
                        }
                        (
                            axum::http::StatusCode::OK,
                            axum::Json(json!({"events": answered})),
                        )
                    }
                },
            ),
        );
        let (addr, stop) = super::serve_fake(app).await;
        FakeNova {
            url: format!("http://{addr}/v2.1"),
            _stop: Arc::new(stop),
            ..nova
        }
    }

    pub fn endpoint(&self) -> binder::NovaEndpoint {
        binder::NovaEndpoint::fixed(self.url.clone(), Some("nova-service-token".into()))
    }

    pub fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    /// Waits (at most 20 s) until `done` holds for this fake's state.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&FakeNova) -> bool) {
        let what = format!("fake Nova: {what}");
        super::eventually(Duration::from_secs(20), &what, || async {
            done(self).then_some(())
        })
        .await
    }
}

/// Worker settings for tests: quick polls, a short lease.
pub fn workers(nova: Option<&FakeNova>) -> WorkerConfig {
    WorkerConfig {
        poll_interval: Duration::from_millis(100),
        ..WorkerConfig::new(nova.map(FakeNova::endpoint))
    }
}

/// Both APIs on port 0 over `url`'s database, with the workers when `cfg` is given
/// (the test kit's server).
pub struct Server {
    pub accel: String,
    pub placement: String,
    /// The metrics port (`/metrics`, `/livez`, `/readyz`).
    pub metrics: String,
    /// The operator's console.
    pub console: String,
    pub store: Store,
    client: reqwest::Client,
    server: TestServer,
}

impl Server {
    pub async fn start(url: &str, fake_host: Option<&str>, cfg: Option<WorkerConfig>) -> Server {
        Self::start_with(url, fake_host, cfg, None).await
    }

    /// [`Server::start`] pushing device providers to an external Placement.
    pub async fn start_with(
        url: &str,
        fake_host: Option<&str>,
        cfg: Option<WorkerConfig>,
        external: Option<Arc<ExternalPlacement>>,
    ) -> Server {
        let store = Store::connect(url).await.unwrap();
        let server = TestServer::start(
            accel_testkit::server::builder(store)
                .fake_devices(fake_host.map(str::to_owned))
                .workers(cfg)
                .external(external),
        )
        .await;
        Server {
            accel: server.accel.clone(),
            placement: server.placement.clone(),
            metrics: server.metrics.clone(),
            console: server.console.clone(),
            store: server.store.clone(),
            client: reqwest::Client::new(),
            server,
        }
    }

    /// Nova's view of both APIs for the workflow: the noauth admin, no service token.
    pub fn endpoints(&self) -> accel_api::workflow::Endpoints {
        accel_api::workflow::Endpoints {
            placement_url: self.placement.clone(),
            accelerator_url: self.accel.clone(),
            token: "admin".into(),
            service_token: None,
        }
    }

    /// Stops the listeners and the workers and closes the database, as a server that
    /// exits.
    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// A request as Nova: project `p`, a member with a service token.
    pub async fn nova(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self
            .client
            .request(method, format!("{}{path}", self.accel))
            .header("x-auth-token", "nova:p1")
            .header("x-roles", "member,reader")
            .header("x-service-roles", "service");
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A GET on the accelerator API as the admin (every project's ARQs).
    pub async fn admin_get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .client
            .get(format!("{}{path}", self.accel))
            .header("x-auth-token", "admin")
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn create_profile(&self, name: &str, groups: Value) {
        let r = self
            .client
            .post(format!("{}/v2/device_profiles", self.accel))
            .header("x-auth-token", "admin")
            .json(&json!([{"name": name, "groups": groups}]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }

    pub async fn create_arqs(&self, profile: &str) -> Vec<String> {
        let (s, v) = self
            .nova(
                reqwest::Method::POST,
                "/v2/accelerator_requests",
                Some(json!({"device_profile_name": profile})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        arq_uuids(&v)
    }

    /// Nova's bind PATCH of every ARQ to `rp` on `host` for `instance`.
    pub async fn bind(&self, arqs: &[String], host: &str, rp: &str, instance: &str) {
        let body: serde_json::Map<String, Value> = arqs
            .iter()
            .map(|a| {
                (
                    a.clone(),
                    json!([
                        {"op": "add", "path": "/hostname", "value": host},
                        {"op": "add", "path": "/device_rp_uuid", "value": rp},
                        {"op": "add", "path": "/instance_uuid", "value": instance},
                    ]),
                )
            })
            .collect();
        let (s, v) = self
            .nova(
                reqwest::Method::PATCH,
                "/v2/accelerator_requests",
                Some(Value::Object(body)),
            )
            .await;
        assert_eq!(s, 202, "{v}");
    }

    /// Nova's wait: `?instance=&bind_state=resolved` until it stops answering 423.
    pub async fn wait_resolved(&self, instance: &str) -> Vec<Value> {
        let path = format!("/v2/accelerator_requests?instance={instance}&bind_state=resolved");
        let what = format!("the ARQs of {instance} to resolve");
        super::eventually(Duration::from_secs(20), &what, || async {
            let (s, v) = self.nova(reqwest::Method::GET, &path, None).await;
            match s {
                200 => Some(v["arqs"].as_array().unwrap().clone()),
                423 => None,
                _ => panic!("ARQs of {instance} not resolved: {s} {v}"),
            }
        })
        .await
    }

    pub async fn events_of(&self, instance: &str) -> Vec<events::NovaEvent> {
        self.store
            .read(keyed(instance, |tx, k| {
                Box::pin(events::for_instance(tx, k))
            }))
            .await
            .unwrap()
    }
}

/// The uuids of the ARQs in an `{"arqs": [...]}` answer, in its order.
pub fn arq_uuids(v: &Value) -> Vec<String> {
    v["arqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["uuid"].as_str().unwrap().to_owned())
        .collect()
}

/// A Placement GET as the admin that must answer 200.
pub async fn get(srv: &Server, path: &str) -> Value {
    let (s, v) = placement(srv, reqwest::Method::GET, path, None).await;
    assert_eq!(s, 200, "{path}: {v}");
    v
}

/// name -> (uuid, parent name, inventories {class: (total, reserved)}, traits).
pub type Tree = BTreeMap<
    String,
    (
        String,
        Option<String>,
        BTreeMap<String, (i64, i64)>,
        Vec<String>,
    ),
>;

pub async fn tree(srv: &Server, root_uuid: &str) -> Tree {
    let rps = get(srv, &format!("/resource_providers?in_tree={root_uuid}")).await;
    let rps = rps["resource_providers"].as_array().unwrap().clone();
    let name_of = |uuid: &str| {
        rps.iter()
            .find(|p| p["uuid"] == uuid)
            .map(|p| p["name"].as_str().unwrap().to_owned())
    };
    let mut out = Tree::new();
    for p in &rps {
        let uuid = p["uuid"].as_str().unwrap();
        let inv = get(srv, &format!("/resource_providers/{uuid}/inventories")).await;
        let inv = inv["inventories"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    (
                        v["total"].as_i64().unwrap(),
                        v["reserved"].as_i64().unwrap(),
                    ),
                )
            })
            .collect();
        let traits = get(srv, &format!("/resource_providers/{uuid}/traits")).await;
        let mut traits: Vec<String> = traits["traits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect();
        traits.sort();
        out.insert(
            p["name"].as_str().unwrap().to_owned(),
            (
                uuid.to_owned(),
                p["parent_provider_uuid"].as_str().and_then(name_of),
                inv,
                traits,
            ),
        );
    }
    out
}
