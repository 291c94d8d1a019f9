//! Binds the bind `PATCH` refuses itself (issue 31 item 3, issue 29): what can be known
//! when Nova asks is answered then, in the API's error, instead of a `202` and a
//! `BindFailed` milliseconds later. Nova counts a failed bind event as resolved and,
//! when the event reaches it before the instance has a host, drops it and boots the
//! server without its accelerator; an error on the `PATCH` makes it fail the build
//! (and reschedule or put the server in ERROR, deleting the ARQs).
//!
//! Refused, in the order checked for each bind of the patch:
//! - the device provider's device is on another host than the patch's `hostname`;
//! - the agent reports the device unhealthy (or it vanished from its report);
//! - the device has no attach handle left: its free handles, less those promised to
//!   binds in progress (ARQs `BindStarted` on the provider, which take theirs when
//!   their job runs), less the earlier binds of this patch to it. Upstream Cyborg
//!   takes the handle inside the `PATCH` and answers 404 (`AttachHandle not found`);
//!   accel's worker takes it later, so the count stands in for the take.
//!
//! A refused ARQ ends as upstream leaves it: the patch's host, device and instance
//! recorded, state `BindFailed`, and a failed bind job whose error is the refusal (in
//! the API's words, which the caller gives: `Arqs::patch`), so the console's ARQ page
//! shows why. The other ARQs of the patch are left as they
//! were (the whole patch is refused before any of them is touched). No Nova event is
//! recorded: the `PATCH`'s error is Nova's answer.
//!
//! What only the bind job can learn still fails asynchronously, with the failed event
//! Nova acts on: programming that fails, and the last handle when two binds to one
//! device were accepted at the same moment (the count takes no lock, so concurrent
//! `PATCH`es may both see it free; the job that takes it second fails).

use crate::{StoreError, Tx};
use accel_core::accelerator::DeviceHealth;
use sqlx::Row;

/// Why a bind was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The provider's device is reported by another host.
    OtherHost { device_host: String },
    /// The agent reports the device unhealthy or vanished.
    Unhealthy { health: DeviceHealth },
    /// Every attach handle of the deployable is in use or promised.
    NoFreeHandle {
        deployable_id: i64,
        handles: i64,
        free: i64,
        promised: i64,
    },
}

impl Refusal {
    /// The `reason` label of `accel_arq_bind_refusals_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::OtherHost { .. } => "other_host",
            Refusal::Unhealthy { .. } => "unhealthy",
            Refusal::NoFreeHandle { .. } => "no_free_handle",
        }
    }
}

/// A refused bind: which ARQ, to what, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub arq_uuid: String,
    pub instance_uuid: String,
    pub hostname: String,
    pub device_rp_uuid: String,
    pub refusal: Refusal,
}

/// The device behind a provider, as far as a bind needs it.
struct Device {
    deployable_id: i64,
    hostname: String,
    health: DeviceHealth,
}

async fn device_of(tx: &mut Tx, rp: &str) -> Result<Option<Device>, StoreError> {
    // The deployable the bind worker picks (its lowest id), and its device.
    let row = sqlx::query(
        "SELECT dep.id, d.hostname, d.health FROM deployables dep \
         JOIN devices d ON d.id = dep.device_id WHERE dep.rp_uuid = $1 ORDER BY dep.id LIMIT 1",
    )
    .bind(rp)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(Device {
        deployable_id: r.try_get(0)?,
        hostname: r.try_get(1)?,
        health: super::parse_column(&r, "health")?,
    }))
}

async fn count(tx: &mut Tx, sql: &str, key: &str) -> Result<i64, StoreError> {
    let n: i64 = sqlx::query(sql)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
    Ok(n)
}

/// One bind of a patch, as [`check`] judges it.
pub(super) struct Bind<'a> {
    pub arq: &'a str,
    pub hostname: &'a str,
    pub device_rp_uuid: &'a str,
    pub instance_uuid: &'a str,
}

/// The first bind of `binds` that cannot succeed, checked before any is started.
/// A provider without a deployable is left to the caller's own 404.
pub(super) async fn check(tx: &mut Tx, binds: &[Bind<'_>]) -> Result<Option<Refused>, StoreError> {
    // Per provider: its device, and how many handles are left for this patch.
    let mut seen: Vec<(String, Option<Device>, i64, i64, i64)> = Vec::new();
    for b in binds {
        let rp = b.device_rp_uuid;
        let at = match seen.iter().position(|(r, ..)| r == rp) {
            Some(at) => at,
            None => {
                let dev = device_of(tx, rp).await?;
                let (mut handles, mut free, mut promised) = (0, 0, 0);
                if let Some(d) = &dev {
                    let id = d.deployable_id;
                    handles = count_id(
                        tx,
                        "SELECT COUNT(*) FROM attach_handles WHERE deployable_id = $1",
                        id,
                    )
                    .await?;
                    free = count_id(
                        tx,
                        "SELECT COUNT(*) FROM attach_handles WHERE deployable_id = $1 AND in_use = 0",
                        id,
                    )
                    .await?;
                    promised = count(
                        tx,
                        "SELECT COUNT(*) FROM extended_accelerator_requests \
                         WHERE device_rp_uuid = $1 AND state = 'BindStarted'",
                        rp,
                    )
                    .await?;
                }
                seen.push((rp.to_owned(), dev, handles, free, promised));
                seen.len() - 1
            }
        };
        let (_, dev, handles, free, promised) = &mut seen[at];
        let Some(dev) = dev else { continue };
        let refusal = if dev.hostname != b.hostname {
            Some(Refusal::OtherHost {
                device_host: dev.hostname.clone(),
            })
        } else if dev.health != DeviceHealth::Ok {
            Some(Refusal::Unhealthy { health: dev.health })
        } else if *free - *promised < 1 {
            Some(Refusal::NoFreeHandle {
                deployable_id: dev.deployable_id,
                handles: *handles,
                free: *free,
                promised: *promised,
            })
        } else {
            *promised += 1;
            None
        };
        if let Some(refusal) = refusal {
            return Ok(Some(Refused {
                arq_uuid: b.arq.to_owned(),
                instance_uuid: b.instance_uuid.to_owned(),
                hostname: b.hostname.to_owned(),
                device_rp_uuid: b.device_rp_uuid.to_owned(),
                refusal,
            }));
        }
    }
    Ok(None)
}

async fn count_id(tx: &mut Tx, sql: &str, id: i64) -> Result<i64, StoreError> {
    let n: i64 = sqlx::query(sql)
        .bind(id)
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
    Ok(n)
}
