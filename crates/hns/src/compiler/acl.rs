//! Endpoint `ACL` policies on the ACL layer: each policy one rule (priority, Allow/Block,
//! In/Out, protocols, local and remote address and port lists), each with its own owner so a
//! trace names the very policy that decided. Rules are stateful: the replies of an allowed
//! connection follow its flow without meeting the ACLs again.

use hcn::policy::{AclAction, AclDirection, AclPolicySetting};
use hcn::{Endpoint, EndpointPolicy};
use ipnet::IpNet;
use vfp::layer::ACL;
use vfp::{Action, Conditions, Direction, Origin, PortRange, Rule};

use super::nat::parse_net;
use super::placement::{Compiled, Target};

/// The owner kind of ACL rules.
pub const KIND: &str = "Endpoint/ACL";

/// Adds a rule set per `ACL` policy of `ep` to its port.
pub fn compile(ep: &Endpoint, out: &mut Compiled) {
    let acls = ep.policies.iter().filter_map(|p| match p {
        EndpointPolicy::Acl(a) => Some(a),
        _ => None,
    });
    for (i, a) in acls.enumerate() {
        let origin = Origin::new(KIND, format!("{}/{i}", ep.id)).with_source(format!(
            "ACL {i} of endpoint {}: {}",
            name(ep),
            describe(a)
        ));
        out.place(Target::Endpoint(ep.id), ACL, origin, vec![rule(a)]);
    }
}

fn name(ep: &Endpoint) -> String {
    if ep.name.is_empty() {
        ep.id.to_string()
    } else {
        ep.name.clone()
    }
}

/// The policy in one line, as HNS would show its settings.
pub fn describe(a: &AclPolicySetting) -> String {
    let mut s = format!("{} {} priority {}", a.action, a.direction, a.priority);
    for (k, v) in [
        ("protocols", &a.protocols),
        ("local", &a.local_addresses),
        ("remote", &a.remote_addresses),
        ("local ports", &a.local_ports),
        ("remote ports", &a.remote_ports),
    ] {
        if !v.is_empty() {
            s.push_str(&format!(" {k} {v}"));
        }
    }
    s
}

/// One ACL policy as a rule. "Local" is the endpoint's side: the source of what it sends
/// (`Out`), the destination of what it receives (`In`).
pub fn rule(a: &AclPolicySetting) -> Rule {
    let dir = match a.direction {
        AclDirection::In => Direction::In,
        AclDirection::Out => Direction::Out,
    };
    let mut c = Conditions::any().direction(dir);
    let protocols: Vec<u8> = list(&a.protocols).filter_map(|p| p.parse().ok()).collect();
    if !protocols.is_empty() {
        c.protocols = Some(protocols);
    }
    let local = nets(&a.local_addresses);
    let remote = nets(&a.remote_addresses);
    let local_ports = ports(&a.local_ports);
    let remote_ports = ports(&a.remote_ports);
    match dir {
        Direction::Out => {
            (c.src, c.dst) = (local, remote);
            (c.src_ports, c.dst_ports) = (local_ports, remote_ports);
        }
        Direction::In => {
            (c.dst, c.src) = (local, remote);
            (c.dst_ports, c.src_ports) = (local_ports, remote_ports);
        }
    }
    let action = match a.action {
        AclAction::Block => Action::Block,
        AclAction::Allow | AclAction::Pass => Action::Allow,
    };
    Rule::new(a.priority, c, action)
}

fn list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|p| !p.is_empty())
}

fn nets(s: &str) -> Option<Vec<IpNet>> {
    let v: Vec<IpNet> = list(s).filter_map(parse_net).collect();
    (!v.is_empty()).then_some(v)
}

fn ports(s: &str) -> Option<Vec<PortRange>> {
    let v: Vec<PortRange> = list(s)
        .filter_map(|p| hcn::policy::parse_port_range(p).ok())
        .map(|(first, last)| PortRange { first, last })
        .collect();
    (!v.is_empty()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcn::policy::AclRuleType;
    use std::net::IpAddr;
    use vfp::Headers;
    use vfp::wire::proto;

    fn acl(direction: AclDirection, local_ports: &str, remote: &str) -> AclPolicySetting {
        AclPolicySetting {
            protocols: "6,17".into(),
            action: AclAction::Block,
            direction,
            local_addresses: String::new(),
            remote_addresses: remote.into(),
            local_ports: local_ports.into(),
            remote_ports: String::new(),
            rule_type: Some(AclRuleType::Switch),
            priority: 250,
        }
    }

    fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> Headers {
        Headers {
            src_ip: src.parse::<IpAddr>().unwrap(),
            dst_ip: dst.parse::<IpAddr>().unwrap(),
            proto: proto::TCP,
            src_port: sport,
            dst_port: dport,
            ..Headers::empty()
        }
    }

    #[test]
    fn local_is_the_destination_inbound_and_the_source_outbound() {
        let inbound = rule(&acl(AclDirection::In, "80,8000-8080", "10.244.2.0/24"));
        assert_eq!(inbound.priority, 250);
        assert_eq!(inbound.action, Action::Block);
        let h = tcp("10.244.2.7", 40000, "10.244.1.3", 8080);
        assert!(inbound.conditions.matches(&h, None, Direction::In));
        assert!(!inbound.conditions.matches(&h, None, Direction::Out));
        assert!(!inbound.conditions.matches(
            &tcp("10.244.3.7", 1, "10.244.1.3", 80),
            None,
            Direction::In
        ));
        assert!(!inbound.conditions.matches(
            &tcp("10.244.2.7", 1, "10.244.1.3", 81),
            None,
            Direction::In
        ));
        let outbound = rule(&acl(AclDirection::Out, "53", "10.96.0.10"));
        let h = tcp("10.244.1.3", 53, "10.96.0.10", 999);
        assert!(outbound.conditions.matches(&h, None, Direction::Out));
        let mut icmp = h;
        icmp.proto = proto::ICMP;
        assert!(!outbound.conditions.matches(&icmp, None, Direction::Out));
    }

    #[test]
    fn description_names_the_settings() {
        let d = describe(&acl(AclDirection::In, "80", ""));
        assert_eq!(d, "Block In priority 250 protocols 6,17 local ports 80");
    }
}
