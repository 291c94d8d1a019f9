//! The cleanings one agent process runs, each in its own task: a wipe may take hours
//! and the report loop must go on. Keyed by `(provider, attempt)`, because a fetch
//! answers every cleaning the process holds, running or not.

use std::collections::HashMap;
use tokio::task::JoinSet;

/// The cleanings this agent process runs in their own tasks (a wipe may take hours;
/// the report loop must go on), by `(provider, attempt)`.
#[derive(Default)]
pub struct Running {
    keys: HashMap<tokio::task::Id, (String, i64)>,
    tasks: JoinSet<()>,
}

impl Running {
    /// Forgets the tasks that ended (their cleaning was answered, or will be run again
    /// when the server hands it back); a task that panicked is logged.
    pub fn reap(&mut self) {
        while let Some(r) = self.tasks.try_join_next_with_id() {
            let id = match r {
                Ok((id, ())) => id,
                Err(e) => {
                    tracing::error!("a cleaning task failed: {e}");
                    e.id()
                }
            };
            self.keys.remove(&id);
        }
    }

    pub fn contains(&self, rp_uuid: &str, attempt: i64) -> bool {
        self.keys
            .values()
            .any(|(u, a)| u == rp_uuid && *a == attempt)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn spawn(
        &mut self,
        rp_uuid: String,
        attempt: i64,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let h = self.tasks.spawn(task);
        self.keys.insert(h.id(), (rp_uuid, attempt));
    }

    /// Waits until every running cleaning has ended (tests, and a clean stop).
    pub async fn drain(&mut self) {
        while self.tasks.join_next().await.is_some() {}
        self.keys.clear();
    }
}
