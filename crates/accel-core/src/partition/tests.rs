//! The ledger against the reference's H100 and H200 geometry (§1.2).

use super::fixtures::{h100_80gb, h200_141gb, with_vgpu};
use super::*;

fn mig(profile: u32, start: u32, size: u32) -> Consumer {
    Consumer::Mig {
        profile,
        at: Span { start, size },
    }
}

const P1G10: u32 = 19;
const P1G10ME: u32 = 20;
const P1G20: u32 = 15;
const P2G: u32 = 14;
const P3G: u32 = 9;
const P4G: u32 = 5;
const P7G: u32 = 0;

#[test]
fn an_empty_h100_offers_the_instance_counts_nvidia_smi_lists() {
    let g = h100_80gb();
    let c = g.creatable(&[]);
    let want = [
        (P1G10, 7),
        (P1G10ME, 1),
        (P1G20, 4),
        (P2G, 3),
        (P3G, 2),
        (P4G, 1),
        (P7G, 1),
    ];
    for (p, n) in want {
        assert_eq!(c.mig[&p], n, "profile {p}");
    }
    assert!(c.whole);
}

#[test]
fn an_empty_h200_offers_the_same_counts_under_its_names() {
    let g = h200_141gb();
    let counts: Vec<(String, u32)> = g
        .profiles
        .iter()
        .map(|p| (p.name.clone(), g.count(&[], &Want::Mig(p.id))))
        .collect();
    let want = [
        ("1g.18gb", 7),
        ("1g.18gb+me", 1),
        ("1g.35gb", 4),
        ("2g.35gb", 3),
        ("3g.71gb", 2),
        ("4g.71gb", 1),
        ("7g.141gb", 1),
    ];
    for (name, n) in want {
        assert!(counts.contains(&(name.to_owned(), n)), "{name}: {counts:?}");
    }
}

#[test]
fn a_1g_20gb_at_start_6_takes_the_last_two_slices() {
    let g = h100_80gb();
    let held = [mig(P1G20, 6, 2)];
    // Slices 6 and 7 are gone: a 1g.10gb at 6 overlaps, one at 5 fits.
    assert_eq!(
        g.fits(&held, &mig(P1G10, 6, 1)),
        Err(Conflict::Overlap { slices: 1 << 6 })
    );
    assert_eq!(g.fits(&held, &mig(P1G10, 5, 1)), Ok(()));
    // 3g at 4 and 7g overlap it; 3g at 0 and 4g at 0 do not (4g at 0 + 1g.20gb at 6:
    // 5 compute slices).
    assert!(g.fits(&held, &mig(P3G, 4, 4)).is_err());
    assert!(g.fits(&held, &mig(P7G, 0, 8)).is_err());
    assert_eq!(g.fits(&held, &mig(P3G, 0, 4)), Ok(()));
    let c = g.creatable(&held);
    assert_eq!(c.mig[&P1G20], 3);
    assert_eq!(c.mig[&P1G10], 6);
    assert_eq!(c.mig[&P2G], 3);
    assert_eq!(c.mig[&P3G], 1);
    assert_eq!(c.mig[&P7G], 0);
    assert!(!c.whole);
}

#[test]
fn a_3g_at_0_and_one_at_4_fill_the_gpu_a_4g_goes_only_at_0() {
    let g = h100_80gb();
    let at0 = [mig(P3G, 0, 4)];
    assert_eq!(g.creatable(&at0).mig[&P3G], 1);
    assert_eq!(g.creatable(&at0).mig[&P4G], 0);
    assert_eq!(
        g.place(&at0, &Want::Mig(P3G)),
        Ok(mig(P3G, 4, 4)),
        "the second 3g goes at 4"
    );
    let both = [mig(P3G, 0, 4), mig(P3G, 4, 4)];
    let c = g.creatable(&both);
    assert!(c.mig.values().all(|n| *n == 0), "{c:?}");
    // 4g at 0 and 3g at 4: 7 compute slices, 7 copy engines of 8, every decoder.
    let mixed = [mig(P4G, 0, 4)];
    assert_eq!(g.fits(&mixed, &mig(P3G, 4, 4)), Ok(()));
    assert_eq!(g.place(&mixed, &Want::Mig(P3G)), Ok(mig(P3G, 4, 4)));
    assert_eq!(
        g.fits(&mixed, &mig(P3G, 0, 4)),
        Err(Conflict::Overlap { slices: 0b1111 })
    );
    assert_eq!(
        g.fits(&[], &mig(P4G, 4, 4)),
        Err(Conflict::UnknownPlacement {
            profile: P4G,
            at: Some(Span { start: 4, size: 4 })
        })
    );
}

#[test]
fn one_ofa_engine_allows_one_media_extension_instance() {
    let g = h100_80gb();
    let held = [mig(P1G10ME, 3, 1)];
    assert_eq!(
        g.fits(&held, &mig(P1G10ME, 0, 1)),
        Err(Conflict::Exhausted("ofa-engines"))
    );
    assert_eq!(g.creatable(&held).mig[&P1G10ME], 0);
    assert_eq!(g.creatable(&held).mig[&P1G10], 6);
    // 7g.80gb has the OFA engine too.
    assert_eq!(g.creatable(&[mig(P7G, 0, 8)]).mig[&P1G10ME], 0);
}

#[test]
fn whole_and_slice_holders_never_coexist() {
    let g = h100_80gb();
    for whole in [Consumer::Whole, Consumer::Vfio] {
        assert_eq!(
            g.fits(&[mig(P1G10, 6, 1)], &whole),
            Err(Conflict::PartlyHeld)
        );
        assert_eq!(
            g.fits(std::slice::from_ref(&whole), &mig(P1G10, 0, 1)),
            Err(Conflict::WholeHeld)
        );
        let c = g.creatable(std::slice::from_ref(&whole));
        assert!(c.mig.values().all(|n| *n == 0) && !c.whole);
        assert_eq!(
            g.fits(&[Consumer::Whole], &Consumer::Vfio),
            Err(Conflict::PartlyHeld)
        );
    }
}

#[test]
fn small_instances_fill_from_the_top_and_keep_the_large_profiles_possible() {
    let g = h100_80gb();
    let mut held = Vec::new();
    let first = g.place(&held, &Want::Mig(P1G10)).unwrap();
    assert_eq!(first, mig(P1G10, 6, 1));
    held.push(first);
    // 2g at 0/2/4 and 3g at 0 remain; a 1g.20gb lost its placement at 6.
    let c = g.creatable(&held);
    assert_eq!((c.mig[&P2G], c.mig[&P3G], c.mig[&P1G20]), (3, 1, 3));
    for _ in 0..6 {
        let next = g.place(&held, &Want::Mig(P1G10)).unwrap();
        held.push(next);
    }
    assert!(g.place(&held, &Want::Mig(P1G10)).is_err());
    let mut starts: Vec<u32> = held
        .iter()
        .map(|c| match c {
            Consumer::Mig { at, .. } => at.start,
            _ => unreachable!(),
        })
        .collect();
    starts.sort_unstable();
    assert_eq!(starts, [0, 1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_claim_of_several_partitions_places_the_largest_first() {
    let g = h100_80gb();
    // Asked 3g first, 4g second: the 4g still gets slice 0.
    let placed = g.place_all(&[], &[Want::Mig(P3G), Want::Mig(P4G)]).unwrap();
    assert_eq!(placed, [mig(P3G, 4, 4), mig(P4G, 0, 4)]);
    // Two 3g and a 4g never fit together, in any order.
    for wants in [
        [Want::Mig(P3G), Want::Mig(P3G), Want::Mig(P4G)],
        [Want::Mig(P4G), Want::Mig(P3G), Want::Mig(P3G)],
    ] {
        assert!(g.place_all(&[], &wants).is_err());
    }
    // The whole GPU beside anything: no (the whole GPU is placed first).
    assert_eq!(
        g.place_all(&[], &[Want::Mig(P1G10), Want::Vfio]),
        Err(Conflict::WholeHeld)
    );
}

#[test]
fn mig_slices_need_mig_mode_on() {
    let g = with_vgpu(h100_80gb(), false);
    assert_eq!(g.fits(&[], &mig(P1G10, 0, 1)), Err(Conflict::MigOff));
    assert_eq!(g.creatable(&[]).mig[&P1G10], 0);
    // The provider keeps its size: MIG mode is an operator's switch away.
    let cap = g.capacity(&[], &Member::Mig(P1G10));
    assert_eq!((cap.total, cap.free, cap.reserved()), (7, 0, 7));
}

#[test]
fn time_sliced_vgpu_types_need_mig_off_and_one_type_per_gpu() {
    let off = with_vgpu(h100_80gb(), false);
    let ts = Consumer::Vgpu {
        type_id: "nvidia-1001".into(),
        at: None,
    };
    // 8 instances of 10 GiB ask 80 GiB of 79.25: memory allows 7.
    assert_eq!(off.count(&[], &Want::Vgpu("nvidia-1001".into())), 7);
    assert_eq!(
        off.fits(std::slice::from_ref(&ts), &Consumer::Whole),
        Err(Conflict::PartlyHeld)
    );
    let on = with_vgpu(h100_80gb(), true);
    assert_eq!(on.fits(&[], &ts), Err(Conflict::MigOn));
    // The MIG-backed type needs MIG on and draws the 1g.10gb placements.
    let backed = Want::Vgpu("nvidia-1002".into());
    assert_eq!(on.count(&[], &backed), 7);
    let v = on.place(&[mig(P1G10, 6, 1)], &backed).unwrap();
    assert_eq!(
        v,
        Consumer::Vgpu {
            type_id: "nvidia-1002".into(),
            at: Some(Span { start: 5, size: 1 })
        }
    );
    assert_eq!(on.creatable(&[mig(P1G10, 6, 1), v]).mig[&P1G10], 5);
    assert_eq!(off.count(&[], &backed), 0);
    assert_eq!(off.place(&[], &backed), Err(Conflict::MigOff));
}

#[test]
fn another_time_sliced_type_waits_for_the_first_to_go() {
    let mut g = with_vgpu(h100_80gb(), false);
    let mut other = g.vgpu_types[0].clone();
    other.type_id = "nvidia-1003".into();
    other.name = "TEST H100-20C".into();
    other.memory_mib = 20480;
    other.max_instances = 4;
    g.vgpu_types.push(other);
    let held = [Consumer::Vgpu {
        type_id: "nvidia-1001".into(),
        at: None,
    }];
    assert_eq!(
        g.place(&held, &Want::Vgpu("nvidia-1003".into())),
        Err(Conflict::OtherVgpuType("nvidia-1001".into()))
    );
    assert_eq!(g.count(&held, &Want::Vgpu("nvidia-1001".into())), 6);
}

#[test]
fn an_existing_instance_nobody_holds_blocks_others_and_is_adopted_first() {
    let mut g = h100_80gb();
    g.standing.push(Standing {
        profile_id: P3G,
        at: Span { start: 0, size: 4 },
    });
    assert!(g.fits(&[], &Consumer::Whole).is_err());
    assert_eq!(
        g.fits(&[], &mig(P1G10, 0, 1)),
        Err(Conflict::Overlap { slices: 1 })
    );
    assert_eq!(g.place(&[], &Want::Mig(P3G)), Ok(mig(P3G, 0, 4)));
    assert_eq!(g.count(&[], &Want::Mig(P3G)), 2);
    assert_eq!(g.count(&[], &Want::Mig(P1G10)), 3);
}

#[test]
fn capacities_leave_placement_exactly_what_the_ledger_can_still_create() {
    let g = h100_80gb();
    let held = [mig(P1G20, 6, 2), mig(P3G, 0, 4)];
    let caps: std::collections::BTreeMap<Member, Capacity> =
        g.capacities(&held).into_iter().collect();
    let c = caps[&Member::Mig(P1G20)];
    assert_eq!((c.total, c.held, c.free, c.reserved()), (4, 1, 1, 2));
    let c = caps[&Member::Mig(P3G)];
    assert_eq!((c.total, c.held, c.free, c.reserved()), (2, 1, 0, 1));
    let c = caps[&Member::Whole];
    assert_eq!((c.free, c.reserved()), (0, 1));
    let c = caps[&Member::Mig(P1G10)];
    // Slices 4 and 5 are all that is left.
    assert_eq!((c.total, c.free), (7, 2));
}

#[test]
fn names_follow_the_profile() {
    let g = with_vgpu(h100_80gb(), true);
    let m = Member::Mig(P1G10ME);
    assert_eq!(
        m.resource_class(&g).as_deref(),
        Some("CUSTOM_MIG_1G_10GB_ME")
    );
    assert_eq!(
        m.traits(&g),
        [
            "CUSTOM_GPU_PARTITION",
            "CUSTOM_MIG_1G_10GB_ME",
            "CUSTOM_GPU_MEMORY_10GB"
        ]
    );
    assert_eq!(
        m.provider_name(&g, "n_0000:3b:00.0"),
        "n_0000:3b:00.0_mig_1g.10gb+me"
    );
    let v = Member::Vgpu("nvidia-1002".into());
    assert_eq!(v.resource_class(&g).as_deref(), Some("VGPU"));
    assert!(v
        .traits(&g)
        .contains(&"CUSTOM_VGPU_TEST_H100_1_10C".to_owned()));
    assert!(v.traits(&g).contains(&"CUSTOM_MIG_1G_10GB".to_owned()));
    for m in members(&g) {
        assert_eq!(Member::from_key(&m.key()), Some(m));
    }
    assert_eq!(Member::from_key("mig:x"), None);
}

#[test]
fn the_geometry_survives_json() {
    let g = with_vgpu(h200_141gb(), true);
    let text = serde_json::to_string(&g).unwrap();
    assert_eq!(serde_json::from_str::<Geometry>(&text).unwrap(), g);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A step: ask for a want (index into the GPU's wants), or release a holder.
    #[derive(Debug, Clone)]
    enum Step {
        Ask(usize),
        Release(usize),
    }

    fn wants(g: &Geometry) -> Vec<Want> {
        let mut v = vec![Want::Whole, Want::Vfio];
        v.extend(g.profiles.iter().map(|p| Want::Mig(p.id)));
        v.extend(g.vgpu_types.iter().map(|t| Want::Vgpu(t.type_id.clone())));
        v
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            prop_oneof![
                3 => (0usize..16).prop_map(Step::Ask),
                1 => (0usize..16).prop_map(Step::Release),
            ],
            1..40,
        )
    }

    proptest! {
        /// Whatever the order of asks and releases: holders never share a memory
        /// slice or exceed a counter, a want is placed exactly when its count says
        /// one more fits, and a release gives back what the ask took.
        #[test]
        fn holders_never_overlap_and_counts_agree_with_placing(
            steps in steps(), h200 in any::<bool>(), mig in any::<bool>()
        ) {
            let base = if h200 { h200_141gb() } else { h100_80gb() };
            let g = with_vgpu(base, mig);
            let wants = wants(&g);
            let mut held: Vec<Consumer> = Vec::new();
            for s in steps {
                match s {
                    Step::Ask(i) => {
                        let w = &wants[i % wants.len()];
                        let n = g.count(&held, w);
                        let before = g.creatable(&held);
                        match g.place(&held, w) {
                            Ok(c) => {
                                prop_assert!(n >= 1);
                                prop_assert_eq!(g.fits(&held, &c), Ok(()));
                                held.push(c);
                                prop_assert_eq!(g.count(&held, w), n - 1);
                                let mut back = held.clone();
                                back.pop();
                                prop_assert_eq!(g.creatable(&back), before);
                            }
                            Err(_) => prop_assert_eq!(n, 0),
                        }
                    }
                    Step::Release(i) if !held.is_empty() => {
                        held.remove(i % held.len());
                    }
                    Step::Release(_) => {}
                }
                let mut slices = 0u64;
                for h in &held {
                    let t = g.take(h).unwrap();
                    prop_assert_eq!(slices & t.slices, 0, "{:?}", held);
                    slices |= t.slices;
                }
                prop_assert!(g.used(&held).engines.exceeds(g.totals).is_none());
                let whole = held.iter().any(|h| matches!(h, Consumer::Whole | Consumer::Vfio));
                prop_assert!(!whole || held.len() == 1);
            }
        }
    }
}

#[test]
fn a_gpu_with_mig_off_and_no_profiles_is_a_ledger_without_slices() {
    // NVML describes no profiles while MIG is off, and the agent reports 0 slices.
    let mut g = h100_80gb();
    g.mig_enabled = false;
    g.profiles.clear();
    g.memory_slices = 0;
    assert_eq!(g.check(), Ok(()));
    assert_eq!(g.fits(&[], &Consumer::Vfio), Ok(()));
    assert_eq!(
        g.fits(&[Consumer::Vfio], &Consumer::Whole),
        Err(Conflict::PartlyHeld)
    );
    // Profiles need slices to be placed in.
    let mut bad = h100_80gb();
    bad.memory_slices = 0;
    assert_eq!(bad.check(), Err(BadGeometry::Slices(0)));
}
