//! Programming requests (`program_requests`): what the agent of a host must write to
//! an FPGA deployable, asked by a bind job ([`super::binds`]) or directly through
//! `PATCH /v2/deployables/{uuid}/program`. Kept apart from the bind jobs because the
//! agent, not the bind worker, drives them: it polls [`pending_programs`] and answers
//! with [`finish_program_request`].

use super::lease;
use super::refused::{Kind, Refused};
use crate::{Store, StoreError, Tx};
use sqlx::Row;

/// A programming request the agent should carry out: for a bind (`arq_uuid`), or
/// asked directly through `PATCH /v2/deployables/{uuid}/program`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramRequest {
    pub id: i64,
    pub arq_uuid: Option<String>,
    pub deployable_id: i64,
    pub deployable_uuid: String,
    pub deployable_name: String,
    pub hostname: String,
    pub bitstream_id: Option<String>,
    pub function_id: Option<String>,
    pub state: ProgramState,
    pub error: Option<String>,
}

super::column_enum!(
    /// `program_requests.state`.
    ProgramState {
        /// For the agent to carry out.
        Pending => "pending",
        Done => "done",
        Failed => "failed",
    }
);

const PROGRAM_COLUMNS: &str = "pr.id, pr.arq_uuid, pr.deployable_id, d.uuid, d.name, \
     pr.hostname, pr.bitstream_id, pr.function_id, pr.state, pr.error \
     FROM program_requests pr JOIN deployables d ON d.id = pr.deployable_id";

fn program_row(r: &sqlx::any::AnyRow) -> Result<ProgramRequest, StoreError> {
    Ok(ProgramRequest {
        id: r.try_get(0)?,
        arq_uuid: r.try_get(1)?,
        deployable_id: r.try_get(2)?,
        deployable_uuid: r.try_get(3)?,
        deployable_name: r.try_get(4)?,
        hostname: r.try_get(5)?,
        bitstream_id: r.try_get(6)?,
        function_id: r.try_get(7)?,
        state: super::parse_column(r, 8)?,
        error: r.try_get(9)?,
    })
}

/// The programming request recorded for an ARQ's bind, if any.
pub async fn program_request(
    tx: &mut Tx,
    arq_uuid: &str,
) -> Result<Option<ProgramRequest>, StoreError> {
    let row = sqlx::query(&format!("SELECT {PROGRAM_COLUMNS} WHERE pr.arq_uuid = $1"))
        .bind(arq_uuid)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(program_row).transpose()
}

/// Programming request `id`, if it exists.
pub(crate) async fn program_request_by_id(
    tx: &mut Tx,
    id: i64,
) -> Result<Option<ProgramRequest>, StoreError> {
    let row = sqlx::query(&format!("SELECT {PROGRAM_COLUMNS} WHERE pr.id = $1"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(program_row).transpose()
}

/// The requests the agent of `host` still has to carry out, oldest first.
pub(crate) async fn pending_programs(
    tx: &mut Tx,
    host: &str,
) -> Result<Vec<ProgramRequest>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {PROGRAM_COLUMNS} WHERE pr.hostname = $1 AND pr.state = 'pending' ORDER BY pr.id"
    ))
    .bind(host)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter().map(program_row).collect()
}

/// A `program_requests` row to write.
pub(super) struct NewProgram<'a> {
    pub(super) arq_uuid: Option<&'a str>,
    pub(super) deployable_id: i64,
    pub(super) hostname: &'a str,
    pub(super) bitstream_id: Option<&'a str>,
    pub(super) function_id: Option<&'a str>,
    pub(super) state: ProgramState,
}

pub(super) async fn insert_program_request(
    tx: &mut Tx,
    p: &NewProgram<'_>,
    now: i64,
) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO program_requests (arq_uuid, deployable_id, hostname, bitstream_id, \
         function_id, state, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING id",
    )
    .bind(p.arq_uuid)
    .bind(p.deployable_id)
    .bind(p.hostname)
    .bind(p.bitstream_id)
    .bind(p.function_id)
    .bind(p.state.as_str())
    .bind(now)
    .fetch_one(&mut *tx)
    .await?)
}

/// Records a request, without an ARQ, to program the deployable with uuid
/// `deployable_uuid` with Glance image `bitstream_id`, for the agent of the
/// deployable's host; answers the request. [`Refused::NotFound`] for an unknown
/// deployable.
pub(crate) async fn request_program(
    tx: &mut Tx,
    deployable_uuid: &str,
    bitstream_id: &str,
    now: i64,
) -> Result<ProgramRequest, StoreError> {
    let row = sqlx::query(
        "SELECT d.id, v.hostname FROM deployables d JOIN devices v ON v.id = d.device_id \
         WHERE d.uuid = $1",
    )
    .bind(deployable_uuid)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| Refused::no_uuid(Kind::Deployable, deployable_uuid))?;
    let (dep_id, host): (i64, String) = (row.try_get(0)?, row.try_get(1)?);
    let id = insert_program_request(
        tx,
        &NewProgram {
            arq_uuid: None,
            deployable_id: dep_id,
            hostname: &host,
            bitstream_id: Some(bitstream_id),
            function_id: None,
            state: ProgramState::Pending,
        },
        now,
    )
    .await?;
    program_request_by_id(tx, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("programming request {id}")))
}

/// Ends programming request `id` of `host` (the agent's answer): `Ok(())` done,
/// `Err(reason)` failed. A done request that named a bitstream records it on the
/// deployable. A bind job waiting on the request becomes due again. Answers the
/// request as it now is; [`Refused::NoPendingProgram`] when `host` has no pending
/// request `id`.
pub async fn finish_program_request(
    tx: &mut Tx,
    host: &str,
    id: i64,
    result: Result<(), String>,
    now: i64,
) -> Result<ProgramRequest, StoreError> {
    let (state, error) = match result {
        Ok(()) => (ProgramState::Done, None),
        Err(e) => (ProgramState::Failed, Some(e)),
    };
    let n = sqlx::query(
        "UPDATE program_requests SET state = $1, error = $2, updated_at = $3 \
         WHERE id = $4 AND hostname = $5 AND state = 'pending'",
    )
    .bind(state.as_str())
    .bind(error)
    .bind(now)
    .bind(id)
    .bind(host)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if n != 1 {
        return Err(Refused::NoPendingProgram {
            host: host.to_owned(),
            id,
        }
        .into());
    }
    let pr = program_request_by_id(tx, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("programming request {id}")))?;
    if let (Some(b), ProgramState::Done) = (&pr.bitstream_id, state) {
        set_bitstream(tx, pr.deployable_id, b, now).await?;
    }
    Ok(pr)
}

/// Gives up on programming request `id` if it is still pending (its caller stopped
/// waiting): it ends `failed` with `reason`. True when this call ended it.
pub(crate) async fn abandon_program_request(
    tx: &mut Tx,
    id: i64,
    reason: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let q = sqlx::query(
        "UPDATE program_requests SET state = 'failed', error = $1, updated_at = $2 \
         WHERE id = $3 AND state = 'pending'",
    )
    .bind(reason)
    .bind(now)
    .bind(id);
    lease::changed_one(tx, q).await
}

/// Records the bitstream a deployable now carries.
pub(super) async fn set_bitstream(
    tx: &mut Tx,
    dep_id: i64,
    bitstream: &str,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE deployables SET bitstream_id = $1, updated_at = $2 WHERE id = $3")
        .bind(bitstream)
        .bind(now)
        .bind(dep_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Programming request operations ([`Store::programs`]): the API's
/// `PATCH /v2/deployables/{uuid}/program` and the agent's side.
pub struct Programs<'s>(&'s Store);

impl Store {
    /// Operations on programming requests.
    pub fn programs(&self) -> Programs<'_> {
        Programs(self)
    }
}

impl Programs<'_> {
    /// Records a request to program deployable `deployable_uuid` with Glance image
    /// `bitstream_id` ([`request_program`]).
    pub async fn request(
        &self,
        deployable_uuid: &str,
        bitstream_id: &str,
    ) -> Result<ProgramRequest, StoreError> {
        self.0
            .write_rerunning(|| {
                let (d, b) = (deployable_uuid.to_owned(), bitstream_id.to_owned());
                move |tx| Box::pin(async move { request_program(tx, &d, &b, crate::now()).await })
            })
            .await
    }

    /// Programming request `id`, if it exists.
    pub async fn get(&self, id: i64) -> Result<Option<ProgramRequest>, StoreError> {
        self.0
            .read(move |tx| Box::pin(async move { program_request_by_id(tx, id).await }))
            .await
    }

    /// Gives up on request `id` if it is still pending ([`abandon_program_request`]);
    /// true when this call ended it.
    pub async fn abandon(&self, id: i64, reason: &str) -> Result<bool, StoreError> {
        self.0
            .write_rerunning(|| {
                let reason = reason.to_owned();
                move |tx| {
                    Box::pin(
                        async move { abandon_program_request(tx, id, &reason, crate::now()).await },
                    )
                }
            })
            .await
    }

    /// The requests the agent of `host` has to carry out, oldest first.
    pub async fn pending(&self, host: &str) -> Result<Vec<ProgramRequest>, StoreError> {
        let host = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { pending_programs(tx, &host).await }))
            .await
    }

    /// The agent's answer to request `id` of `host` ([`finish_program_request`]), with
    /// when the request was recorded (for the duration metric).
    pub async fn finish(
        &self,
        host: &str,
        id: i64,
        result: Result<(), String>,
    ) -> Result<(ProgramRequest, Option<i64>), StoreError> {
        self.0
            .write_rerunning(|| {
                let (host, result) = (host.to_owned(), result.clone());
                move |tx| {
                    Box::pin(async move {
                        let recorded_at = created_at(tx, id).await?;
                        let pr =
                            finish_program_request(tx, &host, id, result, crate::now()).await?;
                        Ok((pr, recorded_at))
                    })
                }
            })
            .await
    }
}

/// When programming request `id` was recorded, in the caller's transaction.
async fn created_at(tx: &mut Tx, id: i64) -> Result<Option<i64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT created_at FROM program_requests WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?,
    )
}
