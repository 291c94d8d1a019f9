//! FPGA programming on the agent's side (seed 003's orchestration-programmed case).
//!
//! ```text
//! server: program_requests (bind of a profile naming accel:bitstream_id /
//!         accel:function_id the region lacks, or PATCH /v2/deployables/{uuid}/program)
//!    │ GET /v2/agent/hosts/{node}/programs  (polled every program interval)
//!    ▼
//! agent: deployable name ─▶ device and region (this discovery)
//!        image: bitstream_id, or the one Glance image whose accel:function_id matches
//!        GET /v2/images/{id} ─▶ active? checksum known?
//!        GET /v2/images/{id}/file ─▶ file, hashed while it is written
//!        hash == os_hash_value (sha512/sha256) or checksum (md5)? else refuse
//!        driver.program(device, region, file) ─▶ function id
//!        report (forced): the region's new CUSTOM_FPGA_FUNCTION_* trait
//!    │ PUT /v2/agent/hosts/{node}/programs/{id}  {"state": "done" | "failed", "error"}
//!    ▼
//! server: the waiting bind goes on (Bound), or ends BindFailed with the reason
//! ```
//!
//! A bitstream whose hash does not match is deleted unread by any driver. The report is
//! sent before the answer, so when the ARQ is Bound, Placement already shows the
//! function the region now carries.

use crate::model::FoundDevice;
use md5::Md5;
use serde_json::Value;
use sha2::{Digest, Sha256, Sha512};
use std::path::{Path, PathBuf};

/// One request, as `GET /v2/agent/hosts/{node}/programs` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramJob {
    pub id: i64,
    pub deployable_name: String,
    pub bitstream_id: Option<String>,
    pub function_id: Option<String>,
}

impl From<accel_api::agent::ProgramRequest> for ProgramJob {
    fn from(r: accel_api::agent::ProgramRequest) -> ProgramJob {
        ProgramJob {
            id: r.id,
            deployable_name: r.deployable_name,
            bitstream_id: r.bitstream_id,
            function_id: r.function_id,
        }
    }
}

/// The device and region a deployable name stands for on `node`: a region
/// provider (`<node>_<bdf>_region<R>`) or, for a card modelled as one deployable,
/// the card itself (its first region).
pub fn locate<'a>(
    devices: &'a [FoundDevice],
    node: &str,
    deployable: &str,
) -> Option<(&'a FoundDevice, u32)> {
    devices.iter().find_map(|d| {
        if let Some(r) = d
            .regions
            .iter()
            .find(|r| d.region_name(node, r) == deployable)
        {
            return Some((d, r.index));
        }
        (d.provider_name(node) == deployable)
            .then(|| d.regions.first().map(|r| (d, r.index)))
            .flatten()
    })
}

/// A Glance v2 image endpoint.
pub struct Glance {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// What Glance says of an image that matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub status: String,
    pub size: Option<u64>,
    /// `(algorithm, lower-case hex)`: `os_hash_algo`/`os_hash_value` when Glance has
    /// them (sha512 by default), else the legacy md5 `checksum`.
    pub hash: Option<(String, String)>,
}

impl Image {
    fn from_json(v: &Value) -> Option<Image> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let hash = match (text("os_hash_algo"), text("os_hash_value")) {
            (Some(a), Some(h)) if !h.is_empty() => Some((a.to_ascii_lowercase(), h)),
            _ => text("checksum")
                .filter(|c| !c.is_empty())
                .map(|c| ("md5".to_owned(), c)),
        };
        Some(Image {
            id: text("id")?,
            status: text("status").unwrap_or_default(),
            size: v.get("size").and_then(Value::as_u64),
            hash: hash.map(|(a, h)| (a, h.to_ascii_lowercase())),
        })
    }
}

/// Why [`Glance::lookup`] has no image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The image service answered 404: there is no such image.
    #[error("the image service has no such image")]
    NotFound,
    /// It could not be asked, or gave no usable answer: nothing is known.
    #[error("{0}")]
    Unavailable(String),
}

/// Why a bitstream could not be fetched; the words go back to the server with the
/// programming request (and into the console), so each names the image and URL.
#[derive(Debug, thiserror::Error)]
pub enum GlanceError {
    #[error("cannot reach the image service at {url}: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("the image service answered {status} for {url}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the image service answered {status} listing images of function {function_id}")]
    ListStatus { function_id: String, status: u16 },
    #[error("image {id}: not a Glance image record: {cause}")]
    NotImage { id: String, cause: String },
    #[error("image {0}: the record has no id")]
    NoId(String),
    #[error("image list for function {function_id}: {cause}")]
    NotList { function_id: String, cause: String },
    #[error("no active image has accel:function_id {0}")]
    NoFunctionImage(String),
    #[error("{count} images have accel:function_id {function_id}; expected one")]
    ManyFunctionImages { function_id: String, count: usize },
    #[error("image {id} is {status}, not active")]
    NotActive { id: String, status: String },
    #[error("image {0} has no checksum; an unverifiable bitstream is never programmed")]
    NoChecksum(String),
    #[error("image {id}: unsupported hash algorithm {algo}")]
    UnsupportedHash { id: String, algo: String },
    #[error("{}: {cause}", path.display())]
    File { path: PathBuf, cause: String },
    #[error("downloading image {id}: {cause}")]
    Download { id: String, cause: String },
    #[error("image {id}: downloaded {got} bytes, Glance records {recorded}")]
    Size { id: String, got: u64, recorded: u64 },
    #[error("image {id}: {algo} {got} does not match the recorded {expected}; not programmed")]
    Hash {
        id: String,
        algo: String,
        got: String,
        expected: String,
    },
    /// The Keystone catalog or token the image service is reached with.
    #[error("{0}")]
    Keystone(String),
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> GlanceError + '_ {
    move |e| GlanceError::File {
        path: path.to_owned(),
        cause: e.to_string(),
    }
}

/// An incremental hash of one of the algorithms Glance records.
enum Hasher {
    Md5(Md5),
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hasher {
    fn new(algo: &str) -> Option<Hasher> {
        match algo {
            "md5" => Some(Hasher::Md5(Md5::new())),
            "sha256" => Some(Hasher::Sha256(Sha256::new())),
            "sha512" => Some(Hasher::Sha512(Sha512::new())),
            _ => None,
        }
    }
    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }
    fn hex(self) -> String {
        let bytes = match self {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Sha512(h) => h.finalize().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Glance {
    pub fn new(base: &str, token: &str) -> Glance {
        Glance {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http: reqwest::Client::builder()
                .user_agent(accel_api::http::USER_AGENT)
                .build()
                .unwrap_or_default(),
        }
    }

    async fn get(&self, url: &str) -> Result<reqwest::Response, GlanceError> {
        let resp = self
            .http
            .get(url)
            .header("x-auth-token", &self.token)
            .send()
            .await
            .map_err(|e| GlanceError::Unreachable {
                url: url.to_owned(),
                cause: e.to_string(),
            })?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(GlanceError::Status {
                url: url.to_owned(),
                status: status.as_u16(),
                body: body.trim().to_owned(),
            });
        }
        Ok(resp)
    }

    /// `GET /v2/images/{id}`.
    pub async fn image(&self, id: &str) -> Result<Image, GlanceError> {
        let url = format!("{}/v2/images/{id}", self.base);
        let v: Value = self
            .get(&url)
            .await?
            .json()
            .await
            .map_err(|e| GlanceError::NotImage {
                id: id.to_owned(),
                cause: e.to_string(),
            })?;
        Image::from_json(&v).ok_or_else(|| GlanceError::NoId(id.to_owned()))
    }

    /// `GET /v2/images/{id}`, telling "no such image" (404) apart from not being able
    /// to ask: the start-up check of `fpga-default` rules refuses only the first.
    pub async fn lookup(&self, id: &str) -> Result<Image, LookupError> {
        let url = format!("{}/v2/images/{id}", self.base);
        let resp = self
            .http
            .get(&url)
            .header("x-auth-token", &self.token)
            .send()
            .await
            .map_err(|e| LookupError::Unavailable(format!("cannot reach {url}: {e}")))?;
        match resp.status().as_u16() {
            404 => return Err(LookupError::NotFound),
            s if !(200..300).contains(&s) => {
                return Err(LookupError::Unavailable(format!("{url} answered {s}")))
            }
            _ => {}
        }
        let v: Value = resp
            .json()
            .await
            .map_err(|e| LookupError::Unavailable(format!("{url}: not a Glance image: {e}")))?;
        Image::from_json(&v)
            .ok_or_else(|| LookupError::Unavailable(format!("{url}: the record has no id")))
    }

    /// The one image whose `accel:function_id` property is `function_id`.
    pub async fn image_for_function(&self, function_id: &str) -> Result<Image, GlanceError> {
        let url = format!("{}/v2/images", self.base);
        let req = self
            .http
            .get(&url)
            .query(&[("accel:function_id", function_id), ("status", "active")])
            .header("x-auth-token", &self.token);
        let resp = req.send().await.map_err(|e| GlanceError::Unreachable {
            url: url.clone(),
            cause: e.to_string(),
        })?;
        if !resp.status().is_success() {
            return Err(GlanceError::ListStatus {
                function_id: function_id.to_owned(),
                status: resp.status().as_u16(),
            });
        }
        let v: Value = resp.json().await.map_err(|e| GlanceError::NotList {
            function_id: function_id.to_owned(),
            cause: e.to_string(),
        })?;
        let images: Vec<Image> = v
            .get("images")
            .and_then(Value::as_array)
            .map(|l| l.iter().filter_map(Image::from_json).collect())
            .unwrap_or_default();
        match images.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(GlanceError::NoFunctionImage(function_id.to_owned())),
            many => Err(GlanceError::ManyFunctionImages {
                function_id: function_id.to_owned(),
                count: many.len(),
            }),
        }
    }

    /// Downloads `image` into `dir` and checks it against its recorded hash (and
    /// size). The file is removed when anything does not match.
    pub async fn download(&self, image: &Image, dir: &Path) -> Result<PathBuf, GlanceError> {
        if image.status != "active" {
            return Err(GlanceError::NotActive {
                id: image.id.clone(),
                status: image.status.clone(),
            });
        }
        let (algo, expected) = image
            .hash
            .clone()
            .ok_or_else(|| GlanceError::NoChecksum(image.id.clone()))?;
        let mut hasher = Hasher::new(&algo).ok_or_else(|| GlanceError::UnsupportedHash {
            id: image.id.clone(),
            algo: algo.clone(),
        })?;
        std::fs::create_dir_all(dir).map_err(file_error(dir))?;
        let path = dir.join(format!("{}.bitstream", image.id));
        let url = format!("{}/v2/images/{}/file", self.base, image.id);
        let mut resp = self.get(&url).await?;
        let written: Result<u64, GlanceError> = async {
            use std::io::Write;
            let mut file = std::fs::File::create(&path).map_err(file_error(&path))?;
            let mut n = 0u64;
            while let Some(chunk) = resp.chunk().await.map_err(|e| GlanceError::Download {
                id: image.id.clone(),
                cause: e.to_string(),
            })? {
                hasher.update(&chunk);
                file.write_all(&chunk).map_err(file_error(&path))?;
                n += chunk.len() as u64;
            }
            file.sync_all().map_err(file_error(&path))?;
            Ok(n)
        }
        .await;
        let check = written.and_then(|n| {
            if let Some(size) = image.size.filter(|s| *s != n) {
                return Err(GlanceError::Size {
                    id: image.id.clone(),
                    got: n,
                    recorded: size,
                });
            }
            let got = hasher.hex();
            if got != expected {
                return Err(GlanceError::Hash {
                    id: image.id.clone(),
                    algo: algo.clone(),
                    got,
                    expected: expected.clone(),
                });
            }
            Ok(())
        });
        match check {
            Ok(()) => Ok(path),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn image_hash_prefers_os_hash() {
        let i = Image::from_json(&json!({"id": "i", "status": "active", "size": 3,
            "checksum": "AA", "os_hash_algo": "sha512", "os_hash_value": "BB"}))
        .unwrap();
        assert_eq!(i.hash, Some(("sha512".into(), "bb".into())));
        let i =
            Image::from_json(&json!({"id": "i", "checksum": "AA", "os_hash_value": null})).unwrap();
        assert_eq!(i.hash, Some(("md5".into(), "aa".into())));
        let i = Image::from_json(&json!({"id": "i"})).unwrap();
        assert_eq!(i.hash, None);
    }

    #[test]
    fn hashes_are_the_known_digests() {
        let mut h = Hasher::new("md5").unwrap();
        h.update(b"abc");
        assert_eq!(h.hex(), "900150983cd24fb0d6963f7d28e17f72");
        let mut h = Hasher::new("sha256").unwrap();
        h.update(b"abc");
        assert_eq!(
            h.hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(Hasher::new("crc32").is_none());
    }
}
