//! Tests of the rtnetlink wire format: requests read back as the values they were built from,
//! replies shaped as the kernel sends them are read right, and no input makes a reader panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use proptest::prelude::*;

use super::addr::*;
use super::kind::*;
use super::link::*;
use super::neigh::*;
use super::route::*;
use super::wire::*;

/// The single message in `bytes`, which must frame correctly.
fn only_message(bytes: &[u8]) -> Message<'_> {
    let all: Vec<_> = messages(bytes).collect::<Result<_, _>>().expect("framing");
    assert_eq!(all.len(), 1);
    all[0]
}

/// A kernel-shaped `RTM_NEWLINK` payload: ifinfomsg, then the attributes in the order given.
fn link_payload(index: u32, flags: u32, attributes: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut req = Request::new(RTM_NEWLINK, 0, &ifinfomsg(index, flags, 0));
    for (kind, value) in attributes {
        req = req.attr(*kind, value);
    }
    req.finish(1)[NLMSG_HDRLEN..].to_vec()
}

/// An `IFLA_LINKINFO` value naming `kind`, with some data after it as the kernel sends.
fn linkinfo_of(kind: &str) -> Vec<u8> {
    let bytes = Request::new(0, 0, &[])
        .attr_str(IFLA_INFO_KIND, kind)
        .nested(IFLA_INFO_DATA, |d| d.attr_u32(1, 4096))
        .finish(1);
    bytes[NLMSG_HDRLEN..].to_vec()
}

/// An `NLMSG_ERROR` message as the kernel sends it to a socket with capped, extended acks.
fn error_message(seq: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
    let mut payload = (-errno).to_ne_bytes().to_vec();
    // The echoed request header (capped: header only).
    payload.extend_from_slice(&Request::new(RTM_NEWADDR, NLM_F_ACK, &[]).finish(seq));
    let mut flags = NLM_F_CAPPED;
    if let Some(t) = text {
        flags |= NLM_F_ACK_TLVS;
        let mut v = t.as_bytes().to_vec();
        v.push(0);
        let len = (4 + v.len()) as u16;
        payload.extend_from_slice(&len.to_ne_bytes());
        payload.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        payload.extend_from_slice(&v);
        payload.resize(align4(payload.len()), 0);
    }
    let mut msg = Vec::new();
    msg.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&payload);
    msg
}

#[test]
fn a_request_has_its_header_filled_in_and_aligned_attributes() {
    let bytes = Request::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(7, 0, 0))
        .attr_str(3, "eth0")
        .attr_u32(4, 1500)
        .finish(42);
    assert_eq!(bytes.len(), 16 + 16 + 12 + 8);
    let m = only_message(&bytes);
    assert_eq!(m.kind, RTM_NEWLINK);
    assert_eq!(m.flags, NLM_F_REQUEST | NLM_F_ACK);
    assert_eq!(m.seq, 42);
    let found: Vec<_> = attrs(&m.payload[16..])
        .collect::<Result<_, _>>()
        .expect("attributes");
    assert_eq!(
        found,
        [(3, &b"eth0\0"[..]), (4, &1500u32.to_ne_bytes()[..])]
    );
}

#[test]
fn acks_refusals_and_extended_messages_are_read() {
    let ok = error_message(5, 0, None);
    let m = only_message(&ok);
    assert_eq!(
        parse_ack(m.flags, m.payload),
        Ok(Ack {
            errno: 0,
            message: None
        })
    );
    let refused = error_message(6, libc::ENETUNREACH, Some("Nexthop has invalid gateway"));
    let m = only_message(&refused);
    assert_eq!(m.seq, 6);
    assert_eq!(
        parse_ack(m.flags, m.payload),
        Ok(Ack {
            errno: libc::ENETUNREACH,
            message: Some("Nexthop has invalid gateway".into())
        })
    );
}

#[test]
fn an_uncapped_error_skips_the_whole_echoed_request() {
    let request = Request::new(RTM_NEWROUTE, NLM_F_ACK, &[0; 12])
        .attr_u32(RTA_OIF, 3)
        .finish(9);
    let mut payload = (-libc::EEXIST).to_ne_bytes().to_vec();
    payload.extend_from_slice(&request);
    payload.extend_from_slice(&8u16.to_ne_bytes());
    payload.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
    payload.extend_from_slice(b"abc\0");
    assert_eq!(
        parse_ack(NLM_F_ACK_TLVS, &payload),
        Ok(Ack {
            errno: libc::EEXIST,
            message: Some("abc".into())
        })
    );
}

#[test]
fn a_link_reads_name_mac_mtu_up_master_and_kind_whatever_else_it_carries() {
    let payload = link_payload(
        3,
        IFF_UP,
        &[
            (IFLA_ADDRESS, vec![2, 0, 0, 0, 0, 1]),
            (IFLA_IFNAME, b"eth0\0".to_vec()),
            (IFLA_MTU, 9000u32.to_ne_bytes().to_vec()),
            (60, vec![1, 2, 3]),
            (IFLA_MASTER, 7u32.to_ne_bytes().to_vec()),
            (IFLA_LINKINFO, linkinfo_of("veth")),
        ],
    );
    assert_eq!(
        parse_link(&payload),
        Ok(Link {
            index: 3,
            name: "eth0".into(),
            mac: Some([2, 0, 0, 0, 0, 1]),
            mtu: 9000,
            up: true,
            master: Some(7),
            kind: Some("veth".into()),
        })
    );
    // Master 0 is "no master", as the kernel sends it for a port just freed.
    let freed = link_payload(
        5,
        0,
        &[
            (IFLA_IFNAME, b"p\0".to_vec()),
            (IFLA_MASTER, 0u32.to_ne_bytes().to_vec()),
        ],
    );
    assert_eq!(parse_link(&freed).map(|l| l.master), Ok(None));
    // A 0-byte hardware address (a TUN, ip6tnl0) is no MAC; a link without a name is broken.
    let no_mac = link_payload(
        4,
        0,
        &[(IFLA_ADDRESS, vec![]), (IFLA_IFNAME, b"t\0".to_vec())],
    );
    assert_eq!(parse_link(&no_mac).map(|l| l.mac), Ok(None));
    assert!(parse_link(&link_payload(5, 0, &[])).is_err());
}

#[test]
fn routes_outside_the_main_table_or_not_unicast_are_skipped() {
    let r = RouteEntry {
        destination: "10.1.0.0/16".parse().expect("net"),
        gateway: Some("10.0.0.1".parse().expect("ip")),
        oif: Some(2),
        metric: Some(100),
    };
    let bytes = route_request(0, &r, false).finish(1);
    let mut payload = bytes[NLMSG_HDRLEN..].to_vec();
    assert_eq!(parse_route(&payload), Ok(Some(r)));
    payload[4] = 255; // RT_TABLE_LOCAL
    assert_eq!(parse_route(&payload), Ok(None));
    payload[4] = RT_TABLE_MAIN;
    payload[7] = 2; // RTN_LOCAL
    assert_eq!(parse_route(&payload), Ok(None));
    payload[7] = RTN_UNICAST;
    payload[0] = 128; // RTNL_FAMILY_IPMR
    assert_eq!(parse_route(&payload), Ok(None));
}

#[test]
fn a_multipath_route_reads_as_its_first_hop() {
    let mut hops = Vec::new();
    for (index, gw) in [(5u32, [10, 0, 0, 1]), (6, [10, 0, 1, 1])] {
        let len = (RTNH_LEN + 8) as u16;
        hops.extend_from_slice(&len.to_ne_bytes());
        hops.extend_from_slice(&[0, 0]);
        hops.extend_from_slice(&index.to_ne_bytes());
        hops.extend_from_slice(&8u16.to_ne_bytes());
        hops.extend_from_slice(&RTA_GATEWAY.to_ne_bytes());
        hops.extend_from_slice(&gw);
    }
    let fixed = rtmsg(AF_INET, 0, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST);
    let bytes = Request::new(RTM_NEWROUTE, 0, &fixed)
        .attr(RTA_MULTIPATH, &hops)
        .finish(1);
    let r = parse_route(&bytes[NLMSG_HDRLEN..])
        .expect("parse")
        .expect("route");
    assert_eq!(r.destination, "0.0.0.0/0".parse::<IpNet>().expect("net"));
    assert_eq!(r.oif, Some(5));
    assert_eq!(r.gateway, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
}

#[test]
fn neighbours_are_usable_only_in_a_usable_state_with_a_mac() {
    let ip: IpAddr = "10.0.0.9".parse().expect("ip");
    let read = |state: u16, mac: Option<[u8; 6]>| {
        let bytes = neighbor_request(RTM_NEWNEIGH, 0, 2, ip, mac, state).finish(1);
        parse_neighbor(&bytes[NLMSG_HDRLEN..])
            .expect("parse")
            .expect("neighbour")
            .usable
    };
    let mac = Some([2, 0, 0, 0, 0, 9]);
    assert!(read(0x02, mac)); // REACHABLE
    assert!(read(0x04, mac)); // STALE
    assert!(read(NUD_PERMANENT, mac));
    assert!(!read(0x01, mac)); // INCOMPLETE
    assert!(!read(0x20, mac)); // FAILED
    assert!(!read(0x02, None));
}

#[test]
fn ipv4_addresses_carry_their_broadcast_address_when_added() {
    let net: IpNet = "10.0.0.2/24".parse().expect("net");
    let bytes = address_request(RTM_NEWADDR, 0, 1, net).finish(1);
    let found: Vec<_> = attrs(&bytes[NLMSG_HDRLEN + IFADDRMSG_LEN..])
        .collect::<Result<_, _>>()
        .expect("attributes");
    assert!(found.contains(&(IFA_BROADCAST, &[10, 0, 0, 255][..])));
    let del = address_request(RTM_DELADDR, 0, 1, net).finish(1);
    assert!(
        attrs(&del[NLMSG_HDRLEN + IFADDRMSG_LEN..]).all(|a| a.expect("attr").0 != IFA_BROADCAST)
    );
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
    ]
}

fn any_net() -> impl Strategy<Value = IpNet> {
    any_ip().prop_flat_map(|ip| {
        let max: u8 = if ip.is_ipv4() { 32 } else { 128 };
        (Just(ip), 0..=max).prop_map(|(ip, len)| IpNet::new(ip, len).expect("valid prefix"))
    })
}

fn any_route() -> impl Strategy<Value = RouteEntry> {
    any_net().prop_flat_map(|dst| {
        let gw = if dst.addr().is_ipv4() {
            any::<u32>()
                .prop_map(|a| IpAddr::V4(Ipv4Addr::from(a)))
                .boxed()
        } else {
            any::<u128>()
                .prop_map(|a| IpAddr::V6(Ipv6Addr::from(a)))
                .boxed()
        };
        (
            Just(dst.trunc()),
            proptest::option::of(gw),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(|(destination, gateway, oif, metric)| RouteEntry {
                destination,
                gateway,
                oif,
                metric,
            })
    })
}

proptest! {
    #[test]
    fn readers_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200), flags in any::<u16>()) {
        for m in messages(&bytes) {
            let _ = m;
        }
        for a in attrs(&bytes) {
            let _ = a;
        }
        let _ = parse_link(&bytes);
        let _ = parse_address(&bytes);
        let _ = parse_route(&bytes);
        let _ = parse_neighbor(&bytes);
        let _ = parse_ack(flags, &bytes);
        let _ = parse_done(flags, &bytes);
    }

    #[test]
    fn readers_never_panic_on_mangled_replies(
        r in any_route(),
        at in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<usize>(),
    ) {
        let mut payload = route_request(0, &r, false).finish(1)[NLMSG_HDRLEN..].to_vec();
        let i = at % payload.len();
        payload[i] = byte;
        payload.truncate(cut % (payload.len() + 1));
        let _ = parse_route(&payload);
        let _ = parse_address(&payload);
        let _ = parse_neighbor(&payload);
        let _ = parse_link(&payload);
    }

    #[test]
    fn messages_come_back_in_order(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6)) {
        let mut datagram = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            datagram.extend_from_slice(&Request::new(RTM_NEWLINK, 0, p).finish(i as u32));
        }
        let read: Vec<_> = messages(&datagram).collect::<Result<_, _>>().expect("framing");
        prop_assert_eq!(read.len(), payloads.len());
        for (i, (m, p)) in read.iter().zip(&payloads).enumerate() {
            prop_assert_eq!(m.seq, i as u32);
            // The fixed part is padded to 4 bytes.
            prop_assert_eq!(&m.payload[..p.len()], &p[..]);
            prop_assert_eq!(m.payload.len(), align4(p.len()));
        }
    }

    #[test]
    fn an_address_request_reads_back_as_the_address(index in any::<u32>(), net in any_net()) {
        let bytes = address_request(RTM_NEWADDR, 0, index, net).finish(1);
        let m = only_message(&bytes);
        prop_assert_eq!(parse_address(m.payload), Ok(Some(Address { index, net })));
    }

    #[test]
    fn a_route_request_reads_back_as_the_route(r in any_route()) {
        let bytes = route_request(NLM_F_CREATE | NLM_F_REPLACE, &r, false).finish(1);
        let m = only_message(&bytes);
        prop_assert_eq!(m.kind, RTM_NEWROUTE);
        prop_assert_eq!(parse_route(m.payload), Ok(Some(r)));
    }

    #[test]
    fn a_neighbour_request_reads_back_as_the_neighbour(index in any::<u32>(), ip in any_ip(), mac in any::<[u8; 6]>()) {
        let bytes = neighbor_request(RTM_NEWNEIGH, 0, index, ip, Some(mac), NUD_PERMANENT).finish(1);
        let m = only_message(&bytes);
        prop_assert_eq!(
            parse_neighbor(m.payload),
            Ok(Some(Neighbor { ip, mac: Some(mac), index, usable: true }))
        );
    }

    #[test]
    fn a_link_reads_back_among_unknown_attributes(
        index in any::<u32>(),
        up in any::<bool>(),
        name in "[a-z0-9.-]{1,15}",
        mac in proptest::option::of(any::<[u8; 6]>()),
        mtu in any::<u32>(),
        master in proptest::option::of(1u32..),
        kind in proptest::option::of("[a-z]{1,10}"),
        extra in proptest::collection::vec((5u16..200, proptest::collection::vec(any::<u8>(), 0..24)), 0..8),
    ) {
        // Attributes this reader does not know; the ones it does are added below.
        let mut attributes: Vec<_> = extra
            .into_iter()
            .filter(|(k, _)| *k != IFLA_MASTER && *k != IFLA_LINKINFO)
            .collect();
        attributes.insert(attributes.len() / 2, (IFLA_IFNAME, [name.as_bytes(), b"\0"].concat()));
        attributes.push((IFLA_MTU, mtu.to_ne_bytes().to_vec()));
        if let Some(mac) = mac {
            attributes.insert(0, (IFLA_ADDRESS, mac.to_vec()));
        }
        if let Some(m) = master {
            attributes.insert(attributes.len() / 3, (IFLA_MASTER, m.to_ne_bytes().to_vec()));
        }
        if let Some(k) = &kind {
            attributes.insert(attributes.len() / 4, (IFLA_LINKINFO, linkinfo_of(k)));
        }
        let flags = if up { IFF_UP | 0x40 } else { 0x40 };
        let payload = link_payload(index, flags, &attributes);
        prop_assert_eq!(parse_link(&payload), Ok(Link { index, name, mac, mtu, up, master, kind }));
    }
}
