//! Unit tests of `explain`'s reasons: each of the fifteen codes in a small named world,
//! with its exact detail sentence (`accel explain` and the console print them
//! verbatim), plus the sharing-provider verdicts and the per-group bound.

#[path = "candidates_world.rs"]
mod world;

use accel_core::candidates::explain::{
    explain, ExplainOptions, Names, Reason, ReasonCode, RootExplanation,
};
use accel_core::candidates::{ProviderId, RcId, TraitId};
use world::{World, SHARES};

struct Named<'w>(&'w World);

impl Names for Named<'_> {
    fn provider(&self, id: ProviderId) -> String {
        self.0.name(id)
    }
    fn resource_class(&self, rc: RcId) -> String {
        self.0.rc_name(rc)
    }
    fn trait_name(&self, t: TraitId) -> String {
        self.0.trait_name(t)
    }
}

/// The verdict on `root` for `qs`, with `per_group` reasons at most per group.
fn verdict(w: &mut World, qs: &str, nested: bool, root: &str, per_group: usize) -> RootExplanation {
    let req = w.query(qs, nested);
    let snap = w.snapshot();
    let options = ExplainOptions {
        reasons_per_group: per_group,
        only_root: None,
    };
    let ex = explain(&snap, &req, &Named(w), &options);
    let id = w.id(root);
    let full = ex
        .roots
        .into_iter()
        .find(|r| r.root == id)
        .expect("root explained");
    // Explaining the root alone gives the same verdict.
    let alone = explain(
        &snap,
        &req,
        &Named(w),
        &ExplainOptions {
            only_root: Some(id),
            ..options
        },
    );
    assert_eq!(alone.roots, vec![full.clone()]);
    full
}

/// The reasons `root` does not fit.
fn reasons(w: &mut World, qs: &str, root: &str) -> Vec<Reason> {
    let v = verdict(w, qs, true, root, 3);
    assert!(!v.fits, "{root} fits");
    v.reasons
}

/// The only reason `root` does not fit.
fn only(w: &mut World, qs: &str, nested: bool, root: &str) -> Reason {
    let v = verdict(w, qs, nested, root, 3);
    assert!(!v.fits, "{root} fits");
    assert_eq!(v.reasons.len(), 1, "{:#?}", v.reasons);
    v.reasons.into_iter().next().unwrap()
}

fn reason(
    code: ReasonCode,
    group: Option<&str>,
    provider: Option<ProviderId>,
    rc: Option<RcId>,
    t: Option<TraitId>,
    detail: &str,
) -> Reason {
    Reason {
        code,
        group: group.map(str::to_owned),
        provider,
        resource_class: rc,
        trait_id: t,
        detail: detail.to_owned(),
    }
}

/// A compute node `cn` (VCPU 8) with one FPGA device `fpga` (total 4) carrying `traits`.
fn host(traits: &[&str]) -> World {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 8);
    w.rp("fpga", Some("cn"), &[]);
    w.inv("fpga", "CUSTOM_ACCELERATOR_FPGA", 4);
    w.traits("fpga", traits);
    w
}

const FPGA: &str = "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:2";

#[test]
fn no_inventory_in_the_tree() {
    let mut w = host(&[]);
    let r = only(
        &mut w,
        "resources=VCPU:1&resources1=CUSTOM_GPU:1",
        true,
        "cn",
    );
    let rc = w.rc("CUSTOM_GPU");
    let expected = reason(
        ReasonCode::NoInventory,
        Some("1"),
        None,
        Some(rc),
        None,
        "no provider of tree cn has CUSTOM_GPU inventory",
    );
    assert_eq!(r, expected);
}

#[test]
fn no_inventory_on_a_provider_of_a_granular_group() {
    let mut w = host(&[]);
    w.inv("cn", "MEMORY_MB", 1024);
    let r = reasons(&mut w, "resources1=VCPU:1,CUSTOM_ACCELERATOR_FPGA:1", "cn");
    let (cn, fpga) = (w.id("cn"), w.id("fpga"));
    let (vcpu, acc) = (w.rc("VCPU"), w.rc("CUSTOM_ACCELERATOR_FPGA"));
    assert_eq!(
        r,
        vec![
            reason(
                ReasonCode::NoInventory,
                Some("1"),
                Some(cn),
                Some(acc),
                None,
                "has no CUSTOM_ACCELERATOR_FPGA inventory"
            ),
            reason(
                ReasonCode::NoInventory,
                Some("1"),
                Some(fpga),
                Some(vcpu),
                None,
                "has no VCPU inventory"
            ),
        ]
    );
}

#[test]
fn capacity_with_the_numbers() {
    let mut w = host(&[]);
    w.use_("fpga", "CUSTOM_ACCELERATOR_FPGA", 3);
    let r = only(&mut w, FPGA, true, "cn");
    let expected = reason(
        ReasonCode::Capacity,
        Some("1"),
        Some(w.id("fpga")),
        Some(w.rc("CUSTOM_ACCELERATOR_FPGA")),
        None,
        "needs 2 CUSTOM_ACCELERATOR_FPGA, 1 free: total 4, reserved 0, used 3, allocation ratio 1.0",
    );
    assert_eq!(r, expected);
}

#[test]
fn capacity_counts_reserved_and_overcommit() {
    let mut w = host(&[]);
    let inv = w.inv("cn", "MEMORY_MB", 1000);
    inv.limits.reserved = 200;
    inv.limits.allocation_ratio = 1.5;
    inv.used = 1100;
    let r = only(&mut w, "resources=MEMORY_MB:200", true, "cn");
    assert_eq!(r.code, ReasonCode::Capacity);
    assert_eq!(r.group.as_deref(), Some(""));
    assert_eq!(
        r.detail,
        "needs 200 MEMORY_MB, 100 free: total 1000, reserved 200, used 1100, allocation ratio 1.5"
    );
}

#[test]
fn max_unit() {
    let mut w = host(&[]);
    w.inv("cn", "MEMORY_MB", 4096).limits.max_unit = 1024;
    let r = only(&mut w, "resources=MEMORY_MB:2048", true, "cn");
    let expected = reason(
        ReasonCode::MaxUnit,
        Some(""),
        Some(w.id("cn")),
        Some(w.rc("MEMORY_MB")),
        None,
        "needs 2048 MEMORY_MB, max_unit is 1024",
    );
    assert_eq!(r, expected);
}

#[test]
fn min_unit() {
    let mut w = host(&[]);
    w.inv("cn", "MEMORY_MB", 4096).limits.min_unit = 512;
    let r = only(&mut w, "resources=MEMORY_MB:256", true, "cn");
    assert_eq!(
        (r.code, r.provider),
        (ReasonCode::MinUnit, Some(w.id("cn")))
    );
    assert_eq!(r.detail, "needs 256 MEMORY_MB, min_unit is 512");
}

#[test]
fn step_size() {
    let mut w = host(&[]);
    w.inv("cn", "MEMORY_MB", 4096).limits.step_size = 256;
    let r = only(&mut w, "resources=MEMORY_MB:300", true, "cn");
    assert_eq!(
        (r.code, r.provider),
        (ReasonCode::StepSize, Some(w.id("cn")))
    );
    assert_eq!(
        r.detail,
        "needs 300 MEMORY_MB, not a multiple of step_size 256"
    );
}

#[test]
fn required_trait() {
    let mut w = host(&["CUSTOM_FPGA_XILINX"]);
    let r = only(
        &mut w,
        &format!("{FPGA}&required1=CUSTOM_FPGA_INTEL"),
        true,
        "cn",
    );
    let expected = reason(
        ReasonCode::RequiredTrait,
        Some("1"),
        Some(w.id("fpga")),
        None,
        Some(w.t("CUSTOM_FPGA_INTEL")),
        "lacks required trait CUSTOM_FPGA_INTEL",
    );
    assert_eq!(r, expected);
}

#[test]
fn forbidden_trait() {
    let mut w = host(&["CUSTOM_FPGA_XILINX"]);
    let r = only(
        &mut w,
        &format!("{FPGA}&required1=!CUSTOM_FPGA_XILINX"),
        true,
        "cn",
    );
    assert_eq!(
        (r.code, r.provider, r.trait_id),
        (
            ReasonCode::ForbiddenTrait,
            Some(w.id("fpga")),
            Some(w.t("CUSTOM_FPGA_XILINX"))
        )
    );
    assert_eq!(r.detail, "has forbidden trait CUSTOM_FPGA_XILINX");
}

#[test]
fn any_trait() {
    let mut w = host(&["CUSTOM_FPGA_XILINX"]);
    let qs = format!("{FPGA}&required1=in:CUSTOM_FPGA_INTEL,CUSTOM_FPGA_ALTERA");
    let r = only(&mut w, &qs, true, "cn");
    assert_eq!((r.code, r.trait_id), (ReasonCode::AnyTrait, None));
    assert_eq!(
        r.detail,
        "has none of CUSTOM_FPGA_INTEL, CUSTOM_FPGA_ALTERA"
    );
}

#[test]
fn member_of() {
    let mut w = host(&[]);
    let agg = w.agg("agg1");
    let r = only(&mut w, &format!("{FPGA}&member_of1=agg1"), true, "cn");
    assert_eq!(
        (r.code, r.provider),
        (ReasonCode::MemberOf, Some(w.id("fpga")))
    );
    assert_eq!(r.detail, format!("is not in aggregate {agg}"));
}

#[test]
fn member_of_of_the_unsuffixed_group_looks_at_the_root_too() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.rp("numa", Some("cn"), &[]);
    w.inv("numa", "VCPU", 4);
    let agg = w.agg("agg1");
    let r = only(&mut w, "resources=VCPU:1&member_of=agg1", true, "cn");
    assert_eq!(
        (r.code, r.provider),
        (ReasonCode::MemberOf, Some(w.id("numa")))
    );
    assert_eq!(
        r.detail,
        format!("is not in aggregate {agg}, and root cn does not meet member_of either")
    );
    // In the aggregate through the root: fits.
    w.set_aggs("cn", &["agg1"]);
    assert!(verdict(&mut w, "resources=VCPU:1&member_of=agg1", true, "cn", 3).fits);
}

#[test]
fn forbidden_aggregate_is_a_member_of_reason() {
    let mut w = host(&[]);
    w.set_aggs("fpga", &["agg1"]);
    let agg = w.agg("agg1");
    let r = only(&mut w, &format!("{FPGA}&member_of1=!agg1"), true, "cn");
    assert_eq!(
        (r.code, r.provider),
        (ReasonCode::MemberOf, Some(w.id("fpga")))
    );
    assert_eq!(r.detail, format!("is in forbidden aggregate {agg}"));
}

#[test]
fn in_tree() {
    let mut w = host(&[]);
    w.rp("cn2", None, &[]);
    w.inv("cn2", "VCPU", 8);
    let qs = format!("{FPGA}&in_tree1=cn2");
    let r = only(&mut w, &qs, true, "cn");
    let expected = reason(
        ReasonCode::InTree,
        Some("1"),
        Some(w.id("cn2")),
        None,
        None,
        "in_tree1=cn2: only the tree of cn2 may serve group 1",
    );
    assert_eq!(r, expected);
}

#[test]
fn root_required_and_root_forbidden() {
    let mut w = host(&[]);
    w.traits("cn", &["CUSTOM_OLD"]);
    let v = reasons(
        &mut w,
        &format!("{FPGA}&root_required=CUSTOM_NEW,!CUSTOM_OLD"),
        "cn",
    );
    let cn = w.id("cn");
    assert_eq!(
        v,
        vec![
            reason(
                ReasonCode::RootRequired,
                None,
                Some(cn),
                None,
                Some(w.t("CUSTOM_NEW")),
                "root lacks required trait CUSTOM_NEW (root_required)"
            ),
            reason(
                ReasonCode::RootForbidden,
                None,
                Some(cn),
                None,
                Some(w.t("CUSTOM_OLD")),
                "root has forbidden trait CUSTOM_OLD (root_required=!CUSTOM_OLD)"
            ),
        ]
    );
}

/// `cn` with two NUMA nodes, an FPGA under one and a GPU under the other.
fn numa_host() -> World {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 8);
    w.rp("numa0", Some("cn"), &[]);
    w.rp("numa1", Some("cn"), &[]);
    w.rp("fpga", Some("numa0"), &[]);
    w.inv("fpga", "CUSTOM_ACCELERATOR_FPGA", 1);
    w.rp("gpu", Some("numa1"), &[]);
    w.inv("gpu", "VGPU", 1);
    w
}

#[test]
fn same_subtree() {
    let mut w = numa_host();
    let qs = "resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=VGPU:1&same_subtree=1,2";
    let r = only(&mut w, qs, true, "cn");
    let expected = reason(
        ReasonCode::SameSubtree,
        None,
        None,
        None,
        None,
        "same_subtree=1,2: no choice puts these groups under one of their own providers: group 1 can use fpga; group 2 can use gpu",
    );
    assert_eq!(r, expected);
}

#[test]
fn isolate() {
    let mut w = host(&[]);
    let qs = "resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=CUSTOM_ACCELERATOR_FPGA:1&group_policy=isolate";
    let r = only(&mut w, qs, true, "cn");
    let expected = reason(
        ReasonCode::Isolate,
        None,
        None,
        None,
        None,
        "group_policy=isolate needs a separate provider for each of groups 1, 2: group 1 can use fpga; group 2 can use fpga",
    );
    assert_eq!(r, expected);
    // Without isolate both land on the one FPGA.
    let qs = "resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=CUSTOM_ACCELERATOR_FPGA:1";
    assert!(verdict(&mut w, qs, true, "cn", 3).fits);
}

#[test]
fn single_tree_before_1_29() {
    let mut w = host(&[]);
    let qs = "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1";
    let r = only(&mut w, qs, false, "cn");
    let expected = reason(
        ReasonCode::SingleTree,
        None,
        None,
        None,
        None,
        "before microversion 1.29 a candidate takes resources from one provider per tree: VCPU (unsuffixed) can use cn; group 1 can use fpga",
    );
    assert_eq!(r, expected);
    assert!(verdict(&mut w, qs, true, "cn", 3).fits);
}

#[test]
fn groups_together_over_one_provider() {
    let mut w = host(&[]);
    w.use_("fpga", "CUSTOM_ACCELERATOR_FPGA", 1);
    let qs = "resources1=CUSTOM_ACCELERATOR_FPGA:2&resources2=CUSTOM_ACCELERATOR_FPGA:2";
    let r = only(&mut w, qs, true, "cn");
    let expected = reason(
        ReasonCode::Capacity,
        None,
        Some(w.id("fpga")),
        Some(w.rc("CUSTOM_ACCELERATOR_FPGA")),
        None,
        "groups 1, 2 together need 4 CUSTOM_ACCELERATOR_FPGA, 3 free: total 4, reserved 0, used 1, allocation ratio 1.0",
    );
    assert_eq!(r, expected);
}

#[test]
fn groups_together_over_several_providers() {
    let mut w = numa_host();
    w.inv("gpu", "CUSTOM_ACCELERATOR_FPGA", 2);
    let qs = "resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=CUSTOM_ACCELERATOR_FPGA:1\
              &resources3=CUSTOM_ACCELERATOR_FPGA:1&resources4=CUSTOM_ACCELERATOR_FPGA:1";
    let r = only(&mut w, qs, true, "cn");
    assert_eq!(
        (r.code, r.group, r.provider),
        (ReasonCode::Capacity, None, None)
    );
    assert_eq!(
        r.detail,
        "groups 1, 2, 3, 4 together need 1 + 1 + 1 + 1 CUSTOM_ACCELERATOR_FPGA, more than fpga (1 free), gpu (2 free) can hold"
    );
}

#[test]
fn collective_required_trait_of_the_unsuffixed_group() {
    let mut w = host(&[]);
    let r = only(&mut w, "resources=VCPU:1&required=CUSTOM_FAST", true, "cn");
    let expected = reason(
        ReasonCode::RequiredTrait,
        Some(""),
        None,
        None,
        Some(w.t("CUSTOM_FAST")),
        "none of the providers that can serve the unsuffixed group (cn) has CUSTOM_FAST",
    );
    assert_eq!(r, expected);
}

#[test]
fn closest_provider_first_and_bounded_per_group() {
    let mut w = host(&["CUSTOM_FPGA_XILINX"]);
    w.use_("fpga", "CUSTOM_ACCELERATOR_FPGA", 4);
    w.rp("fpga2", Some("cn"), &[]);
    w.inv("fpga2", "CUSTOM_ACCELERATOR_FPGA", 4);
    w.traits("fpga2", &["CUSTOM_FPGA_INTEL"]);
    w.use_("fpga2", "CUSTOM_ACCELERATOR_FPGA", 3);
    let qs = format!("{FPGA}&required1=CUSTOM_FPGA_INTEL");
    let v = verdict(&mut w, &qs, true, "cn", 3);
    let got: Vec<(ProviderId, ReasonCode)> = v
        .reasons
        .iter()
        .map(|r| (r.provider.unwrap(), r.code))
        .collect();
    // fpga2 fails one rule, fpga two.
    let (fpga, fpga2) = (w.id("fpga"), w.id("fpga2"));
    assert_eq!(
        got,
        vec![
            (fpga2, ReasonCode::Capacity),
            (fpga, ReasonCode::Capacity),
            (fpga, ReasonCode::RequiredTrait)
        ]
    );
    let v = verdict(&mut w, &qs, true, "cn", 1);
    assert_eq!(v.reasons.len(), 1);
    assert_eq!(v.reasons[0].provider, Some(fpga2));
}

/// `ss`, a sharing DISK_GB provider in aggregate `agg`, and `cn` (VCPU) in it too.
fn shared_disk() -> World {
    let mut w = World::new();
    w.rp("ss", None, &["agg"]);
    w.traits("ss", &[SHARES]);
    w.inv("ss", "DISK_GB", 100);
    w.rp("cn", None, &["agg"]);
    w.inv("cn", "VCPU", 8);
    w
}

#[test]
fn a_root_whose_candidates_only_use_other_trees_does_not_fit() {
    let mut w = shared_disk();
    let ss = verdict(&mut w, "resources=DISK_GB:10", true, "ss", 3);
    assert!(ss.fits);
    let r = only(&mut w, "resources=DISK_GB:10", true, "cn");
    let expected = reason(
        ReasonCode::NoInventory,
        Some(""),
        None,
        Some(w.rc("DISK_GB")),
        None,
        "no provider of tree cn has DISK_GB inventory, only sharing providers of other trees",
    );
    assert_eq!(r, expected);
    // With VCPU asked too, the candidate anchored at cn touches both trees.
    assert!(verdict(&mut w, "resources=DISK_GB:10,VCPU:1", true, "cn", 3).fits);
}

#[test]
fn own_provider_found_after_a_sharing_one() {
    // ss (lower id) also offers VCPU: cn's first candidate takes it from ss, but one
    // with cn's own VCPU exists.
    let mut w = shared_disk();
    w.inv("ss", "VCPU", 8);
    assert!(verdict(&mut w, "resources=VCPU:1", true, "cn", 3).fits);
    assert!(verdict(&mut w, "resources=VCPU:1", true, "ss", 3).fits);
}

#[test]
fn a_sharing_provider_makes_its_tree_fit_through_another_anchor() {
    // cn2 may not anchor (root_required), but its sharing child serves cn1.
    let mut w = World::new();
    w.rp("cn1", None, &["agg"]);
    w.inv("cn1", "VCPU", 8);
    w.traits("cn1", &["CUSTOM_OK"]);
    w.rp("cn2", None, &[]);
    w.rp("pool", Some("cn2"), &["agg"]);
    w.traits("pool", &[SHARES]);
    w.inv("pool", "DISK_GB", 100);
    let qs = "resources=VCPU:1,DISK_GB:10&root_required=CUSTOM_OK";
    assert!(verdict(&mut w, qs, true, "cn2", 3).fits);
    // Full: the pool cannot serve cn1 either, and cn2 gets cn2's own reasons.
    w.use_("pool", "DISK_GB", 95);
    let r = only(&mut w, qs, true, "cn2");
    assert_eq!(r.code, ReasonCode::RootRequired);
}

#[test]
fn a_request_that_matches_nothing_anywhere() {
    let mut w = host(&[]);
    let r = only(&mut w, "resources=VCPU:0", true, "cn");
    let expected = reason(
        ReasonCode::MinUnit,
        Some(""),
        None,
        Some(w.rc("VCPU")),
        None,
        "asks for 0 VCPU: amounts below 1 are never allowed",
    );
    assert_eq!(r, expected);
}
