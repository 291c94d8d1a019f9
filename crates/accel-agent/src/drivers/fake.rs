//! Devices from the configuration (`[[fake.devices]]`), for demos and tests: they are
//! modelled exactly as real ones, at addresses in PCI domain `00fa` that no real device
//! uses. Programming a fake FPGA region records the function id read from the
//! bitstream's first line (a UUID), so the next discovery reports the new function.

use super::{region_of, Driver, Host, ProgramError};
use crate::config::FakeDevice;
use crate::model::{FoundDevice, Handle, Health, Memory, Region};
use crate::pci::PciAddress;
use accel_core::accelerator::DeviceType;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

#[derive(Default)]
pub struct Fake {
    programmed: Mutex<HashMap<(PciAddress, u32), String>>,
}

fn address(card: usize, index: usize) -> PciAddress {
    PciAddress {
        domain: 0x00fa,
        bus: card as u8,
        slot: (index / 8) as u8,
        function: (index % 8) as u8,
    }
}

impl Fake {
    fn build(&self, n: usize, spec: &FakeDevice) -> Option<FoundDevice> {
        let Some(device_type) = DeviceType::parse(&spec.device_type.to_ascii_uppercase()) else {
            tracing::warn!(r#type = %spec.device_type, "fake device of unknown type skipped");
            return None;
        };
        let control = address(n, 0);
        let handles: Vec<Handle> = (1..=spec.count.max(1) as usize)
            .map(|i| Handle::pci(address(n, i)))
            .collect();
        let programmed = self.programmed.lock().ok()?;
        let regions = if device_type == DeviceType::Fpga {
            (0..spec.regions.max(1))
                .map(|r| Region {
                    index: r,
                    interface_id: spec.interface_id.clone(),
                    function_id: programmed
                        .get(&(control, r))
                        .cloned()
                        .or_else(|| spec.function_id.clone()),
                    count: spec.count.max(1),
                    handles: handles.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut functions = vec![control];
        functions.extend(handles.iter().map(|h| h.address));
        Some(FoundDevice {
            device_type,
            vendor: u16::from_str_radix(spec.vendor.trim_start_matches("0x"), 16).unwrap_or(0xabcd),
            product: u16::from_str_radix(spec.product.trim_start_matches("0x"), 16).unwrap_or(0),
            model: spec.model.clone(),
            family: spec.family.clone(),
            address: control,
            numa_node: spec.numa_node,
            driver: "fake",
            health: if spec.healthy {
                Health::Ok
            } else {
                Health::Unhealthy("configured unhealthy ([[driver.fake]] healthy = false)".into())
            },
            class: spec
                .class
                .clone()
                .unwrap_or_else(|| device_type.as_str().to_owned()),
            count: spec.count.max(1),
            handles: if device_type == DeviceType::Fpga {
                Vec::new()
            } else {
                handles
            },
            memory: spec.memory_mib.map(|mib| Memory {
                kind: spec.memory_kind.clone().unwrap_or_else(|| "DDR".into()),
                mib,
            }),
            regions,
            extra_traits: Vec::new(),
            functions,
            board_info: Vec::new(),
            partitions: None,
        })
    }
}

impl Driver for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        host.config
            .fake
            .iter()
            .enumerate()
            .filter_map(|(n, spec)| self.build(n, spec))
            .collect()
    }

    fn programming(&self, _tools: &crate::config::ProgramTools) -> super::Programming {
        super::Programming::InProcess
    }

    fn program(
        &self,
        _host: &Host,
        device: &FoundDevice,
        region: u32,
        bitstream: &Path,
    ) -> Result<Option<String>, ProgramError> {
        region_of(device, region)?;
        let text = std::fs::read_to_string(bitstream)
            .map_err(|e| ProgramError::Failed(format!("{}: {e}", bitstream.display())))?;
        let function = text.lines().next().map(str::trim).unwrap_or_default();
        if crate::model::id_part(function).is_none() {
            return Err(ProgramError::Failed(
                "a fake bitstream starts with its function id (a UUID)".into(),
            ));
        }
        if let Ok(mut p) = self.programmed.lock() {
            p.insert((device.address, region), function.to_owned());
        }
        Ok(Some(function.to_owned()))
    }

    fn health(&self, _host: &Host, device: &FoundDevice) -> Health {
        device.health.clone()
    }

    fn uses_pci_bus(&self) -> bool {
        false
    }
}
