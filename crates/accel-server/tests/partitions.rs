//! A GPU reported with its MIG geometry (issue 45) through the agent endpoint of the
//! real server: each profile becomes a provider under the GPU's, and the candidate
//! index offers exactly what the ledger can still create as claims and releases come
//! and go (the index learns of every sibling's new capacity through the change log).

mod common;

use accel_api::partitions::{GpuPartitions, MigPlacement};
use accel_core::partition::{fixtures, Geometry};
use common::accel::{
    compute_node, delete_allocations, get, placement, workers, FakeNova, Server, TempDb,
};
use common::BACKENDS;
use serde_json::{json, Value};

const NODE: &str = "gn1";
const POD_A: &str = "a0000000-0000-4000-8000-000000000001";
const POD_B: &str = "b0000000-0000-4000-8000-000000000002";
const POD_C: &str = "c0000000-0000-4000-8000-000000000003";

fn wire(g: &Geometry) -> GpuPartitions {
    GpuPartitions::from_geometry(g)
}

fn gpu_name() -> String {
    format!("{NODE}_0000:3b:00.0")
}

async fn report(srv: &Server, partitions: Value) -> (u16, Value) {
    report_gpus(srv, &[("3b", partitions)]).await
}

/// Reports H100s at `0000:<bus>:00.0`, each with its partitions.
async fn report_gpus(srv: &Server, gpus: &[(&str, Value)]) -> (u16, Value) {
    let devices: Vec<Value> = gpus.iter().map(|(bus, partitions)| json!({
        "type": "GPU", "vendor": "10de", "model": "H100",
        "controlpath_id": {"cpid_type": "PCI",
            "cpid_info": format!("{{\"domain\":\"0000\",\"bus\":\"{bus}\",\"device\":\"00\",\"function\":\"0\"}}")},
        "deployables": [{"name": format!("{NODE}_0000:{bus}:00.0"), "num_accelerators": 1, "driver_name": "nvidia",
            "attributes": [{"key": "rc", "value": "CUSTOM_ACCELERATOR_GPU"},
                           {"key": "inventory:CUSTOM_ACCELERATOR_MEMORY_HBM", "value": "81559"},
                           {"key": "trait0", "value": "CUSTOM_GPU_NVIDIA"}],
            "attach_handles": [{"attach_type": "PCI", "attach_info":
                format!("{{\"bus\": \"{bus}\", \"device\": \"00\", \"domain\": \"0000\", \"function\": \"0\"}}")}]}],
        "partitions": partitions,
    })).collect();
    let r = reqwest::Client::new()
        .put(format!("{}/v2/agent/hosts/{NODE}/devices", srv.accel))
        .header("x-auth-token", "admin")
        .json(&json!({"devices": devices}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The providers the candidates offer for one unit of `class`, with what each has free.
async fn offered(srv: &Server, class: &str) -> Vec<(String, i64)> {
    let v = get(srv, &format!("/allocation_candidates?resources={class}:1")).await;
    let mut out: Vec<(String, i64)> = v["allocation_requests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["allocations"].as_object().unwrap().keys().cloned())
        .map(|u| {
            let r = &v["provider_summaries"][&u]["resources"][class];
            let free = r["capacity"].as_i64().unwrap() - r["used"].as_i64().unwrap();
            (u, free)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

async fn claim(srv: &Server, consumer: &str, class: &str) -> u16 {
    let rp =
        accel_store::accelerator::report::provider_uuid(&format!("{}_mig_{}", gpu_name(), class));
    let cls = format!(
        "CUSTOM_MIG_{}",
        class.to_ascii_uppercase().replace(['.', '+'], "_")
    );
    let (s, v) = placement(
        srv,
        reqwest::Method::PUT,
        &format!("/allocations/{consumer}"),
        Some(json!({
            "allocations": {rp: {"resources": {cls: 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": null,
            "consumer_type": "INSTANCE",
        })),
    )
    .await;
    assert!(s == 204 || s == 409, "{s}: {v}");
    s
}

#[tokio::test]
async fn candidates_offer_what_the_ledger_can_still_create() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        compute_node(&srv, NODE).await;
        let (s, v) = report(&srv, json!(wire(&fixtures::h100_80gb()))).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(offered(&srv, "CUSTOM_MIG_3G_40GB").await.len(), 1);
        assert_eq!(offered(&srv, "CUSTOM_MIG_3G_40GB").await[0].1, 2);
        assert_eq!(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await.len(), 1);

        // A 3g (placed at 4) leaves the 4g at 0; then the GPU is full.
        assert_eq!(claim(&srv, POD_A, "3g.40gb").await, 204);
        assert!(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await.is_empty());
        assert_eq!(offered(&srv, "CUSTOM_MIG_4G_40GB").await.len(), 1);
        assert_eq!(offered(&srv, "CUSTOM_MIG_1G_10GB").await[0].1, 4);
        assert_eq!(claim(&srv, POD_B, "4g.40gb").await, 204);
        for class in [
            "CUSTOM_MIG_1G_10GB",
            "CUSTOM_MIG_3G_40GB",
            "CUSTOM_MIG_7G_80GB",
        ] {
            assert!(offered(&srv, class).await.is_empty(), "{class}");
        }
        assert_eq!(claim(&srv, POD_C, "1g.10gb").await, 409);

        // Two partitions of one GPU in one request: offered only when the ledger can
        // hold them together.
        let joint = |q: &str| format!("/allocation_candidates?{q}&group_policy=none");
        let q = "resources1=CUSTOM_MIG_1G_10GB:1&resources2=CUSTOM_MIG_2G_20GB:1";
        let v = get(&srv, &joint(q)).await;
        assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 0, "{v}");
        delete_allocations(&srv, POD_B).await;
        let q = "resources1=CUSTOM_MIG_1G_10GB:1&resources2=CUSTOM_MIG_2G_20GB:1\
                 &resources3=CUSTOM_MIG_1G_20GB:1";
        let v = get(&srv, &joint(&q.replace(' ', ""))).await;
        assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 0, "{v}");
        let q = "resources1=CUSTOM_MIG_1G_10GB:1&resources2=CUSTOM_MIG_2G_20GB:1";
        let v = get(&srv, &joint(q)).await;
        assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 1, "{v}");

        // Releases give everything back, the whole GPU included.
        delete_allocations(&srv, POD_A).await;
        assert_eq!(offered(&srv, "CUSTOM_MIG_1G_10GB").await[0].1, 7);
        assert_eq!(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await.len(), 1);

        // A geometry that cannot be a ledger is refused whole.
        let mut bad = wire(&fixtures::h100_80gb());
        bad.profiles[0]
            .placements
            .push(MigPlacement { start: 7, size: 2 });
        let (s, v) = report(&srv, json!(bad)).await;
        assert_eq!(s, 400, "{v}");
        srv.stop().await;
    }
}

/// A small reproducible generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// Random claims of what the candidate index offers, and releases, through the real
/// server: every candidate offered is claimed successfully, and the index offers a
/// partition exactly when the ledger (read from the store) can still create it, so
/// the index learns every sibling's new capacity from the change log.
#[tokio::test]
async fn every_offered_candidate_is_held_and_nothing_else_is_offered() {
    let seed = std::env::var("ACCEL_LEDGER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(45, |d| d.as_nanos() as u64)
        });
    eprintln!("ledger candidates seed: {seed} (ACCEL_LEDGER_SEED={seed} replays it)");
    let g = fixtures::h100_80gb();
    let classes: Vec<(String, accel_core::partition::Member)> = accel_core::partition::members(&g)
        .into_iter()
        .map(|m| {
            let class = m
                .resource_class(&g)
                .unwrap_or_else(|| "CUSTOM_ACCELERATOR_GPU".into());
            (class, m)
        })
        .collect();
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        compute_node(&srv, NODE).await;
        let (s, v) = report(&srv, json!(wire(&g))).await;
        assert_eq!(s, 200, "{v}");
        let gpu = accel_store::accelerator::report::provider_uuid(&gpu_name());
        let mut rng = Rng(seed);
        let mut held: Vec<String> = Vec::new();
        let mut claimed = 0;
        for step in 0..60 {
            let ctx = format!("seed {seed}, {backend:?}, step {step}");
            if !held.is_empty() && rng.below(3) == 0 {
                let c = held.remove(rng.below(held.len()));
                delete_allocations(&srv, &c).await;
                continue;
            }
            let (class, member) = &classes[rng.below(classes.len())];
            let offers = offered(&srv, class).await;
            let ledger = srv.store.partitions().ledger(&gpu).await.unwrap().unwrap();
            let can = ledger.geometry.count(&ledger.held(), &member.want()) as i64;
            assert_eq!(
                offers.iter().map(|(_, n)| *n).sum::<i64>(),
                can,
                "{ctx}: {class}"
            );
            let Some((rp, _)) = offers.first() else {
                continue;
            };
            let consumer = uuid::Uuid::new_v4().to_string();
            let (s, v) = placement(
                &srv,
                reqwest::Method::PUT,
                &format!("/allocations/{consumer}"),
                Some(json!({
                    "allocations": {rp: {"resources": {class.as_str(): 1}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null,
                    "consumer_type": "INSTANCE",
                })),
            )
            .await;
            assert_eq!(s, 204, "{ctx}: the offered {class} on {rp}: {v}");
            held.push(consumer);
            claimed += 1;
        }
        assert!(claimed > 5, "seed {seed}: only {claimed} claims");
        srv.stop().await;
    }
}

/// Nova's workflow for a VM with a vGPU of a partitioned GPU: the flavor's device
/// profile asks `VGPU` with the type's trait, Placement's claim takes the ledger's
/// holder, and the bind hands out one of the type's MDEV handles in Cyborg's form.
#[tokio::test]
async fn a_vm_binds_a_vgpu_type_of_the_ledger() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let nova = FakeNova::start(true).await;
        let srv = Server::start(&db.url, None, Some(workers(Some(&nova)))).await;
        compute_node(&srv, NODE).await;
        let g = fixtures::with_vgpu(fixtures::h100_80gb(), false);
        let (s, v) = report(&srv, json!(wire(&g))).await;
        assert_eq!(s, 200, "{v}");
        srv.create_profile(
            "vgpu-10c",
            json!([{"resources:VGPU": "1", "trait:CUSTOM_VGPU_TYPE_NVIDIA_1001": "required"}]),
        )
        .await;
        let arqs = srv.create_arqs("vgpu-10c").await;
        let offers = offered(&srv, "VGPU").await;
        assert_eq!(
            offers.len(),
            1,
            "the MIG-backed type is not offered with MIG off"
        );
        let rp = offers[0].0.clone();
        let (s, v) = placement(
            &srv,
            reqwest::Method::PUT,
            &format!("/allocations/{POD_A}"),
            Some(json!({
                "allocations": {rp.clone(): {"resources": {"VGPU": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
                "consumer_type": "INSTANCE",
            })),
        )
        .await;
        assert_eq!(s, 204, "{v}");
        srv.bind(&arqs, NODE, &rp, POD_A).await;
        let bound = srv.wait_resolved(POD_A).await;
        assert_eq!(bound[0]["state"], "Bound", "{bound:?}");
        assert_eq!(bound[0]["attach_handle_type"], "MDEV");
        let info = &bound[0]["attach_handle_info"];
        assert_eq!(info["asked_type"], "nvidia-1001", "{info}");
        assert_eq!(info["bus"], "3b", "{info}");
        let gpu = accel_store::accelerator::report::provider_uuid(&gpu_name());
        let l = srv.store.partitions().ledger(&gpu).await.unwrap().unwrap();
        assert_eq!(l.holders.len(), 1);
        assert_eq!(l.holders[0].consumer, POD_A);
        // The whole GPU is not offered beside the vGPU.
        assert!(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await.is_empty());
        srv.stop().await;
    }
}

/// `PUT /v2/agent/hosts/{NODE}/kubernetes/claims/{uid}` as the node's DRA driver sends
/// it: (status, body).
async fn dra_claim(srv: &Server, uid: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .put(format!(
            "{}/v2/agent/hosts/{NODE}/kubernetes/claims/{uid}",
            srv.accel
        ))
        .header("x-auth-token", "admin")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn mig(bus: &str, profile_id: u32, start: u32) -> Value {
    json!({"device": format!("0000:{bus}:00.0"), "profile_id": profile_id, "start": start})
}

/// What the ledger of the GPU at `bus` holds: (consumer, profile or form, start).
async fn holders(srv: &Server, bus: &str) -> Vec<(String, String)> {
    let gpu = accel_store::accelerator::report::provider_uuid(&format!("{NODE}_0000:{bus}:00.0"));
    common::gpus::holders(srv, &gpu).await
}

/// Issue 45: a pod's MIG device, placed by the Kubernetes scheduler, is held in the
/// GPU's ledger at exactly that placement, so a VM is never offered (nor can claim) the
/// GPU whose slices pods hold, and a pod is refused slices a VM or another pod holds.
#[tokio::test]
async fn a_pods_mig_claim_is_held_in_the_ledger_where_the_scheduler_placed_it() {
    const CLAIM_A: &str = "d0000000-0000-4000-8000-00000000000a";
    const CLAIM_B: &str = "d0000000-0000-4000-8000-00000000000b";
    const CLAIM_C: &str = "d0000000-0000-4000-8000-00000000000c";
    const VM: &str = "e0000000-0000-4000-8000-0000000000e1";
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        compute_node(&srv, NODE).await;
        let g = json!(wire(&fixtures::h100_80gb()));
        let (s, v) = report_gpus(&srv, &[("3b", g.clone()), ("5e", g)]).await;
        assert_eq!(s, 200, "{v}");
        let gpu_a =
            accel_store::accelerator::report::provider_uuid(&format!("{NODE}_0000:3b:00.0"));
        let gpu_b =
            accel_store::accelerator::report::provider_uuid(&format!("{NODE}_0000:5e:00.0"));
        let mut both = vec![gpu_a.clone(), gpu_b.clone()];
        both.sort();
        let whole = |o: Vec<(String, i64)>| o.into_iter().map(|(u, _)| u).collect::<Vec<_>>();
        assert_eq!(whole(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await), both);

        // Two 1g.10gb (profile 19) at slices 0 and 1 of GPU A, where the scheduler put
        // them (the ledger itself would have started at slice 6).
        let (s, v) = dra_claim(
            &srv,
            CLAIM_A,
            json!({"devices": [], "partitions": [mig("3b", 19, 0), mig("3b", 19, 1)]}),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["changed"], true, "{v}");
        assert_eq!(v["partitions"].as_array().unwrap().len(), 2, "{v}");
        let held = holders(&srv, "3b").await;
        assert_eq!(held.len(), 2, "{held:?}");
        assert!(held.iter().all(|(c, _)| c == CLAIM_A), "{held:?}");
        assert!(held.iter().any(|(_, h)| h.contains("start: 0")), "{held:?}");
        assert!(held.iter().any(|(_, h)| h.contains("start: 1")), "{held:?}");
        // A replay changes nothing.
        let (s, v) = dra_claim(
            &srv,
            CLAIM_A,
            json!({"devices": [], "partitions": [mig("3b", 19, 1), mig("3b", 19, 0)]}),
        )
        .await;
        assert_eq!((s, &v["changed"]), (200, &json!(false)), "{v}");

        // Nova's scheduler is offered GPU B only, and a VM's claim on GPU A is refused.
        assert_eq!(
            whole(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await),
            vec![gpu_b.clone()]
        );
        let vm_claim = |rp: String| {
            let srv = &srv;
            async move {
                placement(
                    srv,
                    reqwest::Method::PUT,
                    &format!("/allocations/{VM}"),
                    Some(json!({
                        "allocations": {rp: {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}},
                        "project_id": "p", "user_id": "u", "consumer_generation": null,
                        "consumer_type": "INSTANCE",
                    })),
                )
                .await
            }
        };
        let (s, v) = vm_claim(gpu_a.clone()).await;
        assert_eq!(s, 409, "{v}");
        // Five 1g.10gb are left on GPU A for the next pods.
        let left: Vec<(String, i64)> = offered(&srv, "CUSTOM_MIG_1G_10GB").await;
        let mig_a = accel_store::accelerator::report::provider_uuid(&format!(
            "{NODE}_0000:3b:00.0_mig_1g.10gb"
        ));
        assert!(left.contains(&(mig_a.clone(), 5)), "{left:?}");

        // Another pod's 2g.20gb (profile 14) over slice 0..1 is refused, naming a pod;
        // at slices 2..3 it is held.
        let (s, v) = dra_claim(
            &srv,
            CLAIM_B,
            json!({"devices": [], "partitions": [mig("3b", 14, 0)]}),
        )
        .await;
        assert_eq!(s, 409, "{v}");
        let words = v.to_string();
        assert!(
            words.contains(
                "MIG 2g.20gb at memory slice 0 of device 0000:3b:00.0 is held by another pod"
            ),
            "{words}"
        );
        let (s, v) = dra_claim(
            &srv,
            CLAIM_B,
            json!({"devices": [], "partitions": [mig("3b", 14, 2)]}),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        // A placement the profile does not have, and a GPU without a ledger's profile.
        let (s, v) = dra_claim(
            &srv,
            CLAIM_C,
            json!({"devices": [], "partitions": [mig("3b", 14, 3)]}),
        )
        .await;
        assert_eq!(s, 409, "{v}");
        assert!(
            v.to_string().contains("cannot start at memory slice 3"),
            "{v}"
        );
        let (s, v) = dra_claim(
            &srv,
            CLAIM_C,
            json!({"devices": [], "partitions": [mig("3b", 77, 0)]}),
        )
        .await;
        assert_eq!(s, 409, "{v}");
        assert!(v.to_string().contains("has no MIG profile 77"), "{v}");

        // A VM takes GPU B whole: a pod's slice of it is refused, naming a VM.
        let (s, v) = vm_claim(gpu_b.clone()).await;
        assert_eq!(s, 204, "{v}");
        let (s, v) = dra_claim(
            &srv,
            CLAIM_C,
            json!({"devices": [], "partitions": [mig("5e", 19, 6)]}),
        )
        .await;
        assert_eq!(s, 409, "{v}");
        assert!(
            v.to_string()
                .contains("is held by a virtual machine (the whole GPU is held)"),
            "{v}"
        );
        assert!(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await.is_empty());
        assert!(holders(&srv, "5e").await.iter().all(|(c, _)| c == VM));

        // The pods' claims unprepared: GPU A is whole again, for the VM's next claim.
        delete_allocations(&srv, VM).await;
        for uid in [CLAIM_A, CLAIM_B] {
            let r = reqwest::Client::new()
                .delete(format!(
                    "{}/v2/agent/hosts/{NODE}/kubernetes/claims/{uid}",
                    srv.accel
                ))
                .header("x-auth-token", "admin")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 204);
        }
        assert!(holders(&srv, "3b").await.is_empty());
        assert_eq!(whole(offered(&srv, "CUSTOM_ACCELERATOR_GPU").await), both);

        // A pod's claim of a partitioned GPU given whole takes the GPU's own provider
        // only (not its profiles'), and the ledger then offers none of its slices.
        let (s, v) = dra_claim(&srv, CLAIM_C, json!({"devices": ["0000:3b:00.0"]})).await;
        assert_eq!(s, 200, "{v}");
        let held = holders(&srv, "3b").await;
        assert_eq!(held, vec![(CLAIM_C.to_owned(), "Whole".to_owned())]);
        assert!(!offered(&srv, "CUSTOM_MIG_1G_10GB")
            .await
            .iter()
            .any(|(u, _)| *u == mig_a));
        srv.stop().await;
    }
}

/// A VM given a partitioned GPU whole (the VFIO form) is bound: the ledger reserves the
/// GPU's other inventories (its memory) in full while the VM holds it, which must not
/// read as a withheld device at the bind.
#[tokio::test]
async fn a_vm_binds_a_partitioned_gpu_whole() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let nova = FakeNova::start(true).await;
        let srv = Server::start(&db.url, None, Some(workers(Some(&nova)))).await;
        compute_node(&srv, NODE).await;
        let (s, v) = report(&srv, json!(wire(&fixtures::h100_80gb()))).await;
        assert_eq!(s, 200, "{v}");
        srv.create_profile("h100", json!([{"resources:CUSTOM_ACCELERATOR_GPU": "1"}]))
            .await;
        let arqs = srv.create_arqs("h100").await;
        let gpu = accel_store::accelerator::report::provider_uuid(&gpu_name());
        let (s, v) = placement(
            &srv,
            reqwest::Method::PUT,
            &format!("/allocations/{POD_A}"),
            Some(json!({
                "allocations": {gpu.clone(): {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
                "consumer_type": "INSTANCE",
            })),
        )
        .await;
        assert_eq!(s, 204, "{v}");
        srv.bind(&arqs, NODE, &gpu, POD_A).await;
        let bound = srv.wait_resolved(POD_A).await;
        assert_eq!(bound[0]["state"], "Bound", "{bound:?}");
        assert_eq!(bound[0]["attach_handle_type"], "PCI");
        let l = srv.store.partitions().ledger(&gpu).await.unwrap().unwrap();
        assert_eq!(format!("{:?}", l.holders[0].holder), "Vfio");
        srv.stop().await;
    }
}

/// A MIG-capable GPU with MIG off (NVML describes no profiles, 0 memory slices) is
/// reported and handed out whole; its report used to be refused.
#[tokio::test]
async fn a_gpu_with_mig_off_is_reported_and_offered_whole() {
    let db = TempDb::fresh(BACKENDS[0]).await;
    let srv = Server::start(&db.url, None, None).await;
    compute_node(&srv, NODE).await;
    let mut g = fixtures::h100_80gb();
    g.mig_enabled = false;
    g.profiles.clear();
    g.memory_slices = 0;
    let (s, v) = report(&srv, json!(wire(&g))).await;
    assert_eq!(s, 200, "{v}");
    let gpu = accel_store::accelerator::report::provider_uuid(&gpu_name());
    assert_eq!(
        offered(&srv, "CUSTOM_ACCELERATOR_GPU").await,
        vec![(gpu, 1)]
    );
    srv.stop().await;
}
