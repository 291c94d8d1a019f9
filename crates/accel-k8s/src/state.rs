//! The one slot table of the node behind a mutex, and the change counter every
//! ListAndWatch stream follows.
//!
//! The lock is a std mutex held only for pure [`SlotTable`] calls (never across an
//! await); a write that changed what kubelet sees bumps the counter, which wakes every
//! stream, instance-level and pooled alike.

use crate::slots::SlotTable;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// Shared by every plugin server, the device refresher and the reclaimer.
#[derive(Debug)]
pub struct Shared {
    table: Mutex<SlotTable>,
    version: watch::Sender<u64>,
}

impl Shared {
    pub fn new(table: SlotTable) -> Arc<Shared> {
        Arc::new(Shared {
            table: Mutex::new(table),
            version: watch::channel(0).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, SlotTable> {
        // A panic inside a pure table call cannot leave it half-changed in a way that
        // matters more than stopping every plugin would.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn read<R>(&self, f: impl FnOnce(&SlotTable) -> R) -> R {
        f(&self.lock())
    }

    /// Runs `f`; when it reports a change, every stream is woken.
    pub fn write<R>(&self, f: impl FnOnce(&mut SlotTable) -> (R, bool)) -> R {
        let (r, changed) = f(&mut self.lock());
        if changed {
            self.version.send_modify(|v| *v += 1);
        }
        r
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}
