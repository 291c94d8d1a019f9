//! How the DRA seams and the driver fail. Kubelet reads a claim's error as text in its
//! NodePrepareResources answer, so every variant words itself as the driver always
//! has; the cause travels as the source.

use crate::record::{BoxError, RecordError};
use std::path::PathBuf;

/// Why a call to the Kubernetes API server failed (the claim and slice seams). The
/// agent's client implements the seams: its own errors are the cause of `Client`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server answered with an error status; `call` is `<method> <url>`.
    #[error("{call}: {status}: {message}")]
    Status {
        call: String,
        status: http::StatusCode,
        message: String,
    },
    /// No answer, or none that reads as the object asked for: connection, TLS,
    /// credentials, a watch that ended without an event, a Node without uid.
    #[error(transparent)]
    Client(BoxError),
}

impl ApiError {
    /// The client's error as the cause.
    pub fn client(e: impl std::error::Error + Send + Sync + 'static) -> ApiError {
        ApiError::Client(Box::new(e))
    }
}

/// Why a claim was not prepared or unprepared: the words kubelet shows for it.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(
        "ResourceClaim {namespace}/{name} has uid {found:?}, not {want} (deleted and re-created?)"
    )]
    UidDiffers {
        namespace: String,
        name: String,
        found: String,
        want: String,
    },
    #[error("ResourceClaim {namespace}/{name} is not allocated")]
    NotAllocated { namespace: String, name: String },
    #[error("ResourceClaim {namespace}/{name} has device {device} of pool {pool:?}, not of this node {node:?}")]
    OtherPool {
        namespace: String,
        name: String,
        device: String,
        pool: String,
        node: String,
    },
    #[error("ResourceClaim {namespace}/{name} has no device of driver {driver}")]
    NoDevice {
        namespace: String,
        name: String,
        driver: String,
    },
    #[error("discovering the node's devices failed: {0}")]
    Discovery(#[source] tokio::task::JoinError),
    #[error("device {0} is not on this node (gone?)")]
    NotOnNode(String),
    #[error("device {0} matches no [[kubernetes.configurations]]")]
    NoConfiguration(String),
    /// The server refused to hold the devices (a VM or another pod has one), or was
    /// not reached.
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("writing the CDI spec of claim {uid}: {source}")]
    WriteCdi {
        uid: String,
        #[source]
        source: std::io::Error,
    },
    #[error("removing {}: {source}", .path.display())]
    RemoveCdi {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The MIG device a claim was allocated could not be made (issue 45): the slot is
    /// taken (another claim, a VM, or a device the operator made), or NVML failed.
    #[error("creating MIG device {device} for claim {uid} failed: {source}")]
    MigCreate {
        device: String,
        uid: String,
        #[source]
        source: BoxError,
    },
    /// The claim's MIG devices were not destroyed (or their cleaning failed).
    #[error("releasing the MIG devices of claim {uid} failed: {source}")]
    MigRelease {
        uid: String,
        #[source]
        source: BoxError,
    },
    #[error("device {0} is a MIG device, and this node's driver has no NVML to make it")]
    NoPartitioner(String),
    /// The VFIO form of a GPU is for a VM (KubeVirt); a pod's claim cannot use it here.
    #[error("device {0} is a GPU's VFIO form: binding it to vfio-pci for a claim is not done by this driver yet")]
    VfioForm(String),
    /// The claim's task ended without an answer (`doing`: preparing, unpreparing).
    #[error("{doing} the claim failed: {source}")]
    Task {
        doing: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn kubelet_reads_the_same_words_and_the_cause_is_carried() {
        let refused = RecordError::Refused {
            status: 409,
            message: "device 0000:17:00.0 is held by a virtual machine".into(),
        };
        assert_eq!(
            ClaimError::from(refused).to_string(),
            "device 0000:17:00.0 is held by a virtual machine"
        );
        let e = ClaimError::WriteCdi {
            uid: "u".into(),
            source: std::io::Error::other("disk full"),
        };
        assert_eq!(e.to_string(), "writing the CDI spec of claim u: disk full");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("disk full")
        );
        let e = ClaimError::from(ApiError::Status {
            call: "GET http://k/x".into(),
            status: http::StatusCode::NOT_FOUND,
            message: "x not found".into(),
        });
        assert_eq!(e.to_string(), "GET http://k/x: 404 Not Found: x not found");
    }
}
