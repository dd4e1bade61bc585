//! What compiling one HNS object yields before it touches the switch: rule sets with the ports
//! they go to, the addresses the switch answers for, provider addresses, host claims and
//! notices. Keeping this per object is what makes the compiler incremental: a changed object's
//! old rules are removed by owner and its new ones installed, nothing else is touched.

use std::net::IpAddr;

use hcn::Guid;
use vfp::layer::DefaultAction;
use vfp::wire::MacAddr;
use vfp::{Origin, Owner, PortId, Rule};

use hns::profile::Limitation;

/// Which compiled object: the node itself, or one HNS object. The order is the order a batch is
/// compiled in (networks before their endpoints, endpoints before the load balancers naming
/// them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Rules that come from the node's facts (its routes), not from an HNS object.
    Node,
    /// A HostComputeNetwork.
    Network(Guid),
    /// A HostComputeEndpoint.
    Endpoint(Guid),
    /// A HostComputeLoadBalancer.
    LoadBalancer(Guid),
    /// A HostComputeRoute (SDN route).
    Route(Guid),
}

/// Which ports a rule set goes to; resolved when it is installed, and again for every port
/// created later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The port of one local endpoint.
    Endpoint(Guid),
    /// Every pod vNIC of a network.
    Pods(Guid),
    /// Every pod vNIC on the switch.
    AllPods,
    /// Every host vNIC: the management vNIC, host-attached endpoints, NAT gateways.
    HostPorts,
    /// The uplink (frames from the physical network).
    Uplink,
}

/// One rule set and where it goes. Within one compiled object, no two placements reach the
/// same layer of the same port with the same owner (each would replace the other).
#[derive(Clone, Debug)]
pub struct Placement {
    pub target: Target,
    pub layer: &'static str,
    /// The layer's group; `None` for its first.
    pub group: Option<String>,
    pub origin: Origin,
    pub rules: Vec<Rule>,
}

/// What a layer does with the packets no rule matches, on the target's ports, in both
/// directions (an endpoint with ACLs under default-deny).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerDefault {
    pub target: Target,
    pub layer: &'static str,
    pub action: DefaultAction,
}

/// A frontend the host sends into the switch instead of to itself: a NodePort with
/// `LocalRoutedVIP`, so that the host's own connections to it are load balanced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostClaim {
    /// IP protocol number.
    pub protocol: u8,
    /// The node address.
    pub address: IpAddr,
    /// The frontend port.
    pub port: u16,
}

/// Something the compiler wants known about an object: a limitation applied to it, or a part
/// it could not compile (an unresolvable provider address, an unknown mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The object, as a trace would name it (`LoadBalancer <guid>`).
    pub owner: String,
    /// What happened and why.
    pub message: String,
    /// The limitation, when that is what it is.
    pub limitation: Option<Limitation>,
}

/// What one object compiled to, and where its rules were put.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    pub placements: Vec<Placement>,
    /// Addresses the switch answers ARP / neighbour solicitations for, with the MAC.
    pub owned: Vec<(IpAddr, MacAddr)>,
    /// Provider addresses of this host (VXLAN to them is decapsulated here).
    pub providers: Vec<IpAddr>,
    pub claims: Vec<HostClaim>,
    pub notices: Vec<Notice>,
    /// Layer defaults other than allow; put back to allow when the object goes.
    pub defaults: Vec<LayerDefault>,
    /// Where the placements went: (port, layer, owner), to remove them by owner.
    pub(crate) installed: Vec<(PortId, &'static str, Owner)>,
}

impl Compiled {
    /// Adds a placement.
    pub fn place(&mut self, target: Target, layer: &'static str, origin: Origin, rules: Vec<Rule>) {
        if !rules.is_empty() {
            self.placements.push(Placement {
                target,
                layer,
                group: None,
                origin,
                rules,
            });
        }
    }

    /// Adds a placement into a named group of the layer (made when first used).
    pub fn place_in_group(
        &mut self,
        target: Target,
        layer: &'static str,
        group: impl Into<String>,
        origin: Origin,
        rules: Vec<Rule>,
    ) {
        if !rules.is_empty() {
            self.placements.push(Placement {
                target,
                layer,
                group: Some(group.into()),
                origin,
                rules,
            });
        }
    }

    /// Adds a notice about `owner`.
    pub fn notice(&mut self, owner: &Owner, message: impl Into<String>) {
        self.notices.push(Notice {
            owner: owner.to_string(),
            message: message.into(),
            limitation: None,
        });
    }
}

/// Where a port sits, to decide which targets reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PortPlace {
    /// The endpoint (or NAT gateway network) the port is for; `None` for the management
    /// vNIC and the uplink.
    pub object: Option<Guid>,
    /// The network it is on.
    pub network: Option<Guid>,
    pub role: Role,
}

/// What a port is, as targets see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Pod,
    Host,
    Uplink,
}

impl Target {
    /// True when a port at `place` is one of the target's ports.
    pub(crate) fn reaches(&self, place: &PortPlace) -> bool {
        match self {
            Target::Endpoint(g) => place.object == Some(*g) && place.role != Role::Uplink,
            Target::Pods(net) => place.role == Role::Pod && place.network == Some(*net),
            Target::AllPods => place.role == Role::Pod,
            Target::HostPorts => place.role == Role::Host,
            Target::Uplink => place.role == Role::Uplink,
        }
    }
}
