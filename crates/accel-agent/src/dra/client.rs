//! The Kubernetes API server's client, reached as client libraries reach it: a
//! kubeconfig (`--kubeconfig`, else `KUBECONFIG`'s first file; its current context's
//! cluster and user: bearer `token` or `tokenFile`, client certificate,
//! `certificate-authority[-data]`, `insecure-skip-tls-verify`), else the in-cluster
//! service account (`KUBERNETES_SERVICE_HOST`/`_PORT`, the mounted `token` and
//! `ca.crt`; the token is re-read for every call, as projected tokens rotate).
//!
//! Two error types: [`ConfigError`] when the client cannot be made (the agent stops at
//! start-up with it), and [`RequestError`], the client's side of a failed call, which
//! reaches the driver as the cause of `accel_k8s::dra::ApiError::Client` (a refusal
//! by the server is `ApiError::Status`, its status kept).

use accel_k8s::dra::ApiError;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where a pod's service account is mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why the client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no kubeconfig (--kubeconfig, KUBECONFIG) and not in a cluster (KUBERNETES_SERVICE_HOST is unset)")]
    NotInCluster,
    #[error("the service account's ca.crt: {0}")]
    ServiceAccountCa(#[source] std::io::Error),
    #[error("ca.crt: {0}")]
    CaCrt(#[source] reqwest::Error),
    #[error("kubeconfig {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("kubeconfig {}: {source}", .path.display())]
    Yaml {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("kubeconfig {}: no current-context", .path.display())]
    NoCurrentContext { path: PathBuf },
    #[error("kubeconfig {}: no {list} entry {name:?}", .path.display())]
    NoEntry {
        path: PathBuf,
        list: String,
        name: String,
    },
    #[error("kubeconfig {}: the cluster has no server", .path.display())]
    NoServer { path: PathBuf },
    #[error("kubeconfig {field}: not base64: {source}")]
    Base64 {
        field: String,
        #[source]
        source: base64::DecodeError,
    },
    /// A file a `*` field names (`field`: the key, `file`: its value).
    #[error("kubeconfig {field} {file}: {source}")]
    File {
        field: String,
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kubeconfig CA: {0}")]
    Ca(#[source] reqwest::Error),
    #[error("kubeconfig client certificate: {0}")]
    ClientCertificate(#[source] reqwest::Error),
    /// The HTTP client itself (TLS back end).
    #[error(transparent)]
    Http(reqwest::Error),
}

/// The client's side of a failed call (`call`: `<method> <url>`, or `watch <url>`).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("token file {}: {source}", .path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{call}: {source}")]
    Send {
        call: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{call}: {status}: {source}")]
    Body {
        call: String,
        status: reqwest::StatusCode,
        #[source]
        source: reqwest::Error,
    },
    /// A 2xx answer that is not the object asked for.
    #[error("{call}: not the object: {source}")]
    Decode {
        call: String,
        #[source]
        source: serde_json::Error,
    },
    /// A watch that ended, or failed, before any change.
    #[error("{call}: {why}")]
    Watch {
        call: String,
        #[source]
        why: WatchEnd,
    },
}

/// How a watch ended without an event.
#[derive(Debug, thiserror::Error)]
pub enum WatchEnd {
    /// The server refused the watch (410 Gone: too old a resourceVersion).
    #[error("{0}")]
    Status(reqwest::StatusCode),
    #[error("{0}")]
    Read(#[source] reqwest::Error),
    #[error("not an event: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("not an event")]
    NotAnEvent,
    /// An ERROR event: the server's message.
    #[error("{0}")]
    Error(String),
    #[error("ended without an event")]
    Ended,
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> ApiError {
        ApiError::client(e)
    }
}

/// How requests authenticate.
#[derive(Debug, Clone)]
enum Bearer {
    None,
    Token(String),
    /// Re-read for every request.
    File(PathBuf),
}

/// A client of the Kubernetes API for what the driver reads and writes.
#[derive(Debug, Clone)]
pub struct KubeApi {
    base: String,
    http: reqwest::Client,
    bearer: Bearer,
}

fn b64(field: &str, v: &str) -> Result<Vec<u8>, ConfigError> {
    base64::engine::general_purpose::STANDARD
        .decode(v.trim())
        .map_err(|source| ConfigError::Base64 {
            field: field.to_owned(),
            source,
        })
}

/// A kubeconfig's `*-data` field, else its file field (relative to the kubeconfig).
fn data_or_file(
    m: &Value,
    data: &str,
    file: &str,
    dir: &Path,
) -> Result<Option<Vec<u8>>, ConfigError> {
    if let Some(d) = m[data].as_str() {
        return b64(data, d).map(Some);
    }
    match m[file].as_str() {
        Some(f) => std::fs::read(dir.join(f))
            .map(Some)
            .map_err(|source| ConfigError::File {
                field: file.to_owned(),
                file: f.to_owned(),
                source,
            }),
        None => Ok(None),
    }
}

/// The bounded HTTP client every call goes through.
fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().timeout(std::time::Duration::from_secs(30))
}

impl KubeApi {
    /// A client at `base` (an `http://` fake in tests) with a fixed token.
    pub fn new(base: &str, token: Option<&str>) -> Result<KubeApi, ConfigError> {
        Ok(KubeApi {
            base: base.trim_end_matches('/').to_owned(),
            http: builder().build().map_err(ConfigError::Http)?,
            bearer: token.map_or(Bearer::None, |t| Bearer::Token(t.to_owned())),
        })
    }

    /// The client the configuration says: `kubeconfig`, else `KUBECONFIG`, else the
    /// in-cluster service account.
    pub fn discover(kubeconfig: Option<&Path>) -> Result<KubeApi, ConfigError> {
        let from_env = std::env::var_os("KUBECONFIG")
            .and_then(|v| std::env::split_paths(&v).next())
            .filter(|p| !p.as_os_str().is_empty());
        match kubeconfig.map(Path::to_path_buf).or(from_env) {
            Some(p) => KubeApi::from_kubeconfig(&p),
            None => KubeApi::in_cluster(Path::new(SERVICE_ACCOUNT_DIR)),
        }
    }

    /// The service account mounted at `dir`, the API at `KUBERNETES_SERVICE_HOST`.
    pub fn in_cluster(dir: &Path) -> Result<KubeApi, ConfigError> {
        let host =
            std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| ConfigError::NotInCluster)?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let ca = std::fs::read(dir.join("ca.crt")).map_err(ConfigError::ServiceAccountCa)?;
        let cert = reqwest::Certificate::from_pem(&ca).map_err(ConfigError::CaCrt)?;
        let http = builder()
            .add_root_certificate(cert)
            .build()
            .map_err(ConfigError::Http)?;
        Ok(KubeApi {
            base: format!("https://{host}:{port}"),
            http,
            bearer: Bearer::File(dir.join("token")),
        })
    }

    /// The current context of the kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> Result<KubeApi, ConfigError> {
        let at = || path.to_path_buf();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: at(), source })?;
        let doc: Value = serde_yaml::from_str(&text)
            .map_err(|source| ConfigError::Yaml { path: at(), source })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let named = |list: &str, name: &str, key: &str| -> Result<Value, ConfigError> {
            doc[list]
                .as_array()
                .and_then(|l| l.iter().find(|e| e["name"].as_str() == Some(name)))
                .map(|e| e[key].clone())
                .ok_or_else(|| ConfigError::NoEntry {
                    path: at(),
                    list: list.to_owned(),
                    name: name.to_owned(),
                })
        };
        let current = doc["current-context"]
            .as_str()
            .ok_or_else(|| ConfigError::NoCurrentContext { path: at() })?;
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
            .ok_or_else(|| ConfigError::NoServer { path: at() })?;
        Ok(KubeApi {
            base: server.trim_end_matches('/').to_owned(),
            http: tls(&cluster, &user, dir)?
                .build()
                .map_err(ConfigError::Http)?,
            bearer: bearer(&user, dir),
        })
    }

    /// The API server's root URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`: the object, or the API server's message.
    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `GET path`, read as `T`.
    pub async fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let v = self.get(path).await?;
        serde_json::from_value(v).map_err(|source| {
            let call = format!("GET {}{path}", self.base);
            RequestError::Decode { call, source }.into()
        })
    }

    /// A request to `url` with the credentials.
    pub(super) fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, RequestError> {
        let r = self
            .http
            .request(method, url)
            .header("accept", "application/json");
        Ok(match &self.bearer {
            Bearer::None => r,
            Bearer::Token(t) => r.bearer_auth(t),
            Bearer::File(f) => {
                let t = std::fs::read_to_string(f).map_err(|source| RequestError::TokenFile {
                    path: f.clone(),
                    source,
                })?;
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
    ) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let call = format!("{method} {url}");
        let mut r = self.request(method, &url)?;
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = match r.send().await {
            Ok(resp) => resp,
            Err(source) => return Err(RequestError::Send { call, source }.into()),
        };
        let status = resp.status();
        let text = match resp.text().await {
            Ok(text) => text,
            Err(source) => {
                return Err(RequestError::Body {
                    call,
                    status,
                    source,
                }
                .into())
            }
        };
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["message"].as_str().unwrap_or(text.as_str()).to_owned();
            return Err(ApiError::Status {
                call,
                status,
                message,
            });
        }
        Ok(body)
    }
}

/// The kubeconfig's TLS: its CA, whether to skip verification, the client certificate.
fn tls(cluster: &Value, user: &Value, dir: &Path) -> Result<reqwest::ClientBuilder, ConfigError> {
    let mut b = builder();
    if let Some(ca) = data_or_file(
        cluster,
        "certificate-authority-data",
        "certificate-authority",
        dir,
    )? {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(&ca).map_err(ConfigError::Ca)?);
    }
    if cluster["insecure-skip-tls-verify"].as_bool() == Some(true) {
        b = b.danger_accept_invalid_certs(true);
    }
    let cert = data_or_file(user, "client-certificate-data", "client-certificate", dir)?;
    let key = data_or_file(user, "client-key-data", "client-key", dir)?;
    if let (Some(mut pem), Some(key)) = (cert, key) {
        pem.push(b'\n');
        pem.extend(key);
        b = b.identity(reqwest::Identity::from_pem(&pem).map_err(ConfigError::ClientCertificate)?);
    }
    Ok(b)
}

/// The kubeconfig user's bearer token: inline, or a file re-read for every call.
fn bearer(user: &Value, dir: &Path) -> Bearer {
    match (user["token"].as_str(), user["tokenFile"].as_str()) {
        (Some(t), _) => Bearer::Token(t.to_owned()),
        (None, Some(f)) => Bearer::File(dir.join(f)),
        (None, None) => Bearer::None,
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
        let e = KubeApi::from_kubeconfig(&path).unwrap_err().to_string();
        assert!(e.contains("no contexts entry \"x\""), "{e}");
    }
}
