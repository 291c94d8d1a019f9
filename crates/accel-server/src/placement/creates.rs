//! Concurrent creates of root providers, combined into one transaction.
//!
//! Creating a root provider is a few small statements (the insert, the root's
//! reference to its own id, the change-log entry, `BEGIN` and `COMMIT`), each a round
//! trip; when many arrive at once (a fleet of compute nodes registering) the database
//! spends its time on round trips rather than rows. So at most [`SLOTS`] create
//! transactions run at once; a request that finds them all busy waits in a queue, and
//! the next request to get a slot takes the whole queue and creates every provider in
//! it in one transaction (`providers::create_roots`: one insert, one update, one
//! change-log entry). A request that finds a slot free runs alone, exactly as before.
//!
//! A combined transaction that fails (a uuid or name taken, also within the batch) is
//! rolled back and its requests are run one by one, so each gets the answer it would
//! have had alone. On MariaDB/MySQL the batch is one round trip (a stored procedure
//! called inside its own transaction: `Store::providers().create_roots`), so a lone
//! create goes that way too. Each transaction runs in a task of its own: a client that goes away
//! cancels nothing of the others'. Children (a parent given) are never combined.

use super::AppState;
use accel_store::placement::providers::Provider;
use accel_store::StoreError;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, Semaphore};

/// Create transactions running at once.
pub const SLOTS: usize = 2;

/// Providers one combined transaction creates at most.
const MAX_BATCH: usize = 256;

struct Job {
    uuid: String,
    name: String,
    reply: oneshot::Sender<Result<Provider, StoreError>>,
}

pub struct Creates {
    queue: Mutex<Vec<Job>>,
    slots: Arc<Semaphore>,
}

impl Default for Creates {
    fn default() -> Self {
        Creates {
            queue: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(SLOTS)),
        }
    }
}

impl Creates {
    fn queue(&self) -> std::sync::MutexGuard<'_, Vec<Job>> {
        // Only pushes and drains happen under the lock: a panic cannot leave it torn.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Creates the root provider `uuid` named `name`, alone or with others that are
/// waiting (see the module docs).
pub async fn create_root(
    app: &Arc<AppState>,
    uuid: String,
    name: String,
) -> Result<Provider, StoreError> {
    let creates = &app.creates;
    let (reply, mut answer) = oneshot::channel();
    creates.queue().push(Job { uuid, name, reply });
    let permit = tokio::select! {
        // Another request's transaction took this one along.
        done = &mut answer => return finished(done),
        permit = creates.slots.clone().acquire_owned() => permit,
    };
    let permit = permit.map_err(|_| StoreError::Config("the create slots closed".into()))?;
    let batch: Vec<Job> = {
        let mut q = creates.queue();
        let n = q.len().min(MAX_BATCH);
        q.drain(..n).collect()
    };
    if batch.is_empty() {
        // Ours went with a transaction that took the queue between our push and this
        // permit: the slot is not needed while we wait for its answer.
        drop(permit);
    } else {
        let app = app.clone();
        tokio::spawn(async move {
            run(&app, batch).await;
            drop(permit);
        });
    }
    finished(answer.await)
}

fn finished(
    done: Result<Result<Provider, StoreError>, oneshot::error::RecvError>,
) -> Result<Provider, StoreError> {
    done.unwrap_or_else(|_| Err(StoreError::Config("the create transaction stopped".into())))
}

async fn run(app: &AppState, batch: Vec<Job>) {
    let new: Vec<(String, String)> = batch
        .iter()
        .map(|j| (j.uuid.clone(), j.name.clone()))
        .collect();
    for (job, answer) in batch.into_iter().zip(create_together(app, new).await) {
        let _ = job.reply.send(answer);
    }
}

/// Creates the root providers `new` (uuid, name) in one transaction when there are
/// several, else (or when that is refused) one by one; each one's answer, in order.
pub async fn create_together(
    app: &AppState,
    new: Vec<(String, String)>,
) -> Vec<Result<Provider, StoreError>> {
    let n = new.len();
    // On MariaDB/MySQL even one create goes this way: it is one procedure call there.
    let mysql = app.store.backend() == accel_store::Backend::MySql;
    if n > 1 || (mysql && n == 1) {
        let combined = app.store.providers().create_roots(&new).await;
        match combined {
            Ok(created) => {
                if n > 1 {
                    app.metrics.combined_create("committed", n);
                }
                return created.into_iter().map(Ok).collect();
            }
            Err(e) => {
                if n > 1 {
                    app.metrics.combined_create("retried_alone", n);
                }
                tracing::info!(
                    target: "accel::placement",
                    providers = n,
                    cause = %e,
                    "a combined provider create was refused; creating them one by one"
                );
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    for (u, name) in new {
        out.push(app.store.providers().create(&u, &name, None).await);
    }
    out
}
