//! The server's own view of a run (issue 46 item 1): `accel_http_request_duration_seconds`
//! scraped from its metrics port before and after the measured window, the difference
//! read as one histogram per call type, and its quantiles computed as Prometheus'
//! `histogram_quantile` does (linear within the bucket), so the simulator's p99 and the
//! server's can be set side by side.
//!
//! The two do not measure the same span: the server's histogram runs from the moment
//! its router has the request (headers parsed) to the moment the answer's headers are
//! ready, with the body already built; the simulator's wire time adds the request's
//! trip in, the time before the server's runtime reads it (accept, a busy worker),
//! and writing and reading the answer's bytes (582 KB for 1,000 candidates).

use std::collections::BTreeMap;

const FAMILY: &str = "accel_http_request_duration_seconds_bucket";

/// The series of one call type: `(api, method, route)` label values.
pub type Series = (&'static str, &'static str, &'static str);

/// The routes each call type of the simulator sends to.
pub fn series_of(call: &str) -> &'static [Series] {
    match call {
        "candidates" => &[("placement", "GET", "/allocation_candidates")],
        "claim" => &[("placement", "PUT", "/allocations/{consumer_uuid}")],
        "arq_create" => &[("accelerator", "POST", "/v2/accelerator_requests")],
        "arq_bind" => &[("accelerator", "PATCH", "/v2/accelerator_requests")],
        "report" => &[("accelerator", "PUT", "/v2/agent/hosts/{hostname}/devices")],
        "periodic" => &[
            ("placement", "GET", "/resource_providers"),
            ("placement", "GET", "/resource_providers/{uuid}/inventories"),
            ("placement", "GET", "/resource_providers/{uuid}/traits"),
            ("placement", "GET", "/resource_providers/{uuid}/aggregates"),
        ],
        "delete" => &[
            ("accelerator", "DELETE", "/v2/accelerator_requests"),
            ("placement", "DELETE", "/allocations/{consumer_uuid}"),
        ],
        _ => &[],
    }
}

/// Cumulative bucket counts by upper bound (`+Inf` as infinity), per series.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    series: BTreeMap<(String, String, String), Vec<(f64, f64)>>,
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let at = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &labels[at..];
    Some(&rest[..rest.find('"')?])
}

impl Scrape {
    /// Reads the request-duration buckets out of a classic text exposition.
    pub fn parse(text: &str) -> Scrape {
        let mut out = Scrape::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(FAMILY) else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once(' ') else {
                continue;
            };
            let (Some(api), Some(method), Some(route), Some(le)) = (
                label(labels, "api"),
                label(labels, "method"),
                label(labels, "route"),
                label(labels, "le"),
            ) else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            let Ok(v) = value.trim().parse::<f64>() else {
                continue;
            };
            out.series
                .entry((api.to_owned(), method.to_owned(), route.to_owned()))
                .or_default()
                .push((le, v));
        }
        for b in out.series.values_mut() {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
        }
        out
    }

    /// The buckets `series` gained between `before` and this scrape, summed.
    pub fn since(&self, before: &Scrape, series: &[Series]) -> Vec<(f64, f64)> {
        let mut sum: Vec<(f64, f64)> = Vec::new();
        for (api, method, route) in series {
            let key = ((*api).to_owned(), (*method).to_owned(), (*route).to_owned());
            let Some(after) = self.series.get(&key) else {
                continue;
            };
            let old = before.series.get(&key);
            for (i, (le, v)) in after.iter().enumerate() {
                let was = old.and_then(|o| o.get(i)).map_or(0.0, |b| b.1);
                match sum.get_mut(i) {
                    Some(s) => s.1 += v - was,
                    None => sum.push((*le, v - was)),
                }
            }
        }
        sum
    }
}

/// The `q` quantile of cumulative `buckets`, as `histogram_quantile` computes it; the
/// highest finite bound when it falls in `+Inf`; `None` without observations.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let width = count - lower.1;
            let within = if width > 0.0 {
                (rank - lower.1) / width
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * within);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

/// Observations in cumulative `buckets`.
pub fn count(buckets: &[(f64, f64)]) -> f64 {
    buckets.last().map_or(0.0, |b| b.1)
}

/// GETs `url` (a metrics port's `/metrics`) and parses it.
pub async fn scrape(url: &str) -> anyhow::Result<Scrape> {
    let text = reqwest::get(url).await?.error_for_status()?.text().await?;
    Ok(Scrape::parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# TYPE accel_http_request_duration_seconds histogram
accel_http_request_duration_seconds_bucket{api="placement",method="GET",route="/allocation_candidates",le="0.01"} 10
accel_http_request_duration_seconds_bucket{api="placement",method="GET",route="/allocation_candidates",le="0.02"} 10
accel_http_request_duration_seconds_bucket{api="placement",method="GET",route="/allocation_candidates",le="+Inf"} 10
"#;
    const AFTER: &str = r#"accel_http_request_duration_seconds_bucket{api="placement",method="GET",route="/allocation_candidates",le="0.01"} 60
accel_http_request_duration_seconds_bucket{api="placement",method="GET",route="/allocation_candidates",le="0.02"} 108
accel_http_request_duration_seconds_bucket{api="placement",method="GET",route="/allocation_candidates",le="+Inf"} 110
accel_http_request_duration_seconds_sum{api="placement",method="GET",route="/allocation_candidates"} 1.5
accel_http_request_duration_seconds_bucket{api="placement",method="PUT",route="/allocations/{consumer_uuid}",le="0.01"} 5
accel_http_request_duration_seconds_bucket{api="placement",method="PUT",route="/allocations/{consumer_uuid}",le="0.02"} 5
accel_http_request_duration_seconds_bucket{api="placement",method="PUT",route="/allocations/{consumer_uuid}",le="+Inf"} 5
"#;

    #[test]
    fn the_window_is_the_difference_and_quantiles_interpolate() {
        let (before, after) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        let c = after.since(&before, series_of("candidates"));
        assert_eq!(c, vec![(0.01, 50.0), (0.02, 98.0), (f64::INFINITY, 100.0)]);
        assert_eq!(count(&c), 100.0);
        // p50: the 50th of 100 is the last of the first bucket.
        assert!((quantile(&c, 0.5).unwrap() - 0.01).abs() < 1e-9);
        // p75: 25 of the second bucket's 48, linearly between 10 and 20 ms.
        let p75 = quantile(&c, 0.75).unwrap();
        assert!((p75 - (0.01 + 0.01 * 25.0 / 48.0)).abs() < 1e-9, "{p75}");
        // p99 falls in +Inf: the highest finite bound.
        assert_eq!(quantile(&c, 0.99), Some(0.02));
        // A series absent before counts from zero; none at all has no quantile.
        let claims = after.since(&before, series_of("claim"));
        assert_eq!(count(&claims), 5.0);
        assert_eq!(
            quantile(&after.since(&before, series_of("report")), 0.5),
            None
        );
    }
}
