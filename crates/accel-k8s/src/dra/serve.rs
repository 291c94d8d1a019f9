//! The DRA driver's two sockets:
//!
//! ```text
//! <registry dir>/<driver>-reg.sock   pluginregistration.Registration
//!     GetInfo ─▶ {type: "DRAPlugin", name: <driver>, endpoint: <plugins dir>/<driver>/dra.sock,
//!                 supported_versions: ["v1.DRAPlugin", "v1beta1.DRAPlugin"]}
//!     NotifyRegistrationStatus ─▶ logged (kubelet's verdict)
//! <plugins dir>/<driver>/dra.sock    k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}.DRAPlugin
//! ```
//!
//! Kubelet's plugin watcher finds the registration socket in its registry directory,
//! asks GetInfo, and dials the endpoint it names. Both DRA versions are served on the
//! one socket (kubelet picks the newest it speaks): a request goes to the version its
//! path names. Without tonic's router (it brings axum), [`Versions`] does that
//! dispatch by path prefix.
//!
//! The `:authority` kubelet sends: since Kubernetes 1.26 kubelet dials plugins with
//! `localhost` (kubernetes/kubernetes#112597); a grpc-go or grpc C-core client left to
//! its default sends the socket path percent-encoded, which h2 (under tonic) would
//! refuse, so both sockets read their connections through [`crate::authority`].
//! `scripts/dra-authority.py` checks both with a C-core client; see docs/kubernetes.md.

use super::{ClaimError, ClaimRef, Driver, PreparedDevice, DRA_SOCKET};
use crate::authority;
use crate::proto::{dra_v1 as v1, dra_v1beta1 as v1beta1, registration as reg};
use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::UnixListener;
use tonic::codegen::http;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

/// The plugin type kubelet's DRA handler registers.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The DRA service versions served, as GetInfo names them.
pub const VERSIONS: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// The registration socket's path: `<registry dir>/<driver>-reg.sock`.
pub fn registration_socket(registry_dir: &Path, driver: &str) -> PathBuf {
    registry_dir.join(format!("{driver}-reg.sock"))
}

/// The DRA socket's path: `<plugins dir>/<driver>/dra.sock`.
pub fn dra_socket(plugins_dir: &Path, driver: &str) -> PathBuf {
    plugins_dir.join(driver).join(DRA_SOCKET)
}

/// Prepares every claim concurrently; answers each uid, with an error when it failed.
async fn prepare_all(
    driver: &Arc<Driver>,
    claims: Vec<ClaimRef>,
) -> Vec<(String, Result<Vec<PreparedDevice>, ClaimError>)> {
    let tasks: Vec<_> = claims
        .into_iter()
        .map(|c| {
            let d = driver.clone();
            let uid = c.uid.clone();
            (uid, tokio::spawn(async move { d.prepare(&c).await }))
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (uid, t) in tasks {
        let r = t.await.unwrap_or_else(|source| {
            Err(ClaimError::Task {
                doing: "preparing",
                source,
            })
        });
        if let Err(e) = &r {
            tracing::warn!(claim = %uid, error = %e, "NodePrepareResources: claim not prepared");
        }
        out.push((uid, r));
    }
    out
}

async fn unprepare_all(driver: &Arc<Driver>, claims: Vec<ClaimRef>) -> Vec<(String, String)> {
    let tasks: Vec<_> = claims
        .into_iter()
        .map(|c| {
            let d = driver.clone();
            let uid = c.uid.clone();
            (uid, tokio::spawn(async move { d.unprepare(&c).await }))
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (uid, t) in tasks {
        let error = match t.await {
            Ok(Ok(())) => String::new(),
            Ok(Err(e)) => e.to_string(),
            Err(source) => ClaimError::Task {
                doing: "unpreparing",
                source,
            }
            .to_string(),
        };
        if !error.is_empty() {
            tracing::warn!(claim = %uid, %error, "NodeUnprepareResources: claim not unprepared");
        }
        out.push((uid, error));
    }
    out
}

/// The v1 service.
pub struct V1(pub Arc<Driver>);
/// The v1beta1 service (same messages, another package).
pub struct V1beta1(pub Arc<Driver>);

macro_rules! dra_service {
    ($ty:ident, $pb:ident, $device:expr) => {
        #[tonic::async_trait]
        impl $pb::dra_plugin_server::DraPlugin for $ty {
            async fn node_prepare_resources(
                &self,
                req: Request<$pb::NodePrepareResourcesRequest>,
            ) -> Result<Response<$pb::NodePrepareResourcesResponse>, Status> {
                let claims = req
                    .into_inner()
                    .claims
                    .into_iter()
                    .map(|c| ClaimRef {
                        namespace: c.namespace,
                        uid: c.uid,
                        name: c.name,
                    })
                    .collect();
                let claims: HashMap<String, $pb::NodePrepareResourceResponse> =
                    prepare_all(&self.0, claims)
                        .await
                        .into_iter()
                        .map(|(uid, r)| {
                            let answer = match r {
                                Ok(devices) => $pb::NodePrepareResourceResponse {
                                    devices: devices.into_iter().map($device).collect(),
                                    error: String::new(),
                                },
                                Err(e) => $pb::NodePrepareResourceResponse {
                                    devices: vec![],
                                    error: e.to_string(),
                                },
                            };
                            (uid, answer)
                        })
                        .collect();
                Ok(Response::new($pb::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<$pb::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$pb::NodeUnprepareResourcesResponse>, Status> {
                let claims = req
                    .into_inner()
                    .claims
                    .into_iter()
                    .map(|c| ClaimRef {
                        namespace: c.namespace,
                        uid: c.uid,
                        name: c.name,
                    })
                    .collect();
                let claims = unprepare_all(&self.0, claims)
                    .await
                    .into_iter()
                    .map(|(uid, error)| (uid, $pb::NodeUnprepareResourceResponse { error }))
                    .collect();
                Ok(Response::new($pb::NodeUnprepareResourcesResponse {
                    claims,
                }))
            }
        }
    };
}

dra_service!(V1, v1, |d: PreparedDevice| v1::Device {
    request_names: d.request_names,
    pool_name: d.pool_name,
    device_name: d.device_name,
    cdi_device_ids: d.cdi_device_ids,
    share_id: None,
});
dra_service!(V1beta1, v1beta1, |d: PreparedDevice| v1beta1::Device {
    request_names: d.request_names,
    pool_name: d.pool_name,
    device_name: d.device_name,
    cdi_device_ids: d.cdi_device_ids,
});

/// The registration service: what kubelet's plugin watcher asks.
pub struct Registration {
    driver: String,
    endpoint: PathBuf,
    metrics: Option<Arc<crate::KubeletMetrics>>,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: self.driver.clone(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: VERSIONS.iter().map(|v| v.to_string()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        if let Some(m) = &self.metrics {
            m.registered(usize::from(s.plugin_registered), s.plugin_registered);
        }
        if s.plugin_registered {
            tracing::info!(driver = %self.driver, "kubelet registered the DRA driver");
        } else {
            tracing::error!(driver = %self.driver, error = %s.error, "kubelet refused the DRA driver");
        }
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// Both DRA versions on one socket, by path prefix.
#[derive(Clone)]
pub struct Versions {
    v1: v1::dra_plugin_server::DraPluginServer<V1>,
    v1beta1: v1beta1::dra_plugin_server::DraPluginServer<V1beta1>,
}

const V1BETA1_PREFIX: &str = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.";

impl<B> tower::Service<http::Request<B>> for Versions
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = super::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path().starts_with(V1BETA1_PREFIX) {
            let mut s = self.v1beta1.clone();
            Box::pin(async move { s.call(req).await })
        } else {
            let mut s = self.v1.clone();
            Box::pin(async move { s.call(req).await })
        }
    }
}

/// Binds `path` afresh (a stale socket file from an earlier run is removed).
fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

/// Serves the DRA service, then the registration socket (kubelet dials the endpoint
/// as soon as it sees the registration socket), until `shutdown`; the socket files are
/// removed at the end.
pub async fn serve(
    driver: Arc<Driver>,
    registry_dir: &Path,
    plugins_dir: &Path,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let name = driver.name().to_owned();
    let metrics = driver.metrics.clone();
    let endpoint = dra_socket(plugins_dir, &name);
    let reg_path = registration_socket(registry_dir, &name);
    let dra_listener = bind(&endpoint)?;
    let versions = Versions {
        v1: v1::dra_plugin_server::DraPluginServer::new(V1(driver.clone())),
        v1beta1: v1beta1::dra_plugin_server::DraPluginServer::new(V1beta1(driver)),
    };
    let dra = Server::builder().serve_with_incoming(versions, authority::incoming(dra_listener));
    let reg_listener = bind(&reg_path)?;
    let registration = reg::registration_server::RegistrationServer::new(Registration {
        driver: name.clone(),
        endpoint: endpoint.clone(),
        metrics,
    });
    let reg =
        Server::builder().serve_with_incoming(registration, authority::incoming(reg_listener));
    tracing::info!(driver = %name, registration = %reg_path.display(), endpoint = %endpoint.display(), "DRA driver serving");
    let result = tokio::select! {
        r = dra => r.map_err(std::io::Error::other),
        r = reg => r.map_err(std::io::Error::other),
        _ = shutdown => Ok(()),
    };
    let _ = std::fs::remove_file(&reg_path);
    let _ = std::fs::remove_file(&endpoint);
    result
}
