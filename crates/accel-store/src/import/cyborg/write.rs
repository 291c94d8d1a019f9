//! Writing into accel: the target's accelerator contents, and the import in one
//! transaction of accel's.

use super::*;

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

pub(super) fn t(x: &Option<String>) -> Val {
    Val::T(x.clone())
}

pub(super) fn s(x: &str) -> Val {
    Val::S(x.to_owned())
}

/// The rows of every table as bound values, in the column order of [`COLUMNS`];
/// `now` stands in for a missing `created_at` (accel's is NOT NULL).
pub(super) fn rows_of(d: &CyborgData, now: Option<i64>) -> Vec<Vec<Vec<Val>>> {
    fn all<R: Values>(rows: impl IntoIterator<Item = R>, now: Option<i64>) -> Vec<Vec<Val>> {
        rows.into_iter().map(|r| r.values(now)).collect()
    }
    // Deployables parents first.
    let mut deps: Vec<&DeployableRow> = d.deployables.iter().collect();
    deps.sort_by_key(|x| (x.parent_id.is_some(), x.id));
    vec![
        all(&d.profiles, now),
        all(&d.devices, now),
        all(&d.cpids, now),
        all(deps, now),
        all(&d.attributes, now),
        all(&d.handles, now),
        all(&d.arqs, now),
    ]
}

/// A row as bound values, in its table's column order of [`COLUMNS`], the two
/// times last.
trait Values {
    fn values(&self, now: Option<i64>) -> Vec<Val>;
}

/// `created_at` (or `now` in its place) and `updated_at`.
fn times(x: &Times, now: Option<i64>) -> [Val; 2] {
    [Val::N(x.created.or(now)), Val::N(x.updated)]
}

fn with_times(mut v: Vec<Val>, x: &Times, now: Option<i64>) -> Vec<Val> {
    v.extend(times(x, now));
    v
}

impl Values for &ProfileRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let groups = s(x.groups.as_deref().unwrap_or("[]"));
        let v = vec![
            Val::I(x.id),
            s(&x.uuid),
            s(&x.name),
            t(&x.description),
            groups,
        ];
        with_times(v, &x.times, now)
    }
}

impl Values for &DeviceRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let v = vec![
            Val::I(x.id),
            s(&x.uuid),
            s(&x.device_type),
            s(&x.vendor),
            s(&x.model),
            t(&x.std_board_info),
            t(&x.vendor_board_info),
            s(&x.hostname),
            s(&x.status),
        ];
        with_times(v, &x.times, now)
    }
}

impl Values for &CpidRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let v = vec![
            Val::I(x.id),
            s(&x.uuid),
            Val::I(x.device_id),
            s(&x.cpid_type),
            s(&x.cpid_info),
        ];
        with_times(v, &x.times, now)
    }
}

impl Values for &DeployableRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let v = vec![
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
        ];
        with_times(v, &x.times, now)
    }
}

impl Values for &AttributeRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let v = vec![
            Val::I(x.id),
            s(&x.uuid),
            Val::I(x.deployable_id),
            s(&x.key),
            s(&x.value),
        ];
        with_times(v, &x.times, now)
    }
}

impl Values for &HandleRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let v = vec![
            Val::I(x.id),
            s(&x.uuid),
            Val::I(x.deployable_id),
            Val::I(x.cpid_id),
            Val::I(i64::from(x.in_use)),
            s(&x.attach_type),
            s(&x.attach_info),
        ];
        with_times(v, &x.times, now)
    }
}

impl Values for &ArqRow {
    fn values(&self, now: Option<i64>) -> Vec<Val> {
        let x = self;
        let v = vec![
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
        ];
        with_times(v, &x.times, now)
    }
}

/// accel's tables and columns, in [`rows_of`]'s order (upstream's differ only where
/// [`upstream_columns`] says).
pub(super) const COLUMNS: &[(&str, &[&str])] = &[
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

pub(super) async fn write_accel(tx: &mut Tx, d: &CyborgData) -> Result<(), StoreError> {
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
