//! The external adapter: when the first external network appears, hnsd binds the NIC and the
//! host's addresses and routes move to the management vNIC `vEthernet-<nic>` (a TAP with the
//! NIC's MAC), as Windows moves them to `vEthernet (<nic>)` when it creates an external
//! vSwitch; when the last one goes, they move back. What was moved is recorded in the state
//! dir before anything is touched, so a restarted hnsd knows the NIC is already taken.

use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hcn::NetworkType;
use host::HostError;
use host::netlink::{Netlink, RouteEntry};
use host::sysctl::set_sysctl;
use host::tap::Tap;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use vfp::wire::MacAddr;

use hns::profile::Profile;
use hns_compiler::{DynamicPortRange, HostRoute, NodeFacts, Resolver};

/// True for the network types whose switch is bound to the NIC.
pub fn is_external(t: NetworkType) -> bool {
    matches!(
        t,
        NetworkType::L2Bridge
            | NetworkType::L2Tunnel
            | NetworkType::Overlay
            | NetworkType::Transparent
    )
}

pub use hns_client::management_name;

/// What was moved off the NIC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub nic: String,
    pub mac: [u8; 6],
    pub mtu: u32,
    pub addresses: Vec<IpNet>,
    pub routes: Vec<SavedRoute>,
}

/// A route of the NIC with a next hop, to put back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedRoute {
    pub destination: IpNet,
    pub gateway: IpAddr,
    pub metric: Option<u32>,
}

/// The NIC and whether it is taken.
pub struct Uplink {
    nic: Option<String>,
    record_path: PathBuf,
    taken: Option<Record>,
    /// The NIC as first seen (MAC, addresses), for the node's facts.
    seen: Option<Record>,
}

impl Uplink {
    /// Finds the NIC (`nic`, else the interface of the default route) and whether an earlier
    /// hnsd took it over.
    pub fn open(state_dir: &Path, nic: Option<String>) -> Result<Uplink, HostError> {
        let record_path = state_dir.join("uplink.json");
        let taken: Option<Record> = match std::fs::read(&record_path) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| {
                HostError::Invalid(format!(
                    "{}: {e}; remove it after giving the NIC its addresses back by hand",
                    record_path.display()
                ))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(HostError::Io {
                    op: format!("read {}", record_path.display()),
                    source,
                });
            }
        };
        let mut nl = Netlink::open()?;
        let nic = match (&taken, nic) {
            (Some(r), _) => Some(r.nic.clone()),
            (None, Some(n)) => Some(n),
            (None, None) => default_route_interface(&mut nl)?,
        };
        let seen = match (&taken, &nic) {
            (Some(r), _) => Some(r.clone()),
            (None, Some(n)) => Some(snapshot(&mut nl, n)?),
            (None, None) => None,
        };
        Ok(Uplink {
            nic,
            record_path,
            taken,
            seen,
        })
    }

    /// The NIC's name.
    pub fn nic(&self) -> Option<&str> {
        self.nic.as_deref()
    }

    /// True while the host's addresses are on the management vNIC.
    pub fn taken(&self) -> bool {
        self.taken.is_some()
    }

    /// The NIC's MTU.
    pub fn mtu(&self) -> u32 {
        self.seen.as_ref().map_or(1500, |r| r.mtu)
    }

    /// The node's facts as the compiler needs them.
    pub fn node_facts(
        &self,
        name: &str,
        profile: Profile,
        resolver: Resolver,
        dynamic_ports: DynamicPortRange,
    ) -> NodeFacts {
        let (mac, addresses, routes) = match &self.seen {
            Some(r) => (
                MacAddr(r.mac),
                r.addresses.clone(),
                r.routes
                    .iter()
                    .map(|s| HostRoute::new(s.destination, s.gateway))
                    .collect(),
            ),
            None => (MacAddr([0x00, 0x15, 0x5d, 0, 0, 1]), Vec::new(), Vec::new()),
        };
        NodeFacts {
            name: name.to_string(),
            profile,
            host_mac: mac,
            addresses,
            uplink: self.nic.clone(),
            routes,
            resolver,
            dynamic_ports,
        }
    }

    /// Moves the host's addresses and routes from the NIC to the management vNIC.
    pub fn take_over(&mut self) -> Result<(), HostError> {
        let Some(nic) = self.nic.clone() else {
            return Err(HostError::NotFound(
                "no NIC for the external switch: the node has no default route; start hnsd with --nic".into(),
            ));
        };
        let mut nl = Netlink::open()?;
        let record = snapshot(&mut nl, &nic)?;
        let mgmt = management_name(&nic);
        let tap = Tap::open(&mgmt)?;
        tap.set_persist(true)?;
        drop(tap);
        let vnic = nl
            .link(&mgmt)?
            .ok_or_else(|| HostError::NotFound(format!("{mgmt} vanished after it was made")))?;
        nl.set_mac(vnic.index, record.mac)?;
        nl.set_mtu(vnic.index, record.mtu)?;
        nl.set_up(vnic.index, true)?;
        write_record(&self.record_path, &record)?;
        self.seen = Some(record.clone());
        self.taken = Some(record.clone());
        let moved = move_addresses(&mut nl, &nic, &mgmt, &record);
        if let Err(e) = moved {
            let _ = self.give_back();
            return Err(e);
        }
        tracing::info!(nic = %nic, vnic = %mgmt, "external switch bound: the host's addresses moved to the management vNIC");
        Ok(())
    }

    /// Puts the addresses and routes back on the NIC and removes the management vNIC.
    pub fn give_back(&mut self) -> Result<(), HostError> {
        let Some(record) = self.taken.clone() else {
            return Ok(());
        };
        let mut nl = Netlink::open()?;
        let mgmt = management_name(&record.nic);
        if nl.link(&mgmt)?.is_some() {
            let tap = Tap::open(&mgmt)?;
            tap.set_persist(false)?;
        }
        let nic = nl.link(&record.nic)?.ok_or_else(|| {
            HostError::NotFound(format!(
                "NIC {} is gone; its addresses cannot go back",
                record.nic
            ))
        })?;
        for a in &record.addresses {
            nl.add_address(nic.index, *a)?;
        }
        for r in &record.routes {
            nl.add_route(&RouteEntry {
                destination: r.destination,
                gateway: Some(r.gateway),
                oif: Some(nic.index),
                metric: r.metric,
            })?;
        }
        nic_stack(&record.nic, true)?;
        match std::fs::remove_file(&self.record_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(HostError::Io {
                    op: format!("remove {}", self.record_path.display()),
                    source,
                });
            }
        }
        self.taken = None;
        Ok(())
    }
}

fn move_addresses(nl: &mut Netlink, nic: &str, mgmt: &str, r: &Record) -> Result<(), HostError> {
    let from = nl
        .link(nic)?
        .ok_or_else(|| HostError::NotFound(format!("NIC {nic}")))?;
    let to = nl
        .link(mgmt)?
        .ok_or_else(|| HostError::NotFound(format!("management vNIC {mgmt}")))?;
    for a in &r.addresses {
        nl.del_address(from.index, *a)?;
    }
    for a in &r.addresses {
        nl.add_address(to.index, *a)?;
    }
    for route in &r.routes {
        nl.add_route(&RouteEntry {
            destination: route.destination,
            gateway: Some(route.gateway),
            oif: Some(to.index),
            metric: route.metric,
        })?;
    }
    nic_stack(nic, false)?;
    // The Windows host forwards between its vNICs (flannel host-gw relies on it).
    set_sysctl("net.ipv4.ip_forward", "1")?;
    Ok(())
}

/// Unbinds (or rebinds) the host's IP stack from the NIC, as Windows unbinds TCP/IP from an
/// adapter an external vSwitch takes: no ARP answers, no IPv6, and frames arriving for the
/// host through it dropped by the reverse-path check (they reach the host through the switch
/// and the management vNIC instead).
fn nic_stack(nic: &str, bound: bool) -> Result<(), HostError> {
    let (arp_ignore, rp_filter, no_v6) = if bound {
        ("0", "0", "0")
    } else {
        ("8", "1", "1")
    };
    set_sysctl(&format!("net/ipv4/conf/{nic}/arp_ignore"), arp_ignore)?;
    set_sysctl(&format!("net/ipv4/conf/{nic}/rp_filter"), rp_filter)?;
    // IPv6 may be absent from the kernel; the other two are what matter.
    let _ = set_sysctl(&format!("net/ipv6/conf/{nic}/disable_ipv6"), no_v6);
    Ok(())
}

fn snapshot(nl: &mut Netlink, nic: &str) -> Result<Record, HostError> {
    let link = nl.link(nic)?.ok_or_else(|| {
        HostError::NotFound(format!(
            "NIC {nic} does not exist in the node's namespace; name another with --nic"
        ))
    })?;
    let addresses: Vec<IpNet> = nl
        .addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.net)
        .filter(|n| !is_link_local(n.addr()))
        .collect();
    let routes = nl
        .routes()?
        .into_iter()
        .filter(|r| r.oif == Some(link.index))
        .filter_map(|r| {
            Some(SavedRoute {
                destination: r.destination,
                gateway: r.gateway?,
                metric: r.metric,
            })
        })
        .collect();
    Ok(Record {
        nic: nic.to_string(),
        mac: link.mac.unwrap_or([0; 6]),
        mtu: link.mtu,
        addresses,
        routes,
    })
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

fn default_route_interface(nl: &mut Netlink) -> Result<Option<String>, HostError> {
    let Some(index) = nl
        .routes()?
        .into_iter()
        .find(|r| r.destination.prefix_len() == 0 && r.destination.addr().is_ipv4())
        .and_then(|r| r.oif)
    else {
        return Ok(None);
    };
    Ok(nl
        .links()?
        .into_iter()
        .find(|l| l.index == index)
        .map(|l| l.name))
}

fn write_record(path: &Path, r: &Record) -> Result<(), HostError> {
    let io = |op: &str, source| HostError::Io {
        op: format!("{op} {}", path.display()),
        source,
    };
    let bytes = serde_json::to_vec_pretty(r)
        .map_err(|e| HostError::Invalid(format!("uplink record: {e}")))?;
    let tmp = path.with_extension("json.tmp");
    // hnsd's own record: 0600, as everything it makes.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("write", e))?;
    std::io::Write::write_all(&mut file, &bytes).map_err(|e| io("write", e))?;
    file.sync_all().map_err(|e| io("sync", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename", e))
}
