//! A driver that fails during discovery never reports its devices removed (issue 14):
//! the agent keeps what the driver found last (marking the devices it names
//! unhealthy), and an agent with no earlier picture does not report at all. Against
//! the real server, both backends.

use accel_agent::config::{FakeDevice, Settings};
use accel_agent::drivers::{fake::Fake, Driver, DriverFailure, Host};
use accel_agent::metrics::Metrics;
use accel_agent::model::{FoundDevice, Health};
use accel_agent::observe::{Check, Health as Probes};
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::{Agent, AgentError};
use accel_testkit::server::{TestServer, BACKENDS};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

async fn compute_node(server: &TestServer, name: &'static str) {
    server
        .store
        .write(|tx| {
            Box::pin(async move {
                accel_store::placement::providers::create(
                    tx,
                    "6f1d3c52-1b7e-4c55-9a3e-0e1f7b2a9c10",
                    name,
                    None,
                )
                .await
            })
        })
        .await
        .unwrap();
}

fn probes() -> (Arc<Metrics>, Arc<Probes>) {
    let m = Arc::new(Metrics::new());
    let p = Arc::new(Probes::new(m.clone(), None, Duration::from_secs(60)));
    (m, p)
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// Makes `bus/pci/devices` unlistable (a file where the directory was), or back.
fn break_bus(fs: &FakeSysfs, broken: bool) {
    let bus = fs.root.join("bus/pci/devices");
    let away = fs.root.join("bus/pci/devices.away");
    if broken {
        std::fs::rename(&bus, &away).unwrap();
        std::fs::write(&bus, "").unwrap();
    } else {
        std::fs::remove_file(&bus).unwrap();
        std::fs::rename(&away, &bus).unwrap();
    }
}

#[tokio::test]
async fn an_unreadable_pci_bus_keeps_the_devices_and_a_fresh_agent_does_not_report() {
    for backend in BACKENDS {
        let server = TestServer::spawn(backend).await;
        compute_node(&server, "cn1").await;
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        testing::eight_gpus(&fs);
        let settings = Settings {
            drivers: Some(vec!["nvidia".into()]),
            ..Settings::new(&server.accel, "cn1", &fs.root)
        };
        let (metrics, p) = probes();
        let agent = Agent::new(settings.clone()).unwrap().observe(p.clone());
        assert_eq!(agent.step().await.unwrap().added, 8);

        break_bus(&fs, true);
        let o = agent.step().await.unwrap();
        assert_eq!((o.removed, o.vanished), (0, 0), "{o:?}");
        assert_eq!(agent.check_node().await.unwrap().devices, 8);
        let text = metrics.prometheus_text();
        assert_eq!(
            sample(
                &text,
                "accel_agent_driver_failures_total{driver=\"nvidia\"}"
            ),
            1.0,
            "{text}"
        );
        assert_eq!(
            sample(&text, "accel_agent_devices{type=\"GPU\",health=\"ok\"}"),
            8.0
        );

        // A restarted agent has no earlier picture: it sends nothing.
        let (metrics2, p2) = probes();
        let fresh = Agent::new(settings.clone()).unwrap().observe(p2.clone());
        match fresh.step().await {
            Err(AgentError::DriversFailed(d)) => assert_eq!(d, "nvidia"),
            other => panic!("{other:?}"),
        }
        assert_eq!(fresh.check_node().await.unwrap().devices, 8);
        assert_eq!(
            sample(
                &metrics2.prometheus_text(),
                "accel_agent_reports_total{outcome=\"skipped\"}"
            ),
            1.0
        );
        let report = p2
            .checks()
            .into_iter()
            .find(|(n, _)| *n == "report")
            .unwrap();
        assert!(
            matches!(&report.1, Check::Failed(why) if why.contains("nvidia")),
            "{report:?}"
        );

        // The bus is back: nothing was lost, nothing is added twice.
        break_bus(&fs, false);
        let o = fresh.step().await.unwrap();
        assert_eq!((o.added, o.removed, o.vanished), (0, 0, 0), "{o:?}");
        assert_eq!(agent.check_node().await.unwrap().devices, 8);
        server.stop().await;
    }
}

/// The fake driver, failing on demand: 0 works, 1 panics, 2 fails naming its first
/// device unhealthy, 3 panics once where discovery does not catch it (`health`).
struct Flaky {
    inner: Fake,
    mode: Arc<AtomicU8>,
}

impl Driver for Flaky {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        if self.mode.load(Ordering::SeqCst) == 1 {
            panic!("a driver bug");
        }
        self.inner.discover(host)
    }

    fn try_discover(&self, host: &Host) -> Result<Vec<FoundDevice>, DriverFailure> {
        if self.mode.load(Ordering::SeqCst) == 2 {
            let first = self.inner.discover(host)[0].address;
            return Err(DriverFailure {
                driver: "fake",
                reason: "the vendor library stopped answering".into(),
                unhealthy: vec![first],
            });
        }
        Ok(self.discover(host))
    }

    fn health(&self, host: &Host, device: &FoundDevice) -> Health {
        if self
            .mode
            .compare_exchange(3, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            panic!("a driver bug outside discovery's guard");
        }
        self.inner.health(host, device)
    }

    fn uses_pci_bus(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn a_panicking_or_failing_driver_keeps_its_devices_marking_those_it_knows_unhealthy() {
    let server = TestServer::spawn(BACKENDS[0]).await;
    compute_node(&server, "cn2").await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(&server.accel, "cn2", dir.path());
    let spec: FakeDevice = toml::from_str("type = \"GPU\"\ncount = 2").unwrap();
    settings.driver.fake = vec![spec.clone(), spec];
    let mode = Arc::new(AtomicU8::new(0));
    let flaky = Flaky {
        inner: Fake::default(),
        mode: mode.clone(),
    };
    let agent = Agent::with_drivers(settings, vec![Box::new(flaky)]).unwrap();
    assert_eq!(agent.step().await.unwrap().added, 2);

    mode.store(1, Ordering::SeqCst);
    let d = agent.discover();
    assert_eq!(d.failed.len(), 1);
    assert!(d.failed[0].reason.contains("panicked"), "{:?}", d.failed);
    assert_eq!(d.devices.len(), 2);
    let o = agent.step().await.unwrap();
    assert_eq!((o.removed, o.vanished), (0, 0), "{o:?}");

    mode.store(2, Ordering::SeqCst);
    let d = agent.discover();
    let health: Vec<Health> = d.devices.iter().map(|x| x.health.clone()).collect();
    assert!(
        matches!(&health[..], [Health::Unhealthy(r), Health::Ok] if r.contains("stopped answering")),
        "{health:?}"
    );
    let o = agent.step().await.unwrap();
    assert_eq!((o.removed, o.vanished), (0, 0), "{o:?}");
    assert_eq!(agent.check_node().await.unwrap().devices, 2);
    server.stop().await;
}

/// Issue 40: a worker that dies (a fake driver panicking where discovery does not
/// catch it) is restarted by the node's supervisor, `/readyz` says so while it waits
/// out its backoff, and its reports go on afterwards.
#[tokio::test]
async fn a_worker_that_panics_is_restarted_and_readyz_says_so() {
    use accel_agent::observe::Check;
    let server = TestServer::spawn(BACKENDS[0]).await;
    compute_node(&server, "cn3").await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(&server.accel, "cn3", dir.path());
    settings.driver.fake = vec![toml::from_str("type = \"GPU\"\ncount = 2").unwrap()];
    settings.interval_seconds = 1;
    let mode = Arc::new(AtomicU8::new(0));
    let flaky = Flaky {
        inner: Fake::default(),
        mode: mode.clone(),
    };
    let node = accel_agent::Node::builder(settings)
        .drivers(vec![Box::new(flaky)])
        .backoff(accel_agent::agent::Backoff {
            first: Duration::from_secs(2),
            max: Duration::from_secs(60),
        })
        .build()
        .unwrap();
    let health = node.health().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(node.run(async {
        let _ = stopped.await;
    }));
    let check = |name: &str| {
        let checks = health.checks();
        checks.into_iter().find(|(n, _)| *n == name).map(|(_, c)| c)
    };
    let wait = Duration::from_secs(20);
    accel_testkit::eventually(wait, "the first report", || async {
        (check("report") == Some(Check::Ok)).then_some(())
    })
    .await;
    assert_eq!(check("workers"), Some(Check::Ok));

    mode.store(3, Ordering::SeqCst);
    let down = accel_testkit::eventually(wait, "the reporting worker down", || async {
        match check("workers") {
            Some(Check::Failed(why)) => Some(why),
            _ => None,
        }
    })
    .await;
    assert!(down.contains("reporting"), "{down}");
    let answer = accel_agent::observe::answer(&health, &hyper::Method::GET, "/readyz", "");
    assert_eq!(answer.status(), 503);
    accel_testkit::eventually(wait, "the reporting worker restarted", || async {
        (check("workers") == Some(Check::Ok)).then_some(())
    })
    .await;
    let sent = health.metrics().prometheus_text();
    assert_eq!(mode.load(Ordering::SeqCst), 0, "the panic happened once");
    assert!(health.live().is_ok());
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert!(sent.contains("accel_agent_reports_total"), "{sent}");
    server.stop().await;
}

/// Issue 40: the device plugins' run loop is a worker with its own liveness beat, so a
/// node serving only kubelet plugins (no server yet, no kubelet) shows it to `/livez`,
/// beating well within the limit while it waits.
#[tokio::test]
async fn the_device_plugins_loop_beats_its_own_liveness() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    testing::two_gpus(&fs);
    let mut kubernetes = accel_k8s::KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.path().join("cdi");
    let settings = Settings {
        drivers: Some(vec!["nvidia".into()]),
        kubernetes: Some(kubernetes),
        // No server answers here: the workers that need one never start.
        ..Settings::new("http://127.0.0.1:9", "cn1", &fs.root)
    };
    let limit = Duration::from_secs(2);
    let node = accel_agent::Node::builder(settings)
        .kubelet(accel_agent::node::Kubelet {
            kubelet_dir: dir.path().join("no-kubelet"),
            pod_resources_socket: dir.path().join("no-kubelet/kubelet.sock"),
            ..Default::default()
        })
        .stale_after(limit)
        .build()
        .unwrap();
    let health = node.health().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(node.run(async {
        let _ = stopped.await;
    }));
    tokio::time::sleep(limit * 2).await;
    let workers = health.workers();
    let plugins = workers.iter().find(|(n, _)| *n == "device plugins");
    let (_, silent) = plugins.unwrap_or_else(|| panic!("no device plugins beat: {workers:?}"));
    assert!(*silent < limit, "{workers:?}");
    assert!(health.live().is_ok(), "{:?}", health.live());
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

/// In DRA mode `/readyz` names the DRA driver and its slices (not the device plugins),
/// and a publish the API server refuses fails it until one gets through.
#[test]
fn readiness_in_dra_mode_names_the_driver_and_a_failing_publish() {
    use accel_k8s::config::Mode;
    let m = Arc::new(Metrics::new());
    let p = Probes::new(m.clone(), Some(Mode::Dra), Duration::from_secs(60));
    let check = |name: &str| {
        p.checks()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c)
    };
    assert_eq!(check("kubelet"), None);
    assert!(matches!(check("dra-driver"), Some(Check::Pending(why)) if why.contains("DRA driver")));
    assert!(matches!(check("dra-slices"), Some(Check::Pending(_))));
    m.dra
        .published(Err("GET https://k/x: connection refused".into()));
    assert!(
        matches!(check("dra-slices"), Some(Check::Failed(why)) if why.contains("connection refused")),
        "{:?}",
        check("dra-slices")
    );
    m.dra.published(Ok("unchanged"));
    assert_eq!(check("dra-slices"), Some(Check::Ok));
    m.kubelet.registered(1, true);
    assert_eq!(check("dra-driver"), Some(Check::Ok));
    let plugins = Probes::new(m, Some(Mode::DevicePlugin), Duration::from_secs(60));
    let names: Vec<&str> = plugins.checks().into_iter().map(|(n, _)| n).collect();
    assert!(
        names.contains(&"kubelet") && !names.contains(&"dra-slices"),
        "{names:?}"
    );
}
