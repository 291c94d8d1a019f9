//! A PostgreSQL server of the test's own, for the tests that stop and start the
//! database under a running accel (health turning 503 and back, writes under load
//! surviving a restart). The shared server at 127.0.0.1:5432 cannot be stopped, so
//! such a test runs `initdb` in a temporary directory and `pg_ctl` on a free port.
//!
//! initdb refuses to run as root: when the test runs as root, every tool runs as the
//! `postgres` user (`runuser`), which then owns the directory. The tools run through
//! `tokio::process` so that a test's other tasks (a load generator) keep running while
//! `pg_ctl` waits.

use std::path::PathBuf;
use std::process::Stdio;
use tokio::process::Command;

/// A private cluster; stopped (immediately) when dropped.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    /// A fresh cluster, initialised but not started; `None` when no server binaries
    /// (`initdb`, `pg_ctl`) are installed under `/usr/lib/postgresql/*/bin`.
    pub async fn init() -> Option<PrivatePostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
            .max()?;
        let uid = Command::new("id").arg("-u").output().await.unwrap();
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        let dir = tempfile::tempdir().unwrap();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .await
                .unwrap()
                .success();
            assert!(ok, "chown to postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePostgres {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = pg.data();
        let init = [
            "-D",
            &data,
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        ];
        pg.run("initdb", &init).await;
        Some(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The URL of database `db` as the trusted `postgres` user.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    fn tool(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// Runs a server tool; panics with its output when it fails.
    async fn run(&self, tool: &str, args: &[&str]) {
        let out = self.tool(tool).args(args).output().await.unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server and waits until it accepts connections. Durability is off
    /// (`fsync=off`): the tests stop it cleanly, and never lose the machine.
    pub async fn start(&self) {
        let data = self.data();
        let log = self.dir.path().join("log").display().to_string();
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-o", &opts, "-w", "start"],
        )
        .await;
    }

    /// Stops the server in `mode` (`smart`, `fast`, `immediate`) and waits for it.
    pub async fn stop(&self, mode: &str) {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-m", mode, "-w", "stop"])
            .await;
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .tool("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .as_std_mut()
            .status();
    }
}
