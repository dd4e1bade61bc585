//! Devices made over rtnetlink (root): veth pairs with an end born in another namespace or moved
//! there, bridges with ports, and a device's offloads switched as `ethtool -K` does. Everything
//! is made inside namespaces the test makes, which take their devices with them when the test
//! ends, passed or failed.

mod common;

use common::TestNs;
use host::HostError;
use host::ethtool::{self, Offload};
use host::netlink::{Link, MacText, Netlink};

/// The link `name` in the namespace of `t`.
fn link_in(t: &TestNs, name: &str) -> Link {
    t.ns.run(|| Netlink::open()?.existing_link(name))
        .unwrap_or_else(|e| panic!("{name} in {}: {e}", t.name))
}

#[test]
fn a_veth_end_is_born_in_the_namespace_named_and_a_bridge_takes_the_other() {
    let fabric = TestNs::new("fab");
    let node = TestNs::new("node");
    let mac = fabric
        .ns
        .run(|| {
            let mut nl = Netlink::open()?;
            nl.add_bridge("br0")?;
            // The peer's name is taken here already: it is made in the node's namespace.
            nl.add_veth("eth0", "tmp0", None)?;
            nl.add_veth("n1", "eth0", Some(&node.ns))
                .map_err(|e| HostError::Invalid(format!("veth into the node: {e}")))?;
            let br = nl.existing_link("br0")?;
            let port = nl.existing_link("n1")?;
            nl.set_master(port.index, Some(br.index))?;
            nl.set_up(port.index, true)?;
            nl.set_up(br.index, true)?;
            let port = nl.existing_link("n1")?;
            assert_eq!(port.master, Some(br.index));
            assert_eq!(port.kind.as_deref(), Some("veth"));
            assert!(port.up);
            let br = nl.existing_link("br0")?;
            assert_eq!(br.kind.as_deref(), Some("bridge"));
            assert_eq!(br.master, None);
            // A second bridge of the same name is refused, with the kernel's reason.
            let e = nl.add_bridge("br0").expect_err("exists");
            assert!(e.to_string().contains("create bridge br0"), "{e}");
            nl.set_master(port.index, None)?;
            assert_eq!(nl.existing_link("n1")?.master, None);
            nl.set_master(port.index, Some(br.index))?;
            Ok(br.mac)
        })
        .expect("in the fabric");
    assert!(mac.is_some(), "a bridge has a MAC");

    let eth0 = link_in(&node, "eth0");
    assert_eq!(eth0.kind.as_deref(), Some("veth"));
    let mac = eth0.mac.expect("a veth has a MAC");
    // iproute2 sees the same device, with the same MAC, and the port under the bridge.
    let shown = node.ip(&["-o", "link", "show", "eth0"]);
    assert!(shown.contains(&MacText(mac).to_string()), "{shown}");
    let ports = fabric.ip(&["-o", "link", "show", "master", "br0"]);
    assert!(ports.contains("n1@"), "{ports}");
    assert!(
        fabric
            .ip(&["-d", "-o", "link", "show", "br0"])
            .contains("bridge")
    );
}

#[test]
fn a_link_moved_to_another_namespace_leaves_this_one() {
    let here = TestNs::new("mvfrom");
    let there = TestNs::new("mvto");
    here.ns
        .run(|| {
            let mut nl = Netlink::open()?;
            nl.add_veth("mv0", "mv1", None)?;
            let mv1 = nl.existing_link("mv1")?;
            nl.set_netns(mv1.index, &there.ns)?;
            assert_eq!(nl.link("mv1")?, None);
            assert!(nl.link("mv0")?.is_some());
            let e = nl.existing_link("mv1").expect_err("gone");
            assert!(matches!(e, HostError::NotFound(_)), "{e}");
            Ok(())
        })
        .expect("in the first namespace");
    let moved = link_in(&there, "mv1");
    assert_eq!(moved.kind.as_deref(), Some("veth"));
    assert!(!moved.up, "a moved link arrives down");
}

#[test]
fn a_namespace_that_does_not_exist_is_named_in_the_error() {
    let t = TestNs::new("nons");
    let gone = host::netns::Netns::named("hosttest-no-such-namespace");
    let e =
        t.ns.run(|| Netlink::open()?.add_veth("x0", "x1", Some(&gone)))
            .expect_err("no such namespace");
    assert!(matches!(e, HostError::NotFound(_)), "{e}");
    assert!(e.to_string().contains("hosttest-no-such-namespace"), "{e}");
}

#[test]
fn offloads_are_switched_off_and_on_as_ethtool_k_does() {
    let t = TestNs::new("ethtool");
    t.ns.run(|| {
        Netlink::open()?.add_veth("et0", "et1", None)?;
        for o in [Offload::Tso, Offload::Gso] {
            ethtool::set_offload("et0", o, false)?;
            assert!(!ethtool::offload("et0", o)?, "{o:?} still on");
        }
        ethtool::set_offload("et0", Offload::Gso, true)?;
        assert!(ethtool::offload("et0", Offload::Gso)?);
        // The other end is untouched.
        assert!(ethtool::offload("et1", Offload::Tso)?);
        let e = ethtool::set_offload("nosuch0", Offload::Tso, false).expect_err("no device");
        assert!(matches!(e, HostError::NotFound(_)), "{e}");
        Ok(())
    })
    .expect("in the namespace");
    // ethtool's own reading agrees, where ethtool is installed.
    if std::path::Path::new("/usr/sbin/ethtool").exists() {
        let k = common::ip(&["netns", "exec", &t.name, "ethtool", "-k", "et0"]);
        assert!(k.contains("tcp-segmentation-offload: off"), "{k}");
        assert!(k.contains("generic-segmentation-offload: on"), "{k}");
    }
}
