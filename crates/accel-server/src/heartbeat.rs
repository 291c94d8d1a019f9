//! This server's heartbeat: a `server_heartbeats` row beaten every
//! `heartbeat_interval`, so that the leases of a server that died are free to the others
//! within seconds (`accel_store::accelerator::heartbeats`, ARCHITECTURE.md's invariants),
//! and a wake for the workers when a dead holder's work is waiting.

use crate::accelerator::binder::WorkerConfig;
use crate::supervisor::Stop;
use accel_store::Store;
use std::sync::Arc;
use tokio::sync::Notify;

/// Rows of holders dead this long are deleted: far past any lease they held.
const FORGET_DEAD_SECS: i64 = 3600;

/// Beats this process's heartbeat row every `heartbeat_interval`, wakes the workers when
/// a dead holder still has leased work (so it is taken over now rather than when the
/// lease ends, see `accel_store::accelerator::heartbeats`), and marks the row dead at
/// a clean stop.
pub(crate) async fn run(
    store: Store,
    cfg: WorkerConfig,
    wakes: [Arc<Notify>; 2],
    mut stop: Stop,
) -> anyhow::Result<()> {
    use accel_store::accelerator::heartbeats;
    let mut failing = false;
    let mut last_forget = 0;
    loop {
        let now = accel_store::now();
        match heartbeats::beat(&store, &cfg.owner, now, cfg.heartbeat_ttl_secs).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(owner = %cfg.owner, "heartbeat written again");
            }
            Ok(()) => {}
            Err(e) => {
                // Logged once per outage: the database is down and every request says so.
                if !failing {
                    tracing::warn!(owner = %cfg.owner, error = %e, "heartbeat not written; other servers may take this one's leases over");
                }
                failing = true;
            }
        }
        if !failing {
            match heartbeats::orphaned_work(&store, now).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(
                        leases = n,
                        "taking over work leased by a server whose heartbeat expired"
                    );
                    for w in &wakes {
                        w.notify_one();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "looking for work of dead servers failed"),
            }
            if now - last_forget >= 60 {
                last_forget = now;
                if let Err(e) = heartbeats::forget_dead(&store, now, FORGET_DEAD_SECS).await {
                    tracing::warn!(error = %e, "deleting old heartbeat rows failed");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.heartbeat_interval) => {}
            _ = stop.stopped() => break,
        }
    }
    if let Err(e) = heartbeats::retire(&store, &cfg.owner, accel_store::now()).await {
        tracing::warn!(owner = %cfg.owner, error = %e, "could not mark this server stopped; its leases free up when its heartbeat expires");
    }
    Ok(())
}
