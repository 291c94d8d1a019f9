//! Devices cleaned between tenants (`accelerator::cleaning`), on every backend: the
//! transaction that releases a device's last consumer (a VM's allocation, a pod's slot,
//! a DRA claim) reserves it; only the agent's answer (or an operator) offers it again;
//! the report never lifts it early.

use accel_core::accelerator::{fake_device, ReportedDevice};
use accel_store::accelerator::cleaning::{self, CleaningState, Outcome, TRAIT};
use accel_store::accelerator::Refused;
use accel_store::accelerator::{claims, kubernetes, report};
use accel_store::placement::allocations::{self as allocs, ConsumerWrite, Refusal};
use accel_store::placement::{inventories, providers};
use accel_store::testing::each_backend;
use accel_store::{Store, StoreError};
use std::collections::BTreeMap;

const HOST: &str = "host1";

fn device(rule: bool, healthy: bool) -> ReportedDevice {
    let mut d = fake_device(HOST);
    if rule {
        d.deployables[0]
            .attributes
            .push(("trait_cleaned".into(), TRAIT.into()));
    }
    d.healthy = healthy;
    d
}

async fn report(store: &Store, d: ReportedDevice) {
    store
        .write(move |tx| Box::pin(async move { report::replace_host(tx, HOST, &[d], true).await }))
        .await
        .unwrap();
}

fn rp_uuid() -> String {
    report::provider_uuid(&format!("{HOST}_FakeDevice"))
}

fn take_all(consumer: &str, n: i64) -> ConsumerWrite {
    ConsumerWrite {
        uuid: consumer.into(),
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        consumer_type: Some("INSTANCE".into()),
        allocations: if n > 0 {
            vec![(rp_uuid(), vec![("FPGA".into(), n)])]
        } else {
            vec![]
        },
        ..Default::default()
    }
}

async fn allocate(store: &Store, consumer: &str, n: i64) -> Result<(), Refusal> {
    allocs::replace(store, &[take_all(consumer, n)], 10)
        .await
        .unwrap()
}

/// The provider's (total, reserved) and its cleaning.
async fn seen(store: &Store) -> ((i64, i64), cleaning::DeviceCleaning) {
    let u = rp_uuid();
    store
        .read(move |tx| {
            Box::pin(async move {
                let rp = providers::require(tx, &u).await?;
                let inv = inventories::list(tx, rp.id).await?;
                let c = cleaning::require(tx, &u).await?;
                Ok(((inv[0].limits.total, inv[0].limits.reserved), c))
            })
        })
        .await
        .unwrap()
}

async fn take(store: &Store, owner: &str) -> Vec<cleaning::CleaningJob> {
    let owner = owner.to_owned();
    store
        .write(move |tx| Box::pin(async move { cleaning::take(tx, HOST, &owner).await }))
        .await
        .unwrap()
}

async fn finish(
    store: &Store,
    attempt: i64,
    result: Result<(), String>,
) -> Result<cleaning::DeviceCleaning, StoreError> {
    let u = rp_uuid();
    store
        .write(move |tx| {
            Box::pin(async move {
                let o = Outcome {
                    result,
                    duration_ms: 1000,
                };
                cleaning::finish(tx, HOST, &u, attempt, &o).await
            })
        })
        .await
}

#[tokio::test]
async fn a_release_reserves_until_the_agent_says_clean() {
    each_backend(|store| async move {
        report(&store, device(true, true)).await;
        let ((total, reserved), c) = seen(&store).await;
        assert_eq!(
            (total, reserved, c.state, c.has_rule),
            (16, 0, CleaningState::Clean, true)
        );

        allocate(&store, "vm1", 16).await.unwrap();
        // A move of the consumer's allocation within one write is no release.
        allocate(&store, "vm1", 8).await.unwrap();
        assert_eq!(seen(&store).await.1.state, CleaningState::Clean);
        allocate(&store, "vm1", 0).await.unwrap();
        let ((_, reserved), c) = seen(&store).await;
        assert_eq!((reserved, c.state), (16, CleaningState::Cleaning));
        assert!(
            matches!(
                allocate(&store, "vm2", 1).await,
                Err(Refusal::InvalidInventory(_))
            ),
            "no claim lands on an uncleaned device"
        );
        // The agent's next report does not lift it.
        report(&store, device(true, true)).await;
        assert_eq!(seen(&store).await.0 .1, 16);

        let jobs = take(&store, "agent-a").await;
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            (jobs[0].address.as_str(), jobs[0].attempt),
            ("FakeDevice", 1)
        );
        // The same process is answered the same take; a new process takes it over.
        assert_eq!(take(&store, "agent-a").await[0].attempt, 1);
        assert_eq!(take(&store, "agent-b").await[0].attempt, 2);
        assert!(
            matches!(
                finish(&store, 1, Ok(())).await,
                Err(StoreError::Refused(accel_store::Refused::Accelerator(
                    Refused::NoRunningCleaning { attempt: 1, .. }
                )))
            ),
            "an answer to a superseded take changes nothing"
        );
        let done = finish(&store, 2, Ok(())).await.unwrap();
        assert_eq!(
            (done.state, done.last_duration_ms),
            (CleaningState::Clean, Some(1000))
        );
        assert_eq!(seen(&store).await.0 .1, 0);
        allocate(&store, "vm2", 16).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_failed_cleaning_stays_reserved_until_retried_or_released() {
    each_backend(|store| async move {
        report(&store, device(true, true)).await;
        allocate(&store, "vm1", 4).await.unwrap();
        let u = rp_uuid();
        let busy = store.cleanings().retry(&u).await;
        assert!(
            matches!(
                busy,
                Err(StoreError::Refused(accel_store::Refused::Accelerator(
                    Refused::ProviderInUse { .. }
                )))
            ),
            "a held device is not wiped under its tenant"
        );
        allocate(&store, "vm1", 0).await.unwrap();
        let a = take(&store, "agent").await[0].attempt;
        let failed = finish(&store, a, Err("verify exited 1".into()))
            .await
            .unwrap();
        assert_eq!(failed.state, CleaningState::Failed);
        assert_eq!(failed.reason.as_deref(), Some("verify exited 1"));
        assert_eq!(seen(&store).await.0 .1, 16);
        assert!(
            take(&store, "agent").await.is_empty(),
            "a failure is not retried by itself"
        );
        let counts = store
            .read(|tx| Box::pin(async move { cleaning::counts(tx).await }))
            .await
            .unwrap();
        assert!(counts.contains(&(CleaningState::Failed, 1)), "{counts:?}");

        // An operator's retry wakes the agents' long polls on this process.
        let mut signal = store.cleanings_signal();
        signal.borrow_and_update();
        store.cleanings().retry(&rp_uuid()).await.unwrap();
        assert!(signal.has_changed().unwrap());
        assert_eq!(seen(&store).await.1.state, CleaningState::Cleaning);
        let a = take(&store, "agent").await[0].attempt;
        finish(&store, a, Err("timed out after 1 s".into()))
            .await
            .unwrap();
        let released = store.cleanings().release(&rp_uuid()).await.unwrap();
        assert_eq!(released[0].state, CleaningState::Clean);
        assert_eq!(seen(&store).await.0 .1, 0);
    })
    .await;
}

#[tokio::test]
async fn both_reasons_to_reserve_hold_together_and_devices_without_a_rule_are_not_held() {
    each_backend(|store| async move {
        report(&store, device(false, true)).await;
        allocate(&store, "vm1", 1).await.unwrap();
        allocate(&store, "vm1", 0).await.unwrap();
        let ((_, reserved), c) = seen(&store).await;
        assert_eq!(
            (reserved, c.state, c.has_rule),
            (0, CleaningState::Clean, false)
        );

        report(&store, device(true, true)).await;
        allocate(&store, "vm1", 1).await.unwrap();
        let consumer = "vm1".to_owned();
        store
            .write(move |tx| {
                Box::pin(async move { allocs::delete_for_consumer(tx, &consumer).await })
            })
            .await
            .unwrap();
        assert_eq!(seen(&store).await.1.state, CleaningState::Cleaning);
        // Unhealthy while cleaning: cleaned, it stays reserved for its health.
        report(&store, device(true, false)).await;
        let a = take(&store, "agent").await[0].attempt;
        finish(&store, a, Ok(())).await.unwrap();
        assert_eq!(seen(&store).await.0 .1, 16);
        report(&store, device(true, true)).await;
        assert_eq!(seen(&store).await.0 .1, 0);
    })
    .await;
}

fn pod_usage(held: bool) -> (BTreeMap<String, String>, Vec<kubernetes::SlotClaim>) {
    let mut usage = BTreeMap::new();
    usage.insert(
        "gpu-0".to_owned(),
        if held { HOST.to_owned() } else { String::new() },
    );
    let claims = if held {
        vec![kubernetes::SlotClaim {
            slot: "gpu-0".into(),
            device: "FakeDevice".into(),
            pod: Some("ns/pod".into()),
            partition: None,
        }]
    } else {
        Vec::new()
    };
    (usage, claims)
}

async fn save_pod(store: &Store, held: bool) -> Result<kubernetes::Outcome, StoreError> {
    let (usage, claims) = pod_usage(held);
    store
        .write(move |tx| Box::pin(async move { kubernetes::save(tx, HOST, &usage, &claims).await }))
        .await
}

/// Takes and answers the one running cleaning, clean.
async fn clean(store: &Store) {
    let a = take(store, "agent").await[0].attempt;
    finish(store, a, Ok(())).await.unwrap();
}

#[tokio::test]
async fn a_pods_slot_released_is_cleaned_and_not_offered_meanwhile() {
    each_backend(|store| async move {
        report(&store, device(true, true)).await;
        let held = save_pod(&store, true).await.unwrap();
        assert_eq!(held.consumers.len(), 1, "the pod is allocated the device");
        let released = save_pod(&store, false).await.unwrap();
        assert_eq!(
            released.vm_held,
            ["FakeDevice"],
            "the answer to the release already tells the agent not to offer it"
        );
        assert_eq!(seen(&store).await.1.state, CleaningState::Cleaning);
        let again = save_pod(&store, true).await.unwrap();
        assert!(
            again.consumers.is_empty(),
            "no pod is allocated an uncleaned device"
        );
        save_pod(&store, false).await.unwrap();
        clean(&store).await;
        assert_eq!(save_pod(&store, true).await.unwrap().consumers.len(), 1);
    })
    .await;
}

/// The DRA claim of the tests: its uid is the Placement consumer.
const CLAIM: &str = "5c1a1000-0000-4000-8000-000000000001";

/// The DRA driver's `NodePrepareResources` (`prepare`: answers whether the claim holds
/// the device) or `NodeUnprepareResources` for the claim [`CLAIM`] of the device.
async fn dra(store: &Store, prepare: bool) -> Result<bool, StoreError> {
    store
        .write(move |tx| {
            Box::pin(async move {
                if prepare {
                    let prepared =
                        claims::prepare(tx, HOST, CLAIM, &["FakeDevice".to_owned()], &[]).await?;
                    Ok(prepared.is_ok())
                } else {
                    claims::unprepare(tx, CLAIM).await
                }
            })
        })
        .await
}

#[tokio::test]
async fn a_dra_claim_released_is_cleaned_and_not_prepared_meanwhile() {
    each_backend(|store| async move {
        report(&store, device(true, true)).await;
        assert!(
            dra(&store, true).await.unwrap(),
            "the claim holds the device"
        );
        assert!(dra(&store, false).await.unwrap(), "unprepared: released");
        assert_eq!(seen(&store).await.1.state, CleaningState::Cleaning);
        assert_eq!(seen(&store).await.0, (16, 16), "reserved whole meanwhile");
        assert!(
            !dra(&store, true).await.unwrap(),
            "no claim is prepared on an uncleaned device"
        );
        clean(&store).await;
        assert!(dra(&store, true).await.unwrap(), "offered again once clean");
    })
    .await;
}

/// The race of issue 33: a release and a claim of the same device at once, 1,000
/// times, the claim taking turns between Placement, the device plugins' save and a DRA
/// claim's prepare. A
/// claim may only land while the device is clean; whichever commits first, it never
/// lands on a device released and not yet cleaned.
#[tokio::test]
async fn release_and_claim_race_never_lands_a_claim_on_an_uncleaned_device() {
    each_backend(|store| async move {
        report(&store, device(true, true)).await;
        for i in 0..1000 {
            allocate(&store, "holder", 16).await.unwrap();
            let release = allocate(&store, "holder", 0);
            let landed = async {
                match i % 3 {
                    0 => allocate(&store, "claimer", 1).await.is_ok(),
                    1 => save_pod(&store, true)
                        .await
                        .is_ok_and(|o| !o.consumers.is_empty()),
                    _ => dra(&store, true).await.is_ok_and(|held| held),
                }
            };
            let (released, landed) = tokio::join!(release, landed);
            released.unwrap();
            assert!(
                !landed,
                "iteration {i}: a claim landed on a released device"
            );
            let c = seen(&store).await.1;
            assert_eq!(c.state, CleaningState::Cleaning, "iteration {i}");
            if i % 3 == 1 {
                save_pod(&store, false).await.unwrap();
            }
            clean(&store).await;
        }
    })
    .await;
}

/// Issue 41: the operator's actions refuse what could hurt, and a claim is refused on
/// a device being cleaned even when an inventory write lowered its reservation.
#[tokio::test]
async fn operator_refusals_and_a_claim_on_a_cleaning_device_with_its_reservation_lowered() {
    each_backend(|store| async move {
        report(&store, device(true, true)).await;
        allocate(&store, "vm1", 4).await.unwrap();
        let u = rp_uuid();
        let held = store.cleanings().release(&u).await;
        assert!(
            matches!(
                held,
                Err(StoreError::Refused(accel_store::Refused::Accelerator(
                    Refused::ReleasingInUse { .. }
                )))
            ),
            "a held device is not released under its tenant: {held:?}"
        );
        assert_eq!(seen(&store).await.1.state, CleaningState::Clean);

        allocate(&store, "vm1", 0).await.unwrap();
        assert_eq!(seen(&store).await.1.state, CleaningState::Cleaning);
        // Someone lowers the reservation behind the cleaning's back.
        let lowered = rp_uuid();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let rp = providers::require(tx, &lowered).await?;
                    let mut inv = inventories::list(tx, rp.id).await?;
                    inv[0].limits.reserved = 0;
                    inventories::replace(tx, &rp, &inv).await
                })
            })
            .await
            .unwrap();
        assert_eq!(seen(&store).await.0 .1, 0);
        let refused = allocate(&store, "vm2", 1).await;
        assert!(
            matches!(refused, Err(Refusal::InvalidInventory(_))),
            "a device being cleaned is claimed by no one: {refused:?}"
        );
        assert_eq!(seen(&store).await.1.state, CleaningState::Cleaning);
    })
    .await;
}

#[tokio::test]
async fn cleaning_a_device_no_rule_matches_is_refused_and_changes_nothing() {
    each_backend(|store| async move {
        report(&store, device(false, true)).await;
        let refused = store.cleanings().retry(&rp_uuid()).await;
        assert!(
            matches!(
                refused,
                Err(StoreError::Refused(accel_store::Refused::Accelerator(
                    Refused::NoCleaningRule { .. }
                )))
            ),
            "{refused:?}"
        );
        let ((total, reserved), c) = seen(&store).await;
        assert_eq!((c.state, reserved), (CleaningState::Clean, 0));
        assert!(total > 0);
        allocate(&store, "vm1", 1).await.unwrap();
    })
    .await;
}
