//! The console's estate reads (`Store::estate`) on every backend: hosts paged and
//! searched in SQL, a host's page (its tree parents first with usage, the consumers
//! on it), consumers with their allocations; devices' health reasons, their bounded
//! history on their page, the estate summary and the hosts' device filters.

use accel_core::accelerator::{fake_device, ReportedDevice};
use accel_core::capacity::Limits;
use accel_store::accelerator::{history, report};
use accel_store::estate::hosts::{HealthFilter, HostFilter};
use accel_store::estate::{hosts, HostPage, Window};
use accel_store::placement::allocations::{self as allocs, ConsumerWrite};
use accel_store::placement::inventories::{self, Inventory};
use accel_store::placement::providers;
use accel_store::testing::each_backend;
use accel_store::Store;

const VM: &str = "c0c0c0c0-0000-4000-8000-000000000001";

fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// Hosts `host-0..n` (VCPU 8), each with a child `host-i_dev` (FPGA 2, reserved 1)
/// and a grandchild `host-i_dev_region` (no inventory); VM holds one FPGA on host-1.
async fn estate(store: &Store, n: u32) {
    store
        .write(move |tx| {
            Box::pin(async move {
                for i in 0..n {
                    let root =
                        providers::create(tx, &uuid(i * 10), &format!("host-{i}"), None).await?;
                    inventories::replace(
                        tx,
                        &root,
                        &[Inventory::new(0, "VCPU".into(), Limits::whole(8))],
                    )
                    .await?;
                    let dev = providers::create(
                        tx,
                        &uuid(i * 10 + 1),
                        &format!("host-{i}_dev"),
                        Some(&uuid(i * 10)),
                    )
                    .await?;
                    let fpga = Limits {
                        reserved: 1,
                        ..Limits::whole(2)
                    };
                    inventories::replace(tx, &dev, &[Inventory::new(16, "FPGA".into(), fpga)])
                        .await?;
                    providers::create(
                        tx,
                        &uuid(i * 10 + 2),
                        &format!("host-{i}_dev_region"),
                        Some(&uuid(i * 10 + 1)),
                    )
                    .await?;
                }
                Ok(())
            })
        })
        .await
        .unwrap();
    let w = ConsumerWrite {
        uuid: VM.into(),
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        check_generation: true,
        generation: None,
        consumer_type: Some("INSTANCE".into()),
        allocations: vec![(uuid(11), vec![("FPGA".into(), 1)])],
    };
    allocs::replace(store, &[w], u32::MAX)
        .await
        .unwrap()
        .unwrap();
}

async fn page(store: &Store, q: Option<&str>, offset: u64, limit: u64) -> (Vec<String>, i64) {
    let filter = HostFilter {
        search: q.map(str::to_owned),
        ..HostFilter::default()
    };
    let p = store
        .estate()
        .hosts(&filter, Window { offset, limit })
        .await
        .unwrap();
    (
        p.items.iter().map(|h| h.root().name.clone()).collect(),
        p.total,
    )
}

#[tokio::test]
async fn hosts_are_paged_searched_and_shown_with_their_trees() {
    each_backend(|store| async move {
        estate(&store, 12).await;
        // By name; host-10 and host-11 sort after host-1.
        let (names, total) = page(&store, None, 0, 3).await;
        assert_eq!(
            (names, total),
            (
                vec!["host-0".to_owned(), "host-1".into(), "host-10".into()],
                12
            )
        );
        let (names, _) = page(&store, None, 10, 5).await;
        assert_eq!(names, ["host-8", "host-9"]);
        // A host name, a provider name, a provider uuid, a consumer.
        assert_eq!(
            page(&store, Some("host-11"), 0, 50).await,
            (vec!["host-11".to_owned()], 1)
        );
        assert_eq!(
            page(&store, Some("host-7_dev_region"), 0, 50).await.0,
            ["host-7"]
        );
        assert_eq!(page(&store, Some(&uuid(52)), 0, 50).await.0, ["host-5"]);
        assert_eq!(page(&store, Some(VM), 0, 50).await.0, ["host-1"]);
        assert_eq!(page(&store, Some("nowhere"), 0, 50).await, (vec![], 0));

        // The host's page from any provider of its tree: the tree parents first, with
        // depth and usage, and the consumer allocating from it.
        let host = store.estate().host(&uuid(12), 50).await.unwrap().unwrap();
        let tree = &host.tree;
        let shape: Vec<(usize, &str)> = tree
            .with_depth()
            .into_iter()
            .map(|(d, p)| (d, p.name.as_str()))
            .collect();
        assert_eq!(
            shape,
            [(0, "host-1"), (1, "host-1_dev"), (2, "host-1_dev_region")]
        );
        let fpga = &tree.providers[1].inventories[0];
        assert_eq!(fpga.resource_class, "FPGA");
        assert_eq!(
            (fpga.total, fpga.reserved, fpga.used, fpga.capacity),
            (2, 1, 1, 1)
        );
        assert_eq!(tree.last_report, None);
        let on_host: Vec<&str> = host
            .consumers
            .items
            .iter()
            .map(|c| c.uuid.as_str())
            .collect();
        assert_eq!((on_host, host.consumers.total), (vec![VM], 1));
        assert_eq!(host.arqs.total, 0);
        assert!(host.history.is_empty() && host.cleanings.is_empty());
        let none = store.estate().host(&uuid(999), 50).await.unwrap();
        assert!(none.is_none());

        // The consumer with its allocation, found by the host it allocates from.
        let window = Window {
            offset: 0,
            limit: 50,
        };
        let consumers = store
            .estate()
            .consumers(Some("host-1_dev"), window)
            .await
            .unwrap();
        assert_eq!(consumers.total, 1);
        let c = &consumers.items[0];
        assert_eq!(
            (c.uuid.as_str(), c.project.as_str(), c.pod_host.as_deref()),
            (VM, "p", None)
        );
        assert_eq!(c.allocations.len(), 1);
        assert_eq!(
            (
                c.allocations[0].provider_name.as_str(),
                c.allocations[0].used
            ),
            ("host-1_dev", 1)
        );
    })
    .await;
}

/// `h1` with Cyborg's fake device, healthy; `h2` with one the agent finds unhealthy.
async fn reported(store: &Store) {
    store
        .write(|tx| {
            Box::pin(async move {
                report::replace_host(tx, "h1", &[fake_device("h1")], true).await?;
                let sick = ReportedDevice {
                    healthy: false,
                    health_reason: Some("2 fatal PCIe AER error(s)".into()),
                    ..fake_device("h2")
                };
                report::replace_host(tx, "h2", &[sick], true).await
            })
        })
        .await
        .unwrap();
}

async fn filtered(store: &Store, filter: HostFilter) -> Vec<String> {
    let window = Window {
        offset: 0,
        limit: 50,
    };
    store
        .estate()
        .hosts(&filter, window)
        .await
        .unwrap()
        .items
        .iter()
        .map(|h| h.root().name.clone())
        .collect()
}

/// The page of `host`'s fake device provider, every list whole.
async fn device_page(store: &Store, host: &str) -> HostPage {
    let rp = report::provider_uuid(&format!("{host}_FakeDevice"));
    store.estate().host(&rp, 1000).await.unwrap().unwrap()
}

/// The history of the device behind `host`'s fake device provider, on its page.
async fn history_of(store: &Store, host: &str) -> Vec<history::Event> {
    device_page(store, host).await.history
}

/// The device behind `host`'s fake device provider.
async fn device_of(store: &Store, host: &str) -> hosts::DeviceView {
    device_page(store, host)
        .await
        .tree
        .providers
        .iter()
        .find_map(|p| p.device.clone())
        .unwrap()
}

#[tokio::test]
async fn health_reasons_history_the_summary_and_device_filters() {
    each_backend(|store| async move {
        reported(&store).await;

        // The agent's reason and since when, on the device the hosts page shows.
        let sick = device_of(&store, "h2").await;
        assert_eq!(sick.health, "unhealthy");
        assert_eq!(
            sick.health_reason.as_deref(),
            Some("2 fatal PCIe AER error(s)")
        );
        let since = sick.health_since.expect("since when");
        assert!(since > 1_700_000_000, "{since}");
        let well = device_of(&store, "h1").await;
        assert_eq!((well.health.as_str(), well.health_reason), ("ok", None));

        // The estate summary: one row (FPGA, 0xABCD), the sick device reserved too.
        let rows = store.estate().device_summary().await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(
            (r.device_type.as_str(), r.vendor.as_str()),
            ("FPGA", "0xABCD")
        );
        assert_eq!(
            (r.total, r.used, r.free, r.unhealthy, r.reserved),
            (2, 0, 1, 1, 1),
            "{r:?}"
        );

        // Hosts by device type and health.
        let by = |device_type: Option<&str>, health| HostFilter {
            search: None,
            device_type: device_type.map(str::to_owned),
            health,
        };
        assert_eq!(filtered(&store, by(None, None)).await, ["h1", "h2"]);
        assert_eq!(filtered(&store, by(Some("FPGA"), None)).await, ["h1", "h2"]);
        assert!(filtered(&store, by(Some("GPU"), None)).await.is_empty());
        assert_eq!(
            filtered(&store, by(None, Some(HealthFilter::NotOk))).await,
            ["h2"]
        );
        assert_eq!(
            filtered(&store, by(Some("FPGA"), Some(HealthFilter::Ok))).await,
            ["h1"]
        );
        assert!(filtered(&store, by(None, Some(HealthFilter::Vanished)))
            .await
            .is_empty());

        // History: first reported, then unhealthy with the reason; healthy again.
        let kinds = |h: &[history::Event]| -> Vec<(String, String)> {
            h.iter()
                .map(|e| (e.kind.clone(), e.detail.clone()))
                .collect()
        };
        let h = history_of(&store, "h2").await;
        assert_eq!(h.len(), 2, "{h:?}");
        assert!(h.iter().all(|e| e.device_uuid == sick.uuid), "{h:?}");
        assert_eq!(h[0].kind, "health");
        assert_eq!(h[0].detail, "unhealthy: 2 fatal PCIe AER error(s)");
        assert_eq!(h[1].kind, "report");
        assert!(h[1].detail.starts_with("first reported: FPGA"), "{h:?}");
        assert_eq!(h[1].hostname, "h2");
        store
            .write(|tx| {
                Box::pin(async move {
                    report::replace_host(tx, "h2", &[fake_device("h2")], false).await
                })
            })
            .await
            .unwrap();
        let healed = device_of(&store, "h2").await;
        assert_eq!((healed.health.as_str(), healed.health_reason), ("ok", None));
        assert!(healed.health_since.unwrap() >= since);
        let h = history_of(&store, "h2").await;
        assert_eq!(kinds(&h[..1]), [("health".to_owned(), "ok".to_owned())]);
        // A report that changes nothing about the device records nothing.
        assert_eq!(h.len(), 3, "{h:?}");

        // Bounded: each insert keeps the newest KEEP of the device's rows.
        let id = sick.uuid.clone();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let rp = report::provider_uuid("h2_FakeDevice");
                    for i in 0..history::KEEP + 5 {
                        history::record_provider(
                            tx,
                            &rp,
                            history::Kind::Bind,
                            &format!("bind {i}"),
                        )
                        .await?;
                    }
                    Ok(())
                })
            })
            .await
            .unwrap();
        let h = history_of(&store, "h2").await;
        assert_eq!(h.len() as i64, history::KEEP);
        assert!(h.iter().all(|e| e.device_uuid == id));
        assert_eq!(h[0].detail, format!("bind {}", history::KEEP + 4));
        assert_eq!(h.last().unwrap().detail, "bind 5");
        assert_eq!(
            h[0].rp_uuid.as_deref(),
            Some(report::provider_uuid("h2_FakeDevice").as_str())
        );
        // The other device's history is its own.
        assert_eq!(history_of(&store, "h1").await.len(), 1);
        // The host's page (from a provider without a device) shows the history of
        // every device of the host: here its one device's.
        let root = device_page(&store, "h2").await.tree.root().uuid.clone();
        let whole = store.estate().host(&root, 1000).await.unwrap().unwrap();
        assert_eq!(whole.history, h);

        // A device no longer reported while in use: vanished, and the server says why.
        let held = ConsumerWrite {
            uuid: VM.into(),
            project_id: Some("p".into()),
            user_id: Some("u".into()),
            check_generation: true,
            generation: None,
            consumer_type: Some("INSTANCE".into()),
            allocations: vec![(
                report::provider_uuid("h1_FakeDevice"),
                vec![("FPGA".into(), 1)],
            )],
        };
        allocs::replace(&store, &[held], u32::MAX)
            .await
            .unwrap()
            .unwrap();
        store
            .write(|tx| Box::pin(async move { report::replace_host(tx, "h1", &[], false).await }))
            .await
            .unwrap();
        let gone = device_of(&store, "h1").await;
        assert_eq!(gone.health, "vanished");
        assert_eq!(gone.health_reason.as_deref(), Some(report::VANISHED_REASON));
        let h = history_of(&store, "h1").await;
        assert_eq!(h[0].kind, "health");
        assert!(
            h[0].detail.starts_with("vanished: no longer reported"),
            "{h:?}"
        );
        assert_eq!(
            filtered(&store, by(None, Some(HealthFilter::Vanished))).await,
            ["h1"]
        );
    })
    .await;
}
