//! `accel boot` and `accel unboot`: the Nova workflow without Nova
//! (`accel_api::workflow`). `boot` claims an instance's resources in Placement, binds
//! its device profile's accelerators and prints the attach handles; `unboot` unbinds and
//! deletes its ARQs and releases its allocations.

use crate::client::{cloud, reach};
use accel_api::workflow::{self, BootRequest, Booted, Endpoints, Unbooted};
use anyhow::Context;
use serde_json::json;
use std::time::Duration;

/// Where the two APIs are and the token for both (`boot`, `unboot`, `explain`).
#[derive(clap::Args, Debug, Clone)]
pub struct Urls {
    /// Placement API endpoint [default: the cloud's catalog with --os-cloud or
    /// OS_AUTH_URL, else http://127.0.0.1:8778].
    #[arg(
        long,
        env = "ACCEL_PLACEMENT_URL",
        default_value = "",
        hide_default_value = true
    )]
    pub placement_url: String,
    /// Accelerator API endpoint (with or without `/accelerator`) [default: the
    /// cloud's catalog with --os-cloud or OS_AUTH_URL, else http://127.0.0.1:6666].
    #[arg(long, env = "ACCEL_URL", default_value = "", hide_default_value = true)]
    pub accelerator_url: String,
    /// Token sent as X-Auth-Token to both APIs (noauth: `user[:project]`) [default: a
    /// Keystone token with --os-cloud or OS_AUTH_URL, else admin].
    #[arg(
        long,
        env = "ACCEL_TOKEN",
        default_value = "",
        hide_default_value = true
    )]
    pub token: String,
    /// A cloud of clouds.yaml: authenticate with its Keystone and find the APIs in its
    /// catalog (the OS_AUTH_URL family of variables when no cloud is named).
    #[arg(long = "os-cloud", env = "OS_CLOUD", value_name = "NAME")]
    pub os_cloud: Option<String>,
}

/// The two APIs and the credentials.
#[derive(clap::Args, Debug, Clone)]
pub struct Apis {
    #[command(flatten)]
    pub urls: Urls,
    /// Service token for bind, unbind and delete (Nova's); the token when absent.
    #[arg(long, env = "ACCEL_SERVICE_TOKEN", hide_env_values = true)]
    pub service_token: Option<String>,
    /// Output format.
    #[arg(short = 'f', long = "format", value_enum, default_value_t = Output::Table)]
    pub format: Output,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

impl Apis {
    fn endpoints(&self) -> Endpoints {
        Endpoints {
            placement_url: self.urls.placement_url.clone(),
            accelerator_url: self.urls.accelerator_url.clone(),
            token: self.urls.token.clone(),
            service_token: self.service_token.clone(),
        }
    }
}

/// `accel boot`.
#[derive(clap::Args, Debug)]
pub struct BootArgs {
    #[command(flatten)]
    pub apis: Apis,
    /// The device profile (a flavor's `accel:device_profile`).
    #[arg(long)]
    pub device_profile: String,
    /// The flavor's own resources, `RC=N,...` or `RC:N,...` (e.g. `VCPU=2,MEMORY_MB=2048`).
    #[arg(long, default_value = "")]
    pub resources: String,
    /// Instance uuid (the Placement consumer) [default: a new one].
    #[arg(long)]
    pub instance: Option<String>,
    /// Project of the allocation.
    #[arg(long, default_value = "admin")]
    pub project_id: String,
    /// User of the allocation.
    #[arg(long, default_value = "admin")]
    pub user_id: String,
    /// Placement group_policy: none or isolate.
    #[arg(long, default_value = "none")]
    pub group_policy: String,
    /// Seconds to wait for the binds to resolve.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

/// `accel unboot`.
#[derive(clap::Args, Debug)]
pub struct UnbootArgs {
    #[command(flatten)]
    pub apis: Apis,
    /// The instance to tear down.
    #[arg(long)]
    pub instance: String,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

impl Urls {
    /// Fills what was not given: from `--os-cloud` / `OS_*` (Keystone's catalog and a
    /// token), else the local defaults ([`cloud::Cloud::fill`]).
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        cloud::Cloud::find(self.os_cloud.as_deref())?.fill(
            &mut [
                (&mut self.placement_url, cloud::Service::Placement),
                (&mut self.accelerator_url, cloud::Service::Accelerator),
            ],
            &mut self.token,
        )
    }

    /// Both APIs, for the hint when neither answers.
    pub fn apis(&self) -> [reach::Api<'_>; 2] {
        [
            reach::placement(&self.placement_url),
            reach::accelerator(&self.accelerator_url, "--accelerator-url"),
        ]
    }
}

/// Prints a failure as one line (`accel: what: why`) and exits 1, as the other client
/// commands do.
fn exit_on_error(r: anyhow::Result<String>, urls: &Urls) -> anyhow::Result<()> {
    match r {
        Ok(out) => {
            println!("{out}");
            Ok(())
        }
        Err(e) => crate::client::fail(&e, &urls.apis()),
    }
}

pub fn boot(args: BootArgs) -> anyhow::Result<()> {
    let urls = args.apis.urls.clone();
    exit_on_error(run_boot(args), &urls)
}

pub fn unboot(args: UnbootArgs) -> anyhow::Result<()> {
    let urls = args.apis.urls.clone();
    exit_on_error(run_unboot(args), &urls)
}

fn run_boot(args: BootArgs) -> anyhow::Result<String> {
    let explain = explain_command(&args);
    let given = args.instance.clone();
    let req = BootRequest {
        device_profile: args.device_profile,
        // `RC=N` like every other option (`--group resources:FPGA=1`); `RC:N` as
        // Placement writes it.
        resources: workflow::parse_resources(&args.resources.replace('=', ":"))?,
        instance: args.instance.unwrap_or_else(workflow::new_instance_uuid),
        project_id: args.project_id,
        user_id: args.user_id,
        group_policy: args.group_policy,
        timeout: Duration::from_secs(args.timeout),
    };
    // A uuid the user did not give is not named: a failed boot releases what it
    // claimed, so there is nothing to look up under it.
    let doing = match &given {
        Some(uuid) => format!("booting instance {uuid}"),
        None => "booting".to_owned(),
    };
    match runtime()?.block_on(workflow::boot(&args.apis.endpoints(), &req)) {
        Ok(booted) => Ok(render_boot(&booted, args.apis.format)),
        Err(e @ workflow::WorkflowError::NoCandidate(_)) => Err(anyhow::anyhow!(
            "{doing}: {e}\n  why, provider by provider: {explain}"
        )),
        Err(e) => Err(anyhow::Error::new(e).context(doing)),
    }
}

/// `accel explain` with the arguments of this boot: the same query, the same APIs.
fn explain_command(args: &BootArgs) -> String {
    let mut words = vec![
        "accel".to_owned(),
        "explain".to_owned(),
        "--device-profile".to_owned(),
        quoted(&args.device_profile),
    ];
    if !args.resources.is_empty() {
        words.extend(["--resources".to_owned(), quoted(&args.resources)]);
    }
    words.extend(["--group-policy".to_owned(), quoted(&args.group_policy)]);
    // URLs only where a flag set them: the environment and the defaults still apply.
    let urls = &args.apis.urls;
    for (flag, env, default, url) in [
        (
            "--placement-url",
            "ACCEL_PLACEMENT_URL",
            "http://127.0.0.1:8778",
            &urls.placement_url,
        ),
        (
            "--accelerator-url",
            "ACCEL_URL",
            "http://127.0.0.1:6666",
            &urls.accelerator_url,
        ),
    ] {
        let from_env = std::env::var(env).is_ok_and(|v| &v == url);
        if url != default && !from_env {
            words.extend([flag.to_owned(), quoted(url)]);
        }
    }
    words.join(" ")
}

/// `s` as one shell word.
fn quoted(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:=/@%+".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn run_unboot(args: UnbootArgs) -> anyhow::Result<String> {
    let done = runtime()?
        .block_on(workflow::unboot(&args.apis.endpoints(), &args.instance))
        .with_context(|| format!("tearing down instance {}", args.instance))?;
    // Nothing to tear down is most likely a mistyped uuid: say so, and fail.
    if done.arqs_unbound == 0 && done.arqs_deleted == 0 && !done.allocations_released {
        anyhow::bail!(
            "tearing down instance {}: no such instance (no ARQs and no allocations)",
            args.instance
        );
    }
    Ok(render_unboot(&args.instance, &done, args.apis.format))
}

fn render_boot(b: &Booted, format: Output) -> String {
    match format {
        Output::Json => {
            let arqs: Vec<_> = b
                .arqs
                .iter()
                .map(|a| {
                    json!({
                        "uuid": a.arq_uuid,
                        "device_profile_group_id": a.device_profile_group_id,
                        "state": a.state,
                        "hostname": a.hostname,
                        "device_rp_uuid": a.device_rp_uuid,
                        "attach_handle_type": a.attach_handle_type,
                        "attach_handle_uuid": a.attach_handle_uuid,
                        "attach_handle_info": a.attach_handle_info,
                    })
                })
                .collect();
            serde_json::to_string_pretty(&json!({
                "instance": b.instance,
                "host": b.host,
                "allocations": b.allocations,
                "arqs": arqs,
            }))
            .unwrap_or_default()
        }
        Output::Table => {
            let mut rows = vec![[
                "ARQ".to_owned(),
                "GROUP".to_owned(),
                "STATE".to_owned(),
                "DEVICE RP".to_owned(),
                "HANDLE TYPE".to_owned(),
                "HANDLE INFO".to_owned(),
            ]];
            for a in &b.arqs {
                rows.push([
                    a.arq_uuid.clone(),
                    a.device_profile_group_id.to_string(),
                    a.state.clone(),
                    a.device_rp_uuid.clone(),
                    a.attach_handle_type.clone(),
                    a.attach_handle_info.to_string(),
                ]);
            }
            format!(
                "instance {} on host {}\n{}",
                b.instance,
                b.host,
                table(&rows)
            )
        }
    }
}

fn render_unboot(instance: &str, u: &Unbooted, format: Output) -> String {
    match format {
        Output::Json => json!({
            "instance": instance,
            "arqs_unbound": u.arqs_unbound,
            "arqs_deleted": u.arqs_deleted,
            "allocations_released": u.allocations_released,
        })
        .to_string(),
        Output::Table => format!(
            "instance {instance}: {} ARQ(s) unbound, {} deleted, allocations {}",
            u.arqs_unbound,
            u.arqs_deleted,
            if u.allocations_released {
                "released"
            } else {
                "not found"
            }
        ),
    }
}

/// Left-aligned columns, two spaces apart.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
