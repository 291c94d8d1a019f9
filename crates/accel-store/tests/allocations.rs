//! Allocation writes on SQLite and PostgreSQL: capacity, generations, consumers, and
//! concurrent writers that must never over-allocate.

use accel_core::capacity::Limits;
use accel_store::placement::allocations::{
    self as allocs, ConsumerWrite, InvalidInventory, Refusable, Refusal,
};
use accel_store::placement::inventories::{self, Inventory};
use accel_store::placement::providers;
use accel_store::testing::each_backend;
use accel_store::Store;

const RP: &str = "5c3d1a2b-0e4f-4a5b-8c6d-7e8f9a0b1c2d";
const A: &str = "a1a1a1a1-0000-4000-8000-000000000001";
const B: &str = "b2b2b2b2-0000-4000-8000-000000000002";

/// A provider with `total` VCPU (class id 0).
async fn provider(store: &Store, total: i64) {
    store
        .write(move |tx| {
            Box::pin(async move {
                let rp = providers::create(tx, RP, "rp", None).await?;
                let inv = Inventory::new(0, "VCPU".into(), Limits::whole(total));
                inventories::replace(tx, &rp, &[inv]).await?;
                Ok(())
            })
        })
        .await
        .unwrap();
}

fn vcpu(consumer: &str, n: i64, generation: Option<i64>) -> ConsumerWrite {
    ConsumerWrite {
        uuid: consumer.into(),
        project_id: Some("p".into()),
        user_id: Some("u".into()),
        check_generation: true,
        generation,
        consumer_type: Some("INSTANCE".into()),
        allocations: if n > 0 {
            vec![(RP.into(), vec![("VCPU".into(), n)])]
        } else {
            vec![]
        },
    }
}

async fn write(store: &Store, w: Vec<ConsumerWrite>) -> Refusable<(), Refusal> {
    store.allocations().replace(&w, u32::MAX).await
}

async fn state(store: &Store) -> (i64, i64) {
    store
        .read(|tx| {
            Box::pin(async move {
                let rp = providers::require(tx, RP).await?;
                let used = allocs::provider_usages(tx, rp.id).await?;
                Ok((rp.generation, used.first().map(|u| u.1).unwrap_or(0)))
            })
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn capacity_generations_and_consumers() {
    each_backend(|store| async move {
        provider(&store, 4).await;
        assert_eq!(state(&store).await, (1, 0));
        write(&store, vec![vcpu(A, 3, None)])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state(&store).await, (2, 3));

        // Over capacity: refused, nothing written.
        let r = write(&store, vec![vcpu(B, 2, None)]).await.unwrap();
        assert_eq!(
            r,
            Err(Refusal::InvalidInventory(InvalidInventory::Exceeds {
                class: "VCPU".into(),
                provider: RP.into(),
                capacity: true
            }))
        );
        assert_eq!(state(&store).await, (2, 3));

        // Wrong consumer generation.
        let r = write(&store, vec![vcpu(A, 1, None)]).await.unwrap();
        assert_eq!(
            r,
            Err(Refusal::ConsumerGeneration {
                expected: Some(1),
                got: None
            })
        );

        // Replacing A's own allocation frees its old usage first.
        write(&store, vec![vcpu(A, 4, Some(1))])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state(&store).await, (3, 4));

        // Both consumers in one write: A shrinks, B fits in what A gave back.
        write(&store, vec![vcpu(A, 2, Some(2)), vcpu(B, 2, None)])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state(&store).await, (4, 4));

        // Emptying A bumps the provider and deletes the consumer.
        write(&store, vec![vcpu(A, 0, Some(3))])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state(&store).await, (5, 2));
        let a = A.to_owned();
        let rows = store
            .read(move |tx| Box::pin(async move { allocs::for_consumer(tx, &a).await }))
            .await
            .unwrap();
        assert!(rows.is_empty());
        let r = write(&store, vec![vcpu(A, 1, None)]).await.unwrap();
        assert_eq!(r, Ok(()));

        // Unknown class and provider.
        let mut w = vcpu(B, 1, Some(1));
        w.allocations[0].1[0].0 = "CUSTOM_NOPE".into();
        let r = write(&store, vec![w]).await.unwrap();
        assert_eq!(r, Err(Refusal::NoSuchClass("CUSTOM_NOPE".into())));
        let mut w = vcpu(B, 1, Some(1));
        w.allocations[0].0 = A.into();
        let r = write(&store, vec![w]).await.unwrap();
        assert_eq!(r, Err(Refusal::NoSuchProvider(A.into())));
    })
    .await;
}

#[tokio::test]
async fn concurrent_writers_never_over_allocate() {
    each_backend(|store| async move {
        provider(&store, 10).await;
        let mut tasks = Vec::new();
        for i in 0..40 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let c = format!("c0c0c0c0-0000-4000-8000-{i:012}");
                write(&store, vec![vcpu(&c, 1, None)])
                    .await
                    .unwrap()
                    .is_ok()
            }));
        }
        let mut ok = 0;
        for t in tasks {
            ok += usize::from(t.await.unwrap());
        }
        assert_eq!(ok, 10);
        let (generation, used) = state(&store).await;
        assert_eq!(used, 10);
        assert_eq!(generation, 11);
    })
    .await;
}

/// A line of usage totals as the test writes it: (type key, class, sum, consumers).
type Line = (Option<&'static str>, &'static str, i64, i64);

/// `GET /usages`' totals: PostgreSQL and MySQL answer them with a rolled-up
/// statement, SQLite with the portable one; all must say the same for every filter.
#[tokio::test]
async fn usage_totals_by_project_user_and_consumer_type() {
    use allocs::TypeFilter::{All, ByType, Ungrouped, Unknown};
    each_backend(|store| async move {
        store
            .write(move |tx| {
                Box::pin(async move {
                    let rp = providers::create(tx, RP, "rp", None).await?;
                    let vcpu = Inventory::new(0, "VCPU".into(), Limits::whole(100));
                    let mem = Inventory::new(1, "MEMORY_MB".into(), Limits::whole(4096));
                    inventories::replace(tx, &rp, &[vcpu, mem]).await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        let consumer =
            |n: u8, project: &str, user: &str, kind: Option<&str>, res: &[(&str, i64)]| {
                ConsumerWrite {
                    uuid: format!("c0c0c0c0-0000-4000-8000-00000000000{n}"),
                    project_id: Some(project.into()),
                    user_id: Some(user.into()),
                    check_generation: true,
                    generation: None,
                    consumer_type: kind.map(str::to_owned),
                    allocations: vec![(
                        RP.into(),
                        res.iter().map(|(rc, n)| (rc.to_string(), *n)).collect(),
                    )],
                }
            };
        let writes = vec![
            consumer(
                1,
                "p",
                "u1",
                Some("INSTANCE"),
                &[("VCPU", 2), ("MEMORY_MB", 512)],
            ),
            consumer(2, "p", "u2", Some("INSTANCE"), &[("VCPU", 1)]),
            consumer(3, "p", "u1", Some("MIGRATION"), &[("VCPU", 4)]),
            consumer(4, "p", "u1", None, &[("VCPU", 3)]),
            consumer(5, "q", "u1", Some("INSTANCE"), &[("VCPU", 8)]),
        ];
        write(&store, writes).await.unwrap().unwrap();
        let p_id: i64 = store
            .read_one(|tx| {
                Box::pin(async move {
                    Ok(
                        sqlx::query_scalar("SELECT id FROM projects WHERE external_id = 'p'")
                            .fetch_one(&mut *tx)
                            .await?,
                    )
                })
            })
            .await
            .unwrap();
        let totals = |user: Option<&'static str>, f: allocs::TypeFilter| {
            let store = store.clone();
            async move {
                let asked = f.clone();
                let mut got = store
                    .read_one(move |tx| {
                        Box::pin(async move { allocs::totals(tx, "p", user, &f).await })
                    })
                    .await
                    .unwrap();
                // The project is named with any line, and only then.
                let named = if got.lines.is_empty() {
                    None
                } else {
                    Some(p_id)
                };
                assert_eq!(got.project, named, "{user:?} {asked:?}");
                // PostgreSQL sorts an untyped group last, the others first.
                got.lines.sort();
                got.lines
            }
        };
        // (type key, class, sum, consumers of the type) per line, as sorted.
        let ungrouped = [(None, "VCPU", 10, 0), (None, "MEMORY_MB", 512, 0)];
        let all = [
            (Some("all"), "VCPU", 10, 4),
            (Some("all"), "MEMORY_MB", 512, 4),
        ];
        let by_type = [
            (Some("INSTANCE"), "MEMORY_MB", 512, 2),
            (Some("INSTANCE"), "VCPU", 3, 2),
            (Some("MIGRATION"), "VCPU", 4, 1),
            (Some("unknown"), "VCPU", 3, 1),
        ];
        let of_u1 = [
            (Some("INSTANCE"), "MEMORY_MB", 512, 1),
            (Some("INSTANCE"), "VCPU", 2, 1),
            (Some("MIGRATION"), "VCPU", 4, 1),
            (Some("unknown"), "VCPU", 3, 1),
        ];
        let cases: Vec<(Option<&'static str>, allocs::TypeFilter, &[Line])> = vec![
            (None, Ungrouped, &ungrouped),
            (None, All, &all),
            (None, ByType(None), &by_type),
            (None, ByType(Some("INSTANCE".into())), &by_type[..2]),
            (None, Unknown, &by_type[3..]),
            (Some("u1"), ByType(None), &of_u1),
            (Some("u3"), All, &[]),
        ];
        for (user, filter, lines) in cases {
            let mut expected: Vec<allocs::TotalUsage> = lines
                .iter()
                .map(|(t, rc, n, k)| (t.map(str::to_owned), rc.to_string(), *n, *k))
                .collect();
            expected.sort();
            assert_eq!(
                totals(user, filter.clone()).await,
                expected,
                "{user:?} {filter:?}"
            );
        }
        let nobody = store
            .read_one(|tx| Box::pin(async move { allocs::totals(tx, "r", None, &All).await }))
            .await
            .unwrap();
        assert_eq!(nobody, allocs::Totals::default());
    })
    .await;
}
