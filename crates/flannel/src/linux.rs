//! The Linux node's backends, through netlink in flanneld's network namespace, as flannel's
//! Linux code does them: host-gw routes each remote subnet via its node's public IP; vxlan
//! makes the device `flannel.<VNI>` (learning off) and, per remote lease, an on-link route via
//! the subnet's .0 address, a permanent neighbour entry for it with the remote VtepMAC, and an
//! FDB entry sending that MAC to the remote public IP. Everything is compared with what the
//! kernel has first, so a restarted flanneld changes nothing.

use std::collections::HashSet;
use std::net::IpAddr;

use host::link::{Netlink, RouteEntry};
use host::vxlan::VxlanSpec;
use ipnet::{IpNet, Ipv4Net};

use crate::config::{BackendType, NetConf};
use crate::lease::{Lease, Mac, VxlanData};
use crate::{Error, Node};

/// Linux's VXLAN port when net-conf gives none (flannel passes 0: the kernel's default).
const LINUX_VXLAN_PORT: u16 = 8472;
/// flannel's default VNI on Linux.
const DEFAULT_VNI: u32 = 1;

/// The Linux backend of one node.
pub struct LinuxBackend {
    conf: NetConf,
    node: Node,
    /// The VXLAN device name.
    pub device: String,
    vni: u32,
    port: u16,
    /// The VXLAN device's index, once made.
    index: Option<u32>,
    subnet: Option<Ipv4Net>,
}

impl LinuxBackend {
    pub fn new(conf: NetConf, node: Node) -> LinuxBackend {
        let vni = conf.backend.vni.unwrap_or(DEFAULT_VNI);
        // flannel names the Linux device by the VNI; Backend.Name is the Windows network's.
        let device = format!("flannel.{vni}");
        let port = conf.backend.port.unwrap_or(LINUX_VXLAN_PORT);
        LinuxBackend {
            conf,
            node,
            device,
            vni,
            port,
            index: None,
            subnet: None,
        }
    }

    /// The vxlan data to lease before the device exists.
    pub fn initial_data(&self) -> Option<VxlanData> {
        self.conf.initial_vxlan(self.vni)
    }

    pub fn mtu(&self) -> u32 {
        self.conf.pod_mtu(self.node.mtu)
    }

    /// Makes (or adopts) the VXLAN device; the vxlan data to publish.
    pub fn setup(&mut self, lease: &Lease) -> Result<Option<VxlanData>, Error> {
        self.subnet = Some(lease.subnet);
        if self.conf.backend.backend_type == BackendType::HostGw {
            return Ok(None);
        }
        let mut nl = Netlink::open()?;
        let underlay = nl.link(&self.node.iface)?.ok_or_else(|| {
            Error::Node(format!("--iface {}: no such interface", self.node.iface))
        })?;
        let spec = VxlanSpec {
            name: self.device.clone(),
            vni: self.vni,
            port: self.port,
            local: self.node.public_ip,
            underlay: underlay.index,
            mac: None,
            mtu: Some(self.mtu()),
        };
        let info = match nl.vxlan(&self.device)? {
            Some(i)
                if i.vni == spec.vni
                    && i.port == spec.port
                    && i.local == Some(spec.local)
                    && i.underlay == Some(spec.underlay) =>
            {
                i
            }
            stale => {
                if let Some(old) = stale {
                    tracing::warn!(device = %self.device, "replacing a VXLAN device of other settings");
                    nl.delete_link(old.index)?;
                }
                nl.add_vxlan(&spec)?;
                nl.vxlan(&self.device)?.ok_or_else(|| {
                    Error::Node(format!(
                        "VXLAN device {} vanished after creation",
                        self.device
                    ))
                })?
            }
        };
        let addr = IpNet::V4(Ipv4Net::new(lease.subnet.network(), 32).unwrap_or(lease.subnet));
        let have = nl.addresses(Some(info.index))?;
        if !have.iter().any(|a| a.net == addr) {
            nl.add_address(info.index, addr)?;
        }
        if !nl.link_by_index(info.index)?.is_some_and(|l| l.up) {
            nl.set_up(info.index, true)?;
        }
        self.index = Some(info.index);
        Ok(Some(VxlanData {
            vni: self.vni,
            vtep_mac: info.mac.map(Mac),
        }))
    }

    /// Brings routes (and for vxlan, neighbours and FDB entries) in line with `remote`.
    pub fn reconcile(&mut self, remote: &[Lease]) -> Result<(), Error> {
        match self.conf.backend.backend_type {
            BackendType::HostGw => {
                let want: Vec<RouteEntry> = remote
                    .iter()
                    .filter(|l| l.attrs.backend_type == BackendType::HostGw)
                    .map(|l| RouteEntry {
                        destination: IpNet::V4(l.subnet),
                        gateway: Some(IpAddr::V4(l.attrs.public_ip)),
                        oif: None,
                        metric: None,
                    })
                    .collect();
                crate::stack::sync_routes(
                    &mut crate::stack::Kernel,
                    &self.conf,
                    self.subnet,
                    &[],
                    &want,
                    None,
                )
            }
            BackendType::Vxlan => self.sync_vxlan(remote),
        }
    }

    fn sync_vxlan(&self, remote: &[Lease]) -> Result<(), Error> {
        let Some(index) = self.index else {
            return Ok(());
        };
        let peers: Vec<(Ipv4Net, Mac, IpAddr)> = remote
            .iter()
            .filter(|l| l.attrs.backend_type == BackendType::Vxlan)
            .filter_map(|l| {
                let mac = l.attrs.vxlan?.vtep_mac?;
                Some((l.subnet, mac, IpAddr::V4(l.attrs.public_ip)))
            })
            .collect();
        let pending = crate::lease::without_vtep_mac(remote);
        let mut nl = Netlink::open()?;
        let have_neigh: Vec<_> = nl
            .neighbors()?
            .into_iter()
            .filter(|n| n.index == index)
            .collect();
        // What a pending lease's node had stays: its neighbour and the FDB entry of its MAC.
        let kept_neigh = |ip: &IpAddr| pending.iter().any(|p| IpAddr::V4(p.network()) == *ip);
        let kept_macs: HashSet<[u8; 6]> = have_neigh
            .iter()
            .filter(|n| kept_neigh(&n.ip))
            .filter_map(|n| n.mac)
            .collect();
        // FDB first, then the neighbour, then the route: a packet never finds a route
        // without the way to deliver it.
        let want_fdb: HashSet<([u8; 6], IpAddr)> =
            peers.iter().map(|(_, mac, ip)| (mac.0, *ip)).collect();
        let have_fdb: Vec<_> = nl.fdb(index)?;
        for e in &have_fdb {
            if let Some(dst) = e.dst
                && !want_fdb.contains(&(e.mac, dst))
                && !kept_macs.contains(&e.mac)
            {
                nl.del_fdb(index, e.mac, dst)?;
            }
        }
        for (mac, ip) in &want_fdb {
            if !have_fdb.iter().any(|e| e.mac == *mac && e.dst == Some(*ip)) {
                nl.add_fdb(index, *mac, *ip)?;
            }
        }
        let want_neigh: HashSet<(IpAddr, [u8; 6])> = peers
            .iter()
            .map(|(s, mac, _)| (IpAddr::V4(s.network()), mac.0))
            .collect();
        for n in &have_neigh {
            if !n.mac.is_some_and(|m| want_neigh.contains(&(n.ip, m))) && !kept_neigh(&n.ip) {
                nl.del_neighbor(index, n.ip)?;
            }
        }
        for (ip, mac) in &want_neigh {
            if !have_neigh
                .iter()
                .any(|n| n.ip == *ip && n.mac == Some(*mac))
            {
                nl.add_neighbor(index, *ip, *mac)?;
            }
        }
        let want: Vec<RouteEntry> = peers
            .iter()
            .map(|(s, _, _)| RouteEntry {
                destination: IpNet::V4(*s),
                gateway: Some(IpAddr::V4(s.network())),
                oif: Some(index),
                metric: None,
            })
            .collect();
        crate::stack::sync_routes(
            &mut crate::stack::Kernel,
            &self.conf,
            self.subnet,
            &pending,
            &want,
            Some(index),
        )
    }
}
