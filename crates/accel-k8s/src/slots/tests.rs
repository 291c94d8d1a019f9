//! Seed 001's examples, kubelet's repeated offers, reclaim, and the no-double-assignment
//! property.

use super::*;
use crate::config::{Configuration, Selector};
use crate::testing::device as test_device;
use proptest::prelude::*;

const NODE: &str = "node-a";

fn config(capacity: u32) -> KubernetesConfig {
    KubernetesConfig {
        configurations: vec![Configuration {
            name: "cam".into(),
            capacity,
            selector: Selector::default(),
        }],
        ..KubernetesConfig::default()
    }
}

/// Two devices of capacity 2, as in seed 001; returns the table and the instance
/// names in the table's (sorted) order.
fn two_cameras() -> (SlotTable, Vec<String>) {
    let mut t = SlotTable::new(NODE, &config(2));
    assert!(t.set_devices(&[
        test_device("cam-a", "CAMERA"),
        test_device("cam-b", "CAMERA")
    ]));
    let names = instances(&t);
    (t, names)
}

fn instances(t: &SlotTable) -> Vec<String> {
    t.resources()
        .into_iter()
        .filter_map(|r| match r.key {
            ResourceKey::Instance(n) => Some(n),
            ResourceKey::Pool(_) | ResourceKey::Mig(_) => None,
        })
        .collect()
}

fn pool() -> ResourceKey {
    ResourceKey::Pool("cam".into())
}

fn ids(t: &SlotTable, key: &ResourceKey) -> Vec<(String, bool)> {
    t.list(key)
        .unwrap()
        .into_iter()
        .map(|a| (a.id, a.healthy))
        .collect()
}

fn healthy(v: &[&str]) -> Vec<(String, bool)> {
    v.iter().map(|s| (s.to_string(), true)).collect()
}

fn req(v: &[&[&str]]) -> Vec<Vec<String>> {
    v.iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect()
}

/// Puts virtual id `vdev` on slot `i` of instance `inst`, as a restored record.
fn hold(t: &mut SlotTable, inst: &str, i: usize, vdev: &str) {
    let mut u = BTreeMap::new();
    u.insert(
        format!("{inst}-{i}"),
        Usage::Pool {
            vdev: vdev.into(),
            node: NODE.into(),
        },
    );
    assert_eq!(t.restore(&u), 1);
}

#[test]
fn resources_are_the_pool_then_one_per_device() {
    let (t, names) = two_cameras();
    let r: Vec<String> = t.resources().into_iter().map(|r| r.name).collect();
    assert_eq!(r[0], "accel.dev/cam");
    assert_eq!(r.len(), 3);
    for n in &names {
        assert!(n.starts_with("cam-") && n.len() == "cam-".len() + 8, "{n}");
        assert!(r.contains(&format!("accel.dev/{n}")));
    }
}

#[test]
fn the_pool_advertises_one_id_per_device_with_a_free_slot() {
    let (t, names) = two_cameras();
    // Seed 001: two devices of capacity 2 give "0" and "1", not four ids.
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1"]));
    let il = ResourceKey::Instance(names[0].clone());
    assert_eq!(
        ids(&t, &il),
        healthy(&[&format!("{}-0", names[0]), &format!("{}-1", names[0])])
    );
}

#[test]
fn an_id_held_elsewhere_is_kept_and_free_ids_fill_the_gaps() {
    // Seed 001: slot 1 of the first device held as "4", three slots free: "0","1","4".
    let (mut t, names) = two_cameras();
    hold(&mut t, &names[0], 1, "4");
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1", "4"]));
    // The instance-level plugin sees the pooled slot as Unhealthy.
    assert_eq!(
        ids(&t, &ResourceKey::Instance(names[0].clone())),
        vec![
            (format!("{}-0", names[0]), true),
            (format!("{}-1", names[0]), false)
        ]
    );
}

/// Seed 001's three Allocate examples, with "3" held on slot 1 of the second device.
fn seed_state() -> (SlotTable, Vec<String>) {
    let (mut t, names) = two_cameras();
    hold(&mut t, &names[1], 1, "3");
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1", "3"]));
    (t, names)
}

#[test]
fn seed_example_0_and_3() {
    let (mut t, names) = seed_state();
    let g = t
        .allocate(&pool(), &req(&[&["0", "3"]]), Instant::now())
        .unwrap();
    assert_eq!(g.len(), 1, "one container, one response");
    // "0" goes to the device with the most free slots (the first, 2 free), on its
    // highest slot; "3" keeps its slot.
    assert_eq!(g[0][0].slot, format!("{}-1", names[0]));
    assert_eq!(g[0][1].slot, format!("{}-1", names[1]));
    assert_eq!(
        g[0][0].usage,
        Usage::Pool {
            vdev: "0".into(),
            node: NODE.into()
        }
    );
}

#[test]
fn seed_example_0_1_3_is_refused_and_changes_nothing() {
    let (mut t, _) = seed_state();
    let before = t.usage();
    let e = t
        .allocate(&pool(), &req(&[&["0", "1", "3"]]), Instant::now())
        .unwrap_err();
    assert_eq!(
        e,
        AllocError::NotEnoughDevices {
            needed: 3,
            available: 2
        }
    );
    assert_eq!(t.usage(), before);
}

#[test]
fn seed_example_two_container_requests() {
    let (mut t, names) = seed_state();
    let g = t
        .allocate(&pool(), &req(&[&["0", "1"], &["3"]]), Instant::now())
        .unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g[0][0].slot, format!("{}-1", names[0]), "most free slots");
    assert_eq!(g[0][1].slot, format!("{}-0", names[1]), "distinct device");
    assert_eq!(
        g[1][0].slot,
        format!("{}-1", names[1]),
        "previously claimed"
    );
    // The first device keeps one free slot: one new id besides the three held.
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1", "2", "3"]));
    assert_eq!(t.held_vdevs().len(), 3);
}

#[test]
fn every_slot_held_and_two_ids_on_one_device_is_refused() {
    // Seed 001's corner: "0","1" on the first device, "2","3" on the second.
    let (mut t, names) = two_cameras();
    hold(&mut t, &names[0], 0, "0");
    hold(&mut t, &names[0], 1, "1");
    hold(&mut t, &names[1], 0, "2");
    hold(&mut t, &names[1], 1, "3");
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1", "2", "3"]));
    let e = t
        .allocate(&pool(), &req(&[&["0", "1"]]), Instant::now())
        .unwrap_err();
    assert_eq!(e, AllocError::SameDevice("0".into(), "1".into()));
    assert!(t
        .allocate(&pool(), &req(&[&["0", "3"]]), Instant::now())
        .is_ok());
}

#[test]
fn a_repeated_allocate_succeeds_with_the_same_slots() {
    let (mut t, names) = two_cameras();
    let now = Instant::now();
    let first = t.allocate(&pool(), &req(&[&["0", "1"]]), now).unwrap();
    let again = t.allocate(&pool(), &req(&[&["0", "1"]]), now).unwrap();
    assert_eq!(first, again);
    let il = ResourceKey::Instance(names[0].clone());
    let slot = format!("{}-0", names[0]);
    let a = t.allocate(&il, &req(&[&[&slot]]), now).unwrap();
    let b = t.allocate(&il, &req(&[&[&slot]]), now).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[0][0].usage, Usage::Node(NODE.into()));
}

#[test]
fn instance_slots_held_by_the_pool_or_another_node_are_refused() {
    let (mut t, names) = two_cameras();
    let now = Instant::now();
    t.allocate(&pool(), &req(&[&["0"]]), now).unwrap(); // first device, slot 1
    let il = ResourceKey::Instance(names[0].clone());
    let e = t
        .allocate(&il, &req(&[&[&format!("{}-1", names[0])]]), now)
        .unwrap_err();
    assert!(matches!(e, AllocError::SlotTaken { .. }), "{e:?}");
    let mut u = BTreeMap::new();
    u.insert(format!("{}-0", names[0]), Usage::Node("node-b".into()));
    t.restore(&u);
    assert_eq!(
        ids(&t, &il),
        vec![
            (format!("{}-0", names[0]), false),
            (format!("{}-1", names[0]), false)
        ]
    );
    assert!(t
        .allocate(&il, &req(&[&[&format!("{}-0", names[0])]]), now)
        .is_err());
    assert_eq!(
        t.allocate(&il, &req(&[&["cam-x-0"]]), now).unwrap_err(),
        AllocError::UnknownId("cam-x-0".into())
    );
    assert_eq!(
        t.allocate(&pool(), &req(&[&["gpu-1"]]), now).unwrap_err(),
        AllocError::UnknownId("gpu-1".into())
    );
}

#[test]
fn an_instance_allocation_shrinks_the_pool() {
    let (mut t, names) = two_cameras();
    let now = Instant::now();
    for n in &names {
        let il = ResourceKey::Instance(n.clone());
        t.allocate(&il, &req(&[&[&format!("{n}-0"), &format!("{n}-1")]]), now)
            .unwrap();
    }
    assert_eq!(ids(&t, &pool()), vec![]);
    let e = t.allocate(&pool(), &req(&[&["0"]]), now).unwrap_err();
    assert_eq!(
        e,
        AllocError::NotEnoughDevices {
            needed: 1,
            available: 0
        }
    );
}

#[test]
fn devices_vms_hold_are_offered_to_nobody_and_claims_name_their_pods() {
    let (mut t, names) = two_cameras();
    let now = Instant::now();
    let g = t.allocate(&pool(), &req(&[&["0"]]), now).unwrap();
    let on = g[0][0].device.id.clone();
    let other = if on == "cam-a" { "cam-b" } else { "cam-a" };
    let other_instance = names
        .iter()
        .find(|n| **n != g[0][0].instance)
        .unwrap()
        .clone();
    assert!(t.set_vm_held(&[other.to_string()].into_iter().collect()));
    assert!(!t.set_vm_held(&[other.to_string()].into_iter().collect()));
    // The VM's device: every slot Unhealthy, no pool id, refused at Allocate.
    let key = ResourceKey::Instance(other_instance.clone());
    assert!(ids(&t, &key).iter().all(|(_, h)| !h));
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1"]));
    assert!(matches!(
        t.allocate(&key, &req(&[&[&format!("{other_instance}-0")]]), now),
        Err(AllocError::Unhealthy(_))
    ));
    assert!(matches!(
        t.allocate(&pool(), &req(&[&["1", "0"]]), now),
        Err(AllocError::NotEnoughDevices { .. })
    ));
    // Claims: the held slot, its device, and the pod once pod-resources lists it.
    let slot = g[0][0].slot.clone();
    assert_eq!(
        t.claims(&HashMap::new()),
        vec![Claim {
            slot: slot.clone(),
            device: on.clone(),
            pod: None,
            partition: None,
        }]
    );
    let pods: HashMap<(String, String), String> = [(
        ("accel.dev/cam".to_string(), "0".to_string()),
        "ns/p".to_string(),
    )]
    .into();
    assert_eq!(t.claims(&pods)[0].pod.as_deref(), Some("ns/p"));
    assert!(t.set_vm_held(&BTreeSet::new()));
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1", "2"]));
}

#[test]
fn unhealthy_and_gone_devices_offer_nothing_and_come_back() {
    let (mut t, _) = two_cameras();
    let now = Instant::now();
    let g = t.allocate(&pool(), &req(&[&["0"]]), now).unwrap();
    let (held, other) = if g[0][0].device.id == "cam-a" {
        ("cam-a", "cam-b")
    } else {
        ("cam-b", "cam-a")
    };
    let held_instance = g[0][0].slot.rsplit_once('-').unwrap().0.to_string();
    let sick = || Device {
        healthy: false,
        ..test_device(held, "CAMERA")
    };
    assert!(t.set_devices(&[sick(), test_device(other, "CAMERA")]));
    // "0" is on the sick device: Unhealthy; the other device still offers one id.
    assert_eq!(
        ids(&t, &pool()),
        vec![("0".into(), false), ("1".into(), true)]
    );
    // The other device is unplugged while nothing holds it: its plugin goes.
    assert!(t.set_devices(&[sick()]));
    assert_eq!(instances(&t), vec![held_instance.clone()]);
    // The held one goes too but keeps its instance while "0" is held.
    assert!(t.set_devices(&[]));
    assert_eq!(instances(&t), vec![held_instance.clone()]);
    assert_eq!(ids(&t, &pool()), vec![("0".into(), false)]);
    assert!(t.set_devices(&[test_device(held, "CAMERA")]));
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1"]));
    assert!(!t.set_devices(&[test_device(held, "CAMERA")]), "no change");
}

#[test]
fn reclaim_frees_unlisted_slots_after_the_grace_only() {
    let (mut t, names) = two_cameras();
    let t0 = Instant::now();
    let grace = Duration::from_secs(30);
    t.allocate(&pool(), &req(&[&["0", "1"]]), t0).unwrap();
    let il = ResourceKey::Instance(names[1].clone());
    let il_slot = format!("{}-0", names[1]);
    t.allocate(&il, &req(&[&[&il_slot]]), t0).unwrap();
    // The pod holding "1" and the instance slot is listed; "0" is not.
    let listed: HashSet<(String, String)> = [
        ("accel.dev/cam".to_string(), "1".to_string()),
        (format!("accel.dev/{}", names[1]), il_slot.clone()),
    ]
    .into();
    assert!(!t.reclaim(&listed, t0 + Duration::from_secs(29), grace));
    assert!(t.reclaim(&listed, t0 + Duration::from_secs(30), grace));
    assert_eq!(t.held_vdevs(), ["1".to_string()].into());
    // Nothing is listed any more: the rest goes a grace after it was last seen.
    let none = HashSet::new();
    assert!(!t.reclaim(&none, t0 + Duration::from_secs(59), grace));
    assert!(t.reclaim(&none, t0 + Duration::from_secs(60), grace));
    assert!(t.usage().values().all(|u| *u == Usage::Free));
    assert_eq!(ids(&t, &pool()), healthy(&["0", "1"]));
}

#[test]
fn a_device_cleaned_on_release_is_held_from_its_release_until_the_server_says_clean() {
    let mut t = SlotTable::new(NODE, &config(1));
    let cleaned = Device {
        traits: vec![CLEANED_ON_RELEASE.into()],
        ..test_device("cam-a", "CAMERA")
    };
    assert!(t.set_devices(&[cleaned]));
    let t0 = Instant::now();
    let grace = Duration::from_secs(30);
    t.allocate(&pool(), &req(&[&["0"]]), t0).unwrap();
    assert!(t.reclaim(&HashSet::new(), t0 + grace, grace));
    assert!(t.usage().values().all(|u| *u == Usage::Free));
    // Released, not offered: no window before the save that starts its cleaning.
    assert!(ids(&t, &pool()).iter().all(|(_, healthy)| !healthy));
    assert!(t.allocate(&pool(), &req(&[&["0"]]), t0).is_err());
    // The server answers it held while it is cleaned, then no longer.
    assert!(!t.set_vm_held(&["cam-a".to_string()].into_iter().collect()));
    assert!(t.set_vm_held(&BTreeSet::new()));
    assert!(ids(&t, &pool()).iter().any(|(_, healthy)| *healthy));
}

#[test]
fn restored_claims_get_a_full_grace() {
    let (mut t, names) = two_cameras();
    hold(&mut t, &names[0], 0, "7");
    let t0 = Instant::now();
    let grace = Duration::from_secs(30);
    assert!(!t.reclaim(&HashSet::new(), t0, grace));
    assert!(!t.reclaim(&HashSet::new(), t0 + Duration::from_secs(29), grace));
    assert!(t.reclaim(&HashSet::new(), t0 + Duration::from_secs(30), grace));
}

#[test]
fn usage_strings_are_seed_001s() {
    for (s, u) in [
        ("", Usage::Free),
        ("node-a", Usage::Node("node-a".into())),
        (
            "C:0:node-b",
            Usage::Pool {
                vdev: "0".into(),
                node: "node-b".into(),
            },
        ),
    ] {
        assert_eq!(s.parse::<Usage>().unwrap(), u);
        assert_eq!(u.to_string(), s);
    }
    assert!("C:0".parse::<Usage>().is_err());
    assert!("a:b".parse::<Usage>().is_err());
}

#[test]
fn preferred_allocation_puts_must_include_first_and_low_slots_next() {
    let (t, names) = two_cameras();
    let il = ResourceKey::Instance(names[0].clone());
    let s = |i: usize| format!("{}-{i}", names[0]);
    assert_eq!(t.preferred(&il, &[s(1), s(0)], &[], 1), vec![s(0)]);
    assert_eq!(
        t.preferred(&il, &[s(1), s(0)], &[s(1)], 2),
        vec![s(1), s(0)]
    );
    assert_eq!(
        t.preferred(&pool(), &["10".into(), "2".into()], &[], 1),
        vec!["2".to_string()]
    );
}

// ---- the property: no slot is ever given to two holders ----------------------------

#[derive(Debug, Clone)]
enum Op {
    Pool(Vec<Vec<u8>>),
    Instance(usize, Vec<u8>),
    Health(usize, bool),
    Present(usize, bool),
    /// Reclaim with a random subset of the held ids listed, at a later time.
    Reclaim(Vec<bool>, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(prop::collection::vec(0u8..6, 0..4), 1..3).prop_map(Op::Pool),
        3 => (0usize..3, prop::collection::vec(0u8..4, 0..3)).prop_map(|(d, s)| Op::Instance(d, s)),
        1 => (0usize..3, any::<bool>()).prop_map(|(d, h)| Op::Health(d, h)),
        1 => (0usize..3, any::<bool>()).prop_map(|(d, h)| Op::Present(d, h)),
        2 => (prop::collection::vec(any::<bool>(), 12), 0u8..40).prop_map(|(l, s)| Op::Reclaim(l, s)),
    ]
}

/// Who asked: a pooled virtual id or an instance slot id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Holder {
    Vdev(String),
    Slot(String),
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn no_slot_is_ever_double_assigned(capacity in 1u32..4, ops in prop::collection::vec(op(), 1..40)) {
        let mut t = SlotTable::new(NODE, &config(capacity));
        let devices: Vec<Device> = ["d0", "d1", "d2"].iter().map(|d| test_device(d, "GPU")).collect();
        let mut health = [true; 3];
        let mut present = [true; 3];
        let current = |h: &[bool; 3], p: &[bool; 3]| -> Vec<Device> {
            devices.iter().enumerate().filter(|(i, _)| p[*i])
                .map(|(i, d)| Device { healthy: h[i], ..d.clone() }).collect()
        };
        t.set_devices(&current(&health, &present));
        let names: Vec<String> = instances(&t);
        let mut holders: BTreeMap<String, Holder> = BTreeMap::new(); // slot -> holder
        let mut now = Instant::now();
        for op in ops {
            match op {
                Op::Pool(containers) => {
                    let r: Vec<Vec<String>> = containers.iter()
                        .map(|c| c.iter().map(|v| v.to_string()).collect()).collect();
                    let advertised = t.list(&pool()).unwrap();
                    let before = t.usage();
                    match t.allocate(&pool(), &r, now) {
                        Ok(grants) => {
                            for g in grants.iter() {
                                let devs: HashSet<&str> = g.iter().map(|x| x.device.id.as_str()).collect();
                                prop_assert_eq!(devs.len(), g.len(), "one container, distinct devices");
                            }
                            for g in grants.into_iter().flatten() {
                                let h = Holder::Vdev(g.id.clone());
                                if let Some(old) = holders.get(&g.slot) {
                                    prop_assert_eq!(old, &h, "slot {} given twice", g.slot);
                                }
                                prop_assert!(holders.iter().all(|(s, o)| *o != h || *s == g.slot), "vdev on two slots");
                                holders.insert(g.slot, h);
                            }
                        }
                        Err(_) => prop_assert_eq!(t.usage(), before, "a refusal changes nothing"),
                    }
                    // Advertising only what can be allocated: ids offered free are at
                    // most the offering devices with a free slot.
                    let held = t.held_vdevs();
                    prop_assert!(advertised.iter().filter(|a| !held.contains(&a.id)).count() <= 3);
                }
                Op::Instance(d, slots) => {
                    let name = &names[d];
                    let r = vec![slots.iter().map(|s| format!("{name}-{s}")).collect::<Vec<_>>()];
                    let before = t.usage();
                    match t.allocate(&ResourceKey::Instance(name.clone()), &r, now) {
                        Ok(grants) => for g in grants.into_iter().flatten() {
                            let h = Holder::Slot(g.id.clone());
                            if let Some(old) = holders.get(&g.slot) {
                                prop_assert_eq!(old, &h, "slot {} given twice", g.slot);
                            }
                            holders.insert(g.slot, h);
                        },
                        Err(_) => prop_assert_eq!(t.usage(), before, "a refusal changes nothing"),
                    }
                }
                Op::Health(d, h) => { health[d] = h; t.set_devices(&current(&health, &present)); }
                Op::Present(d, p) => { present[d] = p; t.set_devices(&current(&health, &present)); }
                Op::Reclaim(listed, step) => {
                    now += Duration::from_secs(u64::from(step));
                    let in_use: HashSet<(String, String)> = holders.iter().zip(listed.iter().cycle())
                        .filter(|(_, l)| **l)
                        .map(|((slot, h), _)| match h {
                            Holder::Vdev(v) => ("accel.dev/cam".to_string(), v.clone()),
                            Holder::Slot(s) => (format!("accel.dev/{}", slot.rsplit_once('-').unwrap().0), s.clone()),
                        })
                        .collect();
                    t.reclaim(&in_use, now, Duration::from_secs(30));
                }
            }
            // The model and the table agree on every held slot.
            let usage = t.usage();
            holders.retain(|slot, _| usage.get(slot).is_some_and(|u| *u != Usage::Free));
            for (slot, u) in &usage {
                match (u, holders.get(slot)) {
                    (Usage::Free, None) => {}
                    (Usage::Pool { vdev, .. }, Some(Holder::Vdev(v))) => prop_assert_eq!(vdev, v),
                    (Usage::Node(_), Some(Holder::Slot(s))) => prop_assert_eq!(slot, s),
                    (u, h) => prop_assert!(false, "slot {} is {:?} but the model says {:?}", slot, u, h),
                }
            }
        }
    }
}
