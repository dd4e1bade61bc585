//! IP addresses of links: listing them, adding and removing one.

use std::net::IpAddr;

use ipnet::IpNet;

use super::Netlink;
use super::wire::{
    self, AF_INET, AF_INET6, Request, WireError, attrs, family_of, ip_of, malformed, u32_at,
};
use crate::HostError;

pub(super) const IFA_ADDRESS: u16 = 1;
pub(super) const IFA_LOCAL: u16 = 2;
pub(super) const IFA_BROADCAST: u16 = 4;
/// Size of `struct ifaddrmsg`, the fixed header of address messages.
pub(super) const IFADDRMSG_LEN: usize = 8;

/// An IP address assigned to an interface, with the prefix of its subnet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    /// The interface index.
    pub index: u32,
    /// The address and prefix length (host bits kept: `10.0.0.2/24`).
    pub net: IpNet,
}

impl Netlink {
    /// The IPv4 and IPv6 addresses of interface `index`, or of every interface.
    pub fn addresses(&mut self, index: Option<u32>) -> Result<Vec<Address>, HostError> {
        let fixed = ifaddrmsg_dump();
        let all = self
            .sock
            .dump(
                || Request::new(wire::RTM_GETADDR, wire::NLM_F_DUMP, &fixed),
                wire::RTM_NEWADDR,
                parse_address,
            )
            .map_err(|f| f.into_host("list addresses".into()))?;
        Ok(all
            .into_iter()
            .filter(|a| index.is_none_or(|i| a.index == i))
            .collect())
    }

    /// Assigns `net` (address and prefix length) to interface `index`. Ok if it is there
    /// already. IPv4 addresses get their subnet's broadcast address.
    pub fn add_address(&mut self, index: u32, net: IpNet) -> Result<(), HostError> {
        let req = address_request(
            wire::RTM_NEWADDR,
            wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_EXCL,
            index,
            net,
        );
        self.change_unless(req, libc::EEXIST, |nl| {
            format!("add address {net} on {}", nl.describe(index))
        })
    }

    /// Removes `net` from interface `index`. Ok if it is not there.
    pub fn del_address(&mut self, index: u32, net: IpNet) -> Result<(), HostError> {
        let req = address_request(wire::RTM_DELADDR, wire::NLM_F_ACK, index, net);
        self.change_unless(req, libc::EADDRNOTAVAIL, |nl| {
            format!("remove address {net} from {}", nl.describe(index))
        })
    }
}

/// An `RTM_NEWADDR` or `RTM_DELADDR` request for `net` on link `index`. IPv4 addresses get
/// the subnet's broadcast address, as `ip addr add ... brd +` and network managers set it.
pub(crate) fn address_request(kind: u16, flags: u16, index: u32, net: IpNet) -> Request {
    let mut fixed = [0u8; IFADDRMSG_LEN];
    fixed[0] = family_of(net.addr());
    fixed[1] = net.prefix_len();
    fixed[4..8].copy_from_slice(&index.to_ne_bytes());
    let mut req = Request::new(kind, flags, &fixed)
        .attr_ip(IFA_LOCAL, net.addr())
        .attr_ip(IFA_ADDRESS, net.addr());
    if let IpNet::V4(v4) = net
        && kind == wire::RTM_NEWADDR
        && v4.prefix_len() <= 30
    {
        req = req.attr_ip(IFA_BROADCAST, IpAddr::V4(v4.broadcast()));
    }
    req
}

/// The fixed part of an address dump request (all families).
pub(crate) fn ifaddrmsg_dump() -> [u8; IFADDRMSG_LEN] {
    [0; IFADDRMSG_LEN]
}

/// Reads an `RTM_NEWADDR` payload; `None` for families other than IPv4 and IPv6.
pub(crate) fn parse_address(payload: &[u8]) -> Result<Option<Address>, WireError> {
    let fixed = payload
        .get(..IFADDRMSG_LEN)
        .ok_or_else(|| malformed("address message shorter than struct ifaddrmsg"))?;
    let (family, prefix_len) = (fixed[0], fixed[1]);
    let index = u32_at(fixed, 4).unwrap_or(0);
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let (mut local, mut address) = (None, None);
    for a in attrs(&payload[IFADDRMSG_LEN..]) {
        let (kind, value) = a?;
        match kind {
            IFA_LOCAL => local = Some(ip_of(family, value, "IFA_LOCAL")?),
            IFA_ADDRESS => address = Some(ip_of(family, value, "IFA_ADDRESS")?),
            _ => {}
        }
    }
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point
    // links, and the only one IPv6 usually sends.
    let Some(ip) = local.or(address) else {
        return Ok(None);
    };
    let net = IpNet::new(ip, prefix_len)
        .map_err(|_| malformed(format!("address {ip} with prefix length {prefix_len}")))?;
    Ok(Some(Address { index, net }))
}
