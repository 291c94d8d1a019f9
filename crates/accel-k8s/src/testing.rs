//! A fake kubelet over unix sockets in a temporary directory, for tests (feature
//! `testing`; accel-k8s's own tests and the server's Kubernetes tests): the
//! Registration service (which, like kubelet, dials the plugin back and asks for its
//! options before answering, then follows its ListAndWatch stream) and a
//! PodResourcesLister. And a stand-in Kubernetes API server for the DRA driver's
//! objects ([`kube`]).

pub mod kube;

use crate::proto::deviceplugin as dp;
use crate::proto::podresources as pr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

pub const WAIT: Duration = Duration::from_secs(10);

/// What kubelet knows of one registered resource.
#[derive(Clone)]
pub struct Registered {
    pub request: dp::RegisterRequest,
    pub client: dp::device_plugin_client::DevicePluginClient<Channel>,
    /// The latest ListAndWatch message's devices.
    pub devices: watch::Receiver<Vec<dp::Device>>,
}

type Registry = Arc<Mutex<HashMap<String, Registered>>>;

#[derive(Clone)]
struct Registration {
    dir: PathBuf,
    registry: Registry,
    changed: watch::Sender<u64>,
}

#[tonic::async_trait]
impl dp::registration_server::Registration for Registration {
    async fn register(
        &self,
        request: Request<dp::RegisterRequest>,
    ) -> Result<Response<dp::Empty>, Status> {
        let r = request.into_inner();
        if r.version != "v1beta1" {
            return Err(Status::invalid_argument("unsupported version"));
        }
        if !r.resource_name.contains('/') {
            return Err(Status::invalid_argument("not an extended resource name"));
        }
        let channel = crate::kubelet::connect(&self.dir.join(&r.endpoint))
            .await
            .map_err(|e| Status::unavailable(format!("dial back: {e}")))?;
        let mut client = dp::device_plugin_client::DevicePluginClient::new(channel);
        client.get_device_plugin_options(dp::Empty {}).await?;
        let mut stream = client.list_and_watch(dp::Empty {}).await?.into_inner();
        let (tx, rx) = watch::channel(Vec::new());
        tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let _ = tx.send(msg.devices);
            }
        });
        self.registry.lock().unwrap().insert(
            r.resource_name.clone(),
            Registered {
                request: r,
                client,
                devices: rx,
            },
        );
        self.changed.send_modify(|v| *v += 1);
        Ok(Response::new(dp::Empty {}))
    }
}

/// (resource name, device ids) of one listed container.
type Listed = (String, Vec<String>);

#[derive(Clone, Default)]
struct PodResources {
    /// (resource name, device ids) of one container each.
    listed: Arc<Mutex<Vec<Listed>>>,
}

#[tonic::async_trait]
impl pr::pod_resources_lister_server::PodResourcesLister for PodResources {
    async fn list(
        &self,
        _: Request<pr::ListPodResourcesRequest>,
    ) -> Result<Response<pr::ListPodResourcesResponse>, Status> {
        let containers = self
            .listed
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, (r, ids))| pr::ContainerResources {
                name: format!("c{i}"),
                devices: vec![pr::ContainerDevices {
                    resource_name: r.clone(),
                    device_ids: ids.clone(),
                    topology: None,
                }],
                ..Default::default()
            })
            .collect();
        Ok(Response::new(pr::ListPodResourcesResponse {
            pod_resources: vec![pr::PodResources {
                name: "pod".into(),
                namespace: "default".into(),
                containers,
                ..Default::default()
            }],
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<pr::AllocatableResourcesRequest>,
    ) -> Result<Response<pr::AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not faked"))
    }

    async fn get(
        &self,
        _: Request<pr::GetPodResourcesRequest>,
    ) -> Result<Response<pr::GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not faked"))
    }
}

pub struct FakeKubelet {
    pub dir: PathBuf,
    registry: Registry,
    changed: watch::Receiver<u64>,
    pods: PodResources,
    tasks: Vec<JoinHandle<()>>,
}

impl FakeKubelet {
    /// Starts kubelet on `<dir>/kubelet.sock` and pod-resources on
    /// `<dir>/pod-resources.sock`.
    pub fn start(dir: &Path) -> FakeKubelet {
        let registry = Registry::default();
        let (changed_tx, changed) = watch::channel(0);
        let reg = Registration {
            dir: dir.to_path_buf(),
            registry: registry.clone(),
            changed: changed_tx,
        };
        let kubelet = UnixListener::bind(dir.join("kubelet.sock")).unwrap();
        let pods = PodResources::default();
        let pr_sock = dir.join("pod-resources.sock");
        let _ = std::fs::remove_file(&pr_sock);
        let pr_listener = UnixListener::bind(pr_sock).unwrap();
        let pods2 = pods.clone();
        let tasks = vec![
            tokio::spawn(async move {
                let _ = Server::builder()
                    .add_service(dp::registration_server::RegistrationServer::new(reg))
                    .serve_with_incoming(UnixListenerStream::new(kubelet))
                    .await;
            }),
            tokio::spawn(async move {
                let _ = Server::builder()
                    .add_service(
                        pr::pod_resources_lister_server::PodResourcesListerServer::new(pods2),
                    )
                    .serve_with_incoming(UnixListenerStream::new(pr_listener))
                    .await;
            }),
        ];
        FakeKubelet {
            dir: dir.to_path_buf(),
            registry,
            changed,
            pods,
            tasks,
        }
    }

    pub fn pod_resources_socket(&self) -> PathBuf {
        self.dir.join("pod-resources.sock")
    }

    /// A kubelet restart: this one stops, every socket in the directory is deleted
    /// (kubelet's CleanupPluginDirectory), and a new kubelet starts.
    pub fn restart(self) -> FakeKubelet {
        let dir = self.dir.clone();
        drop(self);
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if std::os::unix::fs::FileTypeExt::is_socket(
                &std::fs::symlink_metadata(&p).unwrap().file_type(),
            ) {
                std::fs::remove_file(p).unwrap();
            }
        }
        FakeKubelet::start(&dir)
    }

    pub fn registered(&self) -> Vec<String> {
        let mut v: Vec<String> = self.registry.lock().unwrap().keys().cloned().collect();
        v.sort();
        v
    }

    /// Waits until `resource` is registered.
    pub async fn plugin(&self, resource: &str) -> Registered {
        let mut changed = self.changed.clone();
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(r) = self.registry.lock().unwrap().get(resource) {
                    return r.clone();
                }
                changed.changed().await.expect("kubelet alive");
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{resource} never registered"))
    }

    pub fn set_pods(&self, listed: Vec<Listed>) {
        *self.pods.listed.lock().unwrap() = listed;
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Waits until the plugin's latest list satisfies `pred`; returns it.
pub async fn wait_list(
    r: &Registered,
    what: &str,
    pred: impl Fn(&[dp::Device]) -> bool,
) -> Vec<dp::Device> {
    let mut rx = r.devices.clone();
    let found = tokio::time::timeout(WAIT, async {
        rx.wait_for(|d| pred(d)).await.map(|d| d.clone()).ok()
    })
    .await;
    match found {
        Ok(Some(d)) => d,
        _ => panic!("{what}: last list was {:?}", r.devices.borrow().clone()),
    }
}

/// `(id, health)` pairs of a list, sorted by id.
pub fn ids(d: &[dp::Device]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = d.iter().map(|d| (d.id.clone(), d.health.clone())).collect();
    v.sort();
    v
}

/// Opens ListAndWatch on the plugin that listens (or is about to) at `sock`, as kubelet
/// does once a plugin has registered; panics when none comes up within [`WAIT`].
pub async fn list_and_watch(sock: &Path) -> tonic::Streaming<dp::ListAndWatchResponse> {
    let channel = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(c) = crate::kubelet::connect(sock).await {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no plugin at {}", sock.display()));
    dp::device_plugin_client::DevicePluginClient::new(channel)
        .list_and_watch(dp::Empty {})
        .await
        .unwrap()
        .into_inner()
}

/// Prints one benchmark line: how many samples `v` holds, its p50, p99 and max.
pub fn latency_summary(what: &str, mut v: Vec<Duration>) {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    println!(
        "{what:<44} n={:<6} p50={:>8.1?} p99={:>8.1?} max={:>8.1?}",
        v.len(),
        p(0.50),
        p(0.99),
        v[v.len() - 1]
    );
}

/// A benchmark's count: the first number among its arguments (`cargo bench ... -- N`),
/// or `default`.
pub fn bench_count(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}

/// Kubelet's Allocate request: `ids` for one container.
pub fn allocate_request(ids: &[&str]) -> dp::AllocateRequest {
    dp::AllocateRequest {
        container_requests: vec![dp::ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
    }
}

impl Registered {
    /// Allocates `ids` for one container, as kubelet does before starting it.
    pub async fn allocate(&self, ids: &[&str]) -> Result<dp::AllocateResponse, Status> {
        let r = self.client.clone().allocate(allocate_request(ids)).await?;
        Ok(r.into_inner())
    }
}

/// The sorted `(id, "Healthy")` pairs that [`ids`] gives for a list of healthy `v`.
pub fn healthy(v: &[&str]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = v
        .iter()
        .map(|s| (s.to_string(), "Healthy".into()))
        .collect();
    v.sort();
    v
}

/// A healthy A100 of `device_type` at PCI address `id`, with no device nodes.
pub fn device(id: &str, device_type: &str) -> crate::device::Device {
    crate::device::Device {
        id: id.into(),
        device_type: device_type.into(),
        vendor: 0x10de,
        product: 0x20b0,
        model: "A100".into(),
        traits: vec![],
        numa_node: Some(0),
        healthy: true,
        pci_addresses: vec![id.into()],
        device_nodes: vec![],
        memory_mib: None,
        pcie_root: None,
        partitions: None,
    }
}

/// The value of one series in `registry`'s exposition (`name{label="v"}` exactly as
/// written, or a bare name), None when it is not exposed.
pub fn sample(registry: &prometheus_client::registry::Registry, series: &str) -> Option<f64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encode the registry");
    text.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().expect("a sample's value"))
    })
}

/// A DRA claim recorder that keeps what the server would be asked to hold: each
/// prepared claim's holds, by uid.
#[derive(Default)]
pub struct Held(pub Mutex<std::collections::BTreeMap<String, crate::dra::ClaimHolds>>);

impl crate::dra::ClaimRecord for Held {
    fn prepare(
        &self,
        uid: &str,
        holds: crate::dra::ClaimHolds,
    ) -> crate::dra::BoxFuture<'_, Result<(), crate::RecordError>> {
        self.0.lock().unwrap().insert(uid.to_owned(), holds);
        Box::pin(async { Ok(()) })
    }
    fn unprepare(&self, uid: &str) -> crate::dra::BoxFuture<'_, Result<(), crate::RecordError>> {
        self.0.lock().unwrap().remove(uid);
        Box::pin(async { Ok(()) })
    }
}
