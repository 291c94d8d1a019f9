//! The generated kubelet APIs (from `proto/third_party/`, compiled in `build.rs`).
//! Nothing outside `plugin`, `kubelet`, `dra` and the tests touches these types.

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

/// `dra/v1`: the DRAPlugin service (ours; kubelet >= 1.34 calls it).
pub mod dra_v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// `dra/v1beta1`: the same service as kubelets before 1.34 call it.
pub mod dra_v1beta1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// `pluginregistration` (v1): how kubelet's plugin watcher learns of a DRA driver.
pub mod registration {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("pluginregistration");
}
