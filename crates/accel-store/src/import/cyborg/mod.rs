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
use super::rows::{describe, insert_rows, insert_rows_with, nonzero_counts, placeholder, Val};
use super::Options;
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
                describe(held)
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
                describe(held)
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

mod check;
mod export;
mod read;
mod write;

pub use check::check;
pub use export::{check_target, export_cyborg};
pub use read::{read_accel, read_cyborg};
pub use write::{accel_contents, import_cyborg};
