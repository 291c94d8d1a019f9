//! `partitions.json` in the agent's state directory: the MIG instances and mdevs this
//! agent created and who holds each, with the boot they were created in. It is what
//! lets the agent tell its own partitions from an operator's, find a partition by its
//! UUID on release, and know after a start whether the node rebooted (MIG layouts and
//! mdevs do not survive one). Written whole to a temporary file and renamed over the
//! old, so a crash leaves the old or the new, never half of one.

use super::PartitionError;
use accel_api::partitions::MigInstance;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A MIG device the agent created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldMig {
    /// The GPU's PCI address (`0000:3b:00.0`).
    pub gpu: String,
    /// Who it was made for (the claim, ARQ or allocation the server named).
    pub holder: String,
    #[serde(flatten)]
    pub instance: MigInstance,
}

/// An mdev the agent created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldMdev {
    /// The parent function's PCI address.
    pub parent: String,
    pub type_id: String,
    pub uuid: String,
    pub holder: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The boot the partitions below were created in.
    #[serde(default)]
    pub boot_id: String,
    #[serde(default)]
    pub mig: Vec<HeldMig>,
    #[serde(default)]
    pub mdevs: Vec<HeldMdev>,
}

impl Checkpoint {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("partitions.json")
    }

    fn error(path: &Path, cause: impl std::fmt::Display) -> PartitionError {
        PartitionError::Checkpoint {
            path: path.display().to_string(),
            cause: cause.to_string(),
        }
    }

    /// The checkpoint in `state_dir`; an empty one when there is none yet. A file
    /// that cannot be read or parsed is an error: starting from nothing would forget
    /// partitions that exist.
    pub fn load(state_dir: &Path) -> Result<Checkpoint, PartitionError> {
        let path = Checkpoint::path(state_dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| Checkpoint::error(&path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Checkpoint::default()),
            Err(e) => Err(Checkpoint::error(&path, e)),
        }
    }

    pub fn save(&self, state_dir: &Path) -> Result<(), PartitionError> {
        let path = Checkpoint::path(state_dir);
        std::fs::create_dir_all(state_dir).map_err(|e| Checkpoint::error(state_dir, e))?;
        let text = serde_json::to_string_pretty(self).map_err(|e| Checkpoint::error(&path, e))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n").map_err(|e| Checkpoint::error(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Checkpoint::error(&path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_api::partitions::MigPlacement;

    #[test]
    fn a_checkpoint_round_trips_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        assert_eq!(Checkpoint::load(&state).unwrap(), Checkpoint::default());
        let cp = Checkpoint {
            boot_id: "b1".into(),
            mig: vec![HeldMig {
                gpu: "0000:3b:00.0".into(),
                holder: "claim-1".into(),
                instance: MigInstance {
                    profile_id: 19,
                    placement: MigPlacement { start: 3, size: 1 },
                    gpu_instance_id: 4,
                    compute_instance_id: 0,
                    uuid: "MIG-1".into(),
                },
            }],
            mdevs: vec![HeldMdev {
                parent: "0000:5e:00.0".into(),
                type_id: "nvidia-1122".into(),
                uuid: "u".into(),
                holder: "arq".into(),
            }],
        };
        cp.save(&state).unwrap();
        let text = std::fs::read_to_string(Checkpoint::path(&state)).unwrap();
        assert!(text.contains("\"profile_id\": 19"), "{text}");
        assert_eq!(Checkpoint::load(&state).unwrap(), cp);
        std::fs::write(Checkpoint::path(&state), "{not json").unwrap();
        let e = Checkpoint::load(&state).unwrap_err().to_string();
        assert!(e.contains("partitions.json"), "{e}");
    }
}
