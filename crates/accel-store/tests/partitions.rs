//! The GPU partition ledger (issue 45) on every backend: a few H100s and H200s
//! reported with their MIG geometry, then random interleavings of Placement claims and
//! releases on their partition providers and whole-GPU claims. After every step: no two
//! holders of a GPU overlap, holders are exactly the allocations, every provider offers
//! exactly what the ledger can still create (so every offered candidate can be held
//! and nothing else can), and a release returns the ledger and the capacities to what
//! they were. Among the claims, pods' DRA claims of a MIG device at a placement the
//! Kubernetes scheduler chose (pinned): held exactly there when it fits beside every
//! holder, refused otherwise. The seed is printed; `ACCEL_LEDGER_SEED=<n>` replays one run.

use accel_core::accelerator::{
    AttachType, DeviceType, ReportedDeployable, ReportedDevice, ReportedHandle,
};
use accel_core::partition::{fixtures, members, Consumer, Geometry, Member};
use accel_store::accelerator::report;
use accel_store::partitions::{Ledger, Pin};
use accel_store::placement::allocations::{self as allocs, ConsumerWrite, Refusal};
use accel_store::placement::world;
use accel_store::testing::{self, each_backend};
use accel_store::{Store, StoreError};
use std::collections::BTreeMap;

const HOST: &str = "gpuhost";
const GPU_CLASS: &str = "CUSTOM_ACCELERATOR_GPU";

/// A GPU as the agent reports it, with its partitions.
fn gpu(i: usize, g: Geometry) -> ReportedDevice {
    let bus = format!("{:02x}", 0x3b + i);
    let address =
        format!("{{\"domain\":\"0000\",\"bus\":\"{bus}\",\"device\":\"00\",\"function\":\"0\"}}");
    ReportedDevice {
        device_type: DeviceType::Gpu,
        vendor: "10de".into(),
        model: "H100".into(),
        std_board_info: None,
        vendor_board_info: None,
        cpid_type: "PCI".into(),
        cpid_info: address.clone(),
        healthy: true,
        health_reason: None,
        deployables: vec![ReportedDeployable {
            name: gpu_name(i),
            parent: None,
            num_accelerators: 1,
            driver_name: Some("nvidia".into()),
            attributes: vec![
                ("rc".into(), GPU_CLASS.into()),
                (
                    "inventory:CUSTOM_ACCELERATOR_MEMORY_HBM".into(),
                    g.totals.memory_mib.to_string(),
                ),
                ("trait0".into(), "CUSTOM_GPU_NVIDIA".into()),
                ("trait1".into(), "CUSTOM_OWNER_ACCEL".into()),
            ],
            attach_handles: vec![ReportedHandle {
                attach_type: AttachType::Pci,
                attach_info: address,
                in_use: false,
            }],
        }],
        partitions: Some(g),
    }
}

fn gpu_name(i: usize) -> String {
    format!("{HOST}_0000:{:02x}:00.0", 0x3b + i)
}

/// Two H100s and two H200s with MIG on, and an H100 with MIG off offering vGPU types.
fn fleet() -> Vec<ReportedDevice> {
    vec![
        gpu(0, fixtures::h100_80gb()),
        gpu(1, fixtures::h100_80gb()),
        gpu(2, fixtures::h200_141gb()),
        gpu(3, fixtures::h200_141gb()),
        gpu(4, fixtures::with_vgpu(fixtures::h100_80gb(), false)),
    ]
}

/// A provider that takes a GPU one way.
#[derive(Debug, Clone)]
struct Target {
    gpu: String,
    member: Member,
    rp_uuid: String,
    class: String,
}

fn targets(devices: &[ReportedDevice]) -> Vec<Target> {
    let mut out = Vec::new();
    for d in devices {
        let g = d.partitions.as_ref().unwrap();
        let name = &d.deployables[0].name;
        for m in members(g) {
            out.push(Target {
                gpu: report::provider_uuid(name),
                rp_uuid: report::provider_uuid(&m.provider_name(g, name)),
                class: m.resource_class(g).unwrap_or_else(|| GPU_CLASS.into()),
                member: m,
            });
        }
    }
    out
}

async fn report_fleet(store: &Store, devices: Vec<ReportedDevice>) {
    store
        .write(move |tx| {
            Box::pin(async move { report::replace_host(tx, HOST, &devices, true).await })
        })
        .await
        .unwrap();
}

fn write(consumer: &str, parts: &[(&Target, i64)]) -> ConsumerWrite {
    ConsumerWrite {
        uuid: consumer.into(),
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        consumer_type: Some("INSTANCE".into()),
        allocations: parts
            .iter()
            .map(|(t, n)| (t.rp_uuid.clone(), vec![(t.class.clone(), *n)]))
            .collect(),
        ..Default::default()
    }
}

async fn claim(store: &Store, consumer: &str, parts: &[(&Target, i64)]) -> Result<(), Refusal> {
    allocs::replace(store, &[write(consumer, parts)], 10)
        .await
        .unwrap()
}

/// What the test compares: each GPU's holders (without ids) and every partition
/// provider's inventories as the candidate search reads them.
#[derive(Debug, Clone, PartialEq)]
struct State {
    holders: BTreeMap<String, Vec<(String, String, Consumer)>>,
    /// (provider uuid, class) -> (total, reserved, used)
    inventories: BTreeMap<(String, String), (i64, i64, i64)>,
    ledgers: Vec<Ledger>,
}

async fn state(store: &Store) -> State {
    let ledgers = store.partitions().of_host(HOST).await.unwrap();
    let w = store
        .read(|tx| Box::pin(async move { world::load(tx).await }))
        .await
        .unwrap();
    let mut inventories = BTreeMap::new();
    for p in &w.providers {
        for inv in &p.inventories {
            let class = w.rc_names[&i64::from(inv.rc)].clone();
            inventories.insert(
                (p.uuid.clone(), class),
                (inv.limits.total, inv.limits.reserved, inv.used),
            );
        }
    }
    let mut holders = BTreeMap::new();
    for l in &ledgers {
        let mut v: Vec<(String, String, Consumer)> = l
            .holders
            .iter()
            .map(|h| (h.consumer.clone(), h.rp_uuid.clone(), h.holder.clone()))
            .collect();
        v.sort();
        holders.insert(l.rp_uuid.clone(), v);
    }
    State {
        holders,
        inventories,
        ledgers,
    }
}

/// Free room of a target as the candidate search sees it.
fn offered(s: &State, t: &Target) -> i64 {
    let (total, reserved, used) = s.inventories[&(t.rp_uuid.clone(), t.class.clone())];
    total - reserved - used
}

/// The invariants of every step.
fn check(s: &State, targets: &[Target], ctx: &str) {
    for l in &s.ledgers {
        let mut prefix = Vec::new();
        for h in &l.holders {
            assert_eq!(
                l.geometry.fits(&prefix, &h.holder),
                Ok(()),
                "{ctx}: holders of {} overlap: {:?}",
                l.rp_uuid,
                l.holders
            );
            prefix.push(h.holder.clone());
        }
    }
    for t in targets {
        let l = s.ledgers.iter().find(|l| l.rp_uuid == t.gpu).unwrap();
        let held = l.held();
        let (_, _, used) = s.inventories[&(t.rp_uuid.clone(), t.class.clone())];
        let holders = l.holders.iter().filter(|h| h.rp_uuid == t.rp_uuid).count() as i64;
        let free = offered(s, t);
        match &t.member {
            Member::Whole => {
                assert_eq!(holders, i64::from(used > 0), "{ctx}: whole holder {t:?}");
                assert_eq!(
                    free > 0,
                    l.geometry.fits(&held, &Consumer::Whole).is_ok(),
                    "{ctx}: whole offered {t:?} free {free}"
                );
            }
            m => {
                assert_eq!(holders, used, "{ctx}: holders against allocations {t:?}");
                let can = l.geometry.count(&held, &m.want()) as i64;
                assert_eq!(free, can, "{ctx}: offered against creatable {t:?}");
            }
        }
    }
}

/// A small reproducible generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seed() -> u64 {
    std::env::var("ACCEL_LEDGER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(45, |d| d.as_nanos() as u64)
        })
}

/// One random run of `steps` on `store`.
async fn run(store: &Store, seed: u64, steps: usize) {
    let devices = fleet();
    let targets = targets(&devices);
    report_fleet(store, devices).await;
    let mut rng = Rng(seed);
    // Claims in order, with the state before each while it still holds (a release
    // out of order voids the later ones').
    let mut held: Vec<(String, Option<State>)> = Vec::new();
    let mut s = state(store).await;
    check(&s, &targets, &format!("seed {seed}, after the report"));
    let (mut won, mut refused) = (0, 0);
    // The consumers that are pods' DRA claims (released as the driver does).
    let mut claims = std::collections::BTreeSet::new();
    for step in 0..steps {
        let ctx = format!("seed {seed}, step {step}");
        match rng.below(12) {
            // A claim of one target, one or two units.
            0..=5 => {
                let t = &targets[rng.below(targets.len())];
                let n = if rng.below(4) == 0 { 2 } else { 1 };
                let n = if t.member == Member::Whole { 1 } else { n };
                let consumer = uuid::Uuid::new_v4().to_string();
                let offered = offered(&s, t) >= n;
                let got = claim(store, &consumer, &[(t, n)]).await;
                assert_eq!(got.is_ok(), offered, "{ctx}: claim {n} of {t:?}: {got:?}");
                if got.is_ok() {
                    won += 1;
                } else {
                    refused += 1;
                }
                let after = state(store).await;
                if got.is_ok() {
                    held.push((consumer, Some(s)));
                } else {
                    assert_eq!(after.holders, s.holders, "{ctx}: a refusal changed holders");
                }
                s = after;
            }
            // Two members of one GPU in one claim: the ledger decides jointly.
            6 => {
                let a = &targets[rng.below(targets.len())];
                let same: Vec<&Target> = targets
                    .iter()
                    .filter(|t| t.gpu == a.gpu && t.rp_uuid != a.rp_uuid)
                    .collect();
                let b = same[rng.below(same.len())];
                let consumer = uuid::Uuid::new_v4().to_string();
                // What the candidate answer keeps (placement/partition_candidates.rs):
                // each offered, and the ledger placing both together.
                let l = s.ledgers.iter().find(|l| l.rp_uuid == a.gpu).unwrap();
                let wants = [a.member.want(), b.member.want()];
                let predicted = offered(&s, a) >= 1
                    && offered(&s, b) >= 1
                    && l.geometry.place_all(&l.held(), &wants).is_ok();
                let got = claim(store, &consumer, &[(a, 1), (b, 1)]).await;
                assert_eq!(got.is_ok(), predicted, "{ctx}: joint claim {a:?} {b:?}");
                let after = state(store).await;
                match got {
                    Ok(()) => held.push((consumer, Some(s))),
                    Err(_) => assert_eq!(after.holders, s.holders, "{ctx}: refusal wrote"),
                }
                s = after;
            }
            // A pod's DRA claim of one MIG device where the scheduler put it.
            9 | 10 => {
                let i = rng.below(s.ledgers.len());
                let l = &s.ledgers[i];
                if l.geometry.profiles.is_empty() {
                    continue;
                }
                let p = &l.geometry.profiles[rng.below(l.geometry.profiles.len())];
                let at = p.placements[rng.below(p.placements.len())];
                let mig = Consumer::Mig { profile: p.id, at };
                let fits = l.geometry.fits(&l.held(), &mig).is_ok();
                let address = pci_address(&l.rp_uuid);
                let pin = Pin {
                    profile_id: p.id,
                    start: at.start,
                };
                let uid = uuid::Uuid::new_v4().to_string();
                let got = store
                    .claims()
                    .prepare(HOST, &uid, &[], &[(address, pin)])
                    .await
                    .unwrap();
                assert_eq!(got.is_ok(), fits, "{ctx}: pinned {mig:?}: {got:?}");
                let after = state(store).await;
                if got.is_ok() {
                    let l = after
                        .ledgers
                        .iter()
                        .find(|x| x.rp_uuid == l.rp_uuid)
                        .unwrap();
                    let mine: Vec<&Consumer> = l
                        .holders
                        .iter()
                        .filter(|h| h.consumer == uid)
                        .map(|h| &h.holder)
                        .collect();
                    assert_eq!(mine, vec![&mig], "{ctx}: held where the scheduler put it");
                    won += 1;
                    claims.insert(uid.clone());
                    held.push((uid, Some(s)));
                } else {
                    refused += 1;
                    assert_eq!(after.holders, s.holders, "{ctx}: a refused pin wrote");
                    assert_eq!(
                        after.inventories, s.inventories,
                        "{ctx}: a refused pin wrote"
                    );
                }
                s = after;
            }
            // The last claim released: everything as it was before it.
            7 | 8 if !held.is_empty() => {
                let (consumer, before) = held.pop().unwrap();
                release(
                    store,
                    &consumer,
                    rng.below(2) == 0,
                    claims.remove(&consumer),
                )
                .await;
                s = state(store).await;
                if let Some(before) = before {
                    assert_eq!(s.holders, before.holders, "{ctx}: release of {consumer}");
                    assert_eq!(
                        s.inventories, before.inventories,
                        "{ctx}: capacities after the release of {consumer}"
                    );
                }
            }
            // Any claim released.
            _ if !held.is_empty() => {
                let (consumer, _) = held.remove(rng.below(held.len()));
                release(
                    store,
                    &consumer,
                    rng.below(2) == 0,
                    claims.remove(&consumer),
                )
                .await;
                // Every "before" state is void now.
                held.iter_mut().for_each(|h| h.1 = None);
                s = state(store).await;
            }
            _ => {}
        }
        check(&s, &targets, &ctx);
    }
    // Both answers were exercised, not one of them only.
    assert!(
        won > 10 && refused > 0,
        "seed {seed}: {won} claims won, {refused} refused"
    );
}

/// The PCI address of the GPU whose own provider is `rp_uuid`.
fn pci_address(rp_uuid: &str) -> String {
    (0..fleet().len())
        .map(gpu_name)
        .find(|n| report::provider_uuid(n) == rp_uuid)
        .and_then(|n| n.strip_prefix(&format!("{HOST}_")).map(str::to_owned))
        .unwrap()
}

/// Releases `consumer` by `DELETE /allocations` or by an empty `PUT`; a pod's DRA
/// claim as its driver does.
async fn release(store: &Store, consumer: &str, by_delete: bool, dra_claim: bool) {
    if dra_claim {
        assert!(store.claims().unprepare(consumer).await.unwrap());
    } else if by_delete {
        assert!(store.allocations().delete_consumer(consumer).await.unwrap());
    } else {
        claim(store, consumer, &[]).await.unwrap();
    }
}

#[tokio::test]
async fn random_claims_and_releases_never_double_book_a_gpu() {
    let first = seed();
    eprintln!("ledger property seed: {first} (ACCEL_LEDGER_SEED={first} replays it)");
    for i in 0..4 {
        run(&testing::sqlite().await, first.wrapping_add(i), 150).await;
    }
    each_backend(|store| async move { run(&store, first.wrapping_add(100), 120).await }).await;
}

#[tokio::test]
async fn the_report_models_each_profile_as_a_provider_sized_by_the_ledger() {
    each_backend(|store| async move {
        let devices = fleet();
        let targets = targets(&devices);
        report_fleet(&store, devices.clone()).await;
        let s = state(&store).await;
        let totals: Vec<(String, i64)> = targets
            .iter()
            .filter(|t| t.gpu == report::provider_uuid(&gpu_name(0)))
            .map(|t| {
                let (total, reserved, _) = s.inventories[&(t.rp_uuid.clone(), t.class.clone())];
                assert_eq!(reserved, 0, "{t:?}");
                (t.class.clone(), total)
            })
            .collect();
        let want = [
            (GPU_CLASS, 1),
            ("CUSTOM_MIG_1G_10GB", 7),
            ("CUSTOM_MIG_1G_10GB_ME", 1),
            ("CUSTOM_MIG_1G_20GB", 4),
            ("CUSTOM_MIG_2G_20GB", 3),
            ("CUSTOM_MIG_3G_40GB", 2),
            ("CUSTOM_MIG_4G_40GB", 1),
            ("CUSTOM_MIG_7G_80GB", 1),
        ];
        for (class, n) in want {
            assert!(
                totals.contains(&(class.to_owned(), n)),
                "{class}: {totals:?}"
            );
        }
        // MIG off: the profiles stay, reserved in full; the time-sliced type is offered.
        let off = &targets
            .iter()
            .filter(|t| t.gpu == report::provider_uuid(&gpu_name(4)))
            .collect::<Vec<_>>();
        for t in off {
            let free = offered(&s, t);
            match &t.member {
                Member::Mig(_) => assert_eq!(free, 0, "{t:?}"),
                Member::Vgpu(id) if id == "nvidia-1001" => assert_eq!(free, 7),
                Member::Vgpu(_) => assert_eq!(free, 0, "MIG-backed with MIG off"),
                Member::Whole => assert_eq!(free, 1),
            }
        }
        // Each vGPU type offers one MDEV handle per instance, in Cyborg's form.
        let vgpu = targets
            .iter()
            .find(|t| t.member == Member::Vgpu("nvidia-1001".into()))
            .unwrap()
            .rp_uuid
            .clone();
        let handles = store
            .read(move |tx| {
                Box::pin(async move {
                    use accel_store::accelerator::hardware::{self, DeployableColumn};
                    let dep =
                        hardware::list_deployables(tx, &[(DeployableColumn::RpUuid, vgpu)]).await?;
                    hardware::handles_of(tx, dep[0].id).await
                })
            })
            .await
            .unwrap();
        // Seven: 8 instances of 10 GiB do not fit in 79.25 GiB.
        assert_eq!(handles.len(), 7);
        assert!(handles.iter().all(|h| h.attach_type == "MDEV"));
        assert!(handles.iter().any(|h| h.attach_info
            == r#"{"asked_type":"nvidia-1001","bus":"3f","device":"00","domain":"0000","function":"0","vgpu_mark":"nvidia-1001_6"}"#),
            "{handles:?}");
        // A report again changes nothing; one without partitions keeps a held ledger.
        report_fleet(&store, devices).await;
        let again = state(&store).await;
        assert_eq!(
            (again.holders, again.inventories),
            (s.holders, s.inventories)
        );
    })
    .await;
}

#[tokio::test]
async fn a_slice_claim_shrinks_its_siblings_and_the_whole_gpu_in_the_same_transaction() {
    each_backend(|store| async move {
        let devices = fleet();
        let targets = targets(&devices);
        report_fleet(&store, devices).await;
        let gpu0 = report::provider_uuid(&gpu_name(0));
        let find = |class: &str| {
            targets
                .iter()
                .find(|t| t.gpu == gpu0 && t.class == class)
                .unwrap()
                .clone()
        };
        let (whole, g1_20, g3, g1_10) = (
            find(GPU_CLASS),
            find("CUSTOM_MIG_1G_20GB"),
            find("CUSTOM_MIG_3G_40GB"),
            find("CUSTOM_MIG_1G_10GB"),
        );
        claim(&store, "pod-a", &[(&g3, 1)]).await.unwrap();
        claim(&store, "pod-b", &[(&g1_20, 1)]).await.unwrap();
        let s = state(&store).await;
        let l = s.ledgers.iter().find(|l| l.rp_uuid == gpu0).unwrap();
        let at: Vec<&Consumer> = l.holders.iter().map(|h| &h.holder).collect();
        // The 3g goes at 4, which keeps a 4g at 0 possible; the 1g.20gb then at 2.
        let span = |start, size| accel_core::partition::Span { start, size };
        assert_eq!(
            at,
            [
                &Consumer::Mig {
                    profile: 9,
                    at: span(4, 4)
                },
                &Consumer::Mig {
                    profile: 15,
                    at: span(2, 2)
                }
            ]
        );
        assert_eq!(offered(&s, &whole), 0);
        assert_eq!(offered(&s, &g3), 0);
        assert_eq!(offered(&s, &g1_10), 2);
        // The whole GPU is refused while slices are held; a VM on another GPU is not.
        assert!(claim(&store, "vm", &[(&whole, 1)]).await.is_err());
        let other = targets
            .iter()
            .find(|t| t.gpu != gpu0 && t.member == Member::Whole)
            .unwrap();
        claim(&store, "vm", &[(other, 1)]).await.unwrap();
        let s = state(&store).await;
        // A pod takes a GPU whole as a container device.
        let third = targets
            .iter()
            .find(|t| t.gpu != gpu0 && t.gpu != other.gpu && t.member == Member::Whole)
            .unwrap();
        let mut pod = write("pod-c", &[(third, 1)]);
        pod.consumer_type = Some("KUBERNETES_POD".into());
        allocs::replace(&store, &[pod], 10).await.unwrap().unwrap();
        let held = &state(&store).await.holders[&third.gpu];
        assert_eq!(held[0].2, Consumer::Whole);
        // Nova's instance takes it by passthrough: the VFIO form.
        assert_eq!(
            s.holders[&other.gpu],
            [("vm".to_owned(), other.gpu.clone(), Consumer::Vfio)]
        );
        let siblings: Vec<&Target> = targets.iter().filter(|t| t.gpu == other.gpu).collect();
        for t in siblings {
            if t.member != Member::Whole {
                assert_eq!(offered(&s, t), 0, "{t:?} beside a whole GPU");
            }
        }
        check(&s, &targets, "after the VM");
    })
    .await;
}

/// Two servers on one database claim slices of the same GPUs at once.
async fn race(a: Store, b: Store) {
    let devices = vec![
        gpu(0, fixtures::h100_80gb()),
        gpu(1, fixtures::h200_141gb()),
    ];
    let targets = targets(&devices);
    report_fleet(&a, devices).await;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8u64 {
        let store = if w % 2 == 0 { a.clone() } else { b.clone() };
        let targets = targets.clone();
        tasks.spawn(async move {
            let mut rng = Rng(w * 7919 + 1);
            let mut mine = Vec::new();
            let mut won = 0;
            for i in 0..12 {
                if !mine.is_empty() && rng.below(3) == 0 {
                    let c: String = mine.remove(rng.below(mine.len()));
                    store.allocations().delete_consumer(&c).await?;
                    continue;
                }
                let t = &targets[rng.below(targets.len())];
                let consumer = format!("w{w}-{i}");
                match allocs::replace(&store, &[write(&consumer, &[(t, 1)])], 10).await {
                    Ok(Ok(())) => {
                        won += 1;
                        mine.push(consumer);
                    }
                    Ok(Err(_)) => {}
                    Err(e) if e.is_retryable() => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, StoreError>(won)
        });
    }
    let mut won = 0;
    while let Some(r) = tasks.join_next().await {
        won += r.unwrap().unwrap();
    }
    assert!(won > 0, "no claim won");
    let s = state(&b).await;
    check(&s, &targets, "after the race");
}

#[tokio::test]
async fn two_writers_on_one_database_never_over_allocate() {
    let dir = std::env::temp_dir().join(format!("accel-ledger-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let (a, b) = (
        Store::connect(&url).await.unwrap(),
        Store::connect(&url).await.unwrap(),
    );
    race(a, b).await;
    let _ = std::fs::remove_dir_all(&dir);
    let url = testing::fresh_postgres_url().await.unwrap();
    let (a, b) = (
        Store::connect(&url).await.unwrap(),
        Store::connect(&url).await.unwrap(),
    );
    race(a, b).await;
    if let Some(url) = testing::fresh_mysql_url().await.unwrap() {
        let (a, b) = (
            Store::connect(&url).await.unwrap(),
            Store::connect(&url).await.unwrap(),
        );
        race(a, b).await;
    }
}

/// An allocation the ledger has no holder for (made before the GPU was reported
/// partitioned, or by an import) never refuses another consumer's claim or release:
/// it is logged and left out, and placed once it fits.
#[tokio::test]
async fn an_allocation_without_a_holder_blocks_no_one_else() {
    each_backend(|store| async move {
        let devices = vec![gpu(0, fixtures::h100_80gb())];
        let targets = targets(&devices);
        report_fleet(&store, devices.clone()).await;
        let find = |class: &str| targets.iter().find(|t| t.class == class).unwrap().clone();
        let (g7, g1) = (find("CUSTOM_MIG_7G_80GB"), find("CUSTOM_MIG_1G_10GB"));
        claim(&store, "z-old", &[(&g7, 1)]).await.unwrap();
        // Its holder goes, as if it had been allocated before the ledger; a report
        // sizes the providers from the ledger again.
        store
            .write(|tx| {
                Box::pin(async move {
                    sqlx::query("DELETE FROM gpu_ledger_holders WHERE consumer = 'z-old'")
                        .execute(&mut *tx)
                        .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        report_fleet(&store, devices.clone()).await;
        claim(&store, "b", &[(&g1, 1)]).await.unwrap();
        claim(&store, "c", &[(&g1, 1)]).await.unwrap();
        release(&store, "b", true, false).await;
        release(&store, "c", false, false).await;
        // Free again: the old allocation's holder is placed at the next settle.
        claim(&store, "d", &[(&g1, 1)]).await.unwrap_err();
        let s = state(&store).await;
        let held: Vec<&str> = s.ledgers[0]
            .holders
            .iter()
            .map(|h| h.consumer.as_str())
            .collect();
        assert_eq!(held, ["z-old"]);
        check(&s, &targets, "after the old allocation was placed");
    })
    .await;
}
