//! Policy routing over rtnetlink (root): FIB rules added, listed and deleted, routes in a
//! policy table with an on-link gateway, and the two together sending this host's own packets
//! for one of its addresses out of a device, as hnsd's host claims do. Inside a namespace the
//! test makes, deleted when the test ends, passed or failed.

mod common;

use common::TestNs;
use host::netlink::{LOCAL_TABLE, MAIN_TABLE, Netlink, PortRange, RouteEntry, Rule, RuleFamily};
use ipnet::IpNet;

const TABLE: u32 = 4242;

fn net(s: &str) -> IpNet {
    s.parse().expect("prefix")
}

/// TCP to 192.168.77.11:30080 made on this host, looked up in [`TABLE`].
fn claim() -> Rule {
    Rule {
        priority: Some(500),
        iif: Some("lo".into()),
        dst: Some(net("192.168.77.11/32")),
        ip_proto: Some(6),
        dport: Some(PortRange::single(30080)),
        ..Rule::lookup(RuleFamily::Ipv4, TABLE)
    }
}

fn local_at(priority: u32) -> Rule {
    Rule {
        priority: Some(priority),
        ..Rule::lookup(RuleFamily::Ipv4, LOCAL_TABLE)
    }
}

#[test]
fn rules_are_added_once_listed_as_iproute2_shows_them_and_deleted() {
    let t = TestNs::new("rule");
    let rules =
        t.ns.run(|| {
            let mut nl = Netlink::open()?;
            let before = nl.rules(RuleFamily::Ipv4)?;
            // A new namespace has the three rules every one starts with.
            assert!(before.contains(&local_at(0)), "{before:?}");
            assert!(
                before
                    .iter()
                    .any(|r| r.table == MAIN_TABLE && r.priority == Some(32766))
            );
            nl.add_rule(&claim())?;
            nl.add_rule(&claim())?; // there already: Ok, and not twice
            let rules = nl.rules(RuleFamily::Ipv4)?;
            assert_eq!(
                rules.iter().filter(|r| **r == claim()).count(),
                1,
                "{rules:?}"
            );
            Ok(rules)
        })
        .expect("in the namespace");
    assert_eq!(rules.len(), 4, "{rules:?}");
    let shown = t.ip(&["-4", "rule", "show"]);
    assert!(
        shown
            .contains("500:\tfrom all to 192.168.77.11 iif lo ipproto tcp dport 30080 lookup 4242"),
        "{shown}"
    );
    t.ns.run(|| {
        let mut nl = Netlink::open()?;
        nl.del_rule(&claim())?;
        nl.del_rule(&claim())?; // gone: Ok
        assert!(!nl.rules(RuleFamily::Ipv4)?.contains(&claim()));
        Ok(())
    })
    .expect("in the namespace");
    assert!(!t.ip(&["-4", "rule", "show"]).contains("4242"));
}

#[test]
fn a_claim_routes_the_hosts_own_address_out_of_a_device_until_it_is_undone() {
    let t = TestNs::new("claim");
    let route_get = || {
        t.ip(&[
            "route",
            "get",
            "192.168.77.11",
            "ipproto",
            "tcp",
            "dport",
            "30080",
        ])
    };
    t.ns.run(|| {
        let mut nl = Netlink::open()?;
        nl.add_veth("vn0", "vn1", None)?;
        let vn0 = nl.existing_link("vn0")?;
        let vn1 = nl.existing_link("vn1")?;
        nl.add_address(vn0.index, net("192.168.77.11/24"))?;
        nl.set_up(vn0.index, true)?;
        nl.set_up(vn1.index, true)?;
        Ok(())
    })
    .expect("set up");
    assert!(
        route_get().starts_with("local 192.168.77.11"),
        "{}",
        route_get()
    );

    // As hnsd's claims: the local table behind the claim, a default route in the claim's table
    // with a gateway no address covers (onlink), and the claim's rule.
    t.ns.run(|| {
        let mut nl = Netlink::open()?;
        nl.add_rule(&local_at(1000))?;
        nl.del_rule(&local_at(0))?;
        let vn0 = nl.existing_link("vn0")?;
        let default = RouteEntry {
            destination: net("0.0.0.0/0"),
            gateway: Some("10.9.9.9".parse().expect("ip")),
            oif: Some(vn0.index),
            metric: None,
        };
        nl.add_route_in(TABLE, &default, true)?;
        nl.add_route_in(TABLE, &default, true)?; // replaces
        assert_eq!(nl.routes_in(TABLE)?, [default]);
        assert!(!nl.routes()?.contains(&default), "not in the main table");
        nl.add_rule(&claim())?;
        Ok(())
    })
    .expect("claim");
    let table = t.ip(&["route", "show", "table", "4242"]);
    assert!(
        table.contains("default via 10.9.9.9 dev vn0 onlink"),
        "{table}"
    );
    let got = route_get();
    assert!(got.contains("via 10.9.9.9 dev vn0 table 4242"), "{got}");
    // Other ports of the address stay local.
    let other = t.ip(&[
        "route",
        "get",
        "192.168.77.11",
        "ipproto",
        "tcp",
        "dport",
        "80",
    ]);
    assert!(other.starts_with("local "), "{other}");

    t.ns.run(|| {
        let mut nl = Netlink::open()?;
        nl.del_rule(&claim())?;
        nl.add_rule(&local_at(0))?;
        nl.del_rule(&local_at(1000))?;
        nl.flush_routes_in(TABLE)?;
        nl.flush_routes_in(TABLE)?; // empty: Ok
        assert!(nl.routes_in(TABLE)?.is_empty());
        let rules = nl.rules(RuleFamily::Ipv4)?;
        assert!(rules.contains(&local_at(0)) && !rules.contains(&local_at(1000)));
        Ok(())
    })
    .expect("undo");
    assert!(
        route_get().starts_with("local 192.168.77.11"),
        "{}",
        route_get()
    );
}

#[test]
fn a_rule_the_kernel_refuses_says_which_rule() {
    let t = TestNs::new("rulerr");
    let e =
        t.ns.run(|| {
            let bad = Rule {
                ip_proto: Some(6),
                dport: Some(PortRange::single(80)),
                iif: Some("x".repeat(15)),
                ..Rule::lookup(RuleFamily::Ipv6, TABLE)
            };
            Netlink::open()?.del_rule(&bad)?;
            // Deleting a rule that is not there is fine; a table of 0 is not.
            Netlink::open()?.add_rule(&Rule::lookup(RuleFamily::Ipv4, 0))
        })
        .expect_err("table 0");
    assert!(e.to_string().contains("table 0"), "{e}");
}
