//! Client commands: `accel device-profile ...` and `accel arq ...` over HTTP against
//! the accelerator (Cyborg v2) API, and `accel provider ...` against Placement, with
//! human tables by default and `-f json`.
//!
//! They speak only the wire protocol (no store, no server types), so they work against
//! any Cyborg-compatible endpoint; errors show the server's own message, unwrapped from
//! Cyborg's `error_message` envelope.

pub mod arqs;
pub mod cloud;
pub mod devices;
pub(crate) mod http;
mod output;
pub mod profiles;
pub mod providers;
pub(crate) mod reach;

/// Where the accelerator API is and how to authenticate; shared by all client commands,
/// and shown under their own heading in each command's help, apart from the command's
/// own arguments (issue 31 item 8).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = CONNECTION_HEADING)]
pub struct Connection {
    /// Accelerator API endpoint (with or without `/accelerator` or `/accelerator/v2`)
    /// [default: the cloud's catalog with --os-cloud or OS_AUTH_URL, else
    /// http://127.0.0.1:6666].
    #[arg(
        long,
        env = "ACCEL_URL",
        default_value = "",
        hide_default_value = true,
        global = true
    )]
    pub url: String,
    /// Token sent as X-Auth-Token (noauth: `user[:project]`, `admin` is an admin)
    /// [default: a Keystone token with --os-cloud or OS_AUTH_URL, else admin].
    #[arg(
        long,
        env = "ACCEL_TOKEN",
        default_value = "",
        hide_default_value = true,
        global = true
    )]
    pub token: String,
    /// A cloud of clouds.yaml: authenticate with its Keystone and find the APIs in its
    /// catalog (the OS_AUTH_URL family of variables when no cloud is named).
    #[arg(
        long = "os-cloud",
        env = "OS_CLOUD",
        value_name = "NAME",
        global = true
    )]
    pub os_cloud: Option<String>,

    /// Output format.
    #[arg(short = 'f', long = "format", value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,
}

impl Connection {
    /// Fills the URL and token not given ([`cloud::Cloud::fill`]).
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        cloud::Cloud::find(self.os_cloud.as_deref())?.fill(
            &mut [(&mut self.url, cloud::Service::Accelerator)],
            &mut self.token,
        )
    }
}

/// The help heading of the flags every client command shares.
pub const CONNECTION_HEADING: &str = "Connection and output options";

/// How results are printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

/// `accel device-profile ...`.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub command: profiles::ProfileCommand,
}

/// `accel arq ...`.
#[derive(clap::Args, Debug)]
pub struct ArqArgs {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub command: arqs::ArqCommand,
}

/// `accel device ...`.
#[derive(clap::Args, Debug)]
pub struct DeviceArgs {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub command: devices::DeviceCommand,
}

/// Runs a client command on a small runtime and prints its output; a failure is one
/// line on stderr (the server's message) and exit status 1, without a backtrace. When
/// no server answered, the lines of [`reach::hint`] about `apis` follow it.
pub fn run(
    apis: &[reach::Api<'_>],
    fut: impl std::future::Future<Output = anyhow::Result<String>>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match rt.block_on(fut) {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            Ok(())
        }
        Err(e) => fail(&e, apis),
    }
}

/// Prints `e` as the client commands do (`accel: what: why`, then the hint when no
/// server answered) and exits 1.
pub fn fail(e: &anyhow::Error, apis: &[reach::Api<'_>]) -> ! {
    eprintln!("accel: {e:#}");
    if let Some(hint) = reach::hint(e, apis) {
        eprintln!("{hint}");
    }
    std::process::exit(1);
}
