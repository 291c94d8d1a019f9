//! The accelerator API test fixture: both APIs on port 0 (the test kit's server) over
//! a fresh database, requests as the admin, a member, Nova or nobody, and Cyborg's
//! error envelope read back.

pub use crate::reply::Reply;
use accel_testkit::placement_request;
use accel_testkit::server::{Backend, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

pub struct AccelApp {
    pub base: String,
    pub placement: String,
    pub client: reqwest::Client,
    _server: TestServer,
}

/// Who sends a request.
#[derive(Clone, Copy)]
pub enum As<'a> {
    Admin,
    /// A project member (roles member, reader) of the given project.
    Member(&'a str),
    /// Nova: a project member with a service token.
    Nova(&'a str),
    /// Exactly these headers.
    Headers(&'a [(&'a str, &'a str)]),
    Anonymous,
}

pub const INSTANCE: &str = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e";

impl AccelApp {
    pub async fn spawn(backend: Backend, fake_host: Option<&str>) -> AccelApp {
        let store = accel_testkit::server::store(backend).await;
        AccelApp::start(
            accel_testkit::server::builder(store).fake_devices(fake_host.map(str::to_owned)),
        )
        .await
    }

    /// The fixture over a server `app` builds.
    pub async fn start(app: accel_server::app::AppBuilder) -> AccelApp {
        let server = TestServer::start(app).await;
        AccelApp {
            base: server.accel.clone(),
            placement: server.placement.clone(),
            client: reqwest::Client::new(),
            _server: server,
        }
    }

    pub async fn call(
        &self,
        who: As<'_>,
        method: Method,
        path: &str,
        version: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut r = self.client.request(method, format!("{}{path}", self.base));
        r = match who {
            As::Admin => r.header("x-auth-token", "admin"),
            As::Member(p) => r
                .header("x-auth-token", format!("user-{p}:{p}"))
                .header("x-roles", "member,reader"),
            As::Nova(p) => r
                .header("x-auth-token", format!("nova-{p}:{p}"))
                .header("x-roles", "member,reader")
                .header("x-service-roles", "service"),
            As::Headers(hs) => hs.iter().fold(r, |r, (k, v)| r.header(*k, *v)),
            As::Anonymous => r,
        };
        if let Some(v) = version {
            r = r.header("openstack-api-version", v);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        Reply::read(r.send().await.unwrap()).await
    }

    /// The server behind the fixture (its store, metrics and console).
    pub fn server(&self) -> &TestServer {
        &self._server
    }

    pub async fn get(&self, who: As<'_>, path: &str) -> Reply {
        self.call(who, Method::GET, path, None, None).await
    }

    /// A request without a body or a microversion header.
    pub async fn send(&self, who: As<'_>, method: Method, path: &str) -> Reply {
        self.call(who, method, path, None, None).await
    }

    /// A request with a JSON body and no microversion header.
    pub async fn send_json(&self, who: As<'_>, method: Method, path: &str, body: Value) -> Reply {
        self.call(who, method, path, None, Some(body)).await
    }

    pub async fn create_profile(&self, name: &str, groups: Value) -> Value {
        let r = self
            .send_json(
                As::Admin,
                Method::POST,
                "/accelerator/v2/device_profiles",
                json!([{"name": name, "groups": groups}]),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body
    }

    pub async fn create_arqs(&self, who: As<'_>, profile: &str) -> Vec<Value> {
        let r = self
            .send_json(
                who,
                Method::POST,
                "/v2/accelerator_requests",
                json!({"device_profile_name": profile}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body["arqs"].as_array().unwrap().clone()
    }

    pub async fn placement_get(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.placement);
        let r = placement_request(Method::GET, &url, "admin", "1.39")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }
}
