//! Checking: every row accel cannot hold, or whose references do not resolve, named by
//! its table and uuid; what depends on a refused row goes with it.

use super::*;

pub(super) fn problem(subject: String, message: String) -> Problem {
    Problem { subject, message }
}

/// One pass: every row whose own values accel cannot hold or whose references do not
/// resolve in `d`, named by its table and uuid.
pub(super) fn check_once(d: &CyborgData) -> BTreeSet<Problem> {
    let mut out = BTreeSet::new();
    let profiles: HashSet<i64> = d.profiles.iter().map(|p| p.id).collect();
    let devices: HashSet<i64> = d.devices.iter().map(|x| x.id).collect();
    let cpids: HashSet<i64> = d.cpids.iter().map(|x| x.id).collect();
    let deps: HashMap<i64, &DeployableRow> = d.deployables.iter().map(|x| (x.id, x)).collect();
    let handles: HashMap<i64, &HandleRow> = d.handles.iter().map(|x| (x.id, x)).collect();
    for p in &d.profiles {
        if let Err(why) = &p.groups {
            out.insert(problem(format!("device profile {}", p.uuid), why.clone()));
        }
    }
    for x in &d.devices {
        let s = || format!("device {}", x.uuid);
        if DeviceType::parse(&x.device_type).is_none() {
            out.insert(problem(
                s(),
                format!(
                    "type {} is not one accel models (GPU, FPGA, AICHIP, QAT, NIC, SSD)",
                    x.device_type
                ),
            ));
        }
        if DeviceStatus::parse(&x.status).is_none() {
            out.insert(problem(s(), format!("unknown status {:?}", x.status)));
        }
    }
    for x in &d.cpids {
        if !devices.contains(&x.device_id) {
            out.insert(problem(
                format!("control path id {}", x.uuid),
                format!("device {} does not exist", x.device_id),
            ));
        }
    }
    for x in &d.deployables {
        let s = || format!("deployable {}", x.uuid);
        if !devices.contains(&x.device_id) {
            out.insert(problem(
                s(),
                format!("device {} does not exist", x.device_id),
            ));
        }
        for (what, id) in [("parent", x.parent_id), ("root", x.root_id)] {
            if let Some(id) = id.filter(|i| !deps.contains_key(i)) {
                out.insert(problem(
                    s(),
                    format!("{what} deployable {id} does not exist"),
                ));
            }
        }
    }
    for x in &d.attributes {
        if !deps.contains_key(&x.deployable_id) {
            out.insert(problem(
                format!("attribute {}", x.uuid),
                format!("deployable {} does not exist", x.deployable_id),
            ));
        }
    }
    for x in &d.handles {
        let s = || format!("attach handle {}", x.uuid);
        if !deps.contains_key(&x.deployable_id) {
            out.insert(problem(
                s(),
                format!("deployable {} does not exist", x.deployable_id),
            ));
        }
        if !cpids.contains(&x.cpid_id) {
            out.insert(problem(
                s(),
                format!("control path id {} does not exist", x.cpid_id),
            ));
        }
        if AttachType::parse(&x.attach_type).is_none() {
            out.insert(problem(
                s(),
                format!("attach type {} is not one accel models", x.attach_type),
            ));
        }
    }
    for a in &d.arqs {
        let s = || format!("accelerator request {}", a.uuid);
        if ArqState::parse(&a.state).is_none() {
            out.insert(problem(s(), format!("unknown state {:?}", a.state)));
        }
        if !profiles.contains(&a.device_profile_id) {
            out.insert(problem(
                s(),
                format!("device profile {} does not exist", a.device_profile_id),
            ));
        }
        if let Some(id) = a.deployable_id.filter(|i| !deps.contains_key(i)) {
            out.insert(problem(
                s(),
                format!("bound to deployable {id}, which does not exist"),
            ));
        }
        match a.attach_handle_id {
            Some(id) if !handles.contains_key(&id) => {
                out.insert(problem(
                    s(),
                    format!("bound to attach handle {id}, which does not exist"),
                ));
            }
            Some(id) => {
                if let Some(dep) = a.deployable_id.filter(|d| *d != handles[&id].deployable_id) {
                    out.insert(problem(
                        s(),
                        format!("attach handle {id} is not deployable {dep}'s"),
                    ));
                }
            }
            None => {}
        }
        if a.state == "Bound" {
            match &a.device_rp_uuid {
                Some(rp) if d.deployables.iter().any(|x| x.rp_uuid.as_ref() == Some(rp)) => {}
                Some(rp) => {
                    out.insert(problem(
                        s(),
                        format!("Bound to device provider {rp}, which no deployable has"),
                    ));
                }
                None => {
                    out.insert(problem(s(), "Bound without a device provider".to_owned()));
                }
            }
            if a.attach_handle_id.is_none() {
                out.insert(problem(s(), "Bound without an attach handle".to_owned()));
            }
        }
    }
    out
}

/// Checks `data`; returns the problems found and the rows free of them, rows that
/// refer to a left-out row left out too (each with its own problem).
pub fn check(data: &CyborgData) -> (Vec<Problem>, CyborgData) {
    let mut valid = data.clone();
    let mut all = BTreeSet::new();
    loop {
        let found = check_once(&valid);
        if found.is_empty() {
            break;
        }
        let bad: HashSet<&str> = found
            .iter()
            .filter_map(|p| p.subject.rsplit(' ').next())
            .collect();
        let keep = |u: &String| !bad.contains(u.as_str());
        valid.profiles.retain(|x| keep(&x.uuid));
        valid.devices.retain(|x| keep(&x.uuid));
        valid.cpids.retain(|x| keep(&x.uuid));
        valid.deployables.retain(|x| keep(&x.uuid));
        valid.attributes.retain(|x| keep(&x.uuid));
        valid.handles.retain(|x| keep(&x.uuid));
        valid.arqs.retain(|x| keep(&x.uuid));
        all.extend(found);
    }
    (all.into_iter().collect(), valid)
}
