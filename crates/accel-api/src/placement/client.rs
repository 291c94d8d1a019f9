//! The typed Placement client: one method per call, each at the microversion the
//! caller names, answers decoded into [`super::types`]. Placement's own error
//! answers are [`Error::Status`], whose `code` is the Placement error code (1.23+).

use super::mv::Version;
use super::types::{
    Aggregates, AllocationCandidates, ConsumerAllocations, ConsumerAllocationsView, Inventories,
    InventoriesPut, Provider, ProviderAllocations, ProviderCreate, ProviderTraits, ProviderUpdate,
    ProviderUsages, Providers, Traits, Usages,
};
use crate::http::{Error, Http, Method, Reply, Request};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A Placement API client on the shared HTTP core.
#[derive(Debug, Clone)]
pub struct Client {
    http: Http,
}

/// Percent-encodes a path segment (uuids and class names never need it; names of
/// things a caller chose might).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Client {
    pub fn new(http: Http) -> Client {
        Client { http }
    }

    pub fn http(&self) -> &Http {
        &self.http
    }

    /// The base URL requests go to now.
    pub async fn base(&self) -> Result<String, Error> {
        self.http.base().await
    }

    /// A request at `version`, answered with any status.
    pub async fn send(
        &self,
        version: Version,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<Reply, Error> {
        let mut req = Request::new(method, path).microversion(version.header());
        if let Some(b) = body {
            req = req.json(&b);
        }
        self.http.send(&req).await
    }

    /// A request at `version` whose 2xx answer decodes as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        version: Version,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<T, Error> {
        self.send(version, method, path, body)
            .await?
            .success()?
            .json()
    }

    /// A request at `version` whose 2xx answer has no body worth reading.
    async fn call_empty(
        &self,
        version: Version,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<(), Error> {
        self.send(version, method, path, body).await?.success()?;
        Ok(())
    }

    /// `GET /resource_providers` with the given query parameters.
    pub async fn providers(
        &self,
        version: Version,
        query: &[(&str, &str)],
    ) -> Result<Vec<Provider>, Error> {
        let mut req = Request::get("/resource_providers").microversion(version.header());
        for (k, v) in query {
            req = req.query(k, *v);
        }
        let list: Providers = self.http.call(&req).await?;
        Ok(list.resource_providers)
    }

    /// `GET /resource_providers/{uuid}`; `None` when there is none (404).
    pub async fn provider(&self, version: Version, uuid: &str) -> Result<Option<Provider>, Error> {
        let path = format!("/resource_providers/{}", enc(uuid));
        let r = self.send(version, Method::GET, &path, None::<&()>).await?;
        if r.status == 404 {
            return Ok(None);
        }
        r.success()?.json().map(Some)
    }

    /// `POST /resource_providers`: the provider from 1.20, `None` before.
    pub async fn create_provider(
        &self,
        version: Version,
        body: &ProviderCreate,
    ) -> Result<Option<Provider>, Error> {
        let r = self
            .send(version, Method::POST, "/resource_providers", Some(body))
            .await?
            .success()?;
        if r.text.trim().is_empty() {
            return Ok(None);
        }
        r.json().map(Some)
    }

    /// `PUT /resource_providers/{uuid}`.
    pub async fn update_provider(
        &self,
        version: Version,
        uuid: &str,
        body: &ProviderUpdate,
    ) -> Result<Provider, Error> {
        let path = format!("/resource_providers/{}", enc(uuid));
        self.call(version, Method::PUT, &path, Some(body)).await
    }

    /// `DELETE /resource_providers/{uuid}`.
    pub async fn delete_provider(&self, version: Version, uuid: &str) -> Result<(), Error> {
        let path = format!("/resource_providers/{}", enc(uuid));
        self.call_empty(version, Method::DELETE, &path, None::<&()>)
            .await
    }

    /// `GET /resource_providers/{uuid}/inventories`.
    pub async fn inventories(&self, version: Version, uuid: &str) -> Result<Inventories, Error> {
        let path = format!("/resource_providers/{}/inventories", enc(uuid));
        self.call(version, Method::GET, &path, None::<&()>).await
    }

    /// `PUT /resource_providers/{uuid}/inventories`.
    pub async fn set_inventories(
        &self,
        version: Version,
        uuid: &str,
        body: &InventoriesPut,
    ) -> Result<Inventories, Error> {
        let path = format!("/resource_providers/{}/inventories", enc(uuid));
        self.call(version, Method::PUT, &path, Some(body)).await
    }

    /// `GET /resource_providers/{uuid}/traits`.
    pub async fn provider_traits(
        &self,
        version: Version,
        uuid: &str,
    ) -> Result<ProviderTraits, Error> {
        let path = format!("/resource_providers/{}/traits", enc(uuid));
        self.call(version, Method::GET, &path, None::<&()>).await
    }

    /// `PUT /resource_providers/{uuid}/traits`.
    pub async fn set_provider_traits(
        &self,
        version: Version,
        uuid: &str,
        body: &ProviderTraits,
    ) -> Result<ProviderTraits, Error> {
        let path = format!("/resource_providers/{}/traits", enc(uuid));
        self.call(version, Method::PUT, &path, Some(body)).await
    }

    /// `GET /resource_providers/{uuid}/aggregates` (1.1).
    pub async fn aggregates(&self, version: Version, uuid: &str) -> Result<Aggregates, Error> {
        let path = format!("/resource_providers/{}/aggregates", enc(uuid));
        self.call(version, Method::GET, &path, None::<&()>).await
    }

    /// `GET /resource_providers/{uuid}/usages`.
    pub async fn provider_usages(
        &self,
        version: Version,
        uuid: &str,
    ) -> Result<ProviderUsages, Error> {
        let path = format!("/resource_providers/{}/usages", enc(uuid));
        self.call(version, Method::GET, &path, None::<&()>).await
    }

    /// `GET /resource_providers/{uuid}/allocations`.
    pub async fn provider_allocations(
        &self,
        version: Version,
        uuid: &str,
    ) -> Result<ProviderAllocations, Error> {
        let path = format!("/resource_providers/{}/allocations", enc(uuid));
        self.call(version, Method::GET, &path, None::<&()>).await
    }

    /// `GET /traits`.
    pub async fn traits(&self, version: Version) -> Result<Vec<String>, Error> {
        let t: Traits = self
            .call(version, Method::GET, "/traits", None::<&()>)
            .await?;
        Ok(t.traits)
    }

    /// `PUT /traits/{name}`: creates a custom trait unless it exists.
    pub async fn ensure_trait(&self, version: Version, name: &str) -> Result<(), Error> {
        let path = format!("/traits/{}", enc(name));
        self.call_empty(version, Method::PUT, &path, None::<&()>)
            .await
    }

    /// `PUT /resource_classes/{name}` (1.7): creates a custom class unless it exists.
    pub async fn ensure_resource_class(&self, version: Version, name: &str) -> Result<(), Error> {
        let path = format!("/resource_classes/{}", enc(name));
        self.call_empty(version, Method::PUT, &path, None::<&()>)
            .await
    }

    /// `GET /allocation_candidates` (1.10; the dict form this decodes is 1.12's) with
    /// the given query parameters, in their order.
    pub async fn allocation_candidates(
        &self,
        version: Version,
        query: &[(&str, &str)],
    ) -> Result<AllocationCandidates, Error> {
        let mut req = Request::get("/allocation_candidates").microversion(version.header());
        for (k, v) in query {
            req = req.query(k, *v);
        }
        self.http.call(&req).await
    }

    /// `GET /allocations/{consumer}`.
    pub async fn allocations(
        &self,
        version: Version,
        consumer: &str,
    ) -> Result<ConsumerAllocationsView, Error> {
        let path = format!("/allocations/{}", enc(consumer));
        self.call(version, Method::GET, &path, None::<&()>).await
    }

    /// `PUT /allocations/{consumer}` in the dict form (1.12).
    pub async fn put_allocations(
        &self,
        version: Version,
        consumer: &str,
        body: &ConsumerAllocations,
    ) -> Result<(), Error> {
        let path = format!("/allocations/{}", enc(consumer));
        self.call_empty(version, Method::PUT, &path, Some(body))
            .await
    }

    /// `DELETE /allocations/{consumer}`.
    pub async fn delete_allocations(&self, version: Version, consumer: &str) -> Result<(), Error> {
        let path = format!("/allocations/{}", enc(consumer));
        self.call_empty(version, Method::DELETE, &path, None::<&()>)
            .await
    }

    /// `GET /usages?project_id=...` (1.9).
    pub async fn usages(&self, version: Version, project_id: &str) -> Result<Usages, Error> {
        let req = Request::get("/usages")
            .query("project_id", project_id)
            .microversion(version.header());
        self.http.call(&req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(enc("CUSTOM_A1"), "CUSTOM_A1");
        assert_eq!(enc("a b/c"), "a%20b%2Fc");
    }
}
