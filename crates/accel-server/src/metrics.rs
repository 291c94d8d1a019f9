//! The server's Prometheus metrics: one [`Metrics`] per server process, built with
//! the `prometheus-client` crate, handed to every handler and worker through
//! [`crate::state::Shared`], and served on a listener of its own (`--metrics-listen`,
//! [`crate::observe::metrics_router`]) so the API ports stay byte-for-byte upstream's.
//!
//! Names follow Prometheus' conventions (prefix `accel_`, base units, `_total` on
//! counters) and are a public interface: dashboards and alert rules in `deploy/` use
//! them. Label values are closed sets (`&'static str`: API, method, route template,
//! outcome), never a uuid or a raw path, so the number of series stays bounded.
//!
//! Cost on the hot paths (every request, candidate searches, claims): a counter or a
//! histogram update is an atomic add behind a read lock of the family's map, and
//! label sets of static strings allocate nothing. Numbers only the data knows (ARQs
//! by state, events and pushes waiting, providers) are counted in one read snapshot
//! when `/metrics` is scraped ([`Metrics::refresh`]), and process figures are read
//! from `/proc/self` then too, because `prometheus-client` has no process collector.
//!
//! `prometheus-client` writes the OpenMetrics text format only. Scrapers that ask for
//! it (`Accept: application/openmetrics-text`) get it as written; everyone else gets
//! the classic text format (0.0.4), which differs in the metadata lines only: a
//! counter's `# HELP`/`# TYPE` carry its `_total` name, and there is no `# EOF`
//! ([`to_prometheus_text`]).

use accel_exposition::{to_prometheus_text, ProcessCollector};
use accel_store::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

/// `api`, `method`, `route`, `status` of one answered request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub api: &'static str,
    pub method: &'static str,
    pub route: &'static str,
    pub status: u16,
}

/// The request-duration histogram's labels (no status: fewer series).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub api: &'static str,
    pub method: &'static str,
    pub route: &'static str,
}

/// A request refused by admission ([`crate::admission`]): whose, and its class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShedLabels {
    pub api: &'static str,
    pub class: &'static str,
}

/// An admission class ([`crate::admission::Class`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// Why the bind `PATCH` refused a bind: other_host, unhealthy, no_free_handle.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

/// An outgoing call: which service, and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutgoingLabels {
    pub service: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

type Hist = fn() -> Histogram;

/// The request-duration buckets: [`latency`]'s bounds (which dashboards and alert rules
/// may name) and more between 5 ms and 500 ms, no more than a third apart, so that a
/// p99 read from the buckets can be set beside a client's own (issue 46: within 20 %).
fn request_latency() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
        0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

fn latency() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// Bind and programming times are measured from rows stamped in whole seconds.
fn slow() -> Histogram {
    Histogram::new([1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0])
}

fn counts() -> Histogram {
    Histogram::new([
        0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0, 10000.0,
        100000.0,
    ])
}

/// Every metric family of the server. Fields are public so handlers and workers
/// update them directly.
pub struct Metrics {
    registry: Registry,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram, Hist>,
    /// Requests answered 503 by admission ([`crate::admission`]), by API and class.
    pub http_shed: Family<ShedLabels, Counter>,
    /// Requests being served per admission class.
    pub admission_in_flight: Family<ClassLabel, Gauge>,
    /// Requests waiting for a place per admission class.
    pub admission_waiting: Family<ClassLabel, Gauge>,
    pub candidates_duration: Histogram,
    pub candidates_returned: Histogram,
    pub candidates_anchors: Counter,
    pub candidates_option_checks: Counter,
    pub index_refreshes: Family<KindLabel, Counter>,
    /// The index keeper's steps by outcome (current, waiting, refreshed, failed).
    pub index_keeper_steps: Family<OutcomeLabel, Counter>,
    pub usage_answers: Family<KindLabel, Counter>,
    pub combined_creates: Family<OutcomeLabel, Counter>,
    pub combined_create_size: Histogram,
    pub claims: Family<OutcomeLabel, Counter>,
    pub bind_duration: Family<OutcomeLabel, Histogram, Hist>,
    pub nova_events: Family<OutcomeLabel, Counter>,
    pub bind_refusals: Family<ReasonLabel, Counter>,
    /// Bind jobs claimed by this server's worker and not yet performed.
    pub bind_jobs_in_flight: Gauge,
    pub bind_transaction_failures: Family<OutcomeLabel, Counter>,
    pub fpga_programs: Family<OutcomeLabel, Counter>,
    pub fpga_program_duration: Family<OutcomeLabel, Histogram, Hist>,
    /// Device cleanings answered by the agents, by outcome (clean, failed).
    pub device_cleanings: Family<OutcomeLabel, Counter>,
    pub device_cleaning_duration: Family<OutcomeLabel, Histogram, Hist>,
    pub external_push_failures: Counter,
    pub external_pushes: Family<OutcomeLabel, Counter>,
    pub outgoing: Family<OutgoingLabels, Counter>,
    /// Console logins by outcome: ok, refused (Keystone said no), unavailable
    /// (Keystone could not be asked), bad_origin (a cross-site POST).
    pub console_logins: Family<OutcomeLabel, Counter>,
    /// Writes answered 503 while the maintenance switch is on, by API (kind).
    pub maintenance_refusals: Family<KindLabel, Counter>,
    // Set at scrape time (`refresh`).
    placement_providers: Gauge,
    arqs: Family<StateLabel, Gauge>,
    nova_events_pending: Gauge,
    external_pushes_pending: Gauge,
    fpga_programs_pending: Gauge,
    devices_by_cleaning_state: Family<StateLabel, Gauge>,
    db_up: Gauge,
    keystone_refused: Gauge,
    db_connections: Family<PoolLabels, Gauge>,
    db_waits: Counter,
    partition_refusals: Counter,
    db_wait_seconds: Counter<f64, AtomicU64>,
    /// The store's retry counter at the last scrape (`claims{outcome="retried"}`
    /// moves by the difference).
    retries_seen: Mutex<u64>,
    /// ARQ states seen before, reset to 0 when they disappear from the data.
    arq_states: Mutex<Vec<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// A registry with every family registered; `accel_build_info{commit="unknown"}`
    /// (tests and embedders: the binary says its commit through [`Metrics::built_from`]).
    pub fn new() -> Metrics {
        Metrics::built_from("unknown")
    }

    /// A registry with every family registered and `accel_build_info` naming `commit`:
    /// the one `accel --version` prints. The commit is the binary's (its build script
    /// reruns when HEAD moves), not this library's, which is not rebuilt on a commit.
    pub fn built_from(commit: &'static str) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(request_latency as Hist),
            http_shed: Family::default(),
            admission_in_flight: Family::default(),
            admission_waiting: Family::default(),
            candidates_duration: latency(),
            candidates_returned: counts(),
            candidates_anchors: Counter::default(),
            candidates_option_checks: Counter::default(),
            index_refreshes: Family::default(),
            index_keeper_steps: Family::default(),
            usage_answers: Family::default(),
            combined_creates: Family::default(),
            combined_create_size: counts(),
            claims: Family::default(),
            bind_duration: Family::new_with_constructor(slow as Hist),
            nova_events: Family::default(),
            bind_refusals: Family::default(),
            bind_jobs_in_flight: Gauge::default(),
            bind_transaction_failures: Family::default(),
            fpga_programs: Family::default(),
            fpga_program_duration: Family::new_with_constructor(slow as Hist),
            device_cleanings: Family::default(),
            device_cleaning_duration: Family::new_with_constructor(slow as Hist),
            external_push_failures: Counter::default(),
            external_pushes: Family::default(),
            outgoing: Family::default(),
            console_logins: Family::default(),
            maintenance_refusals: Family::default(),
            placement_providers: Gauge::default(),
            arqs: Family::default(),
            nova_events_pending: Gauge::default(),
            external_pushes_pending: Gauge::default(),
            fpga_programs_pending: Gauge::default(),
            devices_by_cleaning_state: Family::default(),
            db_up: Gauge::default(),
            keystone_refused: Gauge::default(),
            db_connections: Family::default(),
            db_waits: Counter::default(),
            partition_refusals: Counter::default(),
            db_wait_seconds: Counter::default(),
            retries_seen: Mutex::new(0),
            arq_states: Mutex::new(Vec::new()),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "accel_http_requests",
            "HTTP requests answered, by API, method, route template and status",
            m.http_requests.clone(),
        );
        r.register(
            "accel_http_shed",
            "Requests answered 503 with Retry-After because their class (candidates, reads, writes, binds, agents) had no place free within admission_wait_ms, or, for agents, while a boot's request waited; by API and class",
            m.http_shed.clone(),
        );
        r.register(
            "accel_http_admission_in_flight",
            "Requests being served now, by admission class (at most that class's admission_* limit)",
            m.admission_in_flight.clone(),
        );
        r.register(
            "accel_http_admission_waiting",
            "Requests waiting for a place now, by admission class",
            m.admission_waiting.clone(),
        );
        r.register(
            "accel_maintenance_refused_writes",
            "Writes answered 503 because the maintenance switch is on, by API (kind: placement, accelerator)",
            m.maintenance_refusals.clone(),
        );
        r.register(
            "accel_console_logins",
            "Console logins by outcome: ok, refused (Keystone refused the password), unavailable (Keystone could not be asked), bad_origin (a POST from another origin)",
            m.console_logins.clone(),
        );
        r.register(
            "accel_http_request_duration_seconds",
            "Time from a request's arrival to its answer's headers, by API, method and route template",
            m.http_duration.clone(),
        );
        r.register(
            "accel_allocation_candidates_duration_seconds",
            "Time to answer GET /allocation_candidates (refresh, search and rendering)",
            m.candidates_duration.clone(),
        );
        r.register(
            "accel_allocation_candidates_returned",
            "Allocation requests returned per GET /allocation_candidates",
            m.candidates_returned.clone(),
        );
        r.register(
            "accel_allocation_candidates_anchors_searched",
            "Anchor roots the candidate search looked into",
            m.candidates_anchors.clone(),
        );
        r.register(
            "accel_allocation_candidates_option_checks",
            "Options the candidate search tried (its unit of backtracking work)",
            m.candidates_option_checks.clone(),
        );
        r.register(
            "accel_placement_index_refreshes",
            "Refreshes of the in-memory candidate index, by kind (full: everything re-read; incremental: the changed providers)",
            m.index_refreshes.clone(),
        );
        r.register(
            "accel_placement_index_keeper_steps",
            "Steps of the background index keeper, by outcome (current: nothing to do; waiting: stale while writes go on; refreshed: built or brought up to date; failed: the database could not be read)",
            m.index_keeper_steps.clone(),
        );
        r.register(
            "accel_placement_usage_answers",
            "GET /usages answers, by kind (cached: remembered, no logged change to the project since; queried: summed by the database)",
            m.usage_answers.clone(),
        );
        r.register(
            "accel_placement_combined_creates",
            "Transactions that created several root providers at once, by outcome (committed; retried_alone: refused, its creates rerun one by one)",
            m.combined_creates.clone(),
        );
        r.register(
            "accel_placement_combined_create_providers",
            "Root providers per combined create transaction",
            m.combined_create_size.clone(),
        );
        r.register(
            "accel_placement_providers",
            "Resource providers in the database",
            m.placement_providers.clone(),
        );
        r.register(
            "accel_allocation_claims",
            "Allocation writes (PUT /allocations/{consumer_uuid}, POST /allocations, reshapes) by outcome: committed, capacity_refused, generation_conflict, invalid, error; retried counts reruns after a provider race",
            m.claims.clone(),
        );
        r.register(
            "accel_arqs",
            "Accelerator requests by state",
            m.arqs.clone(),
        );
        r.register(
            "accel_arq_bind_duration_seconds",
            "Time from a bind accepted (202) to its ARQ Bound or BindFailed, by outcome (bound, failed)",
            m.bind_duration.clone(),
        );
        r.register(
            "accel_arq_bind_refusals",
            "Binds the bind PATCH refused itself, by reason: other_host (the device is another host's), unhealthy (its agent says so), no_free_handle",
            m.bind_refusals.clone(),
        );
        r.register(
            "accel_nova_events",
            "accelerator-request-bound events to Nova by outcome: delivered, retried, rejected, expired, no_endpoint",
            m.nova_events.clone(),
        );
        r.register(
            "accel_bind_jobs_in_flight",
            "Bind jobs this server has claimed and is performing (at most bind_concurrency instances at once)",
            m.bind_jobs_in_flight.clone(),
        );
        r.register(
            "accel_bind_transaction_failures",
            "Bind transactions that failed, by outcome: retried (a deadlock or serialization failure, run again), failed (left to the lease's end)",
            m.bind_transaction_failures.clone(),
        );
        r.register(
            "accel_nova_events_pending",
            "Nova events recorded and not yet delivered or given up",
            m.nova_events_pending.clone(),
        );
        r.register(
            "accel_fpga_programming_requests",
            "FPGA programming requests answered by the agents, by outcome (done, failed)",
            m.fpga_programs.clone(),
        );
        r.register(
            "accel_fpga_programming_duration_seconds",
            "Time from a programming request recorded to the agent's answer, by outcome",
            m.fpga_program_duration.clone(),
        );
        r.register(
            "accel_fpga_programming_requests_pending",
            "FPGA programming requests the agents have not answered",
            m.fpga_programs_pending.clone(),
        );
        r.register(
            "accel_device_cleanings",
            "Device cleanings between tenants answered by the agents, by outcome (clean, failed)",
            m.device_cleanings.clone(),
        );
        r.register(
            "accel_device_cleaning_duration_seconds",
            "How long the agent took to clean a device (method and verification), by outcome",
            m.device_cleaning_duration.clone(),
        );
        r.register(
            "accel_devices_by_cleaning_state",
            "Device providers cleaned on release, by cleaning state (clean, cleaning, clean_failed)",
            m.devices_by_cleaning_state.clone(),
        );
        r.register(
            "accel_external_placement_pushes",
            "Pushes of a host's device providers to the external Placement, by outcome (pushed, failed)",
            m.external_pushes.clone(),
        );
        r.register(
            "accel_external_placement_push_failures",
            "Failed pushes to the external Placement",
            m.external_push_failures.clone(),
        );
        r.register(
            "accel_external_placement_pushes_pending",
            "Hosts whose device providers changed since their last push to the external Placement",
            m.external_pushes_pending.clone(),
        );
        r.register(
            "accel_outgoing_requests",
            "Calls the server made to other services (nova, keystone, placement), by outcome (success, http_error, unreachable)",
            m.outgoing.clone(),
        );
        r.register(
            "accel_keystone_credentials_refused",
            "1 while Keystone refuses the service's own [keystone_authtoken] credentials (set by readiness checks and scrapes), else 0",
            m.keystone_refused.clone(),
        );
        r.register(
            "accel_db_up",
            "1 when the last database query of a scrape or health check succeeded, else 0",
            m.db_up.clone(),
        );
        r.register(
            "accel_db_pool_connections",
            "Database connections by pool (write, read) and state (idle, in_use)",
            m.db_connections.clone(),
        );
        r.register(
            "accel_db_pool_waits",
            "Connection acquisitions that found no idle connection",
            m.db_waits.clone(),
        );
        r.register(
            "accel_gpu_partition_refusals",
            "GPU partition claims the ledger could not place (a joint request, or a race)",
            m.partition_refusals.clone(),
        );
        r.register(
            "accel_db_pool_wait_seconds",
            "Time spent acquiring a connection when none was idle",
            m.db_wait_seconds.clone(),
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit,
            })
            .set(1);
        r.register(
            "accel_build_info",
            "Always 1; the labels say which accel this is",
            build,
        );
        r.register_collector(Box::new(ProcessCollector));
        Metrics { registry, ..m }
    }

    /// Counts one allocation write's outcome.
    /// Counts one bind the bind `PATCH` refused.
    pub fn bind_refused(&self, reason: &'static str) {
        self.bind_refusals
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn claim(&self, outcome: &'static str) {
        self.claims.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Counts one outgoing call.
    pub fn outgoing(&self, service: &'static str, outcome: &'static str) {
        self.outgoing
            .get_or_create(&OutgoingLabels { service, outcome })
            .inc();
    }

    /// Moves `accel_placement_index_refreshes` up to the candidate index's own
    /// counts of `full` and `incremental` refreshes (kept there for the benchmark
    /// notes; read at scrape time, so this module needs nothing of Placement's).
    pub fn sync_index(&self, full: u64, incremental: u64) {
        for (kind, v) in [("full", full), ("incremental", incremental)] {
            advance(&self.index_refreshes.get_or_create(&KindLabel { kind }), v);
        }
    }

    /// Counts one combined create transaction of `providers` root providers.
    pub fn combined_create(&self, outcome: &'static str, providers: usize) {
        self.combined_creates
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        self.combined_create_size.observe(providers as f64);
    }

    /// Moves `accel_placement_usage_answers` up to the usage cache's own counts of
    /// `cached` and `queried` answers.
    pub fn sync_usage_cache(&self, cached: u64, queried: u64) {
        for (kind, v) in [("cached", cached), ("queried", queried)] {
            advance(&self.usage_answers.get_or_create(&KindLabel { kind }), v);
        }
    }

    /// Records whether Keystone refuses the service's own credentials.
    pub fn set_keystone_refused(&self, refused: bool) {
        self.keystone_refused.set(i64::from(refused));
    }

    /// Records whether the database answered (scrapes and health checks).
    pub fn set_db_up(&self, up: bool) {
        self.db_up.set(i64::from(up));
    }

    /// Brings the scrape-time figures up to date: the store's counters (no query)
    /// and, within `timeout`, the counts only the data knows. A database that does
    /// not answer leaves those at their last values and `accel_db_up` at 0.
    pub async fn refresh(&self, store: &Store, timeout: Duration) {
        let c = store.counters();
        for p in &c.pools {
            for (state, v) in [("idle", p.idle), ("in_use", p.in_use)] {
                self.db_connections
                    .get_or_create(&PoolLabels {
                        pool: p.pool,
                        state,
                    })
                    .set(v as i64);
            }
        }
        advance(&self.db_waits, c.pool_waits);
        advance(&self.partition_refusals, c.partition_refusals);
        let seen = self.db_wait_seconds.get();
        if c.pool_wait_seconds > seen {
            self.db_wait_seconds.inc_by(c.pool_wait_seconds - seen);
        }
        {
            let mut last = self.retries_seen.lock().unwrap_or_else(|e| e.into_inner());
            if c.write_retries > *last {
                self.claims
                    .get_or_create(&OutcomeLabel { outcome: "retried" })
                    .inc_by(c.write_retries - *last);
                *last = c.write_retries;
            }
        }
        match tokio::time::timeout(timeout, store.gauges()).await {
            Ok(Ok(g)) => {
                self.set_db_up(true);
                self.placement_providers.set(g.providers);
                self.nova_events_pending.set(g.nova_events_pending);
                self.external_pushes_pending.set(g.pushes_pending);
                self.fpga_programs_pending.set(g.programs_pending);
                for (state, n) in &g.cleanings {
                    self.devices_by_cleaning_state
                        .get_or_create(&StateLabel {
                            state: state.clone(),
                        })
                        .set(*n);
                }
                let mut known = self.arq_states.lock().unwrap_or_else(|e| e.into_inner());
                for s in known.iter() {
                    if !g.arqs.iter().any(|(state, _)| state == s) {
                        self.arqs
                            .get_or_create(&StateLabel { state: s.clone() })
                            .set(0);
                    }
                }
                for (state, n) in g.arqs {
                    self.arqs
                        .get_or_create(&StateLabel {
                            state: state.clone(),
                        })
                        .set(n);
                    if !known.contains(&state) {
                        known.push(state);
                    }
                }
            }
            Ok(Err(e)) => {
                self.set_db_up(false);
                tracing::warn!(target: "accel::metrics", error = %e, "metrics: counting ARQs, events and providers failed");
            }
            Err(_) => {
                self.set_db_up(false);
                tracing::warn!(target: "accel::metrics", timeout_ms = timeout.as_millis() as u64, "metrics: the database did not answer the scrape's counts in time");
            }
        }
    }

    /// The exposition: OpenMetrics text when `openmetrics`, else the classic text
    /// format.
    pub fn encode(&self, openmetrics: bool) -> String {
        let mut out = String::with_capacity(16 * 1024);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::error!(target: "accel::metrics", "metrics: encoding the registry failed");
        }
        if openmetrics {
            out
        } else {
            to_prometheus_text(&out)
        }
    }
}

/// Moves `counter` up to `value` (counters only go up).
fn advance(counter: &Counter, value: u64) {
    let now = counter.get();
    if value > now {
        counter.inc_by(value - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_names_counters_by_their_samples_and_drops_eof() {
        let m = Metrics::new();
        m.claim("committed");
        let om = m.encode(true);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(
            om.contains("# TYPE accel_allocation_claims counter"),
            "{om}"
        );
        let text = m.encode(false);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# TYPE accel_allocation_claims_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP accel_allocation_claims_total Allocation writes"),
            "{text}"
        );
        assert!(
            text.contains("accel_allocation_claims_total{outcome=\"committed\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("accel_build_info{version=\""), "{text}");
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
        assert!(text.contains("process_open_fds "), "{text}");
    }
}
