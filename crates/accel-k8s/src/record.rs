//! How the server's record fails, as the plugins and the DRA driver see it. The record
//! (slot usage, DRA claims, the devices VMs hold) is a seam the agent implements over
//! the accelerator API: its errors are the agent's, so they travel boxed as the cause,
//! and the one answer this crate words itself (a refusal kubelet reads) is a variant.

/// A boxed cause from the other side of a seam.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a read or a write of the record failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The server answered and refused (a device a VM or another pod holds); the
    /// message is the server's, as kubelet shows it for the claim.
    #[error("{message}")]
    Refused { status: u16, message: String },
    /// The record holds a slot usage that is not seed 001's string.
    #[error("saved usage of {slot}: {source}")]
    BadUsage {
        slot: String,
        #[source]
        source: crate::slots::ParseUsageError,
    },
    /// The server was not reached, or its answer not read: the client's own error.
    #[error(transparent)]
    Unavailable(BoxError),
}

impl RecordError {
    /// The client's error as the cause.
    pub fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> RecordError {
        RecordError::Unavailable(Box::new(e))
    }
}
