//! Spawns the real server on port 0 with a fresh database, and typed helpers for it.

#![allow(dead_code, unused_imports)]

pub mod accel;
pub mod gpus;
pub mod reply;

pub use accel_testkit::keystone;
pub use accel_testkit::server::{Backend, BACKENDS};
pub use accel_testkit::{eventually, serve_fake};

use accel_server::{AppState, ServerConfig};
use accel_testkit::server::TestServer;
use serde_json::Value;
use std::sync::Arc;

/// The Placement API of a server on port 0 (the test kit's), with typed helpers.
pub struct TestApp {
    pub base: String,
    pub state: Arc<AppState>,
    pub client: reqwest::Client,
    _server: TestServer,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(
            backend,
            ServerConfig {
                allocation_conflict_retry_count: 10,
                max_allocation_candidates: 100_000,
                ..Default::default()
            },
            false,
        )
        .await
    }

    pub async fn spawn_with(backend: Backend, config: ServerConfig, new_defaults: bool) -> TestApp {
        Self::spawn_on(
            accel_testkit::server::store(backend).await,
            config,
            new_defaults,
        )
        .await
    }

    /// A server on an existing store (several servers on one database are replicas).
    pub async fn spawn_on(
        store: accel_store::Store,
        config: ServerConfig,
        new_defaults: bool,
    ) -> TestApp {
        let server = TestServer::start(
            accel_testkit::server::builder(store)
                .policy(accel_core::policy::Policy::placement(new_defaults))
                .config(config),
        )
        .await;
        TestApp {
            base: server.placement.clone(),
            state: server.state.clone(),
            client: reqwest::Client::new(),
            _server: server,
        }
    }

    /// A request as the admin at microversion `mv`.
    pub fn req(&self, method: reqwest::Method, path: &str, mv: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", format!("placement {mv}"))
    }

    pub async fn json(
        &self,
        method: reqwest::Method,
        path: &str,
        mv: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        // Any header value, malformed ones included: the shared HTTP core, not the
        // typed client, whose versions are always valid.
        let http = accel_api::http::Http::with_token(&self.base, "admin").unwrap();
        let mut req =
            accel_api::http::Request::new(method, path).microversion(format!("placement {mv}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = http.send(&req).await.unwrap();
        (
            r.status,
            serde_json::from_str(&r.text).unwrap_or(Value::Null),
        )
    }

    pub async fn create_provider(&self, name: &str, parent: Option<&str>) -> Value {
        use accel_api::placement::{Client, ProviderCreate, Version};
        let api = Client::new(accel_api::http::Http::with_token(&self.base, "admin").unwrap());
        let body = ProviderCreate {
            name: name.to_owned(),
            uuid: None,
            parent_provider_uuid: parent.map(str::to_owned),
        };
        let r = api
            .send(
                Version::MAX,
                reqwest::Method::POST,
                "/resource_providers",
                Some(&body),
            )
            .await
            .unwrap();
        let (s, v) = (
            r.status,
            serde_json::from_str::<Value>(&r.text).unwrap_or(Value::Null),
        );
        assert_eq!(s, 200, "{v}");
        v
    }
}
