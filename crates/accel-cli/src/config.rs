//! `accel serve` configuration: flags, environment (`ACCEL_*`) and a TOML file.
//!
//! Precedence: flag, then environment variable, then the file given by `--config`,
//! then the built-in default. The file uses the flags' names with underscores:
//!
//! ```toml
//! database = "postgres://accel@127.0.0.1:5432/accel"
//! placement_listen = "0.0.0.0:8778"
//! accelerator_listen = "0.0.0.0:6666"
//! auth_strategy = "keystone"        # or "noauth": loopback only unless insecure_noauth
//! insecure_noauth = false           # allow noauth on a non-loopback address
//! database_connect_timeout_seconds = 60  # retry an unreachable database this long
//! shutdown_timeout_seconds = 30     # drain this long at shutdown, then exit
//! policy_file = "/etc/accel/policy.yaml"
//! enforce_new_defaults = false
//! cors_allowed_origin = ["https://dashboard.example.com"]
//! allocation_conflict_retry_count = 10
//! randomize_allocation_candidates = false
//! max_allocation_candidates = 100000
//! log_format = "text"               # or "json"
//! metrics_listen = "127.0.0.1:9778" # /metrics, /livez, /readyz
//! console_listen = "127.0.0.1:8790" # the operator's console (read-only web view)
//! console = true                    # false: no console (--no-console)
//! access_log = true                 # one accel::access line per request
//! fake_devices = "compute1"         # report Cyborg's fake device for this host
//! bind_timeout_seconds = 60         # an ARQ bind ends (Bound or BindFailed) by then
//! bind_concurrency = 4              # instances bound, Nova events sent, at once (default: 1 on SQLite, 4 on a server database)
//! nova_url = "http://nova:8774/v2.1"  # where accelerator-request-bound events go
//! nova_token = "..."                # a fixed X-Auth-Token for Nova (without [nova])
//!
//! # Events to Nova through a Keystone session (keystoneauth's option names): the
//! # token is renewed before it expires and after a 401, and Nova's URL is the
//! # catalog's compute endpoint unless endpoint_override (or nova_url) is set.
//! [nova]
//! auth_url = "http://keystone:5000/v3"
//! username = "cyborg"
//! password = "secret"
//! project_name = "service"
//! user_domain_name = "Default"      # default
//! project_domain_name = "Default"   # default
//! region_name = "RegionOne"         # default: any region
//! interface = "internal"            # default public
//!
//! # With auth_strategy = "keystone" (keystonemiddleware's option names):
//! [keystone_authtoken]
//! auth_url = "http://keystone:5000/v3"
//! username = "cyborg"
//! password = "secret"
//! project_name = "service"
//! user_domain_name = "Default"      # default
//! project_domain_name = "Default"   # default
//! service_token_roles = ["service"] # default
//! service_token_roles_required = true  # default
//! token_cache_time = 300            # seconds; -1 disables
//!
//! # Push device providers to an external OpenStack Placement too (keystoneauth's
//! # option names, as Cyborg's [placement]); without this table, nothing is pushed.
//! [placement]
//! endpoint_override = "http://ctl/placement"  # or the catalog's (service type placement)
//! auth_url = "http://keystone:5000/v3"
//! username = "cyborg"
//! password = "secret"
//! project_name = "service"
//! user_domain_name = "Default"      # default
//! project_domain_name = "Default"   # default
//! region_name = "RegionOne"         # catalog region; any when unset
//! interface = "public"              # catalog interface: public (default), internal, admin
//! # token = "admin"                 # instead of Keystone: a fixed X-Auth-Token
//! timeout = 30                      # seconds per request
//! ```
//!
//! Unknown keys are rejected so a typo fails at start-up instead of being ignored.

use accel_keystone::SessionConfig;
use accel_server::auth::keystone::KeystoneConfig;
use accel_server::auth::AuthStrategy;
use accel_server::external::PlacementConfig;
use anyhow::{bail, Context};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML configuration file (keys as the flags, with underscores).
    #[arg(long, env = "ACCEL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://PATH (created when absent) or postgres://USER@HOST:PORT/DB.
    /// Default: a SQLite file in the platform's data directory.
    #[arg(long, env = "ACCEL_DATABASE")]
    pub database: Option<String>,
    /// Address of the Placement API [default: 127.0.0.1:8778].
    #[arg(long, env = "ACCEL_PLACEMENT_LISTEN")]
    pub placement_listen: Option<String>,
    /// Address of the accelerator (Cyborg v2) API [default: 127.0.0.1:6666].
    #[arg(long, env = "ACCEL_ACCELERATOR_LISTEN")]
    pub accelerator_listen: Option<String>,
    /// noauth (upstream's noauth2) or keystone [default: noauth].
    #[arg(long, env = "ACCEL_AUTH_STRATEGY")]
    pub auth_strategy: Option<AuthStrategy>,
    /// Policy overrides in oslo.policy YAML syntax.
    #[arg(long, env = "ACCEL_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// Enforce the new (secure RBAC) policy defaults instead of new-or-deprecated.
    #[arg(long, env = "ACCEL_ENFORCE_NEW_DEFAULTS")]
    pub enforce_new_defaults: bool,
    /// An origin allowed by CORS (repeatable).
    #[arg(
        long = "cors-allowed-origin",
        env = "ACCEL_CORS_ALLOWED_ORIGIN",
        value_delimiter = ','
    )]
    pub cors_allowed_origin: Vec<String>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "ACCEL_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Address of the metrics port: GET /metrics (Prometheus), /livez, /readyz
    /// [default: 127.0.0.1:9778].
    #[arg(long, env = "ACCEL_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Address of the operator's console, a read-only web view of hosts, consumers,
    /// ARQs, device profiles, Kubernetes slots and the candidate explainer
    /// [default: 127.0.0.1:8790].
    #[arg(long, env = "ACCEL_CONSOLE_LISTEN", value_name = "HOST:PORT")]
    pub console_listen: Option<String>,
    /// Serve no console (config: console = false).
    #[arg(long)]
    pub no_console: bool,
    /// Write no `accel::access` line per HTTP request (config: access_log = false).
    #[arg(long)]
    pub no_access_log: bool,
    /// At start-up, report Cyborg's fake device (`HOST_FakeDevice`, 16 TEST_PCI
    /// handles, FPGA, CUSTOM_FAKE_DEVICE) as an agent on compute node HOST would,
    /// creating that compute node provider when absent.
    #[arg(long, env = "ACCEL_FAKE_DEVICES", value_name = "HOST")]
    pub fake_devices: Option<String>,
    /// Seconds an accepted ARQ bind may take before it ends BindFailed (upstream
    /// `bind_timeout`) [default: 60].
    #[arg(
        long = "bind-timeout",
        env = "ACCEL_BIND_TIMEOUT",
        value_name = "SECONDS"
    )]
    pub bind_timeout_seconds: Option<i64>,
    /// Instances the bind worker binds at once, and Nova events it sends at once
    /// (1 to 64; each in its own transactions, taken round-robin across hosts)
    /// [default: 8].
    #[arg(
        long = "bind-concurrency",
        env = "ACCEL_BIND_CONCURRENCY",
        value_name = "N"
    )]
    pub bind_concurrency: Option<usize>,
    /// Nova's compute API root (e.g. http://nova:8774/v2.1) for the
    /// accelerator-request-bound events. Without it events are recorded, not sent.
    #[arg(long, env = "ACCEL_NOVA_URL", value_name = "URL")]
    pub nova_url: Option<String>,
    /// Token sent to Nova as X-Auth-Token with the events.
    #[arg(
        long,
        env = "ACCEL_NOVA_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub nova_token: Option<String>,
    /// Seconds to keep retrying an unreachable database at start-up (each attempt's
    /// cause is logged) before exiting non-zero with the last cause [default: 60].
    #[arg(
        long = "database-connect-timeout",
        env = "ACCEL_DATABASE_CONNECT_TIMEOUT",
        value_name = "SECONDS"
    )]
    pub database_connect_timeout_seconds: Option<u64>,
    /// Seconds a shutdown waits for requests in flight before it closes the
    /// connections left and exits; a second SIGINT or SIGTERM exits at once
    /// [default: 30].
    #[arg(
        long = "shutdown-timeout",
        env = "ACCEL_SHUTDOWN_TIMEOUT",
        value_name = "SECONDS"
    )]
    pub shutdown_timeout_seconds: Option<u64>,
    /// Allow auth_strategy noauth on a non-loopback listen address. noauth trusts
    /// identity headers from anyone who can connect: use it on trusted networks only.
    #[arg(long, env = "ACCEL_INSECURE_NOAUTH")]
    pub insecure_noauth: bool,
}

/// The configuration file's schema.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    database: Option<String>,
    placement_listen: Option<String>,
    accelerator_listen: Option<String>,
    auth_strategy: Option<AuthStrategy>,
    policy_file: Option<PathBuf>,
    enforce_new_defaults: Option<bool>,
    cors_allowed_origin: Option<Vec<String>>,
    allocation_conflict_retry_count: Option<u32>,
    randomize_allocation_candidates: Option<bool>,
    max_allocation_candidates: Option<usize>,
    log_format: Option<String>,
    metrics_listen: Option<String>,
    console_listen: Option<String>,
    console: Option<bool>,
    access_log: Option<bool>,
    fake_devices: Option<String>,
    keystone_authtoken: Option<KeystoneConfig>,
    bind_timeout_seconds: Option<i64>,
    bind_concurrency: Option<usize>,
    nova_url: Option<String>,
    nova_token: Option<String>,
    nova: Option<SessionConfig>,
    placement: Option<PlacementConfig>,
    database_connect_timeout_seconds: Option<u64>,
    shutdown_timeout_seconds: Option<u64>,
    insecure_noauth: Option<bool>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub database: Option<String>,
    pub placement_listen: String,
    pub accelerator_listen: String,
    pub auth_strategy: AuthStrategy,
    pub policy_file: Option<PathBuf>,
    pub enforce_new_defaults: bool,
    pub cors_allowed_origin: Vec<String>,
    pub allocation_conflict_retry_count: u32,
    pub randomize_allocation_candidates: bool,
    pub max_allocation_candidates: usize,
    pub log_format: String,
    /// Address of the metrics port (`/metrics`, `/livez`, `/readyz`).
    pub metrics_listen: String,
    /// Address of the operator's console; `None` serves none (`--no-console`,
    /// `console = false`).
    pub console_listen: Option<String>,
    /// One `accel::access` line per request.
    pub access_log: bool,
    /// Host whose fake device is reported at start-up, if any.
    pub fake_devices: Option<String>,
    /// The `[keystone_authtoken]` table (required when `auth_strategy` is keystone).
    pub keystone: Option<KeystoneConfig>,
    /// Seconds an accepted bind may take before it ends BindFailed.
    pub bind_timeout_seconds: i64,
    /// Instances bound, and Nova events sent, at once.
    pub bind_concurrency: usize,
    /// Nova's compute API root for external events; `None` records them unsent.
    pub nova_url: Option<String>,
    pub nova_token: Option<String>,
    /// The `[nova]` table: a Keystone session for the events.
    pub nova: Option<SessionConfig>,
    /// The `[placement]` table: an external Placement that device providers are
    /// pushed to; `None` keeps them in the built-in one only.
    pub placement: Option<PlacementConfig>,
    /// Seconds to retry an unreachable database at start-up.
    pub database_connect_timeout_seconds: u64,
    /// Seconds a shutdown drains before it closes what is left.
    pub shutdown_timeout_seconds: u64,
    /// noauth on a non-loopback address was asked for explicitly.
    pub insecure_noauth: bool,
}

impl ServeConfig {
    pub fn load(args: ServeArgs) -> anyhow::Result<Self> {
        let file: FileConfig = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                toml::from_str(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let log_format = args
            .log_format
            .or(file.log_format)
            .unwrap_or_else(|| "text".into());
        if log_format != "text" && log_format != "json" {
            bail!("log_format must be text or json, not {log_format:?}");
        }
        let database = args.database.or(file.database);
        let bind_concurrency = args.bind_concurrency.or(file.bind_concurrency).unwrap_or(
            accel_server::accelerator::binder::default_concurrency(database.as_deref()),
        );
        let cfg = ServeConfig {
            database,
            placement_listen: args
                .placement_listen
                .or(file.placement_listen)
                .unwrap_or_else(|| "127.0.0.1:8778".into()),
            accelerator_listen: args
                .accelerator_listen
                .or(file.accelerator_listen)
                .unwrap_or_else(|| "127.0.0.1:6666".into()),
            auth_strategy: args
                .auth_strategy
                .or(file.auth_strategy)
                .unwrap_or_default(),
            policy_file: args.policy_file.or(file.policy_file),
            enforce_new_defaults: args.enforce_new_defaults
                || file.enforce_new_defaults.unwrap_or(false),
            cors_allowed_origin: if args.cors_allowed_origin.is_empty() {
                file.cors_allowed_origin.unwrap_or_default()
            } else {
                args.cors_allowed_origin
            },
            allocation_conflict_retry_count: file.allocation_conflict_retry_count.unwrap_or(10),
            randomize_allocation_candidates: file.randomize_allocation_candidates.unwrap_or(false),
            max_allocation_candidates: file.max_allocation_candidates.unwrap_or(100_000),
            log_format,
            metrics_listen: args
                .metrics_listen
                .or(file.metrics_listen)
                .unwrap_or_else(|| "127.0.0.1:9778".into()),
            console_listen: if args.no_console || file.console == Some(false) {
                None
            } else {
                Some(
                    args.console_listen
                        .or(file.console_listen)
                        .unwrap_or_else(|| "127.0.0.1:8790".into()),
                )
            },
            access_log: !args.no_access_log && file.access_log.unwrap_or(true),
            fake_devices: args
                .fake_devices
                .or(file.fake_devices)
                .filter(|h| !h.is_empty()),
            keystone: file.keystone_authtoken,
            bind_timeout_seconds: args
                .bind_timeout_seconds
                .or(file.bind_timeout_seconds)
                .unwrap_or(60),
            bind_concurrency,
            nova_url: args.nova_url.or(file.nova_url).filter(|u| !u.is_empty()),
            nova_token: args
                .nova_token
                .or(file.nova_token)
                .filter(|t| !t.is_empty()),
            nova: file.nova,
            placement: file.placement,
            database_connect_timeout_seconds: args
                .database_connect_timeout_seconds
                .or(file.database_connect_timeout_seconds)
                .unwrap_or(60),
            shutdown_timeout_seconds: args
                .shutdown_timeout_seconds
                .or(file.shutdown_timeout_seconds)
                .unwrap_or(30),
            insecure_noauth: args.insecure_noauth || file.insecure_noauth.unwrap_or(false),
        };
        if cfg.auth_strategy == AuthStrategy::Noauth && !cfg.insecure_noauth {
            // The console in noauth mode acts as admin: the same rule holds for it.
            let console = cfg.console_listen.iter().map(|a| ("console_listen", a));
            for (key, addr) in [
                ("placement_listen", &cfg.placement_listen),
                ("accelerator_listen", &cfg.accelerator_listen),
            ]
            .into_iter()
            .chain(console)
            {
                if !is_loopback(addr) {
                    bail!(
                        "{key} {addr:?} is not a loopback address and auth_strategy is noauth, \
                         which trusts identity headers from anyone who can connect: use \
                         auth_strategy keystone, listen on 127.0.0.1, or pass \
                         --insecure-noauth (insecure_noauth = true) if this network is trusted"
                    );
                }
            }
        }
        if let Some(p) = &cfg.placement {
            p.validate().map_err(anyhow::Error::msg)?;
        }
        if !(1..=86_400).contains(&cfg.bind_timeout_seconds) {
            bail!(
                "bind_timeout_seconds must be between 1 and 86400, not {}",
                cfg.bind_timeout_seconds
            );
        }
        if !(1..=64).contains(&cfg.bind_concurrency) {
            bail!(
                "bind_concurrency must be between 1 and 64, not {} (a server database's pool \
                 has 16 connections: more instances at once only queue for them)",
                cfg.bind_concurrency
            );
        }
        if let Some(u) = &cfg.nova_url {
            if !u.starts_with("http://") && !u.starts_with("https://") {
                bail!("nova_url must be an http:// or https:// URL of the compute API root, not {u:?}");
            }
        }
        if let Some(n) = &cfg.nova {
            n.validate("nova").map_err(anyhow::Error::msg)?;
            if cfg.nova_token.is_some() {
                bail!("nova_token and a [nova] table both say how to reach Nova: keep one");
            }
        }
        if cfg.auth_strategy == AuthStrategy::Keystone {
            match &cfg.keystone {
                None => bail!(
                    "auth_strategy is keystone: the config file needs a [keystone_authtoken] \
                     table with auth_url, username, password and project_name"
                ),
                Some(k) => k.validate().map_err(anyhow::Error::msg)?,
            }
        }
        if let Some(host) = &cfg.fake_devices {
            if host.len() > 200 || host.chars().any(char::is_whitespace) {
                bail!("fake_devices must be a host name (no spaces, at most 200 characters), not {host:?}");
            }
        }
        Ok(cfg)
    }

    /// The server's HTTP limits, with the configured shutdown drain.
    pub fn http_limits(&self) -> accel_server::listen::HttpLimits {
        accel_server::listen::HttpLimits {
            shutdown_timeout: std::time::Duration::from_secs(self.shutdown_timeout_seconds),
            ..Default::default()
        }
    }

    /// The database URL, defaulting to `<data dir>/accel/accel.db`.
    pub fn database_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.database {
            return Ok(url.clone());
        }
        let dir = dirs::data_dir()
            .context("no platform data directory; pass --database")?
            .join("accel");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating data directory {}", dir.display()))?;
        Ok(format!("sqlite://{}", dir.join("accel.db").display()))
    }

    /// The database URL without any password.
    pub fn redacted_database(&self) -> String {
        let url = self.database_url().unwrap_or_default();
        match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(at)) if at > s => {
                let creds = &url[s + 3..at];
                match creds.split_once(':') {
                    Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                    None => url,
                }
            }
            _ => url,
        }
    }

    pub fn policy(&self) -> anyhow::Result<accel_core::policy::Policy> {
        let mut policy = accel_core::policy::Policy::placement(self.enforce_new_defaults);
        if let Some(path) = &self.policy_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading policy file {}", path.display()))?;
            policy = policy
                .with_overrides_yaml(&text)
                .with_context(|| format!("invalid policy file {}", path.display()))?;
        }
        Ok(policy)
    }

    /// Cyborg's rules for the accelerator API, with the same policy file applied: an
    /// operator's file may hold rules for both services (their API rule names differ).
    pub fn accelerator_policy(&self) -> anyhow::Result<accel_core::policy::Policy> {
        let mut policy = accel_core::policy::Policy::cyborg(self.enforce_new_defaults);
        if let Some(path) = &self.policy_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading policy file {}", path.display()))?;
            policy = policy
                .with_overrides_yaml(&text)
                .with_context(|| format!("invalid policy file {}", path.display()))?;
        }
        Ok(policy)
    }

    pub fn server_config(&self) -> anyhow::Result<accel_server::ServerConfig> {
        let keystone = match (self.auth_strategy, &self.keystone) {
            (AuthStrategy::Keystone, Some(k)) => Some(std::sync::Arc::new(
                accel_server::auth::keystone::Keystone::new(k.clone())
                    .map_err(anyhow::Error::msg)?,
            )),
            _ => None,
        };
        Ok(accel_server::ServerConfig {
            auth_strategy: self.auth_strategy,
            cors_allowed_origins: self.cors_allowed_origin.clone(),
            allocation_conflict_retry_count: self.allocation_conflict_retry_count,
            randomize_allocation_candidates: self.randomize_allocation_candidates,
            max_allocation_candidates: self.max_allocation_candidates,
            keystone,
            http: self.http_limits(),
            disable_access_log: !self.access_log,
        })
    }
}

/// Whether a listen address (`HOST:PORT`) only accepts connections from this host: a
/// loopback IP (`127.0.0.0/8`, `::1`) or `localhost`. Names other than `localhost`
/// count as reachable from elsewhere.
fn is_loopback(addr: &str) -> bool {
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback();
    }
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod noauth_tests {
    use super::*;

    fn load(args: ServeArgs) -> anyhow::Result<ServeConfig> {
        ServeConfig::load(args)
    }

    #[test]
    fn loopback_addresses() {
        for a in [
            "127.0.0.1:8778",
            "127.1.2.3:1",
            "[::1]:6666",
            "localhost:8778",
        ] {
            assert!(is_loopback(a), "{a}");
        }
        for a in [
            "0.0.0.0:8778",
            "[::]:6666",
            "10.0.0.1:8778",
            "ctl.example.org:8778",
        ] {
            assert!(!is_loopback(a), "{a}");
        }
    }

    #[test]
    fn noauth_on_a_public_address_needs_insecure_noauth() {
        let err = load(ServeArgs {
            placement_listen: Some("0.0.0.0:8778".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("--insecure-noauth") && err.contains("placement_listen"),
            "{err}"
        );
        let err = load(ServeArgs {
            accelerator_listen: Some("[::]:6666".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("accelerator_listen"), "{err}");
        let cfg = load(ServeArgs {
            placement_listen: Some("0.0.0.0:8778".into()),
            insecure_noauth: true,
            ..Default::default()
        })
        .unwrap();
        assert!(cfg.insecure_noauth);
        // The defaults listen on loopback and need nothing.
        let cfg = load(ServeArgs::default()).unwrap();
        assert_eq!(
            (
                cfg.database_connect_timeout_seconds,
                cfg.shutdown_timeout_seconds
            ),
            (60, 30)
        );
    }

    #[test]
    fn the_file_says_it_too() {
        let path = std::env::temp_dir().join(format!("accel-noauth-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "placement_listen = \"0.0.0.0:8778\"\ninsecure_noauth = true\n\
             database_connect_timeout_seconds = 5\nshutdown_timeout_seconds = 2\n",
        )
        .unwrap();
        let cfg = load(ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        });
        let _ = std::fs::remove_file(&path);
        let cfg = cfg.unwrap();
        assert_eq!(
            (
                cfg.database_connect_timeout_seconds,
                cfg.shutdown_timeout_seconds
            ),
            (5, 2)
        );
        assert_eq!(
            cfg.http_limits().shutdown_timeout,
            std::time::Duration::from_secs(2)
        );
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod console_tests;
