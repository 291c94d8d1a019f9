//! The one slot table of the node behind a mutex, the change counter every
//! ListAndWatch stream follows, and the way an Allocate asks the run loop to save its
//! grant at once ([`Shared::confirm`]).
//!
//! The lock is a std mutex held only for pure [`SlotTable`] calls (never across an
//! await); a write that changed what kubelet sees bumps the counter, which wakes every
//! stream, instance-level and pooled alike.

use crate::record::RecordError;
use crate::slots::SlotTable;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// What a save answers: the device ids the server withholds (a virtual machine holds
/// them, or they are being cleaned or reserved), or why the save failed.
pub type Saved = Result<BTreeSet<String>, SaveError>;

/// Why a save of the slot usage failed (logged by the run loop; an Allocate waiting on
/// it is refused with its words).
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Saving before the record was read back could drop the claims it holds.
    #[error("usage not restored yet")]
    NotRestored,
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("the usage saver has stopped")]
    SaverStopped,
    #[error("the usage saver dropped the request")]
    SaverDropped,
    #[error("no answer from the server within {} s", .0.as_secs())]
    NoAnswer(Duration),
}

/// How long an Allocate waits for its grant's save before refusing.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// Shared by every plugin server, the device refresher and the reclaimer.
#[derive(Debug)]
pub struct Shared {
    table: Mutex<SlotTable>,
    version: watch::Sender<u64>,
    /// The run loop's save queue, once it runs with a usage record.
    saver: Mutex<Option<mpsc::Sender<oneshot::Sender<Saved>>>>,
    /// kubelet's pod-resources socket, once the run loop knows it.
    pod_resources: Mutex<Option<PathBuf>>,
}

impl Shared {
    pub fn new(table: SlotTable) -> Arc<Shared> {
        Arc::new(Shared {
            table: Mutex::new(table),
            version: watch::channel(0).0,
            saver: Mutex::new(None),
            pod_resources: Mutex::new(None),
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

    /// Makes [`Shared::confirm`] ask `saver` (the run loop, which saves the whole table
    /// and answers): from then on every grant is saved before kubelet hears of it.
    pub fn set_saver(&self, saver: mpsc::Sender<oneshot::Sender<Saved>>) {
        *self.saver.lock().unwrap_or_else(|p| p.into_inner()) = Some(saver);
    }

    /// Where [`Shared::pod_resources`] asks kubelet which pods hold which devices.
    pub fn set_pod_resources(&self, socket: PathBuf) {
        *self.pod_resources.lock().unwrap_or_else(|p| p.into_inner()) = Some(socket);
    }

    /// kubelet's pod-resources socket, when the run loop set one.
    pub fn pod_resources(&self) -> Option<PathBuf> {
        self.pod_resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Saves the table now through the run loop and answers what the server withholds;
    /// `None` without a saver (plugins run without a server keep grants local).
    pub async fn confirm(&self) -> Option<Saved> {
        let saver = self
            .saver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let (reply, answer) = oneshot::channel();
        if saver.send(reply).await.is_err() {
            return Some(Err(SaveError::SaverStopped));
        }
        Some(match tokio::time::timeout(CONFIRM_WAIT, answer).await {
            Ok(Ok(saved)) => saved,
            Ok(Err(_)) => Err(SaveError::SaverDropped),
            Err(_) => Err(SaveError::NoAnswer(CONFIRM_WAIT)),
        })
    }
}
