//! Traces name the HNS objects behind each decision: the load balancer (and the Kubernetes
//! Service kube-proxy named in it) and the backend it chose; the ACL policy that blocked.

use crate::topology::*;
use hcn::EndpointPolicy;
use hcn::policy::{AclAction, AclDirection, AclPolicySetting, AclRuleType};
use hns::Profile;
use lab::{L4, Packet, PodOptions, Who};
use vfp::trace::LayerDecision;
use vfp::wire::TcpFlags;

fn syn(src: std::net::IpAddr, dst: std::net::IpAddr, sport: u16, dport: u16) -> Packet {
    Packet::new(
        src,
        dst,
        L4::Tcp {
            src_port: sport,
            dst_port: dport,
            flags: TcpFlags::SYN,
            seq: 1,
            ack: 0,
            payload: vec![],
        },
    )
}

#[test]
fn a_trace_of_pod_to_cluster_ip_names_the_load_balancer_its_service_and_the_backend() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut t = topo(backend, Profile::Ws2022);
        let (a, b) = (t.a, t.b);
        // Resolve the pod's gateway first, as any first packet would.
        assert!(t.c.tcp_syn(a, ip(WEB_LOCAL), 80).ok());
        let lb = t.c.nodes[0]
            .read(|s| {
                s.load_balancers()
                    .find(|l| l.frontend_vips == vec![ip(WEB_LOCAL)])
                    .map(|l| l.id)
            })
            .unwrap();
        let tr =
            t.c.trace(a, &syn(t.ip(a), ip(WEB_LOCAL), 41000, 80))
                .unwrap();
        let step = tr
            .steps
            .iter()
            .find(|s| s.layer == "slb")
            .expect("the SLB layer decided");
        let LayerDecision::Rule { origin, .. } = &step.decision else {
            panic!("{tr}")
        };
        assert_eq!(origin.owner.kind, "LoadBalancer");
        assert_eq!(origin.owner.id, lb.to_string());
        // kube-proxy's name of the Service port (the Service's one port is unnamed).
        assert_eq!(origin.source.as_deref(), Some("Service default/web"));
        // The chosen backend is b, port 8080.
        assert_eq!(step.after.inner.dst_ip, t.ip(b));
        assert_eq!(step.after.inner.dst_port, 8080);
        let text = tr.to_string();
        assert!(
            text.contains(&format!("LoadBalancer {lb} (Service default/web)")),
            "{text}"
        );
        assert!(text.contains(&format!("{}:8080", t.ip(b))), "{text}");
        assert!(
            matches!(tr.disposition, vfp::Disposition::Deliver(_)),
            "{text}"
        );
    }
}

#[test]
fn a_trace_of_a_blocked_packet_names_the_acl_policy_that_blocked_it() {
    let mut t = topo(Backend::HostGw, Profile::Ws2022);
    let a = t.a;
    let acl = |action, priority, ports: &str| {
        EndpointPolicy::Acl(AclPolicySetting {
            id: String::new(),
            protocols: "6".parse().unwrap(),
            action,
            direction: AclDirection::In,
            local_addresses: Default::default(),
            remote_addresses: Default::default(),
            local_ports: ports.parse().unwrap(),
            remote_ports: Default::default(),
            rule_type: Some(AclRuleType::Switch),
            priority,
        })
    };
    let guarded =
        t.c.add_pod(
            0,
            "guarded",
            PodOptions {
                policies: vec![
                    acl(AclAction::Allow, 100, "80"),
                    acl(AclAction::Block, 200, ""),
                ],
                ..PodOptions::default()
            },
        )
        .unwrap();
    let Who::Pod(_, ep) = guarded else {
        unreachable!()
    };
    let gip = t.ip(guarded);
    // Port 80 is allowed by the first policy (and its replies follow the connection).
    assert!(t.c.tcp_syn(a, gip, 80).ok());
    // Port 8080 meets the second: blocked, and the drop's trace names that policy.
    let ex = t.c.tcp_syn(a, gip, 8080);
    assert!(ex.request.is_none(), "{ex}");
    let d = ex.drops.first().unwrap_or_else(|| panic!("no drop: {ex}"));
    assert_eq!(d.reason, vfp::DropReason::BlockedByRule);
    let name = format!("Endpoint/ACL {ep}/1");
    assert!(d.trace.contains(&name), "{}", d.trace);
    assert!(
        d.trace
            .contains("ACL 1 of endpoint guarded_cbr0: Block In priority 200 protocols 6"),
        "{}",
        d.trace
    );
    // The same from an explicit trace.
    let tr = t.c.trace(a, &syn(t.ip(a), gip, 42000, 8080)).unwrap();
    let blocked = tr
        .steps
        .iter()
        .find_map(|s| match &s.decision {
            LayerDecision::Rule {
                origin,
                action: vfp::Action::Block,
                ..
            } => Some(origin.clone()),
            _ => None,
        })
        .expect("a block step");
    assert_eq!(blocked.owner.id, format!("{ep}/1"));
    assert_eq!(
        tr.disposition,
        vfp::Disposition::Drop(vfp::DropReason::BlockedByRule)
    );
}
