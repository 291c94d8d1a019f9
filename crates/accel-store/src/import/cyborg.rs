//! Taking over a running Cyborg: upstream Cyborg 17.0.0's database read into accel's
//! accelerator tables, and accel's written back into an empty upstream one (issue 28).
//!
//! accel's accelerator tables are Cyborg's own shape (migration 0002), so rows move
//! one to one, with upstream's integer ids (the API shows `device_id`,
//! `deployable_id` and the deployables' `parent_id`/`root_id`, and ARQs point at
//! handles and deployables by id), uuids and timestamps unchanged. What differs:
//! - a device profile's `profile_json` (`{"groups": [...]}`) is accel's `groups`
//!   column (the list alone; values that are numbers become their text, as upstream's
//!   API shows them);
//! - `controlpath_ids` is accel's `control_path_ids`; `attach_handles.in_use` is a
//!   boolean upstream and 0/1 here;
//! - upstream's `devices.device_state` (cleaning states no API shows) and the ARQs'
//!   `substate` (always `Initial`) are not kept; an export writes `allocated` or
//!   `available` (as upstream derives it from the handles in use) and `Initial`;
//! - accel's `devices.health` starts `ok` for every imported device;
//! - device types and attach types accel does not model (`MDEV`, `PCI`, `NVME`
//!   devices) are refused row by row.
//!
//! The same rules as the Placement import: the source is read in one read-only
//! snapshot after its `alembic_version` is checked ([`CYBORG_HEAD`]), checked row by
//! row ([`check`]), and written in ONE transaction of accel's; a refusal leaves the
//! target as it was. The target may hold Placement data (Placement is imported
//! first); it must hold no accelerator data unless `force`.

use super::read::{check_alembic, epoch, schema_version, Source};
use super::write::{insert_rows, insert_rows_with, nonzero_counts, placeholder, Options, Val};
use super::Problem;
use crate::{Backend, Store, StoreError, Tx};
use accel_core::accelerator::{ArqState, AttachType, DeviceStatus, DeviceType};
use sqlx::Row;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The alembic revision of upstream Cyborg 17.0.0's schema (`add device_state`).
pub const CYBORG_HEAD: &str = "b47c8f2d1e3a";

/// A row's `created_at`/`updated_at`, epoch seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Times {
    pub created: Option<i64>,
    pub updated: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRow {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub description: Option<String>,
    /// accel's form: the JSON list of groups.
    pub groups: Result<String, String>,
    pub times: Times,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRow {
    pub id: i64,
    pub uuid: String,
    pub device_type: String,
    pub vendor: String,
    pub model: String,
    pub std_board_info: Option<String>,
    pub vendor_board_info: Option<String>,
    pub hostname: String,
    pub status: String,
    pub times: Times,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CpidRow {
    pub id: i64,
    pub uuid: String,
    pub device_id: i64,
    pub cpid_type: String,
    pub cpid_info: String,
    pub times: Times,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeployableRow {
    pub id: i64,
    pub uuid: String,
    pub parent_id: Option<i64>,
    pub root_id: Option<i64>,
    pub name: String,
    pub num_accelerators: i64,
    pub device_id: i64,
    pub rp_uuid: Option<String>,
    pub driver_name: Option<String>,
    pub bitstream_id: Option<String>,
    pub times: Times,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttributeRow {
    pub id: i64,
    pub uuid: String,
    pub deployable_id: i64,
    pub key: String,
    pub value: String,
    pub times: Times,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HandleRow {
    pub id: i64,
    pub uuid: String,
    pub deployable_id: i64,
    pub cpid_id: i64,
    pub in_use: bool,
    pub attach_type: String,
    pub attach_info: String,
    pub times: Times,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ArqRow {
    pub id: i64,
    pub uuid: String,
    pub project_id: Option<String>,
    pub state: String,
    pub device_profile_id: i64,
    pub device_profile_group_id: i64,
    pub hostname: Option<String>,
    pub device_rp_uuid: Option<String>,
    pub instance_uuid: Option<String>,
    pub attach_handle_id: Option<i64>,
    pub deployable_id: Option<i64>,
    pub times: Times,
}

/// Everything of Cyborg a database holds, with the source's integer ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CyborgData {
    pub profiles: Vec<ProfileRow>,
    pub devices: Vec<DeviceRow>,
    pub cpids: Vec<CpidRow>,
    pub deployables: Vec<DeployableRow>,
    pub attributes: Vec<AttributeRow>,
    pub handles: Vec<HandleRow>,
    pub arqs: Vec<ArqRow>,
}

impl CyborgData {
    /// Rows per table (upstream's names), in the order they are written.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("device_profiles", self.profiles.len()),
            ("devices", self.devices.len()),
            ("controlpath_ids", self.cpids.len()),
            ("deployables", self.deployables.len()),
            ("attributes", self.attributes.len()),
            ("attach_handles", self.handles.len()),
            ("extended_accelerator_requests", self.arqs.len()),
        ]
    }
}

/// Why an import (or export) wrote nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum CyborgRefused {
    /// accel's database holds accelerator data and `--force` was not given.
    NotEmpty(Vec<(&'static str, i64)>),
    /// The source holds inconsistent rows and `--skip-invalid` was not given.
    Invalid(Vec<Problem>),
    /// The upstream database an export was pointed at holds data.
    UpstreamNotEmpty(Vec<(&'static str, i64)>),
}

impl std::fmt::Display for CyborgRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CyborgRefused::NotEmpty(held) => write!(
                f,
                "the target database holds accelerator data ({}); pass --force to replace it",
                super::write::describe(held)
            ),
            CyborgRefused::Invalid(problems) => {
                write!(
                    f,
                    "the source holds {} inconsistent row(s); nothing was written (--skip-invalid \
                     imports the rest and lists what it leaves out):",
                    problems.len()
                )?;
                for p in problems {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
            CyborgRefused::UpstreamNotEmpty(held) => write!(
                f,
                "the upstream database is not empty ({}); export into a database just created by \
                 `cyborg-dbsync upgrade`",
                super::write::describe(held)
            ),
        }
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq)]
pub struct CyborgImported {
    pub counts: Vec<(&'static str, usize)>,
    pub skipped: Vec<Problem>,
    pub replaced: Vec<(&'static str, i64)>,
}

// ---- reading ---------------------------------------------------------------------

/// A device profile's `profile_json` as accel's `groups` text, or why it cannot be.
fn groups_of(profile_json: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(profile_json)
        .map_err(|e| format!("profile_json is not JSON ({e})"))?;
    let list = v
        .get("groups")
        .and_then(serde_json::Value::as_array)
        .ok_or("profile_json has no \"groups\" list")?;
    let mut out = Vec::new();
    for g in list {
        let obj = g.as_object().ok_or("a group is not an object")?;
        let mut m = serde_json::Map::new();
        for (k, v) in obj {
            let s = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => return Err(format!("group value {other} of {k:?} is not a string")),
            };
            m.insert(k.clone(), serde_json::Value::String(s));
        }
        out.push(serde_json::Value::Object(m));
    }
    Ok(serde_json::Value::Array(out).to_string())
}

fn times(r: &sqlx::any::AnyRow, at: usize) -> Result<Times, sqlx::Error> {
    Ok(Times {
        created: r.try_get(at)?,
        updated: r.try_get(at + 1)?,
    })
}

/// Reads every Cyborg row of the source in one snapshot, after checking its schema.
pub async fn read_cyborg(source: &Source) -> Result<CyborgData, StoreError> {
    let b = source.backend();
    source
        .read(move |tx| {
            Box::pin(async move {
                check_alembic(
                    &schema_version(tx, "Cyborg").await?,
                    "Cyborg",
                    &[CYBORG_HEAD],
                    "the schema of Cyborg 17.0.0; upgrade upstream with `cyborg-dbsync upgrade` first",
                )?;
                let (c, u) = (epoch(b, "created_at"), epoch(b, "updated_at"));
                let in_use = match b {
                    Backend::MySql => "CAST(COALESCE(in_use, 0) AS SIGNED)",
                    Backend::Postgres => "CAST(COALESCE(in_use, false) AS INTEGER)",
                    Backend::Sqlite => "CAST(COALESCE(in_use, 0) AS INTEGER)",
                };
                read_tables(tx, "controlpath_ids", &c, &u, in_use).await
            })
        })
        .await
}

/// Reads the seven tables; `cpids` names the control-path table (upstream's
/// `controlpath_ids`, accel's `control_path_ids`), `c`/`u` the timestamp columns'
/// SQL as epoch seconds, `in_use` the handle column's as an integer.
async fn read_tables(
    tx: &mut Tx,
    cpids: &str,
    c: &str,
    u: &str,
    in_use: &str,
) -> Result<CyborgData, StoreError> {
    let mut d = CyborgData::default();
    let upstream = cpids == "controlpath_ids";
    let groups_col = if upstream { "profile_json" } else { "groups" };
    for r in sqlx::query(&format!(
        "SELECT id, uuid, name, description, {groups_col}, {c}, {u} FROM device_profiles ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        let text: String = r.try_get(4)?;
        d.profiles.push(ProfileRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            name: r.try_get(2)?,
            description: r.try_get(3)?,
            groups: if upstream { groups_of(&text) } else { Ok(text) },
            times: times(&r, 5)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, type, vendor, model, std_board_info, vendor_board_info, hostname, \
         status, {c}, {u} FROM devices ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.devices.push(DeviceRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            device_type: r.try_get(2)?,
            vendor: r.try_get(3)?,
            model: r.try_get(4)?,
            std_board_info: r.try_get(5)?,
            vendor_board_info: r.try_get(6)?,
            hostname: r.try_get(7)?,
            status: r.try_get(8)?,
            times: times(&r, 9)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, device_id, cpid_type, cpid_info, {c}, {u} FROM {cpids} ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.cpids.push(CpidRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            device_id: r.try_get(2)?,
            cpid_type: r.try_get(3)?,
            cpid_info: r.try_get(4)?,
            times: times(&r, 5)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, parent_id, root_id, name, num_accelerators, device_id, rp_uuid, \
         driver_name, bitstream_id, {c}, {u} FROM deployables ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.deployables.push(DeployableRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            parent_id: r.try_get(2)?,
            root_id: r.try_get(3)?,
            name: r.try_get(4)?,
            num_accelerators: r.try_get(5)?,
            device_id: r.try_get(6)?,
            rp_uuid: r.try_get(7)?,
            driver_name: r.try_get(8)?,
            bitstream_id: r.try_get(9)?,
            times: times(&r, 10)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, deployable_id, key, value, {c}, {u} FROM attributes ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.attributes.push(AttributeRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            deployable_id: r.try_get(2)?,
            key: r.try_get(3)?,
            value: r.try_get(4)?,
            times: times(&r, 5)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, deployable_id, cpid_id, {in_use}, attach_type, attach_info, {c}, {u} \
         FROM attach_handles ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        let used: i64 = r.try_get(4)?;
        d.handles.push(HandleRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            deployable_id: r.try_get(2)?,
            cpid_id: r.try_get(3)?,
            in_use: used != 0,
            attach_type: r.try_get(5)?,
            attach_info: r.try_get(6)?,
            times: times(&r, 7)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, project_id, state, device_profile_id, device_profile_group_id, \
         hostname, device_rp_uuid, instance_uuid, attach_handle_id, deployable_id, {c}, {u} \
         FROM extended_accelerator_requests ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.arqs.push(ArqRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            project_id: r.try_get(2)?,
            state: r.try_get(3)?,
            device_profile_id: r.try_get(4)?,
            device_profile_group_id: r.try_get(5)?,
            hostname: r.try_get(6)?,
            device_rp_uuid: r.try_get(7)?,
            instance_uuid: r.try_get(8)?,
            attach_handle_id: r.try_get(9)?,
            deployable_id: r.try_get(10)?,
            times: times(&r, 11)?,
        });
    }
    Ok(d)
}

/// Reads accel's accelerator data in one snapshot (an export's source).
pub async fn read_accel(store: &Store) -> Result<CyborgData, StoreError> {
    store
        .read(|tx| {
            Box::pin(async move {
                read_tables(tx, "control_path_ids", "created_at", "updated_at", "in_use").await
            })
        })
        .await
}

// ---- checking --------------------------------------------------------------------

fn problem(subject: String, message: String) -> Problem {
    Problem { subject, message }
}

/// One pass: every row whose own values accel cannot hold or whose references do not
/// resolve in `d`, named by its table and uuid.
fn check_once(d: &CyborgData) -> BTreeSet<Problem> {
    let mut out = BTreeSet::new();
    let profiles: HashSet<i64> = d.profiles.iter().map(|p| p.id).collect();
    let devices: HashSet<i64> = d.devices.iter().map(|x| x.id).collect();
    let cpids: HashSet<i64> = d.cpids.iter().map(|x| x.id).collect();
    let deps: HashMap<i64, &DeployableRow> = d.deployables.iter().map(|x| (x.id, x)).collect();
    let handles: HashMap<i64, &HandleRow> = d.handles.iter().map(|x| (x.id, x)).collect();
    for p in &d.profiles {
        if let Err(why) = &p.groups {
            out.insert(problem(format!("device profile {}", p.uuid), why.clone()));
        }
    }
    for x in &d.devices {
        let s = || format!("device {}", x.uuid);
        if DeviceType::parse(&x.device_type).is_none() {
            out.insert(problem(
                s(),
                format!(
                    "type {} is not one accel models (GPU, FPGA, AICHIP, QAT, NIC, SSD)",
                    x.device_type
                ),
            ));
        }
        if DeviceStatus::parse(&x.status).is_none() {
            out.insert(problem(s(), format!("unknown status {:?}", x.status)));
        }
    }
    for x in &d.cpids {
        if !devices.contains(&x.device_id) {
            out.insert(problem(
                format!("control path id {}", x.uuid),
                format!("device {} does not exist", x.device_id),
            ));
        }
    }
    for x in &d.deployables {
        let s = || format!("deployable {}", x.uuid);
        if !devices.contains(&x.device_id) {
            out.insert(problem(
                s(),
                format!("device {} does not exist", x.device_id),
            ));
        }
        for (what, id) in [("parent", x.parent_id), ("root", x.root_id)] {
            if let Some(id) = id.filter(|i| !deps.contains_key(i)) {
                out.insert(problem(
                    s(),
                    format!("{what} deployable {id} does not exist"),
                ));
            }
        }
    }
    for x in &d.attributes {
        if !deps.contains_key(&x.deployable_id) {
            out.insert(problem(
                format!("attribute {}", x.uuid),
                format!("deployable {} does not exist", x.deployable_id),
            ));
        }
    }
    for x in &d.handles {
        let s = || format!("attach handle {}", x.uuid);
        if !deps.contains_key(&x.deployable_id) {
            out.insert(problem(
                s(),
                format!("deployable {} does not exist", x.deployable_id),
            ));
        }
        if !cpids.contains(&x.cpid_id) {
            out.insert(problem(
                s(),
                format!("control path id {} does not exist", x.cpid_id),
            ));
        }
        if AttachType::parse(&x.attach_type).is_none() {
            out.insert(problem(
                s(),
                format!("attach type {} is not one accel models", x.attach_type),
            ));
        }
    }
    for a in &d.arqs {
        let s = || format!("accelerator request {}", a.uuid);
        if ArqState::parse(&a.state).is_none() {
            out.insert(problem(s(), format!("unknown state {:?}", a.state)));
        }
        if !profiles.contains(&a.device_profile_id) {
            out.insert(problem(
                s(),
                format!("device profile {} does not exist", a.device_profile_id),
            ));
        }
        if let Some(id) = a.deployable_id.filter(|i| !deps.contains_key(i)) {
            out.insert(problem(
                s(),
                format!("bound to deployable {id}, which does not exist"),
            ));
        }
        match a.attach_handle_id {
            Some(id) if !handles.contains_key(&id) => {
                out.insert(problem(
                    s(),
                    format!("bound to attach handle {id}, which does not exist"),
                ));
            }
            Some(id) => {
                if let Some(dep) = a.deployable_id.filter(|d| *d != handles[&id].deployable_id) {
                    out.insert(problem(
                        s(),
                        format!("attach handle {id} is not deployable {dep}'s"),
                    ));
                }
            }
            None => {}
        }
        if a.state == "Bound" {
            match &a.device_rp_uuid {
                Some(rp) if d.deployables.iter().any(|x| x.rp_uuid.as_ref() == Some(rp)) => {}
                Some(rp) => {
                    out.insert(problem(
                        s(),
                        format!("Bound to device provider {rp}, which no deployable has"),
                    ));
                }
                None => {
                    out.insert(problem(s(), "Bound without a device provider".to_owned()));
                }
            }
            if a.attach_handle_id.is_none() {
                out.insert(problem(s(), "Bound without an attach handle".to_owned()));
            }
        }
    }
    out
}

/// Checks `data`; returns the problems found and the rows free of them, rows that
/// refer to a left-out row left out too (each with its own problem).
pub fn check(data: &CyborgData) -> (Vec<Problem>, CyborgData) {
    let mut valid = data.clone();
    let mut all = BTreeSet::new();
    loop {
        let found = check_once(&valid);
        if found.is_empty() {
            break;
        }
        let bad: HashSet<&str> = found
            .iter()
            .filter_map(|p| p.subject.rsplit(' ').next())
            .collect();
        let keep = |u: &String| !bad.contains(u.as_str());
        valid.profiles.retain(|x| keep(&x.uuid));
        valid.devices.retain(|x| keep(&x.uuid));
        valid.cpids.retain(|x| keep(&x.uuid));
        valid.deployables.retain(|x| keep(&x.uuid));
        valid.attributes.retain(|x| keep(&x.uuid));
        valid.handles.retain(|x| keep(&x.uuid));
        valid.arqs.retain(|x| keep(&x.uuid));
        all.extend(found);
    }
    (all.into_iter().collect(), valid)
}

// ---- writing ---------------------------------------------------------------------

/// The accelerator data accel's database holds (nonzero counts).
pub async fn accel_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    const COUNTS: &[(&str, &str)] = &[
        ("device_profiles", "SELECT COUNT(*) FROM device_profiles"),
        ("devices", "SELECT COUNT(*) FROM devices"),
        ("control_path_ids", "SELECT COUNT(*) FROM control_path_ids"),
        ("deployables", "SELECT COUNT(*) FROM deployables"),
        ("attributes", "SELECT COUNT(*) FROM attributes"),
        ("attach_handles", "SELECT COUNT(*) FROM attach_handles"),
        (
            "extended_accelerator_requests",
            "SELECT COUNT(*) FROM extended_accelerator_requests",
        ),
    ];
    nonzero_counts(tx, COUNTS).await
}

/// Checks `data` and writes what is valid into `store` in one transaction.
pub async fn import_cyborg(
    store: &Store,
    data: &CyborgData,
    opts: Options,
) -> Result<Result<CyborgImported, CyborgRefused>, StoreError> {
    let (problems, valid) = check(data);
    if !problems.is_empty() && !opts.skip_invalid {
        return Ok(Err(CyborgRefused::Invalid(problems)));
    }
    let valid = std::sync::Arc::new(valid);
    store
        .write_or_refuse(move |tx| {
            Box::pin(async move {
                let held = accel_contents(tx).await?;
                if !held.is_empty() && !opts.force {
                    return Ok(Err(CyborgRefused::NotEmpty(held)));
                }
                if !held.is_empty() {
                    for sql in [
                        "DELETE FROM bind_jobs",
                        "DELETE FROM program_requests",
                        "DELETE FROM extended_accelerator_requests",
                        "DELETE FROM attach_handles",
                        "DELETE FROM attributes",
                        "UPDATE deployables SET parent_id = NULL, root_id = NULL",
                        "DELETE FROM deployables",
                        "DELETE FROM control_path_ids",
                        "DELETE FROM devices",
                        "DELETE FROM device_profiles",
                    ] {
                        sqlx::query(sql).execute(&mut *tx).await?;
                    }
                }
                write_accel(tx, &valid).await?;
                Ok(Ok(CyborgImported {
                    counts: valid.counts(),
                    skipped: problems,
                    replaced: held,
                }))
            })
        })
        .await
}

fn t(x: &Option<String>) -> Val {
    Val::T(x.clone())
}

fn s(x: &str) -> Val {
    Val::S(x.to_owned())
}

/// The rows of every table as bound values, in the column order of [`COLUMNS`];
/// `now` stands in for a missing `created_at` (accel's is NOT NULL).
fn rows_of(d: &CyborgData, now: Option<i64>) -> Vec<Vec<Vec<Val>>> {
    let c = |x: &Times| Val::N(x.created.or(now));
    let u = |x: &Times| Val::N(x.updated);
    // Deployables parents first.
    let mut deps: Vec<&DeployableRow> = d.deployables.iter().collect();
    deps.sort_by_key(|x| (x.parent_id.is_some(), x.id));
    vec![
        d.profiles
            .iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    s(&x.name),
                    t(&x.description),
                    s(x.groups.as_deref().unwrap_or("[]")),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
        d.devices
            .iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    s(&x.device_type),
                    s(&x.vendor),
                    s(&x.model),
                    t(&x.std_board_info),
                    t(&x.vendor_board_info),
                    s(&x.hostname),
                    s(&x.status),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
        d.cpids
            .iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    Val::I(x.device_id),
                    s(&x.cpid_type),
                    s(&x.cpid_info),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
        deps.iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    Val::N(x.parent_id),
                    Val::N(x.root_id),
                    s(&x.name),
                    Val::I(x.num_accelerators),
                    Val::I(x.device_id),
                    t(&x.rp_uuid),
                    t(&x.driver_name),
                    t(&x.bitstream_id),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
        d.attributes
            .iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    Val::I(x.deployable_id),
                    s(&x.key),
                    s(&x.value),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
        d.handles
            .iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    Val::I(x.deployable_id),
                    Val::I(x.cpid_id),
                    Val::I(i64::from(x.in_use)),
                    s(&x.attach_type),
                    s(&x.attach_info),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
        d.arqs
            .iter()
            .map(|x| {
                vec![
                    Val::I(x.id),
                    s(&x.uuid),
                    t(&x.project_id),
                    s(&x.state),
                    Val::I(x.device_profile_id),
                    Val::I(x.device_profile_group_id),
                    t(&x.hostname),
                    t(&x.device_rp_uuid),
                    t(&x.instance_uuid),
                    Val::N(x.attach_handle_id),
                    Val::N(x.deployable_id),
                    c(&x.times),
                    u(&x.times),
                ]
            })
            .collect(),
    ]
}

/// accel's tables and columns, in [`rows_of`]'s order (upstream's differ only where
/// [`upstream_columns`] says).
const COLUMNS: &[(&str, &[&str])] = &[
    (
        "device_profiles",
        &[
            "id",
            "uuid",
            "name",
            "description",
            "groups",
            "created_at",
            "updated_at",
        ],
    ),
    (
        "devices",
        &[
            "id",
            "uuid",
            "type",
            "vendor",
            "model",
            "std_board_info",
            "vendor_board_info",
            "hostname",
            "status",
            "created_at",
            "updated_at",
        ],
    ),
    (
        "control_path_ids",
        &[
            "id",
            "uuid",
            "device_id",
            "cpid_type",
            "cpid_info",
            "created_at",
            "updated_at",
        ],
    ),
    (
        "deployables",
        &[
            "id",
            "uuid",
            "parent_id",
            "root_id",
            "name",
            "num_accelerators",
            "device_id",
            "rp_uuid",
            "driver_name",
            "bitstream_id",
            "created_at",
            "updated_at",
        ],
    ),
    (
        "attributes",
        &[
            "id",
            "uuid",
            "deployable_id",
            "key",
            "value",
            "created_at",
            "updated_at",
        ],
    ),
    (
        "attach_handles",
        &[
            "id",
            "uuid",
            "deployable_id",
            "cpid_id",
            "in_use",
            "attach_type",
            "attach_info",
            "created_at",
            "updated_at",
        ],
    ),
    (
        "extended_accelerator_requests",
        &[
            "id",
            "uuid",
            "project_id",
            "state",
            "device_profile_id",
            "device_profile_group_id",
            "hostname",
            "device_rp_uuid",
            "instance_uuid",
            "attach_handle_id",
            "deployable_id",
            "created_at",
            "updated_at",
        ],
    ),
];

async fn write_accel(tx: &mut Tx, d: &CyborgData) -> Result<(), StoreError> {
    let now = crate::now();
    for ((table, cols), rows) in COLUMNS.iter().zip(rows_of(d, Some(now))) {
        insert_rows(tx, table, cols, rows).await?;
    }
    if tx.backend() == Backend::Postgres {
        for (table, _) in COLUMNS {
            sqlx::query(&format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                 (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"
            ))
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(())
}

// ---- the way back ------------------------------------------------------------------

/// The upstream database's Cyborg data (nonzero counts).
async fn upstream_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    const COUNTS: &[(&str, &str)] = &[
        ("device_profiles", "SELECT COUNT(*) FROM device_profiles"),
        ("devices", "SELECT COUNT(*) FROM devices"),
        ("controlpath_ids", "SELECT COUNT(*) FROM controlpath_ids"),
        ("deployables", "SELECT COUNT(*) FROM deployables"),
        ("attributes", "SELECT COUNT(*) FROM attributes"),
        ("attach_handles", "SELECT COUNT(*) FROM attach_handles"),
        (
            "extended_accelerator_requests",
            "SELECT COUNT(*) FROM extended_accelerator_requests",
        ),
    ];
    nonzero_counts(tx, COUNTS).await
}

/// Writes `data` (accel's, from [`read_accel`]) into the empty upstream Cyborg
/// database `target`, in one transaction; returns the rows written per table.
pub async fn export_cyborg(
    data: &CyborgData,
    target: &Source,
) -> Result<Result<Vec<(&'static str, usize)>, CyborgRefused>, StoreError> {
    let data = data.clone();
    target
        .write(move |tx| {
            Box::pin(async move {
                check_alembic(
                    &schema_version(tx, "Cyborg").await?,
                    "Cyborg",
                    &[CYBORG_HEAD],
                    "the schema of Cyborg 17.0.0; create it with `cyborg-dbsync upgrade`",
                )?;
                let held = upstream_contents(tx).await?;
                if !held.is_empty() {
                    return Ok(Err(CyborgRefused::UpstreamNotEmpty(held)));
                }
                write_upstream(tx, &data).await?;
                Ok(Ok(data.counts()))
            })
        })
        .await
}

/// A `DateTime` from epoch seconds bound at `$n` (NULL stays NULL).
fn datetime(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => "datetime(?, 'unixepoch')".to_owned(),
        Backend::Postgres => format!("(to_timestamp(${n}) AT TIME ZONE 'UTC')"),
        Backend::MySql => format!("FROM_UNIXTIME(${n})"),
    }
}

async fn write_upstream(tx: &mut Tx, d: &CyborgData) -> Result<(), StoreError> {
    // Upstream's profile_json wraps the groups list.
    let mut up = d.clone();
    for p in &mut up.profiles {
        let groups: serde_json::Value =
            serde_json::from_str(p.groups.as_deref().unwrap_or("[]")).unwrap_or_default();
        p.groups = Ok(serde_json::json!({ "groups": groups }).to_string());
    }
    let in_use: HashSet<i64> = up
        .handles
        .iter()
        .filter(|h| h.in_use)
        .map(|h| h.deployable_id)
        .collect();
    let allocated: HashSet<i64> = up
        .deployables
        .iter()
        .filter(|x| in_use.contains(&x.id))
        .map(|x| x.device_id)
        .collect();
    for ((table, cols), mut rows) in COLUMNS.iter().zip(rows_of(&up, None)) {
        let mut cols: Vec<&str> = cols.to_vec();
        let table = match *table {
            "control_path_ids" => "controlpath_ids",
            other => other,
        };
        for c in cols.iter_mut() {
            if *c == "groups" {
                *c = "profile_json";
            }
        }
        if table == "devices" {
            // Upstream derives a NULL device_state from the handles on the first load
            // and bumps updated_at doing so: written here as it would derive it.
            cols.push("device_state");
            for (r, x) in rows.iter_mut().zip(&up.devices) {
                r.push(s(if allocated.contains(&x.id) {
                    "allocated"
                } else {
                    "available"
                }));
            }
        }
        if table == "extended_accelerator_requests" {
            cols.push("substate");
            for r in &mut rows {
                r.push(s("Initial"));
            }
        }
        insert_rows_with(tx, table, &cols, rows, |c, backend, n| {
            if c == "created_at" || c == "updated_at" {
                datetime(backend, n)
            } else {
                placeholder(backend, n)
            }
        })
        .await?;
    }
    if tx.backend() == Backend::Postgres {
        for (table, _) in COLUMNS {
            let table = if *table == "control_path_ids" {
                "controlpath_ids"
            } else {
                table
            };
            sqlx::query(&format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                 (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"
            ))
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(())
}
