//! ARQ operations on the store (`store.arqs()`): the transactions the accelerator API
//! runs, each rerun after a deadlock as upstream's `wrap_db_retry` reruns Cyborg's, over the
//! queries of the parent module; and the bind `PATCH`'s one transaction, with the
//! record it leaves of a bind it refuses.

use super::*;

/// One ARQ's part of a `PATCH /accelerator_requests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patch {
    Bind(Binding),
    Unbind,
}

/// ARQ operations ([`Store::arqs`]). Every write is rerun after a deadlock
/// ([`Store::write_rerunning`]), as upstream's `wrap_db_retry` reruns Cyborg's.
pub struct Arqs<'s>(&'s Store);

impl Store {
    /// Operations on accelerator requests.
    pub fn arqs(&self) -> Arqs<'_> {
        Arqs(self)
    }
}

impl Arqs<'_> {
    /// `POST /accelerator_requests`: the ARQs of profile `name` (only group
    /// `only_group` when given), for `project_id`, in creation order. An unknown
    /// profile is [`Refused::NotFound`], a group the profile lacks
    /// [`Refused::NoSuchGroup`].
    pub async fn create_from_profile(
        &self,
        name: &str,
        only_group: Option<usize>,
        project_id: Option<&str>,
    ) -> Result<Vec<Arq>, StoreError> {
        let (name, project_id) = (name.to_owned(), project_id.map(str::to_owned));
        self.0
            .write_rerunning(|| {
                let (name, project_id) = (name.clone(), project_id.clone());
                move |tx| {
                    Box::pin(async move {
                        let profile = crate::accelerator::profiles::by_name(tx, &name)
                            .await?
                            .ok_or_else(|| {
                                Refused::NotFound(Kind::DeviceProfile, Key::Name(name.clone()))
                            })?;
                        if let Some(g) = only_group {
                            if g >= profile.groups.len() {
                                return Err(Refused::NoSuchGroup {
                                    profile: name,
                                    group: g,
                                }
                                .into());
                            }
                        }
                        create_for_profile(tx, &profile, only_group, project_id.as_deref()).await
                    })
                }
            })
            .await
    }

    /// The ARQs `scope` may see that match `f`, in creation order: one statement, so
    /// one snapshot without a transaction.
    pub async fn list(&self, scope: &Scope, f: &Filter) -> Result<Vec<Arq>, StoreError> {
        let (scope, f) = (scope.clone(), f.clone());
        self.0
            .read_one(move |tx| Box::pin(async move { list(tx, &scope, &f).await }))
            .await
    }

    /// One ARQ `scope` may see ([`Refused::NotFound`] otherwise).
    pub async fn show(&self, scope: &Scope, uuid: &str) -> Result<Arq, StoreError> {
        let (scope, uuid) = (scope.clone(), uuid.to_owned());
        self.0
            .read(move |tx| Box::pin(async move { require(tx, &scope, &uuid).await }))
            .await
    }

    /// `DELETE /accelerator_requests?arqs=..`: all of `uuids` go, unbound first, or
    /// none: the first that `scope` cannot see is [`Refused::NotFound`], and a bound
    /// one is [`Refused::ArqBound`] unless `bound_too` (the caller is Nova).
    pub async fn delete_listed(
        &self,
        scope: &Scope,
        uuids: &[String],
        bound_too: bool,
    ) -> Result<(), StoreError> {
        self.0
            .write_rerunning(|| {
                let (scope, uuids) = (scope.clone(), uuids.to_vec());
                move |tx| {
                    Box::pin(async move { delete_by_uuids(tx, &scope, &uuids, bound_too).await })
                }
            })
            .await
    }

    /// `DELETE /accelerator_requests?instance=..`: every ARQ of `instance` that `scope`
    /// sees, unbound first; idempotent. Returns how many.
    pub async fn delete_of_instance(
        &self,
        scope: &Scope,
        instance: &str,
    ) -> Result<usize, StoreError> {
        self.0
            .write_rerunning(|| {
                let (scope, instance) = (scope.clone(), instance.to_owned());
                move |tx| Box::pin(async move { delete_by_instance(tx, &scope, &instance).await })
            })
            .await
    }

    /// A `PATCH /accelerator_requests` as one transaction: every ARQ's bind (with its
    /// job, due by `deadline`) or unbind, or none of them. As upstream, there is no
    /// hot-add: a patch whose first operation binds to an instance that already has
    /// ARQs is [`Refused::InstanceHasArqs`], and a bind to a provider with no
    /// deployable is [`Refused::NotFound`]. A bind that cannot succeed ([`refusals`])
    /// answers `Ok(Some(refused))`: nothing of the patch is applied but the refused
    /// ARQ's `BindFailed`, whose failed job (and the device's history) keeps the
    /// refusal in the words `words` gives it (the API's).
    pub async fn patch(
        &self,
        scope: &Scope,
        plan: Vec<(String, Patch)>,
        deadline: i64,
        words: fn(&BindRefused) -> String,
    ) -> Result<Option<BindRefused>, StoreError> {
        self.0
            .write_rerunning(|| {
                let (scope, plan) = (scope.clone(), plan.clone());
                move |tx| Box::pin(async move { patch(tx, &scope, &plan, deadline, words).await })
            })
            .await
    }
}

/// The transaction of [`Arqs::patch`].
async fn patch(
    tx: &mut Tx,
    scope: &Scope,
    plan: &[(String, Patch)],
    deadline: i64,
    words: fn(&BindRefused) -> String,
) -> Result<Option<BindRefused>, StoreError> {
    if let Some((_, Patch::Bind(b))) = plan.first() {
        if instance_has_arqs(tx, scope, &b.instance_uuid).await? {
            return Err(Refused::InstanceHasArqs {
                instance: b.instance_uuid.clone(),
            }
            .into());
        }
    }
    // A bind that cannot succeed is refused before any is started; the refused ARQ is
    // recorded `BindFailed` and the refusal committed.
    let bind_ops: Vec<(&str, &Binding)> = plan
        .iter()
        .filter_map(|(u, op)| match op {
            Patch::Bind(b) => Some((u.as_str(), b)),
            Patch::Unbind => None,
        })
        .collect();
    let judged: Vec<refusals::Bind> = bind_ops
        .iter()
        .map(|(arq, b)| refusals::Bind {
            arq,
            hostname: &b.hostname,
            device_rp_uuid: &b.device_rp_uuid,
            instance_uuid: &b.instance_uuid,
        })
        .collect();
    if let Some(refused) = refusals::check(tx, &judged).await? {
        // Upstream's conductor takes the ARQs in the body's order, each looked up before
        // its bind is tried: an unknown ARQ before the refused one is what it names.
        let before = bind_ops.iter().take_while(|(u, _)| *u != refused.arq_uuid);
        for (u, _) in before {
            require(tx, scope, u).await?;
        }
        let arq = require(tx, scope, &refused.arq_uuid).await?;
        if let Some((_, b)) = bind_ops.iter().find(|(u, _)| *u == arq.uuid) {
            record_refusal(tx, &arq, b, &words(&refused), &refused.device_rp_uuid).await?;
        }
        return Ok(Some(refused));
    }
    // The ARQs to bind, read at once when each appears once in the plan (otherwise an
    // earlier operation could change what was read).
    let binds: Vec<String> = plan
        .iter()
        .filter(|(_, op)| matches!(op, Patch::Bind(_)))
        .map(|(u, _)| u.clone())
        .collect();
    let once = plan
        .iter()
        .enumerate()
        .all(|(i, (u, _))| plan.iter().skip(i + 1).all(|(v, _)| v != u));
    let mut read = Vec::new();
    if once && !binds.is_empty() {
        let mut w = Where::new(scope);
        w.any_of("a.uuid", &binds);
        read = w.fetch(tx, SELECT, "").await?;
    }
    // Providers already found to carry a deployable in this patch.
    let mut with_deployable: Vec<&str> = Vec::new();
    let mut jobs = Vec::new();
    for (uuid, op) in plan {
        match op {
            Patch::Bind(b) => {
                // The ARQ first, then its device: an unknown ARQ is named before an
                // unknown provider, as upstream's conductor looks them up.
                let arq = match read.iter().find(|a| &a.uuid == uuid) {
                    Some(a) => a.clone(),
                    None if once => return Err(not_found(uuid)),
                    None => require(tx, scope, uuid).await?,
                };
                if !with_deployable.contains(&b.device_rp_uuid.as_str()) {
                    let deps = crate::accelerator::hardware::list_deployables(
                        tx,
                        &[(
                            crate::accelerator::hardware::DeployableColumn::RpUuid,
                            b.device_rp_uuid.clone(),
                        )],
                    )
                    .await?;
                    if deps.is_empty() {
                        return Err(Refused::NotFound(
                            Kind::Deployable,
                            Key::ProviderUuid(b.device_rp_uuid.clone()),
                        )
                        .into());
                    }
                    with_deployable.push(&b.device_rp_uuid);
                }
                begin_bind(tx, &arq, b, &mut jobs).await?;
                if !once {
                    // A later operation may unbind this ARQ again.
                    insert_jobs(tx, &jobs, deadline).await?;
                    jobs.clear();
                }
            }
            Patch::Unbind => {
                unbind(tx, scope, uuid).await?;
            }
        }
    }
    insert_jobs(tx, &jobs, deadline).await?;
    Ok(None)
}

/// Leaves `arq` as upstream leaves a bind whose handle it could not take: started
/// (host, device, instance recorded), then `BindFailed`, with a failed job carrying
/// the refusal for the console.
async fn record_refusal(
    tx: &mut Tx,
    arq: &Arq,
    b: &Binding,
    why: &str,
    device_rp_uuid: &str,
) -> Result<(), StoreError> {
    let mut started = Vec::new();
    begin_bind(tx, arq, b, &mut started).await?;
    let now = crate::now();
    sqlx::query(
        "UPDATE extended_accelerator_requests SET state = $1, updated_at = $2 WHERE id = $3",
    )
    .bind(ArqState::BindFailed.as_str())
    .bind(now)
    .bind(arq.id)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO bind_jobs (arq_uuid, state, deadline, attempts, created_at, updated_at, error) \
         VALUES ($1, 'failed', $2, 0, $2, $2, $3)",
    )
    .bind(&arq.uuid)
    .bind(now)
    .bind(why)
    .execute(&mut *tx)
    .await?;
    // A refusal for another host's device is that device's history too.
    crate::accelerator::history::record_provider(
        tx,
        device_rp_uuid,
        crate::accelerator::history::Kind::BindFailed,
        &format!("bind refused: {why}"),
    )
    .await
}
