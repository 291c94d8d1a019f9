//! The generated kubelet APIs (from `proto/third_party/`, compiled in `build.rs`).
//! Nothing outside `plugin`, `kubelet` and the tests touches these types.

/// `deviceplugin/v1beta1`: Registration (kubelet's) and DevicePlugin (ours).
pub mod deviceplugin {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("v1beta1");
}

/// `podresources/v1`: kubelet's PodResourcesLister (we are the client).
pub mod podresources {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("v1");
}
