//! The stand-in Kubernetes API server of the DRA tests: accel-k8s's own
//! (`accel_k8s::testing::kube`, feature `testing`), which serves or drops device
//! taints, answers dry runs and keeps each slice for the schema check.
pub use accel_k8s::testing::kube::*;
