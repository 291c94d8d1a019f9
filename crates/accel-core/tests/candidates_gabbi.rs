//! The allocation-candidate expectations of upstream's gabbi files, replayed against the
//! engine on the same fixtures (built in `candidates_world.rs`). Each test names the
//! gabbit file; counts of candidates and provider summaries are what those files check,
//! plus the amounts they list. Request parsing and validation (400s) belong to the
//! server and are not repeated here.

#[path = "candidates_world.rs"]
mod world;

use accel_core::candidates::Outcome;
use world::*;

/// Run `qs` and assert the number of candidates and, if given, of summaries.
fn check(w: &mut World, qs: &str, nested: bool, n: usize, summaries: Option<usize>) -> Outcome {
    let out = w.run(qs, nested);
    let shown: Vec<String> = out.candidates.iter().map(|c| w.show(c)).collect();
    assert_eq!(out.candidates.len(), n, "{qs}: got {shown:#?}");
    if let Some(s) = summaries {
        assert_eq!(
            out.summary_providers.len(),
            s,
            "{qs}: summaries of {shown:#?}"
        );
    }
    out
}

// ---- allocation-candidates.yaml (SharedStorageFixture) ----

#[test]
fn shared_storage_basic_combinations() {
    let mut w = shared_storage();
    let q = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100";
    let out = check(&mut w, q, false, 5, Some(4));
    assert_eq!(w.amounts(&out, "cn1", "VCPU"), [1, 1]);
    assert_eq!(w.amounts(&out, "cn1", "DISK_GB"), Vec::<i64>::new());
    assert_eq!(w.amounts(&out, "cn2", "VCPU"), [1, 1, 1]);
    assert_eq!(w.amounts(&out, "cn2", "DISK_GB"), [100]);
    assert_eq!(w.amounts(&out, "ss", "DISK_GB"), [100, 100]);
    assert_eq!(w.amounts(&out, "ss2", "DISK_GB"), [100, 100]);
    check(&mut w, &format!("{q}&limit=1"), false, 1, None);
    check(&mut w, &format!("{q}&limit=10"), false, 5, None);
}

#[test]
fn shared_storage_required_and_forbidden_traits() {
    let mut w = shared_storage();
    let q = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100";
    check(
        &mut w,
        &format!("{q}&required=HW_CPU_X86_SSE"),
        false,
        2,
        Some(3),
    );
    check(
        &mut w,
        &format!("{q}&required=HW_CPU_X86_SSE,HW_CPU_X86_SSE2"),
        false,
        2,
        Some(3),
    );
    check(
        &mut w,
        &format!("{q}&required=HW_CPU_X86_SSE3"),
        false,
        0,
        Some(0),
    );
    let out = check(
        &mut w,
        &format!("{q}&required=!HW_CPU_X86_SSE"),
        false,
        3,
        None,
    );
    assert_eq!(w.amounts(&out, "cn2", "VCPU"), [1, 1, 1]);
    assert_eq!(w.amounts(&out, "ss", "DISK_GB"), [100]);
}

#[test]
fn shared_storage_nested_summaries_and_old_microversions() {
    let mut w = shared_storage();
    check(&mut w, "resources=VCPU:1", false, 2, Some(2));
    check(&mut w, "resources=VCPU:1", true, 2, Some(10));
    check(&mut w, "resources=SRIOV_NET_VF:4", false, 4, Some(4));
    check(&mut w, "resources=SRIOV_NET_VF:4", true, 4, Some(10));
    check(&mut w, "resources=VCPU:1,SRIOV_NET_VF:4", false, 0, Some(0));
    let out = check(&mut w, "resources=VCPU:1,SRIOV_NET_VF:4", true, 4, Some(10));
    assert_eq!(w.amounts(&out, "cn1", "VCPU"), [1, 1]);
    assert_eq!(w.amounts(&out, "pf2_2", "SRIOV_NET_VF"), [4]);
    let out = check(
        &mut w,
        "resources=VCPU:1,SRIOV_NET_VF:4&limit=1",
        true,
        1,
        Some(5),
    );
    assert_eq!(out.candidates[0].allocations.len(), 2);
    check(
        &mut w,
        "resources=DISK_GB:10,SRIOV_NET_VF:4",
        false,
        8,
        Some(6),
    );
}

#[test]
fn shared_storage_in_tree() {
    let mut w = shared_storage();
    check(
        &mut w,
        "resources=VCPU:1,SRIOV_NET_VF:4&in_tree=cn1",
        true,
        2,
        Some(5),
    );
    check(
        &mut w,
        "resources=VCPU:1,SRIOV_NET_VF:4&in_tree=pf1_2",
        true,
        2,
        Some(5),
    );
    check(
        &mut w,
        "resources=VCPU:1,DISK_GB:10&in_tree=cn1",
        true,
        0,
        None,
    );
    let out = check(
        &mut w,
        "resources=VCPU:1,DISK_GB:10&in_tree=cn2",
        true,
        1,
        None,
    );
    assert_eq!(w.amounts(&out, "cn2", "DISK_GB"), [10]);
    check(
        &mut w,
        "resources=VCPU:1,DISK_GB:10&in_tree=ss",
        true,
        0,
        None,
    );
    check(&mut w, "resources1=VCPU:1&in_tree1=cn1", true, 1, None);
    let out = check(&mut w, "resources1=VCPU:1&in_tree1=pf1_1", true, 1, None);
    assert_eq!(w.amounts(&out, "cn1", "VCPU"), [1]);
    check(
        &mut w,
        "resources1=SRIOV_NET_VF:4&in_tree1=cn1",
        true,
        2,
        None,
    );
    check(
        &mut w,
        "resources1=SRIOV_NET_VF:4&in_tree1=pf1_1",
        true,
        2,
        None,
    );
    check(
        &mut w,
        "resources=VCPU:1&resources1=DISK_GB:10&in_tree1=cn1",
        true,
        0,
        None,
    );
    check(
        &mut w,
        "resources=VCPU:1&resources1=DISK_GB:10&in_tree1=cn2",
        true,
        1,
        None,
    );
    let out = check(
        &mut w,
        "resources=VCPU:1&resources1=DISK_GB:10&in_tree1=ss",
        true,
        2,
        None,
    );
    assert_eq!(w.amounts(&out, "ss", "DISK_GB"), [10, 10]);
    let out = check(
        &mut w,
        "resources=VCPU:1&in_tree=cn1&resources1=DISK_GB:10",
        true,
        2,
        None,
    );
    assert_eq!(w.amounts(&out, "ss2", "DISK_GB"), [10]);
    check(
        &mut w,
        "resources=VCPU:1&in_tree=cn2&resources1=DISK_GB:10",
        true,
        3,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1&in_tree1=cn1&resources2=DISK_GB:10&in_tree2=ss&group_policy=none",
        true,
        1,
        None,
    );
}

// ---- granular.yaml (GranularFixture, 1.25) ----

#[test]
fn granular_policies_and_combining() {
    let mut w = granular();
    check(
        &mut w,
        "resources1=VCPU:1&resources2=MEMORY_MB:1024&group_policy=none",
        true,
        3,
        Some(3),
    );
    check(
        &mut w,
        "resources1=VCPU:1&resources2=MEMORY_MB:1024&group_policy=isolate",
        true,
        0,
        Some(0),
    );
    let out = check(
        &mut w,
        "resources=VCPU:3,MEMORY_MB:512&resources1=VCPU:1,MEMORY_MB:1024&resources2=VCPU:2&group_policy=none",
        true,
        3,
        Some(3),
    );
    assert_eq!(w.amounts(&out, "cn_middle", "VCPU"), [6]);
    assert_eq!(w.amounts(&out, "cn_right", "MEMORY_MB"), [1536]);
    check(
        &mut w,
        "resources=VCPU:1&resources1=MEMORY_MB:2048",
        true,
        3,
        Some(3),
    );
}

#[test]
fn granular_sharing() {
    let mut w = granular();
    let q = "resources1=VCPU:1,MEMORY_MB:1024&resources2=DISK_GB:100";
    check(
        &mut w,
        &format!("{q}&group_policy=isolate"),
        true,
        5,
        Some(5),
    );
    check(&mut w, &format!("{q}&group_policy=none"), true, 7, Some(5));
    let out = check(&mut w, "resources1=DISK_GB:800", true, 2, Some(2));
    assert_eq!(w.amounts(&out, "shr_disk_1", "DISK_GB"), [800]);
    check(&mut w, "resources=DISK_GB:800", true, 2, Some(2));
    let out = check(
        &mut w,
        &format!("{q}&required2=CUSTOM_DISK_SSD&group_policy=isolate"),
        true,
        2,
        Some(3),
    );
    assert_eq!(w.amounts(&out, "shr_disk_1", "DISK_GB"), [100, 100]);
    let out = check(
        &mut w,
        "resources1=VCPU:1&resources2=DISK_GB:100&required2=!CUSTOM_DISK_SSD&group_policy=none",
        true,
        4,
        Some(4),
    );
    assert_eq!(w.amounts(&out, "cn_left", "VCPU"), [1, 1]);
    assert_eq!(w.amounts(&out, "shr_disk_2", "DISK_GB"), [100, 100, 100]);
}

#[test]
fn granular_member_of() {
    let mut w = granular();
    let out = check(
        &mut w,
        "resources1=VCPU:1&resources2=DISK_GB:100&member_of2=aggC&group_policy=none",
        true,
        1,
        Some(1),
    );
    assert_eq!(w.amounts(&out, "cn_right", "DISK_GB"), [100]);
    check(
        &mut w,
        "resources1=VCPU:1&required1=!HW_CPU_X86_SSE&resources2=DISK_GB:100&required2=CUSTOM_DISK_SSD&member_of2=in:aggA,aggC&group_policy=none",
        true,
        2,
        Some(3),
    );
    check(
        &mut w,
        "resources_compute=VCPU:1&required_compute=!HW_CPU_X86_SSE&resources_disk=DISK_GB:100&required_disk=CUSTOM_DISK_SSD&member_of_disk=in:aggA,aggC&group_policy=none",
        true,
        2,
        Some(3),
    );
    let out = check(
        &mut w,
        "resources1=VCPU:1&resources2=DISK_GB:100&member_of2=in:aggB,aggC&member_of2=aggA&group_policy=isolate",
        true,
        3,
        Some(4),
    );
    assert_eq!(w.amounts(&out, "shr_disk_2", "DISK_GB"), [100, 100, 100]);
}

#[test]
fn granular_many_groups_and_capacity_rechecks() {
    let mut w = granular();
    let out = check(
        &mut w,
        "resources1=VCPU:1&resources2=VGPU:1&required2=HW_GPU_API_DXVA&resources3=MEMORY_MB:1024\
         &resources4=DISK_GB:100&required4=CUSTOM_DISK_SSD&resources5=DISK_GB:50&required5=!CUSTOM_DISK_SSD\
         &resources6=SRIOV_NET_VF:1,CUSTOM_NET_MBPS:1000&resources7=SRIOV_NET_VF:2,CUSTOM_NET_MBPS:2000\
         &group_policy=none",
        true,
        3,
        Some(5),
    );
    assert_eq!(w.amounts(&out, "cn_left", "SRIOV_NET_VF"), [3, 3]);
    assert_eq!(w.amounts(&out, "cn_left", "DISK_GB"), [50]);
    assert_eq!(w.amounts(&out, "shr_disk_2", "DISK_GB"), [50, 50]);
    assert_eq!(w.amounts(&out, "shr_net", "CUSTOM_NET_MBPS"), [3000]);
    assert_eq!(w.amounts(&out, "cn_right", "DISK_GB"), [100]);

    let out = check(
        &mut w,
        "resources=VCPU:2,MEMORY_MB:2048,SRIOV_NET_VF:1,CUSTOM_NET_MBPS:2000&resources1=SRIOV_NET_VF:1,CUSTOM_NET_MBPS:3000",
        true,
        1,
        Some(2),
    );
    assert_eq!(w.amounts(&out, "shr_net", "CUSTOM_NET_MBPS"), [5000]);
    assert_eq!(w.amounts(&out, "shr_net", "SRIOV_NET_VF"), [2]);
    let out = check(
        &mut w,
        "resources=VGPU:1&resources1=VGPU:1&resources2=VGPU:1&group_policy=none",
        true,
        1,
        Some(1),
    );
    assert_eq!(w.amounts(&out, "cn_left", "VGPU"), [3]);
}

// ---- allocation-candidates-any-traits.yaml (GranularFixture, latest) ----

#[test]
fn any_traits() {
    let mut w = granular();
    let out = check(
        &mut w,
        "required=in:HW_GPU_API_DXVA,HW_NIC_ACCEL_TLS&required=HW_CPU_X86_AVX,!CUSTOM_FOO&resources=VCPU:1,DISK_GB:1",
        true,
        2,
        None,
    );
    assert_eq!(w.amounts(&out, "cn_middle", "VCPU"), [1, 1]);
    let out = check(
        &mut w,
        "required=in:HW_CPU_X86_MMX,HW_NIC_ACCEL_TLS&required=in:CUSTOM_DISK_SSD,CUSTOM_FOO&resources=VCPU:1,DISK_GB:1",
        true,
        3,
        None,
    );
    assert_eq!(w.amounts(&out, "cn_right", "VCPU"), [1, 1]);
    assert_eq!(w.amounts(&out, "shr_disk_1", "DISK_GB"), [1]);
    // <= 1.38 keeps only the last `required`: one provider has MMX.
    check(
        &mut w,
        "required=HW_CPU_X86_MMX&resources=VCPU:1",
        true,
        1,
        None,
    );
}

// ---- allocation-candidates-mappings-sharing.yaml (GranularFixture, 1.34) ----

#[test]
fn mappings_with_sharing() {
    let mut w = granular();
    let out = check(
        &mut w,
        "resources=VCPU:1&required=HW_CPU_X86_SSE",
        true,
        1,
        Some(1),
    );
    assert_eq!(w.mapping(&out.candidates[0], ""), [w.id("cn_middle")]);
    let out = check(
        &mut w,
        "resources=VCPU:1,DISK_GB:1&required=HW_CPU_X86_SSE",
        true,
        2,
        Some(3),
    );
    for c in &out.candidates {
        assert_eq!(c.mappings.len(), 1);
        assert_eq!(w.mapping(c, "").len(), 2);
    }
    // Same allocations, swapped granular groups: both are returned.
    let out = check(
        &mut w,
        "resources=VCPU:1&resources_DISK_A=DISK_GB:1&resources_DISK_B=DISK_GB:1&required=HW_CPU_X86_SSE&group_policy=isolate",
        true,
        2,
        Some(3),
    );
    assert_eq!(out.candidates[0].allocations, out.candidates[1].allocations);
    assert_ne!(out.candidates[0].mappings, out.candidates[1].mappings);
}

// ---- allocation-candidates-mappings-numa.yaml (NUMANetworkFixture, 1.34) ----

#[test]
fn mappings_numa() {
    let mut w = numa_network(false);
    let out = check(&mut w, "resources=VCPU:1", true, 3, Some(23));
    let vcpu = [w.id("cn2"), w.id("numa0"), w.id("numa1")];
    for c in &out.candidates {
        assert!(vcpu.contains(&w.mapping(c, "")[0]));
    }
    check(
        &mut w,
        "resources_LEFT=VCPU:1&resources_RIGHT=VCPU:1&group_policy=isolate",
        true,
        2,
        Some(12),
    );
    let out = check(
        &mut w,
        "required_NET1=CUSTOM_PHYSNET1&resources_NET1=NET_BW_EGR_KILOBIT_PER_SEC:10&required_NET2=CUSTOM_PHYSNET2\
         &resources_NET2=NET_BW_EGR_KILOBIT_PER_SEC:20&resources=VCPU:1&group_policy=isolate",
        true,
        2,
        Some(12),
    );
    for c in &out.candidates {
        assert_eq!(c.mappings.len(), 3);
        assert_eq!(w.mapping(c, "_NET1"), [w.id("esn1")]);
        assert_eq!(w.mapping(c, "_NET2"), [w.id("esn2")]);
    }
    let out = check(
        &mut w,
        "resources_BWA=NET_BW_EGR_KILOBIT_PER_SEC:10&required_BWA=CUSTOM_PHYSNET1\
         &resources_BWB=NET_BW_EGR_KILOBIT_PER_SEC:20&required_BWB=CUSTOM_PHYSNET1&group_policy=none",
        true,
        1,
        Some(12),
    );
    assert_eq!(w.mapping(&out.candidates[0], "_BWA"), [w.id("esn1")]);
    assert_eq!(w.mapping(&out.candidates[0], "_BWB"), [w.id("esn1")]);
    assert_eq!(w.amounts(&out, "esn1", "NET_BW_EGR_KILOBIT_PER_SEC"), [30]);
    check(
        &mut w,
        "required_NET1=CUSTOM_PHYSNET1&resources_NET1=NET_BW_EGR_KILOBIT_PER_SEC:10&required_NET2=CUSTOM_PHYSNET2\
         &resources_NET2=NET_BW_EGR_KILOBIT_PER_SEC:20&resources_COMPUTE=VCPU:1,MEMORY_MB:1024&group_policy=isolate",
        true,
        2,
        Some(12),
    );
}

// ---- allocation-candidates-bug-1792503.yaml (NUMAAggregateFixture, 1.32) ----

#[test]
fn aggregates_on_roots_span_trees() {
    let mut w = numa_aggregate();
    check(&mut w, "resources=VCPU:1", true, 4, None);
    check(&mut w, "resources=VCPU:1&member_of=aggA", true, 4, None);
    check(&mut w, "resources1=VCPU:1&member_of1=aggA", true, 0, None);
    check(&mut w, "resources=VCPU:1&member_of=aggB", true, 2, None);
    let out = check(&mut w, "resources=VCPU:1&member_of=aggC", true, 1, None);
    assert_eq!(w.amounts(&out, "numa1_1", "VCPU"), [1]);
    check(&mut w, "resources1=VCPU:1&member_of1=aggC", true, 1, None);
}

#[test]
fn aggregates_with_sharing() {
    let mut w = numa_aggregate();
    let q = "resources=VCPU:1,DISK_GB:1000";
    let out = check(&mut w, q, true, 6, None);
    assert_eq!(w.amounts(&out, "numa1_2", "VCPU"), [1, 1]);
    assert_eq!(w.amounts(&out, "ss2", "DISK_GB"), [1000, 1000]);
    check(&mut w, &format!("{q}&member_of=aggA"), true, 4, None);
    check(&mut w, &format!("{q}&member_of=aggB"), true, 0, None);
    let out = check(&mut w, &format!("{q}&member_of=aggC"), true, 1, None);
    assert_eq!(w.amounts(&out, "ss2", "DISK_GB"), [1000]);
    check(&mut w, &format!("{q}&member_of=!aggA"), true, 0, None);
    check(&mut w, &format!("{q}&member_of=!aggB"), true, 4, None);
    check(&mut w, &format!("{q}&member_of=!aggC"), true, 3, None);
    check(
        &mut w,
        &format!("{q}&member_of=in:aggA,aggB&member_of=!aggC"),
        true,
        3,
        None,
    );
    let out = check(
        &mut w,
        &format!("{q}&member_of=aggA&member_of=!in:aggB,aggC"),
        true,
        1,
        None,
    );
    assert_eq!(w.amounts(&out, "numa1_2", "VCPU"), [1]);
}

// ---- allocation-candidates-member-of.yaml (NonSharedStorageFixture) ----

#[test]
fn member_of_any_and_all() {
    let mut w = non_shared_storage();
    let q = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100";
    check(&mut w, &format!("{q}&member_of=aggA"), false, 0, None);
    w.set_aggs("cn1", &["aggA"]);
    check(
        &mut w,
        &format!("{q}&member_of=in:aggA,aggB"),
        false,
        1,
        None,
    );
    w.set_aggs("cn2", &["aggB"]);
    check(
        &mut w,
        &format!("{q}&member_of=in:aggA,aggB"),
        false,
        2,
        None,
    );
    check(&mut w, &format!("{q}&member_of=aggC"), false, 0, None);
    w.set_aggs("cn1", &["aggA", "aggC"]);
    check(
        &mut w,
        &format!("{q}&member_of=in:aggA,aggB"),
        false,
        2,
        None,
    );
    check(
        &mut w,
        &format!("{q}&member_of=aggA&member_of=aggB"),
        false,
        0,
        None,
    );
    w.set_aggs("cn2", &["aggA", "aggB"]);
    check(
        &mut w,
        &format!("{q}&member_of=aggA&member_of=aggB"),
        false,
        1,
        None,
    );

    check(&mut w, "resources=VCPU:1&member_of=!aggC", true, 2, Some(2));
    let out = check(
        &mut w,
        "resources=VCPU:1&member_of=!in:aggB,aggC",
        true,
        1,
        Some(1),
    );
    assert_eq!(w.amounts(&out, "cn3", "VCPU"), [1]);
    let out = check(
        &mut w,
        "resources=VCPU:1&member_of=!aggB&member_of=aggC",
        true,
        1,
        Some(1),
    );
    assert_eq!(w.amounts(&out, "cn1", "VCPU"), [1]);
    check(
        &mut w,
        "resources=VCPU:1&member_of=!in:aggB,aggC&member_of=aggA",
        true,
        0,
        Some(0),
    );
    check(
        &mut w,
        "resources=VCPU:1&member_of=!aggB&member_of=in:aggB,aggC",
        true,
        1,
        Some(1),
    );
    check(
        &mut w,
        "resources=VCPU:1&member_of=!aggB&member_of=aggB",
        true,
        0,
        Some(0),
    );
}

// ---- allocation-candidates-root-required.yaml (NUMANetworkFixture, 1.35) ----

#[test]
fn root_required() {
    let mut w = numa_network(false);
    let all = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100";
    check(
        &mut w,
        "resources=VCPU:1&root_required=HW_NUMA_ROOT",
        true,
        0,
        None,
    );
    check(
        &mut w,
        &format!("{all}&root_required=MISC_SHARES_VIA_AGGREGATE"),
        true,
        0,
        None,
    );
    check(
        &mut w,
        &format!("{all}&root_required=HW_NUMA_ROOT"),
        true,
        0,
        None,
    );
    check(
        &mut w,
        &format!("{all}&root_required=HW_CPU_X86_AVX2"),
        true,
        0,
        None,
    );
    let out = check(
        &mut w,
        "resources=VCPU:1,MEMORY_MB:1024&root_required=COMPUTE_VOLUME_MULTI_ATTACH",
        true,
        4,
        None,
    );
    assert_eq!(w.amounts(&out, "numa0", "VCPU"), [1, 1]);
    check(
        &mut w,
        "resources1=VCPU:1&resources2=MEMORY_MB:1024&group_policy=none&root_required=COMPUTE_VOLUME_MULTI_ATTACH",
        true,
        4,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1&resources2=MEMORY_MB:1024&group_policy=isolate&root_required=COMPUTE_VOLUME_MULTI_ATTACH",
        true,
        2,
        None,
    );
    check(
        &mut w,
        &format!("{all}&root_required=COMPUTE_VOLUME_MULTI_ATTACH"),
        true,
        4,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1,MEMORY_MB:1024&resources2=DISK_GB:100&group_policy=none&root_required=COMPUTE_VOLUME_MULTI_ATTACH",
        true,
        2,
        None,
    );
    let out = check(
        &mut w,
        "resources=VCPU:1,DISK_GB:100&required=CUSTOM_FOO",
        true,
        3,
        None,
    );
    assert_eq!(w.amounts(&out, "ss1", "DISK_GB"), [100, 100]);
    check(
        &mut w,
        "resources=VCPU:1,DISK_GB:100&root_required=CUSTOM_FOO",
        true,
        2,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1&required1=CUSTOM_FOO&resources2=DISK_GB:100&group_policy=none",
        true,
        3,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1&resources2=DISK_GB:100&group_policy=none&root_required=CUSTOM_FOO",
        true,
        2,
        None,
    );
    let out = check(
        &mut w,
        "resources=VCPU:3&root_required=!HW_NUMA_ROOT",
        true,
        2,
        None,
    );
    assert_eq!(w.amounts(&out, "cn2", "VCPU"), [3]);
    let out = check(
        &mut w,
        &format!("{all}&root_required=!MISC_SHARES_VIA_AGGREGATE"),
        true,
        6,
        None,
    );
    assert_eq!(w.amounts(&out, "ss1", "DISK_GB"), [100; 5]);
    check(
        &mut w,
        &format!("{all}&root_required=CUSTOM_FOO,!HW_NUMA_ROOT"),
        true,
        2,
        None,
    );
    check(
        &mut w,
        &format!("{all}&root_required=CUSTOM_FOO,!COMPUTE_VOLUME_MULTI_ATTACH"),
        true,
        2,
        None,
    );
    check(
        &mut w,
        &format!("{all}&root_required=!CUSTOM_FOO,!COMPUTE_VOLUME_MULTI_ATTACH"),
        true,
        0,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1,MEMORY_MB:1024&resources2=DISK_GB:100&group_policy=none&root_required=!CUSTOM_FOO",
        true,
        2,
        None,
    );
    check(
        &mut w,
        "resources=VCPU:1&required=CUSTOM_FOO&root_required=CUSTOM_FOO",
        true,
        1,
        None,
    );
    check(
        &mut w,
        "resources1=VCPU:1&required1=CUSTOM_FOO&root_required=CUSTOM_FOO",
        true,
        1,
        None,
    );
    let out = check(
        &mut w,
        "resources1=VCPU:1&required1=CUSTOM_FOO&root_required=!CUSTOM_FOO",
        true,
        1,
        None,
    );
    assert_eq!(w.amounts(&out, "numa1", "VCPU"), [1]);
    check(
        &mut w,
        "resources1=VCPU:1&required1=!CUSTOM_FOO&root_required=CUSTOM_FOO",
        true,
        0,
        None,
    );
}

// ---- granular-same-subtree.yaml (NUMANetworkFixture, 1.36) ----

#[test]
fn same_subtree_resourceful() {
    let mut w = numa_network(false);
    let q = "resources_COMPUTE=VCPU:1&resources_ACCEL=FPGA:1&group_policy=none";
    check(&mut w, q, true, 6, None);
    check(&mut w, &format!("{q}&same_subtree=_COMPUTE"), true, 6, None);
    let out = check(
        &mut w,
        &format!("{q}&same_subtree=_COMPUTE,_ACCEL"),
        true,
        3,
        None,
    );
    assert_eq!(w.amounts(&out, "numa1", "VCPU"), [1, 1]);
    let q = "resources_COMPUTE1=VCPU:1&resources_COMPUTE2=MEMORY_MB:1024&same_subtree=_COMPUTE1,_COMPUTE2";
    check(&mut w, &format!("{q}&group_policy=none"), true, 3, None);
    check(&mut w, &format!("{q}&group_policy=isolate"), true, 0, None);
    let q = "resources=VCPU:1&resources_PORT1=CUSTOM_VF:4&required_PORT1=CUSTOM_PHYSNET1\
             &resources_PORT2=CUSTOM_VF:4&required_PORT2=CUSTOM_PHYSNET2&group_policy=none";
    let out = check(&mut w, q, true, 2, None);
    assert_eq!(w.amounts(&out, "pf1_2", "CUSTOM_VF"), [4, 4]);
}

#[test]
fn same_subtree_resourceless() {
    let mut w = numa_network(false);
    let ports = |vf: u32| {
        format!(
            "resources=VCPU:1&required_NIC=CUSTOM_HW_NIC_ROOT&resources_PORT1=CUSTOM_VF:{vf}\
             &required_PORT1=CUSTOM_PHYSNET1&resources_PORT2=CUSTOM_VF:{vf}&required_PORT2=CUSTOM_PHYSNET2\
             &same_subtree=_NIC,_PORT1,_PORT2"
        )
    };
    let out = check(
        &mut w,
        &format!("{}&group_policy=none", ports(4)),
        true,
        1,
        None,
    );
    let c = &out.candidates[0];
    assert_eq!(c.allocations.len(), 3);
    assert_eq!(w.mapping(c, "_NIC"), [w.id("nic1")]);
    assert_eq!(w.mapping(c, ""), [w.id("cn2")]);
    assert_eq!(w.mapping(c, "_PORT2"), [w.id("pf1_2")]);
    check(
        &mut w,
        &format!("{}&group_policy=none", ports(2)),
        true,
        5,
        None,
    );
    check(
        &mut w,
        &format!("{}&group_policy=isolate", ports(2)),
        true,
        5,
        None,
    );

    let q = "resources=VCPU:1&required_NIC=CUSTOM_HW_NIC_ROOT&resources_PORT1=CUSTOM_VF:2&required_PORT1=CUSTOM_PHYSNET1\
             &resources_PORT2A=CUSTOM_VF:1&required_PORT2A=CUSTOM_PHYSNET2&resources_PORT2B=CUSTOM_VF:1\
             &required_PORT2B=CUSTOM_PHYSNET2&same_subtree=_NIC,_PORT1,_PORT2A,_PORT2B";
    let out = check(&mut w, &format!("{q}&group_policy=none"), true, 9, None);
    assert_eq!(w.amounts(&out, "pf2_2", "CUSTOM_VF"), [1, 1, 1, 1, 2, 2]);
    let out = check(&mut w, &format!("{q}&group_policy=isolate"), true, 4, None);
    assert_eq!(w.amounts(&out, "pf2_4", "CUSTOM_VF"), [1, 1, 1, 1]);

    let q = "resources_PORT1=CUSTOM_VF:8&required_PORT2=CUSTOM_PHYSNET1&same_subtree=_PORT1,_PORT2";
    let out = check(&mut w, &format!("{q}&group_policy=none"), true, 1, None);
    assert_eq!(w.mapping(&out.candidates[0], "_PORT2"), [w.id("pf3_1")]);
    check(&mut w, &format!("{q}&group_policy=isolate"), true, 0, None);

    let q = "resources_COMPUTE1=VCPU:1&required_COMPUTE2=CUSTOM_FOO&required_COMPUTE3=HW_NUMA_ROOT\
             &same_subtree=_COMPUTE1,_COMPUTE2,_COMPUTE3";
    let out = check(&mut w, &format!("{q}&group_policy=none"), true, 1, None);
    assert_eq!(w.mapping(&out.candidates[0], "_COMPUTE3"), [w.id("numa1")]);
    check(&mut w, &format!("{q}&group_policy=isolate"), true, 0, None);

    let q = "required_NUMA=HW_NUMA_ROOT&resources_ACCEL1=FPGA:1&resources_ACCEL2=FPGA:1&group_policy=isolate";
    let out = check(
        &mut w,
        &format!("{q}&same_subtree=_NUMA,_ACCEL1,_ACCEL2"),
        true,
        2,
        None,
    );
    for c in &out.candidates {
        assert_eq!(w.mapping(c, "_NUMA"), [w.id("numa1")]);
    }
    check(
        &mut w,
        &format!("{q}&same_subtree=_NUMA,_ACCEL1,_ACCEL2,_NUMA,_ACCEL1"),
        true,
        2,
        None,
    );
    check(
        &mut w,
        "required_NUMA=HW_NUMA_ROOT,!CUSTOM_FOO&resources_ACCEL1=FPGA:1&resources_ACCEL2=FPGA:1\
         &same_subtree=_NUMA,_ACCEL1,_ACCEL2&group_policy=isolate",
        true,
        0,
        None,
    );
}

#[test]
fn same_subtree_multiple_and_overlapping() {
    let mut w = numa_network(false);
    let out = check(
        &mut w,
        "required_NUMA=HW_NUMA_ROOT&resources_COMPUTE=VCPU:2,MEMORY_MB:512&resources_FPGA=FPGA:1\
         &resources_GPU=VGPU:1&required_SRIOV=CUSTOM_VNIC_TYPE_DIRECT\
         &resources_NET1=NET_BW_EGR_KILOBIT_PER_SEC:100&required_NET1=CUSTOM_PHYSNET1\
         &resources_NET2=NET_BW_EGR_KILOBIT_PER_SEC:100&required_NET2=CUSTOM_PHYSNET2\
         &same_subtree=_NUMA,_COMPUTE,_GPU,_FPGA&same_subtree=_SRIOV,_NET1,_NET2&group_policy=none",
        true,
        1,
        None,
    );
    let c = &out.candidates[0];
    assert_eq!(w.mapping(c, "_NUMA"), [w.id("numa0")]);
    assert_eq!(w.mapping(c, "_SRIOV"), [w.id("sriov_agent")]);
    assert_eq!(w.mapping(c, "_GPU"), [w.id("pgpu0")]);
    assert_eq!(c.allocations.len(), 6);

    let q = "resources_COMPUTE=VCPU:1&required_NIC=CUSTOM_HW_NIC_ROOT&resources_PORT1=CUSTOM_VF:2\
             &required_PORT1=CUSTOM_PHYSNET1&group_policy=none";
    let out = check(
        &mut w,
        &format!("{q}&same_subtree=_NIC,_COMPUTE&same_subtree=_NIC,_PORT1"),
        true,
        4,
        Some(11),
    );
    for c in &out.candidates {
        assert_eq!(w.mapping(c, "_COMPUTE"), [w.id("cn2")]);
    }
    check(
        &mut w,
        &format!("{q}&same_subtree=_NIC,_COMPUTE,_PORT1"),
        true,
        12,
        Some(11),
    );
    check(
        &mut w,
        "required_MULTI_ATTACH=COMPUTE_VOLUME_MULTI_ATTACH&resources_BW=NET_BW_EGR_KILOBIT_PER_SEC:100\
         &resources_COMPUTE=VCPU:4&same_subtree=_MULTI_ATTACH,_BW,_COMPUTE&group_policy=isolate",
        true,
        3,
        None,
    );
}

// ---- same-subtree-deep.yaml (DeepNUMANetworkFixture, 1.36) ----

#[test]
fn same_subtree_deep() {
    let mut w = numa_network(true);
    for q in [
        "resources_COMPUTE=VCPU:1&required_COMPUTE=CUSTOM_FOO&required_NIC=CUSTOM_HW_NIC_ROOT\
         &resources_PORT1=CUSTOM_VF:2&required_PORT1=CUSTOM_PHYSNET1\
         &same_subtree=_NIC,_COMPUTE&same_subtree=_NIC,_PORT1&group_policy=none",
        "resources_COMPUTE=VCPU:1&required_COMPUTE=CUSTOM_FOO&resources_PORT1=CUSTOM_VF:2\
         &required_PORT1=CUSTOM_PHYSNET1&same_subtree=_COMPUTE,_PORT1&group_policy=none",
        "resources_COMPUTE=VCPU:1&resources_PORT1=CUSTOM_VF:2&required_PORT1=CUSTOM_PHYSNET1\
         &same_subtree=_COMPUTE,_PORT1&group_policy=none",
    ] {
        let out = check(&mut w, q, true, 4, Some(26));
        assert_eq!(w.amounts(&out, "cn2", "VCPU"), [1, 1, 1, 1]);
        assert_eq!(w.amounts(&out, "pf2_3", "CUSTOM_VF"), [2]);
    }
}

// ---- allocation-candidates-any-traits-groups.yaml (NeutronQoSMultiSegmentFixture) ----

#[test]
fn multisegment_ports() {
    let mut w = neutron_qos();
    let base = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10";
    let port = |name: &str, pps: u32, bw: u32, physnet: &str| {
        format!(
            "&resources-{name}-pps=NET_PACKET_RATE_KILOPACKET_PER_SEC:{pps}&required-{name}-pps=CUSTOM_VNIC_TYPE_NORMAL\
             &resources-{name}-bw=NET_BW_EGR_KILOBIT_PER_SEC:{bw},NET_BW_IGR_KILOBIT_PER_SEC:{bw}\
             &required-{name}-bw=CUSTOM_VNIC_TYPE_NORMAL&required-{name}-bw={physnet}\
             &same_subtree=-{name}-pps,-{name}-bw"
        )
    };
    let msn = "in:CUSTOM_PHYSNET_MSN_S1,CUSTOM_PHYSNET_MSN_S2";
    let out = check(
        &mut w,
        &format!(
            "{base}{}&group_policy=none",
            port("port-normal", 1000, 1000, "CUSTOM_PHYSNET_OTHER")
        ),
        true,
        1,
        None,
    );
    assert_eq!(
        w.amounts(&out, "compute0:br_ex", "NET_BW_IGR_KILOBIT_PER_SEC"),
        [1000]
    );
    let out = check(
        &mut w,
        &format!(
            "{base}{}&group_policy=none",
            port("port-msn", 1000, 1000, msn)
        ),
        true,
        4,
        None,
    );
    assert_eq!(
        w.amounts(
            &out,
            "compute3:ovs_agent",
            "NET_PACKET_RATE_KILOPACKET_PER_SEC"
        ),
        [1000, 1000]
    );
    let two = |bw: u32| {
        format!(
            "{base}{}{}&group_policy=none",
            port("port1-msn", 100, bw, msn),
            port("port2-msn", 100, bw, msn)
        )
    };
    let out = check(&mut w, &two(1000), true, 4, None);
    assert_eq!(
        w.amounts(&out, "compute3:br_ex", "NET_BW_IGR_KILOBIT_PER_SEC"),
        [1000, 1000]
    );
    let out = check(&mut w, &two(100), true, 6, None);
    assert_eq!(
        w.amounts(&out, "compute3:br_ex", "NET_BW_IGR_KILOBIT_PER_SEC"),
        [100, 100, 200]
    );
    assert_eq!(
        w.amounts(
            &out,
            "compute3:ovs_agent",
            "NET_PACKET_RATE_KILOPACKET_PER_SEC"
        ),
        [200; 4]
    );
}

// ---- shared-resources.yaml (APIFixture, built step by step) ----

#[test]
fn sharing_needs_aggregate_and_trait() {
    let mut w = World::new();
    w.rp("cn1", None, &[]);
    w.inv("cn1", "VCPU", 20);
    w.inv("cn1", "MEMORY_MB", 100000);
    w.rp("cn2", None, &[]);
    w.inv("cn2", "VCPU", 20);
    w.inv("cn2", "MEMORY_MB", 100000);
    w.inv("cn2", "DISK_GB", 100000);
    w.rp("shared", None, &[]);
    w.inv("shared", "CUSTOM_MAGIC", 5);
    let q = "resources=VCPU:1,CUSTOM_MAGIC:1";
    check(&mut w, q, true, 0, Some(0));
    w.set_aggs("shared", &["agg"]);
    w.set_aggs("cn1", &["agg"]);
    check(&mut w, q, true, 0, Some(0));
    w.traits("shared", &[SHARES]);
    check(&mut w, q, true, 1, Some(2));
}
