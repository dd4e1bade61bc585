//! The cluster DNS vs the Services: each Service's name answers with its ClusterIPs (per
//! family), and every pod endpoint's DNS servers (which the node's stub asks for the pod) hold
//! the cluster DNS Service. A resolv.conf that differs from its endpoint's is
//! `pod-dns-differs`, not this.

use std::net::IpAddr;

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::{Node, endpoint_ref};

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let Some(dns) = &n.snap.dns else { return };
    for a in &dns.answers {
        let Some(s) = n.snap.kube.services.iter().find(|s| s.key() == a.service) else {
            continue;
        };
        let v6 = a.qtype == "AAAA";
        let mut want: Vec<IpAddr> = s
            .cluster_ips
            .iter()
            .copied()
            .filter(|ip| ip.is_ipv6() == v6)
            .collect();
        want.sort();
        let mut have = a.addresses.clone();
        have.sort();
        if have == want {
            continue;
        }
        let got = match &a.error {
            Some(e) => e.clone(),
            None => have
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        };
        let want_text = want
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        out.push(n.finding(
            ProblemKind::ClusterDnsAnswerDiffers,
            format!(
                "the cluster DNS answers {} {} with [{got}], the Service's ClusterIP is [{want_text}]",
                a.name, a.qtype
            ),
            vec![
                ObjectRef::new("Service", s.key(), want_text.clone()),
                ObjectRef::new("DnsName", a.name.clone(), a.qtype.clone()),
            ],
            format!("pods that reach {} by name fail (no answer) or reach another address (a stale record)", s.key()),
            "look at the cluster DNS's log and its Service's load balancer (winnet trace to the DNS Service); a stale answer means its watch of Services stopped: restart it".into(),
        ));
    }
    let Some(server) = dns.server else { return };
    // A pod's resolv.conf points at its node's stub (hnsd's DNS client on 127.0.0.53), which
    // asks the endpoint's Dns.ServerList, as the Windows DNS Client asks the vNIC's servers:
    // the servers that must hold the cluster DNS are the endpoint's.
    for (e, netns) in &n.pod_endpoints {
        let servers: Vec<IpAddr> = e
            .dns
            .server_list
            .iter()
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        if servers.contains(&server) {
            continue;
        }
        let list = servers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        out.push(n.finding(
            ProblemKind::PodResolverNotClusterDns,
            format!(
                "endpoint {} ({}) gives its pod the DNS servers [{list}], not the cluster DNS {server}",
                e.id, e.name
            ),
            vec![
                endpoint_ref(e),
                ObjectRef::new("Netns", netns.clone(), ""),
                ObjectRef::new("Service", "kube-system/kube-dns", server.to_string()),
            ],
            "the pod cannot resolve Service names (*.svc.cluster.local): every connection by name to a Service fails".into(),
            "put the kube-dns ClusterIP in the CNI config's DNS Nameservers (the endpoint's Dns.ServerList) and recreate the pod".into(),
        ));
    }
}
