//! Serving the plugins on unix sockets in kubelet's device plugin directory and
//! registering them with kubelet, again whenever kubelet restarts.
//!
//! ```text
//! Registrar::step()                 (the run loop calls it every second; tests directly)
//!   resources the table wants  ─┬─ not served, or our socket file gone / replaced
//!                               │     ─▶ bind <dir>/<socket>, serve, then Register
//!                               ├─ served, but kubelet.sock is a new file (kubelet
//!                               │  restarted) ─▶ Register again
//!                               └─ served, no longer wanted ─▶ stop, remove the socket
//! ```
//!
//! Kubelet dials the plugin back while it handles Register, so a socket is served
//! before it is registered. A restarting kubelet deletes every socket in the
//! directory and re-creates `kubelet.sock`; both are noticed by comparing file
//! identities (device, inode), which needs no inotify.

use crate::metrics::KubeletMetrics;
use crate::plugin::Plugin;
use crate::proto::deviceplugin as pb;
use crate::slots::Resource;
use crate::state::Shared;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tonic::transport::Server;

/// Kubelet's registration socket, in the device plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The only device plugin API version kubelet accepts.
pub const API_VERSION: &str = "v1beta1";
/// How long a Register (kubelet dials back and asks for options) may take.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Which file a path is now: (device, inode), or `None` when absent.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

pub use crate::channel::connect;
use crate::channel::CallError;

/// The socket file name of a resource: `accel-<domain>_<name>.sock`.
pub fn socket_name(resource: &str) -> String {
    format!("accel-{}.sock", resource.replace('/', "_"))
}

struct Served {
    socket: PathBuf,
    id: Option<(u64, u64)>,
    task: JoinHandle<()>,
    /// The kubelet socket this plugin was registered with.
    registered_with: Option<(u64, u64)>,
}

/// What one step did (logs and tests).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepReport {
    pub served: Vec<String>,
    pub registered: Vec<String>,
    pub stopped: Vec<String>,
    /// Resource name and why it failed (retried on the next step).
    pub failed: Vec<(String, String)>,
}

/// Keeps one served and registered plugin per resource of the table.
pub struct Registrar {
    shared: Arc<Shared>,
    domain: String,
    dir: PathBuf,
    served: BTreeMap<Resource, Served>,
    metrics: Option<Arc<KubeletMetrics>>,
    /// Resources registered at least once (a later Register is a re-registration).
    ever_registered: BTreeSet<String>,
}

impl Registrar {
    pub fn new(
        shared: Arc<Shared>,
        domain: impl Into<String>,
        dir: impl Into<PathBuf>,
    ) -> Registrar {
        Registrar {
            shared,
            domain: domain.into(),
            dir: dir.into(),
            served: BTreeMap::new(),
            metrics: None,
            ever_registered: BTreeSet::new(),
        }
    }

    /// Counts registrations, and serves plugins that count their Allocate calls.
    pub fn with_metrics(mut self, metrics: Option<Arc<KubeletMetrics>>) -> Registrar {
        self.metrics = metrics;
        self
    }

    /// Whether kubelet runs and every plugin of the table is served and registered
    /// with it (the agent's readiness when `[kubernetes]` is on).
    pub fn all_registered(&self) -> bool {
        let kubelet = file_id(&self.dir.join(KUBELET_SOCKET));
        let wanted = self.shared.read(|t| t.resources());
        kubelet.is_some()
            && !wanted.is_empty()
            && wanted.iter().all(|r| {
                self.served
                    .get(r)
                    .is_some_and(|s| s.registered_with == kubelet && !s.task.is_finished())
            })
    }

    fn update_metrics(&self) {
        if let Some(m) = &self.metrics {
            let kubelet = file_id(&self.dir.join(KUBELET_SOCKET));
            let n = self
                .served
                .values()
                .filter(|s| kubelet.is_some() && s.registered_with == kubelet)
                .count();
            m.registered(n, self.all_registered());
        }
    }

    pub async fn step(&mut self) -> StepReport {
        let mut report = StepReport::default();
        let wanted = self.shared.read(|t| t.resources());
        let gone: Vec<Resource> = self
            .served
            .keys()
            .filter(|r| !wanted.contains(r))
            .cloned()
            .collect();
        for r in gone {
            if let Some(s) = self.served.remove(&r) {
                stop(s);
                report.stopped.push(r.name);
            }
        }
        if !self.dir.is_dir() {
            self.update_metrics();
            return report;
        }
        let kubelet = file_id(&self.dir.join(KUBELET_SOCKET));
        for r in wanted {
            let intact = self.served.get(&r).is_some_and(|s| {
                s.id.is_some() && file_id(&s.socket) == s.id && !s.task.is_finished()
            });
            if !intact {
                if let Some(old) = self.served.remove(&r) {
                    stop(old);
                }
                match self.serve(&r) {
                    Ok(s) => {
                        self.served.insert(r.clone(), s);
                        report.served.push(r.name.clone());
                    }
                    Err(e) => {
                        report.failed.push((r.name.clone(), format!("serve: {e}")));
                        continue;
                    }
                }
            }
            let s = self.served.get_mut(&r).expect("served above");
            if kubelet.is_none() || s.registered_with == kubelet {
                continue;
            }
            let endpoint = s
                .socket
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let again = self.ever_registered.contains(&r.name);
            match register(&self.dir.join(KUBELET_SOCKET), &r.name, &endpoint).await {
                Ok(()) => {
                    s.registered_with = kubelet;
                    tracing::info!(resource = %r.name, endpoint, again, "registered with kubelet");
                    report.registered.push(r.name.clone());
                    self.ever_registered.insert(r.name.clone());
                    if let Some(m) = &self.metrics {
                        m.registration(true, again);
                    }
                }
                Err(e) => {
                    tracing::warn!(resource = %r.name, error = %e, "kubelet registration failed");
                    report.failed.push((r.name.clone(), e.to_string()));
                    if let Some(m) = &self.metrics {
                        m.registration(false, again);
                    }
                }
            }
        }
        self.update_metrics();
        report
    }

    fn serve(&self, r: &Resource) -> std::io::Result<Served> {
        let socket = self.dir.join(socket_name(&r.name));
        match std::fs::remove_file(&socket) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(&socket)?;
        let id = file_id(&socket);
        let service = pb::device_plugin_server::DevicePluginServer::new(
            Plugin::new(self.shared.clone(), r.key.clone(), self.domain.clone())
                .with_metrics(self.metrics.clone()),
        );
        let name = r.name.clone();
        let task = tokio::spawn(async move {
            // grpc-go's percent-encoded `:authority` answered too (authority.rs).
            let incoming = crate::authority::incoming(listener);
            if let Err(e) = Server::builder()
                .serve_with_incoming(service, incoming)
                .await
            {
                tracing::warn!(resource = %name, error = %e, "device plugin server ended");
            }
        });
        Ok(Served {
            socket,
            id,
            task,
            registered_with: None,
        })
    }

    /// Stops every server and removes its socket (kubelet then marks the resources
    /// unhealthy, and drops them after its grace period).
    pub fn shutdown(&mut self) {
        for (_, s) in std::mem::take(&mut self.served) {
            stop(s);
        }
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn stop(s: Served) {
    s.task.abort();
    // Only our own file: kubelet may have replaced the directory's content.
    if s.id.is_some() && file_id(&s.socket) == s.id {
        let _ = std::fs::remove_file(&s.socket);
    }
}

async fn register(kubelet: &Path, resource: &str, endpoint: &str) -> Result<(), CallError> {
    let call = async {
        let channel = connect(kubelet).await.map_err(CallError::Connect)?;
        pb::registration_client::RegistrationClient::new(channel)
            .register(pb::RegisterRequest {
                version: API_VERSION.into(),
                endpoint: endpoint.into(),
                resource_name: resource.into(),
                options: Some(pb::DevicePluginOptions {
                    pre_start_required: false,
                    get_preferred_allocation_available: true,
                }),
            })
            .await
            .map_err(|status| CallError::Refused {
                call: "Register",
                status,
            })?;
        Ok(())
    };
    tokio::time::timeout(REGISTER_TIMEOUT, call)
        .await
        .map_err(|_| CallError::TimedOut("Register"))?
}
