//! Device taints (KEP-5055, `resource.k8s.io/v1` `Device.taints`): how the node's
//! slice says that a device should not be given to new claims, or that the claims
//! holding it should let go, instead of withdrawing it.
//!
//! ```text
//! found by discovery ─ unhealthy ─────────────▶ <domain>/unhealthy  NoSchedule
//!                      unhealthy and prepared ─▶ <domain>/unhealthy  NoExecute
//! named in a claim's CDI spec, no longer found ─▶ <domain>/unhealthy=gone NoExecute
//! released by a claim (Released), withheld by the server until cleaned, cleaned on
//!   release ───────────────────────────────────▶ <domain>/cleaning   NoSchedule
//! ```
//!
//! "Prepared" is read from the CDI spec files the driver wrote for the claims it
//! prepared on this node ([`prepared`]): they outlive an agent restart (not a
//! reboot, after which kubelet prepares again), so nothing is kept in memory for it.
//! The devices released to a cleaning are kept in memory ([`Released`], filled by the
//! driver's unprepare): the server withholds a device being cleaned and one a VM holds
//! alike, and only this says which is which; after a restart such a device is
//! withdrawn until clean, as before taints.
//!
//! Where the cluster does not serve taints (`DRADeviceTaints`: alpha and off by
//! default in 1.33-1.35, beta and on by default in 1.36, GA in 1.37), the API server
//! drops the field from what it keeps, without an error. [`Support`] is found out by
//! a dry run (`dryRun=All`: validated and answered as it would be kept, nothing
//! kept): taints in the answer are served. The driver then withdraws a tainted
//! device, as it always did, so that no device is ever offered untainted because the
//! field was lost. The written slices are read back too: a write whose answer lost
//! the taints turns the verdict to [`Support::Dropped`] and the pool is written again
//! without those devices. A `Dropped` verdict is asked again after [`RECHECK`], so an
//! upgraded control plane is noticed without a restart.
//!
//! `timeAdded` is left to the API server (it fills it on create or update when
//! absent) and then carried over from the listed slice on every later write, so a
//! taint keeps the time it was added: NoExecute tolerations count from it.

use super::objects::{DeviceTaint, ResourceSlice, SliceDevice};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// The key's name under the driver's domain for an unhealthy or vanished device.
pub const UNHEALTHY: &str = "unhealthy";
/// The key's name for a device released by a claim and being cleaned.
pub const CLEANING: &str = "cleaning";
/// The unhealthy taint's value for a prepared device that is no longer found.
pub const GONE: &str = "gone";
pub const NO_SCHEDULE: &str = "NoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";

/// The most devices a slice holds (`ResourceSliceMaxDevices`).
pub const MAX_DEVICES: usize = 128;
/// The most when any device of the slice has taints.
pub const MAX_DEVICES_WITH_TAINTS: usize = 64;
/// The most taints one device carries (`DeviceTaintsMaxLength`).
pub const MAX_TAINTS: usize = 16;

/// How long a [`Support::Dropped`] verdict stands before it is asked again.
pub const RECHECK: Duration = Duration::from_secs(3600);

/// Whether the cluster keeps the devices' taints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Not asked yet (no device had a taint), or the last ask failed.
    Unknown,
    Served,
    /// The API server dropped them, at this instant.
    Dropped(tokio::time::Instant),
}

/// A taint `<domain>/<name>` with `effect`, its time left to the API server.
pub fn taint(domain: &str, name: &str, value: &str, effect: &str) -> DeviceTaint {
    DeviceTaint {
        key: format!("{domain}/{name}"),
        value: value.to_owned(),
        effect: effect.to_owned(),
        time_added: None,
    }
}

/// The devices a slice may hold: fewer when any of `devices` has taints.
pub fn per_slice(devices: &[SliceDevice]) -> usize {
    if devices
        .iter()
        .any(|d| !d.taints.is_empty() || !d.consumes_counters.is_empty())
    {
        MAX_DEVICES_WITH_TAINTS
    } else {
        MAX_DEVICES
    }
}

/// `devices` without those that have taints (a cluster that does not serve them).
pub fn withdraw_tainted(devices: Vec<SliceDevice>) -> Vec<SliceDevice> {
    devices
        .into_iter()
        .filter(|d| d.taints.is_empty())
        .collect()
}

/// Whether `answer` kept every taint `sent` carried (key, value and effect; the
/// time is the server's).
pub fn kept(sent: &ResourceSlice, answer: &ResourceSlice) -> bool {
    sent.spec.devices.iter().all(|d| {
        if d.taints.is_empty() {
            return true;
        }
        let Some(back) = answer.spec.devices.iter().find(|b| b.name == d.name) else {
            return false;
        };
        d.taints.iter().all(|t| {
            back.taints
                .iter()
                .any(|b| b.key == t.key && b.value == t.value && b.effect == t.effect)
        })
    })
}

/// Gives each taint of `devices` the `timeAdded` the same taint (key, value, effect)
/// of the same device has in `listed`.
pub fn keep_time_added(devices: &mut [SliceDevice], listed: &[ResourceSlice]) {
    for d in devices.iter_mut().filter(|d| !d.taints.is_empty()) {
        let before = listed
            .iter()
            .flat_map(|s| s.spec.devices.iter())
            .find(|b| b.name == d.name);
        let Some(before) = before else { continue };
        for t in &mut d.taints {
            let same = before
                .taints
                .iter()
                .find(|b| b.key == t.key && b.value == t.value && b.effect == t.effect);
            if let Some(b) = same {
                t.time_added.clone_from(&b.time_added);
            }
        }
    }
}

/// The devices released by the driver's unprepare, by slice name, until the server
/// no longer withholds them (their cleaning is over) or they are gone.
#[derive(Debug, Default)]
pub struct Released(Mutex<BTreeSet<String>>);

impl Released {
    pub fn add(&self, names: impl IntoIterator<Item = String>) {
        self.lock().extend(names);
    }

    pub fn names(&self) -> BTreeSet<String> {
        self.lock().clone()
    }

    /// Keeps only the names `keep` says.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|n| keep(n));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The slice names of the devices in one claim's CDI spec file (`devices[].name` is
/// `<claim uid>-<device>`); none when it cannot be read.
pub fn cdi_devices(path: &Path, uid: &str) -> Vec<String> {
    let Ok(text) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(spec) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    let prefix = format!("{uid}-");
    spec["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["name"].as_str()?.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

/// The devices of every claim the driver prepared on this node: named in the CDI
/// spec files `accel-<domain>-<configuration>-<claim uid>.json` of `dir`. A claim uid
/// is a UUID, the last 36 characters of the file's stem.
pub fn prepared(dir: &Path, domain: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let prefix = format!("accel-{domain}-");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(stem) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let Some(uid) = stem.len().checked_sub(36).and_then(|at| stem.get(at..)) else {
            continue;
        };
        out.extend(cdi_devices(&e.path(), uid));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::objects::{ObjectMeta, ResourcePool, ResourceSliceSpec};

    fn device(name: &str, taints: Vec<DeviceTaint>) -> SliceDevice {
        SliceDevice {
            consumes_counters: Vec::new(),
            name: name.into(),
            attributes: Default::default(),
            capacity: Default::default(),
            taints,
            other: Default::default(),
        }
    }

    fn slice(devices: Vec<SliceDevice>) -> ResourceSlice {
        ResourceSlice {
            api_version: "resource.k8s.io/v1".into(),
            kind: "ResourceSlice".into(),
            metadata: ObjectMeta::default(),
            spec: ResourceSliceSpec {
                shared_counters: Vec::new(),
                driver: "accel.dev".into(),
                node_name: Some("n".into()),
                pool: ResourcePool {
                    name: "n".into(),
                    generation: 1,
                    resource_slice_count: 1,
                },
                devices,
            },
        }
    }

    #[test]
    fn a_taint_is_written_as_the_api_types_name_it() {
        let t = taint("accel.dev", UNHEALTHY, GONE, NO_EXECUTE);
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            serde_json::json!({"key": "accel.dev/unhealthy", "value": "gone", "effect": "NoExecute"})
        );
        let t = taint("accel.dev", CLEANING, "", NO_SCHEDULE);
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            serde_json::json!({"key": "accel.dev/cleaning", "effect": "NoSchedule"})
        );
    }

    #[test]
    fn a_taint_keeps_the_time_it_was_added_and_a_dropped_one_is_seen() {
        let sick = || taint("accel.dev", UNHEALTHY, "", NO_SCHEDULE);
        let mut listed = slice(vec![device("a", vec![sick()])]);
        listed.spec.devices[0].taints[0].time_added = Some("2026-07-01T10:00:00Z".into());
        let mut now = vec![
            device("a", vec![sick()]),
            device("b", vec![sick()]),
            device("c", vec![]),
        ];
        keep_time_added(&mut now, std::slice::from_ref(&listed));
        assert_eq!(
            now[0].taints[0].time_added.as_deref(),
            Some("2026-07-01T10:00:00Z")
        );
        assert_eq!(now[1].taints[0].time_added, None);
        // The effect changed: a new taint, a new time.
        let mut executed = vec![device(
            "a",
            vec![taint("accel.dev", UNHEALTHY, "", NO_EXECUTE)],
        )];
        keep_time_added(&mut executed, std::slice::from_ref(&listed));
        assert_eq!(executed[0].taints[0].time_added, None);

        let sent = slice(now.clone());
        assert!(kept(&sent, &sent));
        let dropped = slice(now.iter().map(|d| device(&d.name, vec![])).collect());
        assert!(!kept(&sent, &dropped));
        assert_eq!(per_slice(&now), MAX_DEVICES_WITH_TAINTS);
        assert_eq!(per_slice(&dropped.spec.devices), MAX_DEVICES);
        let left: Vec<String> = withdraw_tainted(now).into_iter().map(|d| d.name).collect();
        assert_eq!(left, ["c"]);
    }

    #[test]
    fn prepared_devices_are_read_from_the_claims_cdi_specs() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a31";
        let spec = serde_json::json!({"cdiVersion": "0.6.0", "kind": "accel.dev/gpu",
            "devices": [{"name": format!("{uid}-n-0000-17-00-0"), "containerEdits": {}},
                        {"name": format!("{uid}-n-0000-31-00-0"), "containerEdits": {}}]});
        std::fs::write(
            dir.path().join(format!("accel-accel.dev-gpu-{uid}.json")),
            spec.to_string(),
        )
        .unwrap();
        // Another driver's spec, and a file that is no spec.
        std::fs::write(
            dir.path().join(format!("accel-other.dev-gpu-{uid}.json")),
            spec.to_string(),
        )
        .unwrap();
        std::fs::write(dir.path().join("accel-accel.dev-x.json"), "{").unwrap();
        let got: Vec<String> = prepared(dir.path(), "accel.dev").into_iter().collect();
        assert_eq!(got, ["n-0000-17-00-0", "n-0000-31-00-0"]);
        assert!(prepared(&dir.path().join("none"), "accel.dev").is_empty());
    }
}
