//! Admission: what the server does past what the machine can serve (issue 46 item 3).
//!
//! Without it every request that arrives is served at once, so when requests come
//! faster than the cores and the database answer them, every request shares the
//! machine with every other and all of them slow down together: an open-loop client
//! (Nova's schedulers, a thousand agents) sees every call late, and its own timeouts
//! turn late answers into failures. Here each request class has a number of requests
//! served at once; a request beyond it waits for a place at most
//! [`Limits::wait`] (three times that for claims, other writes and binds: a boot's
//! later steps), and one that gets none is answered with 503 and
//! `Retry-After` in its API's own envelope (the front door renders it), which the
//! OpenStack clients retry. So the admitted requests keep the latency of a machine
//! that is not overloaded, and the rest learn right away that the server is busy.
//!
//! ```text
//! request ─▶ front door (auth, version, route, body) ─▶ class of (API, method, route)
//!   ─▶ place free? ──yes──▶ handler (the place is held until the answer is built)
//!        │ no
//!        ▼
//!   agents: 503 now ── others: wait ≤ admission_wait_ms (writes, binds: 3x) ─▶ place? handler : 503
//! ```
//!
//! Agents' reports and polls ([`Class::Agents`]) come back on their own period, so they
//! yield to boots: they never wait, and while a boot's class (candidates, writes,
//! binds) has a request waiting they are refused even with a place free. The place
//! covers the handler only, not the body read before it, so a client that trickles its
//! body holds no place. Places are per process and shared by both APIs; the `api`
//! label of `accel_http_shed_total` says whose request was refused.

use crate::metrics::{ClassLabel, Metrics, ShedLabels};
use axum::http::Method;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};

/// A request's class: what it costs and how much its caller can wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `GET /allocation_candidates`: the search and its large answer (the scheduler).
    Candidates,
    /// Every other read of either API (the resource trackers' periodic reads).
    Reads,
    /// Writes other than binds: claims, deletes, ARQ creates, inventories, providers.
    Writes,
    /// `PATCH /v2/accelerator_requests` (Nova's conductor binding ARQs).
    Binds,
    /// The agent protocol (`/v2/agent/...`): reports, programming and usage polls.
    Agents,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::Candidates,
        Class::Reads,
        Class::Writes,
        Class::Binds,
        Class::Agents,
    ];

    /// The `class` label and the name in configuration keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Candidates => "candidates",
            Class::Reads => "reads",
            Class::Writes => "writes",
            Class::Binds => "binds",
            Class::Agents => "agents",
        }
    }

    /// The class of a request to `route` (a template of [`crate::observe::route_of`]).
    pub fn of(method: &Method, route: &str) -> Class {
        let read = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if route.starts_with("/v2/agent/") {
            Class::Agents
        } else if read && route == "/allocation_candidates" {
            Class::Candidates
        } else if read {
            Class::Reads
        } else if *method == Method::PATCH && route.starts_with("/v2/accelerator_requests") {
            Class::Binds
        } else {
            Class::Writes
        }
    }

    /// The classes a boot goes through, which agents yield to.
    fn boots(self) -> bool {
        matches!(self, Class::Candidates | Class::Writes | Class::Binds)
    }

    /// How many halves of [`Limits::wait`] a request of this class waits: a claim or a
    /// bind comes after a search the server has already paid for, and refusing it
    /// sends the instance back to scheduling, so the later steps of a boot wait
    /// longer than a new one's first.
    fn patience(self) -> u32 {
        match self {
            Class::Writes | Class::Binds => 6,
            Class::Candidates | Class::Reads | Class::Agents => 2,
        }
    }
}

/// Requests served at once per class (0: no limit) and how long one waits for a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub candidates: usize,
    pub reads: usize,
    pub writes: usize,
    pub binds: usize,
    pub agents: usize,
    /// How long a request waits for a place before it is answered 503.
    pub wait: Duration,
    /// The `Retry-After` of a 503, in seconds.
    pub retry_after_secs: u64,
}

impl Default for Limits {
    /// No limit: embedders and tests that set none; `accel serve` sets
    /// [`Limits::for_cores`] unless configured otherwise.
    fn default() -> Limits {
        Limits {
            candidates: 0,
            reads: 0,
            writes: 0,
            binds: 0,
            agents: 0,
            wait: Duration::from_millis(30),
            retry_after_secs: 1,
        }
    }
}

impl Limits {
    /// The defaults of `accel serve` on a machine with `cores` cores. The candidate
    /// search and its answer are CPU: two at once per core keep the cores busy while
    /// one waits on the index's freshness check. Reads are short and mostly wait on
    /// the database; writes wait on its writer (SQLite has one, the others a pool of
    /// 16); a bind is a short write that wakes the bind worker. Agents get a core's
    /// worth: their reports are large but can wait for their next period. (Writes
    /// and binds sized to SQLite's one writer, two at once, did worse in the one
    /// overload run made: docs/benchmarks.md, "Overload".)
    pub fn for_cores(cores: usize) -> Limits {
        let c = cores.max(1);
        Limits {
            candidates: 2 * c,
            reads: 8 * c,
            writes: 4 * c,
            binds: 2 * c,
            agents: c,
            ..Limits::default()
        }
    }

    fn of(&self, class: Class) -> usize {
        match class {
            Class::Candidates => self.candidates,
            Class::Reads => self.reads,
            Class::Writes => self.writes,
            Class::Binds => self.binds,
            Class::Agents => self.agents,
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// Its class had no place free within the wait (agents: at once).
    Full { class: Class, limit: usize },
    /// An agent's request while a boot's request waited for a place.
    Yielded,
}

impl Shed {
    pub fn class(self) -> Class {
        match self {
            Shed::Full { class, .. } => class,
            Shed::Yielded => Class::Agents,
        }
    }
}

/// One class's places.
struct Gate {
    class: Class,
    limit: usize,
    places: Semaphore,
    waiting: AtomicUsize,
    in_flight: Gauge,
    waiting_gauge: Gauge,
    /// Sheds not yet logged, and when the last line was written (ms since `epoch`).
    unlogged: AtomicU64,
    logged_at: AtomicU64,
}

/// The places of every class, for one server process ([`crate::state::Shared`]).
pub struct Admission {
    gates: Vec<Gate>,
    limits: Limits,
    epoch: Instant,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("limits", &self.limits)
            .finish()
    }
}

/// A place held: the request is served; dropping it frees the place.
pub struct Admitted<'a> {
    gate: &'a Gate,
    _permit: Option<SemaphorePermit<'a>>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.dec();
    }
}

/// Counts a waiting request for as long as it waits, even when the client goes away
/// and the wait is dropped.
struct Waiting<'a>(&'a Gate);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
        self.0.waiting_gauge.dec();
    }
}

/// At most one log line per class in this time; the line counts the sheds since.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Admission {
    pub fn new(limits: &Limits, metrics: &Metrics) -> Admission {
        let gates = Class::ALL
            .iter()
            .map(|&class| {
                let limit = limits.of(class);
                let label = ClassLabel {
                    class: class.as_str(),
                };
                Gate {
                    class,
                    limit,
                    places: Semaphore::new(limit),
                    waiting: AtomicUsize::new(0),
                    in_flight: metrics.admission_in_flight.get_or_create(&label).clone(),
                    waiting_gauge: metrics.admission_waiting.get_or_create(&label).clone(),
                    unlogged: AtomicU64::new(0),
                    logged_at: AtomicU64::new(0),
                }
            })
            .collect();
        Admission {
            gates,
            limits: limits.clone(),
            epoch: Instant::now(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn gate(&self, class: Class) -> &Gate {
        &self.gates[Class::ALL.iter().position(|c| *c == class).unwrap_or(0)]
    }

    /// Requests of `class` waiting for a place now.
    pub fn waiting(&self, class: Class) -> usize {
        self.gate(class).waiting.load(Ordering::SeqCst)
    }

    /// A place for a request of `class`, or why there is none (module docs).
    pub async fn admit(&self, class: Class) -> Result<Admitted<'_>, Shed> {
        let gate = self.gate(class);
        if gate.limit == 0 {
            gate.in_flight.inc();
            return Ok(Admitted {
                gate,
                _permit: None,
            });
        }
        if class == Class::Agents && self.boots_waiting() {
            return Err(Shed::Yielded);
        }
        let full = Shed::Full {
            class,
            limit: gate.limit,
        };
        let permit = match gate.places.try_acquire() {
            Ok(p) => p,
            Err(_) if class == Class::Agents || self.limits.wait.is_zero() => return Err(full),
            Err(_) => {
                gate.waiting.fetch_add(1, Ordering::SeqCst);
                gate.waiting_gauge.inc();
                let _waiting = Waiting(gate);
                let wait = self.wait(class);
                match tokio::time::timeout(wait, gate.places.acquire()).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(full),
                }
            }
        };
        gate.in_flight.inc();
        Ok(Admitted {
            gate,
            _permit: Some(permit),
        })
    }

    /// How long a request of `class` waits for a place.
    pub fn wait(&self, class: Class) -> Duration {
        self.limits.wait * class.patience() / 2
    }

    fn boots_waiting(&self) -> bool {
        self.gates
            .iter()
            .any(|g| g.class.boots() && g.waiting.load(Ordering::SeqCst) > 0)
    }

    /// Counts a refusal of `api`'s request, and logs the class's refusals at most once
    /// every [`LOG_EVERY`].
    pub fn count_shed(&self, api: &'static str, shed: Shed, metrics: &Metrics) {
        let class = shed.class();
        metrics
            .http_shed
            .get_or_create(&ShedLabels {
                api,
                class: class.as_str(),
            })
            .inc();
        let gate = self.gate(class);
        gate.unlogged.fetch_add(1, Ordering::SeqCst);
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = gate.logged_at.load(Ordering::SeqCst);
        let due = last == 0 || now.saturating_sub(last) >= LOG_EVERY.as_millis() as u64;
        if due
            && gate
                .logged_at
                .compare_exchange(last, now.max(1), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            let shed_since = gate.unlogged.swap(0, Ordering::SeqCst);
            let why = match shed {
                Shed::Full { .. } => "no place free within the wait",
                Shed::Yielded => "a boot's request was waiting",
            };
            tracing::warn!(
                target: "accel::overload",
                api,
                class = class.as_str(),
                limit = gate.limit,
                wait_ms = self.wait(class).as_millis() as u64,
                shed = shed_since,
                why,
                "requests answered 503 (overload): the class is at its limit"
            );
        }
    }

    /// The message of the 503.
    pub fn message(&self, shed: Shed) -> String {
        let secs = self.limits.retry_after_secs;
        match shed {
            Shed::Full { class, limit } => format!(
                "The server is busy: {limit} {} requests are being served and no place freed \
                 within {} ms. Retry after {secs} s.",
                class.as_str(),
                self.wait(class).as_millis()
            ),
            Shed::Yielded => format!(
                "The server is busy with instance boots; agent requests wait. Retry after {secs} s."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limits: Limits) -> (Admission, Metrics) {
        let m = Metrics::new();
        (Admission::new(&limits, &m), m)
    }

    #[test]
    fn classes_follow_the_route_and_method() {
        let c = |m: Method, r: &str| Class::of(&m, r);
        assert_eq!(c(Method::GET, "/allocation_candidates"), Class::Candidates);
        assert_eq!(c(Method::GET, "/resource_providers"), Class::Reads);
        assert_eq!(
            c(Method::PUT, "/allocations/{consumer_uuid}"),
            Class::Writes
        );
        assert_eq!(c(Method::POST, "/v2/accelerator_requests"), Class::Writes);
        assert_eq!(c(Method::PATCH, "/v2/accelerator_requests"), Class::Binds);
        assert_eq!(
            c(Method::PATCH, "/v2/accelerator_requests/{uuid}"),
            Class::Binds
        );
        assert_eq!(
            c(Method::PUT, "/v2/agent/hosts/{hostname}/devices"),
            Class::Agents
        );
        assert_eq!(
            c(Method::GET, "/v2/agent/hosts/{hostname}/programs"),
            Class::Agents
        );
    }

    #[tokio::test]
    async fn a_full_class_sheds_after_the_wait_and_others_are_served() {
        let (a, m) = admission(Limits {
            candidates: 1,
            reads: 1,
            wait: Duration::ZERO,
            ..Limits::default()
        });
        let held = a.admit(Class::Candidates).await.unwrap();
        assert_eq!(
            a.admit(Class::Candidates).await.err(),
            Some(Shed::Full {
                class: Class::Candidates,
                limit: 1
            })
        );
        assert!(a.admit(Class::Reads).await.is_ok());
        // Unlimited classes are always served.
        let _w: Vec<_> = futures::future::join_all((0..10).map(|_| a.admit(Class::Writes)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        drop(held);
        assert!(a.admit(Class::Candidates).await.is_ok());
        a.count_shed(
            "placement",
            Shed::Full {
                class: Class::Candidates,
                limit: 1,
            },
            &m,
        );
        assert!(m
            .encode(false)
            .contains("accel_http_shed_total{api=\"placement\",class=\"candidates\"} 1"));
    }

    #[tokio::test]
    async fn a_waiting_request_gets_the_freed_place() {
        let (a, _) = admission(Limits {
            binds: 1,
            agents: 1,
            wait: Duration::from_secs(600),
            ..Limits::default()
        });
        let held = a.admit(Class::Binds).await.unwrap();
        let waiter = a.admit(Class::Binds);
        tokio::pin!(waiter);
        // Polled once: it now waits, which agents yield to.
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        assert_eq!(a.waiting(Class::Binds), 1);
        assert_eq!(a.admit(Class::Agents).await.err(), Some(Shed::Yielded));
        drop(held);
        assert!(waiter.await.is_ok());
        assert_eq!(a.waiting(Class::Binds), 0);
    }

    #[tokio::test]
    async fn agents_never_wait() {
        let (a, _) = admission(Limits {
            agents: 1,
            wait: Duration::from_secs(600),
            ..Limits::default()
        });
        let _held = a.admit(Class::Agents).await.unwrap();
        assert_eq!(
            a.admit(Class::Agents).await.err(),
            Some(Shed::Full {
                class: Class::Agents,
                limit: 1
            })
        );
    }

    #[test]
    fn defaults_scale_with_the_cores() {
        let l = Limits::for_cores(2);
        assert_eq!(
            (l.candidates, l.reads, l.writes, l.binds, l.agents),
            (4, 16, 8, 4, 2)
        );
        assert_eq!(Limits::for_cores(0).agents, 1);
    }

    #[test]
    fn a_boots_later_steps_wait_longer() {
        let (a, _) = admission(Limits {
            wait: Duration::from_millis(100),
            ..Limits::default()
        });
        assert_eq!(a.wait(Class::Candidates), Duration::from_millis(100));
        assert_eq!(a.wait(Class::Writes), Duration::from_millis(300));
        assert_eq!(a.wait(Class::Binds), Duration::from_millis(300));
    }
}
