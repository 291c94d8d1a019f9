//! The agent's side of the DRA kubelet plugin (`accel_k8s::dra`): ResourceClaims read
//! from the Kubernetes API server ([`KubeApi`]) and claims held through the server
//! ([`ServerClaims`]: `PUT`/`DELETE /v2/agent/hosts/{node}/kubernetes/claims/{uid}`,
//! a Placement consumer per claim; the devices VMs hold, withdrawn from the node's
//! ResourceSlice); the slices themselves written through [`KubeApi`] too.
//!
//! The API server is reached as client libraries do: a kubeconfig (`--kubeconfig`,
//! else `KUBECONFIG`'s first file; its current context's cluster and user: bearer
//! `token` or `tokenFile`, client certificate, `certificate-authority[-data]`,
//! `insecure-skip-tls-verify`), else the in-cluster service account
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`, the mounted `token` and `ca.crt`; the token is
//! re-read for every call, as projected tokens rotate).

use accel_k8s::dra::slices::{Held, SliceApi, SliceList};
use accel_k8s::dra::{BoxFuture, ClaimApi, ClaimRecord};
use base64::Engine;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where a pod's service account is mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How requests authenticate.
#[derive(Debug, Clone)]
enum Bearer {
    None,
    Token(String),
    /// Re-read for every request.
    File(PathBuf),
}

/// A client of the Kubernetes API for what the driver reads.
#[derive(Debug, Clone)]
pub struct KubeApi {
    base: String,
    http: reqwest::Client,
    bearer: Bearer,
}

fn b64(field: &str, v: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(v.trim())
        .map_err(|e| format!("kubeconfig {field}: not base64: {e}"))
}

/// A kubeconfig's `*-data` field, else its file field (relative to the kubeconfig).
fn data_or_file(m: &Value, data: &str, file: &str, dir: &Path) -> Result<Option<Vec<u8>>, String> {
    if let Some(d) = m[data].as_str() {
        return b64(data, d).map(Some);
    }
    match m[file].as_str() {
        Some(f) => std::fs::read(dir.join(f))
            .map(Some)
            .map_err(|e| format!("kubeconfig {file} {f}: {e}")),
        None => Ok(None),
    }
}

impl KubeApi {
    /// A client at `base` (an `http://` fake in tests) with a fixed token.
    pub fn new(base: &str, token: Option<&str>) -> Result<KubeApi, String> {
        Ok(KubeApi {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .map_err(|e| e.to_string())?,
            bearer: token.map_or(Bearer::None, |t| Bearer::Token(t.to_owned())),
        })
    }

    /// The client the configuration says: `kubeconfig`, else `KUBECONFIG`, else the
    /// in-cluster service account.
    pub fn discover(kubeconfig: Option<&Path>) -> Result<KubeApi, String> {
        let from_env = std::env::var_os("KUBECONFIG")
            .and_then(|v| std::env::split_paths(&v).next())
            .filter(|p| !p.as_os_str().is_empty());
        match kubeconfig.map(Path::to_path_buf).or(from_env) {
            Some(p) => KubeApi::from_kubeconfig(&p),
            None => KubeApi::in_cluster(Path::new(SERVICE_ACCOUNT_DIR)),
        }
    }

    /// The service account mounted at `dir`, the API at `KUBERNETES_SERVICE_HOST`.
    pub fn in_cluster(dir: &Path) -> Result<KubeApi, String> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
            "no kubeconfig (--kubeconfig, KUBECONFIG) and not in a cluster (KUBERNETES_SERVICE_HOST is unset)".to_string()
        })?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let ca = std::fs::read(dir.join("ca.crt"))
            .map_err(|e| format!("the service account's ca.crt: {e}"))?;
        let cert = reqwest::Certificate::from_pem(&ca).map_err(|e| format!("ca.crt: {e}"))?;
        let http = reqwest::Client::builder()
            .add_root_certificate(cert)
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(KubeApi {
            base: format!("https://{host}:{port}"),
            http,
            bearer: Bearer::File(dir.join("token")),
        })
    }

    /// The current context of the kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> Result<KubeApi, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
        let doc: Value = serde_yaml::from_str(&text)
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let named = |list: &str, name: &str, key: &str| -> Result<Value, String> {
            doc[list]
                .as_array()
                .and_then(|l| l.iter().find(|e| e["name"].as_str() == Some(name)))
                .map(|e| e[key].clone())
                .ok_or_else(|| format!("kubeconfig {}: no {list} entry {name:?}", path.display()))
        };
        let current = doc["current-context"]
            .as_str()
            .ok_or_else(|| format!("kubeconfig {}: no current-context", path.display()))?;
        let context = named("contexts", current, "context")?;
        let cluster = named(
            "clusters",
            context["cluster"].as_str().unwrap_or_default(),
            "cluster",
        )?;
        let user = match context["user"].as_str() {
            Some(u) => named("users", u, "user")?,
            None => Value::Null,
        };
        let server = cluster["server"]
            .as_str()
            .ok_or_else(|| format!("kubeconfig {}: the cluster has no server", path.display()))?;
        let mut b = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
        if let Some(ca) = data_or_file(
            &cluster,
            "certificate-authority-data",
            "certificate-authority",
            dir,
        )? {
            b = b.add_root_certificate(
                reqwest::Certificate::from_pem(&ca).map_err(|e| format!("kubeconfig CA: {e}"))?,
            );
        }
        if cluster["insecure-skip-tls-verify"].as_bool() == Some(true) {
            b = b.danger_accept_invalid_certs(true);
        }
        let cert = data_or_file(&user, "client-certificate-data", "client-certificate", dir)?;
        let key = data_or_file(&user, "client-key-data", "client-key", dir)?;
        if let (Some(mut pem), Some(key)) = (cert, key) {
            pem.push(b'\n');
            pem.extend(key);
            b = b.identity(
                reqwest::Identity::from_pem(&pem)
                    .map_err(|e| format!("kubeconfig client certificate: {e}"))?,
            );
        }
        let bearer = match (user["token"].as_str(), user["tokenFile"].as_str()) {
            (Some(t), _) => Bearer::Token(t.to_owned()),
            (None, Some(f)) => Bearer::File(dir.join(f)),
            (None, None) => Bearer::None,
        };
        Ok(KubeApi {
            base: server.trim_end_matches('/').to_owned(),
            http: b.build().map_err(|e| e.to_string())?,
            bearer,
        })
    }

    /// The API server's root URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`: the object, or the API server's message.
    pub async fn get(&self, path: &str) -> Result<Value, String> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// A request to `path` with the credentials.
    fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, String> {
        let r = self
            .http
            .request(method, url)
            .header("accept", "application/json");
        Ok(match &self.bearer {
            Bearer::None => r,
            Bearer::Token(t) => r.bearer_auth(t),
            Bearer::File(f) => {
                let t = std::fs::read_to_string(f)
                    .map_err(|e| format!("token file {}: {e}", f.display()))?;
                r.bearer_auth(t.trim())
            }
        })
    }

    /// One request; a non-2xx answer is an error with the API server's message.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let mut r = self.request(method.clone(), &url)?;
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = r.send().await.map_err(|e| format!("{method} {url}: {e}"))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| format!("{method} {url}: {status}: {e}"))?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["message"].as_str().unwrap_or(text.as_str());
            return Err(format!("{method} {url}: {status}: {message}"));
        }
        Ok(body)
    }
}

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";
/// How long the API server keeps one watch open (`timeoutSeconds`); the request's own
/// timeout is a little longer.
pub const WATCH_SECONDS: u64 = 300;

fn slice_selector(node: &str, driver: &str) -> String {
    format!("fieldSelector=spec.nodeName%3D{node}%2Cspec.driver%3D{driver}")
}

impl SliceApi for KubeApi {
    fn node_uid(&self, node: &str) -> BoxFuture<'_, Result<String, String>> {
        let path = format!("/api/v1/nodes/{node}");
        Box::pin(async move {
            let n = self.get(&path).await?;
            n["metadata"]["uid"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("node {path} has no uid"))
        })
    }

    fn list_slices(&self, node: &str, driver: &str) -> BoxFuture<'_, Result<SliceList, String>> {
        let path = format!("{SLICES}?{}", slice_selector(node, driver));
        Box::pin(async move {
            let list = self.get(&path).await?;
            Ok(SliceList {
                items: list["items"].as_array().cloned().unwrap_or_default(),
                resource_version: list["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned),
            })
        })
    }

    /// A watch (`watch=true`, newline-delimited JSON events) from `resource_version`;
    /// the first added, modified or deleted event ends it.
    fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        resource_version: &str,
    ) -> BoxFuture<'_, Result<(), String>> {
        let url = format!(
            "{}{SLICES}?watch=true&resourceVersion={resource_version}&timeoutSeconds={WATCH_SECONDS}&{}",
            self.base,
            slice_selector(node, driver)
        );
        Box::pin(async move {
            let mut resp = self
                .request(reqwest::Method::GET, &url)?
                .timeout(std::time::Duration::from_secs(WATCH_SECONDS + 30))
                .send()
                .await
                .map_err(|e| format!("watch {url}: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("watch {url}: {}", resp.status()));
            }
            let mut buf: Vec<u8> = Vec::new();
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| format!("watch {url}: {e}"))?
            {
                buf.extend_from_slice(&chunk);
                while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let event: Value = serde_json::from_slice(&line)
                        .map_err(|e| format!("watch {url}: not an event: {e}"))?;
                    match event["type"].as_str() {
                        Some("ADDED" | "MODIFIED" | "DELETED") => return Ok(()),
                        Some("BOOKMARK") => {}
                        Some("ERROR") => {
                            let message = event["object"]["message"].as_str().unwrap_or("");
                            return Err(format!("watch {url}: {message}"));
                        }
                        _ => return Err(format!("watch {url}: not an event")),
                    }
                }
            }
            Err(format!("watch {url}: ended without an event"))
        })
    }

    fn create_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>> {
        Box::pin(async move { self.call(reqwest::Method::POST, SLICES, Some(&slice)).await })
    }

    fn update_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>> {
        Box::pin(async move {
            let name = slice["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.call(
                reqwest::Method::PUT,
                &format!("{SLICES}/{name}"),
                Some(&slice),
            )
            .await
        })
    }

    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), String>> {
        let path = format!("{SLICES}/{name}");
        Box::pin(async move {
            self.call(reqwest::Method::DELETE, &path, None)
                .await
                .map(|_| ())
        })
    }
}

impl ClaimApi for KubeApi {
    fn claim(&self, namespace: &str, name: &str) -> BoxFuture<'_, Result<Value, String>> {
        let path = format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}");
        Box::pin(async move { self.get(&path).await })
    }
}

/// Claims held through the server: a Placement consumer per claim.
pub struct ServerClaims {
    client: crate::client::Client,
    node: String,
}

impl ServerClaims {
    pub fn new(client: crate::client::Client, node: &str) -> ServerClaims {
        ServerClaims {
            client,
            node: node.to_owned(),
        }
    }
}

impl ClaimRecord for ServerClaims {
    fn prepare(&self, uid: &str, addresses: Vec<String>) -> BoxFuture<'_, Result<(), String>> {
        let uid = uid.to_owned();
        Box::pin(async move {
            self.client
                .prepare_claim(&self.node, &uid, &addresses)
                .await
                .map_err(|e| match e {
                    crate::client::ClientError::Status { message, .. } => message,
                    other => other.to_string(),
                })
        })
    }

    fn unprepare(&self, uid: &str) -> BoxFuture<'_, Result<(), String>> {
        let uid = uid.to_owned();
        Box::pin(async move {
            self.client
                .unprepare_claim(&self.node, &uid)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

impl Held for ServerClaims {
    fn vm_held(&self) -> BoxFuture<'_, Result<std::collections::BTreeSet<String>, String>> {
        Box::pin(async move {
            let shown = self
                .client
                .kubernetes_usage(&self.node)
                .await
                .map_err(|e| e.to_string())?;
            Ok(shown.vm_held_devices.into_iter().collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_s_current_context_is_used() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "from-file\n").unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
             contexts:\n- name: a\n  context: {cluster: one, user: u1}\n- name: b\n  context: {cluster: two, user: u2}\n\
             clusters:\n- name: one\n  cluster: {server: 'http://one:6443'}\n- name: two\n  cluster: {server: 'http://two:6443/', insecure-skip-tls-verify: true}\n\
             users:\n- name: u1\n  user: {token: t1}\n- name: u2\n  user: {tokenFile: token}\n",
        )
        .unwrap();
        let api = KubeApi::from_kubeconfig(&path).unwrap();
        assert_eq!(api.base(), "http://two:6443");
        assert!(matches!(&api.bearer, Bearer::File(f) if f == &dir.path().join("token")));
        std::fs::write(&path, "current-context: x\ncontexts: []\n").unwrap();
        let e = KubeApi::from_kubeconfig(&path).unwrap_err();
        assert!(e.contains("no contexts entry \"x\""), "{e}");
    }
}
