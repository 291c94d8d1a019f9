//! `/resource_providers` and `/resource_providers/{uuid}`.

use super::error::{no_provider, provider_create_refused, ApiError, ApiResult};
use super::AppState;
use super::{authorize, qs, Reply, Req};
use accel_api::placement::{mv, ProviderCreate, ProviderUpdate};
use accel_core::policy::placement as rules;
use accel_store::placement::providers::{ParentChange, Provider, Query};
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

/// Upstream loads the provider (404) before it reads a body, outside any `try`: its
/// `NotFound` reaches the dispatcher, which answers without `Vary`.
/// A sub-resource write's body, read as upstream reads it after loading the provider
/// (a missing provider's 404 outranks a bad body's 400), but with the provider looked
/// up only when the body is refused: an accepted body goes to the write, whose
/// transaction finds a missing provider as well (and refuses it the same way). One
/// statement less on every accepted write.
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

/// Upstream's 404 for a missing provider, before anything else is read. One
/// statement, outside any transaction.
pub(crate) async fn exists(app: &AppState, uuid: &str) -> ApiResult<()> {
    if app.store.providers().exists(uuid).await? {
        Ok(())
    } else {
        Err(no_provider(uuid))
    }
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
        return Err(provider_create_refused(&uuid, "", "name is required"));
    }
    let rp = match parent {
        None => super::creates::create_root(&app, uuid, name).await?,
        Some(p) => app.store.providers().create(&uuid, &name, Some(&p)).await?,
    };
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
    let uuid = req.param(0);
    let rp = app
        .store
        .providers()
        .get(uuid)
        .await?
        .ok_or_else(|| no_provider(uuid))?;
    Ok(Reply::typed(&ProviderView::new(&req, &rp))?.modified(rp.modified))
}

pub async fn delete(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_DELETE)?;
    let uuid = req.param(0);
    if !app.store.providers().delete(uuid).await? {
        return Err(ApiError::not_found(format!(
            "No resource provider with uuid {uuid} found for delete"
        )));
    }
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
    let (rp, before) = app
        .store
        .providers()
        .update(&uuid, &name, parent, req.mv(mv::REPARENT))
        .await?;
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
    let aggs = if req.query_last("member_of").is_some() {
        qs::member_of(&req, "member_of", "")?
    } else {
        qs::AggQuery::default()
    };
    let traits = if req.query_last("required").is_some() {
        qs::traits(&req, "required")?
    } else {
        qs::TraitQuery::default()
    };
    let resources = match req.query_last("resources") {
        Some(r) => qs::resources(r)?,
        None => Vec::new(),
    };
    let query = Query {
        name: req.query_last("name").map(str::to_owned),
        uuid: req.query_last("uuid").map(qs::normalize_uuid),
        in_tree: req.query_last("in_tree").map(qs::normalize_uuid),
        required: traits.required,
        forbidden: traits.forbidden,
        member_of: aggs.required,
        forbidden_aggregates: aggs.forbidden,
        resources,
    };
    let modified_now = accel_store::now();
    let rps = app.store.providers().list(query).await?;
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
