//! A HostComputeLoadBalancer on the SLB layer: its frontends (the `FrontendVIPs`, or every node
//! address for a NodePort) and port mappings pick a backend (`DistributionType`); local
//! backends are addressed by MAC to their port, remote ones continue through the route layer
//! (host routes on L2Bridge, VXLAN on Overlay). Without DSR the source becomes the `SourceVIP`
//! (or the node's address); with DSR it stays the client's and replies are translated back to
//! the VIP by the connection at the backend's own port — except the host's own connections
//! where a `SourceVIP` is set (Overlay), which take it as without DSR. `PreserveDIP` leaves the VIP as
//! destination for local backends.
//!
//! Where the rules go: the pod ports of its backends' networks (east-west), the uplink (unless `ILB`), and the host's
//! ports for Service VIPs and, with `LocalRoutedVIP`, NodePorts, within the profile's limits.

use std::net::IpAddr;
use std::sync::Arc;

use hcn::loadbalancer::{LoadBalancerDistribution, PortMappingFlags};
use hcn::{LoadBalancer, LoadBalancerPortMapping};
use ipnet::IpNet;
use vfp::layer::SLB;
use vfp::{Action, Backend, Conditions, Direction, Distribution, Origin, Owner, Rule};

use crate::placement::{Compiled, HostClaim, Notice, Target};
use crate::{Compiler, limitation, mac};
use hns::profile::Limitation;
use hns::state::State;

/// The origin of a load balancer's rules: its ID and the Kubernetes Service port kube-proxy
/// named in `LinuxService`.
pub fn origin(lb: &LoadBalancer) -> Origin {
    let o = Origin::new("LoadBalancer", lb.id.to_string());
    if lb.linux_service.is_empty() {
        o
    } else {
        o.with_source(format!("Service {}", lb.linux_service))
    }
}

/// HNS `DistributionType` as the switch's distribution.
pub fn distribution(t: u32) -> Distribution {
    match t {
        LoadBalancerDistribution::SOURCE_IP_PROTOCOL => Distribution::SourceIpProtocol,
        LoadBalancerDistribution::SOURCE_IP => Distribution::SourceIp,
        _ => Distribution::None,
    }
}

/// One backend as the LB sees it: its addresses, MAC when local.
struct Dip {
    ips: Vec<IpAddr>,
    mac: Option<vfp::wire::MacAddr>,
}

/// Compiles a load balancer.
pub fn compile(c: &mut Compiler, state: &State, lb: &LoadBalancer) -> Compiled {
    let mut out = Compiled::default();
    let origin = origin(lb);
    let node_port = lb.frontend_vips.is_empty();
    let vips: Vec<IpAddr> = if node_port {
        c.facts.ips().collect()
    } else {
        lb.frontend_vips.clone()
    };
    let dips: Vec<Dip> = lb
        .host_compute_endpoints
        .iter()
        .filter_map(|id| state.endpoint(*id))
        .map(|e| Dip {
            ips: e.ips().collect(),
            mac: (!e.is_remote()).then_some(e.mac_address.map(mac)).flatten(),
        })
        .collect();
    let mut sets = Sets::default();
    for pm in &lb.port_mappings {
        for v4 in [true, false] {
            let family: Vec<IpAddr> = vips.iter().copied().filter(|v| v.is_ipv4() == v4).collect();
            if family.is_empty() {
                continue;
            }
            let Some(main) = rule(c, lb, pm, &family, &dips, &origin.owner, false, &mut out) else {
                continue;
            };
            // The host's own connections to a DSR load balancer with a SourceVIP (kube-proxy
            // gives one on Overlay only) take the source VIP, as without DSR: the host's
            // address is no overlay address, so a backend on another node could not send a
            // DSR reply back into the connection (a Linux node answers it on the underlay,
            // outside the VXLAN flow).
            let host_rule = if lb.is_dsr() && lb.source_vip.is_some() {
                rule(c, lb, pm, &family, &dips, &origin.owner, true, &mut out)
                    .unwrap_or_else(|| main.clone())
            } else {
                main.clone()
            };
            place_rule(
                c,
                pm,
                node_port,
                &family,
                (main, host_rule),
                &mut sets,
                &mut out,
            );
        }
    }
    // East-west, the load balancer is on the pods of its backends' networks.
    let mut nets: Vec<hcn::Guid> = lb
        .host_compute_endpoints
        .iter()
        .filter_map(|id| state.endpoint(*id))
        .map(|e| e.host_compute_network)
        .collect();
    nets.sort();
    nets.dedup();
    for net in nets {
        out.place(Target::Pods(net), SLB, origin.clone(), sets.pods.clone());
    }
    out.place(Target::Uplink, SLB, origin.clone(), sets.uplink);
    out.place(Target::HostPorts, SLB, origin, sets.host);
    for (l, rules) in sets.refused {
        let kind = if lb.linux_service.is_empty() {
            "LoadBalancer".to_string()
        } else {
            format!("LoadBalancer of Service {}", lb.linux_service)
        };
        let o = limitation::origin(l, c.facts.profile, &kind, &lb.id.to_string());
        out.place(Target::HostPorts, SLB, o, rules);
    }
    out
}

/// Rule sets by target.
#[derive(Default)]
struct Sets {
    pods: Vec<Rule>,
    uplink: Vec<Rule>,
    host: Vec<Rule>,
    refused: Vec<(Limitation, Vec<Rule>)>,
}

impl Sets {
    fn refuse(&mut self, l: Limitation, r: Rule) {
        match self.refused.iter_mut().find(|(k, _)| *k == l) {
            Some((_, v)) => v.push(r),
            None => self.refused.push((l, vec![r])),
        }
    }
}

/// The rule of one port mapping for the frontends `vips` of one family; `host_via_source_vip`:
/// the host's copy of a DSR rule, which translates the source to the `SourceVIP`.
#[allow(clippy::too_many_arguments)]
fn rule(
    c: &mut Compiler,
    lb: &LoadBalancer,
    pm: &LoadBalancerPortMapping,
    vips: &[IpAddr],
    dips: &[Dip],
    owner: &Owner,
    host_via_source_vip: bool,
    out: &mut Compiled,
) -> Option<Rule> {
    let v4 = vips.first()?.is_ipv4();
    let backends: Vec<Backend> = dips
        .iter()
        .filter_map(|d| {
            let ip = d.ips.iter().copied().find(|ip| ip.is_ipv4() == v4)?;
            Some(Backend {
                ip,
                port: (pm.internal_port != 0).then_some(pm.internal_port),
                mac: d.mac,
            })
        })
        .collect();
    if backends.is_empty() {
        out.notice(
            owner,
            format!(
                "no backend has an {} address; port {} is not load balanced",
                if v4 { "IPv4" } else { "IPv6" },
                pm.external_port
            ),
        );
        return None;
    }
    let external = lb.frontend_vips.is_empty() || pm.flags & PortMappingFlags::VIP_EXTERNAL_IP != 0;
    let all_local = backends.iter().all(|b| b.mac.is_some());
    let source_nat = if lb.is_dsr() {
        if host_via_source_vip {
            snat_pool(c, lb, v4)
        } else {
            None
        }
    } else if external && all_local {
        // ExternalTrafficPolicy Local without DSR: replies come back through this switch
        // anyway, so the client's address could be kept; Windows translates it.
        if c.facts.profile.imposes(Limitation::LocalTrafficWithoutDsr) {
            out.notices.push(Notice {
                owner: owner.to_string(),
                message: Limitation::LocalTrafficWithoutDsr.message(c.facts.profile),
                limitation: Some(Limitation::LocalTrafficWithoutDsr),
            });
            snat_pool(c, lb, v4)
        } else {
            None
        }
    } else {
        snat_pool(c, lb, v4)
    };
    let balancer = vfp::LoadBalancer {
        backends,
        distribution: distribution(pm.distribution_type),
        source_nat,
        preserve_dst: pm.flags & PortMappingFlags::PRESERVE_DIP != 0,
    };
    let mut cond = Conditions::any().direction(Direction::Out);
    cond.dst = Some(vips.iter().copied().map(IpNet::from).collect());
    if let Ok(p) = u8::try_from(pm.protocol)
        && p != 0
    {
        cond = cond.protocol(p);
    }
    if pm.external_port != 0 {
        cond = cond.dst_port(pm.external_port);
    }
    let priority = if lb.frontend_vips.is_empty() { 20 } else { 10 };
    Some(Rule::new(
        priority,
        cond,
        Action::LoadBalance(Arc::new(balancer)),
    ))
}

/// The SNAT pool of a non-DSR load balancer: its `SourceVIP`, else the node's address.
fn snat_pool(c: &mut Compiler, lb: &LoadBalancer, v4: bool) -> Option<vfp::PoolId> {
    let ip = lb
        .source_vip
        .filter(|s| s.is_ipv4() == v4)
        .or_else(|| c.facts.ips().find(|a| a.is_ipv4() == v4))?;
    Some(c.pool(ip))
}

/// Puts a port mapping's rule where it applies (`rules`: the rule, and its copy for the
/// host's own connections).
fn place_rule(
    c: &Compiler,
    pm: &LoadBalancerPortMapping,
    node_port: bool,
    vips: &[IpAddr],
    rules: (Rule, Rule),
    sets: &mut Sets,
    out: &mut Compiled,
) {
    let (rule, host_rule) = rules;
    let profile = c.facts.profile;
    sets.pods.push(rule.clone());
    if pm.flags & PortMappingFlags::ILB != 0 {
        return;
    }
    sets.uplink.push(rule.clone());
    if node_port {
        if pm.flags & PortMappingFlags::LOCAL_ROUTED_VIP == 0 {
            return;
        }
        // The host sends its connections to its own address and this port into the switch.
        if let Ok(protocol) = u8::try_from(pm.protocol) {
            out.claims.extend(vips.iter().map(|&address| HostClaim {
                protocol,
                address,
                port: pm.external_port,
            }));
        }
        if profile.imposes(Limitation::NodePortFromNode) {
            sets.refuse(Limitation::NodePortFromNode, limitation_rule(&rule));
        } else {
            sets.host.push(host_rule);
        }
    } else if profile.imposes(Limitation::ClusterIpFromNode)
        && pm.flags & PortMappingFlags::LOCAL_ROUTED_VIP == 0
    {
        sets.refuse(Limitation::ClusterIpFromNode, limitation_rule(&rule));
    } else {
        sets.host.push(host_rule);
    }
}

/// The refusal matching what `rule` would have load balanced.
fn limitation_rule(rule: &Rule) -> Rule {
    limitation::refuse(rule.priority, rule.conditions.clone())
}
