//! The DRA kubelet plugin (issue 30) of `accel agent` against the real server (every
//! backend), a stand-in API server serving ResourceClaims, and kubelet's side played
//! by tonic clients of the real registration and DRA protos over the unix sockets.
//! The node has no Nova (`node_provider = "own"`): the agent makes its provider.

mod common;
mod fake_kube;

use accel_agent::config::{NodeProvider, Settings};
use accel_agent::dra::KubeApi;
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::{Agent, Node};
use accel_api::agent::ClaimDevices;
use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::{self, serve};
use accel_k8s::proto::{dra_v1 as v1, dra_v1beta1 as v1beta1, registration as reg};
use common::accel::{allocate_gpu, get, placement, Server, TempDb};
use common::BACKENDS;
use fake_kube::{claim, read_claim, slice_api, Claims, SliceStore};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const NODE: &str = "dra-node";
const DOMAIN: &str = "accel.dev";
const GPUS: [&str; 2] = ["0000:17:00.0", "0000:31:00.0"];
const ROOT: &str = "pci0000:16";
const WAIT: Duration = Duration::from_secs(20);

fn provider(address: &str) -> String {
    accel_store::accelerator::report::provider_uuid(&format!("{NODE}_{address}"))
}

fn ours(address: &str) -> (&'static str, &'static str, String) {
    (DOMAIN, NODE, dra::device_name(NODE, address))
}

/// The node: two GPUs, an agent that owns its node provider, the DRA settings.
fn node(dir: &Path, srv: &Server) -> Settings {
    let fs = FakeSysfs::new(dir.join("sys"));
    assert_eq!(testing::two_gpus(&fs), GPUS);
    // The first GPU as the kernel links it, under a root complex (its pcieRoot).
    fs.behind_root(GPUS[0], ROOT, "0000:16:01.0");
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.join("cdi");
    Settings {
        drivers: Some(vec!["nvidia".into()]),
        kubernetes: Some(kubernetes),
        node_provider: NodeProvider::Own,
        ..Settings::new(&srv.accel, NODE, &fs.root)
    }
}

/// The driver as `accel agent` runs it, on `registry` and `plugins`.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

/// The node's DRA parts over the fake Kubernetes API at `api`, through the builder.
fn dra_of(settings: &Settings, api: &str, token: Option<&str>) -> accel_agent::node::Dra {
    let node = Node::builder(settings.clone()).build().unwrap();
    node.dra(KubeApi::new(api, token).unwrap()).unwrap()
}

/// The node's one agent, built as `accel agent` builds it.
fn agent_of(settings: &Settings) -> Arc<Agent> {
    Node::builder(settings.clone())
        .build()
        .unwrap()
        .agent()
        .clone()
}

fn start(settings: &Settings, api: &str, registry: &Path, plugins: &Path) -> Running {
    let driver = dra_of(settings, api, Some("token")).driver();
    let (stop, stopped) = oneshot::channel::<()>();
    let (registry, plugins) = (registry.to_path_buf(), plugins.to_path_buf());
    let task = tokio::spawn(async move {
        serve::serve(driver, &registry, &plugins, async {
            let _ = stopped.await;
        })
        .await
    });
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the driver stops")
            .unwrap()
            .unwrap();
    }
}

/// A channel to `path` once it is served.
async fn dial(path: &Path) -> tonic::transport::Channel {
    common::eventually(WAIT, "the socket served", || async {
        accel_k8s::kubelet::connect(path)
            .await
            .map_err(|e| e.to_string())
    })
    .await
}

fn refs(claims: &[(&str, &str)]) -> Vec<v1::Claim> {
    claims
        .iter()
        .map(|(name, uid)| v1::Claim {
            namespace: "default".into(),
            uid: uid.to_string(),
            name: name.to_string(),
        })
        .collect()
}

async fn consumer(srv: &Server, uid: &str) -> Value {
    get(srv, &format!("/allocations/{uid}")).await
}

fn held(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v["allocations"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test]
async fn claims_are_prepared_in_placement_and_unprepared() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let settings = node(dir.path(), &srv);
        let agent = agent_of(&settings);
        agent.check_node().await.unwrap();
        assert_eq!(agent.step().await.unwrap().added, 2);

        let claims: Claims = Arc::default();
        let app = axum::Router::new()
            .route(
                "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}",
                axum::routing::get(read_claim),
            )
            .with_state(claims.clone());
        let (addr, _api_stop) = common::serve_fake(app).await;
        let api = format!("http://{addr}");
        let registry: PathBuf = dir.path().join("plugins_registry");
        let plugins: PathBuf = dir.path().join("plugins");
        let running = start(&settings, &api, &registry, &plugins);

        // Registration: kubelet's plugin watcher asks GetInfo on <driver>-reg.sock.
        let reg_sock = registry.join("accel.dev-reg.sock");
        let mut r = reg::registration_client::RegistrationClient::new(dial(&reg_sock).await);
        let info = r.get_info(reg::InfoRequest {}).await.unwrap().into_inner();
        let endpoint = plugins.join("accel.dev/dra.sock");
        assert_eq!(
            info,
            reg::PluginInfo {
                r#type: "DRAPlugin".into(),
                name: "accel.dev".into(),
                endpoint: endpoint.display().to_string(),
                supported_versions: vec!["v1.DRAPlugin".into(), "v1beta1.DRAPlugin".into()],
            }
        );
        r.notify_registration_status(reg::RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .unwrap();

        let channel = dial(&endpoint).await;
        let mut k = v1::dra_plugin_client::DraPluginClient::new(channel.clone());
        let mut kb = v1beta1::dra_plugin_client::DraPluginClient::new(channel);

        // A prepare allocates the device in Placement, consumer = the claim uid.
        let a = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a01";
        claims
            .lock()
            .unwrap()
            .insert("default/a".into(), claim("a", a, &[ours(GPUS[0])]));
        let prepare = |k: &mut v1::dra_plugin_client::DraPluginClient<_>, list: Vec<v1::Claim>| {
            let mut k = k.clone();
            async move {
                k.node_prepare_resources(v1::NodePrepareResourcesRequest { claims: list })
                    .await
                    .unwrap()
                    .into_inner()
                    .claims
            }
        };
        let got = prepare(&mut k, refs(&[("a", a)])).await;
        let name0 = dra::device_name(NODE, GPUS[0]);
        let want_a = v1::NodePrepareResourceResponse {
            devices: vec![v1::Device {
                request_names: vec!["gpu".into()],
                pool_name: NODE.into(),
                device_name: name0.clone(),
                cdi_device_ids: vec![format!("accel.dev/gpu={a}-{name0}")],
                share_id: None,
            }],
            error: String::new(),
        };
        assert_eq!(got[a], want_a);
        let c = consumer(&srv, a).await;
        assert_eq!(held(&c), vec![provider(GPUS[0])]);
        assert_eq!(c["consumer_type"], "KUBERNETES_CLAIM");
        let cdi = dir.path().join(format!("cdi/accel-accel.dev-gpu-{a}.json"));
        let spec: Value = serde_json::from_str(&std::fs::read_to_string(&cdi).unwrap()).unwrap();
        assert_eq!(spec["kind"], "accel.dev/gpu");
        assert_eq!(spec["devices"][0]["name"], format!("{a}-{name0}"));
        assert_eq!(
            spec["devices"][0]["containerEdits"]["deviceNodes"][1]["path"],
            "/dev/vfio/40"
        );

        // A VM holds the other GPU: that claim is refused, the replayed one is not.
        allocate_gpu(
            &srv,
            "0d5f7bd2-8d8e-4b0c-a9f4-c3c8cbbd7c11",
            &provider(GPUS[1]),
        )
        .await;
        let b = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a02";
        claims
            .lock()
            .unwrap()
            .insert("default/b".into(), claim("b", b, &[ours(GPUS[1])]));
        let x = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a03";
        claims.lock().unwrap().insert(
            "default/x".into(),
            claim(
                "x",
                x,
                &[(
                    DOMAIN,
                    "other-node",
                    dra::device_name("other-node", GPUS[0]),
                )],
            ),
        );
        let got = prepare(
            &mut k,
            refs(&[("a", a), ("b", b), ("x", x), ("gone", "u-1")]),
        )
        .await;
        assert_eq!(got.len(), 4, "every claim is answered: {got:?}");
        assert_eq!(got[a], want_a, "a replay answers the same");
        assert!(got[b].devices.is_empty());
        assert!(
            got[b].error.contains("held by a virtual machine"),
            "{}",
            got[b].error
        );
        assert!(
            got[x].error.contains("not of this node"),
            "{}",
            got[x].error
        );
        assert!(
            got["u-1"].error.contains("not found"),
            "{}",
            got["u-1"].error
        );
        assert_eq!(held(&consumer(&srv, b).await), Vec::<String>::new());
        // Unpreparing never frees a VM's consumer, whatever uid it is given.
        let vm_client =
            accel_agent::client::Client::new(&settings.server, &settings.token).unwrap();
        let e = vm_client
            .unprepare_claim(NODE, "0d5f7bd2-8d8e-4b0c-a9f4-c3c8cbbd7c11")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not a Kubernetes claim"), "{e}");
        assert_eq!(
            held(&consumer(&srv, "0d5f7bd2-8d8e-4b0c-a9f4-c3c8cbbd7c11").await),
            vec![provider(GPUS[1])]
        );

        // A uid that differs from the claim's (deleted and re-created) is refused (v1beta1).
        let stale = kb
            .node_prepare_resources(v1beta1::NodePrepareResourcesRequest {
                claims: vec![v1beta1::Claim {
                    namespace: "default".into(),
                    uid: "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7aff".into(),
                    name: "a".into(),
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert!(stale.claims["6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7aff"]
            .error
            .contains("has uid"));

        // The agent restarts after a reboot (CDI files gone): kubelet replays, the
        // allocation is unchanged and the spec is back.
        running.stop().await;
        std::fs::remove_dir_all(dir.path().join("cdi")).unwrap();
        let running = start(&settings, &api, &registry, &plugins);
        let mut k = v1::dra_plugin_client::DraPluginClient::new(dial(&endpoint).await);
        let got = prepare(&mut k, refs(&[("a", a)])).await;
        assert_eq!(got[a], want_a);
        assert!(cdi.exists());
        assert_eq!(held(&consumer(&srv, a).await), vec![provider(GPUS[0])]);

        // Unprepare (v1beta1) frees the device; an unknown claim is no error.
        let mut kb = v1beta1::dra_plugin_client::DraPluginClient::new(dial(&endpoint).await);
        let done = kb
            .node_unprepare_resources(v1beta1::NodeUnprepareResourcesRequest {
                claims: vec![
                    v1beta1::Claim {
                        namespace: "default".into(),
                        uid: a.into(),
                        name: "a".into(),
                    },
                    v1beta1::Claim {
                        namespace: "default".into(),
                        uid: "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a09".into(),
                        name: "never".into(),
                    },
                ],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(done.claims.len(), 2);
        assert!(done.claims.values().all(|c| c.error.is_empty()), "{done:?}");
        assert_eq!(held(&consumer(&srv, a).await), Vec::<String>::new());
        assert!(!cdi.exists());
        // The freed GPU is Nova's to take again.
        allocate_gpu(
            &srv,
            "0d5f7bd2-8d8e-4b0c-a9f4-c3c8cbbd7c12",
            &provider(GPUS[0]),
        )
        .await;
        running.stop().await;
        srv.stop().await;
    }
}

/// Nova and a DRA claim ask for the same device at once: exactly one gets it, every
/// round, and the loser's answer says so.
#[tokio::test]
async fn a_device_is_never_a_vms_and_a_claims_at_once() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let settings = node(dir.path(), &srv);
        let agent = agent_of(&settings);
        agent.check_node().await.unwrap();
        agent.step().await.unwrap();
        let client = accel_agent::client::Client::new(&settings.server, &settings.token).unwrap();
        let rp = provider(GPUS[0]);
        for round in 0..8 {
            let uid = format!("6f1c1a52-55b1-4d7f-9a39-3f1a4a0e{round:04x}");
            let vm = format!("0d5f7bd2-8d8e-4b0c-a9f4-c3c8cbbd{round:04x}");
            let path = format!("/allocations/{vm}");
            let devices = ClaimDevices::whole(vec![GPUS[0].to_string()]);
            let nova = placement(
                &srv,
                reqwest::Method::PUT,
                &path,
                Some(json!({
                    "allocations": {&rp: {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null,
                    "consumer_type": "INSTANCE",
                })),
            );
            let pod = client.prepare_claim(NODE, &uid, &devices);
            let ((status, _), pod) = tokio::join!(nova, pod);
            let vm_got = status == 204;
            let pod_got = pod.is_ok();
            assert!(
                vm_got != pod_got,
                "round {round}: VM {status}, claim {pod:?}"
            );
            if let Err(e) = &pod {
                let e = e.to_string();
                assert!(
                    e.contains("held by a virtual machine")
                        || e.contains("taken by another consumer"),
                    "{e}"
                );
            }
            let holders: Vec<String> = get(&srv, &format!("/resource_providers/{rp}/allocations"))
                .await["allocations"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            assert_eq!(holders.len(), 1, "round {round}: {holders:?}");
            // Free the device for the next round.
            client.unprepare_claim(NODE, &uid).await.unwrap();
            let (s, _) = placement(
                &srv,
                reqwest::Method::DELETE,
                &format!("/allocations/{vm}"),
                None,
            )
            .await;
            assert!(s == 204 || s == 404, "{s}");
        }
        srv.stop().await;
    }
}

#[tokio::test]
async fn the_nodes_resource_slice_follows_its_devices() {
    use accel_k8s::dra::slices::{Published, Publisher};
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let settings = node(dir.path(), &srv);
        let agent = agent_of(&settings);
        agent.check_node().await.unwrap();
        agent.step().await.unwrap();
        let store: SliceStore = Arc::default();
        let (addr, _stop) = common::serve_fake(slice_api(store.clone())).await;
        let client = accel_agent::client::Client::new(&settings.server, &settings.token).unwrap();
        let mut p: Publisher = dra_of(&settings, &format!("http://{addr}"), None).publisher();
        let only = || {
            let st = store.lock().unwrap();
            assert_eq!(st.items.len(), 1, "one slice: {:?}", st.items);
            st.items.values().next().unwrap().clone()
        };
        let names = |s: &Value| -> Vec<String> {
            s["spec"]["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let (n0, n1) = (
            dra::device_name(NODE, GPUS[0]),
            dra::device_name(NODE, GPUS[1]),
        );

        assert_eq!(
            p.step().await.unwrap(),
            Published::Created { generation: 1 }
        );
        let s = only();
        assert_eq!(
            s["spec"]["pool"],
            json!({"name": NODE, "generation": 1, "resourceSliceCount": 1})
        );
        assert_eq!(s["spec"]["nodeName"], NODE);
        assert_eq!(s["spec"]["driver"], DOMAIN);
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "node-uid-1");
        assert_eq!(names(&s), vec![n0.clone(), n1.clone()]);
        assert_eq!(
            s["spec"]["devices"][0]["attributes"],
            json!({"type": {"string": "GPU"}, "vendor": {"string": "10de"},
                "product": {"string": "20b0"}, "model": s["spec"]["devices"][0]["attributes"]["model"],
                "configuration": {"string": "gpu"}, "health": {"string": "ok"},
                "pciAddress": {"string": GPUS[0]},
                "resource.kubernetes.io/pciBusID": {"string": GPUS[0]},
                "resource.kubernetes.io/pcieRoot": {"string": ROOT},
                "resource.kubernetes.io/numaNode": {"int": 0}})
        );
        // The second GPU's sysfs entry is no link: no root is claimed for it.
        let second = &s["spec"]["devices"][1]["attributes"];
        assert_eq!(
            second["resource.kubernetes.io/pciBusID"],
            json!({"string": GPUS[1]})
        );
        assert_eq!(second["resource.kubernetes.io/pcieRoot"], Value::Null);
        assert_eq!(p.step().await.unwrap(), Published::Unchanged);

        // A VM takes the second GPU: withdrawn at the next sync.
        allocate_gpu(
            &srv,
            "0d5f7bd2-8d8e-4b0c-a9f4-c3c8cbbd7c21",
            &provider(GPUS[1]),
        )
        .await;
        assert_eq!(
            p.step().await.unwrap(),
            Published::Updated { generation: 2 }
        );
        assert_eq!(names(&only()), vec![n0.clone()]);

        // Kubelet restarts and wipes the node's slices: the pool comes back, newer.
        store.lock().unwrap().items.clear();
        assert_eq!(
            p.step().await.unwrap(),
            Published::Created { generation: 3 }
        );
        assert_eq!(names(&only()), vec![n0.clone()]);

        // A claim prepared on the first GPU keeps it in the slice (the scheduler
        // tracks its own allocations).
        let uid = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a31";
        client
            .prepare_claim(NODE, uid, &ClaimDevices::whole(vec![GPUS[0].to_string()]))
            .await
            .unwrap();
        assert_eq!(p.step().await.unwrap(), Published::Unchanged);
        srv.stop().await;
    }
}

/// The publisher's loop watches the node's slices: a slice deleted through the API
/// (kubelet at its start, or anyone) is back as soon as the watch reports it, with an
/// interval far longer than the test.
#[tokio::test]
async fn a_deleted_slice_comes_back_through_the_watch() {
    use accel_k8s::dra::slices::{run, Publisher};
    let db = TempDb::fresh(common::Backend::Sqlite).await;
    let srv = Server::start(&db.url, None, None).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = node(dir.path(), &srv);
    let agent = agent_of(&settings);
    agent.check_node().await.unwrap();
    agent.step().await.unwrap();
    let store: SliceStore = Arc::default();
    let (addr, _stop) = common::serve_fake(slice_api(store.clone())).await;
    let p: Publisher = dra_of(&settings, &format!("http://{addr}"), None).publisher();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run(p, Duration::from_secs(3600), async {
        let _ = stopped.await;
    }));
    let slice = |generation: i64| {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move {
                let st = store.lock().unwrap();
                st.items
                    .values()
                    .find(|s| s["spec"]["pool"]["generation"] == generation)
                    .map(|s| s["metadata"]["name"].as_str().unwrap().to_owned())
                    .filter(|_| st.items.len() == 1)
            }
        }
    };
    // The first tick publishes the pool.
    let name = common::eventually(WAIT, "the slice published", slice(1)).await;
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/apis/resource.k8s.io/v1/resourceslices/{name}");
    assert!(http
        .delete(&url)
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    let deleted = tokio::time::Instant::now();
    common::eventually(WAIT, "the slice back", slice(2)).await;
    let took = deleted.elapsed();
    assert!(took < Duration::from_secs(5), "back after {took:?}");
    // And again: the loop watches from its newest list.
    let name = common::eventually(WAIT, "one slice", slice(2)).await;
    let url = format!("http://{addr}/apis/resource.k8s.io/v1/resourceslices/{name}");
    assert!(http
        .delete(&url)
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    common::eventually(WAIT, "the slice back again", slice(3)).await;
    stop.send(()).unwrap();
    task.await.unwrap();
    srv.stop().await;
}

/// A hundred claims prepared, then unprepared, by four kubelet calls at once; then a
/// device that vanishes while prepared is kept (reserved) until its claim is
/// unprepared, and removed after.
#[tokio::test]
async fn a_hundred_claims_at_once_and_a_device_that_vanishes() {
    const N: usize = 100;
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let mut settings = node(dir.path(), &srv);
        let fs = FakeSysfs::new(dir.path().join("many"));
        let addresses: Vec<String> = (0..N)
            .map(|i| {
                let a = testing::bdf(0x10 + (i / 8) as u8, (i % 8) as u8, 0);
                fs.function(&a, 0x10de, 0x20b0, 0x030200)
                    .numa(0)
                    .driver("vfio-pci")
                    .iommu_group(100 + i as u32);
                a
            })
            .collect();
        settings.sysfs_root = fs.root.clone();
        let agent = agent_of(&settings);
        agent.check_node().await.unwrap();
        assert_eq!(agent.step().await.unwrap().added, N as i64);

        let claims: Claims = Arc::default();
        let uids: Vec<String> = (0..N)
            .map(|i| format!("6f1c1a52-55b1-4d7f-9a39-3f1a4a0f{i:04x}"))
            .collect();
        for (i, uid) in uids.iter().enumerate() {
            claims.lock().unwrap().insert(
                format!("default/c{i}"),
                claim(&format!("c{i}"), uid, &[ours(&addresses[i])]),
            );
        }
        let app = axum::Router::new()
            .route(
                "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}",
                axum::routing::get(read_claim),
            )
            .with_state(claims.clone());
        let (addr, _api_stop) = common::serve_fake(app).await;
        let (registry, plugins) = (dir.path().join("registry"), dir.path().join("plugins"));
        let running = start(&settings, &format!("http://{addr}"), &registry, &plugins);
        let k = v1::dra_plugin_client::DraPluginClient::new(
            dial(&plugins.join("accel.dev/dra.sock")).await,
        );
        let batches: Vec<Vec<v1::Claim>> = (0..4)
            .map(|b| {
                (b * N / 4..(b + 1) * N / 4)
                    .map(|i| v1::Claim {
                        namespace: "default".into(),
                        uid: uids[i].clone(),
                        name: format!("c{i}"),
                    })
                    .collect()
            })
            .collect();
        let prepared = futures_join(batches.iter().map(|b| {
            let mut k = k.clone();
            let claims = b.clone();
            async move {
                k.node_prepare_resources(v1::NodePrepareResourcesRequest { claims })
                    .await
                    .unwrap()
                    .into_inner()
                    .claims
            }
        }))
        .await;
        let answered: usize = prepared.iter().map(|m| m.len()).sum();
        assert_eq!(answered, N);
        for m in &prepared {
            for (uid, r) in m {
                assert_eq!(r.error, "", "{uid}");
            }
        }
        for (i, uid) in uids.iter().enumerate() {
            assert_eq!(
                held(&consumer(&srv, uid).await),
                vec![provider(&addresses[i])]
            );
        }
        assert_eq!(
            std::fs::read_dir(dir.path().join("cdi")).unwrap().count(),
            N
        );

        let unprepared = futures_join(batches.iter().map(|b| {
            let mut k = k.clone();
            let claims = b.clone();
            async move {
                k.node_unprepare_resources(v1::NodeUnprepareResourcesRequest { claims })
                    .await
                    .unwrap()
                    .into_inner()
                    .claims
            }
        }))
        .await;
        for m in &unprepared {
            assert!(m.values().all(|r| r.error.is_empty()), "{m:?}");
        }
        for uid in &uids {
            assert_eq!(held(&consumer(&srv, uid).await), Vec::<String>::new());
        }
        assert_eq!(
            std::fs::read_dir(dir.path().join("cdi")).unwrap().count(),
            0
        );

        // The first device vanishes while its claim is prepared: kept, reserved.
        let mut k1 = k.clone();
        let got = k1
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: batches[0][..1].to_vec(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.claims[&uids[0]].error, "");
        fs.remove(&addresses[0]);
        assert_eq!(agent.step().await.unwrap().vanished, 1);
        let inv = get(
            &srv,
            &format!(
                "/resource_providers/{}/inventories",
                provider(&addresses[0])
            ),
        )
        .await;
        let gpu = &inv["inventories"]["CUSTOM_ACCELERATOR_GPU"];
        assert_eq!(gpu["reserved"], gpu["total"], "{inv}");
        assert_eq!(
            held(&consumer(&srv, &uids[0]).await),
            vec![provider(&addresses[0])]
        );
        // Unprepared: the allocation goes, and the next report removes the device.
        k1.node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
            claims: batches[0][..1].to_vec(),
        })
        .await
        .unwrap();
        assert_eq!(agent.step().await.unwrap().removed, 1);
        running.stop().await;
        srv.stop().await;
    }
}

/// Runs the futures at once and answers their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(
    fs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
