//! The real accel server for tests and benches: both APIs on port 0, built by
//! [`App::builder`] as `accel serve` builds it, over a fresh database per test.
//!
//! ```no_run
//! # async fn f() {
//! use accel_testkit::server::{Backend, TestServer, BACKENDS};
//! for backend in BACKENDS {
//!     let srv = TestServer::spawn(backend).await;
//!     // srv.placement, srv.accel, srv.metrics, srv.console: base URLs
//!     srv.stop().await;
//! }
//! # }
//! ```

use accel_server::accelerator::AccelState;
use accel_server::app::{App, AppBuilder};
use accel_server::supervisor::Backoff;
use accel_server::{AppState, ServerConfig};
use accel_store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// A database backend; every server test runs on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite in memory.
    Sqlite,
    /// A fresh database on the PostgreSQL server of `ACCEL_TEST_PG`.
    Postgres,
    /// A fresh database on the MariaDB/MySQL server of `ACCEL_TEST_MYSQL`; only in
    /// [`BACKENDS`] when that variable is set.
    MySql,
}

/// The backends every server test runs on: SQLite, PostgreSQL, and MariaDB/MySQL when
/// `ACCEL_TEST_MYSQL` is set (`for backend in BACKENDS`; `BACKENDS[0]` is SQLite).
pub const BACKENDS: Backends = Backends;

/// The list behind [`BACKENDS`]: which backends are on is read from the environment
/// when the list is iterated.
#[derive(Clone, Copy, Debug)]
pub struct Backends;

const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Postgres, Backend::MySql];

impl Backends {
    /// The backends on in this environment.
    pub fn enabled(self) -> Vec<Backend> {
        let mysql = accel_store::testing::mysql_admin_url().is_some();
        ALL.into_iter()
            .filter(|b| *b != Backend::MySql || mysql)
            .collect()
    }
}

impl IntoIterator for Backends {
    type Item = Backend;
    type IntoIter = std::vec::IntoIter<Backend>;
    fn into_iter(self) -> Self::IntoIter {
        self.enabled().into_iter()
    }
}

impl std::ops::Index<usize> for Backends {
    type Output = Backend;
    fn index(&self, i: usize) -> &Backend {
        &ALL[i]
    }
}

/// A fresh, empty database of `backend` that several stores (replicas, a restarted
/// server) can open: its URL.
pub async fn fresh_url(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => format!(
            "sqlite://{}",
            std::env::temp_dir()
                .join(format!("accel-test-{}.db", uuid::Uuid::new_v4().simple()))
                .display()
        ),
        Backend::Postgres => accel_store::testing::fresh_postgres_url()
            .await
            .expect("create PostgreSQL test database"),
        Backend::MySql => accel_store::testing::fresh_mysql_url()
            .await
            .expect("create MariaDB/MySQL test database")
            .expect("ACCEL_TEST_MYSQL names the MariaDB/MySQL server"),
    }
}

/// A migrated store on a fresh database of `backend`.
pub async fn store(backend: Backend) -> Store {
    match backend {
        Backend::Sqlite => accel_store::testing::sqlite().await,
        Backend::Postgres => accel_store::testing::postgres().await,
        Backend::MySql => accel_store::testing::mysql()
            .await
            .expect("ACCEL_TEST_MYSQL names the MariaDB/MySQL server"),
    }
}

/// The server tests run unless they say otherwise: ten retries of an allocation that
/// lost a race, at most 1000 candidates, no background worker (tests that want them
/// call `.workers(..)`), and a supervisor that restarts a failed worker after 50 ms.
pub fn builder(store: Store) -> AppBuilder {
    App::builder(store)
        .config(ServerConfig {
            allocation_conflict_retry_count: 10,
            max_allocation_candidates: 1000,
            ..Default::default()
        })
        .workers(None)
        .restart_backoff(Backoff {
            first: Duration::from_millis(50),
            max: Duration::from_secs(1),
        })
}

/// A running server; it stops when [`TestServer::stop`] is called or it is dropped.
pub struct TestServer {
    /// Base URL of the Placement API, `http://127.0.0.1:PORT`.
    pub placement: String,
    /// Base URL of the accelerator API.
    pub accel: String,
    /// Base URL of the metrics port (`/metrics`, `/livez`, `/readyz`).
    pub metrics: String,
    /// Base URL of the operator's console.
    pub console: String,
    pub state: Arc<AppState>,
    pub accel_state: Arc<AccelState>,
    pub store: Store,
    shutdown: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    /// The default [`builder`] over a fresh database of `backend`.
    pub async fn spawn(backend: Backend) -> TestServer {
        TestServer::start(builder(store(backend).await)).await
    }

    /// Builds `app` and serves both APIs on port 0.
    pub async fn start(app: AppBuilder) -> TestServer {
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the metrics port to port 0");
        let m = metrics.local_addr().expect("metrics address");
        let console = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the console to port 0");
        let c = console.local_addr().expect("console address");
        let app = app
            .metrics_listener(Some(metrics))
            .console_listener(Some(console))
            .build()
            .await
            .expect("building the app");
        let placement = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the Placement API to port 0");
        let accel = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the accelerator API to port 0");
        let (p, a) = (
            placement.local_addr().expect("Placement address"),
            accel.local_addr().expect("accelerator address"),
        );
        let (state, accel_state) = (app.state().clone(), app.accelerator().clone());
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(app.serve(placement, Some(accel), async {
            let _ = rx.await;
        }));
        TestServer {
            placement: format!("http://{p}"),
            accel: format!("http://{a}"),
            metrics: format!("http://{m}"),
            console: format!("http://{c}"),
            store: state.store.clone(),
            state,
            accel_state,
            shutdown: Some(tx),
            done: Some(done),
        }
    }

    /// Stops the listeners and the workers and closes the database, as a server that
    /// exits; panics if serving failed.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(done) = self.done.take() {
            done.await
                .expect("the server task panicked")
                .expect("the server failed");
        }
    }
}
