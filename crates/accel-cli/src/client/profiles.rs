//! `accel device-profile create|list|show|delete`.

use super::http::{api, failed};
use super::{output, Connection};
use accel_api::accelerator::{Group, NewDeviceProfile};
use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::{json, Map, Value};

#[derive(Subcommand, Debug)]
pub enum ProfileCommand {
    /// Create a device profile (admin).
    #[command(
        after_help = "Example (one FPGA of the agent's or the server's fake device source):\n  accel device-profile create dp1 --group resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required"
    )]
    Create {
        /// Profile name (letters, digits, `_` and `-`).
        name: String,
        /// A group as comma-separated KEY=VALUE pairs, e.g.
        /// `resources:FPGA=1,trait:CUSTOM_FPGA_INTEL=required` (repeat for more groups,
        /// in order: group N becomes Nova's `device_profile_N`).
        #[arg(long = "group", value_name = "KEY=VALUE,...")]
        groups: Vec<String>,
        /// All groups as one JSON list of objects (instead of --group).
        #[arg(long, value_name = "JSON", conflicts_with = "groups")]
        groups_json: Option<String>,
        /// Free text shown with the profile.
        #[arg(long)]
        description: Option<String>,
    },
    /// List device profiles.
    #[command(after_help = "Example:\n  accel device-profile list -f json")]
    List {
        /// Only the profile with this name.
        #[arg(long)]
        name: Option<String>,
    },
    /// Show one device profile, by uuid or name.
    #[command(after_help = "Example:\n  accel device-profile show dp1")]
    Show {
        /// The profile's uuid or name.
        profile: String,
    },
    /// Delete device profiles, by uuid or name (admin).
    #[command(after_help = "Example:\n  accel device-profile delete dp1")]
    Delete {
        /// The profiles' uuids or names.
        #[arg(required = true)]
        profiles: Vec<String>,
    },
}

const LIST_COLUMNS: &[&str] = &["uuid", "name", "groups", "description"];
const SHOW_FIELDS: &[&str] = &[
    "uuid",
    "name",
    "groups",
    "description",
    "created_at",
    "updated_at",
];

/// `resources:FPGA=1,trait:X=required` → `{"resources:FPGA": "1", "trait:X": "required"}`.
fn parse_group(spec: &str) -> anyhow::Result<Value> {
    let mut group = Map::new();
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("--group {spec:?}: {pair:?} is not KEY=VALUE");
        };
        group.insert(k.trim().to_owned(), json!(v.trim()));
    }
    if group.is_empty() {
        bail!("--group {spec:?} is empty");
    }
    Ok(Value::Object(group))
}

fn groups_of(groups: &[String], groups_json: Option<&str>) -> anyhow::Result<Value> {
    if let Some(text) = groups_json {
        let v: Value = serde_json::from_str(text).context("--groups-json is not JSON")?;
        if v.as_array().is_none_or(|l| l.is_empty()) {
            bail!("--groups-json must be a non-empty JSON list of objects");
        }
        return Ok(v);
    }
    if groups.is_empty() {
        bail!("a device profile needs at least one --group (or --groups-json)");
    }
    Ok(Value::Array(
        groups
            .iter()
            .map(|g| parse_group(g))
            .collect::<Result<_, _>>()?,
    ))
}

/// Runs one command and returns what to print.
pub async fn run(conn: &Connection, cmd: ProfileCommand) -> anyhow::Result<String> {
    let api = api(conn)?;
    let f = conn.format;
    match cmd {
        ProfileCommand::Create {
            name,
            groups,
            groups_json,
            description,
        } => {
            let groups: Vec<Group> =
                serde_json::from_value(groups_of(&groups, groups_json.as_deref())?)
                    .context("--groups-json must be a non-empty JSON list of objects")?;
            let created = api
                .create_profile(&NewDeviceProfile {
                    name,
                    groups,
                    description,
                    uuid: None,
                })
                .await
                .map_err(failed)?;
            Ok(output::show(f, &json!(created), SHOW_FIELDS))
        }
        ProfileCommand::List { name } => {
            let items = api.profiles(name.as_deref()).await.map_err(failed)?;
            let items: Vec<Value> = items.iter().map(|p| json!(p)).collect();
            Ok(output::list(f, &items, LIST_COLUMNS))
        }
        ProfileCommand::Show { profile } => {
            let p = api.profile(segment(&profile)?).await.map_err(failed)?;
            Ok(output::show(f, &json!(p), SHOW_FIELDS))
        }
        ProfileCommand::Delete { profiles } => {
            for p in &profiles {
                api.delete_profile(segment(p)?).await.map_err(failed)?;
            }
            Ok(deleted(f, "device_profiles", &profiles))
        }
    }
}

/// A name or uuid as one path segment: the characters Cyborg allows in either need
/// no escaping, anything else is refused before it reaches the URL.
pub(super) fn segment(s: &str) -> anyhow::Result<&str> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("{s:?} is not a uuid or a name (letters, digits, '_' and '-')");
    }
    Ok(s)
}

/// What a delete prints: nothing in a table (as the OpenStack client), the deleted ids
/// in JSON.
pub(super) fn deleted(f: super::Format, key: &str, ids: &[String]) -> String {
    match f {
        super::Format::Table => String::new(),
        super::Format::Json => json!({ key: ids }).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_from_flags_or_json() {
        let g = groups_of(
            &[
                "resources:FPGA=1, trait:CUSTOM_A=required".into(),
                "resources:GPU=2".into(),
            ],
            None,
        )
        .unwrap();
        assert_eq!(
            g,
            json!([{"resources:FPGA": "1", "trait:CUSTOM_A": "required"}, {"resources:GPU": "2"}])
        );
        let j = groups_of(&[], Some(r#"[{"resources:FPGA": "1"}]"#)).unwrap();
        assert_eq!(j, json!([{"resources:FPGA": "1"}]));
        assert!(groups_of(&[], None).is_err());
        assert!(groups_of(&["resources:FPGA".into()], None).is_err());
        assert!(groups_of(&[], Some("[]")).is_err());
        assert!(segment("dp_1-a").is_ok());
        assert!(segment("../x").is_err());
    }
}
