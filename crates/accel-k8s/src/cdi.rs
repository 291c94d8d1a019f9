//! Container Device Interface spec files: one per configuration, kind
//! `<domain>/<configuration>`, one CDI device per instance (device), so that a
//! runtime with CDI (containerd >= 1.7, CRI-O >= 1.24) injects the device nodes the
//! Allocate response names in `cdi_devices` (`<domain>/<configuration>=<instance>`).
//!
//! ```json
//! {"cdiVersion": "0.6.0", "kind": "accel.dev/gpu",
//!  "devices": [{"name": "gpu-1a2b3c4d",
//!    "containerEdits": {"env": ["ACCEL_DEVICE_GPU_1A2B3C4D=0000:3b:00.0"],
//!      "deviceNodes": [{"path": "/dev/dri/renderD128", "hostPath": "/dev/dri/renderD128",
//!                       "permissions": "rw"}]}}]}
//! ```
//!
//! The combined `ACCEL_VISIBLE_DEVICES` stays in the Allocate response's envs (kubelet
//! sets it once per container); a CDI edit per device could only overwrite it, so each
//! device gets its own variable instead. Files are replaced by rename (a runtime
//! watching the directory never reads half a file), written only when their content
//! changes, and a configuration with no device has no file (a spec needs a device).

use crate::device::Device;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The CDI version the specs declare (0.5.0 added nothing they use; 0.6.0 is what
/// current runtimes write).
pub const CDI_VERSION: &str = "0.6.0";

/// `<domain>/<configuration>`.
pub fn kind(domain: &str, configuration: &str) -> String {
    format!("{domain}/{configuration}")
}

/// The fully qualified CDI device name of an instance:
/// `<domain>/<configuration>=<instance>`.
pub fn device_name(domain: &str, configuration: &str, instance: &str) -> String {
    format!("{}={instance}", kind(domain, configuration))
}

/// The spec file of a configuration: `accel-<domain>-<configuration>.json`.
pub fn spec_path(dir: &Path, domain: &str, configuration: &str) -> PathBuf {
    dir.join(format!("accel-{domain}-{configuration}.json"))
}

/// The per-device variable: `ACCEL_DEVICE_<INSTANCE>`, upper case, `-` as `_`.
pub fn device_env(instance: &str) -> String {
    format!(
        "ACCEL_DEVICE_{}",
        instance.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

/// The spec of one configuration's devices (`None` when it has none).
pub fn spec(domain: &str, configuration: &str, devices: &[(String, Device)]) -> Option<Value> {
    if devices.is_empty() {
        return None;
    }
    let devices: Vec<Value> = devices
        .iter()
        .map(|(instance, d)| {
            let nodes: Vec<Value> = d
                .device_nodes
                .iter()
                .map(|n| {
                    json!({
                        "path": n.container_path,
                        "hostPath": n.host_path,
                        "permissions": n.permissions,
                    })
                })
                .collect();
            let mut edits = serde_json::Map::new();
            edits.insert(
                "env".into(),
                json!([format!(
                    "{}={}",
                    device_env(instance),
                    d.pci_addresses.join(",")
                )]),
            );
            if !nodes.is_empty() {
                edits.insert("deviceNodes".into(), Value::Array(nodes));
            }
            json!({"name": instance, "containerEdits": Value::Object(edits)})
        })
        .collect();
    Some(json!({
        "cdiVersion": CDI_VERSION,
        "kind": kind(domain, configuration),
        "devices": devices,
    }))
}

/// Writes (or removes) the spec file of every configuration; returns the files that
/// changed.
pub fn write_specs(
    dir: &Path,
    domain: &str,
    configurations: &[(String, Vec<(String, Device)>)],
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut changed = Vec::new();
    for (name, devices) in configurations {
        let path = spec_path(dir, domain, name);
        match spec(domain, name, devices) {
            Some(v) => {
                let text = serde_json::to_string_pretty(&v).map_err(std::io::Error::other)?;
                if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
                    continue;
                }
                let tmp = dir.join(format!(
                    ".{}.tmp",
                    path.file_name().unwrap_or_default().to_string_lossy()
                ));
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, &path)?;
                changed.push(path);
            }
            None => match std::fs::remove_file(&path) {
                Ok(()) => changed.push(path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            },
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceNode;
    use crate::testing::device as test_device;

    #[test]
    fn specs_are_written_once_and_removed_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = test_device("0000:3b:00.0", "GPU");
        d.device_nodes = vec![DeviceNode {
            host_path: "/dev/vfio/12".into(),
            container_path: "/dev/vfio/12".into(),
            permissions: "rw".into(),
        }];
        let configs = vec![("gpu".to_string(), vec![("gpu-0a1b2c3d".to_string(), d)])];
        let written = write_specs(dir.path(), "accel.dev", &configs).unwrap();
        let path = dir.path().join("accel-accel.dev-gpu.json");
        assert_eq!(written, vec![path.clone()]);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({
                "cdiVersion": "0.6.0",
                "kind": "accel.dev/gpu",
                "devices": [{
                    "name": "gpu-0a1b2c3d",
                    "containerEdits": {
                        "env": ["ACCEL_DEVICE_GPU_0A1B2C3D=0000:3b:00.0"],
                        "deviceNodes": [{"path": "/dev/vfio/12", "hostPath": "/dev/vfio/12",
                                         "permissions": "rw"}],
                    },
                }],
            })
        );
        assert!(write_specs(dir.path(), "accel.dev", &configs)
            .unwrap()
            .is_empty());
        let none = vec![("gpu".to_string(), vec![])];
        assert_eq!(
            write_specs(dir.path(), "accel.dev", &none).unwrap(),
            vec![path.clone()]
        );
        assert!(!path.exists());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
