//! The publisher's loop: a step every interval, and between ticks when the devices'
//! presence changes, when what the node shows changes (health, claims prepared or
//! released), or when the watch of the node's slices reports a change.

use super::{Observed, Published, Publisher};
use crate::dra::{ApiError, BoxFuture};
use std::time::Duration;

/// How often the pool is reconciled (and re-created after kubelet wiped it).
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(10);
/// How often [`crate::DeviceSource::presence`] is compared with its last value.
pub const PRESENCE_INTERVAL: Duration = Duration::from_millis(100);
/// How often the node is observed between steps (one discovery pass, the CDI
/// directory read): a device turning unhealthy or recovering, a claim prepared or
/// released, reaches the slice within this and one step.
pub const HEALTH_INTERVAL: Duration = Duration::from_millis(500);

/// Reconciles every `interval`, when the devices' presence changes, when an
/// observation every health interval differs from the last step's, and whenever the
/// watch of the node's slices reports a change, until `shutdown`; a failed step is
/// logged and retried at the next tick, a failed watch made again after the next step.
pub async fn run(
    mut publisher: Publisher,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut presence = tokio::time::interval(PRESENCE_INTERVAL);
    presence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Not at once: the first tick steps.
    let every = publisher.health_interval;
    let mut health = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_presence = publisher.presence().await;
    let mut watch: Option<BoxFuture<'static, Result<(), ApiError>>> = None;
    loop {
        if let Some(p) = &publisher.pulse {
            p.beat();
        }
        let mut observed: Option<Observed> = None;
        let now = tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => true,
            _ = presence.tick(), if last_presence.is_some() => {
                let seen = publisher.presence().await;
                let changed = seen != last_presence;
                last_presence = seen;
                changed
            }
            _ = health.tick() => {
                match publisher.observe().await {
                    Ok(o) if publisher.differs(&o) => {
                        observed = Some(o);
                        true
                    }
                    _ => false,
                }
            }
            r = async {
                match watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            } => {
                watch = None;
                match r {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::debug!(node = %publisher.node, error = %e, "watching the ResourceSlices stopped; the interval goes on");
                        false
                    }
                }
            }
        };
        if !now {
            continue;
        }
        let result = match observed {
            Some(o) => publisher.publish(o).await,
            None => publisher.step().await,
        };
        if let Some(m) = &publisher.metrics {
            m.published(
                result
                    .as_ref()
                    .map(Published::outcome)
                    .map_err(|e| e.to_string()),
            );
        }
        let stepped = match result {
            Ok(Published::Unchanged) => true,
            Ok(p) => {
                tracing::info!(node = %publisher.node, outcome = ?p, "ResourceSlice published");
                true
            }
            Err(e) => {
                tracing::warn!(node = %publisher.node, error = %e, "publishing the ResourceSlice failed");
                false
            }
        };
        // After a failed step the last list may be old: watching from it again would
        // replay the same event at once, so the tick comes first.
        if stepped && watch.is_none() {
            watch = publisher.changed();
        }
    }
}
