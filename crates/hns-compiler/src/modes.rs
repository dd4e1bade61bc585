//! The network modes (HNS network `Type`) and what each does to a pod's packets:
//!
//! | mode | switch | pod packets on the wire |
//! |---|---|---|
//! | L2Bridge | external | container MAC rewritten to the host's out, back in; gateway answered by the switch; off-subnet via the host's routes |
//! | L2Tunnel | external | as L2Bridge, and every packet, even to a local pod, goes to the uplink's router and comes back |
//! | Overlay | external | VXLAN with the subnet's VSID as VNI toward the remote provider address |
//! | Transparent | external | the container's own MAC and address, untouched |
//! | NAT | internal | SNAT to the node's address out, `PortMapping` in; the host vNIC is the gateway |
//! | ICS, Internal | internal | local only: pods and the host's gateway vNIC |
//! | Private | internal | local only: pods |

use hcn::NetworkType;
use vfp::wire::MacAddr;
use vfp::{Action, Conditions, Direction, Rule};

/// What a network type does to packets (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    L2Bridge,
    L2Tunnel,
    Overlay,
    Transparent,
    Nat,
    Ics,
    Internal,
    Private,
}

impl Mode {
    /// The mode of a network type; `None` for types this switch does not implement
    /// (`Layered`, `Infiniband`).
    pub fn of(t: NetworkType) -> Option<Mode> {
        Some(match t {
            NetworkType::L2Bridge => Mode::L2Bridge,
            NetworkType::L2Tunnel => Mode::L2Tunnel,
            NetworkType::Overlay => Mode::Overlay,
            NetworkType::Transparent => Mode::Transparent,
            NetworkType::Nat => Mode::Nat,
            NetworkType::Ics => Mode::Ics,
            NetworkType::Internal => Mode::Internal,
            NetworkType::Private => Mode::Private,
            NetworkType::Layered | NetworkType::Infiniband => return None,
        })
    }

    /// Container MACs are replaced by the host's on the wire.
    pub fn rewrites_mac(self) -> bool {
        matches!(self, Mode::L2Bridge | Mode::L2Tunnel)
    }

    /// Pod packets to other nodes are VXLAN-encapsulated.
    pub fn encapsulates(self) -> bool {
        self == Mode::Overlay
    }

    /// Pods reach the physical network (directly or through NAT).
    pub fn leaves_node(self) -> bool {
        !self.local_only()
    }

    /// Pods reach nothing beyond this host.
    pub fn local_only(self) -> bool {
        matches!(self, Mode::Ics | Mode::Internal | Mode::Private)
    }

    /// The host has a vNIC on the network that is the pods' gateway.
    pub fn has_gateway_vnic(self) -> bool {
        matches!(self, Mode::Nat | Mode::Ics | Mode::Internal)
    }

    /// Every endpoint is NATed to the node's address on the way out (WinNAT).
    pub fn implicit_outbound_nat(self) -> bool {
        self == Mode::Nat
    }

    /// Off-subnet traffic follows the host's routes (the node's default route, flannel
    /// host-gw's routes to other nodes).
    pub fn routes_through_host(self) -> bool {
        matches!(
            self,
            Mode::L2Bridge | Mode::L2Tunnel | Mode::Overlay | Mode::Nat
        )
    }
}

/// The MAC layer of a pod on an L2Bridge / L2Tunnel network: out, the container MAC becomes
/// the host's (and on L2Tunnel every frame is addressed to the router, `tunnel_to`); in, the
/// frame is addressed back to the container.
pub fn mac_rewrite(
    mode: Mode,
    host: MacAddr,
    pod: MacAddr,
    tunnel_to: Option<MacAddr>,
) -> Vec<Rule> {
    if !mode.rewrites_mac() {
        return Vec::new();
    }
    let dst = if mode == Mode::L2Tunnel {
        tunnel_to
    } else {
        None
    };
    vec![
        Rule::new(
            100,
            Conditions::any().direction(Direction::Out),
            Action::MacRewrite {
                src: Some(host),
                dst,
            },
        ),
        Rule::new(
            100,
            Conditions::any().direction(Direction::In),
            Action::MacRewrite {
                src: None,
                dst: Some(pod),
            },
        ),
    ]
}
