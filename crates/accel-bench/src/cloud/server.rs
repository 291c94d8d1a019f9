//! The `accel serve` that `accel-bench cloud --database URL` starts: on port 0 for
//! both APIs and its metrics port (read back from its "accel serve ready" line), no
//! console, and its CPU time and peak memory read from `/proc` for the report (the
//! simulator's own CPU is read the same way, `utime + stime` as `getrusage` sums them).

use anyhow::{bail, Context};
use std::path::Path;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct Server {
    child: Child,
    pub placement: String,
    pub accelerator: String,
    /// Its metrics port, `http://HOST:PORT`.
    pub metrics: Option<String>,
}

impl Server {
    /// Starts `accel serve` on `database`, sending its Nova events to `nova_url`.
    pub async fn start(
        database: &str,
        bin: Option<&Path>,
        nova_url: &str,
        config: Option<&Path>,
    ) -> anyhow::Result<Server> {
        let bin = match bin {
            Some(b) => b.to_owned(),
            None => std::env::current_exe()?
                .parent()
                .context("no directory of accel-bench")?
                .join("accel"),
        };
        let mut command = Command::new(&bin);
        command.arg("serve");
        if let Some(c) = config {
            command.arg("--config").arg(c);
        }
        let mut child = command
            .args(["--database", database, "--log-format", "json"])
            .args(["--placement-listen", "127.0.0.1:0"])
            .args(["--accelerator-listen", "127.0.0.1:0"])
            .args([
                "--metrics-listen",
                "127.0.0.1:0",
                "--no-console",
                "--no-access-log",
            ])
            .args(["--nova-url", nova_url])
            .env("ACCEL_LOG", "warn,accel=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut lines = BufReader::new(child.stderr.take().context("no stderr")?).lines();
        let ready = loop {
            match lines.next_line().await? {
                Some(l) if l.contains("accel serve ready") => break l,
                Some(l) => eprintln!("accel: {l}"),
                None => bail!("accel serve exited before it was ready"),
            }
        };
        // Keep reading its log so the pipe never fills.
        tokio::spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                if l.contains("\"ERROR\"") {
                    eprintln!("accel: {l}");
                }
            }
        });
        let v: serde_json::Value = serde_json::from_str(&ready)?;
        let f = &v["fields"];
        let addr = |k: &str| {
            f[k].as_str()
                .map(|a| format!("http://{a}"))
                .with_context(|| format!("no {k} address in {ready}"))
        };
        Ok(Server {
            placement: addr("placement")?,
            accelerator: addr("accelerator")?,
            metrics: addr("metrics").ok(),
            child,
        })
    }

    /// User and system CPU seconds so far.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.child.id().unwrap_or(0))
    }

    /// Peak resident memory in MB.
    pub fn peak_rss_mb(&self) -> f64 {
        peak_rss_mb(self.child.id().unwrap_or(0))
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), self.child.wait()).await;
    }
}

fn proc_file(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{name}")).unwrap_or_default()
}

/// Process `pid`'s user and system CPU seconds so far (`/proc/PID/stat`, at 100
/// ticks a second, Linux's `USER_HZ`); 0 when it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = proc_file(pid, "stat");
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// Process `pid`'s peak resident memory in MB (`VmHWM`); 0 when it is gone.
pub fn peak_rss_mb(pid: u32) -> f64 {
    proc_file(pid, "status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
