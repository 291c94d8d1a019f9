//! The durable asynchronous bind: the bind worker, the Nova event outbox and sender,
//! restarts and replicas. Each test runs on SQLite (a file, so a restarted server
//! reopens it) and on a fresh PostgreSQL database; Nova is a small recording server.

mod common;

use accel_core::accelerator::{fake_device, ArqState, DeviceProfile};
use accel_server::accelerator::binder::{self, Binder, EventSender, WorkerConfig};
use accel_store::accelerator::arqs::{self, Binding};
use accel_store::accelerator::events::Delivery;
use accel_store::accelerator::{binds, events, profiles, report, Scope};
use accel_store::Store;
use common::accel::{handles_in_use, workers, FakeNova, Server, TempDb};
use common::BACKENDS;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn instance() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn fake_rp(host: &str) -> String {
    report::provider_uuid(&format!("{host}_FakeDevice"))
}

/// Waits until the instance's event reached a final delivery state.
async fn wait_delivery(server: &Server, instance: &str) -> events::NovaEvent {
    let what = format!("the event of {instance} to leave pending");
    common::eventually(Duration::from_secs(20), &what, || async {
        let evs = server.events_of(instance).await;
        match evs.iter().find(|e| e.delivery != Delivery::Pending) {
            Some(e) => {
                assert_eq!(evs.len(), 1, "one event row per resolution: {evs:?}");
                Ok(e.clone())
            }
            None => Err(format!("{evs:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn bind_binds_and_sends_one_completed_event_per_arq() {
    for backend in BACKENDS {
        let nova = FakeNova::start(true).await;
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        let server = Server::start(&url, Some("cn1"), Some(workers(Some(&nova)))).await;
        server
            .create_profile(
                "two-fpgas",
                json!([{"resources:FPGA": "2", "trait:CUSTOM_FAKE_DEVICE": "required"}]),
            )
            .await;
        let arqs = server.create_arqs("two-fpgas").await;
        assert_eq!(arqs.len(), 2);
        let inst = instance();
        server.bind(&arqs, "cn1", &fake_rp("cn1"), &inst).await;

        let resolved = server.wait_resolved(&inst).await;
        assert_eq!(resolved.len(), 2);
        let mut handles = Vec::new();
        for a in &resolved {
            assert_eq!(a["state"], "Bound", "{backend:?}: {a}");
            assert_eq!(a["attach_handle_type"], "TEST_PCI");
            assert_eq!(a["attach_handle_info"]["domain"], "0000");
            assert_eq!(a["hostname"], "cn1");
            assert_eq!(a["instance_uuid"], inst.as_str());
            handles.push(a["attach_handle_uuid"].as_str().unwrap().to_owned());
        }
        assert_ne!(handles[0], handles[1], "two ARQs, two handles");

        let ev = wait_delivery(&server, &inst).await;
        assert_eq!(ev.delivery, Delivery::Delivered);
        assert_eq!(ev.attempts, 1);
        let got = nova.events();
        assert_eq!(got.len(), 2, "{got:?}");
        for arq in &arqs {
            let matching: Vec<&Value> = got.iter().filter(|e| e["tag"] == arq.as_str()).collect();
            assert_eq!(matching.len(), 1, "one event for {arq}: {got:?}");
            assert_eq!(
                *matching[0],
                json!({"name": "accelerator-request-bound", "tag": arq,
                       "server_uuid": inst, "status": "completed"})
            );
        }
        assert_eq!(*nova.versions.lock().unwrap(), ["2.82"]);
        server.stop().await;
    }
}

#[tokio::test]
async fn bind_without_a_free_handle_fails_and_reports_failed() {
    for backend in BACKENDS {
        let nova = FakeNova::start(true).await;
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        let server = Server::start(&url, None, Some(workers(Some(&nova)))).await;
        // One device with a single attach handle; the profile asks for two.
        let mut dev = fake_device("cn2");
        dev.deployables[0].attach_handles.truncate(1);
        server
            .store
            .write(move |tx| {
                Box::pin(async move { report::replace_host(tx, "cn2", &[dev], true).await })
            })
            .await
            .unwrap();
        server
            .create_profile("two", json!([{"resources:FPGA": "2"}]))
            .await;
        let arqs = server.create_arqs("two").await;
        let inst = instance();
        // The bind PATCH refuses this bind itself now (tests/accelerator_api/
        // bind_refusals.rs); the worker's own check stays for a handle taken between
        // the PATCH and the job (a concurrent bind accepted at the same moment):
        // started here as the PATCH would, and the workers (polling every 100 ms) take it.
        let (started, i) = (arqs.clone(), inst.clone());
        server
            .store
            .write(move |tx| {
                Box::pin(async move {
                    for arq in &started {
                        start_bind(tx, arq, "cn2", &i, accel_store::now() + 60).await?;
                    }
                    Ok(())
                })
            })
            .await
            .unwrap();
        let resolved = server.wait_resolved(&inst).await;
        let states: Vec<&str> = resolved
            .iter()
            .map(|a| a["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["Bound", "BindFailed"], "{backend:?}");
        assert_eq!(resolved[1]["attach_handle_type"], "");
        assert_eq!(resolved[1]["attach_handle_uuid"], Value::Null);

        let ev = wait_delivery(&server, &inst).await;
        assert_eq!(ev.delivery, Delivery::Delivered);
        let got = nova.events();
        let status_of = |arq: &str| {
            got.iter()
                .find(|e| e["tag"] == arq)
                .map(|e| e["status"].as_str().unwrap().to_owned())
        };
        assert_eq!(got.len(), 2);
        assert_eq!(
            status_of(resolved[0]["uuid"].as_str().unwrap()).as_deref(),
            Some("completed")
        );
        assert_eq!(
            status_of(resolved[1]["uuid"].as_str().unwrap()).as_deref(),
            Some("failed")
        );
        let job = {
            let a = arqs_job(&server.store, resolved[1]["uuid"].as_str().unwrap()).await;
            a.unwrap()
        };
        assert_eq!(job.state.as_str(), "failed");
        assert!(job.error.unwrap().contains("no free attach handle"));
        server.stop().await;
    }
}

async fn arqs_job(store: &Store, arq: &str) -> Option<binds::Job> {
    let a = arq.to_owned();
    store
        .read(move |tx| Box::pin(async move { binds::job_of(tx, &a).await }))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_restarted_server_finishes_the_job_and_retries_the_event() {
    for backend in BACKENDS {
        let nova = FakeNova::start(false).await;
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        // The first server accepts the bind but dies before any worker ran.
        let first = Server::start(&url, Some("cn3"), None).await;
        first
            .create_profile("one", json!([{"resources:FPGA": "1"}]))
            .await;
        let arqs = first.create_arqs("one").await;
        let inst = instance();
        first.bind(&arqs, "cn3", &fake_rp("cn3"), &inst).await;
        let job = arqs_job(&first.store, &arqs[0]).await.unwrap();
        assert_eq!(job.state.as_str(), "pending");
        first.stop().await;

        // A new server on the same database, Nova still down.
        let second = Server::start(&url, None, Some(workers(Some(&nova)))).await;
        let resolved = second.wait_resolved(&inst).await;
        assert_eq!(resolved[0]["state"], "Bound", "{backend:?}");
        nova.wait_for("a refused delivery", |n| *n.refused.lock().unwrap() >= 1)
            .await;
        assert!(nova.events().is_empty());
        common::eventually(
            Duration::from_secs(20),
            "the failed attempt to be recorded",
            || async {
                let pending = second.events_of(&inst).await;
                assert_eq!(pending.len(), 1);
                let e = pending[0].last_error.as_ref()?;
                assert!(e.contains("HTTP 503"), "{e}");
                assert_eq!(pending[0].delivery, Delivery::Pending);
                Some(())
            },
        )
        .await;

        // Nova comes back: the retry (after the backoff) delivers it, once.
        nova.up.store(true, Ordering::SeqCst);
        nova.wait_for("the event", |n| !n.events().is_empty()).await;
        let ev = wait_delivery(&second, &inst).await;
        assert_eq!(ev.delivery, Delivery::Delivered);
        assert!(ev.attempts >= 2, "{ev:?}");
        assert_eq!(
            nova.events(),
            [json!({"name": "accelerator-request-bound", "tag": arqs[0],
                    "server_uuid": inst, "status": "completed"})]
        );
        second.stop().await;
    }
}

/// Store-level fixture: a fake host, a profile, and `n` ARQs bound (BindStarted, job
/// pending) to each of `instances`.
async fn seed_jobs(
    store: &Store,
    host: &str,
    profile: DeviceProfile,
    instances: &[String],
) -> Vec<String> {
    accel_server::accelerator::agent::report_fake_devices(store, host)
        .await
        .unwrap();
    let (host, instances) = (host.to_owned(), instances.to_vec());
    store
        .write(move |tx| {
            Box::pin(async move {
                let p = profiles::create(tx, &profile).await?;
                let mut all = Vec::new();
                for inst in &instances {
                    for arq in arqs::create_for_profile(tx, &p, None, Some("p1")).await? {
                        let deadline = accel_store::now() + 60;
                        start_bind(tx, &arq.uuid, &host, inst, deadline).await?;
                        all.push(arq.uuid);
                    }
                }
                Ok(all)
            })
        })
        .await
        .unwrap()
}

/// Starts the bind of `arq` to `host`'s fake device for `instance` (job pending until
/// `deadline`).
async fn start_bind(
    tx: &mut accel_store::Tx,
    arq: &str,
    host: &str,
    instance: &str,
    deadline: i64,
) -> Result<(), accel_store::StoreError> {
    let b = Binding {
        hostname: host.to_owned(),
        device_rp_uuid: fake_rp(host),
        instance_uuid: instance.to_owned(),
        project_id: None,
    };
    arqs::start_bind(tx, &Scope::All, arq, &b, deadline).await?;
    Ok(())
}

fn profile(name: &str, group: &[(&str, &str)]) -> DeviceProfile {
    let g = group
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    DeviceProfile::parse(name, None, None, vec![g]).unwrap()
}

async fn arq_states(store: &Store, uuids: &[String]) -> Vec<(ArqState, Option<String>)> {
    let uuids = uuids.to_vec();
    store
        .read(move |tx| {
            Box::pin(async move {
                let mut out = Vec::new();
                for u in &uuids {
                    let a = arqs::require(tx, &Scope::All, u).await?;
                    out.push((a.state, a.attach_handle.map(|h| h.uuid)));
                }
                Ok(out)
            })
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn two_servers_on_one_database_perform_each_job_once() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        let (a, b) = (
            Store::connect(&url).await.unwrap(),
            Store::connect(&url).await.unwrap(),
        );
        let instances: Vec<String> = (0..6).map(|_| instance()).collect();
        let arqs = seed_jobs(
            &a,
            "cn4",
            profile("pair", &[("resources:FPGA", "2")]),
            &instances,
        )
        .await;
        assert_eq!(arqs.len(), 12);
        let (wa, wb) = (
            Binder::new(a.clone(), "server-a", 30),
            Binder::new(b.clone(), "server-b", 30),
        );
        let now = accel_store::now();
        let (ra, rb) = tokio::join!(wa.step(now), wb.step(now));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(ra.bound + rb.bound, 12, "{backend:?}: {ra:?} {rb:?}");
        assert_eq!(ra.failed + rb.failed, 0);
        assert_eq!(ra.events + rb.events, 6, "one event per instance");
        // Nothing is left for a second round.
        let (ra, rb) = tokio::join!(wa.step(now), wb.step(now));
        assert_eq!((ra.unwrap().due, rb.unwrap().due), (0, 0));

        let states = arq_states(&a, &arqs).await;
        let mut handles: Vec<String> = states
            .iter()
            .map(|(s, h)| {
                assert_eq!(*s, ArqState::Bound);
                h.clone().unwrap()
            })
            .collect();
        handles.sort();
        handles.dedup();
        assert_eq!(handles.len(), 12, "every ARQ got its own handle");
        assert_eq!(handles_in_use(&a, "cn4").await, 12);
        one_event_of_two_arqs_each(&a, &instances).await;
        a.close().await;
        b.close().await;
    }
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_deadlines_end_every_job() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        let store = Store::connect(&url).await.unwrap();
        let inst = vec![instance()];
        let arqs = seed_jobs(
            &store,
            "cn5",
            profile("one", &[("resources:FPGA", "1")]),
            &inst,
        )
        .await;
        let now = accel_store::now();
        // A server claims the job and dies.
        let job = arqs_job(&store, &arqs[0]).await.unwrap();
        let got = store
            .write(move |tx| {
                Box::pin(async move { binds::claim(tx, job.id, "dead", now, now + 30).await })
            })
            .await
            .unwrap();
        assert!(got);
        let w = Binder::new(store.clone(), "alive", 30);
        assert_eq!(w.step(now).await.unwrap().due, 0, "leased: not due");
        let r = w.step(now + 31).await.unwrap();
        assert_eq!((r.due, r.bound), (1, 1), "{backend:?}: {r:?}");

        // A bind that waits for an agent to program ends at its deadline.
        let mut dev = fake_device("cn6");
        dev.deployables[0].driver_name = Some("intel_fpga".into());
        store
            .write(move |tx| {
                Box::pin(async move { report::replace_host(tx, "cn6", &[dev], true).await })
            })
            .await
            .unwrap();
        let bitstream = "6d3c8e0a-0e0b-4bd6-9a83-9a5d2a4f1c11";
        let inst2 = instance();
        let i2 = inst2.clone();
        let arq2 = store
            .write(move |tx| {
                Box::pin(async move {
                    let prog = profile(
                        "prog",
                        &[("resources:FPGA", "1"), ("accel:bitstream_id", bitstream)],
                    );
                    let p = profiles::create(tx, &prog).await?;
                    let arq = arqs::create_for_profile(tx, &p, None, Some("p1"))
                        .await?
                        .remove(0);
                    start_bind(tx, &arq.uuid, "cn6", &i2, now + 60).await?;
                    Ok(arq.uuid)
                })
            })
            .await
            .unwrap();
        let r = w.step(now).await.unwrap();
        assert_eq!(r.programming, 1, "{r:?}");
        let a2 = arq2.clone();
        let pr = store
            .read(move |tx| Box::pin(async move { binds::program_request(tx, &a2).await }))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                pr.state.as_str(),
                pr.bitstream_id.as_deref(),
                pr.hostname.as_str()
            ),
            ("pending", Some(bitstream), "cn6")
        );
        // Still waiting: not due again until the agent answers or the deadline passes.
        assert_eq!(w.step(now + 1).await.unwrap().due, 0);
        let r = w.step(now + 61).await.unwrap();
        assert_eq!((r.due, r.failed, r.events), (1, 1, 1), "{r:?}");
        assert_eq!(
            arq_states(&store, std::slice::from_ref(&arq2)).await[0].0,
            ArqState::BindFailed
        );
        let job = arqs_job(&store, &arq2).await.unwrap();
        assert!(job.error.unwrap().contains("deadline"));
        store.close().await;
    }
}

#[tokio::test]
async fn programming_by_the_fake_driver_succeeds_at_once_and_by_an_agent_when_it_answers() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        let store = Store::connect(&url).await.unwrap();
        let bitstream = "0b0c3c52-1c4e-4d37-8c38-2f7a1f9b9d10";
        let inst = vec![instance()];
        let arqs = seed_jobs(
            &store,
            "cn7",
            profile(
                "fake-prog",
                &[("resources:FPGA", "1"), ("accel:bitstream_id", bitstream)],
            ),
            &inst,
        )
        .await;
        let w = Binder::new(store.clone(), "w", 30);
        let now = accel_store::now();
        let r = w.step(now).await.unwrap();
        assert_eq!(r.bound, 1, "{backend:?}: {r:?}");
        let a = arqs[0].clone();
        let pr = store
            .read(move |tx| Box::pin(async move { binds::program_request(tx, &a).await }))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(pr.state.as_str(), "done");
        let rp = fake_rp("cn7");
        let dep = store
            .read(move |tx| {
                Box::pin(async move {
                    accel_store::accelerator::hardware::list_deployables(
                        tx,
                        &[(
                            accel_store::accelerator::hardware::DeployableColumn::RpUuid,
                            rp,
                        )],
                    )
                    .await
                })
            })
            .await
            .unwrap();
        assert_eq!(dep[0].bitstream_id.as_deref(), Some(bitstream));

        // An agent-driven device: the job waits, the agent's answer makes it due.
        let mut dev = fake_device("cn8");
        dev.deployables[0].driver_name = Some("xilinx".into());
        store
            .write(move |tx| {
                Box::pin(async move { report::replace_host(tx, "cn8", &[dev], true).await })
            })
            .await
            .unwrap();
        let inst2 = instance();
        let i2 = inst2.clone();
        let arq2 = store
            .write(move |tx| {
                Box::pin(async move {
                    let p = profiles::by_name(tx, "fake-prog").await?.unwrap();
                    let arq = arqs::create_for_profile(tx, &p, None, Some("p1"))
                        .await?
                        .remove(0);
                    start_bind(tx, &arq.uuid, "cn8", &i2, now + 60).await?;
                    Ok(arq.uuid)
                })
            })
            .await
            .unwrap();
        assert_eq!(w.step(now).await.unwrap().programming, 1);
        let a2 = arq2.clone();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let pr = binds::program_request(tx, &a2).await?.unwrap();
                    binds::finish_program_request(tx, "cn8", pr.id, Ok(()), now).await
                })
            })
            .await
            .unwrap();
        let r = w.step(now + 1).await.unwrap();
        assert_eq!((r.bound, r.events), (1, 1), "{r:?}");
        assert_eq!(arq_states(&store, &[arq2]).await[0].0, ArqState::Bound);
        store.close().await;
    }
}

#[tokio::test]
async fn without_a_nova_endpoint_events_are_recorded_as_undeliverable() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let url = db.url.clone();
        let store = Store::connect(&url).await.unwrap();
        let inst = instance();
        seed_jobs(
            &store,
            "cn9",
            profile("one", &[("resources:FPGA", "1")]),
            std::slice::from_ref(&inst),
        )
        .await;
        let now = accel_store::now();
        let r = Binder::new(store.clone(), "w", 30).step(now).await.unwrap();
        assert_eq!(r.events, 1);
        let sender = EventSender::new(store.clone(), &WorkerConfig::new(None));
        let s = sender.step(now).await.unwrap();
        assert_eq!((s.delivered, s.given_up), (0, 1), "{backend:?}");
        let i = inst.clone();
        let evs = store
            .read(move |tx| Box::pin(async move { events::for_instance(tx, &i).await }))
            .await
            .unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].delivery, Delivery::NoEndpoint);
        assert_eq!(evs[0].arqs[0].1, ArqState::Bound);
        assert_eq!(
            binder::render_events(&evs[0])["events"][0]["status"],
            "completed"
        );
        store.close().await;
    }
}

/// The events of `instances` (one FPGA each on host `host`), resolved and recorded.
async fn recorded_events(store: &Store, host: &str, instances: &[String], now: i64) {
    seed_jobs(
        store,
        host,
        profile(&format!("ks-{host}"), &[("resources:FPGA", "1")]),
        instances,
    )
    .await;
    let r = Binder::new(store.clone(), "w", 30).step(now).await.unwrap();
    assert_eq!(r.events, instances.len(), "{r:?}");
}

#[tokio::test]
async fn events_go_to_nova_through_a_keystone_session() {
    use accel_keystone::{Session, SessionConfig};
    use common::keystone::{FakeKeystone, Subject};
    use std::sync::Arc;
    for backend in BACKENDS {
        let ks = FakeKeystone::start().await;
        ks.add_user(
            "secret",
            Subject::project("cyborg", "service", &["service"]),
        );
        let nova = FakeNova::start(true).await;
        ks.set_catalog(json!([
            {"type": "identity", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": ks.url}]},
            {"type": "compute", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": "http://127.0.0.1:9/v2.1"},
                {"interface": "internal", "region_id": "R1", "url": nova.url}]},
        ]));
        let cfg = |password: &str, region: &str| -> SessionConfig {
            serde_json::from_value(json!({
                "auth_url": format!("{}/v3", ks.url), "username": "cyborg",
                "password": password, "project_name": "service",
                "interface": "internal", "region_name": region,
            }))
            .unwrap()
        };
        let db = TempDb::fresh(backend).await;
        let store = Store::connect(&db.url).await.unwrap();
        let now = accel_store::now();
        let session = Arc::new(Session::new(cfg("secret", "R1")).unwrap());
        let sender = EventSender::new(
            store.clone(),
            &WorkerConfig::new(Some(binder::NovaEndpoint::keystone(session, None))),
        );

        // Two events, one authentication, the catalog's internal compute endpoint.
        recorded_events(&store, "ks1", &[instance(), instance()], now).await;
        let s = sender.step(now).await.unwrap();
        assert_eq!((s.delivered, s.retrying), (2, 0), "{backend:?}: {s:?}");
        assert_eq!(ks.password_auths(), 1);
        let tokens = nova.tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), 2);
        assert!(tokens[0].starts_with("gAAAA") && tokens[0] == tokens[1]);

        // Nova refuses the token (revoked): one new authentication, then delivered.
        nova.refuse_tokens.lock().unwrap().push(tokens[0].clone());
        recorded_events(&store, "ks2", &[instance()], now).await;
        let s = sender.step(now).await.unwrap();
        assert_eq!(s.delivered, 1, "{s:?}");
        assert_eq!(ks.password_auths(), 2);
        let tokens = nova.tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), 4, "refused, then sent with the new token");
        assert_ne!(tokens[3], tokens[0]);

        // A wrong password and a region without Nova: retried later, reason recorded.
        for (password, region, why) in [
            ("wrong", "R1", "refused the credentials of user \"cyborg\""),
            (
                "secret",
                "R9",
                "no internal endpoint of service type compute in region R9",
            ),
        ] {
            let session = Arc::new(Session::new(cfg(password, region)).unwrap());
            let sender = EventSender::new(
                store.clone(),
                &WorkerConfig::new(Some(binder::NovaEndpoint::keystone(session, None))),
            );
            let inst = instance();
            recorded_events(
                &store,
                &format!("ks-{region}-{password}"),
                std::slice::from_ref(&inst),
                now,
            )
            .await;
            let s = sender.step(now).await.unwrap();
            assert_eq!((s.delivered, s.retrying), (0, 1), "{why}: {s:?}");
            let i = inst.clone();
            let ev = store
                .read(move |tx| Box::pin(async move { events::for_instance(tx, &i).await }))
                .await
                .unwrap();
            let err = ev[0].last_error.clone().unwrap_or_default();
            assert!(err.contains(why), "{err}");
            assert_eq!(ev[0].delivery, Delivery::Pending);
        }
        assert_eq!(nova.tokens.lock().unwrap().len(), 4, "nothing reached Nova");
        store.close().await;
    }
}

/// [`seed_jobs`] of `n` new instances with two ARQs each (a profile named after the
/// host): the instances and their ARQs.
async fn seed_pairs(store: &Store, host: &str, n: usize) -> (Vec<String>, Vec<String>) {
    let instances: Vec<String> = (0..n).map(|_| instance()).collect();
    let p = profile(&format!("pair-{host}"), &[("resources:FPGA", "2")]);
    let arqs = seed_jobs(store, host, p, &instances).await;
    (instances, arqs)
}

/// Each instance has one Nova event, for both its ARQs (resolved together).
async fn one_event_of_two_arqs_each(store: &Store, instances: &[String]) {
    for inst in instances {
        let i = inst.clone();
        let evs = store
            .read(move |tx| Box::pin(async move { events::for_instance(tx, &i).await }))
            .await
            .unwrap();
        assert_eq!(evs.len(), 1, "{evs:?}");
        assert_eq!(evs[0].arqs.len(), 2, "{evs:?}");
    }
}

/// The handles the ARQs were bound to, all distinct, and the jobs' outcome counts.
fn distinct_handles(states: &[(ArqState, Option<String>)]) -> usize {
    let mut handles: Vec<&String> = states.iter().filter_map(|(_, h)| h.as_ref()).collect();
    let n = handles.len();
    handles.sort();
    handles.dedup();
    assert_eq!(handles.len(), n, "a handle was given twice: {states:?}");
    n
}

#[tokio::test]
async fn many_instances_bound_at_once_by_two_servers_never_share_a_handle() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let (a, b) = (
            Store::connect(&db.url).await.unwrap(),
            Store::connect(&db.url).await.unwrap(),
        );
        // Host cn7: 8 instances x 2 ARQs for its 16 handles. Host cn8: 9 x 2 for its
        // 16, so two ARQs must fail: concurrent binds race for the same free handles.
        let (fits, mut arqs) = seed_pairs(&a, "cn7", 8).await;
        let (over, arqs8) = seed_pairs(&a, "cn8", 9).await;
        arqs.extend(arqs8);
        let (mut wa, mut wb) = (
            Binder::new(a.clone(), "server-a", 30),
            Binder::new(b.clone(), "server-b", 30),
        );
        (wa.concurrency, wb.concurrency) = (8, 8);
        let now = accel_store::now();
        let (ra, rb) = tokio::join!(wa.step(now), wb.step(now));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(ra.bound + rb.bound, 32, "{backend:?}: {ra:?} {rb:?}");
        assert_eq!(ra.failed + rb.failed, 2, "{backend:?}: {ra:?} {rb:?}");
        assert_eq!(ra.events + rb.events, 17, "one event per instance");
        let (ra, rb) = tokio::join!(wa.step(now), wb.step(now));
        assert_eq!((ra.unwrap().due, rb.unwrap().due), (0, 0));

        let states = arq_states(&a, &arqs).await;
        assert_eq!(distinct_handles(&states), 32, "{backend:?}");
        let failed = states.iter().filter(|(s, _)| *s == ArqState::BindFailed);
        assert_eq!(failed.count(), 2);
        assert_eq!(handles_in_use(&a, "cn7").await, 16);
        assert_eq!(handles_in_use(&a, "cn8").await, 16);
        let all: Vec<String> = fits.iter().chain(&over).cloned().collect();
        one_event_of_two_arqs_each(&a, &all).await;
        a.close().await;
        b.close().await;
    }
}

#[tokio::test]
async fn due_jobs_go_round_robin_across_hosts_so_a_busy_host_starves_none() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let store = Store::connect(&db.url).await.unwrap();
        // The busy host's 6 instances were accepted first; the quiet host's one last.
        let (busy, _) = seed_pairs(&store, "busy", 6).await;
        let (quiet, quiet_arqs) = seed_pairs(&store, "quiet", 1).await;
        let now = accel_store::now();
        // One instance per host per turn, oldest first within a turn, an instance's
        // jobs together (oldest-first alone would give 6 of busy's jobs).
        let due = binds::due_now(&store, now, 6).await.unwrap();
        let hosts: Vec<&str> = due.iter().map(|j| j.hostname.as_deref().unwrap()).collect();
        assert_eq!(
            hosts,
            ["busy", "busy", "quiet", "quiet", "busy", "busy"],
            "{backend:?}"
        );
        let insts: Vec<&str> = due
            .iter()
            .map(|j| j.instance_uuid.as_deref().unwrap())
            .collect();
        assert_eq!(insts[..4], [&*busy[0], &*busy[0], &*quiet[0], &*quiet[0]]);
        assert_eq!(insts[4..], [&*busy[1], &*busy[1]]);

        // A worker taking 6 jobs per step binds the quiet host's instance in its first.
        let mut w = Binder::new(store.clone(), "w", 30);
        (w.batch, w.concurrency) = (6, 2);
        let r = w.step(now).await.unwrap();
        assert_eq!((r.due, r.bound, r.events), (6, 6, 3), "{backend:?}: {r:?}");
        for (s, _) in arq_states(&store, &quiet_arqs).await {
            assert_eq!(s, ArqState::Bound, "{backend:?}");
        }
        let left = binds::due_now(&store, now, 64).await.unwrap();
        assert_eq!(
            left.len(),
            8,
            "busy's other 4 instances wait for the next steps"
        );
        store.close().await;
    }
}

#[tokio::test]
async fn a_handed_over_event_is_posted_once_and_a_lost_one_after_its_lease() {
    for backend in BACKENDS {
        let nova = FakeNova::start(true).await;
        let db = TempDb::fresh(backend).await;
        let store = Store::connect(&db.url).await.unwrap();
        let (kept, lost) = (instance(), instance());
        seed_jobs(
            &store,
            "ho1",
            profile("ho", &[("resources:FPGA", "2")]),
            std::slice::from_ref(&kept),
        )
        .await;
        let now = accel_store::now();
        let cfg = WorkerConfig {
            owner: "w".into(),
            ..WorkerConfig::new(Some(binder::NovaEndpoint::fixed(nova.url.clone(), None)))
        };
        let (handoff, handed) = binder::handoff();
        let mut w = Binder::new(store.clone(), "w", 30);
        w.handoff = Some(handoff);
        let r = w.step(now).await.unwrap();
        assert_eq!((r.bound, r.events), (2, 1), "{backend:?}: {r:?}");
        // Recorded taken by the binder's server, first attempt counted: no other
        // sender's due pass takes it while the lease holds.
        let ev = events_of(&store, &kept).await;
        assert_eq!((ev.delivery, ev.attempts), (Delivery::Pending, 1), "{ev:?}");
        let other = EventSender::new(store.clone(), &cfg_owned_by(&cfg, "other"));
        assert_eq!(other.step(now).await.unwrap(), Default::default());

        // The binder's own sender posts it without claiming it again.
        let mut sender = EventSender::new(store.clone(), &cfg);
        sender.handed = Some(handed.clone());
        let s = sender.step(now).await.unwrap();
        assert_eq!(s.delivered, 1, "{backend:?}: {s:?}");
        let ev = events_of(&store, &kept).await;
        assert_eq!((ev.delivery, ev.attempts), (Delivery::Delivered, 1));
        assert_eq!(
            nova.events().len(),
            2,
            "one POST of the instance's two ARQs"
        );

        // A hand-over that never reaches a sender (it stopped): the event waits for
        // the lease, then any sender's due pass posts it.
        seed_jobs(
            &store,
            "ho2",
            profile("ho2", &[("resources:FPGA", "1")]),
            std::slice::from_ref(&lost),
        )
        .await;
        let (handoff, dropped) = binder::handoff();
        drop(dropped);
        let mut w = Binder::new(store.clone(), "w", 30);
        w.handoff = Some(handoff);
        assert_eq!(w.step(now).await.unwrap().events, 1);
        assert_eq!(other.step(now + 29).await.unwrap(), Default::default());
        let s = other.step(now + 31).await.unwrap();
        assert_eq!(s.delivered, 1, "{backend:?}: {s:?}");
        let ev = events_of(&store, &lost).await;
        assert_eq!((ev.delivery, ev.attempts), (Delivery::Delivered, 2));
        assert_eq!(nova.events().len(), 3);
        store.close().await;
    }
}

fn cfg_owned_by(cfg: &WorkerConfig, owner: &str) -> WorkerConfig {
    WorkerConfig {
        owner: owner.into(),
        ..cfg.clone()
    }
}

/// The one event recorded for `instance`.
async fn events_of(store: &Store, instance: &str) -> events::NovaEvent {
    let i = instance.to_owned();
    let mut evs = store
        .read(move |tx| Box::pin(async move { events::for_instance(tx, &i).await }))
        .await
        .unwrap();
    assert_eq!(evs.len(), 1, "{evs:?}");
    evs.pop().unwrap()
}

/// A busy Nova (each POST answered after 100 ms) does not hold the events one after
/// another: the sender posts [`binder::POSTS_AT_ONCE`] at once whatever the bind
/// concurrency (1 on SQLite), and records what ended, refusals included, in the
/// database.
#[tokio::test]
async fn a_busy_nova_gets_events_posted_at_once_and_every_outcome_recorded() {
    for backend in BACKENDS {
        let nova = FakeNova::start(true).await;
        *nova.delay.lock().unwrap() = std::time::Duration::from_millis(100);
        let db = TempDb::fresh(backend).await;
        let store = Store::connect(&db.url).await.unwrap();
        let now = accel_store::now();
        let instances: Vec<String> = (0..40).map(|_| instance()).collect();
        // A fake host has 16 handles: 16, 16 and 8 instances on three.
        for (i, some) in instances.chunks(16).enumerate() {
            recorded_events(&store, &format!("busy{i}"), some, now).await;
        }
        let sender = EventSender::new(
            store.clone(),
            &WorkerConfig {
                concurrency: binder::default_concurrency(Some(&db.url)),
                ..WorkerConfig::new(Some(nova.endpoint()))
            },
        );
        let s = sender.step(now).await.unwrap();
        assert_eq!((s.delivered, s.retrying), (40, 0), "{backend:?}: {s:?}");
        assert_eq!(
            nova.in_flight.lock().unwrap().1,
            binder::POSTS_AT_ONCE,
            "{backend:?}: the most POSTs at once"
        );
        for inst in &instances {
            let ev = events_of(&store, inst).await;
            assert_eq!(ev.delivery, Delivery::Delivered, "{backend:?}: {ev:?}");
        }

        // Nova down: every attempt is recorded as a retry, with its reason.
        nova.up.store(false, std::sync::atomic::Ordering::SeqCst);
        let more: Vec<String> = (0..20).map(|_| instance()).collect();
        recorded_events(&store, "busy3", &more[..16], now).await;
        recorded_events(&store, "busy4", &more[16..], now).await;
        let s = sender.step(now).await.unwrap();
        assert_eq!((s.delivered, s.retrying), (0, 20), "{backend:?}: {s:?}");
        for inst in &more {
            let ev = events_of(&store, inst).await;
            assert_eq!(ev.delivery, Delivery::Pending, "{backend:?}: {ev:?}");
            assert!(ev.next_attempt > now, "{ev:?}");
            assert!(
                ev.last_error.as_deref().unwrap_or_default().contains("503"),
                "{ev:?}"
            );
        }
        store.close().await;
    }
}

/// On SQLite the worker binds up to [`binder::default_together`] instances in one
/// transaction (one turn of the single writer): all of them or none. When one of them
/// fails (here a trigger refuses its job's update), the group is rolled back and the
/// worker binds the instances one by one, so only the failing one is left for its
/// lease.
#[tokio::test]
async fn on_sqlite_instances_bind_together_and_a_failing_one_holds_back_no_other() {
    let db = TempDb::fresh(common::Backend::Sqlite).await;
    let store = Store::connect(&db.url).await.unwrap();
    let instances: Vec<String> = (0..3).map(|_| instance()).collect();
    let arqs = seed_jobs(
        &store,
        "tg1",
        profile("tg", &[("resources:FPGA", "1")]),
        &instances,
    )
    .await;
    let trigger = format!(
        "CREATE TRIGGER refuse_one BEFORE UPDATE ON bind_jobs WHEN OLD.arq_uuid = '{}' \
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        arqs[1]
    );
    store
        .write(move |tx| Box::pin(async move { accel_store::testing::execute(tx, &trigger).await }))
        .await
        .unwrap();
    let now = accel_store::now();

    // Together: the refused instance rolls back the two others with it.
    let takes: Vec<binds::Take> = binds::due_now(&store, now, 64)
        .await
        .unwrap()
        .into_iter()
        .map(|j| binds::Take {
            owner: "w".into(),
            instance: j.instance_uuid,
            ids: vec![j.id],
            now,
            lease_until: now + 30,
            deliver_until: None,
        })
        .collect();
    assert_eq!(takes.len(), 3);
    let mut runs = 0;
    let err = binds::take_and_perform_together(&store, &takes, &mut runs)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refused by the test"), "{err}");
    let states = arq_states(&store, &arqs).await;
    assert!(
        states.iter().all(|(s, _)| *s == ArqState::BindStarted),
        "{states:?}"
    );

    // The worker: its group fails, then the instances go one by one.
    let w = Binder::new(store.clone(), "w", 30);
    assert_eq!(w.together, 16);
    let err = w.step(now).await.unwrap_err();
    assert!(err.to_string().contains("refused by the test"), "{err}");
    let states: Vec<ArqState> = arq_states(&store, &arqs)
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(
        states,
        [ArqState::Bound, ArqState::BindStarted, ArqState::Bound]
    );
    store.close().await;
}
