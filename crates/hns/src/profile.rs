//! Profiles: which Windows Server build hnsd reproduces. One table, [`PROFILES`], holds all a
//! profile is: its HNS version (the features follow from it, as clients derive them), its
//! backend limit per load balancer and its documented limitations. The profile table of
//! docs/profiles.md is rendered from it ([`markdown_table`]).

use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;

use hcn::{SupportedFeatures, Version};

/// A Windows build whose HNS behaviour hnsd reproduces, or `Unrestricted` with every
/// limitation lifted. What each one is stands in [`PROFILES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    /// Windows Server 2019 (1809, HNS 9.x with the DSR backport).
    Ws2019,
    /// Windows Server 2022 (HNS 12.x).
    Ws2022,
    /// Windows Server 2025 (HNS 15.4): today's Windows node, and from Kubernetes 1.37 the only
    /// one AKS offers (Azure/AKS#5904).
    #[default]
    Ws2025,
    /// Every feature, no limitation: not a Windows build.
    Unrestricted,
}

/// Everything one profile reproduces. The features are not listed: HNS reports only its
/// version, and clients derive the features from it ([`SupportedFeatures::for_version`]), so
/// hnsd does the same.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub profile: Profile,
    /// The name `--profile` and topology files take.
    pub name: &'static str,
    /// The Windows build, in words.
    pub build: &'static str,
    /// What `GET /globals/version` reports.
    pub hns: Version,
    /// The most backends (destinations) one load balancer may have; `None` for no limit.
    pub max_lb_backends: Option<usize>,
    /// The documented limitations of this build's data plane (see [`Limitation`]).
    pub limitations: &'static [Limitation],
}

/// The profiles, in [`Profile`]'s order. Sources: the HNS versions from the builds' HNS
/// (WS2025's 15.4: kubernetes#131466); the backend limit 64 on WS2019/WS2022
/// (kubernetes#98680) and 1024 since ("More than 1024 backend pods ... for a single Service"
/// is unsupported, Kubernetes "Networking on Windows" docs, 2026); the limitations from the
/// same docs, which still list NodePort from the node itself, IPv6 on overlay, Local traffic
/// policy without DSR and outbound ICMP through NAT for WS2025 (reference windows-2026.md,
/// facts 2 and 4); the ACL behaviours from Microsoft's and Calico's words (reference
/// windows-network-policy.md, takeaways 2 and 4).
pub const PROFILES: [Spec; 4] = {
    use Limitation::*;
    [
        Spec {
            profile: Profile::Ws2019,
            name: "ws2019",
            build: "Windows Server 2019",
            hns: Version::new(9, 5),
            max_lb_backends: Some(64),
            limitations: &[
                IcmpThroughOutboundNat,
                NodePortFromNode,
                ClusterIpFromNode,
                Ipv6OnOverlay,
                LocalTrafficWithoutDsr,
                RemotePodFromNodeOnOverlay,
                WindowsDnsClient,
                AclUpdateResetsConnections,
            ],
        },
        Spec {
            profile: Profile::Ws2022,
            name: "ws2022",
            build: "Windows Server 2022",
            hns: Version::new(12, 1),
            max_lb_backends: Some(64),
            limitations: &[
                IcmpThroughOutboundNat,
                NodePortFromNode,
                Ipv6OnOverlay,
                LocalTrafficWithoutDsr,
                RemotePodFromNodeOnOverlay,
                WindowsDnsClient,
                AclUpdateResetsConnections,
            ],
        },
        Spec {
            profile: Profile::Ws2025,
            name: "ws2025",
            build: "Windows Server 2025",
            hns: Version::new(15, 4),
            max_lb_backends: Some(1024),
            limitations: &[
                IcmpThroughOutboundNat,
                NodePortFromNode,
                Ipv6OnOverlay,
                LocalTrafficWithoutDsr,
                RemotePodFromNodeOnOverlay,
                WindowsDnsClient,
                AclUpdateResetsConnections,
                AclDefaultDeny,
            ],
        },
        Spec {
            profile: Profile::Unrestricted,
            name: "unrestricted",
            build: "none (Linux at full strength)",
            hns: Version::new(16, 0),
            max_lb_backends: None,
            limitations: &[],
        },
    ]
};

// `Profile::spec` indexes the table by the variant: each row must sit at its variant's place.
const _: () = {
    let mut i = 0;
    while i < PROFILES.len() {
        assert!(
            PROFILES[i].profile as usize == i,
            "PROFILES is out of Profile's order"
        );
        i += 1;
    }
};

impl Profile {
    pub const ALL: [Profile; 4] = [
        Profile::Ws2019,
        Profile::Ws2022,
        Profile::Ws2025,
        Profile::Unrestricted,
    ];

    /// This profile's row of [`PROFILES`].
    pub fn spec(self) -> &'static Spec {
        &PROFILES[self as usize]
    }

    /// The HNS version `GET /globals/version` reports.
    pub fn version(self) -> Version {
        self.spec().hns
    }

    /// The features a client derives from the version (hnslib's ranges): what
    /// `GET /globals/features` reports and what hnsd accepts (session affinity, IPv6,
    /// `HcnModifyLoadBalancer`, ...); and `LinuxIPv6Overlay` where the profile lifts
    /// [`Limitation::Ipv6OnOverlay`] (no version has it: see [`SupportedFeatures::ipv6_overlay`]).
    pub fn features(self) -> SupportedFeatures {
        SupportedFeatures {
            ipv6_overlay: !self.imposes(Limitation::Ipv6OnOverlay),
            ..SupportedFeatures::for_version(self.version())
        }
    }

    /// The most backends (destinations) one load balancer may have; `None` for no limit.
    pub fn max_lb_backends(self) -> Option<usize> {
        self.spec().max_lb_backends
    }

    /// Whether the data plane of this build has the documented limitation `l` (each is lifted
    /// under `unrestricted`; see [`Limitation`] for the sources).
    pub fn imposes(self, l: Limitation) -> bool {
        self.spec().limitations.contains(&l)
    }

    /// How many DNS suffixes the pods' resolver appends to a single label, when it is the
    /// Windows DNS Client ([`Limitation::WindowsDnsClient`]); `None` when pods resolve as
    /// Linux pods do (glibc with kubelet's search list and ndots). Pods honour only the first
    /// entry of the list (containernetworking/plugins#229, kubernetes#78565).
    pub fn windows_dns_suffixes(self) -> Option<usize> {
        self.imposes(Limitation::WindowsDnsClient).then_some(1)
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
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
                let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
                format!("unknown profile \"{s}\"; use one of {}", names.join(", "))
            })
    }
}

/// [`PROFILES`] as the Markdown table docs/profiles.md shows: one column per profile, one row
/// per version, limit, feature and limitation ("yes" under a limitation: the build has it).
pub fn markdown_table() -> String {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let mut rows: Vec<(String, Vec<String>)> = vec![
        ("Windows build".into(), cells(|s| s.build.into())),
        (
            "HNS version (`/globals/version`)".into(),
            cells(|s| format!("{}.{}", s.hns.major, s.hns.minor)),
        ),
        (
            "backends per load balancer".into(),
            cells(|s| {
                s.max_lb_backends
                    .map_or("no limit".into(), |n| n.to_string())
            }),
        ),
    ];
    let features: [(&str, Gate); 4] = [
        ("ModifyLoadBalancer (HNS 15.5-15.x or 16.0+)", |f| {
            f.modify_loadbalancer
        }),
        ("session affinity", |f| f.session_affinity),
        ("DSR", |f| f.dsr),
        ("dual-stack (IPv6)", |f| f.ipv6_dual_stack),
    ];
    for (label, has) in features {
        rows.push((label.into(), cells(|s| yes_no(has(&s.profile.features())))));
    }
    for l in Limitation::ALL {
        rows.push((
            format!("`{l}`: {}", l.summary()),
            cells(|s| yes_no(s.profile.imposes(l))),
        ));
    }
    let mut out = String::from("| |");
    for s in &PROFILES {
        let default = if s.profile == Profile::default() {
            " (default)"
        } else {
            ""
        };
        let _ = write!(out, " `{}`{default} |", s.name);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(PROFILES.len()));
    out.push('\n');
    for (label, values) in rows {
        let _ = writeln!(out, "| {label} | {} |", values.join(" | "));
    }
    out
}

/// Whether a client may use one feature, as it reads [`SupportedFeatures`].
type Gate = fn(&SupportedFeatures) -> bool;

/// One cell per profile, in [`PROFILES`]' order.
fn cells(cell: impl Fn(&Spec) -> String) -> Vec<String> {
    PROFILES.iter().map(cell).collect()
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
    /// Applying an endpoint's ACLs again resets its live TCP connections, even when the rules
    /// did not change: "Microsoft has confirmed this is a HNS issue" (Calico's Windows
    /// limitations; calico#10199 saw RSTs when only a pod label changed). Lifted, the flows are
    /// re-evaluated instead of flushed, so a connection the new rules still allow carries on.
    AclUpdateResetsConnections,
    /// Any ACL on an endpoint switches it to default-deny: what no ACL allows is blocked, so a
    /// lone Block blocks everything ("by design", Windows Server 2025 after its April 2026
    /// updates, microsoft/Windows-Containers#616). Without it, what no ACL names is allowed.
    AclDefaultDeny,
}

impl Limitation {
    pub const ALL: [Limitation; 9] = [
        Limitation::IcmpThroughOutboundNat,
        Limitation::NodePortFromNode,
        Limitation::ClusterIpFromNode,
        Limitation::Ipv6OnOverlay,
        Limitation::LocalTrafficWithoutDsr,
        Limitation::RemotePodFromNodeOnOverlay,
        Limitation::WindowsDnsClient,
        Limitation::AclUpdateResetsConnections,
        Limitation::AclDefaultDeny,
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
            Limitation::AclUpdateResetsConnections => "AclUpdateResetsConnections",
            Limitation::AclDefaultDeny => "AclDefaultDeny",
        }
    }

    /// What the limitation takes away, in a few words (the profile table of docs/profiles.md).
    pub fn summary(self) -> &'static str {
        match self {
            Limitation::IcmpThroughOutboundNat => "no ICMP through OutboundNAT to remote networks",
            Limitation::NodePortFromNode => "no NodePort from the node itself",
            Limitation::ClusterIpFromNode => "no Service VIP from the node",
            Limitation::Ipv6OnOverlay => "no IPv6 on Overlay (VXLAN)",
            Limitation::LocalTrafficWithoutDsr => {
                "ExternalTrafficPolicy Local keeps the client only with DSR"
            }
            Limitation::RemotePodFromNodeOnOverlay => "no node -> pod on another node on Overlay",
            Limitation::WindowsDnsClient => "pods resolve by the Windows DNS Client's rules",
            Limitation::AclUpdateResetsConnections => {
                "applying an endpoint's ACLs resets its TCP connections"
            }
            Limitation::AclDefaultDeny => "any ACL makes the endpoint default-deny",
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
            Limitation::AclUpdateResetsConnections => format!(
                "reset: the endpoint's ACLs were applied again, which resets its TCP connections on {profile} even when the rules did not change"
            ),
            Limitation::AclDefaultDeny => format!(
                "blocked by default: no ACL allows it, and on {profile} any ACL on an endpoint makes it default-deny (add an Allow with a higher Priority number to allow the rest)"
            ),
        }
    }
}

impl fmt::Display for Limitation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Limitation::*;

    /// The features a client gates on, by hnslib's names, as `profile` reports them.
    fn gates(profile: Profile) -> Vec<(&'static str, bool)> {
        let f = profile.features();
        vec![
            ("V2ApiSupport", f.api.v2),
            ("DSR", f.dsr),
            ("IPv6DualStack", f.ipv6_dual_stack),
            ("SessionAffinity", f.session_affinity),
            ("L4Proxy", f.l4_proxy),
            ("SetPolicy", f.set_policy),
            ("TierAcl", f.tier_acl),
            ("NetworkACL", f.network_acl),
            ("DisableHostPort", f.disable_host_port),
            ("Accelnet", f.accelnet),
            ("ModifyLoadbalancer", f.modify_loadbalancer),
            ("LinuxIPv6Overlay", f.ipv6_overlay),
        ]
    }

    /// The names of the gates that are on.
    fn on(profile: Profile) -> Vec<&'static str> {
        gates(profile)
            .into_iter()
            .filter_map(|(name, on)| on.then_some(name))
            .collect()
    }

    #[test]
    fn ws2019_is_hns_9_5_with_dsr_and_64_backends() {
        let p = Profile::Ws2019;
        assert_eq!(p.version(), Version::new(9, 5));
        assert_eq!(on(p), ["V2ApiSupport", "DSR", "L4Proxy"]);
        assert_eq!(p.max_lb_backends(), Some(64));
        assert!(
            Limitation::ALL
                .iter()
                .all(|l| p.imposes(*l) != (*l == AclDefaultDeny)),
            "all but the 2026 default-deny"
        );
    }

    #[test]
    fn ws2022_is_hns_12_1_with_affinity_and_dual_stack_and_64_backends() {
        let p = Profile::Ws2022;
        assert_eq!(p.version(), Version::new(12, 1));
        assert_eq!(
            on(p),
            [
                "V2ApiSupport",
                "DSR",
                "IPv6DualStack",
                "SessionAffinity",
                "L4Proxy"
            ]
        );
        assert_eq!(p.max_lb_backends(), Some(64));
        assert!(!p.imposes(ClusterIpFromNode));
        assert!(p.imposes(AclUpdateResetsConnections) && !p.imposes(AclDefaultDeny));
    }

    /// WS2025's HNS 15.4 has everything up to Accelnet but not ModifyLoadbalancer, which
    /// hnslib gates at 15.5 (kubernetes#131466); the docs' limitations stay.
    #[test]
    fn ws2025_is_hns_15_4_without_modify_load_balancer_and_1024_backends() {
        let p = Profile::Ws2025;
        assert_eq!(p.version(), Version::new(15, 4));
        assert_eq!(
            on(p),
            [
                "V2ApiSupport",
                "DSR",
                "IPv6DualStack",
                "SessionAffinity",
                "L4Proxy",
                "SetPolicy",
                "TierAcl",
                "NetworkACL",
                "DisableHostPort",
                "Accelnet",
            ]
        );
        assert!(!p.features().modify_loadbalancer);
        assert_eq!(p.max_lb_backends(), Some(1024));
        for l in [
            NodePortFromNode,
            Ipv6OnOverlay,
            LocalTrafficWithoutDsr,
            IcmpThroughOutboundNat,
        ] {
            assert!(p.imposes(l), "the docs still list {l}");
        }
        assert!(!p.imposes(ClusterIpFromNode));
        assert!(p.imposes(AclDefaultDeny) && p.imposes(AclUpdateResetsConnections));
    }

    #[test]
    fn unrestricted_is_hns_16_0_with_every_feature_and_no_limit() {
        let p = Profile::Unrestricted;
        assert_eq!(p.version(), Version::new(16, 0));
        assert!(gates(p).iter().all(|(_, on)| *on), "{:?}", gates(p));
        assert_eq!(p.max_lb_backends(), None);
        assert!(Limitation::ALL.iter().all(|l| !p.imposes(*l)));
        assert_eq!(p.windows_dns_suffixes(), None);
    }

    #[test]
    fn ws2025_is_the_default() {
        assert_eq!(Profile::default(), Profile::Ws2025);
        assert!(markdown_table().contains("`ws2025` (default)"));
    }

    #[test]
    fn every_row_sits_at_its_profile_and_names_parse_back() {
        for (i, p) in Profile::ALL.into_iter().enumerate() {
            assert_eq!(PROFILES[i].profile, p);
            assert_eq!(p.as_str().to_uppercase().parse::<Profile>(), Ok(p));
        }
        let e = "ws2099".parse::<Profile>().unwrap_err();
        assert!(
            e.ends_with("use one of ws2019, ws2022, ws2025, unrestricted"),
            "{e}"
        );
    }

    #[test]
    fn the_markdown_table_has_a_column_per_profile_and_a_row_per_limitation() {
        let t = markdown_table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + 3 + 4 + Limitation::ALL.len());
        let rows = lines.iter().enumerate().filter(|(i, _)| *i != 1);
        assert!(
            rows.map(|(_, l)| l.matches(" |").count())
                .all(|n| n == 1 + PROFILES.len())
        );
        assert!(
            t.contains("| backends per load balancer | 64 | 64 | 1024 | no limit |"),
            "{t}"
        );
        assert!(
            t.contains("| ModifyLoadBalancer (HNS 15.5-15.x or 16.0+) | no | no | no | yes |"),
            "{t}"
        );
    }
}
