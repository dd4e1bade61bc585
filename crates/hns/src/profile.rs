//! Profiles: which Windows Server build hnsd reproduces, with its HNS version and limits.

use std::fmt;
use std::str::FromStr;

use hcn::{SupportedFeatures, Version};

/// A Windows build whose HNS behaviour hnsd reproduces, or `Unrestricted` with every
/// limitation lifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    /// Windows Server 2019 (1809, HNS 9.x with the DSR backport).
    Ws2019,
    /// Windows Server 2022 (HNS 12.x).
    #[default]
    Ws2022,
    /// Windows Server 2025 (HNS 15.4, kubernetes#131466).
    Ws2025,
    /// Every feature, no limitation: not a Windows build.
    Unrestricted,
}

impl Profile {
    pub const ALL: [Profile; 4] = [
        Profile::Ws2019,
        Profile::Ws2022,
        Profile::Ws2025,
        Profile::Unrestricted,
    ];

    /// The HNS version `GET /globals/version` reports.
    pub fn version(self) -> Version {
        match self {
            Profile::Ws2019 => Version::new(9, 5),
            Profile::Ws2022 => Version::new(12, 1),
            Profile::Ws2025 => Version::new(15, 4),
            Profile::Unrestricted => Version::new(16, 0),
        }
    }

    /// The features a client derives from the version.
    pub fn features(self) -> SupportedFeatures {
        SupportedFeatures::for_version(self.version())
    }

    /// The most backends (destinations) one load balancer may have: 64 on Windows Server 2019
    /// and 2022 (kubernetes#98680), later raised to 1024.
    pub fn max_lb_backends(self) -> Option<usize> {
        match self {
            Profile::Ws2019 | Profile::Ws2022 => Some(64),
            Profile::Ws2025 => Some(1024),
            Profile::Unrestricted => None,
        }
    }

    /// Whether HNS implements `HcnModifyLoadBalancer` (hcsshim: HNS >= 15.4).
    pub fn modify_load_balancer(self) -> bool {
        self.version() >= Version::new(15, 4)
    }

    /// Whether the data plane of this build has the documented limitation `l` (each is lifted
    /// under `unrestricted`; see [`Limitation`] for the sources).
    pub fn imposes(self, l: Limitation) -> bool {
        match (self, l) {
            (Profile::Unrestricted, _) => false,
            (Profile::Ws2019, Limitation::ClusterIpFromNode) => true,
            (_, Limitation::ClusterIpFromNode) => false,
            _ => true,
        }
    }

    /// How many DNS suffixes the pods' resolver appends to a single label, when it is the
    /// Windows DNS Client ([`Limitation::WindowsDnsClient`]); `None` when pods resolve as
    /// Linux pods do (glibc with kubelet's search list and ndots). Pods honour only the first
    /// entry of the list (containernetworking/plugins#229, kubernetes#78565).
    pub fn windows_dns_suffixes(self) -> Option<usize> {
        self.imposes(Limitation::WindowsDnsClient).then_some(1)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Ws2019 => "ws2019",
            Profile::Ws2022 => "ws2022",
            Profile::Ws2025 => "ws2025",
            Profile::Unrestricted => "unrestricted",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Profile::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown profile \"{s}\"; use one of ws2019, ws2022, ws2025, unrestricted")
            })
    }
}

/// A documented limitation of the Windows data plane that a profile reproduces: the packet is
/// refused with this reason (a trace names it) instead of being carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Limitation {
    /// ICMP is not transposed through OutboundNAT toward remote networks: ping from a pod to an
    /// external address fails, ping between pods works (Kubernetes Windows networking docs).
    IcmpThroughOutboundNat,
    /// A NodePort is not reachable from the node itself; other nodes and external clients
    /// reach it ("Local NodePort access from the node itself fails").
    NodePortFromNode,
    /// The node cannot reach a Service VIP (ClusterIP): "Nodes cannot reach service IPs" on
    /// older builds (MS troubleshooting doc, 2020). Reproduced on ws2019 only; ws2022 and later
    /// reach ClusterIPs from the host.
    ClusterIpFromNode,
    /// Overlay (VXLAN) networks carry no IPv6 ("Overlay (VXLAN) networks on Windows do not
    /// support dual-stack networking today", kube-proxy winkernel).
    Ipv6OnOverlay,
    /// ExternalTrafficPolicy Local keeps the client address only with DSR: without DSR the load
    /// balancer translates the source, as kube-proxy falls back to when DSR is unavailable.
    LocalTrafficWithoutDsr,
    /// On an Overlay (VXLAN) network the node reaches only its own pods: a packet from the
    /// host to a pod on another node is not encapsulated (flannel's Windows vxlan backend
    /// documents host -> remote pod as unsupported; the `HostRoute` policy covers local pods
    /// only). Pods reach remote pods, and the node reaches Services through the source VIP.
    RemotePodFromNodeOnOverlay,
    /// The pod's resolver is the Windows DNS Client (reference windows-dns.md §A.2): a name
    /// with a dot is queried as it is, once, and never gets a suffix; a single label gets the
    /// first DNS suffix only; a timeout ends the walk. So `web.default` and `web-0.web` do not
    /// resolve where a Linux pod's glibc resolves them (Kubernetes Windows networking docs).
    WindowsDnsClient,
}

impl Limitation {
    pub const ALL: [Limitation; 7] = [
        Limitation::IcmpThroughOutboundNat,
        Limitation::NodePortFromNode,
        Limitation::ClusterIpFromNode,
        Limitation::Ipv6OnOverlay,
        Limitation::LocalTrafficWithoutDsr,
        Limitation::RemotePodFromNodeOnOverlay,
        Limitation::WindowsDnsClient,
    ];

    /// A stable name (used as the rule owner's id in traces).
    pub fn as_str(self) -> &'static str {
        match self {
            Limitation::IcmpThroughOutboundNat => "IcmpThroughOutboundNat",
            Limitation::NodePortFromNode => "NodePortFromNode",
            Limitation::ClusterIpFromNode => "ClusterIpFromNode",
            Limitation::Ipv6OnOverlay => "Ipv6OnOverlay",
            Limitation::LocalTrafficWithoutDsr => "LocalTrafficWithoutDsr",
            Limitation::RemotePodFromNodeOnOverlay => "RemotePodFromNodeOnOverlay",
            Limitation::WindowsDnsClient => "WindowsDnsClient",
        }
    }

    /// The limitation named `s` (as [`Limitation::as_str`] writes it).
    pub fn from_name(s: &str) -> Option<Limitation> {
        Limitation::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// What a trace says when a packet meets this limitation under `profile`.
    pub fn message(self, profile: Profile) -> String {
        match self {
            Limitation::IcmpThroughOutboundNat => format!(
                "not transposed: ICMP through OutboundNAT to a remote network is not supported on {profile}"
            ),
            Limitation::NodePortFromNode => format!(
                "not load balanced: NodePort access from the node itself is not supported on {profile} (other nodes and external clients work)"
            ),
            Limitation::ClusterIpFromNode => {
                format!("not load balanced: the node cannot reach a Service VIP on {profile}")
            }
            Limitation::Ipv6OnOverlay => {
                format!("not forwarded: Overlay (VXLAN) networks carry no IPv6 on {profile}")
            }
            Limitation::LocalTrafficWithoutDsr => format!(
                "source translated: without DSR the client address is not preserved on {profile} (ExternalTrafficPolicy Local needs DSR)"
            ),
            Limitation::RemotePodFromNodeOnOverlay => format!(
                "not encapsulated: on an Overlay network the node reaches only its own pods on {profile} (pods on other nodes are reached from pods)"
            ),
            Limitation::WindowsDnsClient => format!(
                "not resolved: the Windows DNS Client on {profile} queries a name with a dot as it is and appends no suffix (a single label gets the first suffix only)"
            ),
        }
    }
}

impl fmt::Display for Limitation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
