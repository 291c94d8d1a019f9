//! What the CLI's test files share: reading Placement as the admin of noauth, and
//! running the built `accel`.

use serde_json::Value;

/// `GET {placement}{path}` with the noauth admin token, as JSON.
#[allow(dead_code)] // not every test file reads Placement
pub async fn placement_get(placement: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{placement}{path}"))
        .header("x-auth-token", "admin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// What one run of the built `accel` printed.
#[allow(dead_code)] // not every test file runs the binary
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

#[allow(dead_code)]
impl Run {
    /// Whether it exited 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// Its output as JSON, after checking it exited 0.
    pub fn json(&self) -> serde_json::Value {
        assert!(self.ok(), "command failed: {}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

/// Runs the built `accel` with `args` and these environment variables (and no
/// ambient `ACCEL_SERVICE_TOKEN`).
#[allow(dead_code)]
pub async fn accel(args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(args)
        .env_remove("ACCEL_SERVICE_TOKEN")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
