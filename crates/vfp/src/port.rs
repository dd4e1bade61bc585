//! A switch port: the attachment point of a pod vNIC, the host vNIC or the uplink, with its
//! addresses and its ordered layers.

use crate::counters::PortCounters;
use crate::error::ConfigError;
use crate::layer::{self, Layer};
use crate::wire::MacAddr;
use std::net::IpAddr;

/// Identifies a port in a switch.
pub type PortId = u16;

/// What is attached to a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortKind {
    /// A container's vNIC (a TAP in the pod's network namespace).
    PodVnic,
    /// The host's vNIC (`vEthernet (...)`).
    HostVnic,
    /// The physical network (external switch only).
    Uplink,
}

/// How to create a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// A name for traces (e.g. the HNS endpoint name).
    pub name: String,
    /// What is attached.
    pub kind: PortKind,
    /// The device's MAC; frames to it are delivered here.
    pub mac: Option<MacAddr>,
    /// The device's IP addresses: routed frames to them, and encapsulated frames whose inner
    /// destination is one of them (on this port's VNI), are delivered here.
    pub ips: Vec<IpAddr>,
    /// The virtual network (VXLAN VNI / VSID) the port belongs to; 0 for none.
    pub vni: u32,
    /// Layer names, top (nearest the device) to bottom.
    pub layers: Vec<String>,
}

impl PortConfig {
    fn with(name: &str, kind: PortKind, mac: Option<MacAddr>, ips: Vec<IpAddr>) -> PortConfig {
        PortConfig {
            name: name.to_string(),
            kind,
            mac,
            ips,
            vni: 0,
            layers: layer::DEFAULT_ORDER.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// A pod vNIC with the default layers.
    pub fn pod(name: &str, mac: MacAddr, ips: Vec<IpAddr>) -> PortConfig {
        PortConfig::with(name, PortKind::PodVnic, Some(mac), ips)
    }

    /// The host vNIC with the default layers.
    pub fn host(name: &str, mac: MacAddr, ips: Vec<IpAddr>) -> PortConfig {
        PortConfig::with(name, PortKind::HostVnic, Some(mac), ips)
    }

    /// The uplink with the default layers (NodePort rules can live in its SLB layer).
    pub fn uplink(name: &str) -> PortConfig {
        PortConfig::with(name, PortKind::Uplink, None, Vec::new())
    }

    /// Puts the port on a virtual network.
    pub fn on_vni(mut self, vni: u32) -> PortConfig {
        self.vni = vni;
        self
    }
}

/// A port of the switch with its layers and counters.
#[derive(Debug, Clone)]
pub struct Port {
    id: PortId,
    config: PortConfig,
    /// Top (nearest the device) to bottom (nearest the switch).
    pub(crate) layers: Vec<Layer>,
    /// Bumped by every mutable access to the layers, which marks this port's cached flows
    /// stale; they are re-evaluated when next seen.
    pub(crate) generation: u32,
    /// Traffic counters.
    pub counters: PortCounters,
}

impl Port {
    pub(crate) fn new(id: PortId, config: PortConfig) -> Port {
        let layers = config.layers.iter().map(|n| Layer::new(n)).collect();
        Port {
            id,
            config,
            layers,
            generation: 0,
            counters: PortCounters::default(),
        }
    }

    /// The port's id.
    pub fn id(&self) -> PortId {
        self.id
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// What is attached.
    pub fn kind(&self) -> PortKind {
        self.config.kind
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &PortConfig {
        &self.config
    }

    /// The layers, top to bottom.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// A layer by name.
    pub fn layer(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.name() == name)
    }

    /// A layer by name, to change its rules. Marks the port's cached flows stale.
    pub fn layer_mut(&mut self, name: &str) -> Result<&mut Layer, ConfigError> {
        self.generation = self.generation.wrapping_add(1);
        self.layers
            .iter_mut()
            .find(|l| l.name() == name)
            .ok_or_else(|| ConfigError::UnknownLayer(name.to_string()))
    }

    /// Inserts a layer at `position` (0 = top); marks cached flows stale.
    pub fn insert_layer(&mut self, position: usize, layer: Layer) -> Result<(), ConfigError> {
        if self.layer(layer.name()).is_some() {
            return Err(ConfigError::Duplicate(layer.name().to_string()));
        }
        self.generation = self.generation.wrapping_add(1);
        let at = position.min(self.layers.len());
        self.layers.insert(at, layer);
        Ok(())
    }

    /// Removes a layer; marks cached flows stale.
    pub fn remove_layer(&mut self, name: &str) -> Result<Layer, ConfigError> {
        let i = self
            .layers
            .iter()
            .position(|l| l.name() == name)
            .ok_or_else(|| ConfigError::UnknownLayer(name.to_string()))?;
        self.generation = self.generation.wrapping_add(1);
        Ok(self.layers.remove(i))
    }
}
