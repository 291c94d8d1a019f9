//! A gRPC channel over a unix socket: how this crate dials kubelet (registration,
//! pod-resources) and how tests dial the plugins. Its own module so that the plugins
//! (which ask pod-resources) and the registrar (which serves the plugins) both use it
//! without importing each other. [`CallError`] is how a call to kubelet fails.

use hyper_util::rt::TokioIo;
use std::path::Path;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel over the unix socket at `path`. The `:authority` is `localhost`, as
/// kubelet itself sends since Kubernetes 1.26.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

/// Why a call to kubelet (Register, pod-resources List) failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("connect: {0}")]
    Connect(#[source] tonic::transport::Error),
    /// Kubelet answered with an error status (the call's name, its message).
    #[error("{call}: {}", .status.message())]
    Refused {
        call: &'static str,
        #[source]
        status: tonic::Status,
    },
    /// No answer in time (`what` timed out).
    #[error("{0} timed out")]
    TimedOut(&'static str),
}
