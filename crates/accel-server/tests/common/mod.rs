//! Spawns the real server on port 0 with a fresh database, and typed helpers for it.

#![allow(dead_code)]

pub mod accel;
pub mod keystone;

use accel_server::{AppState, ServerConfig};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Serves a fake service's `app` on a free local port until the returned sender fires
/// or is dropped.
pub async fn serve_fake(app: axum::Router) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
    });
    (addr, stop)
}

pub struct TestApp {
    pub base: String,
    pub state: Arc<AppState>,
    pub client: reqwest::Client,
    _shutdown: oneshot::Sender<()>,
}

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

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
        let store = match backend {
            Backend::Sqlite => accel_store::testing::sqlite().await,
            Backend::Postgres => accel_store::testing::postgres().await,
        };
        Self::spawn_on(store, config, new_defaults).await
    }

    /// A server on an existing store (several servers on one database are replicas).
    pub async fn spawn_on(
        store: accel_store::Store,
        config: ServerConfig,
        new_defaults: bool,
    ) -> TestApp {
        let state = Arc::new(AppState {
            store,
            policy: accel_core::policy::Policy::placement(new_defaults),
            config,
            placement_index: Default::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let state_ref = state.clone();
        tokio::spawn(accel_server::serve(state, listener, None, async {
            let _ = rx.await;
        }));
        TestApp {
            state: state_ref,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            _shutdown: tx,
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
