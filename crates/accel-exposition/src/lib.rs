//! What the server's and the node agent's `/metrics` share, so that both expose the
//! same way: [`to_prometheus_text`] derives the classic Prometheus text (0.0.4, which
//! scrapers that do not ask for OpenMetrics and `promtool check metrics` read) from the
//! OpenMetrics text `prometheus-client` writes, and [`ProcessCollector`] adds the
//! `process_*` families every client library exposes (stock dashboards read them),
//! which `prometheus-client` lacks. Process figures are read from `/proc/self` at
//! scrape time, so an idle process does no work for them.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The classic Prometheus text format (0.0.4) from `prometheus-client`'s OpenMetrics
/// text: a counter family's metadata names its `_total` samples, and `# EOF` and
/// `# UNIT` lines go. Samples are written identically in both formats.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = help.take() {
                out.push_str(h);
                out.push('\n');
            }
            help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let (name, kind) = match kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), kind),
                "unknown" => (name.to_owned(), "untyped"),
                _ => (name.to_owned(), kind),
            };
            if let Some(h) = help.take() {
                let text = h
                    .strip_prefix("# HELP ")
                    .and_then(|r| r.split_once(' ').map(|(_, t)| t))
                    .unwrap_or("");
                out.push_str("# HELP ");
                out.push_str(&name);
                out.push(' ');
                out.push_str(text);
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Process figures from `/proc/self`, read at each scrape, under the names every
/// Prometheus client library uses (`process_*`), so stock dashboards work.
#[derive(Debug)]
pub struct ProcessCollector;

/// What `/proc/self` says; `None` where the platform has no procfs.
struct ProcessFigures {
    cpu_seconds: f64,
    resident_bytes: i64,
    virtual_bytes: i64,
    start_time_seconds: f64,
    open_fds: i64,
    max_fds: i64,
    threads: i64,
}

fn read_process() -> Option<ProcessFigures> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // f[0] is field 3 (state): utime is field 14, stime 15, num_threads 20,
    // starttime 22, vsize 23, rss 24 (in pages).
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let ticks = 100.0; // USER_HZ: 100 on every Linux ABI accel runs on
    let page = 4096.0;
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    })?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as i64;
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<i64>().ok())
        })
        .unwrap_or(-1);
    Some(ProcessFigures {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        threads: field(20)? as i64,
        start_time_seconds: boot + field(22)? / ticks,
        virtual_bytes: field(23)? as i64,
        resident_bytes: (field(24)? * page) as i64,
        open_fds,
        max_fds,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let Some(p) = read_process() else {
            return Ok(());
        };
        let counter = ConstCounter::new(p.cpu_seconds);
        counter.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            MetricType::Counter,
        )?)?;
        for (name, help, v) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                p.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                p.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                p.max_fds,
            ),
            ("process_threads", "Number of OS threads.", p.threads),
        ] {
            ConstGauge::new(v).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        ConstGauge::new(p.start_time_seconds).encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            None,
            MetricType::Gauge,
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::registry::Registry;

    fn exposed() -> (String, String) {
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        c.inc();
        r.register("accel_things", "Things done", c);
        r.register_collector(Box::new(ProcessCollector));
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &r).unwrap();
        let text = to_prometheus_text(&om);
        (om, text)
    }

    #[test]
    fn classic_text_names_counters_by_their_samples_and_drops_eof() {
        let (om, text) = exposed();
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE accel_things counter\n"), "{om}");
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# HELP accel_things_total Things done.\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE accel_things_total counter\n"),
            "{text}"
        );
        assert!(text.contains("accel_things_total 1\n"), "{text}");
    }

    #[test]
    fn process_families_come_from_proc_self() {
        let (_, text) = exposed();
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
        for name in [
            "process_open_fds ",
            "process_resident_memory_bytes ",
            "process_threads ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(name), "{name} missing: {text}");
        }
    }
}
