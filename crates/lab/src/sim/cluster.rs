//! The in-memory cluster: nodes on one fabric with an external host that is also the
//! physical network's router. Frames move between stacks, switches and the fabric until none
//! is left; every switch drop is kept with its trace.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use hcn::Guid;
use ipnet::IpNet;
use vfp::wire::MacAddr;
use vfp::{Disposition, DropReason, Frame, PortId, Timestamp};

use hcn::error::HnsError;
use hns::{Limitation, Profile};
use hns_compiler::{Resolver, limitation};
use vfp::packet::Packet;

use super::fabric::{AttachmentId, Fabric};
use super::node::Node;
use super::stack::{Interface, Out, Stack, StackRoute};
use crate::topology::{HTTP_PORT, UDP_PORT};

/// A host in the cluster that sends and receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Who {
    /// The external host (the physical network's router, and "the internet").
    External,
    /// A node's host stack.
    Node(usize),
    /// A pod, by node and endpoint.
    Pod(usize, Guid),
}

/// A packet a switch dropped.
#[derive(Clone, Debug)]
pub struct DropRecord {
    /// The node.
    pub node: String,
    /// The port the frame entered at.
    pub port: PortId,
    pub reason: DropReason,
    /// The limitation that refused it, when that is the reason.
    pub limitation: Option<Limitation>,
    /// The switch's explanation.
    pub trace: String,
}

/// Where a frame is going next.
#[derive(Clone, Copy, Debug)]
enum Hop {
    /// Into a node's switch at a port.
    Switch(usize, PortId),
    /// Onto the fabric from an attachment.
    Wire(AttachmentId),
    /// Into a stack on an interface.
    Stack(Who, usize),
}

/// The underlay's address book: what each host's ARP cache would learn.
pub type Directory = Arc<RwLock<HashMap<IpAddr, MacAddr>>>;

/// Addresses of the simulated underlay: the local cluster's plan ([`crate::topology`]).
pub mod addr {
    use std::net::IpAddr;

    use crate::topology::{self, EXTERNAL_IP, OUTSIDE_IP, Os};

    /// The physical network.
    pub const UNDERLAY: &str = topology::FABRIC;
    /// The router (the external host's address on the physical network).
    pub const ROUTER: IpAddr = IpAddr::V4(EXTERNAL_IP);
    /// An address of the external host beyond every OutBoundNAT exception: "the internet".
    pub const INTERNET: IpAddr = IpAddr::V4(OUTSIDE_IP);
    /// The external host's MAC.
    pub const ROUTER_MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x00, 0x00, 0x01];

    /// Windows node `i`'s address (0-based): 192.168.77.11, .12, ...
    pub fn node(i: usize) -> IpAddr {
        IpAddr::V4(topology::node_ip(Os::Windows, i))
    }

    /// Node `i`'s NIC MAC.
    pub fn node_mac(i: usize) -> [u8; 6] {
        [0x00, 0x15, 0x5d, 0x01, 0x00, 0x11 + i as u8]
    }
}

/// The cluster.
#[derive(Debug)]
pub struct Cluster {
    /// The Windows build every node reproduces.
    pub profile: Profile,
    pub fabric: Fabric,
    pub nodes: Vec<Node>,
    /// The external host.
    pub external: Stack,
    external_at: AttachmentId,
    directory: Directory,
    clock_ms: u64,
    /// The last exchange token handed out.
    pub(crate) token: u32,
    /// Every switch drop, in order.
    pub drops: Vec<DropRecord>,
    /// The fabric is dual-stack: nodes get an IPv6 address too.
    v6: bool,
    /// Each node's kube-proxy and the objects it syncs.
    pub(crate) proxies: super::agents::proxy::Proxies,
    /// Each node's NetworkPolicy agent.
    pub(crate) policies: super::agents::policy::Policies,
    /// Where the nodes' CNI state and IPAM leases live; removed with the cluster.
    work: tempfile::TempDir,
}

impl Cluster {
    /// A cluster of `n` nodes (`node1`, `node2`, ...) with the profile `profile` and no
    /// networks yet.
    pub fn new(n: usize, profile: Profile) -> Result<Cluster, HnsError> {
        let names: Vec<String> = (1..=n).map(|i| format!("node{i}")).collect();
        Cluster::with_nodes(&names, profile)
    }

    /// A cluster of Windows nodes named `names`, in the plan's order of addresses.
    pub fn with_nodes(names: &[String], profile: Profile) -> Result<Cluster, HnsError> {
        Cluster::build(names, profile, false)
    }

    /// [`Cluster::with_nodes`] on a dual-stack fabric: the nodes and the external host have
    /// an IPv6 address too ([`topology::fabric_ip_v6`]).
    pub fn dual_stack(names: &[String], profile: Profile) -> Result<Cluster, HnsError> {
        Cluster::build(names, profile, true)
    }

    fn build(names: &[String], profile: Profile, v6: bool) -> Result<Cluster, HnsError> {
        let mut fabric = Fabric::default();
        let directory: Directory = Arc::default();
        let external_at = fabric.attach("external");
        let (router, internet) = (addr::ROUTER, addr::INTERNET);
        let mut external = Stack::new("external");
        external.forwarding = true;
        external.interfaces.push(Interface {
            name: "eth0".into(),
            mac: MacAddr(addr::ROUTER_MAC),
            addresses: vec![IpNet::new(router, 24).unwrap_or_default()],
        });
        if v6 {
            let ip = IpAddr::V6(crate::topology::EXTERNAL_IP_V6);
            external.interfaces[0]
                .addresses
                .push(IpNet::new(ip, 64).unwrap_or_default());
            write_dir(&directory).insert(ip, MacAddr(addr::ROUTER_MAC));
        }
        external.extra_addresses.push(internet);
        external.tcp_listen.extend([80, 443, HTTP_PORT]);
        external.udp_listen.extend([53, UDP_PORT]);
        write_dir(&directory).insert(router, MacAddr(addr::ROUTER_MAC));
        let mut c = Cluster {
            profile,
            fabric,
            nodes: Vec::new(),
            external,
            external_at,
            directory,
            clock_ms: 0,
            token: 0,
            drops: Vec::new(),
            v6,
            proxies: Default::default(),
            policies: Default::default(),
            work: tempfile::tempdir()
                .map_err(|e| HnsError::new(hcn::HResult::E_FAIL, format!("a work dir: {e}")))?,
        };
        for name in names {
            c.add_node(name, profile)?;
        }
        Ok(c)
    }

    /// Adds a node on the underlay with a default route via the router.
    pub fn add_node(&mut self, name: &str, profile: Profile) -> Result<usize, HnsError> {
        let i = self.nodes.len();
        let ip = addr::node(i);
        let mac = MacAddr(addr::node_mac(i));
        write_dir(&self.directory).insert(ip, mac);
        let dir = Arc::clone(&self.directory);
        let resolver = Resolver::new(move |ip| {
            dir.read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&ip)
                .copied()
        });
        let at = self.fabric.attach(name);
        let mut addresses = vec![IpNet::new(ip, 24).unwrap_or_default()];
        if let (true, IpAddr::V4(v4)) = (self.v6, ip) {
            let ip6 = IpAddr::V6(crate::topology::fabric_ip_v6(v4));
            addresses.push(IpNet::new(ip6, 64).unwrap_or_default());
            write_dir(&self.directory).insert(ip6, mac);
        }
        let router = addr::ROUTER;
        let mut node = Node::new(name, addresses, mac, profile, resolver, at, router)?;
        node.host.tcp_listen.extend([10250, HTTP_PORT]);
        node.host.udp_listen.insert(53);
        self.nodes.push(node);
        Ok(i)
    }

    /// Where the nodes' CNI state and IPAM leases live.
    pub fn work_dir(&self) -> &std::path::Path {
        self.work.path()
    }

    /// Adds a route to the external router (toward a LoadBalancer ingress IP, say).
    pub fn external_route(&mut self, destination: IpNet, via: IpAddr) {
        self.external.routes.push(StackRoute {
            destination,
            via: Some(via),
            dev: None,
        });
    }

    /// The stack of `who`.
    pub fn stack(&self, who: Who) -> Option<&Stack> {
        match who {
            Who::External => Some(&self.external),
            Who::Node(n) => self.nodes.get(n).map(|n| &n.host),
            Who::Pod(n, ep) => self.nodes.get(n).and_then(|n| n.pods.get(&ep)),
        }
    }

    /// The stack of `who`, writable.
    pub fn stack_mut(&mut self, who: Who) -> Option<&mut Stack> {
        match who {
            Who::External => Some(&mut self.external),
            Who::Node(n) => self.nodes.get_mut(n).map(|n| &mut n.host),
            Who::Pod(n, ep) => self.nodes.get_mut(n).and_then(|n| n.pods.get_mut(&ep)),
        }
    }

    /// A name for `who` in messages.
    pub fn name(&self, who: Who) -> String {
        match who {
            Who::External => "external".into(),
            Who::Node(n) => self.nodes.get(n).map_or("?".into(), |n| n.name.clone()),
            Who::Pod(n, ep) => self
                .stack(Who::Pod(n, ep))
                .map_or("?".into(), |s| s.name.clone()),
        }
    }

    /// What the switch would do with `packet` sent by `who` (whose next hop must already be
    /// resolved): the trace of its first switch, nothing sent.
    pub fn trace(&mut self, who: Who, packet: &Packet) -> Option<vfp::Trace> {
        let (iface, bytes) = self.stack(who)?.frame_for(packet)?;
        let (n, port) = match who {
            Who::Node(n) => (n, self.nodes.get(n)?.host_port(iface)?),
            Who::Pod(n, ep) => (n, self.nodes.get(n)?.compiler().endpoint_port(ep)?),
            Who::External => return None,
        };
        let now = Timestamp::from_millis(self.clock_ms);
        Some(
            self.nodes
                .get(n)?
                .compiler()
                .switch_mut()
                .trace(port, &bytes, now),
        )
    }

    /// Lets `who` send `frames` and carries everything that follows until the cluster is
    /// quiet.
    pub fn run(&mut self, who: Who, frames: Vec<Out>) {
        let mut q: VecDeque<(Hop, Vec<u8>)> = VecDeque::new();
        self.queue_out(who, frames, &mut q);
        let mut steps = 0;
        while let Some((hop, bytes)) = q.pop_front() {
            steps += 1;
            if steps > 100_000 {
                break;
            }
            self.clock_ms += 1;
            match hop {
                Hop::Stack(w, iface) => {
                    let out = self
                        .stack_mut(w)
                        .map(|s| s.receive(iface, &bytes))
                        .unwrap_or_default();
                    self.queue_out(w, out, &mut q);
                }
                Hop::Wire(from) => {
                    for to in self.fabric.carry(from, &bytes) {
                        if to == self.external_at {
                            q.push_back((Hop::Stack(Who::External, 0), bytes.clone()));
                        } else if let Some((n, node)) = self
                            .nodes
                            .iter()
                            .enumerate()
                            .find(|(_, node)| node.attachment == to)
                            && let Some(up) = uplink_of(node)
                            && accepts(node, &bytes)
                        {
                            q.push_back((Hop::Switch(n, up), bytes.clone()));
                        }
                    }
                }
                Hop::Switch(n, port) => self.switch(n, port, bytes, &mut q),
            }
        }
    }

    fn queue_out(&self, who: Who, frames: Vec<Out>, q: &mut VecDeque<(Hop, Vec<u8>)>) {
        for (iface, bytes) in frames {
            let hop = match who {
                Who::External => Some(Hop::Wire(self.external_at)),
                Who::Node(n) => self
                    .nodes
                    .get(n)
                    .and_then(|node| node.host_port(iface))
                    .map(|p| Hop::Switch(n, p)),
                Who::Pod(n, ep) => self
                    .nodes
                    .get(n)
                    .and_then(|node| node.compiler().endpoint_port(ep))
                    .map(|p| Hop::Switch(n, p)),
            };
            if let Some(h) = hop {
                q.push_back((h, bytes));
            }
        }
    }

    fn switch(&mut self, n: usize, port: PortId, bytes: Vec<u8>, q: &mut VecDeque<(Hop, Vec<u8>)>) {
        let now = Timestamp::from_millis(self.clock_ms);
        let Some(node) = self.nodes.get(n) else {
            return;
        };
        let mut frame = Frame::new(&bytes);
        let (d, uplink, flood) = {
            let mut compiler = node.compiler();
            let d = compiler.switch_mut().process(port, &mut frame, now);
            let flood: Vec<PortId> = match d {
                Disposition::Flood { from } => compiler.switch().flood_targets(from).collect(),
                _ => Vec::new(),
            };
            (d, compiler.uplink_port(), flood)
        };
        let out = frame.bytes().to_vec();
        let deliver = |to: PortId, b: Vec<u8>, q: &mut VecDeque<(Hop, Vec<u8>)>| {
            if Some(to) == uplink {
                q.push_back((Hop::Wire(node.attachment), b));
            } else if let Some(i) = node.host_iface(to) {
                q.push_back((Hop::Stack(Who::Node(n), i), b));
            } else if let Some(ep) = node.pod_at(to) {
                q.push_back((Hop::Stack(Who::Pod(n, ep), 0), b));
            }
        };
        match d {
            Disposition::Deliver(to) | Disposition::Uplink(to) | Disposition::Reply(to) => {
                deliver(to, out, q)
            }
            Disposition::Flood { .. } => {
                for t in flood {
                    deliver(t, bytes.clone(), q);
                }
            }
            // A frame the fabric flooded to this NIC that is for no one here: a NIC ignores it.
            Disposition::Drop(DropReason::Hairpin | DropReason::UnknownDestination)
                if Some(port) == uplink => {}
            Disposition::Drop(reason) => {
                let t = node.compiler().switch_mut().trace(port, &bytes, now);
                self.drops.push(DropRecord {
                    node: node.name.clone(),
                    port,
                    reason,
                    limitation: limitation::of_trace(&t),
                    trace: t.to_string(),
                });
            }
        }
    }
}

/// The switch port of `node`'s NIC (the compiler's lock is not held past the call).
fn uplink_of(node: &Node) -> Option<PortId> {
    node.compiler().uplink_port()
}

/// The Hyper-V switch takes from the wire only frames for one of its vNICs (or broadcasts):
/// a unicast the fabric floods for someone else never reaches its layers.
fn accepts(node: &Node, frame: &[u8]) -> bool {
    let Some(dst) = frame.get(0..6).and_then(|d| <[u8; 6]>::try_from(d).ok()) else {
        return false;
    };
    let dst = MacAddr(dst);
    dst.is_group()
        || dst == node.mac
        || node
            .compiler()
            .switch()
            .ports()
            .any(|p| p.config().mac == Some(dst))
}

fn write_dir(d: &Directory) -> std::sync::RwLockWriteGuard<'_, HashMap<IpAddr, MacAddr>> {
    d.write().unwrap_or_else(|p| p.into_inner())
}
