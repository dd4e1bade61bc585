//! The switch's ARP and IPv6 neighbour-discovery responder: it answers for the addresses it is
//! told it owns (gateways, remote addresses behind encapsulation), as VFP does, so those never
//! need to be flooded.

use crate::frame::Frame;
use crate::parse::Parsed;
use crate::wire::{
    self, ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    Ipv6Packet, Ipv6Repr, MacAddr, icmpv6,
};
use hashbrown::HashMap;
use std::net::{IpAddr, Ipv6Addr};

/// Turns an ARP request for an owned address into the reply, in place. Returns false (frame
/// untouched) if it is not such a request.
pub(crate) fn answer_arp(frame: &mut Frame, p: &Parsed, owned: &HashMap<IpAddr, MacAddr>) -> bool {
    let Ok(arp) = ArpPacket::new_checked(&frame.bytes()[p.l3..]) else {
        return false;
    };
    let req = ArpRepr::parse(&arp);
    let Some(&mac) = owned.get(&IpAddr::V4(req.target_ip)) else {
        return false;
    };
    if req.operation != ArpOperation::Request {
        return false;
    }
    let reply = ArpRepr {
        operation: ArpOperation::Reply,
        sender_mac: mac,
        sender_ip: req.target_ip,
        target_mac: req.sender_mac,
        target_ip: req.sender_ip,
    };
    let eth = EthernetRepr {
        src: mac,
        dst: req.sender_mac,
        vlan_tci: None,
        ethertype: EtherType::ARP,
    };
    let mut out = [0u8; 14 + wire::arp::PACKET_LEN];
    // Both emits fit the fixed-size buffer by construction.
    if eth.emit(&mut out).is_err() || reply.emit(&mut out[14..]).is_err() {
        return false;
    }
    frame.set(&out);
    true
}

/// Turns a neighbour solicitation for an owned address into the advertisement, in place.
pub(crate) fn answer_ns(frame: &mut Frame, p: &Parsed, owned: &HashMap<IpAddr, MacAddr>) -> bool {
    let b = frame.bytes();
    let Ok(ip) = Ipv6Packet::new_checked(&b[p.l3..]) else {
        return false;
    };
    let src = ip.src();
    let seg_end = p.l3 + wire::ipv6::HEADER_LEN + ip.payload_len();
    let Ok(icmp) = Icmpv6Packet::new_checked(&b[p.l4..seg_end]) else {
        return false;
    };
    if icmp.msg_type() != icmpv6::NEIGHBOR_SOLICIT {
        return false;
    }
    let Ok(target) = icmp.nd_target() else {
        return false;
    };
    let Some(&mac) = owned.get(&IpAddr::V6(target)) else {
        return false;
    };
    let to_all = src.is_unspecified();
    let reply_dst = if to_all {
        Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)
    } else {
        src
    };
    let na = Icmpv6Repr::NeighborAdvert {
        router: true,
        solicited: !to_all,
        override_: true,
        target,
        target_mac: Some(mac),
    };
    let mut ip6 = Ipv6Repr::simple(target, reply_dst, wire::proto::ICMPV6, na.len());
    ip6.hop_limit = 255; // RFC 4861 §7.1.2: neighbour discovery must carry hop limit 255
    let eth_dst = if to_all {
        MacAddr::ipv6_multicast(reply_dst)
    } else {
        p.headers.src_mac
    };
    let eth = EthernetRepr {
        src: mac,
        dst: eth_dst,
        vlan_tci: None,
        ethertype: EtherType::IPV6,
    };
    let mut out = vec![0u8; 14 + 40 + na.len()];
    let ok = eth.emit(&mut out).is_ok()
        && ip6.emit(&mut out[14..]).is_ok()
        && na.emit(&mut out[54..], target, reply_dst).is_ok();
    if ok {
        frame.set(&out);
    }
    ok
}
