//! `nvidia-smi mig -lgip` and `-lgipp` text, parsed into the GPU instance profiles a
//! model answers NVML with.
//!
//! `-lgip` prints two table lines per profile:
//!
//! ```text
//! |   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |
//! |                                                             1     1     0   |
//! ```
//!
//! (GPU, name, hardware profile id, free/total instances, memory in GiB, P2P, SMs,
//! decoders, encoders; then copy engines, JPEG, OFA), and `-lgipp` one line per
//! profile: `GPU  0 Profile ID  9 Placements: {0,4}:4` (the starting memory slices and
//! the number of memory slices an instance takes). Lines starting with `#` are notes
//! and skipped; only GPU 0's rows are read.

/// One GPU instance profile, as `-lgip` and `-lgipp` print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// `1g.10gb` (nvidia-smi's name without its `MIG ` prefix).
    pub name: String,
    /// The hardware profile id (19 for `1g.10gb`).
    pub id: u32,
    /// Instances the GPU can hold at most (the `Total` of `Free/Total`).
    pub instances: u32,
    /// Memory in MiB: the GiB column (two decimals) times 1024, rounded to 32 MiB.
    pub memory_mib: u64,
    pub p2p: bool,
    pub multiprocessors: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub copy_engines: u32,
    pub jpeg: u32,
    pub ofa: u32,
    /// Compute slices (the `1` of `1g`).
    pub slices: u32,
    /// Placements `(start, size)` in memory slices.
    pub placements: Vec<(u32, u32)>,
}

impl Profile {
    /// The `NVML_GPU_INSTANCE_PROFILE_*` index NVML enumerates this profile under
    /// (`nvmlDeviceGetGpuInstanceProfileInfoV`'s `profile` argument), from its shape:
    /// `1_SLICE` 0, `2_SLICE` 1, `3_SLICE` 2, `4_SLICE` 3, `7_SLICE` 4, `8_SLICE` 5,
    /// `6_SLICE` 6, `1_SLICE_REV1` 7 (1g with media extensions, `+me`), `2_SLICE_REV1`
    /// 8 (`2g...+me`), `1_SLICE_REV2` 9 (1g with twice the memory slices),
    /// `1_SLICE_NO_ME` 13 and `2_SLICE_NO_ME` 14 (`-me`).
    pub fn index(&self) -> Option<u32> {
        let me = self.name.contains("+me");
        let no_me = self.name.contains("-me");
        let mem = self.placements.first().map_or(0, |p| p.1);
        Some(match (self.slices, me, no_me) {
            (1, true, _) => 7,
            (1, _, true) => 13,
            (1, false, false) if mem == 2 => 9,
            (1, false, false) => 0,
            (2, true, _) => 8,
            (2, _, true) => 14,
            (2, false, false) => 1,
            (3, false, false) => 2,
            (4, false, false) => 3,
            (7, false, false) => 4,
            (8, false, false) => 5,
            (6, false, false) => 6,
            _ => return None,
        })
    }
}

/// One `-lgip` row before its placements are known.
fn row(first: &[&str], second: &[&str]) -> Result<Profile, String> {
    let num = |s: &str, what: &str| -> Result<u32, String> {
        s.parse()
            .map_err(|_| format!("{what} {s:?} is not a number in {first:?}"))
    };
    // GPU, MIG, name, id, free/total, memory, p2p, sm, dec, enc
    let name = first[2].to_owned();
    let total = first[4]
        .split_once('/')
        .ok_or_else(|| format!("instances {:?} is not free/total", first[4]))?
        .1;
    let gib: f64 = first[5]
        .parse()
        .map_err(|_| format!("memory {:?} is not GiB", first[5]))?;
    let slices = name
        .split_once('g')
        .and_then(|(n, _)| n.parse().ok())
        .ok_or_else(|| format!("profile name {name:?} does not start with <slices>g"))?;
    Ok(Profile {
        id: num(first[3], "profile id")?,
        instances: num(total, "instances")?,
        memory_mib: ((gib * 1024.0 / 32.0).round() as u64) * 32,
        p2p: first[6].eq_ignore_ascii_case("yes"),
        multiprocessors: num(first[7], "SMs")?,
        decoders: num(first[8], "decoders")?,
        encoders: num(first[9], "encoders")?,
        copy_engines: num(second[0], "copy engines")?,
        jpeg: num(second[1], "JPEG engines")?,
        ofa: num(second[2], "OFA engines")?,
        slices,
        placements: Vec::new(),
        name,
    })
}

/// The profiles of GPU 0 in `nvidia-smi mig -lgip` output, in the order printed.
pub fn parse_lgip(text: &str) -> Result<Vec<Profile>, String> {
    let mut out = Vec::new();
    let mut pending: Option<Vec<&str>> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || !line.starts_with('|') {
            continue;
        }
        let tokens: Vec<&str> = line.trim_matches('|').split_whitespace().collect();
        if tokens.len() >= 10 && tokens[1] == "MIG" && tokens[0].parse::<u32>().is_ok() {
            if pending.is_some() {
                return Err(format!(
                    "profile row without its engine row before {line:?}"
                ));
            }
            pending = Some(tokens);
        } else if tokens.len() == 3 && tokens.iter().all(|t| t.parse::<u32>().is_ok()) {
            let first = pending
                .take()
                .ok_or_else(|| format!("engine row {line:?} without a profile row"))?;
            if first[0] == "0" {
                out.push(row(&first, &tokens)?);
            }
        }
    }
    if pending.is_some() {
        return Err("the last profile row has no engine row".into());
    }
    if out.is_empty() {
        return Err("no GPU instance profile rows".into());
    }
    Ok(out)
}

/// A profile id and its placements `(start, size)`.
pub type Placements = (u32, Vec<(u32, u32)>);

/// The placements of GPU 0's profiles in `nvidia-smi mig -lgipp` output.
pub fn parse_lgipp(text: &str) -> Result<Vec<Placements>, String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let bad = || format!("not a placement line: {line:?}");
        let rest = line.strip_prefix("GPU").ok_or_else(bad)?.trim_start();
        let (gpu, rest) = rest.split_once("Profile ID").ok_or_else(bad)?;
        if gpu.trim() != "0" {
            continue;
        }
        let (id, rest) = rest.split_once("Placement").ok_or_else(bad)?;
        let id: u32 = id.trim().parse().map_err(|_| bad())?;
        let open = rest.find('{').ok_or_else(bad)?;
        let close = rest.find('}').ok_or_else(bad)?;
        let size: u32 = rest[close + 1..]
            .trim()
            .strip_prefix(':')
            .ok_or_else(bad)?
            .trim()
            .parse()
            .map_err(|_| bad())?;
        let starts = rest[open + 1..close]
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<u32>()
                    .map(|s| (s, size))
                    .map_err(|_| bad())
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push((id, starts));
    }
    Ok(out)
}

/// The profiles of a `-lgip` capture with the placements of its `-lgipp` capture;
/// every profile must have placements.
pub fn geometry(lgip: &str, lgipp: &str) -> Result<Vec<Profile>, String> {
    let mut profiles = parse_lgip(lgip)?;
    let placements = parse_lgipp(lgipp)?;
    for p in &mut profiles {
        p.placements = placements
            .iter()
            .find(|(id, _)| *id == p.id)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("profile {} (id {}) has no placements", p.name, p.id))?;
        if p.index().is_none() {
            return Err(format!("profile {} has no NVML profile index", p.name));
        }
    }
    Ok(profiles)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100_LGIP: &str = include_str!("../captures/h100-80gb-hbm3.lgip.txt");
    const H100_LGIPP: &str = include_str!("../captures/h100-80gb-hbm3.lgipp.txt");
    const H200_LGIP: &str = include_str!("../captures/h200-141gb.lgip.txt");
    const H200_LGIPP: &str = include_str!("../captures/h200-141gb.lgipp.txt");

    #[test]
    fn h100_capture_parses_to_the_hardware_profiles() {
        let g = geometry(H100_LGIP, H100_LGIPP).unwrap();
        let ids: Vec<(&str, u32, u32)> = g
            .iter()
            .map(|p| (p.name.as_str(), p.id, p.instances))
            .collect();
        assert_eq!(
            ids,
            [
                ("1g.10gb", 19, 7),
                ("1g.10gb+me", 20, 1),
                ("1g.20gb", 15, 4),
                ("2g.20gb", 14, 3),
                ("3g.40gb", 9, 2),
                ("4g.40gb", 5, 1),
                ("7g.80gb", 0, 1),
            ]
        );
        let seven = g.iter().find(|p| p.id == 0).unwrap();
        assert_eq!(seven.memory_mib, 81152);
        assert_eq!(
            (
                seven.multiprocessors,
                seven.copy_engines,
                seven.decoders,
                seven.jpeg,
                seven.ofa
            ),
            (132, 8, 7, 7, 1)
        );
        assert_eq!(seven.placements, [(0, 8)]);
        let one = g.iter().find(|p| p.id == 19).unwrap();
        assert_eq!(one.memory_mib, 9984);
        assert_eq!(one.placements.len(), 7);
        let wide = g.iter().find(|p| p.id == 15).unwrap();
        assert_eq!(wide.memory_mib, 20096);
        assert_eq!(wide.placements, [(0, 2), (2, 2), (4, 2), (6, 2)]);
        assert_eq!(wide.index(), Some(9));
        assert_eq!(g.iter().find(|p| p.id == 20).unwrap().index(), Some(7));
        assert_eq!(g.iter().find(|p| p.id == 9).unwrap().index(), Some(2));
    }

    #[test]
    fn h200_capture_parses_with_the_hopper_ids() {
        let g = geometry(H200_LGIP, H200_LGIPP).unwrap();
        let names: Vec<&str> = g.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "1g.18gb",
                "1g.18gb+me",
                "1g.35gb",
                "2g.35gb",
                "3g.71gb",
                "4g.71gb",
                "7g.141gb"
            ]
        );
        let ids: Vec<u32> = g.iter().map(|p| p.id).collect();
        assert_eq!(ids, [19, 20, 15, 14, 9, 5, 0]);
        assert_eq!(g[6].memory_mib, 143360);
    }

    #[test]
    fn malformed_captures_are_refused_with_the_line() {
        assert!(parse_lgip("nothing here").is_err());
        let e = parse_lgipp("GPU  0 Profile ID x Placements: {0}:8").unwrap_err();
        assert!(e.contains("Profile ID x"), "{e}");
        let e = geometry(H100_LGIP, "GPU  0 Profile ID 19 Placements: {0}:1").unwrap_err();
        assert!(e.contains("has no placements"), "{e}");
    }
}
