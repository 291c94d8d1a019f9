//! Generates the kubelet APIs into OUT_DIR from `proto/third_party/` (kubelet's own
//! `.proto` files, kept as upstream ships them) with protox (pure Rust, no `protoc`)
//! and tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/third_party/deviceplugin/v1beta1/api.proto",
        "proto/third_party/podresources/v1/api.proto",
        "proto/third_party/dra/v1/api.proto",
        "proto/third_party/dra/v1beta1/api.proto",
        "proto/third_party/pluginregistration/v1/api.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto/third_party"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
