//! Cases of felix's Windows dataplane tests (projectcalico/calico
//! `felix/dataplane/windows/policysets/policysets_test.go`), each named after its upstream
//! test and producing the same HNS ACL policies (v1 JSON, as felix's expected `hns.ACLPolicy`
//! values read), on the static-rules-free policy sets (`mockReader("")`).

#![allow(non_snake_case)]

use ipnet::IpNet;
use policy::planner::felix::{CalicoRule, PolicySet, RuleAction, direction_rules, rule_acls};
use serde_json::{Value, json};

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|n| n.parse().unwrap()).collect()
}

fn port(first: u16, last: u16) -> hcn::policy::PortRange {
    hcn::policy::PortRange { first, last }
}

fn rules(set: &str, rules: &[CalicoRule], inbound: bool) -> Vec<Value> {
    direction_rules(&[PolicySet { id: set, rules }], inbound)
        .iter()
        .map(|a| a.v1_json())
        .collect()
}

fn block(direction: &str, priority: u16) -> Value {
    json!({"Type":"ACL","Protocol":256,"Action":"Block","Direction":direction,"RuleType":"Switch","Priority":priority})
}

fn basic_inbound() -> Vec<CalicoRule> {
    let mut r1 = CalicoRule::allow("rule-1");
    r1.src_net = nets(&["10.0.0.0/24"]);
    r1.protocol = Some(6);
    r1.src_ports = vec![port(1234, 1234)];
    r1.dst_ports = vec![port(80, 80)];
    let mut r2 = CalicoRule::allow("rule-2");
    r2.protocol = Some(17);
    let mut r3 = CalicoRule::allow("rule-3");
    r3.action = RuleAction::Deny;
    r3.dst_net = nets(&["10.0.0.0/24"]);
    let mut r4 = CalicoRule::allow("rule-4");
    r4.action = RuleAction::Deny;
    r4.dst_net = nets(&["11.0.0.0/24"]);
    vec![r1, r2, r3, r4]
}

/// TestRuleRendering: "unknown policy should result in default drop" / the empty policy.
#[test]
fn rule_rendering_empty_policy__felix() {
    assert_eq!(rules("empty", &[], true), [block("In", 1001)]);
}

/// TestRuleRendering: the basic policy: the priority steps up where Allow turns to Block,
/// not between two Blocks, and the default Block follows one step above.
#[test]
fn rule_rendering_basic_policy__felix() {
    assert_eq!(
        rules("basic", &basic_inbound(), true),
        [
            json!({"Type":"ACL","Id":"basic-rule-1-0","Protocol":6,"Action":"Allow","Direction":"In",
                "RemoteAddresses":"10.0.0.0/24","LocalPorts":"80","RemotePorts":"1234","RuleType":"Switch","Priority":1000}),
            json!({"Type":"ACL","Id":"basic-rule-2-0","Protocol":17,"Action":"Allow","Direction":"In","RuleType":"Switch","Priority":1000}),
            json!({"Type":"ACL","Id":"basic-rule-3-0","Protocol":256,"Action":"Block","Direction":"In",
                "LocalAddresses":"10.0.0.0/24","RuleType":"Switch","Priority":1001}),
            json!({"Type":"ACL","Id":"basic-rule-4-0","Protocol":256,"Action":"Block","Direction":"In",
                "LocalAddresses":"11.0.0.0/24","RuleType":"Switch","Priority":1001}),
            block("In", 1002),
        ]
    );
}

/// TestRuleRendering: "Test for Rule with profile" (an allow-all profile rule).
#[test]
fn rule_rendering_rule_with_profile__felix() {
    assert_eq!(
        rules("rule-with-profile", &[CalicoRule::allow("rule-1")], true),
        [
            json!({"Type":"ACL","Id":"rule-with-profile-rule-1-0","Protocol":256,"Action":"Allow","Direction":"In","RuleType":"Switch","Priority":1000}),
            block("In", 1001),
        ]
    );
}

/// TestRuleRendering: "Test with Mixed CIDR to filterout IpV4": rules whose nets (plain or
/// negated) are all IPv6 make nothing.
#[test]
fn rule_rendering_mixed_cidr__felix() {
    let v6 = nets(&["::ffff:a0f4:301/128"]);
    let mut r1 = CalicoRule::allow("rule-1");
    r1.src_net = v6.clone();
    let mut r2 = CalicoRule::allow("rule-2");
    r2.dst_net = v6;
    assert_eq!(rules("mixed-cidr", &[r1, r2], true), [block("In", 1001)]);
}

/// TestRuleRendering: "Outbound policy with SrcNet": the source of an outbound rule is the
/// endpoint's side (LocalAddresses).
#[test]
fn rule_rendering_out_srcnet__felix() {
    let mut r = CalicoRule::allow("rule-1");
    r.src_net = nets(&["10.0.0.0/24"]);
    assert_eq!(
        rules("out-srcnet", &[r], false),
        [
            json!({"Type":"ACL","Id":"out-srcnet-rule-1-0","Protocol":256,"Action":"Allow","Direction":"Out",
                "LocalAddresses":"10.0.0.0/24","RuleType":"Switch","Priority":1000}),
            block("Out", 1001),
        ]
    );
}

/// TestNegativeTestCases: IPv6 rules, named ports, ICMP types and negative matches are
/// skipped; only the default Block stays.
#[test]
fn negative_test_cases__felix() {
    let mut v6 = CalicoRule::allow("rule-1");
    v6.ip_version = 6;
    v6.src_net = nets(&["::ffff:a0f4:301/128"]);
    let mut named = CalicoRule::allow("rule-1");
    named.protocol = Some(6);
    named.named_ports = true;
    let mut icmp = CalicoRule::allow("rule-1");
    icmp.icmp = true;
    let mut negative = CalicoRule::allow("rule-1");
    negative.not_src_net = nets(&["10.0.0.0/24"]);
    for (name, rule) in [
        ("unsupported-ip-version", v6),
        ("named-port", named),
        ("icmp-type", icmp),
        ("negative-match", negative),
    ] {
        assert_eq!(
            rules(name, std::slice::from_ref(&rule), true),
            [block("In", 1001)],
            "{name}"
        );
    }
    // protoRuleToHnsRules on its own: a NotDstNet rule gives nothing.
    let mut not_dst = CalicoRule::allow("rule-1");
    not_dst.not_dst_net = nets(&["10.0.0.0/24"]);
    assert!(rule_acls("policy-with-NotDstNet", &not_dst, true).is_err());
    // A `log` action is not supported either.
    let mut log = CalicoRule::allow("rule-1");
    log.action = RuleAction::Log;
    assert!(rule_acls("policy-with-unsupported-action", &log, true).is_err());
}

/// TestMultiIpPortChunks: "verify aclpolicy for empty egress rule" / "empty ingress rule".
#[test]
fn multi_ip_port_chunks_empty_rules__felix() {
    for (inbound, dir) in [(false, "Out"), (true, "In")] {
        let acls = rule_acls("empty-egress-1", &CalicoRule::allow(""), inbound).unwrap();
        let got: Vec<Value> = acls.iter().map(|a| a.v1_json()).collect();
        assert_eq!(
            got,
            [
                json!({"Type":"ACL","Id":"empty-egress-1--0","Protocol":256,"Action":"Allow","Direction":dir,"RuleType":"Switch","Priority":1000})
            ]
        );
    }
}

/// TestMultiIpPortChunks: "Tests that look up an IP set": a rule's selector set becomes
/// its members' addresses, on the peer's side (source inbound) or the endpoint's
/// (destination inbound).
#[test]
fn multi_ip_port_chunks_selector__felix() {
    let mut r1 = CalicoRule::allow("rule-1");
    r1.src_ip_set = Some(nets(&[
        "10.0.0.1/32",
        "10.0.0.2/32",
        "10.0.0.2/32",
        "10.0.0.3/32",
    ]));
    let mut r2 = CalicoRule::allow("rule-2");
    r2.dst_ip_set = Some(nets(&["10.1.0.1/32", "10.1.0.2/32"]));
    assert_eq!(
        rules("selector", &[r1, r2], true),
        [
            json!({"Type":"ACL","Id":"selector-rule-1-0","Protocol":256,"Action":"Allow","Direction":"In",
                "RemoteAddresses":"10.0.0.1/32,10.0.0.2/32,10.0.0.2/32,10.0.0.3/32","RuleType":"Switch","Priority":1000}),
            json!({"Type":"ACL","Id":"selector-rule-2-0","Protocol":256,"Action":"Allow","Direction":"In",
                "LocalAddresses":"10.1.0.1/32,10.1.0.2/32","RuleType":"Switch","Priority":1000}),
            block("In", 1001),
        ]
    );
}
