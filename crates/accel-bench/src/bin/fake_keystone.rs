//! A fake Keystone v3 to run tempest (and accel's Keystone mode) against, without a
//! real identity service: the test kit's fake Keystone (`accel_testkit::keystone`,
//! the one accel's own Keystone-mode tests run against) on a configured address.
//! Development only: tokens live in memory and nothing is persisted, there is no TLS,
//! and every password is compared in clear text.
//!
//! Users come from tempest's own pre-provisioned credentials file (`accounts.yaml`:
//! `username`, `password`, `project_name` or `tenant_name`, or `system: all`, and
//! `roles`), so tempest and this service read the same list; `--accounts` may be given
//! several times (accel's own service user can live in a second file). Served:
//!
//! - `POST /v3/auth/tokens`: password auth, scoped to a project (by name and domain, or
//!   by id) or to the system; `201` with `X-Subject-Token` and Keystone's token body,
//!   including the service catalog (unless `?nocatalog`).
//! - `GET /v3/auth/tokens`: validation of `X-Subject-Token` by the holder of a live
//!   `X-Auth-Token` (keystonemiddleware's call); `404` for an unknown or expired token
//!   unless `allow_expired=1`.
//! - `GET /v3` and `GET /`: version documents.
//!
//! Roles in tokens are expanded with Keystone's default implied roles (admin → manager
//! → member → reader), as a real Keystone does when it issues a token. The catalog lists
//! `identity` (this service) and `accelerator` (`--accelerator-url`) with public,
//! internal and admin endpoints in `--region`.
//!
//! ```sh
//! accel-fake-keystone --listen 127.0.0.1:19550 --accounts accounts.yaml \
//!     --accelerator-url http://127.0.0.1:19551/accelerator/v2
//! ```

use accel_testkit::keystone::{catalog_service, id_of, FakeKeystone, Project, Subject};
use anyhow::Context;
use clap::Parser;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "A fake Keystone v3 for development: password tokens, validation, a catalog")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:5000")]
    listen: String,
    /// tempest-style accounts file (repeatable).
    #[arg(long, required = true)]
    accounts: Vec<std::path::PathBuf>,
    /// The accelerator endpoint for the catalog (Cyborg registers `.../accelerator/v2`).
    #[arg(long)]
    accelerator_url: String,
    /// This service's public URL, for the catalog (default: `http://<listen>`).
    #[arg(long)]
    public_url: Option<String>,
    /// Region of every catalog endpoint.
    #[arg(long, default_value = "RegionOne")]
    region: String,
    /// Token lifetime in seconds.
    #[arg(long, default_value_t = 3600)]
    token_lifetime: u64,
}

/// One entry of tempest's accounts file (other keys are ignored).
#[derive(Debug, Clone, serde::Deserialize)]
struct Account {
    username: String,
    password: String,
    #[serde(default)]
    project_name: Option<String>,
    #[serde(default)]
    tenant_name: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
}

impl Account {
    /// The account as Keystone would issue its tokens: stable Keystone-shaped ids,
    /// roles with their default implications.
    fn subject(&self) -> Subject {
        let project = self
            .project_name
            .as_deref()
            .or(self.tenant_name.as_deref())
            .map(|p| Project {
                id: id_of("project", p),
                name: p.to_owned(),
            });
        Subject {
            user_id: id_of("user", &self.username),
            user_name: self.username.clone(),
            system: self.system.is_some(),
            project,
            roles: self.roles.clone(),
        }
        .with_implied_roles()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let public = args
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", args.listen));
    let identity = format!("{}/v3", public.trim_end_matches('/'));
    let ks = FakeKeystone::new(&public);
    for path in &args.accounts {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let list: Vec<Account> = serde_yaml::from_str(&text)
            .with_context(|| format!("{}: not a list of tempest accounts", path.display()))?;
        for a in list {
            if a.project_name.is_none() && a.tenant_name.is_none() && a.system.is_none() {
                anyhow::bail!(
                    "{}: account {} has neither project_name nor system",
                    path.display(),
                    a.username
                );
            }
            ks.add_user(&a.password, a.subject());
        }
    }
    ks.set_catalog(serde_json::json!([
        catalog_service("identity", "keystone", &identity, &args.region),
        catalog_service("accelerator", "cyborg", &args.accelerator_url, &args.region),
    ]));
    ks.set_password_token_lifetime(Duration::from_secs(args.token_lifetime));
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    eprintln!("fake Keystone on {public} (identity {identity})");
    axum::serve(listener, ks.router()).await?;
    Ok(())
}
