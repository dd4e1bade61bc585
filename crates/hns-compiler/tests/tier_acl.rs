//! `TierAcl` on the switch, compiled from hnsd's state as the data plane compiles it: tiers in
//! `Order` whatever the order of the policy list, the best-priority rule of a tier deciding,
//! `Pass` handing the packet to the next tier (hcsshim `hcn/hcnutils_test.go` HcnCreateTierAcls'
//! shape: a Pass for port 80, then a Block of the rest).

use std::net::IpAddr;

use hns::Profile;
use hns::state::{Object, State, WriteOp};
use hns_compiler::{Compiler, NodeFacts, Resolver};
use serde_json::{Value, json};
use vfp::packet::{L4, Packet};
use vfp::trace::LayerDecision;
use vfp::wire::{MacAddr, TcpFlags};
use vfp::{Disposition, DropReason, PortId, Timestamp};

const A: &str = "192.168.100.10";
const B: &str = "192.168.100.11";
const MAC_A: MacAddr = MacAddr([0, 0x15, 0x5d, 0, 0, 0x0a]);
const MAC_B: MacAddr = MacAddr([0, 0x15, 0x5d, 0, 0, 0x0b]);

fn write(state: &mut State, op: WriteOp) -> Object {
    let plan = state.plan(op).unwrap_or_else(|e| panic!("{e}"));
    state.apply(&plan.changes);
    plan.result.expect("an object")
}

fn tier(name: &str, order: u16, rules: Value) -> Value {
    json!({"Type": "TierAcl", "Settings": {"Name": name, "Direction": "In", "Order": order, "TierAclRules": rules}})
}

/// Pods a and b on an L2Bridge network; b has `tiers`.
fn node(tiers: Value) -> (Compiler, PortId, PortId) {
    let mut state = State::new(Profile::Unrestricted);
    let network = hcn::decode_value(json!({"Name": "cbr0", "Type": "L2Bridge",
        "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "192.168.100.0/24",
            "Routes": [{"NextHop": "192.168.100.1", "DestinationPrefix": "0.0.0.0/0"}]}]}]}))
    .unwrap();
    let net = write(&mut state, WriteOp::Create(Object::Network(network))).id();
    let mut ep = |name: &str, ip: &str, mac: MacAddr, policies: Value| {
        let doc = json!({"Name": name, "HostComputeNetwork": net.to_string(),
            "IpConfigurations": [{"IpAddress": ip, "PrefixLength": 24}],
            "MacAddress": hcn::MacAddress(mac.0).to_string(), "Policies": policies});
        let ep = hcn::decode_value(doc).unwrap();
        write(&mut state, WriteOp::Create(Object::Endpoint(ep))).id()
    };
    let a = ep("a", A, MAC_A, json!([]));
    let b = ep("b", B, MAC_B, tiers);
    let facts = NodeFacts {
        name: "n".into(),
        profile: Profile::Unrestricted,
        host_mac: MacAddr([0, 0x15, 0x5d, 1, 0, 1]),
        addresses: vec!["10.0.0.11/24".parse().unwrap()],
        uplink: None,
        routes: Vec::new(),
        resolver: Resolver::new(|_| None),
        dynamic_ports: Default::default(),
    };
    let c = Compiler::build(&state, facts);
    let (pa, pb) = (c.endpoint_port(a).unwrap(), c.endpoint_port(b).unwrap());
    (c, pa, pb)
}

/// The group and action of the ACL rule that decided a TCP SYN from a to b:`port`, and where
/// the packet went.
fn syn(c: &mut Compiler, from: PortId, port: u16) -> (Option<(String, String)>, Disposition) {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let l4 = L4::Tcp {
        src_port: 40000,
        dst_port: port,
        flags: TcpFlags::SYN,
        seq: 1,
        ack: 0,
        payload: Vec::new(),
    };
    let frame = Packet::new(ip(A), ip(B), l4).frame(MAC_A, MAC_B).unwrap();
    let t = c.switch_mut().trace(from, &frame, Timestamp::from_secs(1));
    let decided = t
        .steps
        .iter()
        .find(|s| s.layer == vfp::layer::ACL)
        .and_then(|s| match &s.decision {
            LayerDecision::Rule { group, action, .. } => Some((group.clone(), action.to_string())),
            LayerDecision::Default(_) => None,
        });
    (decided, t.disposition)
}

#[test]
fn a_pass_hands_the_packet_to_the_next_tier_in_order() {
    // The second tier first in the list: the order is the tiers' Order, not the list's.
    let tiers = json!([
        tier(
            "TierIn2",
            1002,
            json!([
            {"Id": "TierIn2Rule1", "Protocols": "6", "TierAclRuleAction": "Allow", "LocalPorts": "80", "Priority": 3000},
            {"Id": "TierIn2Rule2", "TierAclRuleAction": "Block", "Priority": 3100}])
        ),
        tier(
            "TierIn1",
            1001,
            json!([
            {"Id": "TierIn1Rule1", "Protocols": "6", "TierAclRuleAction": "Pass",
             "LocalAddresses": "192.168.100.0/24", "RemoteAddresses": "192.168.100.0/24",
             "LocalPorts": "80", "Priority": 2001},
            {"Id": "TierIn1Rule2", "TierAclRuleAction": "Block", "Priority": 2100}])
        ),
    ]);
    let (mut c, a, b) = node(tiers);
    let (decided, d) = syn(&mut c, a, 80);
    assert_eq!(d, Disposition::Deliver(b));
    let tier2 = "ACL_ENDPOINT_TIER_01002_TierIn2_IN".to_string();
    assert_eq!(decided, Some((tier2, "allow".into())));
    let (decided, d) = syn(&mut c, a, 81);
    assert_eq!(d, Disposition::Drop(DropReason::BlockedByRule));
    let tier1 = "ACL_ENDPOINT_TIER_01001_TierIn1_IN".to_string();
    assert_eq!(decided, Some((tier1, "block".into())));
}

#[test]
fn past_the_last_tier_the_layer_default_decides() {
    let tiers = json!([tier(
        "Only",
        1,
        json!([
        {"Id": "p", "Protocols": "6", "TierAclRuleAction": "Pass", "LocalPorts": "80", "Priority": 1}])
    )]);
    let (mut c, a, b) = node(tiers);
    let (decided, d) = syn(&mut c, a, 80);
    assert_eq!(
        (decided, d),
        (None, Disposition::Deliver(b)),
        "unrestricted: default allow"
    );
}
