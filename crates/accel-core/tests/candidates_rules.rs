//! One test per semantic rule of the candidate search, on minimal hand-built forests,
//! plus the scale scenarios that motivate the engine (wide trees, many groups, many
//! roots, impossible requests). The scale tests assert answers and deterministic work
//! counters ([`SearchWork`]), never wall-clock time: speed is measured by the
//! `candidates` bench (`cargo bench -p accel-core --bench candidates`, results in
//! `docs/benchmarks.md`).

#[path = "candidates_world.rs"]
mod world;

use accel_core::candidates::{
    providers_matching, search, search_counted, search_with, GenerationStrategy, GroupPolicy,
    Inventory, Provider, ProviderId, Request, RequestGroup, SearchOptions, SearchWork, Snapshot,
    SnapshotError,
};
use accel_core::capacity::Limits;
use uuid::Uuid;
use world::*;

fn count(w: &mut World, qs: &str) -> usize {
    w.run(qs, true).candidates.len()
}

// ---- capacity ----

#[test]
fn capacity_uses_truncated_ratio_reserved_and_usage() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 3).limits.allocation_ratio = 1.5; // int(4.5) = 4
    assert_eq!(count(&mut w, "resources=VCPU:3"), 1);
    // max_unit defaults to total (3): 4 is over max_unit even though capacity is 4.
    assert_eq!(count(&mut w, "resources=VCPU:4"), 0);
    w.providers[0].inventories[0].limits.max_unit = 10;
    assert_eq!(count(&mut w, "resources=VCPU:4"), 1);
    assert_eq!(count(&mut w, "resources=VCPU:5"), 0);
    w.use_("cn", "VCPU", 1);
    assert_eq!(count(&mut w, "resources=VCPU:4"), 0);
    assert_eq!(count(&mut w, "resources=VCPU:3"), 1);
    w.providers[0].inventories[0].limits.reserved = 1; // int(2 * 1.5) - 1 used = 2 free
    assert_eq!(count(&mut w, "resources=VCPU:2"), 1);
    assert_eq!(count(&mut w, "resources=VCPU:3"), 0);
}

#[test]
fn capacity_respects_min_unit_and_step() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    let disk = w.inv("cn", "DISK_GB", 2048);
    disk.limits.min_unit = 10;
    disk.limits.step_size = 10;
    disk.limits.max_unit = 1000;
    assert_eq!(count(&mut w, "resources=DISK_GB:5"), 0);
    assert_eq!(count(&mut w, "resources=DISK_GB:15"), 0);
    assert_eq!(count(&mut w, "resources=DISK_GB:1010"), 0);
    assert_eq!(count(&mut w, "resources=DISK_GB:1000"), 1);
    // The re-check of summed amounts looks at capacity and max_unit only.
    assert_eq!(
        count(&mut w, "resources=DISK_GB:500&resources1=DISK_GB:500"),
        1
    );
    assert_eq!(
        count(&mut w, "resources=DISK_GB:500&resources1=DISK_GB:510"),
        0
    );
}

#[test]
fn zero_or_negative_amounts_match_nothing() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 4).limits.min_unit = 0;
    assert_eq!(count(&mut w, "resources=VCPU:0"), 0);
}

// ---- unsuffixed group ----

#[test]
fn unsuffixed_takes_each_class_whole_from_one_provider() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    for n in ["a", "b"] {
        w.rp(n, Some("cn"), &[]);
        w.inv(n, "VCPU", 2);
    }
    assert_eq!(count(&mut w, "resources=VCPU:2"), 2);
    assert_eq!(count(&mut w, "resources=VCPU:4"), 0);
    // Two classes from two providers of the same tree.
    w.inv("cn", "MEMORY_MB", 10);
    let out = w.run("resources=VCPU:1,MEMORY_MB:1", true);
    assert_eq!(out.candidates.len(), 2);
    let c = &out.candidates[0];
    assert_eq!(c.allocations.len(), 2);
    assert_eq!(w.mapping(c, "").len(), 2);
}

#[test]
fn sharing_provider_anchors_to_every_tree_in_its_aggregates() {
    let mut w = World::new();
    w.rp("cn1", None, &[]);
    w.inv("cn1", "VCPU", 4);
    w.rp("numa", Some("cn1"), &["agg"]); // the aggregate sits on a child
    w.rp("cn2", None, &[]);
    w.inv("cn2", "VCPU", 4);
    w.rp("ss", None, &["agg"]);
    w.inv("ss", "DISK_GB", 100);
    w.traits("ss", &[SHARES]);
    let out = w.run("resources=VCPU:1,DISK_GB:10", true);
    assert_eq!(
        out.candidates.len(),
        1,
        "only cn1's tree shares the aggregate"
    );
    assert_eq!(w.amounts(&out, "cn1", "VCPU"), [1]);
    // The same provider without the sharing trait is just another tree.
    w.traits("ss", &[]);
    assert_eq!(count(&mut w, "resources=VCPU:1,DISK_GB:10"), 0);
}

#[test]
fn required_traits_count_only_contributing_providers() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.traits("cn", &["ROOT_ONLY"]);
    w.rp("numa", Some("cn"), &[]);
    w.inv("numa", "VCPU", 4);
    w.traits("numa", &["ON_NUMA"]);
    w.rp("pf", Some("cn"), &[]);
    w.inv("pf", "VF", 4);
    w.traits("pf", &["ON_PF"]);
    // The root carries the trait but contributes nothing.
    assert_eq!(count(&mut w, "resources=VCPU:1&required=ROOT_ONLY"), 0);
    // Collectively: one trait from each contributing provider.
    assert_eq!(
        count(&mut w, "resources=VCPU:1,VF:1&required=ON_NUMA,ON_PF"),
        1
    );
    assert_eq!(count(&mut w, "resources=VCPU:1&required=ON_NUMA,ON_PF"), 0);
    assert_eq!(
        count(&mut w, "resources=VCPU:1,VF:1&required=in:ON_PF,NOWHERE"),
        1
    );
    // Forbidden on any contributing provider excludes the combination.
    assert_eq!(count(&mut w, "resources=VCPU:1,VF:1&required=!ON_PF"), 0);
    assert_eq!(count(&mut w, "resources=VCPU:1&required=!ON_PF"), 1);
    assert_eq!(count(&mut w, "resources=VCPU:1&required=!ROOT_ONLY"), 1);
}

#[test]
fn unsuffixed_member_of_spans_the_tree_from_the_root_granular_does_not() {
    let mut w = World::new();
    w.rp("cn", None, &["agg"]);
    w.rp("numa", Some("cn"), &[]);
    w.inv("numa", "VCPU", 4);
    w.rp("other", None, &[]);
    w.rp("numa2", Some("other"), &["agg"]);
    w.inv("numa2", "VCPU", 4);
    assert_eq!(count(&mut w, "resources=VCPU:1&member_of=agg"), 2);
    let out = w.run("resources1=VCPU:1&member_of1=agg", true);
    assert_eq!(out.candidates.len(), 1);
    assert_eq!(w.amounts(&out, "numa2", "VCPU"), [1]);
    // Forbidden aggregates exclude the provider or (unsuffixed) its whole tree.
    assert_eq!(count(&mut w, "resources=VCPU:1&member_of=!agg"), 0);
    assert_eq!(count(&mut w, "resources1=VCPU:1&member_of1=!agg"), 1);
}

#[test]
fn in_tree_on_unsuffixed_group_disables_sharing() {
    let mut w = World::new();
    w.rp("cn", None, &["agg"]);
    w.inv("cn", "VCPU", 4);
    w.rp("ss", None, &["agg"]);
    w.inv("ss", "DISK_GB", 100);
    w.traits("ss", &[SHARES]);
    assert_eq!(count(&mut w, "resources=VCPU:1,DISK_GB:1"), 1);
    assert_eq!(count(&mut w, "resources=VCPU:1,DISK_GB:1&in_tree=cn"), 0);
    assert_eq!(
        count(&mut w, "resources=VCPU:1&in_tree=cn&resources1=DISK_GB:1"),
        1
    );
    assert_eq!(
        count(&mut w, "resources=VCPU:1&resources1=DISK_GB:1&in_tree1=ss"),
        1
    );
}

// ---- granular groups and policies ----

#[test]
fn granular_group_needs_one_provider_for_everything() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 4);
    w.rp("numa", Some("cn"), &[]);
    w.inv("numa", "MEMORY_MB", 4);
    assert_eq!(count(&mut w, "resources1=VCPU:1,MEMORY_MB:1"), 0);
    assert_eq!(count(&mut w, "resources=VCPU:1,MEMORY_MB:1"), 1);
    w.traits("numa", &["T"]);
    assert_eq!(count(&mut w, "resources1=MEMORY_MB:1&required1=T"), 1);
    assert_eq!(count(&mut w, "resources1=VCPU:1&required1=T"), 0);
}

#[test]
fn isolate_separates_granular_groups_but_not_the_unsuffixed_one() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 8);
    let none = "resources=VCPU:1&resources1=VCPU:1&resources2=VCPU:1&group_policy=none";
    let isolate = "resources=VCPU:1&resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate";
    let out = w.run(none, true);
    assert_eq!(out.candidates.len(), 1);
    assert_eq!(w.amounts(&out, "cn", "VCPU"), [3]);
    assert_eq!(count(&mut w, isolate), 0);
    assert_eq!(count(&mut w, "resources=VCPU:1&resources1=VCPU:1"), 1);
    w.rp("child", Some("cn"), &[]);
    w.inv("child", "VCPU", 8);
    // cn/child for groups 1 and 2 in both orders; the unsuffixed group anywhere.
    assert_eq!(count(&mut w, isolate), 4);
}

#[test]
fn summed_amounts_are_rechecked_against_capacity_and_max_unit() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VGPU", 4).limits.max_unit = 2;
    assert_eq!(
        count(
            &mut w,
            "resources1=VGPU:1&resources2=VGPU:1&group_policy=none"
        ),
        1
    );
    assert_eq!(
        count(
            &mut w,
            "resources1=VGPU:2&resources2=VGPU:1&group_policy=none"
        ),
        0
    );
    w.providers[0].inventories[0].limits.max_unit = 4;
    w.use_("cn", "VGPU", 2);
    assert_eq!(
        count(
            &mut w,
            "resources1=VGPU:1&resources2=VGPU:1&group_policy=none"
        ),
        1
    );
    assert_eq!(
        count(
            &mut w,
            "resources1=VGPU:2&resources2=VGPU:1&group_policy=none"
        ),
        0
    );
}

#[test]
fn same_subtree_needs_an_ancestor_or_self_among_the_chosen() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.rp("nic", Some("cn"), &[]);
    w.traits("nic", &["NIC"]);
    w.rp("pf_a", Some("nic"), &[]);
    w.inv("pf_a", "VF", 2);
    w.rp("pf_b", Some("nic"), &[]);
    w.inv("pf_b", "VF", 2);
    w.rp("pf_c", Some("cn"), &[]);
    w.inv("pf_c", "VF", 2);
    let q = "resources_A=VF:1&resources_B=VF:1&group_policy=isolate";
    assert_eq!(count(&mut w, q), 6);
    // Siblings: neither is an ancestor of the other.
    assert_eq!(count(&mut w, &format!("{q}&same_subtree=_A,_B")), 0);
    // A resourceless group on the NIC ties both under it.
    let tied = format!("{q}&required_N=NIC&same_subtree=_N,_A,_B");
    let out = w.run(&tied, true);
    assert_eq!(out.candidates.len(), 2);
    for c in &out.candidates {
        assert_eq!(w.mapping(c, "_N"), [w.id("nic")]);
        assert!(c.allocations.iter().all(|a| a.0 != w.id("nic")));
    }
    // Self counts: both groups on one provider.
    assert_eq!(
        count(
            &mut w,
            "resources_A=VF:1&resources_B=VF:1&group_policy=none&same_subtree=_A,_B"
        ),
        3
    );
}

#[test]
fn resourceless_group_quirks() {
    let mut w = World::new();
    w.rp("cn", None, &["agg"]);
    w.inv("cn", "VCPU", 4);
    w.traits("cn", &["T"]);
    w.rp("other", None, &[]);
    w.inv("other", "VCPU", 4);
    w.traits("other", &["T"]);
    // A resourceless group with only forbidden traits matches nothing upstream.
    assert_eq!(
        count(&mut w, "resources=VCPU:1&required_X=!NOPE&same_subtree=_X"),
        0
    );
    assert_eq!(
        count(&mut w, "resources=VCPU:1&member_of_X=!agg&same_subtree=_X"),
        0
    );
    assert_eq!(
        count(&mut w, "resources=VCPU:1&required_X=T&same_subtree=_X"),
        2
    );
    assert_eq!(
        count(&mut w, "resources=VCPU:1&member_of_X=agg&same_subtree=_X"),
        1
    );
    // in_tree is not applied to a resourceless group.
    assert_eq!(
        count(
            &mut w,
            "resources=VCPU:1&required_X=T&in_tree_X=cn&same_subtree=_X"
        ),
        2
    );
}

#[test]
fn root_required_filters_anchors() {
    let mut w = World::new();
    w.rp("cn1", None, &["agg"]);
    w.inv("cn1", "VCPU", 4);
    w.traits("cn1", &["GOOD"]);
    w.rp("cn2", None, &["agg"]);
    w.inv("cn2", "VCPU", 4);
    w.rp("ss", None, &["agg"]);
    w.inv("ss", "DISK_GB", 100);
    w.traits("ss", &[SHARES]);
    assert_eq!(
        count(&mut w, "resources=VCPU:1,DISK_GB:1&root_required=GOOD"),
        1
    );
    assert_eq!(
        count(&mut w, "resources=VCPU:1,DISK_GB:1&root_required=!GOOD"),
        1
    );
    // The sharing provider is never filtered by the anchor's traits.
    assert_eq!(
        count(
            &mut w,
            "resources=VCPU:1,DISK_GB:1&root_required=!MISC_SHARES_VIA_AGGREGATE"
        ),
        2
    );
    // A sharing root can anchor its own candidates.
    assert_eq!(
        count(
            &mut w,
            "resources=DISK_GB:1&root_required=MISC_SHARES_VIA_AGGREGATE"
        ),
        1
    );
}

#[test]
fn before_1_29_one_provider_per_tree_and_flat_summaries() {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 4);
    w.rp("pf", Some("cn"), &[]);
    w.inv("pf", "VF", 4);
    w.rp("pf2", Some("cn"), &[]);
    w.inv("pf2", "VF", 4);
    let old = w.run("resources=VCPU:1,VF:1", false);
    assert!(old.candidates.is_empty());
    let old = w.run("resources=VF:1", false);
    assert_eq!(old.candidates.len(), 2);
    assert_eq!(old.summary_providers, vec![w.id("pf"), w.id("pf2")]);
    let new = w.run("resources=VF:1", true);
    assert_eq!(new.summary_providers.len(), 3);
    // Several groups on the same provider is still one provider.
    assert_eq!(
        w.run("resources=VF:1&resources1=VF:1", false)
            .candidates
            .len(),
        2
    );
    assert_eq!(
        w.run("resources=VF:1&resources1=VF:1", true)
            .candidates
            .len(),
        4
    );
}

#[test]
fn duplicates_collapse_but_swapped_mappings_do_not() {
    let mut w = World::new();
    for cn in ["cn1", "cn2", "cn3"] {
        w.rp(cn, None, &["agg"]);
    }
    w.rp("ss", None, &["agg"]);
    w.inv("ss", "DISK_GB", 100);
    w.traits("ss", &[SHARES]);
    // Four anchors (three computes and ss itself) produce the same candidate.
    let out = w.run("resources=DISK_GB:1", true);
    assert_eq!(out.candidates.len(), 1);
    assert_eq!(out.summary_providers, vec![w.id("ss")]);
    w.rp("ss2", None, &["agg"]);
    w.inv("ss2", "DISK_GB", 100);
    w.traits("ss2", &[SHARES]);
    let out = w.run(
        "resources_A=DISK_GB:1&resources_B=DISK_GB:1&group_policy=isolate",
        true,
    );
    assert_eq!(out.candidates.len(), 2);
    assert_eq!(out.candidates[0].allocations, out.candidates[1].allocations);
}

// ---- limits, caps, strategies ----

#[test]
fn limit_cap_and_breadth_first() {
    let mut w = World::new();
    for i in 0..5 {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        for j in 0..4 {
            let dev = format!("{cn}_dev{j}");
            w.rp(&dev, Some(&cn), &[]);
            w.inv(&dev, "FPGA", 1);
        }
    }
    let snap = w.snapshot();
    let mut req = w.query("resources=FPGA:1", true);
    assert_eq!(search(&snap, &req, usize::MAX).candidates.len(), 20);
    assert_eq!(search(&snap, &req, 7).candidates.len(), 7);
    req.limit = Some(5);
    let depth = search(&snap, &req, usize::MAX);
    assert_eq!(depth.candidates.len(), 5);
    // Depth-first: the first root's devices, then the next root.
    assert_eq!(depth.summary_providers.len(), 10);
    let breadth = search_with(
        &snap,
        &req,
        &SearchOptions {
            cap: usize::MAX,
            strategy: GenerationStrategy::BreadthFirst,
        },
    );
    let roots: std::collections::BTreeSet<ProviderId> = breadth
        .candidates
        .iter()
        .map(|c| snap.provider(c.allocations[0].0).root)
        .collect();
    assert_eq!(roots.len(), 5, "one candidate per root first");
    req.limit = Some(3);
    assert!(search(&snap, &req, 0).candidates.is_empty());
}

#[test]
fn work_counters_agree_across_strategies_when_everything_is_enumerated() {
    let mut w = World::new();
    for i in 0..5 {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        for j in 0..=i {
            let dev = format!("{cn}_dev{j}");
            w.rp(&dev, Some(&cn), &[]);
            w.inv(&dev, "FPGA", 1);
        }
    }
    let snap = w.snapshot();
    let req = w.query(
        "resources1=FPGA:1&resources2=FPGA:1&group_policy=isolate",
        true,
    );
    let run = |strategy| {
        let options = SearchOptions {
            cap: usize::MAX,
            strategy,
        };
        let (out, work) = search_counted(&snap, &req, &options);
        assert_eq!(out, search_with(&snap, &req, &options));
        (out.candidates.len(), work)
    };
    let (n, depth) = run(GenerationStrategy::DepthFirst);
    let (m, breadth) = run(GenerationStrategy::BreadthFirst);
    // Ordered pairs of distinct devices per root: 0 + 2 + 6 + 12 + 20.
    assert_eq!((n, m), (40, 40));
    // cn0 has a single device: the matching bound rejects it before the solver.
    assert_eq!(depth.anchors_considered, 5);
    assert_eq!(depth.anchors_searched, 4);
    assert_eq!(depth, breadth);
}

// ---- helpers exposed to the server ----

#[test]
fn providers_matching_is_the_resource_provider_list_filter() {
    let mut w = World::new();
    w.rp("rp", None, &["agg"]);
    let disk = w.inv("rp", "DISK_GB", 2048);
    disk.limits.min_unit = 10;
    disk.limits.step_size = 10;
    disk.limits.max_unit = 1000;
    w.inv("rp", "VCPU", 10);
    w.use_("rp", "DISK_GB", 1020);
    w.use_("rp", "VCPU", 7);
    w.rp("alt", None, &[]);
    let snap = w.snapshot();
    let q = |w: &mut World, qs: &str| {
        let g = w.query(qs, true).groups.remove(0);
        providers_matching(
            &snap,
            &RequestGroup {
                suffix: String::new(),
                ..g
            },
        )
    };
    assert_eq!(q(&mut w, "resources=DISK_GB:500"), [w.id("rp")]);
    assert_eq!(q(&mut w, "resources=DISK_GB:500,VCPU:2"), [w.id("rp")]);
    assert!(q(&mut w, "resources=DISK_GB:1").is_empty());
    assert!(q(&mut w, "resources=DISK_GB:1010").is_empty());
    assert!(q(&mut w, "resources=DISK_GB:11").is_empty());
    assert!(q(&mut w, "resources=DISK_GB:500,VCPU:4").is_empty());
    assert!(q(&mut w, "resources=MEMORY_MB:1").is_empty());
    assert_eq!(q(&mut w, "resources=VCPU:2&member_of=in:agg"), [w.id("rp")]);
    // No resources: every provider passes the capacity part.
    assert_eq!(q(&mut w, "member_of=!agg"), [w.id("alt")]);
    assert_eq!(q(&mut w, "in_tree=alt"), [w.id("alt")]);
}

#[test]
fn snapshot_rejects_inconsistent_trees() {
    let p = |parent: Option<u32>, root: u32| Provider {
        uuid: Uuid::new_v4(),
        parent: parent.map(ProviderId),
        root: ProviderId(root),
        inventories: vec![Inventory {
            rc: 0,
            limits: Limits::whole(1),
            used: 0,
        }],
        traits: vec![],
        aggregates: vec![],
    };
    assert!(Snapshot::new(vec![p(None, 0), p(Some(0), 0)], None).is_ok());
    assert_eq!(
        Snapshot::new(vec![p(None, 0), p(Some(0), 1)], None).unwrap_err(),
        SnapshotError::RootNotARoot {
            provider: 1,
            root: 1
        }
    );
    assert!(matches!(
        Snapshot::new(vec![p(None, 3)], None),
        Err(SnapshotError::RootOutOfRange { .. })
    ));
}

// ---- scale ----

/// One compute with `children` identical devices of `capacity` units and one granular
/// group per entry of `amounts`, plus an unsuffixed `VCPU:1` on the compute.
fn wide(
    children: usize,
    amounts: &[i64],
    policy: GroupPolicy,
    capacity: i64,
) -> (Snapshot, Request) {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 64);
    for i in 0..children {
        let dev = format!("pci{i}");
        w.rp(&dev, Some("cn"), &[]);
        w.inv(&dev, "CUSTOM_PCI", capacity);
    }
    let mut qs: Vec<String> = amounts
        .iter()
        .enumerate()
        .map(|(i, amount)| format!("resources{}=CUSTOM_PCI:{amount}", i + 1))
        .collect();
    qs.push("resources=VCPU:1".into());
    let mut req = w.query(&qs.join("&"), true);
    req.group_policy = policy;
    (w.snapshot(), req)
}

/// Run uncapped, depth-first, returning the candidate count and the work it took.
fn counted(snap: &Snapshot, req: &Request) -> (usize, SearchWork) {
    let (out, work) = search_counted(snap, req, &SearchOptions::default());
    (out.candidates.len(), work)
}

/// `k` single-unit groups on `n` single-unit devices: the work stays linear in the
/// number of candidates returned (at most `2n` option checks each), where upstream's
/// product builds `n^k` tuples before applying `limit`.
fn assert_linear_in_output(devices: usize, n: usize, work: SearchWork) {
    assert_eq!(work.anchors_searched, 1, "{work:?}");
    let bound = 2 * devices as u64 * n as u64;
    assert!(work.option_checks <= bound, "{work:?}, bound {bound}");
}

#[test]
fn wide_tree_8_by_8() {
    for policy in [GroupPolicy::Isolate, GroupPolicy::None] {
        let (snap, mut req) = wide(8, &[1; 8], policy, 1);
        req.limit = Some(1000);
        let (n, work) = counted(&snap, &req);
        assert_eq!(n, 1000, "{policy:?}");
        assert_linear_in_output(8, n, work);
    }
    // Everything: 8! assignments of distinct devices, each found once.
    let (snap, req) = wide(8, &[1; 8], GroupPolicy::Isolate, 1);
    let (n, work) = counted(&snap, &req);
    assert_eq!(n, 40_320);
    assert_linear_in_output(8, n, work);
}

#[test]
fn wide_tree_64_by_64() {
    for policy in [GroupPolicy::Isolate, GroupPolicy::None] {
        let (snap, mut req) = wide(64, &[1; 64], policy, 1);
        req.limit = Some(1000);
        let (n, work) = counted(&snap, &req);
        assert_eq!(n, 1000, "{policy:?}");
        assert_linear_in_output(64, n, work);
    }
}

#[test]
fn impossible_requests_are_recognised_without_enumeration() {
    let bounded: [(usize, Vec<i64>, GroupPolicy, i64); 4] = [
        // More single-unit groups than devices, either policy (matching, capacity bound).
        (8, vec![1; 9], GroupPolicy::Isolate, 1),
        (64, vec![1; 65], GroupPolicy::None, 1),
        // Room of 5 per device, requests of 2: at most two per device (whole multiples).
        (64, vec![2; 129], GroupPolicy::None, 5),
        (64, vec![2; 65], GroupPolicy::Isolate, 9),
    ];
    for (children, amounts, policy, capacity) in bounded {
        let (snap, req) = wide(children, &amounts, policy, capacity);
        let (n, work) = counted(&snap, &req);
        assert_eq!(n, 0, "{children} devices, {} groups", amounts.len());
        // Proven by the static bounds: the solver never runs.
        assert_eq!(
            work,
            SearchWork {
                anchors_considered: 1,
                anchors_searched: 0,
                option_checks: 0
            }
        );
    }
    // One request of 3 per device of 5, plus one of 2: the bounds pass, the search
    // fails in a number of checks quadratic in the devices (not 64!) because untouched
    // devices are interchangeable.
    let mixed: Vec<i64> = std::iter::repeat_n(3, 65).chain([2]).collect();
    let (snap, req) = wide(64, &mixed, GroupPolicy::None, 5);
    let (n, work) = counted(&snap, &req);
    assert_eq!(n, 0);
    assert_eq!(work.anchors_searched, 1);
    assert!(work.option_checks <= 2 * 64 * 64, "{work:?}");
}

#[test]
fn ten_thousand_roots() {
    let mut w = World::new();
    for i in 0..10_000 {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        w.inv(&cn, "VCPU", 16);
        w.inv(&cn, "MEMORY_MB", 4096);
        if i >= 9_950 {
            w.traits(&cn, &["LATE"]);
        }
        for j in 0..9 {
            let dev = format!("{cn}_vf{j}");
            w.rp(&dev, Some(&cn), &[]);
            w.inv(&dev, "SRIOV_NET_VF", 4);
        }
    }
    let snap = w.snapshot();
    let mut req = w.query(
        "resources=VCPU:1,MEMORY_MB:512&resources_NET=SRIOV_NET_VF:1",
        true,
    );
    req.limit = Some(1000);
    let (n, work) = counted(&snap, &req);
    assert_eq!(n, 1000);
    // 9 candidates per root: the search stops after ceil(1000 / 9) roots.
    assert_eq!(work.anchors_considered, 112, "{work:?}");
    assert_eq!(work.anchors_searched, 112, "{work:?}");
    assert!(work.option_checks <= 2 * 1000, "{work:?}");
    // Only the last 50 roots qualify: `root_required` narrows the anchors before any
    // problem is built, and each is enumerated once.
    let mut late = w.query(
        "resources=VCPU:1,MEMORY_MB:512&resources_NET=SRIOV_NET_VF:1&root_required=LATE",
        true,
    );
    late.limit = Some(1000);
    let (n, work) = counted(&snap, &late);
    assert_eq!(n, 450);
    assert_eq!(work.anchors_considered, 50, "{work:?}");
    assert_eq!(work.anchors_searched, 50, "{work:?}");
    assert!(work.option_checks <= 2 * 450, "{work:?}");
    // Nothing fits anywhere: every root is rejected before the solver runs.
    let none = w.query("resources=VCPU:1&resources_NET=SRIOV_NET_VF:5", true);
    let (n, work) = counted(&snap, &none);
    assert_eq!(n, 0);
    assert_eq!(work.anchors_searched, 0, "{work:?}");
    assert_eq!(work.option_checks, 0, "{work:?}");
}
