//! The kubelet device plugins of `accel agent` against the real server (both
//! backends) and a fake kubelet: a pod's slot becomes a Placement allocation that
//! Nova's candidates no longer offer, usage survives an agent restart, and devices a
//! VM holds (another consumer's allocation, a bound ARQ) are not advertised. A node
//! without Nova (`node_provider = "own"`, issue 30) gets its provider from the agent.
//! A GPU in MIG mode (the fake NVML's H100) offers its MIG devices per profile, and a
//! pod's MIG device is held in the GPU's ledger where it is (issue 45).

mod common;

use accel_agent::config::{NodeProvider, Settings};
use accel_agent::testing::{self, nvidia_gpu, FakeNvml, FakeSysfs};
use accel_agent::{Agent, Node};
use accel_k8s::config::KubernetesConfig;
use accel_k8s::testing as kubelet;
use accel_store::accelerator::kubernetes::pod_consumer;
use common::accel::{
    allocate_gpu, compute_node, delete_allocations, get, placement, workers, Server, TempDb,
};
use common::BACKENDS;
use kubelet::{healthy, ids, wait_list, FakeKubelet};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const NODE: &str = "k8s-node";
const POOL: &str = "accel.dev/gpu";
const GPUS: [&str; 2] = ["0000:17:00.0", "0000:31:00.0"];

fn provider(address: &str) -> String {
    accel_store::accelerator::report::provider_uuid(&format!("{NODE}_{address}"))
}

fn instance(address: &str) -> String {
    format!("gpu-{}", accel_k8s::device::instance_hash(NODE, address))
}

/// Two GPUs bound to vfio-pci (IOMMU groups 40 and 41) and the agent's settings.
fn host(dir: &Path, srv: &Server) -> Settings {
    let fs = FakeSysfs::new(dir.join("sys"));
    assert_eq!(testing::two_gpus(&fs), GPUS);
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\nreclaim_grace_seconds = 2\n\
         [[kubernetes.configurations]]\nname = \"gpu\"\ncapacity = 2\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.join("cdi");
    Settings {
        drivers: Some(vec!["nvidia".into()]),
        kubernetes: Some(kubernetes),
        ..Settings::new(&srv.accel, NODE, &fs.root)
    }
}

/// The node's one agent, built as `accel agent` builds it.
fn agent_of(settings: &Settings) -> Arc<Agent> {
    Node::builder(settings.clone())
        .build()
        .unwrap()
        .agent()
        .clone()
}

/// The compute node, and the agent's first report of the two GPUs.
async fn reported(srv: &Server, settings: &Settings) {
    compute_node(srv, NODE).await;
    let o = agent_of(settings).step().await.unwrap();
    assert_eq!(o.added, 2);
}

/// `accel agent`'s plugins, as the CLI starts them, with short intervals.
struct Plugins {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Plugins {
    fn start(settings: &Settings, kubelet: &FakeKubelet) -> Plugins {
        let node = Node::builder(settings.clone())
            .plugin_options(accel_k8s::Options {
                kubelet_dir: kubelet.dir.clone(),
                pod_resources_socket: kubelet.pod_resources_socket(),
                device_interval: Duration::from_millis(50),
                watch_interval: Duration::from_millis(20),
                reclaim_interval: Duration::from_millis(50),
                ..accel_k8s::Options::new(NODE)
            })
            .build()
            .unwrap();
        let (source, (record, options)) = (node.devices(), node.plugins());
        let config = settings.kubernetes.clone().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(accel_k8s::run_with(
            config,
            source,
            record,
            options,
            async {
                let _ = stopped.await;
            },
        ));
        Plugins { stop, task }
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(kubelet::WAIT, self.task)
            .await
            .expect("plugins stop")
            .unwrap()
            .unwrap();
    }
}

/// Polls until `f` holds (each poll is a request; the wait ends at the event).
async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    common::eventually(kubelet::WAIT, what, || {
        let last = f();
        async move {
            match last.await {
                None => Ok(()),
                Some(last) => Err(last),
            }
        }
    })
    .await
}

async fn candidates(srv: &Server) -> Vec<String> {
    let v = get(
        srv,
        "/allocation_candidates?resources=CUSTOM_ACCELERATOR_GPU:1",
    )
    .await;
    // The providers the candidates take the GPU from.
    let mut out: Vec<String> = v["allocation_requests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["allocations"].as_object().unwrap().keys().cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn a_pods_slot_is_a_placement_allocation_and_survives_an_agent_restart() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let settings = host(dir.path(), &srv);
        reported(&srv, &settings).await;
        let mut all = vec![provider(GPUS[0]), provider(GPUS[1])];
        all.sort();
        assert_eq!(candidates(&srv).await, all);

        let kdir = dir.path().join("kubelet");
        std::fs::create_dir(&kdir).unwrap();
        let kubelet = FakeKubelet::start(&kdir);
        let plugins = Plugins::start(&settings, &kubelet);
        let pool = kubelet.plugin(POOL).await;
        wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1"])).await;
        let resp = pool.allocate(&["0"]).await.unwrap();
        let c = &resp.container_responses[0];
        let address = c.envs["ACCEL_VISIBLE_DEVICES"].clone();
        let i = GPUS
            .iter()
            .position(|g| *g == address)
            .expect("one of the GPUs");
        let group = format!("/dev/vfio/{}", 40 + i);
        let mut nodes: Vec<String> = c.devices.iter().map(|d| d.host_path.clone()).collect();
        nodes.sort();
        let mut want_nodes = vec![group.clone(), "/dev/vfio/vfio".to_string()];
        want_nodes.sort();
        assert_eq!(nodes, want_nodes);
        assert_eq!(
            c.cdi_devices[0].name,
            format!("accel.dev/gpu={}", instance(&address))
        );

        // The CDI spec names the same device, with the same nodes.
        let spec: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("cdi/accel-accel.dev-gpu.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(spec["kind"], "accel.dev/gpu");
        let dev = spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == instance(&address).as_str())
            .expect("the allocated device is in the spec");
        assert_eq!(
            dev["containerEdits"]["deviceNodes"],
            json!([
                {"path": "/dev/vfio/vfio", "hostPath": "/dev/vfio/vfio", "permissions": "rw"},
                {"path": group, "hostPath": group, "permissions": "rw"},
            ])
        );

        // Kubelet lists the pod: its consumer holds the whole device in Placement.
        kubelet.set_pods(vec![(POOL.into(), vec!["0".into()])]);
        let consumer = pod_consumer(NODE, "default/pod");
        let want = json!({provider(&address): {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}});
        until("the pod's allocation", || async {
            let v = get(&srv, &format!("/allocations/{consumer}")).await;
            let got: Value = v["allocations"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, a)| (k.clone(), json!({"resources": a["resources"]})))
                        .collect::<serde_json::Map<_, _>>()
                        .into()
                })
                .unwrap_or(Value::Null);
            (got != want).then(|| v.to_string())
        })
        .await;
        let v = get(&srv, &format!("/allocations/{consumer}")).await;
        assert_eq!(v["consumer_type"], "KUBERNETES_POD");
        // Nova's candidates no longer offer it.
        assert_eq!(candidates(&srv).await, vec![provider(GPUS[1 - i])]);

        // The agent restarts (and kubelet with it): the claim comes back from the server.
        plugins.stop().await;
        let kubelet = kubelet.restart();
        let (s, saved) = srv
            .admin_get(&format!("/v2/agent/hosts/{NODE}/kubernetes"))
            .await;
        assert_eq!(s, 200, "{saved}");
        assert_eq!(
            saved["usage"],
            json!({format!("{}-1", instance(&address)): format!("C:0:{NODE}")})
        );
        let plugins = Plugins::start(&settings, &kubelet);
        kubelet.set_pods(vec![(POOL.into(), vec!["0".into()])]);
        let pool = kubelet.plugin(POOL).await;
        // "0" is held; each device still has a free slot: three ids, not two.
        wait_list(&pool, "pool after restart", |d| {
            ids(d) == healthy(&["0", "1", "2"])
        })
        .await;
        let il = kubelet
            .plugin(&format!("accel.dev/{}", instance(&address)))
            .await;
        let short = instance(&address);
        wait_list(&il, "instance after restart", |d| {
            ids(d)
                == vec![
                    (format!("{short}-0"), "Healthy".into()),
                    (format!("{short}-1"), "Unhealthy".into()),
                ]
        })
        .await;
        let again = pool.allocate(&["0"]).await.unwrap();
        assert_eq!(
            again.container_responses[0].envs["ACCEL_VISIBLE_DEVICES"],
            address
        );
        assert_eq!(candidates(&srv).await, vec![provider(GPUS[1 - i])]);

        // The pod ends: after the grace the slot is freed and so is the device.
        kubelet.set_pods(vec![]);
        until("the device back in the candidates", || async {
            let c = candidates(&srv).await;
            (c != all).then(|| format!("{c:?}"))
        })
        .await;
        let v = get(&srv, &format!("/allocations/{consumer}")).await;
        assert_eq!(v["allocations"], json!({}));
        wait_list(&pool, "pool after the pod", |d| {
            ids(d) == healthy(&["0", "1"])
        })
        .await;
        plugins.stop().await;
        srv.stop().await;
    }
}

#[tokio::test]
async fn a_node_without_nova_owns_its_provider_and_the_plugins_serve_its_devices() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let nova = host(dir.path(), &srv);
        // "nova" (the default) never creates the node's provider.
        assert_eq!(nova.node_provider, NodeProvider::Nova);
        let e = agent_of(&nova).check_node().await;
        assert!(
            matches!(&e, Err(accel_agent::agent::AgentError::NoComputeNode { message, .. }) if message.contains("node_provider = \"own\"")),
            "{e:?}"
        );
        let (s, v) = placement(&srv, reqwest::Method::GET, "/resource_providers", None).await;
        assert_eq!((s, v["resource_providers"].clone()), (200, json!([])));

        let own = Settings {
            node_provider: NodeProvider::Own,
            ..nova
        };
        let agent = agent_of(&own);
        let node = agent.check_node().await.unwrap();
        let uuid = accel_store::accelerator::report::provider_uuid(NODE);
        assert_eq!(node.compute_node_uuid, uuid);
        assert_eq!(agent.step().await.unwrap().added, 2);
        // Asked again (an agent restart): the same provider, now with its devices.
        let again = agent_of(&own).check_node().await.unwrap();
        assert_eq!(
            (again.compute_node_uuid.as_str(), again.devices),
            (uuid.as_str(), 2)
        );
        let rp = get(&srv, &format!("/resource_providers/{uuid}")).await;
        assert_eq!(rp["name"], NODE);
        assert_eq!(rp["root_provider_uuid"], uuid.as_str());
        let traits = get(&srv, &format!("/resource_providers/{uuid}/traits")).await;
        assert_eq!(traits["traits"], json!(["CUSTOM_OWNER_ACCEL"]));
        for g in GPUS {
            let d = get(&srv, &format!("/resource_providers/{}", provider(g))).await;
            assert_eq!(d["parent_provider_uuid"], uuid.as_str(), "{d}");
        }
        let mut all = vec![provider(GPUS[0]), provider(GPUS[1])];
        all.sort();
        assert_eq!(candidates(&srv).await, all);

        // The device plugins serve the devices; a pod's slot is a Placement allocation.
        let kdir = dir.path().join("kubelet");
        std::fs::create_dir(&kdir).unwrap();
        let kubelet = FakeKubelet::start(&kdir);
        let plugins = Plugins::start(&own, &kubelet);
        let pool = kubelet.plugin(POOL).await;
        wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1"])).await;
        let resp = pool.allocate(&["0"]).await.unwrap();
        let address = resp.container_responses[0].envs["ACCEL_VISIBLE_DEVICES"].clone();
        kubelet.set_pods(vec![(POOL.into(), vec!["0".into()])]);
        let consumer = pod_consumer(NODE, "default/pod");
        until("the pod's allocation", || async {
            let v = get(&srv, &format!("/allocations/{consumer}")).await;
            let held = v["allocations"]
                .as_object()
                .is_some_and(|m| m.contains_key(&provider(&address)));
            (!held).then(|| v.to_string())
        })
        .await;
        let i = GPUS.iter().position(|g| *g == address).unwrap();
        assert_eq!(candidates(&srv).await, vec![provider(GPUS[1 - i])]);
        plugins.stop().await;

        // A provider of the node's name that accel does not own is never adopted.
        let (s, _) = placement(
            &srv,
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"name": "nova-node"})),
        )
        .await;
        assert_eq!(s, 200);
        let other = Settings {
            node: "nova-node".into(),
            ..own
        };
        let e = agent_of(&other).check_node().await.unwrap_err();
        assert!(e.to_string().contains("accel does not own it"), "{e}");
        srv.stop().await;
    }
}

#[tokio::test]
async fn devices_vms_hold_are_not_advertised() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, Some(workers(None))).await;
        let dir = tempfile::tempdir().unwrap();
        let settings = host(dir.path(), &srv);
        reported(&srv, &settings).await;

        // A VM's allocation on the second GPU (Nova scheduled it).
        let vm = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        allocate_gpu(&srv, vm, &provider(GPUS[1])).await;

        let kdir = dir.path().join("kubelet");
        std::fs::create_dir(&kdir).unwrap();
        let kubelet = FakeKubelet::start(&kdir);
        let plugins = Plugins::start(&settings, &kubelet);
        let pool = kubelet.plugin(POOL).await;
        wait_list(&pool, "pool without the VM's GPU", |d| {
            ids(d) == healthy(&["0"])
        })
        .await;
        let taken = kubelet
            .plugin(&format!("accel.dev/{}", instance(GPUS[1])))
            .await;
        wait_list(&taken, "the VM's GPU", |d| {
            d.len() == 2 && d.iter().all(|x| x.health == "Unhealthy")
        })
        .await;
        let refused = taken
            .allocate(&[&format!("{}-0", instance(GPUS[1]))])
            .await
            .unwrap_err();
        assert!(refused.message().contains("virtual machine"), "{refused:?}");

        // An ARQ bound to the first GPU: nothing is left to offer.
        srv.create_profile("gpu", json!([{"resources:CUSTOM_ACCELERATOR_GPU": "1"}]))
            .await;
        let arqs = srv.create_arqs("gpu").await;
        let inst = "1b3c5d7e-0000-4000-8000-000000000001";
        srv.bind(&arqs, NODE, &provider(GPUS[0]), inst).await;
        let resolved = srv.wait_resolved(inst).await;
        assert_eq!(resolved[0]["state"], "Bound", "{resolved:?}");
        wait_list(&pool, "pool with both GPUs taken", |d| d.is_empty()).await;
        let bound = kubelet
            .plugin(&format!("accel.dev/{}", instance(GPUS[0])))
            .await;
        wait_list(&bound, "the ARQ's GPU", |d| {
            d.len() == 2 && d.iter().all(|x| x.health == "Unhealthy")
        })
        .await;
        let (_, saved) = srv
            .admin_get(&format!("/v2/agent/hosts/{NODE}/kubernetes"))
            .await;
        assert_eq!(saved["vm_held_devices"], json!(GPUS));

        // The VM on the second GPU goes: it is offered again.
        delete_allocations(&srv, vm).await;
        wait_list(&pool, "pool after the VM", |d| ids(d) == healthy(&["0"])).await;
        wait_list(&taken, "the freed GPU", |d| {
            d.iter().all(|x| x.health == "Healthy")
        })
        .await;
        plugins.stop().await;
        srv.stop().await;
    }
}

#[tokio::test]
async fn bad_usage_is_refused_whole() {
    let db = TempDb::fresh(common::Backend::Sqlite).await;
    let srv = Server::start(&db.url, Some(NODE), None).await;
    let put = |body: Value| {
        let url = format!("{}/v2/agent/hosts/{NODE}/kubernetes", srv.accel);
        async move {
            let r = reqwest::Client::new()
                .put(url)
                .header("x-auth-token", "admin")
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (s, t) = put(json!({"usage": {"gpu-1-0": "C:x:n"}})).await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("virtual id"), "{t}");
    let (s, t) =
        put(json!({"usage": {"gpu-1-0": ""}, "claims": [{"slot": "gpu-1-0", "device": "d"}]}))
            .await;
    assert_eq!(s, 400, "{t}");
    let (s, t) = put(json!({"usage": {"gpu-1-0": NODE}})).await;
    assert_eq!(s, 200, "{t}");
    let (_, saved) = srv
        .admin_get(&format!("/v2/agent/hosts/{NODE}/kubernetes"))
        .await;
    assert_eq!(saved["usage"], json!({"gpu-1-0": NODE}));
    let (s, t) = put(json!({"usage": {}})).await;
    assert_eq!(s, 200, "{t}");
    let (s, _) = srv.admin_get("/v2/agent/hosts/nowhere/kubernetes").await;
    assert_eq!(s, 200);
    let r = reqwest::Client::new()
        .put(format!("{}/v2/agent/hosts/nowhere/kubernetes", srv.accel))
        .header("x-auth-token", "admin")
        .json(&json!({"usage": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    srv.stop().await;
}

const H100: &str = "0000:3b:00.0";
const OTHER: &str = "0000:5e:00.0";

/// An H100 of the fake NVML in MIG mode and an L4 (no MIG), and the agent's
/// settings (device-plugin mode).
fn mig_host(dir: &Path, srv: &Server) -> (Settings, FakeNvml) {
    let fs = FakeSysfs::new(dir.join("sys"));
    nvidia_gpu(&fs, H100, 0x2330).numa(0);
    nvidia_gpu(&fs, OTHER, 0x27b8).numa(0);
    let nvml = FakeNvml::new(
        &dir.join("nvml"),
        &format!("gpu bus={H100} model=h100 mig=on\ngpu bus={OTHER} model=l4\n"),
    );
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\nreclaim_grace_seconds = 2\n\
         [[kubernetes.configurations]]\nname = \"gpu\"\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.join("cdi");
    let mut settings = Settings {
        drivers: Some(vec!["nvidia".into()]),
        kubernetes: Some(kubernetes),
        ..Settings::new(&srv.accel, NODE, &fs.root)
    };
    settings.driver.nvml = true;
    settings.driver.nvml_library = nvml.library.clone();
    settings.partitions = nvml.partition_settings();
    (settings, nvml)
}

/// The holders of the H100's ledger: (consumer, what it holds).
async fn holders(srv: &Server) -> Vec<(String, String)> {
    common::gpus::holders(srv, &provider(H100)).await
}

#[tokio::test]
async fn mig_devices_are_offered_per_profile_and_a_pods_is_held_in_the_gpus_ledger() {
    const VM: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
    const VM2: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae8";
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let dir = tempfile::tempdir().unwrap();
        let (settings, _nvml) = mig_host(dir.path(), &srv);
        compute_node(&srv, NODE).await;
        // The operator's layout on the H100: two 1g.10gb (profile 19) and a 2g.20gb
        // (profile 14), made through NVML, then reported.
        let agent = agent_of(&settings);
        let mut made = Vec::new();
        for (profile, start, size) in [(19, 6, 1), (19, 5, 1), (14, 0, 2)] {
            let m = agent
                .partitions()
                .create(
                    H100.parse().unwrap(),
                    profile,
                    accel_api::partitions::MigPlacement { start, size },
                    "operator",
                )
                .unwrap();
            made.push(m.uuid);
        }
        assert_eq!(agent.step().await.unwrap().added, 2);
        // A VM holds the other H100 whole.
        allocate_gpu(&srv, VM, &provider(OTHER)).await;

        let kdir = dir.path().join("kubelet");
        std::fs::create_dir(&kdir).unwrap();
        let kubelet = FakeKubelet::start(&kdir);
        let plugins = Plugins::start(&settings, &kubelet);
        let one_g = kubelet.plugin("accel.dev/mig-1g.10gb").await;
        let mut want_1g = vec![
            (made[0].clone(), "Healthy".to_string()),
            (made[1].clone(), "Healthy".to_string()),
        ];
        want_1g.sort();
        wait_list(&one_g, "the 1g.10gb devices", |d| ids(d) == want_1g).await;
        let two_g = kubelet.plugin("accel.dev/mig-2g.20gb").await;
        wait_list(&two_g, "the 2g.20gb device", |d| {
            ids(d) == vec![(made[2].clone(), "Healthy".to_string())]
        })
        .await;
        assert!(!kubelet
            .registered()
            .iter()
            .any(|r| r.starts_with("accel.dev/mig-3g")));
        // Neither H100 whole: one is cut into MIG devices, the VM holds the other.
        let pool = kubelet.plugin(POOL).await;
        wait_list(&pool, "no GPU whole", |d| d.is_empty()).await;

        // A pod gets the 1g.10gb at slice 5: its UUID, as NVIDIA's toolkit reads it.
        let resp = one_g.allocate(&[&made[1]]).await.unwrap();
        let c = &resp.container_responses[0];
        assert_eq!(c.envs["NVIDIA_VISIBLE_DEVICES"], made[1]);
        assert_eq!(c.envs["ACCEL_VISIBLE_DEVICES"], made[1]);
        assert!(c.cdi_devices.is_empty());
        kubelet.set_pods(vec![(
            "accel.dev/mig-1g.10gb".into(),
            vec![made[1].clone()],
        )]);
        let consumer = pod_consumer(NODE, "default/pod");
        let held_at_5 = vec![(
            consumer.clone(),
            "Mig { profile: 19, at: Span { start: 5, size: 1 } }".to_string(),
        )];
        until("the pod's MIG device in the ledger", || async {
            let h = holders(&srv).await;
            (h != held_at_5).then(|| format!("{h:?}"))
        })
        .await;
        let member =
            accel_store::accelerator::report::provider_uuid(&format!("{NODE}_{H100}_mig_1g.10gb"));
        until("the pod's allocation on the profile's provider", || async {
            let v = get(&srv, &format!("/allocations/{consumer}")).await;
            let r = &v["allocations"][&member]["resources"]["CUSTOM_MIG_1G_10GB"];
            (*r != json!(1)).then(|| v.to_string())
        })
        .await;
        let v = get(&srv, &format!("/allocations/{consumer}")).await;
        assert_eq!(v["consumer_type"], "KUBERNETES_POD");
        assert_eq!(v["allocations"].as_object().unwrap().len(), 1, "{v}");
        // Placement offers neither H100 whole; the VM keeps the other.
        assert_eq!(candidates(&srv).await, Vec::<String>::new());
        let vm = get(&srv, &format!("/allocations/{VM}")).await;
        assert_eq!(
            vm["allocations"][provider(OTHER)]["resources"]["CUSTOM_ACCELERATOR_GPU"],
            1,
            "{vm}"
        );
        // The other 1g.10gb stays offered; the pod's is its own.
        wait_list(&one_g, "after the grant", |d| {
            d.iter().all(|x| x.health == "Healthy")
        })
        .await;

        // A VM's 2g.20gb on the H100 adopts the operator's 2g instance: the plugin
        // withdraws it, and an Allocate of it is refused.
        let member_2g =
            accel_store::accelerator::report::provider_uuid(&format!("{NODE}_{H100}_mig_2g.20gb"));
        let (s, v) = placement(
            &srv,
            reqwest::Method::PUT,
            &format!("/allocations/{VM2}"),
            Some(json!({
                "allocations": {member_2g: {"resources": {"CUSTOM_MIG_2G_20GB": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
                "consumer_type": "INSTANCE",
            })),
        )
        .await;
        assert_eq!(s, 204, "{v}");
        assert!(holders(&srv).await.contains(&(
            VM2.to_string(),
            "Mig { profile: 14, at: Span { start: 0, size: 2 } }".to_string()
        )));
        wait_list(&two_g, "the VM's 2g.20gb withdrawn", |d| {
            ids(d) == vec![(made[2].clone(), "Unhealthy".to_string())]
        })
        .await;
        let refused = two_g.allocate(&[&made[2]]).await.unwrap_err();
        assert!(refused.message().contains(&made[2]), "{refused:?}");
        let (_, shown) = srv
            .admin_get(&format!("/v2/agent/hosts/{NODE}/kubernetes"))
            .await;
        assert_eq!(
            shown["held_partitions"],
            json!([{"device": H100, "profile_id": 14, "start": 0}]),
            "{shown}"
        );

        // The pod ends: after the grace its MIG device is freed, and so is its holder.
        kubelet.set_pods(vec![]);
        until("the pod's holder gone", || async {
            let h = holders(&srv).await;
            h.iter()
                .any(|(c, _)| *c == consumer)
                .then(|| format!("{h:?}"))
        })
        .await;
        let v = get(&srv, &format!("/allocations/{consumer}")).await;
        assert_eq!(v["allocations"], json!({}));
        wait_list(&one_g, "both 1g.10gb offered again", |d| ids(d) == want_1g).await;
        let vm = get(&srv, &format!("/allocations/{VM}")).await;
        assert_eq!(
            vm["allocations"][provider(OTHER)]["resources"]["CUSTOM_ACCELERATOR_GPU"],
            1
        );
        plugins.stop().await;

        // A save naming both (an agent that had not heard of the VM yet): the 2g.20gb
        // the VM holds is refused alone and answered held; the 1g.10gb is held.
        let late = pod_consumer(NODE, "default/late");
        let slot = |u: &str| accel_k8s::slots::mig_slot(u);
        let body = json!({
            "usage": {slot(&made[0]): NODE, slot(&made[2]): NODE},
            "claims": [
                {"slot": slot(&made[0]), "device": H100, "pod": "default/late"},
                {"slot": slot(&made[2]), "device": H100, "pod": "default/late"},
            ],
            "partitions": [
                {"slot": slot(&made[0]), "profile_id": 19, "start": 6},
                {"slot": slot(&made[2]), "profile_id": 14, "start": 0},
            ],
        });
        let r = reqwest::Client::new()
            .put(format!("{}/v2/agent/hosts/{NODE}/kubernetes", srv.accel))
            .header("x-auth-token", "admin")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let saved: Value = r.json().await.unwrap();
        assert_eq!(
            saved["held_partitions"],
            json!([{"device": H100, "profile_id": 14, "start": 0}]),
            "{saved}"
        );
        let v = get(&srv, &format!("/allocations/{late}")).await;
        assert_eq!(
            v["allocations"][&member]["resources"]["CUSTOM_MIG_1G_10GB"], 1,
            "{v}"
        );
        assert_eq!(v["allocations"].as_object().unwrap().len(), 1, "{v}");
        let h = holders(&srv).await;
        assert!(h.contains(&(
            late.clone(),
            "Mig { profile: 19, at: Span { start: 6, size: 1 } }".to_string()
        )));
        assert!(h.contains(&(
            VM2.to_string(),
            "Mig { profile: 14, at: Span { start: 0, size: 2 } }".to_string()
        )));
        srv.stop().await;
    }
}
