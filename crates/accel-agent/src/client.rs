//! The agent's calls to the accelerator API: look up its compute node
//! (`GET /v2/agent/hosts/{node}`), report (`PUT /v2/agent/hosts/{node}/devices`), and
//! load and save the Kubernetes slot usage (`/v2/agent/hosts/{node}/kubernetes`), and
//! take and answer programming requests (`/v2/agent/hosts/{node}/programs`).

use accel_keystone::Session;
use serde_json::Value;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the accelerator API at {url}: {source}")]
    Unreachable { url: String, source: reqwest::Error },
    #[error("Keystone: {0}")]
    Keystone(String),
    /// The server answered with an error; `message` is its explanation.
    #[error("{status} from {url}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
}

/// How the agent authenticates: a fixed token, or a Keystone session whose token is
/// renewed before it expires and after a 401.
#[derive(Clone)]
pub enum Auth {
    Token(String),
    Keystone(Arc<Session>),
}

impl Auth {
    /// The token to send now.
    pub async fn token(&self) -> Result<String, String> {
        match self {
            Auth::Token(t) => Ok(t.clone()),
            Auth::Keystone(s) => s.token().await,
        }
    }
}

pub struct Client {
    base: String,
    auth: Auth,
    http: reqwest::Client,
}

/// The server's view of the node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub compute_node_uuid: String,
    pub devices: i64,
}

/// What a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOutcome {
    pub unchanged: bool,
    pub added: i64,
    pub removed: i64,
    pub kept: i64,
    pub vanished: i64,
}

/// The human message inside Cyborg's `error_message` envelope, or the body.
fn message_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v.get("error_message")
        .and_then(Value::as_str)
        .and_then(|inner| serde_json::from_str::<Value>(inner).ok())
        .and_then(|f| {
            f.get("faultstring")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.to_owned())
}

impl Client {
    pub fn new(base: &str, token: &str) -> Client {
        Client::with_auth(base, Auth::Token(token.to_owned()))
    }

    pub fn with_auth(base: &str, auth: Auth) -> Client {
        Client {
            base: base.trim_end_matches('/').to_owned(),
            auth,
            http: reqwest::Client::new(),
        }
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// Sends `req` with the current token; with a Keystone session a 401 drops the
    /// token and the request goes once more with a new one.
    async fn send(&self, req: reqwest::RequestBuilder, url: &str) -> Result<Value, ClientError> {
        let mut retried = false;
        let resp = loop {
            let token = self.auth.token().await.map_err(ClientError::Keystone)?;
            let attempt = req.try_clone().unwrap_or_else(|| self.http.get(url));
            let resp = attempt
                .header("x-auth-token", &token)
                .send()
                .await
                .map_err(|source| ClientError::Unreachable {
                    url: url.to_owned(),
                    source,
                })?;
            match &self.auth {
                Auth::Keystone(s) if resp.status().as_u16() == 401 && !retried => {
                    s.invalidate(&token).await;
                    retried = true;
                }
                _ => break resp,
            }
        };
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if status >= 300 {
            return Err(ClientError::Refused {
                url: url.to_owned(),
                status,
                message: message_of(&text),
            });
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn node(&self, node: &str) -> Result<NodeInfo, ClientError> {
        let url = format!("{}/v2/agent/hosts/{node}", self.base);
        let v = self.send(self.http.get(&url), &url).await?;
        Ok(NodeInfo {
            compute_node_uuid: v["compute_node_uuid"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            devices: v["devices"].as_i64().unwrap_or(0),
        })
    }

    /// `GET /v2/agent/hosts/{node}/kubernetes`: the saved slot usage (seed 001's
    /// `deviceUsage` strings) and the devices VMs hold.
    pub async fn kubernetes_usage(&self, node: &str) -> Result<Value, ClientError> {
        let url = format!("{}/v2/agent/hosts/{node}/kubernetes", self.base);
        self.send(self.http.get(&url), &url).await
    }

    /// `PUT /v2/agent/hosts/{node}/kubernetes` with `{"usage": .., "claims": [..]}`;
    /// answers the server's reply.
    pub async fn kubernetes_save(&self, node: &str, body: &Value) -> Result<Value, ClientError> {
        let url = format!("{}/v2/agent/hosts/{node}/kubernetes", self.base);
        let req = self
            .http
            .put(&url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body).unwrap_or_default());
        self.send(req, &url).await
    }

    /// Sends `body`; `force` makes the server apply it even when it equals the last one.
    pub async fn report(
        &self,
        node: &str,
        body: &Value,
        force: bool,
    ) -> Result<ReportOutcome, ClientError> {
        let mut url = format!("{}/v2/agent/hosts/{node}/devices", self.base);
        if force {
            url.push_str("?force=true");
        }
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let req = self
            .http
            .put(&url)
            .header("content-type", "application/json")
            .body(bytes);
        let v = self.send(req, &url).await?;
        let n = |k: &str| v[k].as_i64().unwrap_or(0);
        Ok(ReportOutcome {
            unchanged: v["unchanged"].as_bool().unwrap_or(false),
            added: n("devices_added"),
            removed: n("devices_removed"),
            kept: n("devices_kept"),
            vanished: n("devices_vanished"),
        })
    }

    /// `GET /v2/agent/hosts/{node}/programs`: the programming requests to carry out.
    pub async fn pending_programs(
        &self,
        node: &str,
    ) -> Result<Vec<crate::program::ProgramJob>, ClientError> {
        let url = format!("{}/v2/agent/hosts/{node}/programs", self.base);
        let v = self.send(self.http.get(&url), &url).await?;
        Ok(v["programs"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(crate::program::ProgramJob::from_json)
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `PUT /v2/agent/hosts/{node}/programs/{id}`: done, or failed with the reason.
    pub async fn finish_program(
        &self,
        node: &str,
        id: i64,
        result: &Result<(), String>,
    ) -> Result<(), ClientError> {
        let url = format!("{}/v2/agent/hosts/{node}/programs/{id}", self.base);
        let body = match result {
            Ok(()) => serde_json::json!({"state": "done"}),
            Err(e) => serde_json::json!({"state": "failed", "error": e}),
        };
        let req = self
            .http
            .put(&url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default());
        self.send(req, &url).await.map(|_| ())
    }
}
