//! Links, addresses, routes, neighbours and sysctls over rtnetlink (root), in a namespace of
//! the test's own with a TAP to work on.

mod common;

use std::net::IpAddr;

use common::TestNs;
use host::HostError;
use host::netlink::{Address, Link, Netlink, RouteEntry};
use host::sysctl::set_sysctl;
use host::tap::Tap;
use ipnet::IpNet;

const MAC: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];

fn net(s: &str) -> IpNet {
    s.parse().expect("prefix")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// Runs `f` in a fresh namespace with a persistent TAP `name` (down), given its link.
fn with_tap<R: Send>(
    tag: &str,
    name: &str,
    f: impl FnOnce(&mut Netlink, Link) -> Result<R, HostError> + Send,
) -> (TestNs, R) {
    let t = TestNs::new(tag);
    let r =
        t.ns.run(|| {
            Tap::open(name)?.set_persist(true)?;
            let mut nl = Netlink::open()?;
            let link = nl.link(name)?.expect("the TAP just made");
            f(&mut nl, link)
        })
        .unwrap_or_else(|e| panic!("in namespace {}: {e}", t.name));
    (t, r)
}

#[test]
fn mtu_mac_up_and_gso_size_are_set() {
    let (t, link) = with_tap("lnk", "lk0", |nl, link| {
        assert!(!link.up);
        nl.set_mtu(link.index, 1400)?;
        nl.set_mac(link.index, MAC)?;
        nl.set_gso_max_size(link.index, 32768)?;
        nl.set_up(link.index, true)?;
        let after = nl.link_by_index(link.index)?.expect("still there");
        assert!(nl.links()?.contains(&after));
        Ok(after)
    });
    assert_eq!(link.name, "lk0");
    assert_eq!(link.mtu, 1400);
    assert_eq!(link.mac, Some(MAC));
    assert!(link.up);
    let detail = t.ip(&["-d", "link", "show", "lk0"]);
    assert!(detail.contains("gso_max_size 32768"), "{detail}");
}

#[test]
fn unknown_interfaces_are_none_and_refusals_name_the_operation() {
    with_tap("lnkerr", "le0", |nl, _| {
        assert_eq!(nl.link("nosuch0")?, None);
        assert_eq!(nl.link("name/that:linux-refuses")?, None);
        assert_eq!(nl.link_by_index(999_999)?, None);
        let e = nl
            .add_address(999_999, net("10.0.0.2/24"))
            .expect_err("no such interface");
        assert!(matches!(e, HostError::Netlink { .. }), "{e}");
        // The errno's text, then the kernel's own words when it gives them.
        let text = e.to_string();
        assert!(
            text.starts_with("add address 10.0.0.2/24 on interface #999999: No such device"),
            "{text}"
        );
        Ok(())
    });
}

#[test]
fn addresses_are_added_listed_and_removed_idempotently() {
    with_tap("addr", "ad0", |nl, link| {
        let v4 = net("10.7.0.1/24");
        let v6 = net("fd00:7::1/64");
        nl.add_address(link.index, v4)?;
        nl.add_address(link.index, v4)?; // already there: Ok
        nl.add_address(link.index, v6)?;
        let mine = nl.addresses(Some(link.index))?;
        assert!(
            mine.contains(&Address {
                index: link.index,
                net: v4
            }),
            "{mine:?}"
        );
        assert!(
            mine.contains(&Address {
                index: link.index,
                net: v6
            }),
            "{mine:?}"
        );
        assert!(mine.iter().all(|a| a.index == link.index));
        let all = nl.addresses(None)?;
        assert!(all.iter().any(|a| a.net == net("127.0.0.1/8")), "{all:?}");

        nl.del_address(link.index, v4)?;
        nl.del_address(link.index, v4)?; // gone: Ok
        nl.del_address(link.index, v6)?;
        let left = nl.addresses(Some(link.index))?;
        assert!(!left.iter().any(|a| a.net == v4 || a.net == v6), "{left:?}");
        Ok(())
    });
}

#[test]
fn routes_are_added_replaced_listed_and_deleted() {
    with_tap("route", "rt0", |nl, link| {
        nl.add_address(link.index, net("10.7.0.1/24"))?;
        nl.add_address(link.index, net("fd00:7::1/64"))?;
        nl.set_up(link.index, true)?;
        let r4 = RouteEntry {
            destination: net("10.8.0.0/16"),
            gateway: Some(ip("10.7.0.254")),
            oif: Some(link.index),
            metric: Some(50),
        };
        let default = RouteEntry {
            destination: net("0.0.0.0/0"),
            gateway: Some(ip("10.7.0.254")),
            oif: Some(link.index),
            metric: None,
        };
        let r6 = RouteEntry {
            destination: net("fd00:8::/64"),
            gateway: Some(ip("fd00:7::fe")),
            oif: Some(link.index),
            metric: Some(300),
        };
        for r in [&r4, &default, &r6] {
            nl.add_route(r)?;
        }
        nl.add_route(&r4)?; // the same again replaces it
        let routes = nl.routes()?;
        assert_eq!(routes.iter().filter(|r| **r == r4).count(), 1, "{routes:?}");
        assert!(routes.contains(&r6), "{routes:?}");
        let d = routes
            .iter()
            .find(|r| r.destination == net("0.0.0.0/0"))
            .expect("the default route");
        assert_eq!((d.gateway, d.oif), (default.gateway, default.oif));
        // The on-link route of the address is there too, without a gateway.
        assert!(routes.iter().any(|r| r.destination == net("10.7.0.0/24")
            && r.gateway.is_none()
            && r.oif == Some(link.index)));

        for r in [&r4, &default, &r6] {
            nl.del_route(r)?;
            nl.del_route(r)?; // gone: Ok
        }
        let left = nl.routes()?;
        assert!(!left.contains(&r4) && !left.contains(&r6), "{left:?}");
        assert!(
            !left
                .iter()
                .any(|r| r.destination.prefix_len() == 0 && r.destination.addr().is_ipv4())
        );
        Ok(())
    });
}

#[test]
fn a_refused_route_says_which_route_and_why() {
    with_tap("rterr", "re0", |nl, link| {
        nl.add_address(link.index, net("10.7.0.1/24"))?;
        nl.set_up(link.index, true)?;
        let e = nl
            .add_route(&RouteEntry {
                destination: net("10.9.0.0/16"),
                gateway: Some(ip("192.168.99.1")),
                oif: Some(link.index),
                metric: None,
            })
            .expect_err("a gateway that is not on the link");
        let text = e.to_string();
        assert!(
            text.starts_with("add route 10.9.0.0/16 via 192.168.99.1 dev re0: "),
            "{text}"
        );
        assert!(matches!(e, HostError::Netlink { .. }), "{text}");
        Ok(())
    });
}

#[test]
fn permanent_neighbours_are_set_replaced_and_deleted() {
    with_tap("neigh", "nb0", |nl, link| {
        nl.set_up(link.index, true)?;
        let other = [0x02, 0, 0, 0, 0, 0x99];
        for addr in [ip("10.7.0.9"), ip("fd00:7::9")] {
            nl.add_neighbor(link.index, addr, MAC)?;
            let n = nl
                .neighbors()?
                .into_iter()
                .find(|n| n.ip == addr)
                .expect("the entry");
            assert_eq!((n.mac, n.index, n.usable), (Some(MAC), link.index, true));

            nl.add_neighbor(link.index, addr, other)?; // replaces
            let n = nl
                .neighbors()?
                .into_iter()
                .find(|n| n.ip == addr)
                .expect("the entry");
            assert_eq!(n.mac, Some(other));

            nl.del_neighbor(link.index, addr)?;
            nl.del_neighbor(link.index, addr)?; // gone: Ok
            assert!(!nl.neighbors()?.iter().any(|n| n.ip == addr));
        }
        Ok(())
    });
}

#[test]
fn a_deleted_link_is_gone_and_deleting_again_is_ok() {
    with_tap("del", "dl0", |nl, link| {
        nl.delete_link(link.index)?;
        assert_eq!(nl.link("dl0")?, None);
        nl.delete_link(link.index)?;
        Ok(())
    });
}

#[test]
fn sysctls_follow_the_thread_namespace_and_take_dotted_interface_names() {
    with_tap("sysctl", "sc.1", |_, _| {
        let key = "net/ipv4/conf/sc.1/rp_filter";
        set_sysctl(key, "2")?;
        let read = std::fs::read_to_string(format!("/proc/sys/{key}"))
            .map_err(|e| HostError::io("read back", e))?;
        assert_eq!(read.trim(), "2");
        set_sysctl("net.ipv4.conf.all.forwarding", "1")?;
        let e = set_sysctl("net/ipv4/conf/nosuch0/rp_filter", "1").expect_err("no interface");
        assert!(matches!(e, HostError::NotFound(_)), "{e}");
        Ok(())
    });
    // The interface exists only in the test's namespace.
    assert!(!std::path::Path::new("/proc/sys/net/ipv4/conf/sc.1").exists());
}
