//! `accel serve` configuration: flags, environment (`ACCEL_*`) and a TOML file.
//!
//! Every key is declared once, in [`ServeConfig`]'s [`accel_settings::settings!`]
//! block: its doc comment is its `--help` text and the description in docs/configuration.md, and its
//! flag, environment variable, file key and default come from the same line
//! (a test holds docs/configuration.md's table to it). Precedence: flag, then
//! environment variable, then the file given by `--config`, then the default. The
//! file uses the keys' names; tables carry the settings of outgoing sessions:
//!
//! ```toml
//! database = "postgres://accel@127.0.0.1:5432/accel"
//! auth_strategy = "keystone"
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
use accel_settings::Secret;
use anyhow::{bail, Context};
use std::path::PathBuf;

accel_settings::settings! {
    /// `accel serve`'s settings, resolved (flag, environment, file, default).
    pub struct ServeConfig / ServeFlags / ServeFile {
        /// Database URL: sqlite://PATH (created when absent), postgres://USER@HOST:PORT/DB
        /// or mysql://USER[:PASSWORD]@HOST:PORT/DB (also mariadb://).
        database: String = optional("a SQLite file in the platform's data directory"),
            flag(long, env = "ACCEL_DATABASE", value_name = "URL");
        /// Address of the Placement API.
        placement_listen: String = value("127.0.0.1:8778".into()),
            flag(long, env = "ACCEL_PLACEMENT_LISTEN", value_name = "HOST:PORT");
        /// Address of the accelerator (Cyborg v2) API.
        accelerator_listen: String = value("127.0.0.1:6666".into()),
            flag(long, env = "ACCEL_ACCELERATOR_LISTEN", value_name = "HOST:PORT");
        /// noauth (upstream's noauth2: identity headers are trusted, loopback only
        /// unless insecure_noauth) or keystone (tokens validated by [keystone_authtoken]).
        auth_strategy: AuthStrategy = value(AuthStrategy::Noauth),
            flag(long, env = "ACCEL_AUTH_STRATEGY", value_name = "noauth|keystone");
        /// Allow auth_strategy noauth on a non-loopback listen address. noauth trusts
        /// identity headers from anyone who can connect: use it on trusted networks only.
        insecure_noauth: bool = switch(false), flag(long, env = "ACCEL_INSECURE_NOAUTH");
        /// Policy overrides in oslo.policy YAML syntax (rules of both APIs).
        policy_file: PathBuf = optional(),
            flag(long, env = "ACCEL_POLICY_FILE", value_name = "PATH");
        /// Enforce the new (secure RBAC) policy defaults instead of new-or-deprecated.
        enforce_new_defaults: bool = switch(false),
            flag(long, env = "ACCEL_ENFORCE_NEW_DEFAULTS");
        /// An origin allowed by CORS (repeatable; the variable takes a comma list).
        cors_allowed_origin: Vec<String> = value(Vec::new()),
            flag(long = "cors-allowed-origin", env = "ACCEL_CORS_ALLOWED_ORIGIN",
                 value_delimiter = ',', value_name = "ORIGIN");
        /// Server-side reruns of an allocation write that lost a provider race
        /// (upstream's allocation_conflict_retry_count).
        allocation_conflict_retry_count: u32 = value(10);
        /// Shuffle allocation candidates (upstream's randomize_allocation_candidates).
        randomize_allocation_candidates: bool = value(false);
        /// Most candidates computed per request, whatever limit says.
        max_allocation_candidates: usize = value(100_000);
        /// Log lines as text or json.
        log_format: String = value("text".into()),
            flag(long, env = "ACCEL_LOG_FORMAT", value_name = "text|json");
        /// Address of the metrics port: GET /metrics (Prometheus), /livez, /readyz.
        metrics_listen: String = value("127.0.0.1:9778".into()),
            flag(long, env = "ACCEL_METRICS_LISTEN", value_name = "HOST:PORT");
        /// Address of the operator's console, a read-only web view of hosts, consumers,
        /// ARQs, device profiles, Kubernetes slots and the candidate explainer.
        console_listen: String = value("127.0.0.1:8790".into()),
            flag(long, env = "ACCEL_CONSOLE_LISTEN", value_name = "HOST:PORT");
        /// Serve the console (the flag --no-console turns it off).
        console: bool = negated(true), flag(long = "no-console");
        /// One accel::access line per HTTP request (the flag --no-access-log turns it off).
        access_log: bool = negated(true), flag(long = "no-access-log");
        /// Apply missing schema migrations at start-up (the flag --no-migrate leaves
        /// them to `accel db sync` and refuses to start on a schema that lacks any).
        migrate: bool = negated(true), flag(long = "no-migrate");
        /// At start-up, report Cyborg's fake device (HOST_FakeDevice, 16 TEST_PCI
        /// handles, FPGA, CUSTOM_FAKE_DEVICE) as an agent on compute node HOST would,
        /// creating that compute node provider when absent.
        fake_devices: String = optional(),
            flag(long, env = "ACCEL_FAKE_DEVICES", value_name = "HOST");
        /// Start with writes stopped, for a cut-over (docs/migrating.md): both APIs answer
        /// writes 503 with this reason and serve reads. Kept in the database, so every
        /// replica sees it and it outlives a restart; DELETE /v2/maintenance ends it.
        maintenance: String = optional(),
            flag(long, env = "ACCEL_MAINTENANCE", value_name = "REASON");
        /// The [keystone_authtoken] table (keystonemiddleware's option names), required
        /// when auth_strategy is keystone.
        keystone_authtoken: KeystoneConfig = optional();
        /// Seconds an accepted ARQ bind may take before it ends BindFailed (upstream
        /// bind_timeout).
        bind_timeout_seconds: i64 = value(60),
            flag(long = "bind-timeout", env = "ACCEL_BIND_TIMEOUT", value_name = "SECONDS");
        /// Instances the bind worker binds at once (1 to 64; each in its own
        /// transactions, taken round-robin across hosts); Nova events are posted this
        /// many at once, at least 16.
        bind_concurrency: usize = optional("1 on SQLite (one writer), 4 on PostgreSQL and MariaDB/MySQL"),
            flag(long = "bind-concurrency", env = "ACCEL_BIND_CONCURRENCY", value_name = "N");
        /// Nova's compute API root (e.g. http://nova:8774/v2.1) for the
        /// accelerator-request-bound events. Without it (or [nova]) events are recorded,
        /// not sent.
        nova_url: String = optional(),
            flag(long, env = "ACCEL_NOVA_URL", value_name = "URL");
        /// A fixed X-Auth-Token sent to Nova with the events (or a [nova] table).
        nova_token: Secret = optional(),
            flag(long, env = "ACCEL_NOVA_TOKEN", value_name = "TOKEN", hide_env_values = true);
        /// The [nova] table: a Keystone session for the events.
        nova: SessionConfig = optional();
        /// The [placement] table: an external Placement that device providers are
        /// pushed to; without it they stay in the built-in one only.
        placement: PlacementConfig = optional();
        /// Seconds to keep retrying an unreachable database at start-up (each attempt's
        /// cause is logged) before exiting non-zero with the last cause.
        database_connect_timeout_seconds: u64 = value(60),
            flag(long = "database-connect-timeout", env = "ACCEL_DATABASE_CONNECT_TIMEOUT",
                 value_name = "SECONDS");
        /// Admission control: past the limits below, requests wait a bounded time and
        /// are then answered 503 with Retry-After. Off by default until its figures are
        /// measured on an idle machine (docs/benchmarks.md); off, no limit applies.
        admission: bool = value(false),
            flag(long, env = "ACCEL_ADMISSION");
        /// GET /allocation_candidates served at once; more wait up to admission_wait_ms
        /// for a place, then are answered 503 with Retry-After (0: no limit).
        admission_candidates: usize = optional("2 x the cores"),
            flag(long, env = "ACCEL_ADMISSION_CANDIDATES", value_name = "N");
        /// Other reads of both APIs served at once (as admission_candidates).
        admission_reads: usize = optional("8 x the cores"),
            flag(long, env = "ACCEL_ADMISSION_READS", value_name = "N");
        /// Writes other than binds served at once: claims, deletes, ARQ creates,
        /// inventories (as admission_candidates).
        admission_writes: usize = optional("4 x the cores"),
            flag(long, env = "ACCEL_ADMISSION_WRITES", value_name = "N");
        /// ARQ bind PATCHes served at once (as admission_candidates).
        admission_binds: usize = optional("2 x the cores"),
            flag(long, env = "ACCEL_ADMISSION_BINDS", value_name = "N");
        /// Agent requests (/v2/agent/...) served at once. They never wait: with no place
        /// free, or while a boot's request waits, they are answered 503 at once (0: no limit).
        admission_agents: usize = optional("the cores"),
            flag(long, env = "ACCEL_ADMISSION_AGENTS", value_name = "N");
        /// Milliseconds a request waits for a place in its class before the 503 (writes
        /// and binds, a boot's later steps, wait three times as long).
        admission_wait_ms: u64 = value(30),
            flag(long, env = "ACCEL_ADMISSION_WAIT_MS", value_name = "MS");
        /// The Retry-After seconds of an admission 503.
        admission_retry_after_seconds: u64 = value(1),
            flag(long = "admission-retry-after", env = "ACCEL_ADMISSION_RETRY_AFTER",
                 value_name = "SECONDS");
        /// Seconds a shutdown waits for requests in flight before it closes the
        /// connections left and exits; a second SIGINT or SIGTERM exits at once.
        shutdown_timeout_seconds: u64 = value(30),
            flag(long = "shutdown-timeout", env = "ACCEL_SHUTDOWN_TIMEOUT",
                 value_name = "SECONDS");
    }
}

/// `accel serve`'s command line: the configuration file and the declared flags.
#[derive(clap::Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML configuration file (the keys as the flags, with underscores).
    #[arg(long, env = "ACCEL_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub flags: ServeFlags,
}

impl ServeConfig {
    pub fn load(args: ServeArgs) -> anyhow::Result<Self> {
        let file: ServeFile = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                toml::from_str(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => ServeFile::default(),
        };
        let mut cfg = ServeConfig::resolve(args.flags, file);
        // An empty value (an unset variable in a unit file) means none.
        cfg.fake_devices = cfg.fake_devices.filter(|h| !h.is_empty());
        cfg.nova_url = cfg.nova_url.filter(|u| !u.is_empty());
        cfg.nova_token = cfg.nova_token.filter(|t| !t.is_empty());
        cfg.maintenance = cfg.maintenance.filter(|r| !r.trim().is_empty());
        cfg.validate()?;
        Ok(cfg)
    }

    /// Every rule a value must meet, naming its key.
    fn validate(&self) -> anyhow::Result<()> {
        let cfg = self;
        if cfg.log_format != "text" && cfg.log_format != "json" {
            bail!("log_format must be text or json, not {:?}", cfg.log_format);
        }
        if cfg.auth_strategy == AuthStrategy::Noauth && !cfg.insecure_noauth {
            // The console in noauth mode acts as admin: the same rule holds for it.
            let console = cfg.console_addr().map(|a| ("console_listen", a));
            for (key, addr) in [
                ("placement_listen", cfg.placement_listen.as_str()),
                ("accelerator_listen", cfg.accelerator_listen.as_str()),
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
        if !(1..=64).contains(&cfg.bind_concurrency()) {
            bail!(
                "bind_concurrency must be between 1 and 64, not {} (a server database's pool \
                 has 16 connections: more instances at once only queue for them)",
                cfg.bind_concurrency()
            );
        }
        if cfg.admission_wait_ms > 60_000 {
            bail!(
                "admission_wait_ms must be at most 60000, not {} (a request that waits longer is \
                 better answered 503 so its client retries)",
                cfg.admission_wait_ms
            );
        }
        if !(1..=3600).contains(&cfg.admission_retry_after_seconds) {
            bail!(
                "admission_retry_after_seconds must be between 1 and 3600, not {}",
                cfg.admission_retry_after_seconds
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
            match &cfg.keystone_authtoken {
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
        Ok(())
    }

    /// Where the console listens; `None` serves none (`--no-console`, `console = false`).
    pub fn console_addr(&self) -> Option<&str> {
        self.console.then_some(self.console_listen.as_str())
    }

    /// Instances bound at once: as set, else what the database suits.
    pub fn bind_concurrency(&self) -> usize {
        self.bind_concurrency.unwrap_or_else(|| {
            accel_server::accelerator::binder::default_concurrency(self.database.as_deref())
        })
    }

    /// The server's HTTP limits, with the configured shutdown drain.
    pub fn http_limits(&self) -> accel_server::listen::HttpLimits {
        accel_server::listen::HttpLimits {
            shutdown_timeout: std::time::Duration::from_secs(self.shutdown_timeout_seconds),
            ..Default::default()
        }
    }

    /// The admission limits: none unless `admission` is on; then as set, else sized
    /// from the machine's cores.
    pub fn admission_limits(&self) -> accel_server::admission::Limits {
        if !self.admission {
            return accel_server::admission::Limits::default();
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let d = accel_server::admission::Limits::for_cores(cores);
        accel_server::admission::Limits {
            candidates: self.admission_candidates.unwrap_or(d.candidates),
            reads: self.admission_reads.unwrap_or(d.reads),
            writes: self.admission_writes.unwrap_or(d.writes),
            binds: self.admission_binds.unwrap_or(d.binds),
            agents: self.admission_agents.unwrap_or(d.agents),
            wait: std::time::Duration::from_millis(self.admission_wait_ms),
            retry_after_secs: self.admission_retry_after_seconds,
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
        redact_url(&self.database_url().unwrap_or_default())
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
        let keystone = match (self.auth_strategy, &self.keystone_authtoken) {
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
            admission: self.admission_limits(),
        })
    }
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
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

/// `accel serve ARGV`, parsed as the command line is (tests).
#[cfg(test)]
pub(crate) fn args(argv: &[&str]) -> ServeArgs {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    Cli::parse_from(std::iter::once("serve").chain(argv.iter().copied())).serve
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
        let err = load(args(&["--placement-listen", "0.0.0.0:8778"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--insecure-noauth") && err.contains("placement_listen"),
            "{err}"
        );
        let err = load(args(&["--accelerator-listen", "[::]:6666"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("accelerator_listen"), "{err}");
        let cfg = load(args(&[
            "--placement-listen",
            "0.0.0.0:8778",
            "--insecure-noauth",
        ]))
        .unwrap();
        assert!(cfg.insecure_noauth);
        // The defaults listen on loopback and need nothing.
        let cfg = load(args(&[])).unwrap();
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
        let cfg = load(args(&["--config", path.to_str().unwrap()]));
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
