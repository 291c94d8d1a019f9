//! The `accel` command: the composition root that wires configuration, the store and
//! the servers together. `accel serve` runs both APIs, `accel agent` the node agent;
//! the client commands, `boot`/`unboot` and `explain` speak HTTP to a server.

#[cfg(feature = "agent")]
mod agent;
mod boot;
mod client;
#[cfg(feature = "server")]
mod config;
#[cfg(feature = "server")]
mod db;
mod explain;
#[cfg(feature = "server")]
mod startup;
#[cfg(feature = "server")]
mod transfer;

#[cfg(feature = "server")]
use anyhow::Context;
use clap::{Parser, Subcommand};
#[cfg(feature = "server")]
use std::sync::Arc;

/// The API renders large JSON documents and decodes many rows per request; glibc's
/// allocator spent about a quarter of the CPU of a provider listing (perf, see
/// docs/benchmarks.md), mimalloc a fraction of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The commit this binary is built from (build.rs): `--version`, `accel_build_info` of
/// the server and the agent, and the start-up lines all say this one.
#[cfg(any(feature = "server", feature = "agent"))]
pub(crate) const COMMIT: &str = env!("ACCEL_GIT_COMMIT");

/// `accel --version` (and every subcommand's): the release and the commit built.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ACCEL_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "accel",
    version = VERSION,
    propagate_version = true,
    about = "Accelerator management: Placement- and Cyborg-compatible APIs, node agent"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API server: the Placement API (1.0-1.39) and the accelerator API (Cyborg
    /// v2, 2.0-2.3) over one database, with the bind and event workers.
    #[cfg(feature = "server")]
    #[command(
        after_help = "Example (SQLite in the data directory, noauth, a fake FPGA on compute1):\n  accel serve --fake-devices compute1"
    )]
    Serve(Box<config::ServeArgs>),
    /// Device profiles of the accelerator API: create, list, show, delete.
    #[command(
        after_help = "Example:\n  accel device-profile create dp1 --group resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required"
    )]
    DeviceProfile(client::ProfileArgs),
    /// Placement's resource providers: list, show, tree, usage (reads, without
    /// osc-placement).
    #[command(
        after_help = "Examples:\n  accel provider list\n  accel provider tree compute1\n  accel provider usage compute1_FakeDevice -f json"
    )]
    Provider(client::providers::ProviderArgs),
    /// Accelerator requests: create, list, show, bind, unbind, delete.
    #[command(after_help = "Example:\n  accel arq create dp1 -f json")]
    Arq(client::ArqArgs),
    /// Devices cleaned between tenants: list with their cleaning state, clean again,
    /// release after a manual check (admin).
    #[command(after_help = "Example:\n  accel device list")]
    Device(client::DeviceArgs),
    /// Boot an instance's accelerators as Nova would, without Nova: claim in Placement,
    /// create and bind the device profile's ARQs, print the attach handles.
    #[command(after_help = "Example:\n  accel boot --device-profile dp1 --resources VCPU=1")]
    Boot(boot::BootArgs),
    /// Reverse of boot: unbind and delete the instance's ARQs, release its allocations
    /// (exits 1 when the instance has neither).
    #[command(
        after_help = "Example:\n  accel unboot --instance 7c9e6679-7425-40de-944b-e07fc1f90ae7"
    )]
    Unboot(boot::UnbootArgs),
    /// Why a root provider does or does not yield allocation candidates ("no valid
    /// host"): Placement's answer root by root, with every reason.
    #[command(
        after_help = "Examples:\n  accel explain 'resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL&group_policy=isolate'\n  accel explain --device-profile dp1 --resources VCPU=1 -f json\n\nExit status: 0 explained; 1 an error (Placement's 400 included); 2 Placement's answer and the providers read disagreed twice (data changing)"
    )]
    Explain(explain::ExplainArgs),
    /// Take over a running cloud: import an upstream Placement database into accel's
    /// (docs/migrating.md).
    #[cfg(feature = "server")]
    Import(transfer::ImportArgs),
    /// The way back: write accel's Placement data into an empty upstream Placement
    /// database (docs/migrating.md).
    #[cfg(feature = "server")]
    Export(transfer::ExportArgs),
    /// The database's schema: its version, and the migrations applied as a step of
    /// their own (`accel serve --no-migrate` then leaves them alone).
    #[cfg(feature = "server")]
    Db(db::DbArgs),
    /// Before an upgrade: can this accel serve the database (configuration, database,
    /// schema)? Exit status 0 success, 1 warning, 2 failure.
    #[cfg(feature = "server")]
    Upgrade(db::UpgradeArgs),
    /// The node agent: discover this host's accelerators and report them (`check`:
    /// list them and the conflicts with Nova's [pci] rules).
    #[cfg(feature = "agent")]
    #[command(
        after_help = "Examples:\n  accel agent check\n  accel agent --server http://127.0.0.1:6666 --node compute-1 --once\n  accel agent --config /etc/accel/agent.toml"
    )]
    Agent(agent::AgentArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        #[cfg(feature = "server")]
        Command::Serve(args) => {
            let cfg = config::ServeConfig::load(*args)?;
            init_tracing(&cfg.log_format);
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            rt.block_on(serve(cfg))
        }
        Command::DeviceProfile(mut a) => {
            resolved(a.conn.resolve());
            client::run(
                &[client::reach::accelerator(&a.conn.url, "--url")],
                client::profiles::run(&a.conn, a.command),
            )
        }
        Command::Provider(mut a) => {
            resolved(a.conn.resolve());
            client::run(
                &client::providers::apis(&a.conn),
                client::providers::run(&a.conn, a.command),
            )
        }
        Command::Arq(mut a) => {
            resolved(a.conn.resolve());
            client::run(
                &[client::reach::accelerator(&a.conn.url, "--url")],
                client::arqs::run(&a.conn, a.command),
            )
        }
        Command::Device(mut a) => {
            resolved(a.conn.resolve());
            client::run(
                &[client::reach::accelerator(&a.conn.url, "--url")],
                client::devices::run(&a.conn, a.command),
            )
        }
        Command::Boot(mut a) => {
            resolved(a.apis.urls.resolve());
            boot::boot(a)
        }
        Command::Unboot(mut a) => {
            resolved(a.apis.urls.resolve());
            boot::unboot(a)
        }
        Command::Explain(mut a) => {
            resolved(a.urls.resolve());
            explain::run(a)
        }
        #[cfg(feature = "server")]
        Command::Import(a) => transfer::run(a),
        #[cfg(feature = "server")]
        Command::Export(a) => transfer::export(a),
        #[cfg(feature = "server")]
        Command::Db(a) => db::run(a),
        #[cfg(feature = "server")]
        Command::Upgrade(a) => match db::upgrade(a)? {
            0 => Ok(()),
            code => std::process::exit(code),
        },
        #[cfg(feature = "agent")]
        Command::Agent(a) => agent::run(a),
    }
}

/// A client command's connection could not be completed (a clouds.yaml or Keystone
/// problem): said as the client commands say failures, exit status 1.
fn resolved(r: anyhow::Result<()>) {
    if let Err(e) = r {
        client::fail(&e, &[]);
    }
}

/// Logs to stderr as `format` says, filtered by `ACCEL_LOG` (default `info`).
#[cfg(any(feature = "server", feature = "agent"))]
fn init_tracing(format: &str) {
    let asked = std::env::var("ACCEL_LOG").unwrap_or_default();
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("ACCEL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The statements of background polls stay out of `ACCEL_LOG=debug` unless their
    // own target is asked for (`ACCEL_LOG=debug,sqlx=debug`).
    if !asked.contains("sqlx") {
        if let Ok(d) = "sqlx=warn".parse() {
            filter = filter.add_directive(d);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// ANSI colours only on a terminal, and never with `NO_COLOR` set (no-color.org).
#[cfg(any(feature = "server", feature = "agent"))]
fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(feature = "server")]
async fn serve(cfg: config::ServeConfig) -> anyhow::Result<()> {
    use accel_server::accelerator::binder::{NovaEndpoint, WorkerConfig};
    let url = cfg.database_url()?;
    let within = std::time::Duration::from_secs(cfg.database_connect_timeout_seconds);
    let store = if cfg.migrate {
        accel_store::Store::connect_retrying(&url, within).await
    } else {
        accel_store::Store::open_retrying(&url, within).await
    }
    .map_err(|e| startup::database_error(e, &url, &cfg.redacted_database(), within))?;
    if !cfg.migrate {
        startup::schema_without_migrating(&store, &cfg.redacted_database()).await?;
    }
    let (policy, config) = (cfg.policy()?, cfg.server_config()?);
    if let Some(k) = &config.keystone {
        startup::own_keystone_credentials(k).await?;
    }
    let accelerator_policy = cfg.accelerator_policy()?;
    let listener = tokio::net::TcpListener::bind(&cfg.placement_listen)
        .await
        .with_context(|| format!("binding the Placement API to {}", cfg.placement_listen))?;
    let accel_listener = tokio::net::TcpListener::bind(&cfg.accelerator_listen)
        .await
        .with_context(|| format!("binding the accelerator API to {}", cfg.accelerator_listen))?;
    let metrics_listener = tokio::net::TcpListener::bind(&cfg.metrics_listen)
        .await
        .with_context(|| format!("binding the metrics port to {}", cfg.metrics_listen))?;
    let metrics_addr = metrics_listener.local_addr()?;
    let console_listener = match cfg.console_addr() {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!("binding the console to {addr} (--console-listen, or --no-console)")
        })?),
        None => None,
    };
    let console_addr = match &console_listener {
        Some(l) => l.local_addr()?.to_string(),
        None => "off".to_owned(),
    };
    let external = match &cfg.placement {
        Some(p) => Some(
            accel_server::external::ExternalPlacement::new(p.clone())
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let nova = match &cfg.nova {
        Some(n) => {
            let session = accel_keystone::Session::new(n.clone()).map_err(anyhow::Error::msg)?;
            Some(NovaEndpoint::keystone(
                Arc::new(session),
                cfg.nova_url.clone(),
            ))
        }
        None => cfg.nova_url.clone().map(|url| {
            NovaEndpoint::fixed(url, cfg.nova_token.as_ref().map(|t| t.expose().to_owned()))
        }),
    };
    let no_nova = nova.is_none();
    let app = accel_server::app::App::builder(store)
        .policy(policy)
        .accelerator_policy(accelerator_policy)
        .config(config)
        .bind_timeout_secs(cfg.bind_timeout_seconds)
        .workers(Some(WorkerConfig {
            concurrency: cfg.bind_concurrency(),
            ..WorkerConfig::new(nova)
        }))
        .external(external)
        .fake_devices(cfg.fake_devices.clone())
        .maintenance(cfg.maintenance.clone())
        .metrics(Arc::new(accel_server::metrics::Metrics::built_from(COMMIT)))
        .metrics_listener(Some(metrics_listener))
        .console_listener(console_listener)
        .build()
        .await?;
    if let Some(n) = &cfg.nova {
        tracing::info!(auth_url = %n.auth_url, user = %n.username, "events to Nova through a Keystone session");
    }
    if no_nova {
        tracing::warn!(
            "no nova_url or [nova]: accelerator-request-bound events are recorded, not sent"
        );
    }
    let signals = Signals::install();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = COMMIT,
        placement = %listener.local_addr()?,
        accelerator = %accel_listener.local_addr()?,
        metrics = %metrics_addr,
        console = %console_addr,
        database = %cfg.redacted_database(),
        auth_strategy = match cfg.auth_strategy {
            accel_server::auth::AuthStrategy::Noauth => "noauth",
            accel_server::auth::AuthStrategy::Keystone => "keystone",
        },
        policy_defaults = if cfg.enforce_new_defaults { "new (enforce_new_defaults)" } else { "legacy (new or deprecated rules)" },
        policy_file = %cfg.policy_file.as_ref().map_or_else(|| "-".to_owned(), |p| p.display().to_string()),
        access_log = cfg.access_log,
        "accel serve ready"
    );
    app.serve(listener, Some(accel_listener), signals.first())
        .await?;
    tracing::info!("accel serve stopped");
    Ok(())
}

#[cfg(any(feature = "server", feature = "agent"))]
pub(crate) async fn shutdown_signal() {
    Signals::install().first().await
}

/// SIGINT and SIGTERM, listened to from the moment of [`Signals::install`]: a signal
/// that arrives after the server says it is ready must start the drain, not kill the
/// process with the default action.
#[cfg(any(feature = "server", feature = "agent"))]
pub(crate) struct Signals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

#[cfg(any(feature = "server", feature = "agent"))]
impl Signals {
    pub(crate) fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let int = signal(SignalKind::interrupt());
            let term = signal(SignalKind::terminate());
            if let Err(e) = int.as_ref().and(term.as_ref()) {
                tracing::warn!(error = %e, "cannot listen for SIGINT/SIGTERM");
            }
            Signals {
                int: int.ok(),
                term: term.ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            let int = async {
                match self.int.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let term = async {
                match self.term.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = int => {},
                _ = term => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }

    /// Completes at the first signal, after which a second one ends the process at
    /// once: an operator who asks twice does not want to wait for the drain.
    pub(crate) async fn first(mut self) {
        self.next().await;
        tracing::info!("shutdown requested, draining");
        tokio::spawn(async move {
            self.next().await;
            tracing::warn!("second shutdown signal: exiting now");
            std::process::exit(1);
        });
    }
}
