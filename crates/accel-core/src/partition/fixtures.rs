//! GPU geometries from the reference's tables (`gpu-sharing-2026.md` §1.2), for tests
//! here, in the store and in the server, and for fakes: the hardware's facts written
//! once.
//!
//! H100 80GB is a real `nvidia-smi mig -lgip` capture (profile ids, memory, SMs,
//! engines) with the placements of §1.2 (8 memory slices; `1g` at 0-6, `1g.20gb` at
//! 0/2/4/6, `2g` at 0/2/4, `3g` at 0/4, `4g` at 0, `7g` at 0) and the GPU's counter
//! totals (§2.3: 81152 MiB, 132 SMs; 8 copy engines, 7 decoders, 7 JPEG, 1 OFA as
//! `7g.80gb` has them). H200 141GB has the names and instance counts of §1.2 and the
//! same die (ids, SMs, engines, placements); its memory sizes were not captured, so
//! they are H100's scaled by 141/80 (rounded down to 128 MiB): the ledger's rules turn
//! on slices, engines and counts, which the names and counts fix.

use super::geometry::{Engines, Geometry, Profile, Span, VgpuType};

fn engines(memory_mib: i64, sms: u32, ce: u32, dec: u32, jpeg: u32, ofa: u32) -> Engines {
    Engines {
        memory_mib,
        multiprocessors: sms,
        copy_engines: ce,
        decoders: dec,
        encoders: 0,
        jpeg_engines: jpeg,
        ofa_engines: ofa,
    }
}

fn spans(starts: &[u32], size: u32) -> Vec<Span> {
    starts.iter().map(|&start| Span { start, size }).collect()
}

/// (name, id, compute slices, memory MiB, SMs, CE, DEC, JPEG, OFA, starts, size)
type Row = (
    &'static str,
    u32,
    u32,
    i64,
    u32,
    u32,
    u32,
    u32,
    u32,
    &'static [u32],
    u32,
);

const HOPPER: [Row; 7] = [
    (
        "1g.10gb",
        19,
        1,
        9984,
        16,
        1,
        1,
        1,
        0,
        &[0, 1, 2, 3, 4, 5, 6],
        1,
    ),
    (
        "1g.10gb+me",
        20,
        1,
        9984,
        16,
        1,
        1,
        1,
        1,
        &[0, 1, 2, 3, 4, 5, 6],
        1,
    ),
    ("1g.20gb", 15, 1, 20096, 26, 1, 1, 1, 0, &[0, 2, 4, 6], 2),
    ("2g.20gb", 14, 2, 20096, 32, 2, 2, 2, 0, &[0, 2, 4], 2),
    ("3g.40gb", 9, 3, 40448, 60, 3, 3, 3, 0, &[0, 4], 4),
    ("4g.40gb", 5, 4, 40448, 64, 4, 4, 4, 0, &[0], 4),
    ("7g.80gb", 0, 7, 81152, 132, 8, 7, 7, 1, &[0], 8),
];

fn hopper(names: [&str; 7], memory: impl Fn(i64) -> i64) -> Geometry {
    let profiles = HOPPER
        .iter()
        .zip(names)
        .map(|(r, name)| Profile {
            id: r.1,
            name: name.to_owned(),
            compute_slices: r.2,
            engines: engines(memory(r.3), r.4, r.5, r.6, r.7, r.8),
            placements: spans(r.9, r.10),
        })
        .collect();
    Geometry {
        mig_enabled: true,
        memory_slices: 8,
        totals: engines(memory(81152), 132, 8, 7, 7, 1),
        profiles,
        standing: Vec::new(),
        vgpu_types: Vec::new(),
    }
}

/// An H100 80GB with MIG mode on and nothing created.
pub fn h100_80gb() -> Geometry {
    hopper(
        [
            "1g.10gb",
            "1g.10gb+me",
            "1g.20gb",
            "2g.20gb",
            "3g.40gb",
            "4g.40gb",
            "7g.80gb",
        ],
        |m| m,
    )
}

/// An H200 141GB with MIG mode on and nothing created.
pub fn h200_141gb() -> Geometry {
    hopper(
        [
            "1g.18gb",
            "1g.18gb+me",
            "1g.35gb",
            "2g.35gb",
            "3g.71gb",
            "4g.71gb",
            "7g.141gb",
        ],
        |m| m * 141 / 80 / 128 * 128,
    )
}

/// The same GPU with MIG mode off and two vGPU types offered: a time-sliced type
/// (8 instances of 10 GiB) and a MIG-backed one on profile 19 (its placements). Test
/// types: the reference lists no vGPU type table.
pub fn with_vgpu(mut g: Geometry, mig_enabled: bool) -> Geometry {
    g.mig_enabled = mig_enabled;
    g.vgpu_types = vec![
        VgpuType {
            type_id: "nvidia-1001".into(),
            name: "TEST H100-10C".into(),
            memory_mib: 10240,
            max_instances: 8,
            mig_profile_id: None,
        },
        VgpuType {
            type_id: "nvidia-1002".into(),
            name: "TEST H100-1-10C".into(),
            memory_mib: 9984,
            max_instances: 7,
            mig_profile_id: Some(19),
        },
    ];
    g
}
