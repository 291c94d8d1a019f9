//! `/resource_providers` and `/resource_providers/{uuid}`.

use super::error::{ApiError, ApiResult};
use super::AppState;
use super::{authorize, qs, Reply, Req};
use accel_api::placement::{mv, ProviderCreate, ProviderUpdate};
use accel_core::policy::placement as rules;
use accel_store::keyed;
use accel_store::placement::lookup;
use accel_store::placement::providers::{self, ParentChange, Provider};
use accel_store::{BoxFut, Conflict, StoreError, Tx};
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

pub(crate) fn provider_url(uuid: &str) -> String {
    format!("/resource_providers/{uuid}")
}

/// A provider as upstream serialises it at a microversion: a typed view, serialised
/// straight to bytes for listings (no intermediate `Value` per provider). It borrows
/// the fields, so a listing answered from the candidate index needs no `Provider`s.
pub(crate) struct ProviderView<'a> {
    uuid: &'a str,
    name: &'a str,
    generation: i64,
    parent_uuid: Option<&'a str>,
    root_uuid: &'a str,
    shape: Shape,
}

/// What a microversion shows of every provider.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    /// Link relations after `self`.
    rels: &'static [&'static str],
    nested: bool,
}

/// A provider's link relations after `self`, in upstream's order; each microversion
/// shows a prefix of them.
const RELS: [&str; 5] = [
    "inventories",
    "usages",
    "aggregates",
    "traits",
    "allocations",
];

impl Shape {
    pub(crate) fn at(req: &Req) -> Self {
        let n = if req.mv(mv::PROVIDER_ALLOCATIONS_LINK) {
            5
        } else if req.mv(mv::TRAITS) {
            4
        } else if req.mv(mv::PROVIDER_AGGREGATES) {
            3
        } else {
            2
        };
        Shape {
            rels: &RELS[..n],
            nested: req.mv(mv::NESTED_PROVIDERS),
        }
    }
}

impl<'a> ProviderView<'a> {
    pub(crate) fn new(req: &Req, rp: &'a Provider) -> Self {
        Self::of(Shape::at(req), rp)
    }

    fn of(shape: Shape, rp: &'a Provider) -> Self {
        ProviderView {
            uuid: &rp.uuid,
            name: &rp.name,
            generation: rp.generation,
            parent_uuid: rp.parent_uuid.as_deref(),
            root_uuid: &rp.root_uuid,
            shape,
        }
    }
}

struct Links<'a>(&'a str, &'static [&'static str]);

impl serde::Serialize for Links<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Link<'a>(&'a str, Option<&'a str>);
        impl serde::Serialize for Link<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("rel", self.1.unwrap_or("self"))?;
                match self.1 {
                    None => {
                        m.serialize_entry("href", &format_args!("/resource_providers/{}", self.0))?
                    }
                    Some(rel) => m.serialize_entry(
                        "href",
                        &format_args!("/resource_providers/{}/{rel}", self.0),
                    )?,
                }
                m.end()
            }
        }
        let mut seq = s.serialize_seq(Some(1 + self.1.len()))?;
        seq.serialize_element(&Link(self.0, None))?;
        for rel in self.1 {
            seq.serialize_element(&Link(self.0, Some(rel)))?;
        }
        seq.end()
    }
}

impl serde::Serialize for ProviderView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let nested = self.shape.nested;
        let mut m = s.serialize_map(Some(if nested { 6 } else { 4 }))?;
        m.serialize_entry("uuid", self.uuid)?;
        m.serialize_entry("name", self.name)?;
        m.serialize_entry("generation", &self.generation)?;
        m.serialize_entry("links", &Links(self.uuid, self.shape.rels))?;
        if nested {
            m.serialize_entry("parent_provider_uuid", &self.parent_uuid)?;
            m.serialize_entry("root_provider_uuid", self.root_uuid)?;
        }
        m.end()
    }
}

fn post_schema(req: &Req, with_uuid: bool) -> Value {
    let mut props = json!({"name": {"type": "string", "maxLength": 200}});
    if with_uuid {
        props["uuid"] = json!({"type": "string", "format": "uuid"});
    }
    if req.mv(mv::NESTED_PROVIDERS) {
        props["parent_provider_uuid"] =
            json!({"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]});
    }
    json!({"type": "object", "properties": props, "required": ["name"], "additionalProperties": false})
}

/// The wording of upstream's `ObjectActionError`, which every refused provider create or
/// update carries inside its 400 detail.
fn object_action(action: &str, reason: &str) -> String {
    format!("Object action {action} failed because: {reason}")
}

/// Looks a provider up inside a transaction, with upstream's 404 wording.
pub(crate) async fn require(tx: &mut Tx, uuid: &str) -> Result<Provider, StoreError> {
    providers::get(tx, uuid)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("No resource provider with uuid {uuid} found")))
}

/// A store error from a lookup upstream does not catch in its handler: its `NotFound`
/// reaches upstream's dispatcher, which answers 404 without `Vary`.
pub(crate) fn uncaught(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound(m) => ApiError::not_found(m).without_vary(),
        e => e.into(),
    }
}

/// A store error whose `NotFound` a handler words itself (`word` gets the store's
/// message); every other error maps as usual.
pub(crate) fn not_found_as(e: StoreError, word: impl FnOnce(String) -> ApiError) -> ApiError {
    match e {
        StoreError::NotFound(m) => word(m),
        e => e.into(),
    }
}

/// Upstream's 404 for the provider of a sub-resource read (usages, traits): its words,
/// then the lookup's.
pub(crate) fn missing_provider(uuid: &str) -> impl FnOnce(StoreError) -> ApiError + '_ {
    move |e| {
        not_found_as(e, |m| {
            ApiError::not_found(format!("No resource provider with uuid {uuid} found: {m}"))
        })
    }
}

/// A provider and what `then` reads of it (given the provider's id), in one read
/// snapshot: the shape of every `/resource_providers/{uuid}/...` GET. A missing
/// provider is [`require`]'s `NotFound`, which each handler words as upstream's does.
pub(crate) async fn read_with<T, F>(
    app: &AppState,
    uuid: &str,
    then: F,
) -> Result<(Provider, T), StoreError>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut Tx, i64) -> BoxFut<'c, T> + Send + 'static,
{
    let u = uuid.to_owned();
    app.store
        .read(move |tx| {
            Box::pin(async move {
                let rp = require(tx, &u).await?;
                let v = then(tx, rp.id).await?;
                Ok((rp, v))
            })
        })
        .await
}

/// Upstream loads the provider (404) before it reads a body, outside any `try`: its
/// `NotFound` reaches the dispatcher, which answers without `Vary`.
/// A sub-resource write's body, read as upstream reads it after loading the provider
/// (a missing provider's 404 outranks a bad body's 400), but with the provider looked
/// up only when the body is refused: an accepted body goes to the write, whose
/// transaction finds a missing provider as well, and that answers it with
/// [`missing`]. One statement less on every accepted write.
pub(crate) async fn body_of_provider<T: serde::de::DeserializeOwned>(
    app: &AppState,
    req: &Req,
    uuid: &str,
    schema: &Value,
) -> ApiResult<T> {
    match req.body(schema) {
        Ok(body) => Ok(body),
        Err(refused) => {
            exists(app, uuid).await?;
            Err(refused)
        }
    }
}

/// The 404 [`exists`] answers for a missing provider.
pub(crate) fn missing(uuid: &str) -> ApiError {
    uncaught(StoreError::NotFound(format!(
        "No resource provider with uuid {uuid} found"
    )))
}

/// One statement, outside any transaction.
pub(crate) async fn exists(app: &AppState, uuid: &str) -> ApiResult<()> {
    let u = uuid.to_owned();
    app.store
        .read_one(move |tx| Box::pin(async move { require(tx, &u).await }))
        .await
        .map(drop)
        .map_err(uncaught)
}

pub async fn create(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_CREATE)?;
    let data: ProviderCreate = req.body(&post_schema(&req, true))?;
    let name = data.name;
    let uuid = match data.uuid.as_deref() {
        Some(u) if !u.is_empty() => qs::normalize_uuid(u),
        _ => uuid::Uuid::new_v4().to_string(),
    };
    let parent = data.parent_provider_uuid.as_deref().map(qs::normalize_uuid);
    // Upstream's provider object refuses an empty name before it reaches the database.
    if name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Unable to create resource provider \"\", {uuid}: {}",
            object_action("create", "name is required")
        )));
    }
    let (n, u, p) = (name.clone(), uuid.clone(), parent.clone());
    let created = match p {
        None => super::creates::create_root(&app, u, n).await,
        Some(p) => {
            app.store
                .write(move |tx| {
                    Box::pin(async move { providers::create(tx, &u, &n, Some(&p)).await })
                })
                .await
        }
    };
    let rp = created.map_err(|e| match e {
        StoreError::Conflict(Conflict::Duplicate, what) => ApiError::from(StoreError::Conflict(
            Conflict::Duplicate,
            format!("Conflicting resource provider {what} already exists."),
        )),
        StoreError::Invalid(m) => ApiError::bad_request(format!(
            "Unable to create resource provider \"{name}\", {uuid}: {}",
            object_action("create", &m)
        )),
        e => e.into(),
    })?;
    let location = provider_url(&rp.uuid);
    if req.mv(mv::PROVIDER_CREATE_BODY) {
        Ok(Reply::typed(&ProviderView::new(&req, &rp))?
            .header("location", location)
            .modified(rp.modified))
    } else {
        Ok(Reply::status(StatusCode::CREATED).header("location", location))
    }
}

pub async fn show(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_SHOW)?;
    let rp = app
        .store
        .read(keyed(req.param(0), |tx, k| Box::pin(require(tx, k))))
        .await
        .map_err(uncaught)?;
    Ok(Reply::typed(&ProviderView::new(&req, &rp))?.modified(rp.modified))
}

pub async fn delete(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_DELETE)?;
    let uuid = req.param(0).to_owned();
    let u = uuid.clone();
    app.store
        .write(move |tx| {
            Box::pin(async move {
                let rp = providers::get(tx, &u).await?.ok_or_else(|| {
                    StoreError::NotFound(format!("No resource provider with uuid {u} found for delete"))
                })?;
                providers::delete(tx, &rp).await
            })
        })
        .await
        .map_err(|e| match e {
            StoreError::Conflict(Conflict::CannotDeleteParent, _) => ApiError::from(StoreError::Conflict(
                Conflict::CannotDeleteParent,
                format!("Unable to delete parent resource provider {uuid}: It has child resource providers."),
            )),
            StoreError::Conflict(Conflict::ProviderInUse, m) => ApiError::from(StoreError::Conflict(
                Conflict::ProviderInUse,
                format!("Unable to delete resource provider {uuid}: {m}"),
            )),
            e => e.into(),
        })?;
    Ok(Reply::no_content())
}

pub async fn update(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_UPDATE)?;
    let uuid = req.param(0).to_owned();
    exists(&app, &uuid).await?;
    let data: ProviderUpdate = req.body(&post_schema(&req, false))?;
    let name = data.name;
    let parent = match data.parent_provider_uuid {
        None => ParentChange::Keep,
        Some(None) => ParentChange::Clear,
        Some(Some(p)) => ParentChange::Set(qs::normalize_uuid(&p)),
    };
    let allow_reparent = req.mv(mv::REPARENT);
    let (u, n) = (uuid.clone(), name.clone());
    let rp = app
        .store
        .write(move |tx| {
            Box::pin(async move {
                let rp = require(tx, &u).await?;
                if !allow_reparent {
                    match &parent {
                        ParentChange::Set(p)
                            if rp.parent_uuid.is_some()
                                && rp.parent_uuid.as_deref() != Some(p.as_str()) =>
                        {
                            return Err(StoreError::Invalid(
                                "re-parenting a provider is not currently allowed.".into(),
                            ));
                        }
                        ParentChange::Clear if rp.parent_uuid.is_some() => {
                            return Err(StoreError::Invalid(
                                "un-parenting a provider is not currently allowed.".into(),
                            ));
                        }
                        _ => {}
                    }
                }
                let before = providers::updated_at(tx, rp.id).await?;
                Ok((providers::update(tx, &rp, &n, parent).await?, before))
            })
        })
        .await
        .map_err(|e| match e {
            StoreError::Conflict(Conflict::Duplicate, _) => ApiError::from(StoreError::Conflict(
                Conflict::Duplicate,
                format!("Conflicting resource provider {name} already exists."),
            )),
            StoreError::Invalid(m) => {
                // upstream names a missing new parent a failed "create" even here
                let action = if m.starts_with("parent provider UUID does not exist") {
                    "create"
                } else {
                    "update"
                };
                ApiError::bad_request(format!(
                    "Unable to save resource provider {uuid}: {}",
                    object_action(action, &m)
                ))
            }
            e => e.into(),
        })?;
    let (rp, before) = rp;
    let reply = Reply::typed(&ProviderView::new(&req, &rp))?;
    // upstream reports the update time loaded before this update (none for a child
    // never written since its creation), and says no-cache either way
    Ok(match before {
        Some(at) => reply.modified(at),
        None if req.mv(mv::LAST_MODIFIED) => reply.header("cache-control", "no-cache"),
        None => reply,
    })
}

fn list_schema(req: &Req) -> Value {
    let mut props = json!({
        "name": {"type": "string"},
        "uuid": {"type": "string", "format": "uuid"},
    });
    if req.mv(mv::PROVIDERS_MEMBER_OF) {
        props["member_of"] = json!({"type": "string"});
    }
    if req.mv(mv::PROVIDERS_RESOURCES) {
        props["resources"] = json!({"type": "string"});
    }
    if req.mv(mv::NESTED_PROVIDERS) {
        props["in_tree"] = json!({"type": "string", "format": "uuid"});
    }
    if req.mv(mv::PROVIDERS_REQUIRED) {
        props["required"] = json!({"type": "string"});
    }
    json!({"type": "object", "properties": props, "additionalProperties": false})
}

pub async fn list(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_LIST)?;
    req.validate_query(&list_schema(&req))?;
    if LIST_FILTERS.iter().all(|k| req.query_last(k).is_none()) {
        return list_all(&app, &req).await;
    }
    let mut filter = providers::Filter::default();
    let aggs = if req.query_last("member_of").is_some() {
        qs::member_of(&req, "member_of", "")?
    } else {
        qs::AggQuery::default()
    };
    filter.member_of = aggs.required;
    filter.forbidden_aggregates = aggs.forbidden;
    let traits = if req.query_last("required").is_some() {
        qs::traits(&req, "required")?
    } else {
        qs::TraitQuery::default()
    };
    filter.name = req.query_last("name").map(str::to_owned);
    filter.uuid = req.query_last("uuid").map(qs::normalize_uuid);
    let in_tree = req.query_last("in_tree").map(qs::normalize_uuid);
    let resources = match req.query_last("resources") {
        Some(r) => qs::resources(r)?,
        None => Vec::new(),
    };
    let modified_now = accel_store::now();
    let rps = app
        .store
        .read(move |tx| {
            Box::pin(async move {
                if let Some(t) = in_tree {
                    match providers::get(tx, &t).await? {
                        Some(rp) => filter.in_tree = Some(rp.root_id),
                        None => return Ok(Vec::new()),
                    }
                }
                let names: Vec<String> = resources.iter().map(|(n, _)| n.clone()).collect();
                let rc_ids = lookup::resource_class_ids(tx, &names).await?;
                for (name, amount) in &resources {
                    let id = rc_ids.get(name).ok_or_else(|| {
                        StoreError::Invalid(format!(
                            "Invalid resource class in resources parameter: No such resource class {name}."
                        ))
                    })?;
                    filter.resources.push((*id, *amount));
                }
                let tnames: Vec<String> = traits.names().cloned().collect();
                let t_ids = lookup::trait_ids(tx, &tnames).await?;
                let mut missing: Vec<&String> = tnames.iter().filter(|n| !t_ids.contains_key(*n)).collect();
                missing.sort();
                missing.dedup();
                if !missing.is_empty() {
                    let list = missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
                    return Err(StoreError::Invalid(format!(
                        "Invalid trait(s) in \"required\" parameter: No such trait(s): {list}."
                    )));
                }
                filter.required = traits
                    .required
                    .iter()
                    .map(|any| any.iter().map(|t| t_ids[t]).collect())
                    .collect();
                filter.forbidden = traits.forbidden.iter().map(|t| t_ids[t]).collect();
                providers::list(tx, &filter).await
            })
        })
        .await?;
    let modified = rps.iter().map(|r| r.modified).max().unwrap_or(modified_now);
    let shape = Shape::at(&req);
    listing(
        rps.iter().map(|rp| ProviderView::of(shape, rp)).collect(),
        modified,
    )
}

/// The query parameters that filter a listing.
const LIST_FILTERS: [&str; 6] = [
    "name",
    "uuid",
    "in_tree",
    "member_of",
    "required",
    "resources",
];

/// Every provider, from the candidate index: one version check instead of reading
/// every provider row (the index is the database as of that check; see `index`).
/// Filtered listings are answered by SQL.
async fn list_all(app: &AppState, req: &Req) -> ApiResult<Reply> {
    let modified_now = accel_store::now();
    let index = app.placement_index.current(&app.store).await?;
    let all = &index.world.providers;
    let uuid_of = |id: i64| {
        all.binary_search_by_key(&id, |p| p.id)
            .ok()
            .map(|i| all[i].uuid.as_str())
    };
    let shape = Shape::at(req);
    let views = all
        .iter()
        .map(|p| ProviderView {
            uuid: &p.uuid,
            name: &p.name,
            generation: p.generation,
            parent_uuid: p.parent_id.and_then(uuid_of),
            root_uuid: uuid_of(p.root_id).unwrap_or(&p.uuid),
            shape,
        })
        .collect();
    let modified = all.iter().map(|p| p.modified).max().unwrap_or(modified_now);
    listing(views, modified)
}

/// `{"resource_providers": [...]}`, written by hand: the listing is the largest answer
/// after candidates (about 740 bytes a provider), and serde spent most of its time
/// escaping the seven uuids of each provider and formatting its link hrefs
/// (docs/benchmarks.md). The bytes are those `ProviderView`'s `Serialize` writes.
fn listing(views: Vec<ProviderView<'_>>, modified: i64) -> ApiResult<Reply> {
    let mut out = Vec::with_capacity(32 + views.len() * 760);
    out.extend_from_slice(b"{\"resource_providers\":[");
    for (i, v) in views.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        v.write(&mut out)?;
    }
    out.extend_from_slice(b"]}");
    let mut reply = Reply::status(StatusCode::OK);
    reply.raw = Some(out);
    Ok(reply.modified(modified))
}

impl ProviderView<'_> {
    /// Appends this provider's JSON, as its `Serialize` impl would write it.
    fn write(&self, out: &mut Vec<u8>) -> ApiResult<()> {
        out.extend_from_slice(b"{\"uuid\":");
        string(out, self.uuid)?;
        out.extend_from_slice(b",\"name\":");
        string(out, self.name)?;
        out.extend_from_slice(b",\"generation\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.generation).as_bytes());
        out.extend_from_slice(b",\"links\":[");
        for rel in std::iter::once(None).chain(self.shape.rels.iter().map(Some)) {
            if rel.is_some() {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"rel\":\"");
            out.extend_from_slice(rel.copied().unwrap_or("self").as_bytes());
            out.extend_from_slice(b"\",\"href\":");
            if plain(self.uuid) {
                out.extend_from_slice(b"\"/resource_providers/");
                out.extend_from_slice(self.uuid.as_bytes());
                if let Some(rel) = rel {
                    out.push(b'/');
                    out.extend_from_slice(rel.as_bytes());
                }
                out.push(b'"');
            } else {
                let href = match rel {
                    None => format!("/resource_providers/{}", self.uuid),
                    Some(rel) => format!("/resource_providers/{}/{rel}", self.uuid),
                };
                string(out, &href)?;
            }
            out.push(b'}');
        }
        out.push(b']');
        if self.shape.nested {
            out.extend_from_slice(b",\"parent_provider_uuid\":");
            match self.parent_uuid {
                Some(p) => string(out, p)?,
                None => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(b",\"root_provider_uuid\":");
            string(out, self.root_uuid)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// Whether `s` needs no JSON escaping and no check for it: a uuid's characters.
fn plain(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// `s` as a JSON string; uuids are copied as they are.
fn string(out: &mut Vec<u8>, s: &str) -> ApiResult<()> {
    if plain(s) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, s).map_err(|e| ApiError::internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written listing writes exactly what serde writes, for every shape and
    /// for names and uuids that need escaping.
    #[test]
    fn the_listing_writer_matches_serde() {
        let names = [
            "cn1",
            "with \"quotes\" and \\ slash",
            "tab\there",
            "ünïcödé ☃",
            "\u{1}",
        ];
        let uuids = ["5c3d1a2b-0e4f-4a5b-8c6d-7e8f9a0b1c2d", "not a \"uuid\""];
        for n in 2..=5 {
            for nested in [false, true] {
                let shape = Shape {
                    rels: &RELS[..n],
                    nested,
                };
                for name in names {
                    for uuid in uuids {
                        for parent in [None, Some(uuids[0]), Some(uuids[1])] {
                            let v = ProviderView {
                                uuid,
                                name,
                                generation: 42,
                                parent_uuid: parent,
                                root_uuid: uuid,
                                shape,
                            };
                            let mut mine = Vec::new();
                            v.write(&mut mine).unwrap();
                            let theirs = serde_json::to_vec(&v).unwrap();
                            assert_eq!(
                                String::from_utf8(mine).unwrap(),
                                String::from_utf8(theirs).unwrap()
                            );
                        }
                    }
                }
            }
        }
    }
}
