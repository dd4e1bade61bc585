//! flannel's leases vs this node: every other node's lease has its route here (host-gw: a
//! kernel route to its subnet via its public IP, as flanneld's host-gw backend adds; vxlan: a
//! RemoteSubnetRoute on the Overlay network with its public IP as provider address), and this
//! node's network and subnet.env are on its own lease's subnet.

use hcn::{NetworkPolicy, NetworkType};
use ipnet::{IpNet, Ipv4Net};

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::Node;
use crate::snapshot::FlannelLease;

fn lease_ref(l: &FlannelLease) -> ObjectRef {
    ObjectRef::new(
        "Lease",
        l.subnet.to_string(),
        format!("{} {}", l.backend, l.public_ip),
    )
}

/// `FLANNEL_SUBNET` of a subnet.env (the gateway address with the lease's prefix length).
fn env_subnet(text: &str) -> Option<Ipv4Net> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("FLANNEL_SUBNET="))
        .and_then(|v| v.trim().parse::<Ipv4Net>().ok())
}

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let Some(fl) = &n.snap.flannel else { return };
    let networks: Vec<&hcn::Network> = n
        .snap
        .hns
        .networks
        .iter()
        .filter(|net| {
            matches!(
                net.network_type,
                NetworkType::L2Bridge | NetworkType::Overlay
            )
        })
        .collect();
    let routes = n
        .snap
        .kernel
        .as_ref()
        .map(|k| k.node.routes.clone())
        .unwrap_or_default();
    let own = fl.leases.iter().find(|l| Some(l.public_ip) == fl.public_ip);
    for l in &fl.leases {
        if Some(l) == own {
            continue;
        }
        let (present, object, what) = if l.backend == "vxlan" {
            let on = networks.iter().find(|net| {
                net.policies.iter().any(|p| {
                    matches!(p, NetworkPolicy::RemoteSubnetRoute(r)
                        if r.destination_prefix == IpNet::V4(l.subnet)
                            && r.provider_address == l.public_ip)
                })
            });
            let net = on.or(networks.first());
            (
                on.is_some(),
                net.map(|net| ObjectRef::new("Network", net.id.to_string(), net.name.clone())),
                format!("a RemoteSubnetRoute {} -> {}", l.subnet, l.public_ip),
            )
        } else {
            let want = format!("{} via {}", l.subnet, l.public_ip);
            (
                n.snap.kernel.is_none() || routes.contains(&want),
                Some(ObjectRef::new("Route", want.clone(), "")),
                format!("the route {want}"),
            )
        };
        if present {
            continue;
        }
        let mut objects = vec![lease_ref(l)];
        objects.extend(object);
        out.push(n.finding(
            ProblemKind::FlannelRouteMissing,
            format!("the flannel lease {} of {} has no route on this node: {what} is missing", l.subnet, l.public_ip),
            objects,
            format!("every flow between this node's pods and the pods of {} (that node's subnet): packets leave by the default route and are dropped", l.subnet),
            "restart flanneld on this node: it programs every lease's route at start (flanneld's log says why it did not)".into(),
        ));
    }
    let Some(own) = own else {
        if let Some(ip) = fl.public_ip {
            out.push(
                n.finding(
                    ProblemKind::FlannelSubnetDiffers,
                    format!("no flannel lease carries this node's public IP {ip}"),
                    vec![ObjectRef::new("Node", n.snap.node.clone(), ip.to_string())],
                    "the other nodes have no route to this node's pods: every flow from them fails"
                        .into(),
                    "restart flanneld on this node: it takes (or renews) its lease at start".into(),
                ),
            );
        }
        return;
    };
    let held = networks.iter().any(|net| {
        net.subnets()
            .any(|s| s.ip_address_prefix == Some(IpNet::V4(own.subnet)))
    });
    if !held && !networks.is_empty() {
        let mut objects = vec![lease_ref(own)];
        objects.extend(
            networks
                .iter()
                .map(|net| ObjectRef::new("Network", net.id.to_string(), net.name.clone())),
        );
        out.push(n.finding(
            ProblemKind::FlannelSubnetDiffers,
            format!("this node's lease is {}, its network is not on it", own.subnet),
            objects,
            format!("the other nodes route {} here, the pods here have other addresses: every flow to them from other nodes fails", own.subnet),
            "delete the network and restart flanneld (it makes the network on its lease), then recreate the pods".into(),
        ));
    }
    let env = fl.subnet_env.as_deref().map(env_subnet);
    let differs = match env {
        None => Some("missing".to_string()),
        Some(None) => Some("without a FLANNEL_SUBNET".to_string()),
        Some(Some(s)) if s.trunc() != own.subnet => Some(format!("FLANNEL_SUBNET={s}")),
        Some(Some(_)) => None,
    };
    if let Some(what) = differs {
        out.push(n.finding(
            ProblemKind::FlannelSubnetDiffers,
            format!("subnet.env is {what}, this node's lease is {}", own.subnet),
            vec![
                lease_ref(own),
                ObjectRef::new("SubnetEnv", fl.subnet_file.clone(), what),
            ],
            format!("new pods get no address, or one outside {} that no other node routes here (the flannel CNI plugin reads subnet.env on every ADD)", own.subnet),
            "restart flanneld on this node: it writes subnet.env from its lease".into(),
        ));
    }
}
