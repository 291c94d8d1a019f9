//! The DRA driver's counters (issue 43), as kubelet's calls move them.

use accel_k8s::proto::dra_v1 as v1;

/// The DRA families move with each call: a prepare done, one failed (a claim the
/// API server does not have), an unprepare.
pub async fn dra_counts(
    registry: &prometheus_client::registry::Registry,
    k: &v1::dra_plugin_client::DraPluginClient<tonic::transport::Channel>,
    uid: &str,
) {
    use accel_k8s::testing::sample;
    let mut k = k.clone();
    let prepared = r#"accel_dra_prepares_total{outcome="prepared"}"#;
    let failed = r#"accel_dra_prepares_total{outcome="failed"}"#;
    let unprepared = r#"accel_dra_unprepares_total{outcome="unprepared"}"#;
    assert_eq!(sample(registry, prepared), Some(1.0));
    assert_eq!(sample(registry, failed), None);
    assert_eq!(
        sample(registry, "accel_dra_prepare_duration_seconds_count"),
        Some(1.0)
    );
    let gone = "0b0e5b1c-1111-4c4c-9d9d-000000000009";
    let got = k
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: vec![v1::Claim {
                namespace: "ns".into(),
                uid: gone.into(),
                name: "gone".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(got.claims[gone].error.contains("gone not found"), "{got:?}");
    assert_eq!(sample(registry, failed), Some(1.0));
    assert_eq!(sample(registry, prepared), Some(1.0));
    assert_eq!(sample(registry, unprepared), None);
    let got = k
        .node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
            claims: vec![v1::Claim {
                namespace: "ns".into(),
                uid: uid.into(),
                name: "c".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.claims[uid].error, "");
    assert_eq!(sample(registry, unprepared), Some(1.0));
    assert_eq!(
        sample(registry, "accel_dra_unprepare_duration_seconds_count"),
        Some(1.0)
    );
}
