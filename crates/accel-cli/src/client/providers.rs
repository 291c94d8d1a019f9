//! `accel provider list|show|tree|usage`: the Placement reads an operator needs
//! without osc-placement (issue 31 item 13): find a provider's uuid by name, see a
//! host's tree of devices, and what each class has, holds and has left. Reads only,
//! through accel-api's typed Placement client at the newest microversion (1.39), so
//! they work against upstream Placement as well as accel. Tables as the other client
//! commands draw them; `-f json` has the same columns.

use super::reach;
use super::{output, Format};
use accel_api::http::Http;
use accel_api::placement::{self, Provider, Version};
use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::{json, Value};

/// Where Placement is and how to authenticate.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = super::CONNECTION_HEADING)]
pub struct PlacementConnection {
    /// Placement API endpoint [default: the cloud's catalog with --os-cloud or
    /// OS_AUTH_URL, else http://127.0.0.1:8778].
    #[arg(
        long,
        env = "ACCEL_PLACEMENT_URL",
        default_value = "",
        hide_default_value = true,
        global = true
    )]
    pub placement_url: String,
    /// Token sent as X-Auth-Token (noauth: `admin` is an admin) [default: a Keystone
    /// token with --os-cloud or OS_AUTH_URL, else admin].
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

impl PlacementConnection {
    /// Fills the URL and token not given ([`super::cloud::Cloud::fill`]).
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        super::cloud::Cloud::find(self.os_cloud.as_deref())?.fill(
            &mut [(&mut self.placement_url, super::cloud::Service::Placement)],
            &mut self.token,
        )
    }
}

/// `accel provider ...`.
#[derive(clap::Args, Debug)]
pub struct ProviderArgs {
    #[command(flatten)]
    pub conn: PlacementConnection,
    #[command(subcommand)]
    pub command: ProviderCommand,
}

#[derive(Subcommand, Debug)]
pub enum ProviderCommand {
    /// List resource providers (all, or those matching the filters).
    #[command(
        after_help = "Examples:\n  accel provider list\n  accel provider list --name compute1_FakeDevice -f json"
    )]
    List {
        /// Only the provider with this name.
        #[arg(long)]
        name: Option<String>,
        /// Only the providers of this provider's tree (a name or uuid).
        #[arg(long)]
        in_tree: Option<String>,
        /// Only providers with capacity for these, `RC=N,...` (e.g. `FPGA=1`).
        #[arg(long)]
        resources: Option<String>,
        /// Only providers with these traits, `T1,T2,!T3`.
        #[arg(long)]
        required: Option<String>,
    },
    /// One provider: its fields, traits and aggregates.
    #[command(after_help = "Example:\n  accel provider show compute1")]
    Show {
        /// The provider's name or uuid.
        provider: String,
    },
    /// The tree a provider is in, from its root, children indented under parents.
    #[command(after_help = "Example:\n  accel provider tree compute1")]
    Tree {
        /// A name or uuid of any provider of the tree.
        provider: String,
    },
    /// Inventory and usage per resource class: total, reserved, allocation ratio,
    /// max unit, used and what is left.
    #[command(after_help = "Example:\n  accel provider usage compute1_FakeDevice")]
    Usage {
        /// The provider's name or uuid.
        provider: String,
    },
}

const LIST_COLUMNS: &[&str] = &[
    "uuid",
    "name",
    "generation",
    "root_provider_uuid",
    "parent_provider_uuid",
];
const SHOW_FIELDS: &[&str] = &[
    "uuid",
    "name",
    "generation",
    "root_provider_uuid",
    "parent_provider_uuid",
    "traits",
    "aggregates",
];
const USAGE_COLUMNS: &[&str] = &[
    "resource_class",
    "total",
    "reserved",
    "allocation_ratio",
    "max_unit",
    "used",
    "free",
];

/// The newest microversion: nested providers (1.14), `in_tree` (1.14), `required`
/// with `!` (1.22).
const VERSION: Version = Version::MAX;

fn client(conn: &PlacementConnection) -> anyhow::Result<placement::Client> {
    let base = conn.placement_url.trim_end_matches('/');
    if !base.starts_with("http://") && !base.starts_with("https://") {
        bail!("--placement-url must be an http:// or https:// URL, not {base:?}");
    }
    Ok(placement::Client::new(
        Http::with_token(base, &conn.token).context("--placement-url")?,
    ))
}

/// The hint's view of this command's Placement.
pub fn apis(conn: &PlacementConnection) -> [reach::Api<'_>; 1] {
    [reach::placement(&conn.placement_url)]
}

pub async fn run(conn: &PlacementConnection, cmd: ProviderCommand) -> anyhow::Result<String> {
    let c = client(conn)?;
    let f = conn.format;
    match cmd {
        ProviderCommand::List {
            name,
            in_tree,
            resources,
            required,
        } => {
            let tree_uuid = match &in_tree {
                Some(p) => Some(find(&c, p).await?.uuid),
                None => None,
            };
            let resources = resources.map(|r| r.replace('=', ":"));
            let mut query: Vec<(&str, &str)> = Vec::new();
            let pairs = [
                ("name", name.as_deref()),
                ("in_tree", tree_uuid.as_deref()),
                ("resources", resources.as_deref()),
                ("required", required.as_deref()),
            ];
            for (k, v) in pairs {
                if let Some(v) = v {
                    query.push((k, v));
                }
            }
            let list = c
                .providers(VERSION, &query)
                .await
                .map_err(super::http::failed)?;
            let items: Vec<Value> = list.iter().map(provider_json).collect();
            Ok(output::list(f, &items, LIST_COLUMNS))
        }
        ProviderCommand::Show { provider } => {
            let p = find(&c, &provider).await?;
            let traits = c
                .provider_traits(VERSION, &p.uuid)
                .await
                .map_err(super::http::failed)?;
            let aggs = c
                .aggregates(VERSION, &p.uuid)
                .await
                .map_err(super::http::failed)?;
            let mut v = provider_json(&p);
            v["traits"] = json!(traits.traits);
            v["aggregates"] = json!(aggs.aggregates);
            Ok(output::show(f, &v, SHOW_FIELDS))
        }
        ProviderCommand::Tree { provider } => {
            let p = find(&c, &provider).await?;
            let root = p.root_provider_uuid.clone().unwrap_or(p.uuid.clone());
            let all = c
                .providers(VERSION, &[("in_tree", root.as_str())])
                .await
                .map_err(super::http::failed)?;
            Ok(tree(f, &all, &root))
        }
        ProviderCommand::Usage { provider } => {
            let p = find(&c, &provider).await?;
            let inv = c
                .inventories(VERSION, &p.uuid)
                .await
                .map_err(super::http::failed)?;
            let used = c
                .provider_usages(VERSION, &p.uuid)
                .await
                .map_err(super::http::failed)?;
            let rows: Vec<Value> = inv
                .inventories
                .iter()
                .map(|(rc, i)| {
                    let used = used.usages.get(rc).unwrap_or(0);
                    // Placement's capacity: (total - reserved) * allocation_ratio.
                    let capacity = ((i.total - i.reserved) as f64 * i.allocation_ratio) as i64;
                    json!({
                        "resource_class": rc,
                        "total": i.total,
                        "reserved": i.reserved,
                        "allocation_ratio": i.allocation_ratio,
                        "max_unit": i.max_unit,
                        "used": used,
                        "free": (capacity - used).max(0),
                    })
                })
                .collect();
            let table = output::list(f, &rows, USAGE_COLUMNS);
            Ok(match f {
                Format::Json => table,
                Format::Table => format!("{} ({})\n{table}", p.name, p.uuid),
            })
        }
    }
}

fn provider_json(p: &Provider) -> Value {
    json!({
        "uuid": p.uuid,
        "name": p.name,
        "generation": p.generation,
        "root_provider_uuid": p.root_provider_uuid,
        "parent_provider_uuid": p.parent_provider_uuid,
    })
}

/// The provider named or identified by `key`: a uuid is looked up as one, anything
/// else (or a uuid no provider has) as a name.
async fn find(c: &placement::Client, key: &str) -> anyhow::Result<Provider> {
    if uuid::Uuid::parse_str(key).is_ok() {
        if let Some(p) = c
            .provider(VERSION, key)
            .await
            .map_err(super::http::failed)?
        {
            return Ok(p);
        }
    }
    let named = c
        .providers(VERSION, &[("name", key)])
        .await
        .map_err(super::http::failed)?;
    match named.into_iter().next() {
        Some(p) => Ok(p),
        None => bail!(
            "no resource provider named or with uuid {key:?} (`accel provider list` lists them)"
        ),
    }
}

/// `all` (one tree) from `root`: table mode draws it, JSON lists each provider with
/// its `depth` (0 for the root), parents before children, siblings by name.
fn tree(f: Format, all: &[Provider], root: &str) -> String {
    let mut ordered: Vec<(usize, &Provider)> = Vec::new();
    fn walk<'a>(
        all: &'a [Provider],
        at: &'a Provider,
        depth: usize,
        out: &mut Vec<(usize, &'a Provider)>,
    ) {
        out.push((depth, at));
        let mut children: Vec<&Provider> = all
            .iter()
            .filter(|p| p.parent_provider_uuid.as_deref() == Some(at.uuid.as_str()))
            .collect();
        children.sort_by(|a, b| a.name.cmp(&b.name));
        for child in children {
            walk(all, child, depth + 1, out);
        }
    }
    if let Some(r) = all.iter().find(|p| p.uuid == root) {
        walk(all, r, 0, &mut ordered);
    }
    match f {
        Format::Json => {
            let items: Vec<Value> = ordered
                .iter()
                .map(|(d, p)| {
                    let mut v = provider_json(p);
                    v["depth"] = json!(d);
                    v
                })
                .collect();
            serde_json::to_string_pretty(&items).unwrap_or_default()
        }
        Format::Table => ordered
            .iter()
            .map(|(d, p)| {
                let indent = if *d == 0 {
                    String::new()
                } else {
                    format!("{}└─ ", "   ".repeat(d - 1))
                };
                format!("{indent}{} ({})", p.name, p.uuid)
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(uuid: &str, name: &str, parent: Option<&str>) -> Provider {
        Provider {
            uuid: uuid.into(),
            name: name.into(),
            generation: 1,
            links: vec![],
            parent_provider_uuid: parent.map(str::to_owned),
            root_provider_uuid: Some("r".into()),
        }
    }

    #[test]
    fn a_tree_is_drawn_from_its_root_children_by_name() {
        let all = [
            rp("b", "host_gpu0", Some("r")),
            rp("r", "host", None),
            rp("a", "host_fpga0", Some("r")),
            rp("c", "region0", Some("a")),
        ];
        assert_eq!(
            tree(Format::Table, &all, "r"),
            "host (r)\n└─ host_fpga0 (a)\n   └─ region0 (c)\n└─ host_gpu0 (b)"
        );
        let j: Value = serde_json::from_str(&tree(Format::Json, &all, "r")).unwrap();
        let depths: Vec<(String, u64)> = j
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap().to_owned(),
                    v["depth"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            depths,
            [
                ("host".into(), 0),
                ("host_fpga0".into(), 1),
                ("region0".into(), 2),
                ("host_gpu0".into(), 1)
            ]
        );
    }
}
