//! The winkernel mapping (reference §5.4) as a pure function: one Service and its
//! EndpointSlices, on this node, to the HNS load balancers and remote endpoints it needs.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hcn::loadbalancer::{LoadBalancerDistribution, LoadBalancerFlags, PortMappingFlags};
use hcn::{MacAddress, SupportedFeatures};
use ipnet::IpNet;

use crate::model::{
    Endpoint, Protocol, Service, ServiceKey, ServicePort, ServiceType, Slice, TargetPort,
};

/// kube-proxy's own port-mapping flag for external IPs (not in hcsshim).
const VIP_EXTERNAL_IP: u32 = PortMappingFlags::VIP_EXTERNAL_IP;

/// What the planner needs to know about this node and its HNS.
#[derive(Clone, Debug, Default)]
pub struct NodeContext {
    /// This node's name (`--hostname-override`): endpoints with this `nodeName` are local.
    pub hostname: String,
    /// The addresses of the local (not remote) HNS endpoints on the network. As winkernel
    /// decides it, a backend is local when HNS has a local endpoint for its address, whatever
    /// its slice's `nodeName` says (or leaves out).
    pub local_endpoint_ips: BTreeSet<IpAddr>,
    /// The node's addresses, by family: the PA of last resort and the overlay SourceVIP for
    /// backends outside the pod network.
    pub node_ips: Vec<IpAddr>,
    pub overlay: bool,
    /// The network's RemoteSubnetRoutes: remote pod prefix -> PA (Overlay).
    pub remote_subnets: Vec<(IpNet, IpAddr)>,
    /// `--source-vip` (used on Overlay only, as winkernel does).
    pub source_vip: Option<IpAddr>,
    /// `--enable-dsr`, already checked against HNS's DSR support.
    pub enable_dsr: bool,
    /// HNS has DSR at all (else ETP=Local and preserve-destination cannot use it).
    pub dsr_supported: bool,
    pub session_affinity_supported: bool,
    /// One proxier per family: IPv6 only when HNS has IPv6DualStack and, on Overlay, carries
    /// IPv6 there ([`NodeContext::programs_ipv6`]).
    pub ipv6: bool,
    /// `--forward-healthcheck-vip`: a health-check LB per ingress IP onto the root endpoint.
    pub forward_healthcheck_vip: bool,
    /// The kube-proxy healthz port, the health port when a Service names none.
    pub healthz_port: u16,
    /// The MAC of the NIC that holds the node IP (Overlay: the ClusterIP remote endpoints).
    pub host_mac: Option<MacAddress>,
}

impl NodeContext {
    /// Whether kube-proxy runs its IPv6 proxier on this node: winkernel's dual-stack mode needs
    /// HNS's IPv6DualStack, and refuses Overlay networks ("Overlay (VXLAN) networks on
    /// Windows do not support dual-stack networking today") unless HNS reports carrying IPv6
    /// there (`LinuxIPv6Overlay`: no Windows build does; hnsd's `unrestricted` profile lifts it).
    pub fn programs_ipv6(features: &SupportedFeatures, overlay: bool) -> bool {
        features.ipv6_dual_stack && (!overlay || features.ipv6_overlay)
    }
}

/// Which of a service port's load balancers this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    ClusterIp,
    NodePort,
    ExternalIp,
    Ingress,
    HealthCheck,
}

/// A backend of a desired load balancer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// A pod on this node: its HNS endpoint is the CNI's.
    Local(IpAddr),
    /// A pod elsewhere: a remote HNS endpoint (Flags 1) that the proxy owns.
    Remote(IpAddr),
    /// The root HNS endpoint (`--root-hnsendpoint-name`), for health-check LBs.
    Root,
}

/// The frontend an LB claims in HNS: one owner per (VIP or every node address of a family,
/// protocol, port). A dual-stack NodePort has one LB per family on the same port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frontend {
    pub vip: Option<IpAddr>,
    /// The address family (the LB's IPv6 flag); what tells two NodePort LBs apart.
    pub ipv6: bool,
    pub protocol: u32,
    pub port: u16,
}

/// A load balancer the Service needs, before backends are resolved to HNS endpoint IDs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredLb {
    pub service: ServiceKey,
    pub port_name: String,
    pub role: Role,
    pub frontend: Frontend,
    pub internal_port: u16,
    pub backends: BTreeSet<Backend>,
    pub source_vip: Option<IpAddr>,
    pub lb_flags: u32,
    pub port_mapping_flags: u32,
    pub distribution: u32,
}

/// A remote HNS endpoint the Service needs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteEndpoint {
    pub ip: IpAddr,
    pub mac: MacAddress,
    /// The PA (Overlay only).
    pub provider_address: Option<IpAddr>,
}

/// Everything one Service needs on this node, and what could not be done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServicePlan {
    pub lbs: Vec<DesiredLb>,
    pub remotes: BTreeSet<RemoteEndpoint>,
    /// Things winkernel would log: unsupported protocol, missing features, and the like.
    pub problems: Vec<String>,
    /// Endpoints on this node, by service port, for the health-check server.
    pub local_endpoints: usize,
}

/// The MAC winkernel gives a remote endpoint: the prefix and the last four bytes of the IP.
/// It is never sent on the wire.
pub fn conjure_mac(prefix: [u8; 2], ip: IpAddr) -> MacAddress {
    let b = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    MacAddress([prefix[0], prefix[1], b[0], b[1], b[2], b[3]])
}

/// Plans one Service. `slices` are the Service's EndpointSlices (any family).
pub fn plan_service(svc: &Service, slices: &[&Slice], ctx: &NodeContext) -> ServicePlan {
    let mut plan = ServicePlan::default();
    if svc.service_type == ServiceType::ExternalName || svc.cluster_ips.is_empty() {
        return plan; // ExternalName and headless Services have no VIP to balance.
    }
    for family_ip in &svc.cluster_ips {
        let ipv6 = family_ip.is_ipv6();
        if ipv6 && !ctx.ipv6 {
            plan.problems.push(if ctx.overlay {
                format!("{}: Overlay (VXLAN) networks on Windows do not support dual-stack networking today; IPv6 cluster IP {family_ip} not programmed", svc.key)
            } else {
                format!("{}: this HNS has no IPv6DualStack; IPv6 cluster IP {family_ip} not programmed", svc.key)
            });
            continue;
        }
        let family: Vec<&Slice> = slices.iter().copied().filter(|s| s.ipv6 == ipv6).collect();
        for port in &svc.ports {
            plan_port(svc, port, *family_ip, &family, ctx, &mut plan);
        }
    }
    plan.remotes = plan
        .lbs
        .iter()
        .flat_map(|lb| &lb.backends)
        .filter_map(|b| match b {
            Backend::Remote(ip) => Some(RemoteEndpoint {
                ip: *ip,
                mac: conjure_mac([0x02, 0x11], *ip),
                provider_address: provider_address(*ip, ctx),
            }),
            _ => None,
        })
        .collect();
    // Overlay: each ClusterIP is also a remote endpoint behind this node's PA, with the host's
    // MAC, so that VFP routes it (winkernel's svcInfo.remoteEndpoint). winkernel makes it for
    // every Service it programs, before looking at backends, so a Service with none has it too
    // (proxier_test.go TestCreateServiceVip).
    if let (true, Some(mac)) = (ctx.overlay, ctx.host_mac) {
        for vip in svc.cluster_ips.iter().filter(|v| !v.is_ipv6() || ctx.ipv6) {
            plan.remotes.insert(RemoteEndpoint {
                ip: *vip,
                mac,
                provider_address: node_ip(ctx, vip.is_ipv6()),
            });
        }
    }
    plan
}

/// The endpoints of one service port, with the internal port they listen on.
fn port_endpoints<'a>(
    port: &ServicePort,
    slices: &[&'a Slice],
    problems: &mut Vec<String>,
    key: &ServiceKey,
) -> (Vec<&'a Endpoint>, Option<u16>) {
    let mut eps = Vec::new();
    let mut internal: Option<u16> = None;
    for slice in slices {
        let Some(sp) = slice
            .ports
            .iter()
            .find(|p| p.name == port.name && p.protocol == port.protocol)
        else {
            continue;
        };
        match internal {
            Some(p) if p != sp.port => problems.push(format!(
                "{key} port {}: endpoints listen on different ports ({p} and {}); HNS load balancers take one, {p} is used",
                port.name, sp.port
            )),
            _ => internal = Some(sp.port),
        }
        eps.extend(slice.endpoints.iter());
    }
    if internal.is_none()
        && let TargetPort::Number(n) = port.target_port
    {
        internal = Some(n);
    }
    (eps, internal)
}

fn plan_port(
    svc: &Service,
    port: &ServicePort,
    cluster_ip: IpAddr,
    slices: &[&Slice],
    ctx: &NodeContext,
    plan: &mut ServicePlan,
) {
    let Some(protocol) = port.protocol.hns_number() else {
        plan.problems.push(format!(
            "{} port {} ({}): Windows has no SCTP load balancing; not programmed",
            svc.key, port.name, port.port
        ));
        return;
    };
    let (endpoints, internal) = port_endpoints(port, slices, &mut plan.problems, &svc.key);
    let is_local = |e: &Endpoint| is_local(e, ctx);
    for e in &endpoints {
        if let Some(node) = e.node_name.as_deref().filter(|n| *n != ctx.hostname)
            && ctx.local_endpoint_ips.contains(&e.ip)
        {
            plan.problems.push(format!(
                "{}: endpoint {} is on node {node} by its EndpointSlice, but it is a local HNS endpoint here; it is used as local (is --hostname-override this node's name?)",
                svc.key, e.ip
            ));
        }
    }
    let ext_local = svc.external_policy_local;

    let usable = usable_endpoints(svc, &endpoints, ctx);
    // The health-check server counts this node's ready endpoints (kube-proxy's
    // LocalReadyEndpoints), whatever the load balancers were given.
    plan.local_endpoints += endpoints.iter().filter(|e| e.ready && is_local(e)).count();
    let available_for_lb = usable.available_for_lb;
    let usable = usable.endpoints;

    let Some(internal_port) = internal else {
        return;
    };
    let backends = |local_only: bool| -> BTreeSet<Backend> {
        usable
            .iter()
            .filter(|e| !local_only || is_local(e))
            .map(|e| {
                if is_local(e) {
                    Backend::Local(e.ip)
                } else {
                    Backend::Remote(e.ip)
                }
            })
            .collect()
    };
    let ipv6 = if cluster_ip.is_ipv6() {
        LoadBalancerFlags::IPV6
    } else {
        0
    };
    let dsr = |on: bool| {
        if on && ctx.dsr_supported {
            LoadBalancerFlags::DSR
        } else {
            0
        }
    };
    let distribution = if svc.session_affinity && ctx.session_affinity_supported {
        LoadBalancerDistribution::SOURCE_IP
    } else {
        if svc.session_affinity
            && plan
                .problems
                .iter()
                .all(|p| !p.contains("Session Affinity"))
        {
            plan.problems.push(format!(
                "{}: Session Affinity is not supported on this version of Windows",
                svc.key
            ));
        }
        LoadBalancerDistribution::NONE
    };
    let mut add = |role: Role,
                   vip: Option<IpAddr>,
                   ext_port: u16,
                   set: BTreeSet<Backend>,
                   lb_flags: u32,
                   pm_flags: u32,
                   dist: u32| {
        if set.is_empty() {
            return;
        }
        let source_vip = source_vip(&set, ctx);
        plan.lbs.push(DesiredLb {
            service: svc.key.clone(),
            port_name: port.name.clone(),
            role,
            frontend: Frontend {
                vip,
                ipv6: cluster_ip.is_ipv6(),
                protocol,
                port: ext_port,
            },
            internal_port: if role == Role::HealthCheck {
                ext_port
            } else {
                internal_port
            },
            backends: set,
            source_vip,
            lb_flags: lb_flags | ipv6,
            port_mapping_flags: pm_flags,
            distribution: dist,
        });
    };

    let cluster_set = backends(svc.internal_policy_local);
    add(
        Role::ClusterIp,
        Some(cluster_ip),
        port.port,
        cluster_set,
        dsr(ctx.enable_dsr),
        0,
        distribution,
    );
    let same_family = |ip: &&IpAddr| ip.is_ipv6() == cluster_ip.is_ipv6();
    // endpointsAvailableForLB gates the NodePort and external IP load balancers and the
    // health check's, but neither the ClusterIP's nor the ingress IPs' (proxier.go).
    if let Some(node_port) = port
        .node_port
        .filter(|_| available_for_lb && svc.service_type != ServiceType::ClusterIp)
    {
        let local_only = ext_local || svc.preserve_destination;
        let flags = PortMappingFlags::LOCAL_ROUTED_VIP | VIP_EXTERNAL_IP;
        add(
            Role::NodePort,
            None,
            node_port,
            backends(local_only),
            dsr(ext_local),
            flags,
            distribution,
        );
    }
    for ext in svc
        .external_ips
        .iter()
        .filter(same_family)
        .filter(|_| available_for_lb)
    {
        add(
            Role::ExternalIp,
            Some(*ext),
            port.port,
            backends(ext_local),
            dsr(ext_local),
            VIP_EXTERNAL_IP,
            distribution,
        );
    }
    for ingress in svc.ingress_ips.iter().filter(same_family) {
        let preserve = svc.preserve_destination;
        let flags = if preserve {
            VIP_EXTERNAL_IP | PortMappingFlags::USE_MUX | PortMappingFlags::PRESERVE_DIP
        } else {
            VIP_EXTERNAL_IP
        };
        add(
            Role::Ingress,
            Some(*ingress),
            port.port,
            backends(ext_local || preserve),
            dsr(ext_local || preserve),
            flags,
            distribution,
        );
        if ctx.forward_healthcheck_vip && available_for_lb {
            let health_port = svc.health_check_node_port.unwrap_or(ctx.healthz_port);
            let hc_flags = if preserve {
                PortMappingFlags::USE_MUX | PortMappingFlags::PRESERVE_DIP
            } else {
                0
            };
            let root = BTreeSet::from([Backend::Root]);
            add(
                Role::HealthCheck,
                Some(*ingress),
                health_port,
                root,
                0,
                hc_flags,
                LoadBalancerDistribution::NONE,
            );
        }
    }
}

/// The endpoints a service port's load balancers may use, as winkernel picks them.
struct Usable<'a> {
    endpoints: Vec<&'a Endpoint>,
    /// winkernel's `endpointsAvailableForLB`: not every endpoint terminating, and some serving.
    available_for_lb: bool,
}

/// KEP-1669 as winkernel applies it (proxier.go `syncProxyRules`), which is not what the
/// Linux proxiers do (`CategorizeEndpoints`): the terminating and serving states are looked
/// at only for a Service with a load balancer ingress IP. There, when every endpoint that is
/// ready or terminating is terminating, the serving ones are used; when none is serving, no
/// endpoint is filtered out at all. Everywhere else only ready endpoints are used, so a
/// ClusterIP Service whose endpoints are all terminating has no load balancer. With
/// `externalTrafficPolicy: Local` (and DSR in HNS) only this node's endpoints are looked at,
/// and with `internalTrafficPolicy: Local` too, remote ones are not used at all (#114407).
fn usable_endpoints<'a>(
    svc: &Service,
    endpoints: &[&'a Endpoint],
    ctx: &NodeContext,
) -> Usable<'a> {
    let local_traffic_dsr = svc.external_policy_local && ctx.dsr_supported;
    let looked_at = || {
        endpoints
            .iter()
            .copied()
            .filter(move |e| !local_traffic_dsr || is_local(e, ctx))
    };
    let (mut all_terminating, mut all_non_serving) = (false, false);
    if !svc.ingress_ips.is_empty() {
        // isAllEndpointsTerminating skips an endpoint that failed its readiness probe but is
        // not being deleted (ready and terminating both false).
        all_terminating = looked_at()
            .filter(|e| e.ready || e.terminating)
            .all(|e| e.terminating);
        all_non_serving = looked_at().all(|e| !e.serving);
    }
    let some_serving = !all_non_serving;
    let endpoints = endpoints
        .iter()
        .copied()
        .filter(|e| !(svc.internal_policy_local && local_traffic_dsr) || is_local(e, ctx))
        .filter(|e| !some_serving || ((all_terminating || e.ready) && e.serving))
        .collect();
    Usable {
        endpoints,
        available_for_lb: !all_terminating && !all_non_serving,
    }
}

/// Whether a backend is on this node: HNS has a local endpoint for its address (winkernel's
/// `hnsLocalEndpoints`), or its slice names this node (the CNI has not made it yet: retried).
fn is_local(e: &Endpoint, ctx: &NodeContext) -> bool {
    ctx.local_endpoint_ips.contains(&e.ip) || e.node_name.as_deref() == Some(ctx.hostname.as_str())
}

/// The PA of a remote endpoint on Overlay: the RemoteSubnetRoute's whose prefix holds the IP,
/// else the node's own address ("assuming it is a public IP", as winkernel says).
fn provider_address(ip: IpAddr, ctx: &NodeContext) -> Option<IpAddr> {
    if !ctx.overlay {
        return None;
    }
    ctx.remote_subnets
        .iter()
        .find(|(prefix, _)| prefix.contains(&ip))
        .map(|(_, pa)| *pa)
        .or_else(|| node_ip(ctx, ip.is_ipv6()))
}

fn node_ip(ctx: &NodeContext, ipv6: bool) -> Option<IpAddr> {
    ctx.node_ips.iter().copied().find(|ip| ip.is_ipv6() == ipv6)
}

/// SourceVIP: none on L2Bridge; on Overlay the node IP when a backend is outside the pod
/// network (a remote address in no RemoteSubnetRoute), else `--source-vip`.
fn source_vip(backends: &BTreeSet<Backend>, ctx: &NodeContext) -> Option<IpAddr> {
    if !ctx.overlay {
        return None;
    }
    let outside = backends.iter().any(|b| match b {
        Backend::Remote(ip) => !ctx.remote_subnets.iter().any(|(p, _)| p.contains(ip)),
        _ => false,
    });
    if outside {
        ctx.source_vip
            .and_then(|v| node_ip(ctx, v.is_ipv6()))
            .or(ctx.source_vip)
    } else {
        ctx.source_vip
    }
}

impl Protocol {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

#[cfg(test)]
mod tests {
    //! `internalTrafficPolicy: Local` and terminating endpoints as winkernel's `syncProxyRules`
    //! treats them, on the plan alone (the HNS objects they become: tests/winkernel.rs).

    use super::*;
    use crate::model::SlicePort;

    const HERE: &str = "win-1";

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    fn ctx() -> NodeContext {
        NodeContext {
            hostname: HERE.into(),
            local_endpoint_ips: BTreeSet::from([ip("10.244.1.10"), ip("10.244.1.11")]),
            node_ips: vec![ip("192.168.77.11")],
            dsr_supported: true,
            session_affinity_supported: true,
            ..NodeContext::default()
        }
    }

    /// A Service on 10.96.1.1:80 -> 8080 with NodePort 30080; `ingress` gives it a load
    /// balancer ingress IP (type LoadBalancer).
    fn service(itp_local: bool, etp_local: bool, ingress: bool) -> Service {
        Service {
            key: ServiceKey {
                namespace: "default".into(),
                name: "web".into(),
            },
            service_type: if ingress {
                ServiceType::LoadBalancer
            } else {
                ServiceType::NodePort
            },
            cluster_ips: vec![ip("10.96.1.1")],
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                target_port: TargetPort::Number(8080),
                node_port: Some(30080),
            }],
            external_ips: Vec::new(),
            ingress_ips: if ingress {
                vec![ip("192.168.77.200")]
            } else {
                Vec::new()
            },
            session_affinity: false,
            external_policy_local: etp_local,
            internal_policy_local: itp_local,
            health_check_node_port: None,
            preserve_destination: false,
        }
    }

    /// (ip, node, ready, serving, terminating)
    type Ep<'a> = (&'a str, &'a str, bool, bool, bool);

    fn slice(eps: &[Ep]) -> Slice {
        Slice {
            name: "web-1".into(),
            service: ServiceKey {
                namespace: "default".into(),
                name: "web".into(),
            },
            ipv6: false,
            ports: vec![SlicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            }],
            endpoints: eps
                .iter()
                .map(|(a, node, ready, serving, terminating)| Endpoint {
                    ip: ip(a),
                    node_name: Some(node.to_string()),
                    ready: *ready,
                    serving: *serving,
                    terminating: *terminating,
                })
                .collect(),
        }
    }

    fn plan(svc: &Service, eps: &[Ep]) -> ServicePlan {
        plan_service(svc, &[&slice(eps)], &ctx())
    }

    /// Each role's backends, by address.
    fn roles(p: &ServicePlan) -> Vec<(Role, Vec<IpAddr>)> {
        p.lbs
            .iter()
            .map(|lb| {
                let ips = lb
                    .backends
                    .iter()
                    .filter_map(|b| match b {
                        Backend::Local(a) | Backend::Remote(a) => Some(*a),
                        Backend::Root => None,
                    })
                    .collect();
                (lb.role, ips)
            })
            .collect()
    }

    /// A dual-stack ClusterIP Service (`10.96.1.1`, `fd00:10:96::1`) with a backend of each
    /// family here.
    fn dual_stack_plan(ctx: &NodeContext) -> ServicePlan {
        let mut svc = service(false, false, false);
        svc.service_type = ServiceType::ClusterIp;
        svc.ports[0].node_port = None;
        svc.cluster_ips.push(ip("fd00:10:96::1"));
        let v4 = slice(&[READY_HERE]);
        let mut v6 = slice(&[("fd00:10:244:1::a", HERE, true, true, false)]);
        v6.ipv6 = true;
        plan_service(&svc, &[&v4, &v6], ctx)
    }

    /// IPv6 Services on Overlay only where HNS carries IPv6 there: the Windows builds' HNS
    /// (IPv6DualStack, no LinuxIPv6Overlay) gets the IPv4 half and winkernel's words for the rest;
    /// an HNS reporting LinuxIPv6Overlay gets the IPv6 ClusterIP too, as on L2Bridge.
    #[test]
    fn ipv6_services_on_overlay_only_where_hns_carries_ipv6_there() {
        let ws2025 = SupportedFeatures::for_version(hcn::Version::new(15, 4));
        let lifted = SupportedFeatures {
            ipv6_overlay: true,
            ..ws2025
        };
        assert!(NodeContext::programs_ipv6(&ws2025, false), "L2Bridge");
        assert!(!NodeContext::programs_ipv6(&ws2025, true), "Overlay");
        assert!(NodeContext::programs_ipv6(&lifted, true));
        let old = SupportedFeatures {
            ipv6_dual_stack: false,
            ..lifted
        };
        assert!(!NodeContext::programs_ipv6(&old, true), "no IPv6DualStack");

        let overlay = |features: &SupportedFeatures| NodeContext {
            overlay: true,
            ipv6: NodeContext::programs_ipv6(features, true),
            ..ctx()
        };
        let refused = dual_stack_plan(&overlay(&ws2025));
        let vips: Vec<_> = refused.lbs.iter().map(|lb| lb.frontend.vip).collect();
        assert!(
            vips.iter().all(|v| v.is_some_and(|v| v.is_ipv4())),
            "{vips:?}"
        );
        assert!(
            refused.problems.iter().any(|p| p.contains(
                "Overlay (VXLAN) networks on Windows do not support dual-stack networking today"
            )),
            "{:?}",
            refused.problems
        );
        let carried = dual_stack_plan(&overlay(&lifted));
        assert!(carried.problems.is_empty(), "{:?}", carried.problems);
        let v6 = carried
            .lbs
            .iter()
            .find(|lb| lb.frontend.vip == Some(ip("fd00:10:96::1")))
            .expect("the IPv6 ClusterIP's load balancer");
        assert!(v6.frontend.ipv6);
        assert_eq!(roles(&carried).len(), 2, "one ClusterIP LB per family");
        assert_eq!(
            v6.backends,
            BTreeSet::from([Backend::Local(ip("fd00:10:244:1::a"))]),
            "the IPv6 backend"
        );
    }

    const READY_HERE: Ep = ("10.244.1.10", HERE, true, true, false);
    const READY_THERE: Ep = ("10.244.2.10", "win-2", true, true, false);
    /// Being deleted, still answering (a preStop hook's drain).
    const TERMINATING_THERE: Ep = ("10.244.2.11", "win-2", false, true, true);
    const TERMINATING_HERE: Ep = ("10.244.1.11", HERE, false, true, true);
    /// Being deleted and no longer answering.
    const STOPPED_THERE: Ep = ("10.244.2.12", "win-2", false, false, true);
    /// Failed its readiness probe, not being deleted.
    const UNREADY_THERE: Ep = ("10.244.2.13", "win-2", false, false, false);

    #[test]
    fn internal_traffic_policy_local_balances_the_cluster_ip_over_this_nodes_endpoints_only() {
        let p = plan(&service(true, false, false), &[READY_HERE, READY_THERE]);
        assert_eq!(
            roles(&p),
            [
                (Role::ClusterIp, vec![ip("10.244.1.10")]),
                // The NodePort follows externalTrafficPolicy (Cluster), not the internal one.
                (Role::NodePort, vec![ip("10.244.1.10"), ip("10.244.2.10")]),
            ]
        );
        // The NodePort still needs the remote endpoint.
        assert_eq!(p.remotes.len(), 1);
    }

    #[test]
    fn internal_traffic_policy_local_without_a_local_endpoint_leaves_the_cluster_ip_unbalanced() {
        // Kubernetes' rule: such a Service's traffic from this node is dropped, though
        // other nodes have endpoints; winkernel makes no ClusterIP load balancer.
        let p = plan(&service(true, false, false), &[READY_THERE]);
        assert_eq!(
            roles(&p),
            [(Role::NodePort, vec![ip("10.244.2.10")])],
            "no ClusterIP load balancer"
        );
        let cluster = plan(&service(false, false, false), &[READY_THERE]);
        assert_eq!(
            roles(&cluster)[0],
            (Role::ClusterIp, vec![ip("10.244.2.10")])
        );
    }

    #[test]
    fn both_policies_local_use_no_remote_endpoint() {
        let p = plan(&service(true, true, false), &[READY_HERE, READY_THERE]);
        assert!(p.remotes.is_empty(), "kubernetes#114407: {:?}", p.remotes);
        assert!(roles(&p).iter().all(|(_, ips)| ips == &[ip("10.244.1.10")]));
    }

    #[test]
    fn without_an_ingress_ip_only_ready_endpoints_are_used() {
        // A ClusterIP or NodePort Service whose only endpoints are terminating has no load
        // balancer on Windows: winkernel looks at the terminating state only for a Service
        // with a load balancer ingress IP.
        let p = plan(&service(false, false, false), &[TERMINATING_THERE]);
        assert!(p.lbs.is_empty(), "{:?}", roles(&p));
        let p = plan(
            &service(false, false, false),
            &[READY_THERE, TERMINATING_THERE, STOPPED_THERE, UNREADY_THERE],
        );
        assert!(
            roles(&p).iter().all(|(_, ips)| ips == &[ip("10.244.2.10")]),
            "{:?}",
            roles(&p)
        );
    }

    #[test]
    fn with_an_ingress_ip_serving_terminating_endpoints_are_used_when_all_are_terminating() {
        let p = plan(
            &service(false, false, true),
            &[TERMINATING_THERE, STOPPED_THERE],
        );
        // endpointsAvailableForLB is false: no NodePort load balancer; the ClusterIP and the
        // ingress IP keep the serving one.
        assert_eq!(
            roles(&p),
            [
                (Role::ClusterIp, vec![ip("10.244.2.11")]),
                (Role::Ingress, vec![ip("10.244.2.11")]),
            ]
        );
        // A ready endpoint left: only it, and every load balancer.
        let p = plan(
            &service(false, false, true),
            &[READY_THERE, TERMINATING_THERE],
        );
        assert_eq!(p.lbs.len(), 3);
        assert!(roles(&p).iter().all(|(_, ips)| ips == &[ip("10.244.2.10")]));
    }

    #[test]
    fn an_unready_endpoint_that_is_not_terminating_does_not_count_against_all_terminating() {
        // isAllEndpointsTerminating skips ready=false, terminating=false.
        let p = plan(
            &service(false, false, true),
            &[TERMINATING_THERE, UNREADY_THERE],
        );
        assert_eq!(
            roles(&p),
            [
                (Role::ClusterIp, vec![ip("10.244.2.11")]),
                (Role::Ingress, vec![ip("10.244.2.11")]),
            ]
        );
    }

    #[test]
    fn with_an_ingress_ip_and_no_serving_endpoint_winkernel_filters_none() {
        // someEndpointsServing is false, so no endpoint is skipped: the ClusterIP and the
        // ingress IP are balanced over endpoints that do not serve (winkernel as it is).
        let p = plan(
            &service(false, false, true),
            &[STOPPED_THERE, UNREADY_THERE],
        );
        assert_eq!(
            roles(&p),
            [
                (Role::ClusterIp, vec![ip("10.244.2.12"), ip("10.244.2.13")]),
                (Role::Ingress, vec![ip("10.244.2.12"), ip("10.244.2.13")]),
            ]
        );
    }

    #[test]
    fn external_traffic_policy_local_looks_only_at_this_nodes_endpoints_for_terminating() {
        // Local endpoints all terminating, a remote one ready: for ETP Local (with DSR) the
        // remote one is not looked at, so the local serving-terminating one is used.
        let p = plan(
            &service(false, true, true),
            &[TERMINATING_HERE, READY_THERE],
        );
        assert_eq!(
            roles(&p),
            [
                (Role::ClusterIp, vec![ip("10.244.1.11"), ip("10.244.2.10")]),
                (Role::Ingress, vec![ip("10.244.1.11")]),
            ]
        );
    }

    #[test]
    fn the_health_check_counts_local_ready_endpoints() {
        let p = plan(
            &service(false, true, true),
            &[TERMINATING_HERE, READY_THERE],
        );
        assert_eq!(p.local_endpoints, 0, "a terminating endpoint is not ready");
        let p = plan(&service(false, true, true), &[READY_HERE, READY_THERE]);
        assert_eq!(p.local_endpoints, 1);
    }
}
