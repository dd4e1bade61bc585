//! What the doctor reports: a [`Finding`] per problem, of a [`ProblemKind`], naming the objects
//! involved, the flows it breaks and the fix; and, when the fix is safe to make without a
//! person, the [`Repair`] `--fix` makes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Every problem the doctor knows, with the Windows tool that looks for it (if any).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// A remote endpoint holds the IP of a pod of this node (kubernetes#138000).
    RemoteEndpointIsLocalPod,
    /// Two endpoints hold one IP.
    DuplicateEndpointIp,
    /// A pod endpoint whose IP no pod of this node has.
    EndpointWithoutPod,
    /// A pod of this node with no endpoint.
    PodWithoutEndpoint,
    /// A load balancer no Service asks for.
    LoadBalancerWithoutService,
    /// A Service port with ready endpoints and no load balancer.
    ServicePortWithoutLoadBalancer,
    /// A load balancer whose backends are not the Service's ready endpoints.
    LoadBalancerBackendsDiffer,
    /// One frontend (VIP, protocol, port) held by two load balancers.
    FrontendHeldTwice,
    /// An HNS object none of whose rules are in the switch.
    RulesMissing,
    /// Switch rules whose owner is no HNS object.
    RulesWithoutOwner,
    /// An Overlay remote subnet without its encapsulation rule.
    RemoteSubnetWithoutEncap,
    /// A pod endpoint without its TAP in the pod's namespace.
    EndpointWithoutTap,
    /// A TAP in a pod's namespace that no endpoint owns.
    TapWithoutEndpoint,
    /// An hnsd network namespace that no HostComputeNamespace owns.
    LeakedNamespace,
    /// An OutBoundNAT exception covering a destination outside the cluster.
    ExceptionCoversExternal,
    /// OutBoundNAT exceptions that miss the cluster or Service CIDR.
    ExceptionsMissClusterCidr,
    /// A pod's resolv.conf that differs from its endpoint's DNS settings.
    PodDnsDiffers,
    /// An SNAT pool close to running out of ports.
    SnatPortPressure,
    /// WS2022: NodePort on Overlay with externalTrafficPolicy Cluster.
    #[serde(rename = "ws2022-nodeport-on-overlay")]
    Ws2022NodePortOnOverlay,
    /// WS2022: pod -> pod on L2Bridge with DSR load balancers.
    #[serde(rename = "ws2022-l2bridge-dsr")]
    Ws2022L2BridgeDsr,
    /// More backends behind a Service than the profile's load balancers take.
    BackendLimit,
    /// A pod whose exec probe pings an address outside the cluster, on a build that does not
    /// carry ICMP through OutBoundNAT.
    IcmpProbeThroughOutboundNat,
    /// Another node's flannel lease without its route on this node (host-gw: a kernel route
    /// via its public IP; vxlan: a RemoteSubnetRoute on the network).
    FlannelRouteMissing,
    /// This node's network or subnet.env not on the subnet of its own flannel lease.
    FlannelSubnetDiffers,
    /// The cluster DNS answers a Service's name with other addresses than its ClusterIPs, or
    /// not at all.
    ClusterDnsAnswerDiffers,
    /// A pod's resolv.conf that does not point at the cluster DNS Service.
    PodResolverNotClusterDns,
    /// An ACL the node's NetworkPolicy agent plans for an endpoint that the endpoint lacks.
    PolicyAclMissing,
    /// An ACL on an endpoint that the agent does not plan from the NetworkPolicies.
    PolicyAclExtra,
    /// An ACL names a network set (`SetPolicy`) the network does not hold.
    AclSetMissing,
    /// An endpoint that a default-deny build blocks in a direction no ACL allows and no
    /// NetworkPolicy isolates.
    AclDefaultDenyWithoutAllow,
    /// A NetworkPolicy whose ACLs one node holds and another lacks entirely.
    PolicyNotOnEveryNode,
}

impl ProblemKind {
    /// Every kind, in report order.
    pub const ALL: [ProblemKind; 31] = [
        ProblemKind::RemoteEndpointIsLocalPod,
        ProblemKind::DuplicateEndpointIp,
        ProblemKind::EndpointWithoutPod,
        ProblemKind::PodWithoutEndpoint,
        ProblemKind::LoadBalancerWithoutService,
        ProblemKind::ServicePortWithoutLoadBalancer,
        ProblemKind::LoadBalancerBackendsDiffer,
        ProblemKind::FrontendHeldTwice,
        ProblemKind::RulesMissing,
        ProblemKind::RulesWithoutOwner,
        ProblemKind::RemoteSubnetWithoutEncap,
        ProblemKind::EndpointWithoutTap,
        ProblemKind::TapWithoutEndpoint,
        ProblemKind::LeakedNamespace,
        ProblemKind::ExceptionCoversExternal,
        ProblemKind::ExceptionsMissClusterCidr,
        ProblemKind::PodDnsDiffers,
        ProblemKind::SnatPortPressure,
        ProblemKind::Ws2022NodePortOnOverlay,
        ProblemKind::Ws2022L2BridgeDsr,
        ProblemKind::BackendLimit,
        ProblemKind::IcmpProbeThroughOutboundNat,
        ProblemKind::FlannelRouteMissing,
        ProblemKind::FlannelSubnetDiffers,
        ProblemKind::ClusterDnsAnswerDiffers,
        ProblemKind::PodResolverNotClusterDns,
        ProblemKind::PolicyAclMissing,
        ProblemKind::PolicyAclExtra,
        ProblemKind::AclSetMissing,
        ProblemKind::AclDefaultDenyWithoutAllow,
        ProblemKind::PolicyNotOnEveryNode,
    ];

    /// The kebab-case name (JSON, metrics' `kind` label).
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::RemoteEndpointIsLocalPod => "remote-endpoint-is-local-pod",
            ProblemKind::DuplicateEndpointIp => "duplicate-endpoint-ip",
            ProblemKind::EndpointWithoutPod => "endpoint-without-pod",
            ProblemKind::PodWithoutEndpoint => "pod-without-endpoint",
            ProblemKind::LoadBalancerWithoutService => "load-balancer-without-service",
            ProblemKind::ServicePortWithoutLoadBalancer => "service-port-without-load-balancer",
            ProblemKind::LoadBalancerBackendsDiffer => "load-balancer-backends-differ",
            ProblemKind::FrontendHeldTwice => "frontend-held-twice",
            ProblemKind::RulesMissing => "rules-missing",
            ProblemKind::RulesWithoutOwner => "rules-without-owner",
            ProblemKind::RemoteSubnetWithoutEncap => "remote-subnet-without-encap",
            ProblemKind::EndpointWithoutTap => "endpoint-without-tap",
            ProblemKind::TapWithoutEndpoint => "tap-without-endpoint",
            ProblemKind::LeakedNamespace => "leaked-namespace",
            ProblemKind::ExceptionCoversExternal => "exception-covers-external",
            ProblemKind::ExceptionsMissClusterCidr => "exceptions-miss-cluster-cidr",
            ProblemKind::PodDnsDiffers => "pod-dns-differs",
            ProblemKind::SnatPortPressure => "snat-port-pressure",
            ProblemKind::Ws2022NodePortOnOverlay => "ws2022-nodeport-on-overlay",
            ProblemKind::Ws2022L2BridgeDsr => "ws2022-l2bridge-dsr",
            ProblemKind::BackendLimit => "backend-limit",
            ProblemKind::IcmpProbeThroughOutboundNat => "icmp-probe-through-outbound-nat",
            ProblemKind::FlannelRouteMissing => "flannel-route-missing",
            ProblemKind::FlannelSubnetDiffers => "flannel-subnet-differs",
            ProblemKind::ClusterDnsAnswerDiffers => "cluster-dns-answer-differs",
            ProblemKind::PodResolverNotClusterDns => "pod-resolver-not-cluster-dns",
            ProblemKind::PolicyAclMissing => "policy-acl-missing",
            ProblemKind::PolicyAclExtra => "policy-acl-extra",
            ProblemKind::AclSetMissing => "acl-set-missing",
            ProblemKind::AclDefaultDenyWithoutAllow => "acl-default-deny-without-allow",
            ProblemKind::PolicyNotOnEveryNode => "policy-not-on-every-node",
        }
    }

    /// The Windows tool or script that looks for this problem, if one does.
    pub fn windows_tool(self) -> &'static str {
        match self {
            ProblemKind::RemoteEndpointIsLocalPod | ProblemKind::DuplicateEndpointIp => {
                "wcnscripts DetectDuplicateIpAddrs.ps1"
            }
            ProblemKind::LoadBalancerWithoutService | ProblemKind::FrontendHeldTwice => {
                "wcnscripts cleanup-stale-lb-rules.ps1"
            }
            ProblemKind::RulesMissing
            | ProblemKind::RulesWithoutOwner
            | ProblemKind::RemoteSubnetWithoutEncap => {
                "wcnscripts findDegradedPolicy.ps1 (vfpctrl /list-rule by hand)"
            }
            ProblemKind::SnatPortPressure => "wcnscripts checkPortExhaustion.ps1",
            ProblemKind::LeakedNamespace => "none (hnsdiag list namespaces by hand)",
            ProblemKind::PodDnsDiffers | ProblemKind::PodResolverNotClusterDns => {
                "none (Get-DnsClientServerAddress in the pod)"
            }
            ProblemKind::ClusterDnsAnswerDiffers => {
                "none (Resolve-DnsName in a pod against kubectl get svc, by hand)"
            }
            ProblemKind::FlannelRouteMissing => {
                "none (Get-NetRoute / Get-HnsPolicyList against the flannel leases by hand)"
            }
            ProblemKind::IcmpProbeThroughOutboundNat => {
                "none (kubectl describe pod: the probe's failures, by hand)"
            }
            ProblemKind::PolicyAclMissing
            | ProblemKind::PolicyAclExtra
            | ProblemKind::AclSetMissing
            | ProblemKind::AclDefaultDenyWithoutAllow
            | ProblemKind::PolicyNotOnEveryNode => {
                "none (Get-HnsEndpoint policies and vfpctrl /layer ACL_ENDPOINT_LAYER against kubectl get networkpolicy, by hand)"
            }
            ProblemKind::FlannelSubnetDiffers => {
                "none (C:\\run\\flannel\\subnet.env and Get-HnsNetwork by hand)"
            }
            _ => "none (collectlogs.ps1 output read by hand)",
        }
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An object a finding involves.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectRef {
    /// `Endpoint`, `LoadBalancer`, `Network`, `Namespace`, `Service`, `Pod`, `Netns`, `Tap`,
    /// `Rule`, `SnatPool`.
    pub kind: String,
    /// Its ID or `namespace/name`.
    pub id: String,
    /// What identifies it to a person (name, IP, frontend).
    pub detail: String,
}

impl ObjectRef {
    pub fn new(kind: &str, id: impl Into<String>, detail: impl Into<String>) -> ObjectRef {
        ObjectRef {
            kind: kind.to_string(),
            id: id.into(),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.id)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// A change `--fix` can make without a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Repair {
    /// Delete an HNS endpoint (a stale remote endpoint).
    DeleteEndpoint { id: String, ip: String },
    /// Have kube-proxy re-read HNS and program what is missing.
    ResyncProxy,
    /// Delete a network namespace no HostComputeNamespace owns.
    DeleteNetns { name: String },
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Repair::DeleteEndpoint { id, ip } => write!(f, "delete HNS endpoint {id} ({ip})"),
            Repair::ResyncProxy => f.write_str("resync kube-proxy against HNS"),
            Repair::DeleteNetns { name } => write!(f, "delete network namespace {name}"),
        }
    }
}

/// One problem on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: ProblemKind,
    pub node: String,
    /// What is wrong, in one sentence.
    pub summary: String,
    pub objects: Vec<ObjectRef>,
    /// Which flows it breaks, and how.
    pub breaks: String,
    /// How to fix it.
    pub fix: String,
    /// Where the problem is documented, for known problems of a Windows build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What `--fix` would do, when that is safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}
