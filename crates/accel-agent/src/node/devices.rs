//! The node's devices as the device plugins and the DRA driver see them: each call
//! is one discovery pass of the node's one [`Agent`], shared with the reports.

use crate::agent::Agent;
use crate::kubernetes::to_device;
use accel_k8s::{Device, DeviceSource};
use std::sync::Arc;

/// Discovery as a [`DeviceSource`]: every call is one discovery pass (the plugins'
/// run loop calls it on a blocking thread).
pub struct AgentDevices {
    agent: Arc<Agent>,
}

impl AgentDevices {
    /// Discovers through `agent`, the node's one discoverer (its drivers, Nova rules
    /// and the devices each driver found last), shared with the reports.
    pub fn new(agent: Arc<Agent>) -> AgentDevices {
        AgentDevices { agent }
    }
}

impl DeviceSource for AgentDevices {
    fn devices(&self) -> Vec<Device> {
        let root = &self.agent.settings.sysfs_root;
        self.agent
            .discover()
            .devices
            .iter()
            .map(|d| to_device(root, d))
            .collect()
    }

    /// The PCI functions sysfs lists (one directory read): a device unplugged or
    /// added changes it, and the plugins then rediscover at once.
    fn presence(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let dir = self.agent.settings.sysfs_root.join("bus/pci/devices");
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort_unstable();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        names.hash(&mut h);
        Some(h.finish())
    }
}
