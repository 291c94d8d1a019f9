//! A typed client of the accelerator API: what python-cyborgclient and Nova's
//! `cyborg` module call, on the one HTTP core ([`crate::http::Http`]). The base URL is
//! the endpoint with or without `/accelerator`; paths go under its `/v2`.
//!
//! Nova's calls (bind, unbind, delete by instance) carry a service token: in Keystone
//! mode `X-Service-Token` is validated; noauth trusts `X-Service-Roles` as it trusts
//! `X-Roles` (docs/cyborg-compat.md), so both are sent.

use super::{
    Arq, ArqPatch, Arqs, Deployable, Deployables, Device, DeviceProfile, DeviceProfiles, Devices,
    NewArqs, NewDeviceProfile, Version,
};
use crate::http::{Error, Http, Method, Request};

/// The microversion a [`Client`] asks for unless told otherwise (2.2+ shows profiles
/// by name, 2.3 has device status).
pub const DEFAULT_MICROVERSION: Version = Version::MAX;

/// `GET /v2/accelerator_requests`'s filters.
#[derive(Debug, Clone, Default)]
pub struct ArqFilter {
    /// Only the ARQs bound to this instance.
    pub instance: Option<String>,
    /// With `instance`: `resolved` answers 423 until every ARQ is resolved.
    pub bind_state: Option<String>,
}

/// Which ARQs `DELETE /v2/accelerator_requests` removes (all or none).
#[derive(Debug, Clone)]
pub enum ArqSelector {
    /// These ARQs, by uuid.
    Uuids(Vec<String>),
    /// Every ARQ that names the instance (Nova's call).
    Instance(String),
}

/// The accelerator API.
#[derive(Debug, Clone)]
pub struct Client {
    http: Http,
    microversion: Option<Version>,
}

impl Client {
    /// A client that asks for [`DEFAULT_MICROVERSION`].
    pub fn new(http: Http) -> Client {
        Client {
            http,
            microversion: Some(DEFAULT_MICROVERSION),
        }
    }

    /// Asks for `v`, or sends no header (the server's 2.0, as Nova) when `None`.
    pub fn with_microversion(mut self, v: Option<Version>) -> Client {
        self.microversion = v;
        self
    }

    pub fn http(&self) -> &Http {
        &self.http
    }

    fn req(&self, method: Method, path: &str) -> Request {
        let r = Request::new(method, format!("/v2{path}"));
        match self.microversion {
            Some(v) => r.microversion(v.header()),
            None => r,
        }
    }

    /// `GET path` of a collection with upstream's query filters.
    fn list(&self, path: &str, filters: &[(&str, &str)]) -> Request {
        filters
            .iter()
            .fold(self.req(Method::GET, path), |r, (k, v)| r.query(k, *v))
    }

    /// Adds Nova's service-token headers.
    fn as_service(req: Request, service_token: Option<&str>) -> Request {
        match service_token {
            Some(t) => req
                .header("x-service-token", t)
                .header("x-service-roles", "service"),
            None => req,
        }
    }

    async fn no_content(&self, req: &Request) -> Result<(), Error> {
        self.http.send(req).await?.success().map(|_| ())
    }

    /// `GET /v2/device_profiles` (`?name=` when given).
    pub async fn profiles(&self, name: Option<&str>) -> Result<Vec<DeviceProfile>, Error> {
        let mut r = self.req(Method::GET, "/device_profiles");
        if let Some(n) = name {
            r = r.query("name", n);
        }
        Ok(self.http.call::<DeviceProfiles>(&r).await?.device_profiles)
    }

    /// `GET /v2/device_profiles/{uuid or name}` (names from 2.2).
    pub async fn profile(&self, id: &str) -> Result<DeviceProfile, Error> {
        #[derive(serde::Deserialize)]
        struct One {
            device_profile: DeviceProfile,
        }
        let r = self.req(Method::GET, &format!("/device_profiles/{id}"));
        Ok(self.http.call::<One>(&r).await?.device_profile)
    }

    /// `POST /v2/device_profiles` (the one-element list form python-cyborgclient sends).
    pub async fn create_profile(&self, p: &NewDeviceProfile) -> Result<DeviceProfile, Error> {
        let r = self.req(Method::POST, "/device_profiles").json(&[p]);
        self.http.call(&r).await
    }

    /// `DELETE /v2/device_profiles/{uuid}`.
    pub async fn delete_profile(&self, uuid: &str) -> Result<(), Error> {
        let r = self.req(Method::DELETE, &format!("/device_profiles/{uuid}"));
        self.no_content(&r).await
    }

    /// `DELETE /v2/device_profiles?value=name,name` (all or none).
    pub async fn delete_profiles(&self, names: &[String]) -> Result<(), Error> {
        let r = self
            .req(Method::DELETE, "/device_profiles")
            .query("value", names.join(","));
        self.no_content(&r).await
    }

    /// `POST /v2/accelerator_requests`: the profile's ARQs (201).
    pub async fn create_arqs(&self, body: &NewArqs) -> Result<Vec<Arq>, Error> {
        let r = self.req(Method::POST, "/accelerator_requests").json(body);
        Ok(self.http.call::<Arqs>(&r).await?.arqs)
    }

    /// `GET /v2/accelerator_requests`; with `bind_state=resolved` a 423
    /// ([`Error::status`]) means "not yet".
    pub async fn arqs(&self, filter: &ArqFilter) -> Result<Vec<Arq>, Error> {
        let mut r = self.req(Method::GET, "/accelerator_requests");
        if let Some(i) = &filter.instance {
            r = r.query("instance", i.as_str());
        }
        if let Some(b) = &filter.bind_state {
            r = r.query("bind_state", b.as_str());
        }
        Ok(self.http.call::<Arqs>(&r).await?.arqs)
    }

    /// `GET /v2/accelerator_requests/{uuid}`.
    pub async fn arq(&self, uuid: &str) -> Result<Arq, Error> {
        let r = self.req(Method::GET, &format!("/accelerator_requests/{uuid}"));
        self.http.call(&r).await
    }

    /// `PATCH /v2/accelerator_requests` (bind or unbind; 202, the work is the bind
    /// worker's).
    pub async fn patch_arqs(
        &self,
        patch: &ArqPatch,
        service_token: Option<&str>,
    ) -> Result<(), Error> {
        let r = self.req(Method::PATCH, "/accelerator_requests").json(patch);
        self.no_content(&Client::as_service(r, service_token)).await
    }

    /// `DELETE /v2/accelerator_requests?arqs=` or `?instance=`.
    pub async fn delete_arqs(
        &self,
        which: &ArqSelector,
        service_token: Option<&str>,
    ) -> Result<(), Error> {
        let r = self.req(Method::DELETE, "/accelerator_requests");
        let r = match which {
            ArqSelector::Uuids(u) => r.query("arqs", u.join(",")),
            ArqSelector::Instance(i) => r.query("instance", i.as_str()),
        };
        self.no_content(&Client::as_service(r, service_token)).await
    }

    /// `GET /v2/deployables`, with upstream's filters (`name`, `rp_uuid`, ...).
    pub async fn deployables(&self, filters: &[(&str, &str)]) -> Result<Vec<Deployable>, Error> {
        let r = self.list("/deployables", filters);
        Ok(self.http.call::<Deployables>(&r).await?.deployables)
    }

    /// `GET /v2/deployables/{uuid}`.
    pub async fn deployable(&self, uuid: &str) -> Result<Deployable, Error> {
        let r = self.req(Method::GET, &format!("/deployables/{uuid}"));
        self.http.call(&r).await
    }

    /// `GET /v2/devices`, with upstream's filters (`type`, `vendor`, `hostname`, ...).
    pub async fn devices(&self, filters: &[(&str, &str)]) -> Result<Vec<Device>, Error> {
        let r = self.list("/devices", filters);
        Ok(self.http.call::<Devices>(&r).await?.devices)
    }

    /// `GET /v2/devices/{uuid}`.
    pub async fn device(&self, uuid: &str) -> Result<Device, Error> {
        let r = self.req(Method::GET, &format!("/devices/{uuid}"));
        self.http.call(&r).await
    }

    /// `GET /v2/device_cleanings[?hostname=]` (accel's, admin): every device
    /// provider's cleaning between tenants.
    pub async fn device_cleanings(
        &self,
        hostname: Option<&str>,
    ) -> Result<Vec<crate::agent::DeviceCleaning>, Error> {
        let mut r = self.req(Method::GET, "/device_cleanings");
        if let Some(h) = hostname {
            r = r.query("hostname", h);
        }
        Ok(self
            .http
            .call::<crate::agent::DeviceCleanings>(&r)
            .await?
            .device_cleanings)
    }

    /// `POST /v2/device_cleanings/{uuid}/{action}` (`clean`: retry; `release`: offer
    /// again after a manual check); `uuid` names a device or one device provider.
    pub async fn device_cleaning_action(
        &self,
        uuid: &str,
        action: &str,
    ) -> Result<Vec<crate::agent::DeviceCleaning>, Error> {
        let r = self.req(Method::POST, &format!("/device_cleanings/{uuid}/{action}"));
        Ok(self
            .http
            .call::<crate::agent::DeviceCleanings>(&r)
            .await?
            .device_cleanings)
    }
}
