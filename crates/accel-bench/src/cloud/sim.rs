//! The simulated cloud's timed calls: a boot (candidates, claim, ARQ create, bind), a
//! delete, a node's periodic reads and its agent's report, each call sent through
//! [`Wire`] and recorded in three parts ([`Sample`]): queued in the simulator before
//! its first byte was written, on the wire (the server and the network) until the
//! answer's last byte, and parsed after it.

use super::wire::{Answer, Call, Wire, WireError};
use accel_api::accelerator::{bind_ops, patch_entry, ArqPatch, Arqs, NewArqs};
use hyper::Method;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Placement microversions Nova 34 sends: the scheduler's candidates (1.36: consumer
/// types are 1.38 and Nova asks no more than it needs), its claims and the report
/// client's reads.
pub(super) const CANDIDATES_MV: &str = "placement 1.36";

/// A boot's `GET /allocation_candidates` query: the flavor, the profile's group, and
/// the scheduler's limit.
pub(super) const BOOT_QUERY: [(&str, &str); 5] = [
    ("resources", "VCPU:1,MEMORY_MB:512,DISK_GB:1"),
    ("resources1", "FPGA:1"),
    ("required1", "CUSTOM_FAKE_DEVICE"),
    ("group_policy", "none"),
    ("limit", "1000"),
];
const CLAIM_MV: &str = "placement 1.36";
const READ_MV: &str = "placement 1.14";

/// Nova's project and user, as the noauth identity of its service calls.
pub(super) const PROJECT: &str = "c10dc10dc10d4000800000000000000a";
pub(super) const USER: &str = "nova";

/// One call's time, split where it was spent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Due to first byte written (the simulator's runtime, pool, connect).
    pub queued: Duration,
    /// First byte written to last byte read (the server and the network).
    pub wire: Duration,
    /// Last byte read to the answer parsed (the simulator).
    pub parse: Duration,
    /// When the call was due, from the start of the measured window.
    pub at: Duration,
}

impl Sample {
    pub fn total(&self) -> Duration {
        self.queued + self.wire + self.parse
    }
}

/// Samples per call type and errors, from the start of the measured window.
#[derive(Default)]
pub struct Record {
    pub samples: BTreeMap<&'static str, Vec<Sample>>,
    pub errors: BTreeMap<&'static str, usize>,
    /// 503s with `Retry-After` (the server's admission refused the call).
    pub shed: BTreeMap<&'static str, usize>,
    /// Those 503s' times (not in `samples`, which holds the calls admitted).
    pub shed_samples: BTreeMap<&'static str, Vec<Sample>>,
    pub first_errors: BTreeMap<&'static str, String>,
    pub new_connections: BTreeMap<&'static str, usize>,
    pub boots_done: usize,
    pub boots_failed: BTreeMap<String, usize>,
}

/// How many times a delete is sent while the server's admission refuses it.
const DELETE_TRIES: usize = 10;

/// The first 300 characters of an answer's body, for an error.
fn body_start(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(300).collect()
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    Unanswered(WireError),
    /// 503 with `Retry-After` (its seconds): refused by the server's admission.
    Shed(u64),
    Status(u16, String),
    Parse(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unanswered(e) => write!(f, "no answer: {e}"),
            CallError::Shed(s) => write!(f, "503 with Retry-After: {s} (shed)"),
            CallError::Status(s, body) => write!(f, "{s} {body}"),
            CallError::Parse(e) => write!(f, "unreadable answer: {e}"),
        }
    }
}

/// Where a node's agent sends its device report.
pub enum Agents {
    /// accel's agent API.
    Accel,
    /// Upstream Cyborg, through the relay to its conductor (`--cyborg-relay`).
    Relay { devices: usize },
}

pub struct Sim {
    pub placement: Wire,
    pub nova: Wire,
    pub agent: Wire,
    pub agents: Agents,
    pub record: Mutex<Record>,
    /// Whether requests now count (the measured window).
    pub measuring: AtomicBool,
    /// When the measured window began.
    pub window: std::sync::OnceLock<Instant>,
    pub in_flight: AtomicUsize,
    pub max_in_flight: usize,
    /// Node name by its provider's uuid.
    pub hosts: HashMap<String, String>,
    /// When each instance's bind PATCH was sent, until its event arrives.
    pub binding: Mutex<HashMap<String, Instant>>,
}

impl Sim {
    /// The fake Nova received `instance`'s event (`bound`: status `completed`).
    pub fn event(&self, instance: &str, bound: bool) {
        let Some(sent) = self.binding.lock().unwrap().remove(instance) else {
            return;
        };
        if !bound {
            // The server refused the bind after accepting it (Nova would put the
            // server in ERROR): a failed boot, e.g. "no free attach handle".
            self.boot_failed("bind_failed");
        }
        if self.measuring.load(Ordering::Relaxed) {
            let wire = sent.elapsed();
            let mut rec = self.record.lock().unwrap();
            rec.samples
                .entry("bind_to_event")
                .or_default()
                .push(Sample {
                    wire,
                    ..Sample::default()
                });
        }
    }

    /// Sends `req` as one call of type `what`, due since `due`; a 2xx answer is
    /// handed to `parse`, timed as the simulator's. Records the sample and, while
    /// measuring, the error.
    async fn call<T>(
        &self,
        what: &'static str,
        wire: &Wire,
        due: Instant,
        req: Call,
        parse: impl FnOnce(&Answer) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let at = self
            .window
            .get()
            .map_or(Duration::ZERO, |w| due.saturating_duration_since(*w));
        let (out, sample, new_conn) = match wire.send(due, req).await {
            Err(e) => {
                let s = Sample {
                    queued: due.elapsed(),
                    at,
                    ..Sample::default()
                };
                (Err(CallError::Unanswered(e)), s, false)
            }
            Ok(a) => {
                let read = Instant::now();
                let out = match a.status {
                    200..=299 => parse(&a),
                    s if Some(s) == a.also_done => parse(&a),
                    503 => match a.retry_after {
                        Some(after) => Err(CallError::Shed(after)),
                        None => Err(CallError::Status(503, body_start(&a.body))),
                    },
                    s => Err(CallError::Status(s, body_start(&a.body))),
                };
                let s = Sample {
                    queued: a.timing.queued,
                    wire: a.timing.wire,
                    parse: read.elapsed(),
                    at,
                };
                (out, s, a.timing.new_connection)
            }
        };
        if self.measuring.load(Ordering::Relaxed) {
            let mut rec = self.record.lock().unwrap();
            // The server's admission refusals apart: the admitted calls' latency is
            // what overload must keep, the refusals' how fast the 503 came back.
            match &out {
                Err(CallError::Shed(_)) => rec.shed_samples.entry(what).or_default().push(sample),
                _ => rec.samples.entry(what).or_default().push(sample),
            }
            if new_conn {
                *rec.new_connections.entry(what).or_default() += 1;
            }
            match &out {
                Ok(_) => {}
                Err(CallError::Shed(_)) => *rec.shed.entry(what).or_default() += 1,
                Err(e) => {
                    *rec.errors.entry(what).or_default() += 1;
                    rec.first_errors
                        .entry(what)
                        .or_insert_with(|| e.to_string());
                }
            }
        }
        out
    }

    fn boot_failed(&self, why: &str) {
        if self.measuring.load(Ordering::Relaxed) {
            *self
                .record
                .lock()
                .unwrap()
                .boots_failed
                .entry(why.to_owned())
                .or_default() += 1;
        }
    }

    fn failed(&self, step: &str, e: &CallError) {
        match e {
            CallError::Shed(_) => self.boot_failed(&format!("{step}_shed")),
            _ => self.boot_failed(&format!("{step}_error")),
        }
    }

    /// One boot arriving at `due`: candidates, claim (up to three tries), ARQ create
    /// and bind. Returns the instance to delete later, or `None` when it failed
    /// (counted by reason).
    pub async fn boot(&self, rng_seed: u64, due: Instant) -> Option<String> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rng_seed);
        let instance = uuid::Uuid::from_u128(rng.gen()).to_string();
        let req = BOOT_QUERY
            .iter()
            .fold(Call::get("/allocation_candidates"), |r, (k, v)| {
                r.query(k, v)
            })
            .microversion(CANDIDATES_MV);
        let body = match self
            .call("candidates", &self.placement, due, req, |a| {
                serde_json::from_slice::<Candidates>(&a.body)
                    .map_err(|e| CallError::Parse(e.to_string()))
            })
            .await
        {
            Ok(b) => b,
            Err(e) => {
                self.failed("candidates", &e);
                return None;
            }
        };
        let summaries = &body.provider_summaries;
        let mut requests = body.allocation_requests;
        if requests.is_empty() {
            self.boot_failed("no_candidate");
            return None;
        }
        let mut claimed = None;
        for _ in 0..3 {
            if requests.is_empty() {
                break;
            }
            let allocations = requests
                .swap_remove(rng.gen_range(0..requests.len()))
                .allocations;
            let req = Call::new(Method::PUT, format!("/allocations/{instance}"))
                .microversion(CLAIM_MV)
                .json(&json!({
                    "allocations": allocations,
                    "consumer_generation": null,
                    "project_id": PROJECT,
                    "user_id": USER,
                }));
            match self
                .call("claim", &self.placement, Instant::now(), req, |_| Ok(()))
                .await
            {
                Ok(()) => {
                    claimed = Some(allocations);
                    break;
                }
                Err(CallError::Status(409, _)) => self.boot_failed("claim_conflict_retry"),
                Err(e) => {
                    self.failed("claim", &e);
                    return None;
                }
            }
        }
        let Some(allocations) = claimed else {
            self.boot_failed("claim_conflicts_exhausted");
            return None;
        };
        // The device provider is the one the FPGA came from; its parent is the host.
        let Some((device_rp, host)) = device_and_host(&allocations, summaries, &self.hosts) else {
            self.boot_failed("no_device_in_claim");
            return None;
        };
        let create = Call::new(Method::POST, "/v2/accelerator_requests").json(&NewArqs {
            device_profile_name: "cloud-fpga".into(),
            device_profile_group_id: None,
        });
        let arqs = match self
            .call("arq_create", &self.nova, Instant::now(), create, |a| {
                serde_json::from_slice::<Arqs>(&a.body)
                    .map(|a| a.arqs)
                    .map_err(|e| CallError::Parse(e.to_string()))
            })
            .await
        {
            Ok(a) => a,
            Err(e) => {
                self.failed("arq_create", &e);
                return Some(instance);
            }
        };
        let mut patch = ArqPatch::new();
        for a in &arqs {
            patch_entry(&mut patch, &a.uuid, bind_ops(&host, &device_rp, &instance));
        }
        self.binding
            .lock()
            .unwrap()
            .insert(instance.clone(), Instant::now());
        let bind = Call::new(Method::PATCH, "/v2/accelerator_requests").json(&patch);
        if let Err(e) = self
            .call("arq_bind", &self.nova, Instant::now(), bind, |_| Ok(()))
            .await
        {
            self.failed("arq_bind", &e);
            return Some(instance);
        }
        if self.measuring.load(Ordering::Relaxed) {
            self.record.lock().unwrap().boots_done += 1;
        }
        Some(instance)
    }

    /// Nova's delete: the ARQs by instance, then the allocations (404: none left).
    pub async fn delete(&self, instance: &str) {
        let arqs =
            || Call::new(Method::DELETE, "/v2/accelerator_requests").query("instance", instance);
        // The allocations go only once the ARQs (and their attach handles) are gone:
        // freed first, the device would be claimed again while its handle is still
        // held, and that boot's bind refused ("no free attach handle").
        if !self.until_admitted(&self.nova, arqs).await {
            return;
        }
        let allocs = || {
            Call::new(Method::DELETE, format!("/allocations/{instance}"))
                .microversion(CLAIM_MV)
                .done_on(404)
        };
        self.until_admitted(&self.placement, allocs).await;
    }

    /// A delete, sent again after the server's admission refused it (503, waiting its
    /// `Retry-After`), as OpenStack's clients retry; at most [`DELETE_TRIES`] times.
    /// Whether the server took it (any answer but a refusal; a failure is recorded
    /// under `delete` as before).
    async fn until_admitted(&self, wire: &Wire, req: impl Fn() -> Call) -> bool {
        for _ in 0..DELETE_TRIES {
            match self
                .call("delete", wire, Instant::now(), req(), |_| Ok(()))
                .await
            {
                Ok(()) => return true,
                Err(CallError::Shed(after)) => {
                    tokio::time::sleep(Duration::from_secs(after.clamp(1, 10))).await;
                }
                Err(_) => return true,
            }
        }
        false
    }

    /// One run of a node's resource tracker, due since `due`; `full` adds the 300 s
    /// refresh.
    pub async fn periodic(&self, uuid: &str, full: bool, due: Instant) {
        let tree = Call::get("/resource_providers")
            .microversion(READ_MV)
            .query("in_tree", uuid);
        let _ = self
            .call("periodic", &self.placement, due, tree, |_| Ok(()))
            .await;
        let mut reads = vec!["inventories"];
        if full {
            reads.extend(["traits", "aggregates"]);
        }
        for what in reads {
            let r = Call::get(format!("/resource_providers/{uuid}/{what}")).microversion(READ_MV);
            let _ = self
                .call("periodic", &self.placement, Instant::now(), r, |_| Ok(()))
                .await;
        }
    }

    /// A node's agent report (accel's agent API, or the relay to upstream Cyborg).
    pub async fn report(&self, host: &str, body: &Value, due: Instant) {
        let req = match self.agents {
            Agents::Accel => {
                Call::new(Method::PUT, format!("/v2/agent/hosts/{host}/devices")).json(body)
            }
            Agents::Relay { devices } => Call::new(Method::POST, format!("/report/{host}"))
                .query("devices", &devices.to_string()),
        };
        let _ = self.call("report", &self.agent, due, req, |_| Ok(())).await;
    }

    /// Runs `f` unless too many requests are in flight (then the arrival is lost,
    /// counted as `overloaded`: an open loop does not wait for the server).
    pub fn spawn_limited<F>(self: &Arc<Self>, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.boot_failed("overloaded");
            return;
        }
        let sim = self.clone();
        tokio::spawn(async move {
            f.await;
            sim.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// What the scheduler reads of a candidates answer: each candidate's allocations
/// (sent back as the claim) and each provider's root. The rest of the answer is
/// skipped while parsing, not built.
#[derive(serde::Deserialize)]
pub(super) struct Candidates {
    pub allocation_requests: Vec<Candidate>,
    pub provider_summaries: HashMap<String, Summary>,
}

#[derive(serde::Deserialize)]
pub(super) struct Candidate {
    pub allocations: Value,
}

#[derive(serde::Deserialize)]
pub(super) struct Summary {
    root_provider_uuid: String,
}

/// The provider holding FPGA in a claim's `allocations`, and its host: the node
/// whose provider is the device's root (`provider_summaries`, 1.29+).
pub(super) fn device_and_host(
    allocations: &Value,
    summaries: &HashMap<String, Summary>,
    hosts: &HashMap<String, String>,
) -> Option<(String, String)> {
    allocations.as_object()?.iter().find_map(|(rp, a)| {
        a["resources"].get("FPGA")?;
        let root = &summaries.get(rp)?.root_provider_uuid;
        Some((rp.clone(), hosts.get(root)?.clone()))
    })
}
