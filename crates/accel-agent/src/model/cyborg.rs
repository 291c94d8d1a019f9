//! Upstream Cyborg's modelling (`model = "cyborg"`, [`Model::Cyborg`]): the classes,
//! trait names and one-provider-per-device layout its drivers report, for clouds whose
//! flavors ask for them (the parent module's doc says what differs on purpose).

use super::{id_part, kv, trait_part, traits_attrs, vendor_name, FoundDevice, Handle};
use accel_api::agent as wire;
use accel_core::accelerator::DeviceType;

/// A `--model` that is neither.
#[derive(Debug, thiserror::Error)]
#[error("unknown model {0:?}: accel or cyborg")]
pub struct UnknownModel(pub String);

/// How devices are modelled in Placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// Seed 003 (the module's diagram).
    #[default]
    Accel,
    /// As upstream Cyborg's drivers report them, for clouds migrating from Cyborg
    /// whose flavors ask for its classes and traits ([`FoundDevice::cyborg_deployables`]).
    Cyborg,
}

impl Model {
    pub fn parse(s: &str) -> Option<Model> {
        match s {
            "accel" => Some(Model::Accel),
            "cyborg" => Some(Model::Cyborg),
            _ => None,
        }
    }

    /// [`Model::parse`] for `--model`, with a message that lists the choices.
    pub fn parse_flag(s: &str) -> Result<Model, UnknownModel> {
        Model::parse(s).ok_or_else(|| UnknownModel(s.to_owned()))
    }
}

impl accel_settings::ShowDefault for Model {
    fn show_default(&self) -> Option<String> {
        Some(
            match self {
                Model::Accel => "accel",
                Model::Cyborg => "cyborg",
            }
            .into(),
        )
    }
}

/// Cyborg's resource class of a device: its standard `FPGA`, `PGPU` and `VGPU`, else
/// `CUSTOM_<TYPE>`.
fn cyborg_class(d: &FoundDevice) -> String {
    match (d.device_type, d.class.as_str()) {
        (DeviceType::Fpga, _) => "FPGA".into(),
        (DeviceType::Gpu, "VGPU") => "VGPU".into(),
        (DeviceType::Gpu, _) => "PGPU".into(),
        (t, _) => format!("CUSTOM_{}", t.as_str()),
    }
}

impl FoundDevice {
    /// The device as Cyborg's drivers report it (reference: Cyborg's driver table):
    /// one deployable `<node>_<bdf>` per device with `OWNER_CYBORG` and Cyborg's
    /// trait names, no region providers, no NUMA or memory; QAT and NIC VFs are one
    /// deployable each (`<node>_<vf bdf>`), as Cyborg's QAT and NIC drivers do.
    pub fn cyborg_deployables(&self, node: &str) -> Vec<wire::Deployable> {
        let vendor = vendor_name(self.vendor);
        let pid = format!("{:04X}", self.product);
        let rc = cyborg_class(self);
        let one = |name: String, num: i64, handles: Vec<&Handle>, traits: Vec<String>| {
            let mut attrs = vec![kv("rc", rc.clone())];
            attrs.extend(traits_attrs(traits));
            wire::Deployable {
                name,
                parent: None,
                num_accelerators: num,
                driver_name: Some(self.driver.to_owned()),
                attributes: attrs,
                attach_handles: handles.into_iter().map(Handle::wire).collect(),
            }
        };
        let name = self.provider_name(node);
        match self.device_type {
            DeviceType::Fpga => {
                let mut traits = vec![format!("CUSTOM_FPGA_{vendor}")];
                match self.vendor {
                    0x8086 => {
                        if let Some(f) = &self.family {
                            traits.push(format!("CUSTOM_FPGA_{vendor}_PAC_{}", trait_part(f)));
                        }
                    }
                    _ => traits.push(format!("CUSTOM_FPGA_PRODUCT_ID_{pid}")),
                }
                let region = self.regions.first();
                if let Some(id) = region
                    .and_then(|r| r.function_id.as_deref())
                    .and_then(id_part)
                {
                    traits.push(format!("CUSTOM_FPGA_FUNCTION_ID_{vendor}_{id}"));
                }
                if let Some(id) = region
                    .and_then(|r| r.interface_id.as_deref())
                    .and_then(id_part)
                {
                    traits.push(format!("CUSTOM_FPGA_REGION_{vendor}_{id}"));
                }
                let handles: Vec<&Handle> = self.regions.iter().flat_map(|r| &r.handles).collect();
                vec![one(name, handles.len().max(1) as i64, handles, traits)]
            }
            DeviceType::Gpu => {
                let traits = vec!["OWNER_CYBORG".into(), format!("CUSTOM_{vendor}_{pid}")];
                vec![one(name, self.count, self.handles.iter().collect(), traits)]
            }
            DeviceType::Qat | DeviceType::Nic
                if self.handles.iter().any(|h| h.address != self.address) =>
            {
                // One deployable per VF.
                self.handles
                    .iter()
                    .map(|h| {
                        let mut traits = Vec::new();
                        if self.device_type == DeviceType::Nic {
                            traits.push("CUSTOM_VF".to_owned());
                            traits.extend(
                                h.extra
                                    .iter()
                                    .filter(|(k, _)| k == "physical_network")
                                    .map(|(_, v)| format!("CUSTOM_{}", trait_part(v))),
                            );
                        }
                        one(format!("{node}_{}", h.address), 1, vec![h], traits)
                    })
                    .collect()
            }
            DeviceType::Nic => {
                let mut traits = vec!["CUSTOM_PF".to_owned()];
                traits.extend(
                    self.handles
                        .iter()
                        .flat_map(|h| &h.extra)
                        .filter(|(k, _)| k == "physical_network")
                        .map(|(_, v)| format!("CUSTOM_{}", trait_part(v))),
                );
                vec![one(name, self.count, self.handles.iter().collect(), traits)]
            }
            DeviceType::Qat => vec![one(
                name,
                self.count,
                self.handles.iter().collect(),
                Vec::new(),
            )],
            DeviceType::Ssd => {
                let traits = vec![
                    format!("CUSTOM_SSD_{vendor}"),
                    format!("CUSTOM_SSD_PRODUCT_ID_{pid}"),
                ];
                vec![one(name, self.count, self.handles.iter().collect(), traits)]
            }
            t => {
                let traits = vec![format!("CUSTOM_{}_{vendor}", t.as_str())];
                vec![one(name, self.count, self.handles.iter().collect(), traits)]
            }
        }
    }
}
