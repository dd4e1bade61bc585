//! Known problems of a Windows build, named with their source: WS2022 NodePort on Overlay,
//! WS2022 L2Bridge pod -> pod with DSR, more backends than the profile's load balancers take,
//! and probes that ping through OutBoundNAT ([`icmp_probes`](crate::checks::icmp_probes)).

use hcn::NetworkType;

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::{Node, lb_ref};

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    crate::checks::icmp_probes::check(n, out);
    let profile = n.snap.profile.name.as_str();
    let has = |t: NetworkType| n.snap.hns.networks.iter().any(|net| net.network_type == t);
    if profile == "ws2022" && has(NetworkType::Overlay) {
        for s in &n.snap.kube.services {
            if s.external_policy_local || !s.ports.iter().any(|p| p.node_port.is_some()) {
                continue;
            }
            let mut f = n.finding(
                ProblemKind::Ws2022NodePortOnOverlay,
                format!("Service {} has NodePorts with externalTrafficPolicy Cluster on a WS2022 Overlay node", s.key()),
                vec![ObjectRef::new("Service", s.key(), s.service_type.clone())],
                "NodePort connections forwarded to a backend on another node fail (an OS bug on WS2022 Overlay)".into(),
                "set externalTrafficPolicy: Local on the Service, or move the node to WS2025".into(),
            );
            f.source = Some("microsoft/Windows-Containers#204; kubernetes/website#31759".into());
            out.push(f);
        }
    }
    if profile == "ws2022" && has(NetworkType::L2Bridge) {
        let dsr: Vec<&hcn::LoadBalancer> = n
            .snap
            .hns
            .load_balancers
            .iter()
            .filter(|lb| lb.is_dsr())
            .collect();
        if !dsr.is_empty() {
            let mut f = n.finding(
                ProblemKind::Ws2022L2BridgeDsr,
                format!("{} DSR load balancers on a WS2022 L2Bridge node", dsr.len()),
                dsr.iter().map(|lb| lb_ref(lb)).collect(),
                "pod -> Service -> pod on another node fails on WS2022 with KB5005619 or later when the load balancer is DSR".into(),
                "run kube-proxy without --enable-dsr (WinDSR=false) on this node, or move it to WS2025".into(),
            );
            f.source = Some("microsoft/Windows-Containers#204; rancher/windows#159".into());
            out.push(f);
        }
    }
    let Some(limit) = n.snap.profile.backend_limit else {
        return;
    };
    for s in &n.snap.kube.services {
        let count = s.serving_ips().len();
        if count <= limit {
            continue;
        }
        let mut f = n.finding(
            ProblemKind::BackendLimit,
            format!("Service {} has {count} endpoints; {profile}'s load balancers take {limit}", s.key()),
            vec![ObjectRef::new("Service", s.key(), format!("{count} endpoints"))],
            format!("kube-proxy cannot program the Service's load balancers: connections to it fail (or reach only {limit} of the pods)"),
            "split the Service, or move the node to a build with a higher limit (WS2025: 1024)".into(),
        );
        f.source = Some(
            "kubernetes/website content/en/docs/concepts/services-networking/windows-networking.md (limitations)"
                .into(),
        );
        out.push(f);
    }
}
