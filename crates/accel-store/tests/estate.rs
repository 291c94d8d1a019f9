//! The console's estate reads on every backend: hosts paged and searched in SQL,
//! trees parents first with usage, consumers with their allocations.

use accel_core::capacity::Limits;
use accel_store::estate::{activity, hosts, Window};
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
    let q = q.map(str::to_owned);
    let p = store
        .read(move |tx| {
            Box::pin(async move { hosts::page(tx, q.as_deref(), Window { offset, limit }).await })
        })
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

        // The tree from any of its providers: parents first, with depth and usage.
        let tree = store
            .read(|tx| Box::pin(async move { hosts::tree(tx, &uuid(12)).await }))
            .await
            .unwrap()
            .unwrap();
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
        let none = store
            .read(|tx| Box::pin(async move { hosts::tree(tx, &uuid(999)).await }))
            .await
            .unwrap();
        assert!(none.is_none());

        // The consumer with its allocation, found by the host it allocates from.
        let consumers = store
            .read(|tx| {
                Box::pin(async move {
                    activity::consumers(
                        tx,
                        Some("host-1_dev"),
                        Window {
                            offset: 0,
                            limit: 50,
                        },
                    )
                    .await
                })
            })
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
