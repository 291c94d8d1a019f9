//! The DRA driver's sockets as kubelet reaches them: registration and both DRA
//! versions over unix sockets (tonic clients of the real protos), and, when
//! `ACCEL_DRA_PYTHON` names a Python with grpcio (`scripts/dra-check.txt`; the test
//! command sets it), a gRPC C-core client sending each `:authority` kubelet-side
//! clients send (`scripts/dra-authority.py`); and a hand-made HTTP/2 client that
//! sends grpc-go's percent-encoded `:authority`, with its own HPACK dynamic table,
//! over many requests on one connection (`authority.rs` in the crate).

use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::objects::ResourceClaim;
use accel_k8s::dra::{self, serve, ApiError, BoxFuture, ClaimApi, Driver};
use accel_k8s::proto::{dra_v1 as v1, registration as reg};
use accel_k8s::testing::{device, Held};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[path = "dra/counts.rs"]
mod counts;

const NODE: &str = "node-a";

/// Claims by name, allocated as the scheduler would.
struct Api(BTreeMap<String, Value>);

impl ClaimApi for Api {
    fn claim(&self, _ns: &str, name: &str) -> BoxFuture<'_, Result<ResourceClaim, ApiError>> {
        let c = match self.0.get(name) {
            Some(v) => serde_json::from_value(v.clone()).map_err(ApiError::client),
            None => Err(ApiError::client(std::io::Error::other(format!(
                "{name} not found"
            )))),
        };
        Box::pin(async move { c })
    }
}

async fn dial(path: &Path) -> tonic::transport::Channel {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tick.tick().await;
        if let Ok(c) = accel_k8s::kubelet::connect(path).await {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never served",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_and_prepare_over_the_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    config.cdi_dir = dir.path().join("cdi");
    assert_eq!(config.mode, accel_k8s::config::Mode::Dra);
    let gpu = device("0000:3b:00.0", "GPU");
    let name = dra::device_name(NODE, &gpu.id);
    let uid = "0b0e5b1c-1111-4c4c-9d9d-000000000001";
    let claim = json!({"metadata": {"uid": uid, "name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "accel.dev", "pool": NODE, "device": name}]}}}});
    let held = Arc::new(Held::default());
    let metrics = Arc::new(accel_k8s::KubeletMetrics::register(
        &mut prometheus_client::registry::Registry::default(),
    ));
    let mut dra_registry = prometheus_client::registry::Registry::default();
    let dra_metrics = Arc::new(dra::metrics::DraMetrics::register(&mut dra_registry));
    let cdi_dir = config.cdi_dir.clone();
    let released = Arc::new(dra::taints::Released::default());
    let driver = Arc::new(
        Driver::new(
            NODE,
            config,
            Arc::new(vec![gpu.clone()]),
            Arc::new(Api([("c".to_string(), claim)].into())),
            held.clone(),
        )
        .with_metrics(Some(metrics.clone()))
        .with_dra_metrics(dra_metrics.clone())
        .with_released(released.clone()),
    );
    let registry = dir.path().join("registry");
    let plugins = dir.path().join("plugins");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = {
        let (registry, plugins) = (registry.clone(), plugins.clone());
        tokio::spawn(async move {
            serve::serve(driver, &registry, &plugins, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    let reg_sock = serve::registration_socket(&registry, "accel.dev");
    let mut r = reg::registration_client::RegistrationClient::new(dial(&reg_sock).await);
    let info = r.get_info(reg::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(
        info.endpoint,
        plugins.join("accel.dev/dra.sock").display().to_string()
    );
    // Ready (the agent's /readyz) once kubelet says it registered the driver.
    assert!(!metrics.all_registered());
    r.notify_registration_status(reg::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    assert!(metrics.all_registered());

    let mut k = v1::dra_plugin_client::DraPluginClient::new(dial(Path::new(&info.endpoint)).await);
    let got = k
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: vec![v1::Claim {
                namespace: "ns".into(),
                uid: uid.into(),
                name: "c".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.claims[uid].error, "");
    assert_eq!(
        got.claims[uid].devices[0].cdi_device_ids,
        vec![format!("accel.dev/gpu={uid}-{name}")]
    );
    assert_eq!(held.0.lock().unwrap()[uid].whole, vec![gpu.id.clone()]);
    // The container sees its devices as a device plugins' container does.
    let cdi = dra::cdi_path(&cdi_dir, "accel.dev", "gpu", uid);
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(&cdi).unwrap()).unwrap();
    let env = &spec["devices"][0]["containerEdits"]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!("ACCEL_VISIBLE_DEVICES=0000:3b:00.0")),
        "{env}"
    );
    // Prepared: named by its claim's CDI spec (a device lost now is NoExecute).
    let prepared = dra::taints::prepared(&cdi_dir, "accel.dev");
    assert!(
        prepared.len() == 1 && prepared.contains(&name),
        "{prepared:?}"
    );
    counts::dra_counts(&dra_registry, &k, uid).await;
    // Unprepared: released to its cleaning (tainted while the server withholds it).
    assert!(dra::taints::prepared(&cdi_dir, "accel.dev").is_empty());
    let released = released.names();
    assert!(
        released.len() == 1 && released.contains(&name),
        "{released:?}"
    );

    if let Some(python) = std::env::var_os("ACCEL_DRA_PYTHON") {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dra-authority.py");
        let out = tokio::process::Command::new(python)
            .arg(&script)
            .arg(&reg_sock)
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
        let cases: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(cases.len(), 3, "{text}");
        assert_eq!(cases[0]["ok"], true, "localhost, as kubelet sends: {text}");
        assert_eq!(cases[0]["info"]["endpoint"], info.endpoint.as_str());
        // grpc-go's and C-core's percent-encoded socket path, and grpcio's default.
        for case in &cases {
            assert_eq!(case["ok"], true, "{}: {text}", case["case"]);
        }
        assert!(out.status.success());
    } else {
        eprintln!("ACCEL_DRA_PYTHON unset: the grpcio client part is not run");
    }
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert!(!reg_sock.exists());
}

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// An HTTP/2 client written by hand, so that it can send any `:authority` (h2's and
/// tonic's clients parse it first): frames and HPACK as grpc-go puts them on the
/// wire, its encoder indexing what it sends (the dynamic table in use), header
/// blocks cut into CONTINUATIONs of a chosen size.
struct RawH2 {
    io: tokio::net::UnixStream,
    enc: loona_hpack::Encoder<'static>,
    dec: loona_hpack::Decoder<'static>,
    read: Vec<u8>,
    next_stream: u32,
}

/// What came back for one request: header fields, the gRPC message, the trailers.
#[derive(Debug)]
struct Answer {
    headers: Fields,
    message: Vec<u8>,
    trailers: Fields,
}

fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name.as_bytes())
        .map(|(_, v)| std::str::from_utf8(v).unwrap())
}

impl RawH2 {
    async fn connect(path: &Path) -> RawH2 {
        use tokio::io::AsyncWriteExt;
        dial(path).await;
        let mut io = tokio::net::UnixStream::connect(path).await.unwrap();
        io.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        io.write_all(&Self::frame(0x4, 0, 0, &[])).await.unwrap();
        RawH2 {
            io,
            enc: loona_hpack::Encoder::new(),
            dec: loona_hpack::Decoder::new(),
            read: Vec::new(),
            next_stream: 1,
        }
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// One unary call: `path` with `authority` and the `extra` fields, the header
    /// block sent in pieces of `chunk` bytes.
    async fn call(
        &mut self,
        path: &str,
        authority: &[u8],
        extra: &[(&[u8], &[u8])],
        chunk: usize,
        message: &[u8],
    ) -> Result<Answer, String> {
        use tokio::io::AsyncWriteExt;
        let stream = self.next_stream;
        self.next_stream += 2;
        let mut fields: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"user-agent", b"grpc-go/1.72.0"),
            (b"te", b"trailers"),
        ];
        fields.extend_from_slice(extra);
        let block = self.enc.encode(fields);
        let pieces: Vec<&[u8]> = block.chunks(chunk).collect();
        let mut out = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            let flags = if i + 1 == pieces.len() { 0x4 } else { 0 };
            out.extend(Self::frame(
                if i == 0 { 0x1 } else { 0x9 },
                flags,
                stream,
                p,
            ));
        }
        let mut body = vec![0];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(message);
        out.extend(Self::frame(0x0, 0x1, stream, &body));
        self.io.write_all(&out).await.unwrap();

        let mut answer = Answer {
            headers: vec![],
            message: vec![],
            trailers: vec![],
        };
        loop {
            let (kind, flags, id, payload) = self.next_frame().await?;
            match kind {
                // SETTINGS: acknowledged, as a client must.
                0x4 if flags & 0x1 == 0 => {
                    self.io
                        .write_all(&Self::frame(0x4, 0x1, 0, &[]))
                        .await
                        .unwrap();
                }
                0x1 if id == stream => {
                    assert_eq!(flags & 0x4, 0x4, "h2 sends small blocks whole");
                    let fields = self.dec.decode(&payload).map_err(|e| format!("{e:?}"))?;
                    if answer.headers.is_empty() {
                        answer.headers = fields;
                    } else {
                        answer.trailers = fields;
                    }
                    if flags & 0x1 != 0 {
                        return Ok(answer);
                    }
                }
                0x0 if id == stream => {
                    answer.message.extend(&payload);
                    if flags & 0x1 != 0 {
                        return Ok(answer);
                    }
                }
                0x3 if id == stream => return Err(format!("RST_STREAM {payload:?}")),
                0x7 => return Err(format!("GOAWAY {payload:?}")),
                _ => {}
            }
        }
    }

    async fn next_frame(&mut self) -> Result<(u8, u8, u32, Vec<u8>), String> {
        use tokio::io::AsyncReadExt;
        loop {
            if self.read.len() >= 9 {
                let len = u32::from_be_bytes([0, self.read[0], self.read[1], self.read[2]]);
                let len = len as usize;
                if self.read.len() >= 9 + len {
                    let f: Vec<u8> = self.read.drain(..9 + len).collect();
                    let id = u32::from_be_bytes(f[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    return Ok((f[3], f[4], id, f[9..].to_vec()));
                }
            }
            let mut buf = [0u8; 16_384];
            let n = tokio::time::timeout(Duration::from_secs(10), self.io.read(&mut buf))
                .await
                .map_err(|_| "no answer in 10 s".to_string())?
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed".into());
            }
            self.read.extend(&buf[..n]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_go_style_client_with_the_percent_encoded_authority() {
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let mut config = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    config.cdi_dir = dir.path().join("cdi");
    let driver = Arc::new(Driver::new(
        NODE,
        config,
        Arc::new(vec![device("0000:3b:00.0", "GPU")]),
        Arc::new(Api(BTreeMap::new())),
        Arc::new(Held::default()),
    ));
    let (registry, plugins) = (dir.path().join("registry"), dir.path().join("plugins"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = {
        let (registry, plugins) = (registry.clone(), plugins.clone());
        tokio::spawn(async move {
            serve::serve(driver, &registry, &plugins, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    let reg_sock = serve::registration_socket(&registry, "accel.dev");
    // What grpc-go puts in `:authority` for `unix:<path>`.
    let encoded: String = reg_sock
        .display()
        .to_string()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    assert!(encoded.contains("%2F"));

    let mut c = RawH2::connect(&reg_sock).await;
    // 100 calls on one connection: the encoder's table holds the authority after the
    // first, big fields evict entries, and the blocks come in pieces of 1 to 500 bytes.
    for i in 0..100usize {
        let big = vec![b'a' + (i % 26) as u8; 500 + 29 * i];
        let n = i.to_string();
        let mut extra: Vec<(&[u8], &[u8])> = vec![(b"x-call", n.as_bytes())];
        if i % 4 == 0 {
            extra.push((b"x-big", &big));
        }
        let authority: &[u8] = if i % 10 == 9 {
            b"localhost"
        } else {
            encoded.as_bytes()
        };
        let a = c
            .call(
                "/pluginregistration.Registration/GetInfo",
                authority,
                &extra,
                1 + (i * 37) % 500,
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(field(&a.headers, ":status"), Some("200"), "call {i}");
        assert_eq!(
            field(&a.trailers, "grpc-status"),
            Some("0"),
            "call {i}: {a:?}"
        );
        let info = reg::PluginInfo::decode(&a.message[5..]).unwrap();
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, "accel.dev");
    }

    // The DRA socket too: unpreparing an unknown claim succeeds.
    let endpoint = serve::dra_socket(&plugins, "accel.dev");
    let mut c = RawH2::connect(&endpoint).await;
    let request = v1::NodeUnprepareResourcesRequest {
        claims: vec![v1::Claim {
            namespace: "ns".into(),
            uid: "u-1".into(),
            name: "c".into(),
        }],
    };
    let a = c
        .call(
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
            b"%2Fvar%2Flib%2Fkubelet%2Fplugins%2Faccel.dev%2Fdra.sock",
            &[],
            16,
            &request.encode_to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(field(&a.trailers, "grpc-status"), Some("0"), "{a:?}");
    let got = v1::NodeUnprepareResourcesResponse::decode(&a.message[5..]).unwrap();
    assert_eq!(got.claims["u-1"].error, "");

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
