//! The running `accel agent` as an operator sees it (issues 13 and 14): its metrics
//! port (`/metrics` moving with real traffic, `/readyz` turning ready), waiting for a
//! server that is not up yet instead of exiting, and configuration errors that stop
//! it before anything reaches Placement. The built binary against the real server
//! (SQLite and PostgreSQL) and the fake kubelet.

mod common;

use accel_agent::testing::{self, FakeSysfs};
use accel_k8s::testing::FakeKubelet;
use accel_testkit::eventually;
use accel_testkit::server::{TestServer, BACKENDS};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(30);
const GPUS: [&str; 2] = ["0000:17:00.0", "0000:31:00.0"];

/// A running `accel agent` and its metrics port.
struct Running {
    child: Child,
    metrics: String,
    /// Every log line so far (JSON), for failure messages.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Running {
    /// Starts the agent with `--log-format json --metrics-listen 127.0.0.1:0` and
    /// reads the metrics address from its start-up line.
    async fn start(args: &[&str]) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_accel"))
            .arg("agent")
            .args(args)
            .args(["--log-format", "json", "--metrics-listen", "127.0.0.1:0"])
            .env("ACCEL_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let metrics = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                log.lock().unwrap().push(line.clone());
                let v: serde_json::Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
                if v["fields"]["message"] == "accel agent starting" {
                    return v["fields"]["metrics_listen"].as_str().unwrap().to_owned();
                }
            }
            panic!("the agent ended before starting: {:?}", log.lock().unwrap());
        })
        .await
        .expect("the agent's start-up line");
        let keep = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                keep.lock().unwrap().push(line);
            }
        });
        Running {
            child,
            metrics: format!("http://{metrics}"),
            log,
        }
    }

    async fn get(&self, path: &str, accept: Option<&str>) -> (u16, String, String) {
        let mut req = reqwest::Client::new().get(format!("{}{path}", self.metrics));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, ct, r.text().await.unwrap())
    }

    fn logs(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    async fn stop(mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }
}

/// The value of the sample `name{labels}` (labels exactly as written), or 0.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

async fn compute_node(server: &TestServer, name: &str) {
    server
        .store
        .write(|tx| {
            let name = name.to_owned();
            Box::pin(async move {
                let uuid = accel_store::accelerator::report::provider_uuid(&name);
                accel_store::placement::providers::create(tx, &uuid, &name, None).await
            })
        })
        .await
        .unwrap();
}

/// Names of the Placement providers, sorted.
async fn providers(server: &TestServer) -> Vec<String> {
    let v = common::placement_get(&server.placement, "/resource_providers").await;
    let mut names: Vec<String> = v["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// Two GPUs bound to vfio-pci, which the pool `accel.dev/gpu` offers.
fn two_gpus(dir: &Path) -> FakeSysfs {
    let fs = FakeSysfs::new(dir.join("sys"));
    assert_eq!(testing::two_gpus(&fs), GPUS);
    fs
}

/// Scrapes until `check` passes on the Prometheus text; answers that text.
async fn scrape_until(agent: &Running, what: &str, check: impl Fn(&str) -> bool) -> String {
    eventually(WAIT, what, || async {
        let (s, _, text) = agent.get("/metrics", None).await;
        if s == 200 && check(&text) {
            Ok(text)
        } else {
            Err(format!("{text}\n--- agent log ---\n{}", agent.logs()))
        }
    })
    .await
}

/// `promtool check metrics` on `text`, when promtool is installed (Debian's
/// `prometheus` package); its lint findings fail the test.
async fn promtool_clean(text: &str) {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        eprintln!("promtool not installed: exposition not linted");
        return;
    };
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn metrics_move_with_reports_and_kubelet_allocations_and_readyz_turns_ready() {
    for backend in BACKENDS {
        let server = TestServer::spawn(backend).await;
        compute_node(&server, "k8s-node").await;
        let dir = tempfile::tempdir().unwrap();
        let fs = two_gpus(dir.path());
        let kubelet_dir = dir.path().join("kubelet");
        std::fs::create_dir_all(&kubelet_dir).unwrap();
        let kubelet = FakeKubelet::start(&kubelet_dir);
        let config = dir.path().join("agent.toml");
        std::fs::write(
            &config,
            format!(
                "interval_seconds = 1\nprogram_interval_ms = 100\n\
                 [kubernetes]\ncdi_dir = \"{}\"\n\
                 [[kubernetes.configurations]]\nname = \"gpu\"\ncapacity = 2\n\
                 [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
                dir.path().join("cdi").display()
            ),
        )
        .unwrap();
        let agent = Running::start(&[
            "--config",
            config.to_str().unwrap(),
            "--server",
            &server.accel,
            "--node",
            "k8s-node",
            "--sysfs-root",
            fs.root.to_str().unwrap(),
            "--drivers",
            "nvidia",
            "--kubelet-dir",
            kubelet_dir.to_str().unwrap(),
            "--pod-resources-socket",
            kubelet.pod_resources_socket().to_str().unwrap(),
        ])
        .await;

        // A container gets one GPU slot through the pool.
        let pool = kubelet.plugin("accel.dev/gpu").await;
        let granted = pool.allocate(&["0"]).await;
        assert!(granted.is_ok(), "{granted:?}");
        // An id the pool does not have is refused, and counted so.
        let refused = pool.allocate(&["no-such-id"]).await;
        assert!(refused.is_err());

        let pool_series = "{resource=\"accel.dev/gpu\",outcome=\"granted\"}";
        let text = scrape_until(&agent, "reports, devices and allocations counted", |t| {
            sample(t, "accel_agent_reports_total{outcome=\"accepted\"}") >= 1.0
                && sample(t, &format!("accel_kubelet_allocations_total{pool_series}")) == 1.0
                && sample(t, "accel_kubelet_slots_in_use{resource=\"accel.dev/gpu\"}") == 1.0
        })
        .await;
        assert_eq!(
            sample(&text, "accel_agent_devices{type=\"GPU\",health=\"ok\"}"),
            2.0,
            "{text}"
        );
        assert!(sample(&text, "accel_agent_discovery_duration_seconds_count") >= 1.0);
        assert!(sample(&text, "accel_agent_report_duration_seconds_count") >= 1.0);
        assert_eq!(
            sample(
                &text,
                "accel_kubelet_allocations_total{resource=\"accel.dev/gpu\",outcome=\"unknown_id\"}"
            ),
            1.0,
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "accel_kubelet_allocate_duration_seconds_count{resource=\"accel.dev/gpu\"}"
            ),
            2.0,
            "{text}"
        );
        assert_eq!(
            sample(&text, "accel_kubelet_slots{resource=\"accel.dev/gpu\"}"),
            4.0
        );
        // The pool and one instance plugin per GPU.
        assert_eq!(
            sample(&text, "accel_kubelet_plugins_registered"),
            3.0,
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "accel_kubelet_registrations_total{outcome=\"registered\"}"
            ),
            3.0
        );
        assert_eq!(sample(&text, "accel_kubelet_reregistrations_total"), 0.0);
        // The commit `--version` prints, not the library's "unknown" (issue 31 item 2).
        let version = common::accel(&["--version"], &[]).await.stdout;
        let commit = version
            .split("(commit ")
            .nth(1)
            .unwrap()
            .trim_end()
            .trim_end_matches(')');
        assert!(
            text.contains(&format!(
                "accel_build_info{{version=\"{}\",commit=\"{commit}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{version}{text}"
        );
        assert!(
            sample(&text, "process_resident_memory_bytes") > 0.0,
            "{text}"
        );
        assert!(sample(&text, "process_open_fds") > 0.0, "{text}");
        assert!(sample(&text, "process_cpu_seconds_total") >= 0.0);
        promtool_clean(&text).await;

        // OpenMetrics when the scraper asks for it.
        let (s, ct, om) = agent
            .get(
                "/metrics",
                Some("application/openmetrics-text;version=1.0.0"),
            )
            .await;
        assert_eq!(s, 200);
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        assert!(om.ends_with("# EOF\n"));
        assert!(om.contains("# TYPE accel_agent_reports counter"), "{om}");

        let (s, _, body) = agent.get("/readyz", None).await;
        assert_eq!(s, 200, "{body}");
        assert!(
            body.contains("[+]server ok") && body.contains("[+]kubelet ok"),
            "{body}"
        );
        assert_eq!(agent.get("/livez", None).await.0, 200);

        // Kubelet restarts: the plugins register again, and that is counted.
        let kubelet = kubelet.restart();
        kubelet.plugin("accel.dev/gpu").await;
        scrape_until(&agent, "re-registrations counted", |t| {
            sample(t, "accel_kubelet_reregistrations_total") >= 3.0
        })
        .await;
        agent.stop().await;
        server.stop().await;
    }
}

/// A TCP port nothing listens on (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_agent_started_before_the_server_waits_and_reports_once_it_comes_up() {
    for backend in BACKENDS {
        let server = TestServer::spawn(backend).await;
        compute_node(&server, "cn-late").await;
        let dir = tempfile::tempdir().unwrap();
        let fs = two_gpus(dir.path());
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let agent = Running::start(&[
            "--server",
            &url,
            "--node",
            "cn-late",
            "--sysfs-root",
            fs.root.to_str().unwrap(),
            "--drivers",
            "nvidia",
            "--interval",
            "1",
        ])
        .await;
        // Not ready, and saying why; alive all the same (no crash loop).
        let body = eventually(WAIT, "readyz names the unreachable server", || async {
            let (s, _, body) = agent.get("/readyz", None).await;
            if s == 503 && body.contains("[-]server failed: ") && body.contains(&url) {
                Ok(body)
            } else {
                Err(format!("{s} {body}"))
            }
        })
        .await;
        assert!(body.contains("[-]report failed"), "{body}");
        assert_eq!(agent.get("/livez", None).await.0, 200);
        let attempts = scrape_until(&agent, "wait attempts counted", |t| {
            sample(t, "accel_agent_server_wait_attempts_total") >= 1.0
        })
        .await;
        assert_eq!(
            sample(&attempts, "accel_agent_reports_total{outcome=\"accepted\"}"),
            0.0
        );
        assert!(
            agent.logs().contains("server not ready; waiting"),
            "{}",
            agent.logs()
        );
        assert!(providers(&server).await == vec!["cn-late".to_owned()]);

        // The server comes up at the agent's address.
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let proxy = accel_testkit::Forwarder::on(listener, &server.accel);
        eventually(WAIT, "the GPUs reported", || async {
            let p = providers(&server).await;
            if p.len() == 3 {
                Ok(())
            } else {
                Err(format!("{p:?}\n{}", agent.logs()))
            }
        })
        .await;
        eventually(WAIT, "readyz turns 200", || async {
            let (s, _, body) = agent.get("/readyz", None).await;
            if s == 200 {
                Ok(())
            } else {
                Err(body)
            }
        })
        .await;
        agent.stop().await;
        drop(proxy);
        server.stop().await;
    }
}

async fn accel(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(args)
        .env("ACCEL_LOG", "warn")
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_bad_agent_configuration_stops_it_naming_the_key_and_leaves_placement_untouched() {
    for backend in BACKENDS {
        let server = TestServer::spawn(backend).await;
        compute_node(&server, "cn-fake").await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("agent.toml");
        let good = "[[fake.devices]]\ntype = \"GPU\"\ncount = 2\n\
                    [[fake.devices]]\ntype = \"FPGA\"\n";
        std::fs::write(&config, good).unwrap();
        let base = [
            "agent",
            "--config",
            config.to_str().unwrap(),
            "--server",
            &server.accel,
            "--node",
            "cn-fake",
            "--drivers",
            "fake",
            "--sysfs-root",
            dir.path().to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:0",
        ];
        let mut once = base.to_vec();
        once.push("--once");
        let out = accel(&once).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let before = providers(&server).await;
        assert_eq!(before.len(), 4, "{before:?}");

        for (text, key) in [
            (
                "[[fake.devices]]\ntype = \"GPU\"\ncount = 2\n[[fake.devices]]\ntype = \"FPGX\"\n",
                "fake.devices[1].type",
            ),
            (
                "[[fake.devices]]\ntype = \"GPU\"\ncount = 0\n",
                "fake.devices[0].count",
            ),
            (
                "[[fake.devices]]\ntype = \"GPU\"\ncount = 300\n",
                "fake.devices[0].count",
            ),
            (
                "[[fake.devices]]\ntype = \"GPU\"\nvendor = \"10de0\"\n",
                "fake.devices[0].vendor",
            ),
            ("drivers = [\"fake\", \"tpu\"]\n", "drivers"),
        ] {
            std::fs::write(&config, text).unwrap();
            // The long-running agent (no --once): it must stop, not wait.
            let mut args: Vec<&str> = base.to_vec();
            if text.starts_with("drivers") {
                // The file's drivers, not the flag's.
                args.retain(|a| *a != "--drivers" && *a != "fake");
            }
            let out = tokio::time::timeout(WAIT, accel(&args))
                .await
                .expect("the agent stops at start-up");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_ne!(out.status.code(), Some(0), "{text}");
            assert!(stderr.contains(key), "{text}: {stderr}");
            assert_eq!(providers(&server).await, before, "{text}");
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn text_logs_to_a_pipe_have_no_colours_and_name_the_real_cause_of_each_wait() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_accel"))
        .args([
            "agent",
            "--node",
            "cn-text",
            "--server",
            &format!("http://127.0.0.1:{}", free_port()),
            "--drivers",
            "fake",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-format",
            "text",
        ])
        .env("ACCEL_LOG", "info")
        .env_remove("NO_COLOR")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let waiting = line.contains("server not ready; waiting");
            seen.push(line);
            if waiting {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no wait logged: {seen:?}"));
    let all = seen.join("\n");
    assert!(!all.contains('\x1b'), "{all}");
    assert!(all.contains("accel agent starting"), "{all}");
    assert!(all.contains("Connection refused"), "{all}");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
