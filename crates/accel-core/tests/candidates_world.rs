//! Shared helpers for the candidate-search tests: a named-provider world builder that
//! mirrors upstream's functional-test helpers (`create_provider`, `add_inventory` with
//! `max_unit` defaulting to `total`, `set_traits`, allocations), and a parser for the
//! query strings of the gabbi files so scenarios read like the originals.
//!
//! Included by the other `candidates_*` test crates with `#[path]`; compiled on its own
//! it holds no tests.
#![allow(dead_code)]

use std::collections::HashMap;

use accel_core::candidates::{
    search, Candidate, GroupPolicy, Inventory, Outcome, Provider, ProviderId, RcId, Request,
    RequestGroup, Snapshot, TraitId,
};
use accel_core::capacity::Limits;
use uuid::Uuid;

pub const SHARES: &str = "MISC_SHARES_VIA_AGGREGATE";

#[derive(Default)]
pub struct World {
    pub providers: Vec<Provider>,
    names: HashMap<String, ProviderId>,
    traits: HashMap<String, TraitId>,
    rcs: HashMap<String, RcId>,
    aggs: HashMap<String, Uuid>,
}

impl World {
    pub fn new() -> Self {
        let mut w = World::default();
        w.t(SHARES);
        w
    }

    pub fn t(&mut self, name: &str) -> TraitId {
        let next = self.traits.len() as TraitId;
        *self.traits.entry(name.to_owned()).or_insert(next)
    }

    pub fn rc(&mut self, name: &str) -> RcId {
        let next = self.rcs.len() as RcId;
        *self.rcs.entry(name.to_owned()).or_insert(next)
    }

    pub fn agg(&mut self, name: &str) -> Uuid {
        *self
            .aggs
            .entry(name.to_owned())
            .or_insert_with(Uuid::new_v4)
    }

    pub fn id(&self, name: &str) -> ProviderId {
        *self
            .names
            .get(name)
            .unwrap_or_else(|| panic!("no provider {name}"))
    }

    pub fn name(&self, id: ProviderId) -> String {
        self.names
            .iter()
            .find(|(_, &v)| v == id)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| format!("#{}", id.0))
    }

    /// The name a resource class was interned under.
    pub fn rc_name(&self, rc: RcId) -> String {
        self.rcs
            .iter()
            .find(|(_, &v)| v == rc)
            .map_or_else(|| format!("rc#{rc}"), |(k, _)| k.clone())
    }

    /// The name a trait was interned under.
    pub fn trait_name(&self, t: TraitId) -> String {
        self.traits
            .iter()
            .find(|(_, &v)| v == t)
            .map_or_else(|| format!("trait#{t}"), |(k, _)| k.clone())
    }

    pub fn rp(&mut self, name: &str, parent: Option<&str>, aggs: &[&str]) -> ProviderId {
        let id = ProviderId(self.providers.len() as u32);
        let (parent, root) = match parent {
            Some(p) => {
                let pid = self.id(p);
                (Some(pid), self.providers[pid.index()].root)
            }
            None => (None, id),
        };
        let aggregates = aggs.iter().map(|a| self.agg(a)).collect();
        self.providers.push(Provider {
            uuid: Uuid::new_v4(),
            parent,
            root,
            inventories: Vec::new(),
            traits: Vec::new(),
            aggregates,
        });
        self.names.insert(name.to_owned(), id);
        id
    }

    pub fn set_aggs(&mut self, name: &str, aggs: &[&str]) {
        let aggregates = aggs.iter().map(|a| self.agg(a)).collect();
        let id = self.id(name);
        self.providers[id.index()].aggregates = aggregates;
    }

    /// `add_inventory` with upstream test defaults: `max_unit = total`.
    pub fn inv(&mut self, name: &str, rc: &str, total: i64) -> &mut Inventory {
        let rc = self.rc(rc);
        let id = self.id(name);
        let invs = &mut self.providers[id.index()].inventories;
        invs.push(Inventory {
            rc,
            limits: Limits::whole(total),
            used: 0,
        });
        invs.last_mut().unwrap()
    }

    pub fn traits(&mut self, name: &str, traits: &[&str]) {
        let ids = traits.iter().map(|t| self.t(t)).collect();
        let id = self.id(name);
        self.providers[id.index()].traits = ids;
    }

    pub fn use_(&mut self, name: &str, rc: &str, amount: i64) {
        let rc = self.rc(rc);
        let id = self.id(name);
        let inv = self.providers[id.index()]
            .inventories
            .iter_mut()
            .find(|i| i.rc == rc)
            .expect("inventory to allocate from");
        inv.used += amount;
    }

    pub fn snapshot(&self) -> Snapshot {
        let sharing = self.traits.get(SHARES).copied();
        Snapshot::new(self.providers.clone(), sharing).expect("valid forest")
    }

    /// Parse a gabbi-style query string (latest microversion syntax). `nested` is
    /// microversion >= 1.29.
    pub fn query(&mut self, qs: &str, nested: bool) -> Request {
        let mut req = Request {
            nested,
            ..Request::default()
        };
        let mut groups: Vec<RequestGroup> = Vec::new();
        for pair in qs.split('&').filter(|p| !p.is_empty()) {
            let (key, val) = pair.split_once('=').expect("key=value");
            match key {
                "group_policy" => {
                    req.group_policy = if val == "isolate" {
                        GroupPolicy::Isolate
                    } else {
                        GroupPolicy::None
                    }
                }
                "limit" => req.limit = Some(val.parse().unwrap()),
                "same_subtree" => req
                    .same_subtree
                    .push(val.split(',').map(str::to_owned).collect()),
                "root_required" => {
                    for t in val.split(',') {
                        match t.strip_prefix('!') {
                            Some(f) => req.root_forbidden.push(self.t(f)),
                            None => req.root_required.push(vec![self.t(t)]),
                        }
                    }
                }
                _ => {
                    let (prefix, suffix) = ["resources", "required", "member_of", "in_tree"]
                        .iter()
                        .find_map(|p| key.strip_prefix(p).map(|s| (*p, s)))
                        .unwrap_or_else(|| panic!("unknown key {key}"));
                    let gi = match groups.iter().position(|g| g.suffix == suffix) {
                        Some(gi) => gi,
                        None => {
                            groups.push(RequestGroup {
                                suffix: suffix.to_owned(),
                                ..RequestGroup::default()
                            });
                            groups.len() - 1
                        }
                    };
                    self.fill(&mut groups[gi], prefix, val);
                }
            }
        }
        req.groups = groups;
        req
    }

    fn fill(&mut self, g: &mut RequestGroup, prefix: &str, val: &str) {
        match prefix {
            "resources" => {
                for part in val.split(',') {
                    let (rc, n) = part.split_once(':').unwrap();
                    let rc = self.rc(rc);
                    g.resources.push((rc, n.parse().unwrap()));
                }
            }
            "required" => {
                if let Some(any) = val.strip_prefix("in:") {
                    g.required.push(any.split(',').map(|t| self.t(t)).collect());
                } else {
                    for t in val.split(',') {
                        match t.strip_prefix('!') {
                            Some(f) => g.forbidden.push(self.t(f)),
                            None => g.required.push(vec![self.t(t)]),
                        }
                    }
                }
            }
            "member_of" => {
                if let Some(any) = val.strip_prefix("!in:") {
                    g.forbidden_aggregates
                        .extend(any.split(',').map(|a| self.agg(a)));
                } else if let Some(a) = val.strip_prefix('!') {
                    g.forbidden_aggregates.push(self.agg(a));
                } else if let Some(any) = val.strip_prefix("in:") {
                    g.member_of
                        .push(any.split(',').map(|a| self.agg(a)).collect());
                } else {
                    g.member_of.push(vec![self.agg(val)]);
                }
            }
            "in_tree" => g.in_tree = Some(self.id(val)),
            _ => unreachable!(),
        }
    }

    /// Search with no cap.
    pub fn run(&mut self, qs: &str, nested: bool) -> Outcome {
        let req = self.query(qs, nested);
        search(&self.snapshot(), &req, usize::MAX)
    }

    /// Amounts of `rc` on `provider` across candidates, sorted (like gabbi's `[1, 1]`).
    pub fn amounts(&mut self, out: &Outcome, provider: &str, rc: &str) -> Vec<i64> {
        let rc = self.rc(rc);
        let id = self.id(provider);
        let mut v: Vec<i64> = out
            .candidates
            .iter()
            .flat_map(|c| c.allocations.iter())
            .filter(|a| a.0 == id && a.1 == rc)
            .map(|a| a.2)
            .collect();
        v.sort_unstable();
        v
    }

    /// Candidates rendered with names, for readable assertion failures.
    pub fn show(&self, c: &Candidate) -> String {
        let allocs: Vec<String> = c
            .allocations
            .iter()
            .map(|(p, rc, n)| format!("{}:{}={}", self.name(*p), rc, n))
            .collect();
        let maps: Vec<String> = c
            .mappings
            .iter()
            .map(|(s, ps)| {
                let names: Vec<String> = ps.iter().map(|p| self.name(*p)).collect();
                format!("'{s}'->{names:?}")
            })
            .collect();
        format!("[{}] {{{}}}", allocs.join(", "), maps.join(", "))
    }

    pub fn mapping<'c>(&self, c: &'c Candidate, suffix: &str) -> &'c [ProviderId] {
        &c.mappings
            .iter()
            .find(|(s, _)| s == suffix)
            .unwrap_or_else(|| panic!("no mapping {suffix}"))
            .1
    }
}

/// upstream `SharedStorageFixture`.
pub fn shared_storage() -> World {
    let mut w = World::new();
    for n in ["cn1", "cn2", "ss", "ss2"] {
        w.rp(n, None, &["agg"]);
    }
    w.rp("numa1_1", Some("cn1"), &[]);
    w.rp("numa1_2", Some("cn1"), &[]);
    w.rp("numa2_1", Some("cn2"), &[]);
    w.rp("numa2_2", Some("cn2"), &[]);
    for (pf, numa) in [
        ("pf1_1", "numa1_1"),
        ("pf1_2", "numa1_2"),
        ("pf2_1", "numa2_1"),
        ("pf2_2", "numa2_2"),
    ] {
        w.rp(pf, Some(numa), &[]);
        w.inv(pf, "SRIOV_NET_VF", 8);
    }
    for cn in ["cn1", "cn2"] {
        w.inv(cn, "VCPU", 24).limits.allocation_ratio = 16.0;
        w.inv(cn, "MEMORY_MB", 128 * 1024).limits.allocation_ratio = 1.5;
    }
    w.traits("cn1", &["HW_CPU_X86_SSE", "HW_CPU_X86_SSE2"]);
    w.inv("cn2", "DISK_GB", 2000).limits.reserved = 100;
    for ss in ["ss", "ss2"] {
        w.inv(ss, "DISK_GB", 2000).limits.reserved = 100;
        w.traits(ss, &[SHARES]);
    }
    w
}

/// upstream `NUMAAggregateFixture`.
pub fn numa_aggregate() -> World {
    let mut w = World::new();
    w.rp("cn1", None, &["aggA"]);
    w.rp("cn2", None, &["aggA", "aggB"]);
    w.rp("ss1", None, &["aggA"]);
    w.rp("ss2", None, &["aggC"]);
    w.rp("numa1_1", Some("cn1"), &["aggC"]);
    w.rp("numa1_2", Some("cn1"), &[]);
    w.rp("numa2_1", Some("cn2"), &[]);
    w.rp("numa2_2", Some("cn2"), &[]);
    for n in ["numa1_1", "numa1_2", "numa2_1", "numa2_2"] {
        w.inv(n, "VCPU", 24).limits.allocation_ratio = 16.0;
    }
    for ss in ["ss1", "ss2"] {
        w.inv(ss, "DISK_GB", 2000).limits.reserved = 100;
        w.traits(ss, &[SHARES]);
    }
    w
}

/// upstream `NUMANetworkFixture`; with `deep`, `DeepNUMANetworkFixture`.
pub fn numa_network(deep: bool) -> World {
    let mut w = World::new();
    w.rp("ss1", None, &["aggA"]);
    w.traits("ss1", &[SHARES]);
    w.inv("ss1", "DISK_GB", 2000);
    if deep {
        w.rp("gp1", None, &[]);
        w.rp("p1", Some("gp1"), &[]);
        w.rp("p2", Some("gp1"), &[]);
        w.rp("cn1", Some("p1"), &["aggA"]);
    } else {
        w.rp("cn1", None, &["aggA"]);
    }
    w.traits("cn1", &["COMPUTE_VOLUME_MULTI_ATTACH"]);
    w.rp("numa0", Some("cn1"), &[]);
    w.traits("numa0", &["HW_NUMA_ROOT"]);
    w.inv("numa0", "VCPU", 4);
    w.rp("numa1", Some("cn1"), &[]);
    w.traits("numa1", &["HW_NUMA_ROOT", "CUSTOM_FOO"]);
    w.inv("numa1", "VCPU", 4);
    let mem = w.inv("numa0", "MEMORY_MB", 2048);
    mem.limits.min_unit = 512;
    mem.limits.step_size = 256;
    let mem = w.inv("numa1", "MEMORY_MB", 2048);
    mem.limits.min_unit = 256;
    mem.limits.max_unit = 1024;
    w.use_("numa0", "VCPU", 2);
    w.rp("fpga0", Some("numa0"), &[]);
    w.inv("fpga0", "FPGA", 1);
    w.rp("pgpu0", Some("numa0"), &[]);
    w.inv("pgpu0", "VGPU", 8);
    for i in 0..2 {
        let n = format!("fpga1_{i}");
        w.rp(&n, Some("numa1"), &[]);
        w.inv(&n, "FPGA", 1);
    }
    w.rp("sriov_agent", Some("cn1"), &[]);
    w.traits("sriov_agent", &["CUSTOM_VNIC_TYPE_DIRECT"]);
    for i in 1..=2 {
        let n = format!("esn{i}");
        w.rp(&n, Some("sriov_agent"), &[]);
        w.traits(&n, &[format!("CUSTOM_PHYSNET{i}").as_str()]);
        w.inv(&n, "NET_BW_EGR_KILOBIT_PER_SEC", 10000 * i);
    }
    w.rp("ovs_agent", Some("cn1"), &[]);
    w.traits("ovs_agent", &["CUSTOM_VNIC_TYPE_NORMAL"]);
    w.rp("br_int", Some("ovs_agent"), &[]);
    w.traits("br_int", &["CUSTOM_PHYSNET0"]);
    w.inv("br_int", "NET_BW_EGR_KILOBIT_PER_SEC", 1000);
    if deep {
        w.rp("cn2", Some("p2"), &["aggA"]);
    } else {
        w.rp("cn2", None, &["aggA"]);
    }
    w.inv("cn2", "VCPU", 8);
    w.use_("cn2", "VCPU", 3);
    let mem = w.inv("cn2", "MEMORY_MB", 2048);
    mem.limits.min_unit = 1024;
    mem.limits.step_size = 128;
    w.inv("cn2", "DISK_GB", 1000);
    w.traits("cn2", &["CUSTOM_FOO"]);
    for i in 1..=3 {
        let n = format!("nic{i}");
        w.rp(&n, Some("cn2"), &[]);
        w.traits(&n, &["CUSTOM_HW_NIC_ROOT"]);
    }
    for i in 1..=2 {
        let n = format!("pf1_{i}");
        w.rp(&n, Some("nic1"), &[]);
        w.traits(&n, &[format!("CUSTOM_PHYSNET{i}").as_str()]);
        w.inv(&n, "CUSTOM_VF", 4);
    }
    for i in 0..4 {
        let n = format!("pf2_{}", i + 1);
        w.rp(&n, Some("nic2"), &[]);
        w.traits(&n, &[format!("CUSTOM_PHYSNET{}", (i % 2) + 1).as_str()]);
        w.inv(&n, "CUSTOM_VF", 2);
    }
    w.rp("pf3_1", Some("nic3"), &[]);
    w.traits("pf3_1", &["CUSTOM_PHYSNET1"]);
    w.inv("pf3_1", "CUSTOM_VF", 8);
    w
}

/// upstream `NonSharedStorageFixture`.
pub fn non_shared_storage() -> World {
    let mut w = World::new();
    for cn in ["cn1", "cn2", "cn3"] {
        w.rp(cn, None, &[]);
        w.inv(cn, "VCPU", 24);
        w.inv(cn, "MEMORY_MB", 128 * 1024);
        w.inv(cn, "DISK_GB", 2000);
    }
    w
}

/// upstream `GranularFixture`.
pub fn granular() -> World {
    let mut w = World::new();
    w.rp("cn_left", None, &["aggA"]);
    for (rc, n) in [
        ("VCPU", 8),
        ("MEMORY_MB", 4096),
        ("DISK_GB", 500),
        ("VGPU", 8),
        ("SRIOV_NET_VF", 8),
        ("CUSTOM_NET_MBPS", 4000),
    ] {
        w.inv("cn_left", rc, n);
    }
    w.traits(
        "cn_left",
        &[
            "HW_CPU_X86_AVX",
            "HW_CPU_X86_AVX2",
            "HW_GPU_API_DXVA",
            "HW_NIC_DCB_PFC",
            "CUSTOM_FOO",
        ],
    );
    w.rp("cn_middle", None, &["aggA", "aggB"]);
    for (rc, n) in [
        ("VCPU", 8),
        ("MEMORY_MB", 4096),
        ("SRIOV_NET_VF", 8),
        ("CUSTOM_NET_MBPS", 4000),
    ] {
        w.inv("cn_middle", rc, n);
    }
    w.traits(
        "cn_middle",
        &[
            "HW_CPU_X86_AVX",
            "HW_CPU_X86_AVX2",
            "HW_CPU_X86_SSE",
            "HW_NIC_ACCEL_TLS",
        ],
    );
    w.rp("cn_right", None, &["aggB", "aggC"]);
    for (rc, n) in [("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)] {
        w.inv("cn_right", rc, n);
    }
    w.inv("cn_right", "VGPU", 8).limits.max_unit = 2;
    w.traits(
        "cn_right",
        &["HW_CPU_X86_MMX", "HW_GPU_API_DXVA", "CUSTOM_DISK_SSD"],
    );
    w.rp("shr_disk_1", None, &["aggA"]);
    w.inv("shr_disk_1", "DISK_GB", 1000);
    w.traits("shr_disk_1", &[SHARES, "CUSTOM_DISK_SSD"]);
    w.rp("shr_disk_2", None, &["aggA", "aggB"]);
    w.inv("shr_disk_2", "DISK_GB", 1000);
    w.traits("shr_disk_2", &[SHARES]);
    w.rp("shr_net", None, &["aggC"]);
    w.inv("shr_net", "SRIOV_NET_VF", 16);
    w.inv("shr_net", "CUSTOM_NET_MBPS", 40000);
    w.traits("shr_net", &[SHARES]);
    w
}

/// upstream `NeutronQoSMultiSegmentFixture` (names without the "Open vSwitch agent"
/// decoration).
pub fn neutron_qos() -> World {
    let mut w = World::new();
    let direct = [
        "CUSTOM_VNIC_TYPE_DIRECT",
        "CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL",
        "CUSTOM_VNIC_TYPE_MACVTAP",
    ];
    for (n, physnet) in [
        (0, Some("CUSTOM_PHYSNET_OTHER")),
        (1, Some("CUSTOM_PHYSNET_MSN_S1")),
        (2, Some("CUSTOM_PHYSNET_MSN_S2")),
        (3, None),
    ] {
        let cn = format!("compute{n}");
        w.rp(&cn, None, &[]);
        w.inv(&cn, "VCPU", 8);
        w.inv(&cn, "MEMORY_MB", 4096);
        w.inv(&cn, "DISK_GB", 500);
        let ovs = format!("{cn}:ovs_agent");
        w.rp(&ovs, Some(&cn), &[]);
        w.inv(&ovs, "NET_PACKET_RATE_KILOPACKET_PER_SEC", 1000);
        w.traits(&ovs, &["CUSTOM_VNIC_TYPE_NORMAL"]);
        let bw = if n < 3 { 5000 } else { 1000 };
        let mut bridges = vec![("br_ex", physnet.unwrap_or("CUSTOM_PHYSNET_MSN_S1"))];
        if n == 3 {
            bridges.push(("br_ex2", "CUSTOM_PHYSNET_MSN_S2"));
        }
        for (key, pn) in bridges {
            let br = format!("{cn}:{key}");
            w.rp(&br, Some(&ovs), &[]);
            w.inv(&br, "NET_BW_EGR_KILOBIT_PER_SEC", bw);
            w.inv(&br, "NET_BW_IGR_KILOBIT_PER_SEC", bw);
            w.traits(&br, &["CUSTOM_VNIC_TYPE_NORMAL", pn]);
        }
        let sriov = format!("{cn}:sriov_agent");
        w.rp(&sriov, Some(&cn), &[]);
        w.traits(&sriov, &direct);
        let bw = if n < 3 { 10000 } else { 1000 };
        let mut pfs = vec![("pf0", physnet.unwrap_or("CUSTOM_PHYSNET_MSN_S1"))];
        if n == 3 {
            pfs.push(("pf1", "CUSTOM_PHYSNET_MSN_S2"));
        }
        for (key, pn) in pfs {
            let pf = format!("{cn}:{key}");
            w.rp(&pf, Some(&sriov), &[]);
            w.inv(&pf, "NET_BW_EGR_KILOBIT_PER_SEC", bw);
            w.inv(&pf, "NET_BW_IGR_KILOBIT_PER_SEC", bw);
            let mut t: Vec<&str> = direct.to_vec();
            t.push(pn);
            w.traits(&pf, &t);
        }
    }
    w
}
