//! The accelerator store suite, run against SQLite and PostgreSQL alike.

use accel_core::accelerator::{fake_device, ArqState, DeviceProfile, DeviceStatus};
use accel_store::accelerator::arqs::{self, Binding, Filter};
use accel_store::accelerator::refused::{Key, Kind};
use accel_store::accelerator::{hardware, profiles, report, Refused, Scope};
use accel_store::placement::{inventories, providers, traits};
use accel_store::testing::each_backend;
use accel_store::{Store, StoreError};

/// The accelerator refusal `r` failed with, if that is how it failed.
fn refusal<T>(r: &Result<T, StoreError>) -> Option<&Refused> {
    match r {
        Err(StoreError::Refused(accel_store::Refused::Accelerator(r))) => Some(r),
        _ => None,
    }
}

fn profile(name: &str, groups: &[&[(&str, &str)]]) -> DeviceProfile {
    let groups = groups
        .iter()
        .map(|g| {
            g.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    DeviceProfile::parse(name, Some("d".into()), None, groups).unwrap()
}

async fn create_profile(store: &Store, p: DeviceProfile) -> Result<profiles::Profile, StoreError> {
    store.profiles().create(&p).await
}

async fn create_arqs(store: &Store, name: &str, project: &str) -> Vec<arqs::Arq> {
    let (name, project) = (name.to_owned(), project.to_owned());
    store
        .write(move |tx| {
            Box::pin(async move {
                let p = profiles::by_name(tx, &name).await?.unwrap();
                arqs::create_for_profile(tx, &p, None, Some(&project)).await
            })
        })
        .await
        .unwrap()
}

fn project(p: &str) -> Scope {
    Scope::Project(p.to_owned())
}

#[tokio::test]
async fn profiles_keep_group_order_and_refuse_duplicates() {
    each_backend(|store| async move {
        let p = create_profile(
            &store,
            profile(
                "dp1",
                &[
                    &[("trait:CUSTOM_B", "required"), ("resources:FPGA", "2")],
                    &[("resources:PGPU", "1")],
                ],
            ),
        )
        .await
        .unwrap();
        assert_eq!(p.groups.len(), 2);
        assert_eq!(
            p.groups[0].entries()[0].0,
            "trait:CUSTOM_B",
            "key order kept"
        );
        assert_eq!(p.stamps.updated, None);
        let dup = create_profile(&store, profile("dp1", &[&[("resources:FPGA", "1")]])).await;
        assert!(matches!(refusal(&dup), Some(Refused::ProfileNameTaken { name }) if name == "dp1"));
        let mut same_uuid = profile("dp2", &[&[("resources:FPGA", "1")]]);
        same_uuid.uuid = Some(p.uuid.parse().unwrap());
        let dup = create_profile(&store, same_uuid).await;
        assert!(
            matches!(refusal(&dup), Some(Refused::ProfileUuidTaken { uuid }) if *uuid == p.uuid)
        );
        create_profile(&store, profile("dp3", &[&[("resources:FPGA", "1")]]))
            .await
            .unwrap();
        let named = store
            .read(|tx| {
                Box::pin(async move {
                    profiles::list(tx, Some(&["dp3".to_owned(), "nope".to_owned()])).await
                })
            })
            .await
            .unwrap();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].name, "dp3");
    })
    .await;
}

#[tokio::test]
async fn arqs_are_counted_scoped_and_block_profile_delete() {
    each_backend(|store| async move {
        create_profile(
            &store,
            profile(
                "dp",
                &[
                    &[("resources:FPGA", "2"), ("resources:CUSTOM_X", "1")],
                    &[("resources:PGPU", "1")],
                ],
            ),
        )
        .await
        .unwrap();
        let mine = create_arqs(&store, "dp", "p1").await;
        assert_eq!(mine.len(), 4);
        let groups: Vec<i64> = mine.iter().map(|a| a.device_profile_group_id).collect();
        assert_eq!(groups, [0, 0, 0, 1]);
        assert!(mine
            .iter()
            .all(|a| a.state == ArqState::Initial && a.device_profile_name == "dp"));
        let theirs = create_arqs(&store, "dp", "p2").await;

        let seen = store
            .read(|tx| {
                Box::pin(async move { arqs::list(tx, &project("p1"), &Filter::default()).await })
            })
            .await
            .unwrap();
        assert_eq!(seen.len(), 4, "a project sees only its own ARQs");
        let all = store
            .read(|tx| {
                Box::pin(async move { arqs::list(tx, &Scope::All, &Filter::default()).await })
            })
            .await
            .unwrap();
        assert_eq!(all.len(), 8);
        let other = theirs[0].uuid.clone();
        let hidden = store
            .read(move |tx| Box::pin(async move { arqs::get(tx, &project("p1"), &other).await }))
            .await
            .unwrap();
        assert!(hidden.is_none());

        let in_use = store
            .write(|tx| {
                Box::pin(async move {
                    let p = profiles::by_name(tx, "dp").await?.unwrap();
                    profiles::delete(tx, &p).await
                })
            })
            .await;
        assert!(matches!(
            refusal(&in_use),
            Some(Refused::ProfileInUse { name, arqs }) if name == "dp" && *arqs > 0
        ));

        // A batch with one unknown uuid deletes nothing.
        let batch = vec![mine[0].uuid.clone(), theirs[0].uuid.clone()];
        let r = store
            .arqs()
            .delete_listed(&project("p1"), &batch, true)
            .await;
        assert_eq!(
            refusal(&r),
            Some(&Refused::NotFound(
                Kind::Arq,
                Key::Uuid(theirs[0].uuid.clone())
            ))
        );
        let still = store
            .read(|tx| {
                Box::pin(async move { arqs::list(tx, &project("p1"), &Filter::default()).await })
            })
            .await
            .unwrap();
        assert_eq!(still.len(), 4);
    })
    .await;
}

#[tokio::test]
async fn bind_start_persists_a_job_and_instance_filters_work() {
    each_backend(|store| async move {
        create_profile(&store, profile("dp", &[&[("resources:FPGA", "2")]]))
            .await
            .unwrap();
        let a = create_arqs(&store, "dp", "p1").await;
        let instance = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e".to_owned();
        let binding = Binding {
            hostname: "host1".into(),
            device_rp_uuid: report::provider_uuid("host1_FakeDevice"),
            instance_uuid: instance.clone(),
            project_id: None,
        };
        let (u0, b0) = (a[0].uuid.clone(), binding.clone());
        let started = store
            .write(move |tx| {
                Box::pin(async move { arqs::start_bind(tx, &project("p1"), &u0, &b0, 1000).await })
            })
            .await
            .unwrap();
        assert_eq!(started.state, ArqState::BindStarted);
        assert_eq!(started.instance_uuid.as_deref(), Some(instance.as_str()));
        assert_eq!(started.project_id.as_deref(), Some("p1"));
        // Bound to an instance, it goes only when the caller may delete bound ARQs (Nova).
        let r = store
            .arqs()
            .delete_listed(&project("p1"), std::slice::from_ref(&a[0].uuid), false)
            .await;
        assert_eq!(
            refusal(&r),
            Some(&Refused::ArqBound {
                uuid: a[0].uuid.clone(),
                instance: instance.clone()
            })
        );
        let u0 = a[0].uuid.clone();
        let job = store
            .read(move |tx| Box::pin(async move { arqs::bind_job(tx, &u0).await }))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (job.state.as_str(), job.deadline, job.attempts),
            ("pending", 1000, 0)
        );

        // A second bind of the same ARQ is a bad state.
        let (u0, b0) = (a[0].uuid.clone(), binding.clone());
        let again = store
            .write(move |tx| {
                Box::pin(async move { arqs::start_bind(tx, &project("p1"), &u0, &b0, 1000).await })
            })
            .await;
        assert!(matches!(
            refusal(&again),
            Some(Refused::ArqBadState {
                state: ArqState::BindStarted,
                ..
            })
        ));

        let i = instance.clone();
        let by_instance = store
            .read(move |tx| {
                Box::pin(async move {
                    arqs::list(
                        tx,
                        &Scope::All,
                        &Filter {
                            instance: Some(i),
                            resolved_only: false,
                        },
                    )
                    .await
                })
            })
            .await
            .unwrap();
        assert_eq!(by_instance.len(), 1);
        assert!(
            !by_instance[0].state.is_resolved(),
            "BindStarted: not resolved"
        );

        let u0 = a[0].uuid.clone();
        let unbound = store
            .write(move |tx| Box::pin(async move { arqs::unbind(tx, &project("p1"), &u0).await }))
            .await
            .unwrap();
        assert_eq!(unbound.state, ArqState::Unbound);
        assert_eq!(unbound.instance_uuid, None);

        // Delete by instance is idempotent and scoped.
        for _ in 0..2 {
            let i = instance.clone();
            store
                .write(move |tx| {
                    Box::pin(async move { arqs::delete_by_instance(tx, &project("p2"), &i).await })
                })
                .await
                .unwrap();
        }
    })
    .await;
}

async fn providers_named(store: &Store, name: &str) -> Vec<providers::Provider> {
    let name = name.to_owned();
    store
        .read(move |tx| {
            Box::pin(async move {
                providers::list(
                    tx,
                    &providers::Filter {
                        name: Some(name),
                        ..Default::default()
                    },
                )
                .await
            })
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn fake_report_fills_records_and_placement() {
    each_backend(|store| async move {
        let refused = store
            .write(|tx| {
                Box::pin(async move {
                    report::replace_host(tx, "host1", &[fake_device("host1")], false).await
                })
            })
            .await;
        assert!(
            matches!(refusal(&refused), Some(Refused::NoComputeNode { host, .. }) if host == "host1"),
            "no compute node provider yet"
        );
        for round in 0..2 {
            let s = store
                .write(|tx| {
                    Box::pin(async move {
                        report::replace_host(tx, "host1", &[fake_device("host1")], true).await
                    })
                })
                .await
                .unwrap();
            assert_eq!(s.compute_node_created, round == 0);
            assert_eq!(
                (s.devices_added, s.devices_kept),
                if round == 0 { (1, 0) } else { (0, 1) }
            );
        }
        let devices = store
            .read(|tx| Box::pin(async move { hardware::list_devices(tx, &[]).await }))
            .await
            .unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].hostname, "host1");
        let deps = store
            .read(|tx| Box::pin(async move { hardware::list_deployables(tx, &[]).await }))
            .await
            .unwrap();
        assert_eq!(deps.len(), 1);
        assert_eq!(deps[0].name, "host1_FakeDevice");
        let dep_id = deps[0].id;
        let handles = store
            .read(move |tx| Box::pin(async move { hardware::handles_of(tx, dep_id).await }))
            .await
            .unwrap();
        assert_eq!(handles.len(), 16);

        let compute = &providers_named(&store, "host1").await[0];
        let child = &providers_named(&store, "host1_FakeDevice").await[0];
        assert_eq!(child.uuid, report::provider_uuid("host1_FakeDevice"));
        assert_eq!(child.parent_uuid.as_deref(), Some(compute.uuid.as_str()));
        let id = child.id;
        let (inv, tr) = store
            .read(move |tx| {
                Box::pin(async move {
                    Ok((
                        inventories::list(tx, id).await?,
                        traits::for_provider(tx, id).await?,
                    ))
                })
            })
            .await
            .unwrap();
        assert_eq!(inv.len(), 1);
        assert_eq!(
            (
                inv[0].rc_name.as_str(),
                inv[0].limits.total,
                inv[0].limits.max_unit,
                inv[0].limits.reserved
            ),
            ("FPGA", 16, 16, 0)
        );
        assert_eq!(
            tr.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["CUSTOM_FAKE_DEVICE"]
        );
        let gen = child.generation;
        assert_eq!(
            providers_named(&store, "host1_FakeDevice").await[0].generation,
            gen,
            "a repeated report changes nothing"
        );

        // Disabling reserves the whole inventory.
        let uuid = devices[0].uuid.clone();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let d =
                        hardware::set_device_status(tx, &uuid, DeviceStatus::Maintaining).await?;
                    report::apply_status(tx, &d).await
                })
            })
            .await
            .unwrap();
        let inv = store
            .read(move |tx| Box::pin(async move { inventories::list(tx, id).await }))
            .await
            .unwrap();
        assert_eq!(inv[0].limits.reserved, 16);

        // An empty report removes the host's records and device providers.
        let s = store
            .write(|tx| {
                Box::pin(async move { report::replace_host(tx, "host1", &[], false).await })
            })
            .await
            .unwrap();
        assert_eq!(s.devices_removed, 1);
        assert!(providers_named(&store, "host1_FakeDevice").await.is_empty());
        assert_eq!(
            providers_named(&store, "host1").await.len(),
            1,
            "the compute node stays"
        );
    })
    .await;
}

#[tokio::test]
async fn attributes_crud() {
    each_backend(|store| async move {
        store
            .write(|tx| {
                Box::pin(
                    async move { report::replace_host(tx, "h", &[fake_device("h")], true).await },
                )
            })
            .await
            .unwrap();
        let dep = store
            .read(|tx| Box::pin(async move { hardware::list_deployables(tx, &[]).await }))
            .await
            .unwrap()
            .remove(0);
        let id = dep.id;
        let a = store
            .write(move |tx| {
                Box::pin(async move { hardware::create_attribute(tx, id, "k", "v").await })
            })
            .await
            .unwrap();
        let listed = store
            .read(move |tx| {
                Box::pin(async move { hardware::list_attributes(tx, Some(id), Some("k")).await })
            })
            .await
            .unwrap();
        assert_eq!(listed, vec![a.clone()]);
        let missing = store
            .write(|tx| {
                Box::pin(async move { hardware::create_attribute(tx, 999_999, "k", "v").await })
            })
            .await;
        assert_eq!(
            refusal(&missing),
            Some(&Refused::NotFound(Kind::Deployable, Key::Id(999_999)))
        );
        let u = a.uuid.clone();
        store
            .write(move |tx| Box::pin(async move { hardware::delete_attribute(tx, &u).await }))
            .await
            .unwrap();
        let u = a.uuid.clone();
        let gone = store
            .write(move |tx| Box::pin(async move { hardware::delete_attribute(tx, &u).await }))
            .await;
        assert!(matches!(
            refusal(&gone),
            Some(Refused::NotFound(Kind::Attribute, _))
        ));
    })
    .await;
}

#[tokio::test]
async fn push_outbox_keeps_a_host_pending_until_its_latest_change_is_pushed() {
    use accel_store::accelerator::pushes;
    each_backend(|store| async move {
        store
            .write(|tx| {
                Box::pin(async move {
                    report::replace_host(tx, "h1", &[fake_device("h1")], true).await?;
                    pushes::mark(tx, "h1", 100).await
                })
            })
            .await
            .unwrap();
        let due = |now: i64| {
            let store = store.clone();
            async move {
                store
                    .read(move |tx| Box::pin(async move { pushes::due(tx, now, 10).await }))
                    .await
                    .unwrap()
            }
        };
        assert_eq!(due(99).await, Vec::<String>::new());
        assert_eq!(due(100).await, ["h1"]);
        let claim = |owner: &'static str, now: i64| {
            let store = store.clone();
            async move {
                store
                    .write(move |tx| {
                        Box::pin(async move { pushes::claim(tx, "h1", owner, now, now + 60).await })
                    })
                    .await
                    .unwrap()
            }
        };
        let c = claim("a", 100).await.unwrap();
        assert_eq!((c.version, c.attempts), (1, 0));
        assert!(claim("b", 101).await.is_none(), "leased");
        // A change while the push runs: the older version's success leaves it pending.
        store
            .write(|tx| Box::pin(async move { pushes::mark(tx, "h1", 102).await }))
            .await
            .unwrap();
        let ok = store
            .write(move |tx| {
                Box::pin(async move { pushes::succeeded(tx, "h1", "a", c.version, 103).await })
            })
            .await
            .unwrap();
        assert!(ok);
        let row = store
            .read(|tx| Box::pin(async move { pushes::get(tx, "h1").await }))
            .await
            .unwrap()
            .unwrap();
        assert!(row.pending() && row.owner.is_none(), "{row:?}");
        assert_eq!(due(103).await, ["h1"]);
        // A failure backs off; only the owner records results.
        let c = claim("b", 104).await.unwrap();
        assert_eq!(c.version, 2);
        let stale = store
            .write(|tx| {
                Box::pin(async move { pushes::failed(tx, "h1", "a", 200, "late", 104).await })
            })
            .await
            .unwrap();
        assert!(!stale);
        store
            .write(|tx| {
                Box::pin(async move { pushes::failed(tx, "h1", "b", 110, "down", 105).await })
            })
            .await
            .unwrap();
        assert_eq!(due(109).await, Vec::<String>::new());
        let c = claim("b", 110).await.unwrap();
        assert_eq!(c.attempts, 1);
        store
            .write(move |tx| {
                Box::pin(async move { pushes::succeeded(tx, "h1", "b", c.version, 111).await })
            })
            .await
            .unwrap();
        assert_eq!(due(1000).await, Vec::<String>::new());
        // A restarted server checks every host once.
        let n = store
            .write(|tx| Box::pin(async move { pushes::mark_all(tx, 1000).await }))
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(due(1000).await, ["h1"]);
        let tree = store
            .read(|tx| Box::pin(async move { pushes::local_tree(tx, "h1").await }))
            .await
            .unwrap();
        assert_eq!(tree.compute_node.as_ref().unwrap().1, "h1");
        assert_eq!(tree.providers.len(), 1);
        assert_eq!(tree.providers[0].name, "h1_FakeDevice");
        assert_eq!(tree.providers[0].parent, None);
        assert_eq!(tree.providers[0].inventories[0].class, "FPGA");
    })
    .await;
}

#[tokio::test]
async fn a_patch_binds_all_its_arqs_or_none_and_an_unbind_later_in_it_drops_the_job() {
    each_backend(|store| async move {
        create_profile(&store, profile("dp", &[&[("resources:FPGA", "2")]]))
            .await
            .unwrap();
        report_fake_host(&store, "host1").await;
        let a = create_arqs(&store, "dp", "p1").await;
        let bind = |instance: &str| {
            arqs::Patch::Bind(Binding {
                hostname: "host1".into(),
                device_rp_uuid: report::provider_uuid("host1_FakeDevice"),
                instance_uuid: instance.to_owned(),
                project_id: None,
            })
        };
        let inst = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e";
        let missing = "00000000-0000-4000-8000-000000000001".to_owned();
        // An unknown ARQ after a known one: 404 naming it, and the first is untouched.
        let plan = vec![
            (a[0].uuid.clone(), bind(inst)),
            (missing.clone(), bind(inst)),
        ];
        let r = patch(&store, plan).await;
        assert_eq!(
            refusal(&r),
            Some(&Refused::NotFound(Kind::Arq, Key::Uuid(missing.clone()))),
            "{r:?}"
        );
        assert_eq!(
            state_and_job(&store, &a[0].uuid).await,
            (ArqState::Initial, None)
        );

        // Both ARQs in one patch: both BindStarted, each with its pending job.
        let plan = vec![
            (a[0].uuid.clone(), bind(inst)),
            (a[1].uuid.clone(), bind(inst)),
        ];
        patch(&store, plan).await.unwrap();
        for arq in &a {
            let (state, job) = state_and_job(&store, &arq.uuid).await;
            assert_eq!(state, ArqState::BindStarted);
            assert_eq!(job.as_deref(), Some("pending"));
        }

        // The same ARQ twice, bind then unbind (only a store caller can say so): the
        // unbind drops the job the bind wrote.
        let plan = vec![
            (a[0].uuid.clone(), arqs::Patch::Unbind),
            (a[0].uuid.clone(), bind(inst)),
            (a[0].uuid.clone(), arqs::Patch::Unbind),
        ];
        patch(&store, plan).await.unwrap();
        assert_eq!(
            state_and_job(&store, &a[0].uuid).await,
            (ArqState::Unbound, None)
        );
    })
    .await;
}

/// Project p1's patch, due by 1000; a bind refusal is worded as its debug text.
async fn patch(
    store: &Store,
    plan: Vec<(String, arqs::Patch)>,
) -> Result<Option<accel_store::accelerator::refusals::Refused>, StoreError> {
    store
        .arqs()
        .patch(&project("p1"), plan, 1000, |r| format!("{r:?}"))
        .await
}

async fn report_fake_host(store: &Store, host: &str) {
    let (host, dev) = (host.to_owned(), fake_device(host));
    store
        .write(move |tx| {
            Box::pin(async move { report::replace_host(tx, &host, &[dev], true).await })
        })
        .await
        .unwrap();
}

/// The ARQ's state and its bind job's state, if it has one.
async fn state_and_job(store: &Store, uuid: &str) -> (ArqState, Option<String>) {
    let u = uuid.to_owned();
    store
        .read(move |tx| {
            Box::pin(async move {
                let arq = arqs::require(tx, &Scope::All, &u).await?;
                let job = arqs::bind_job(tx, &u).await?;
                Ok((arq.state, job.map(|j| j.state.as_str().to_owned())))
            })
        })
        .await
        .unwrap()
}

/// Many hosts' first reports at once, all naming a custom class no one has created
/// yet: each is applied. (On PostgreSQL the losers were refused "Conflicting resource
/// class already exists": their insert waited for the winner, then found the name.)
#[tokio::test]
async fn first_reports_racing_for_a_new_class_all_apply() {
    each_backend(|store| async move {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let host = format!("race{i}");
                let mut d = fake_device(&host);
                for dep in &mut d.deployables {
                    for (k, v) in &mut dep.attributes {
                        if k == "rc" {
                            *v = "CUSTOM_ACCELERATOR_RACE".into();
                        }
                    }
                }
                store
                    .write(move |tx| {
                        Box::pin(async move { report::replace_host(tx, &host, &[d], true).await })
                    })
                    .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    })
    .await;
}
