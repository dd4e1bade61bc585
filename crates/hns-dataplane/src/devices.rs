//! Which device each switch port has, and making them: a TAP for the management vNIC and each
//! host vNIC in the node's namespace, a TAP in the pod's namespace for each attached pod
//! endpoint (its MAC, addresses, gateway routes, MTU and DNS), and an AF_PACKET socket on the
//! NIC for the uplink. A device whose wanted shape is unchanged is kept as it is; TAPs are
//! persistent, so an hnsd that starts again finds and adopts them.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Arc;

use hcn::{Guid, NamespaceType, NetworkType};
use host::HostError;
use host::netlink::{Netlink, RouteEntry};
use host::netns::Netns;
use host::packet_socket::PacketSocket;
use host::sysctl::set_sysctl;
use host::tap::Tap;
use ipnet::IpNet;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use vfp::PortId;

use crate::dns::PodDns;
use crate::uplink::{Uplink, management_name};
use hns::state::{NETNS_PREFIX, State, netns_path};
use hns_compiler::{Compiler, pod};

/// The largest GSO segment a pod's kernel may hand a TAP: room for VXLAN's 50 bytes of
/// outer headers inside an IP packet's 64 KiB.
const GSO_MAX: u32 = 64_000;
/// Bytes VXLAN adds (outer Ethernet, IPv4, UDP, VXLAN).
const VXLAN_OVERHEAD: u32 = 50;

/// What a device is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// The management vNIC `vEthernet-<nic>`.
    Management,
    /// The NIC.
    Uplink,
    /// A host vNIC (host-attached endpoint, NAT gateway), by its name.
    Host(String),
    /// A pod endpoint's vNIC.
    Pod(Guid),
}

/// The shape a device should have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// AF_PACKET on the NIC.
    Uplink { nic: String },
    /// A TAP.
    Tap(TapSpec),
}

/// A TAP vNIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapSpec {
    /// The namespace it lives in; the node's when `None`.
    pub netns: Option<PathBuf>,
    pub name: String,
    pub mac: [u8; 6],
    pub addresses: Vec<IpNet>,
    pub mtu: u32,
    /// Routes via gateways (a pod's default route).
    pub routes: Vec<(IpNet, IpAddr)>,
    /// The pod's DNS client: its `/etc/netns/<name>/resolv.conf`, and its stub.
    pub dns: Option<Box<PodDns>>,
    /// False for the management vNIC, whose addresses the uplink moves.
    pub configure: bool,
}

/// A device that carries frames: what the pump reads and writes.
pub enum Io {
    /// A TAP's queues (at least one), each its own file descriptor.
    Tap(Vec<Tap>),
    Packet(PacketSocket),
}

/// Queues per device at most: an epoll token carries the queue in its low bits.
pub(crate) const QUEUE_BITS: u32 = 4;

impl Io {
    /// Reads one frame (with its virtio-net header) from queue `q`.
    pub fn recv(&self, q: usize, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Io::Tap(t) => t[q % t.len()].recv(buf),
            Io::Packet(p) => p.recv(buf),
        }
    }

    /// Writes one frame behind a virtio-net header into queue `q` (modulo the queues there
    /// are). A TAP steers the namespace's later packets of that flow to the queue its packets
    /// were written to, so writing a flow to the queue it was read from keeps each flow on
    /// one queue.
    pub fn send(&self, q: usize, hdr: &[u8], frame: &[u8]) -> std::io::Result<usize> {
        match self {
            Io::Tap(t) => t[q % t.len()].send_vectored(hdr, frame),
            Io::Packet(p) => p.send_vectored(hdr, frame),
        }
    }

    /// How many queues the device has.
    pub fn queues(&self) -> usize {
        match self {
            Io::Tap(t) => t.len(),
            Io::Packet(_) => 1,
        }
    }

    /// The file descriptor of queue `q`.
    pub fn fd(&self, q: usize) -> BorrowedFd<'_> {
        match self {
            Io::Tap(t) => t[q % t.len()].as_fd(),
            Io::Packet(p) => p.as_fd(),
        }
    }

    /// True for the uplink (frames must leave MTU-sized, with complete checksums).
    pub fn is_uplink(&self) -> bool {
        matches!(self, Io::Packet(_))
    }
}

/// How device queues are watched: one pump thread at a time serves a queue (it re-arms the
/// queue once the frames it read are written), so that frames of one queue keep their order.
pub(crate) const WATCH: EpollFlags = EpollFlags::EPOLLIN.union(EpollFlags::EPOLLONESHOT);

/// A device and the port it serves.
pub struct Device {
    pub port: PortId,
    /// Shared with the pump threads while they read or write it outside the data plane's lock.
    pub io: Arc<Io>,
    spec: Spec,
    key: Key,
}

/// The node's devices.
#[derive(Default)]
pub struct Devices {
    by_token: HashMap<u64, Device>,
    tokens: HashMap<Key, u64>,
    ports: HashMap<PortId, u64>,
    next_token: u64,
    /// Devices that failed to be made, with why (logged once per change).
    failed: HashMap<Key, String>,
}

impl Devices {
    /// The device read under epoll token `t`, and which of its queues.
    pub fn by_token(&self, t: u64) -> Option<(&Device, usize)> {
        let q = (t & ((1 << QUEUE_BITS) - 1)) as usize;
        self.by_token.get(&(t >> QUEUE_BITS)).map(|d| (d, q))
    }

    /// The device of switch port `p`.
    pub fn by_port(&self, p: PortId) -> Option<&Device> {
        self.ports.get(&p).and_then(|t| self.by_token.get(t))
    }

    /// Makes the devices `want`, keeps those already right, removes the rest.
    pub fn sync(&mut self, want: Vec<(Key, PortId, Spec)>, epoll: &Epoll) {
        let wanted: HashSet<&Key> = want.iter().map(|(k, _, _)| k).collect();
        let gone: Vec<Key> = self
            .tokens
            .keys()
            .filter(|k| !wanted.contains(k))
            .cloned()
            .collect();
        for k in gone {
            self.remove(&k, epoll);
        }
        self.failed.retain(|k, _| wanted.contains(k));
        for (key, port, spec) in want {
            if let Some(t) = self.tokens.get(&key).copied() {
                let same = self.by_token.get(&t).is_some_and(|d| d.spec == spec);
                if same {
                    if let Some(d) = self.by_token.get_mut(&t) {
                        d.port = port;
                    }
                    continue;
                }
                self.remove(&key, epoll);
            }
            match open(&spec) {
                Ok(io) => {
                    self.failed.remove(&key);
                    self.insert(key, port, spec, io, epoll);
                }
                Err(e) => {
                    let msg = e.to_string();
                    if self.failed.get(&key) != Some(&msg) {
                        tracing::warn!(device = ?key, "cannot make the device: {msg}");
                        self.failed.insert(key, msg);
                    }
                }
            }
        }
        self.ports = self.by_token.iter().map(|(t, d)| (d.port, *t)).collect();
    }

    /// Removes the management vNIC's and the uplink's devices (before the NIC is given back).
    pub fn remove_uplink_devices(&mut self, epoll: &Epoll) {
        self.remove(&Key::Management, epoll);
        self.remove(&Key::Uplink, epoll);
    }

    fn insert(&mut self, key: Key, port: PortId, spec: Spec, io: Io, epoll: &Epoll) {
        self.next_token += 1;
        let token = self.next_token;
        for q in 0..io.queues() {
            let ev = EpollEvent::new(WATCH, token << QUEUE_BITS | q as u64);
            if let Err(e) = epoll.add(io.fd(q), ev) {
                tracing::warn!(device = ?key, "cannot watch the device: {e}");
                for q in 0..q {
                    let _ = epoll.delete(io.fd(q));
                }
                return;
            }
        }
        self.tokens.insert(key.clone(), token);
        self.by_token.insert(
            token,
            Device {
                port,
                io: Arc::new(io),
                spec,
                key,
            },
        );
    }

    fn remove(&mut self, key: &Key, epoll: &Epoll) {
        let Some(t) = self.tokens.remove(key) else {
            return;
        };
        let Some(d) = self.by_token.remove(&t) else {
            return;
        };
        self.ports.retain(|_, tok| *tok != t);
        for q in 0..d.io.queues() {
            let _ = epoll.delete(d.io.fd(q));
        }
        if let Io::Tap(queues) = &*d.io
            && let Some(tap) = queues.first()
        {
            // The management vNIC is removed by the uplink when it gives the NIC back.
            if d.key != Key::Management {
                let _ = tap.set_persist(false);
            }
        }
        let remaining = self.by_token.values().map(|d| &d.spec);
        if let Some(name) = dns_file_left_unused(&d.spec, remaining)
            && let Err(e) = host::resolv::remove(&name)
        {
            tracing::warn!(device = ?key, "cannot remove /etc/netns/{name}/resolv.conf: {e}");
        }
    }
}

/// The named namespace whose `/etc/netns/<name>/resolv.conf` nobody needs once the vNIC
/// `gone` is removed: hnsd wrote it for `gone`, and no `remaining` vNIC in that namespace
/// has DNS. Two endpoints of one namespace share the file, so it goes with the last one.
fn dns_file_left_unused<'a>(
    gone: &Spec,
    mut remaining: impl Iterator<Item = &'a Spec>,
) -> Option<String> {
    let Spec::Tap(TapSpec {
        netns: Some(netns),
        dns: Some(_),
        ..
    }) = gone
    else {
        return None;
    };
    let name = netns.strip_prefix(Netns::RUN_DIR).ok()?.to_str()?;
    let shared = remaining.any(
        |s| matches!(s, Spec::Tap(TapSpec { netns: Some(n), dns: Some(_), .. }) if n == netns),
    );
    (!shared).then(|| name.to_string())
}

/// The devices the switch's ports should have now.
pub fn desired(c: &Compiler, state: &State, uplink: &Uplink) -> Vec<(Key, PortId, Spec)> {
    let mut want = Vec::new();
    let mtu = uplink.mtu();
    if uplink.taken()
        && let Some(nic) = uplink.nic()
    {
        if let Some(up) = c.uplink_port() {
            want.push((Key::Uplink, up, Spec::Uplink { nic: nic.into() }));
        }
        want.push((
            Key::Management,
            c.management_port(),
            Spec::Tap(TapSpec {
                netns: None,
                name: management_name(nic),
                mac: c.facts().host_mac.0,
                addresses: Vec::new(),
                mtu,
                routes: Vec::new(),
                dns: None,
                configure: false,
            }),
        ));
    }
    for i in c.host_interfaces() {
        if i.port == c.management_port() {
            continue;
        }
        want.push((
            Key::Host(i.name.clone()),
            i.port,
            Spec::Tap(TapSpec {
                netns: None,
                name: link_name(&i.name),
                mac: i.mac.0,
                addresses: i.addresses.clone(),
                mtu,
                routes: Vec::new(),
                dns: None,
                configure: true,
            }),
        ));
    }
    for ep in state.endpoints() {
        let Some(port) = c.endpoint_port(ep.id) else {
            continue;
        };
        let Some(ns) = state.namespace(ep.host_compute_namespace) else {
            continue;
        };
        if matches!(
            ns.namespace_type,
            Some(NamespaceType::Host | NamespaceType::HostDefault)
        ) {
            continue;
        }
        let Some(mac) = ep.mac_address else {
            continue;
        };
        let netns = netns_path(ns);
        let overlay = state
            .network(ep.host_compute_network)
            .is_some_and(|n| n.network_type == NetworkType::Overlay);
        let ep_mtu = c.endpoint_mtu(ep.id).map(u32::from).unwrap_or(if overlay {
            mtu.saturating_sub(VXLAN_OVERHEAD)
        } else {
            mtu
        });
        want.push((
            Key::Pod(ep.id),
            port,
            Spec::Tap(TapSpec {
                dns: crate::dns::pod_dns(state.profile(), ep, &netns).map(Box::new),
                netns: Some(netns),
                name: if ep.linux_interface_name.is_empty() {
                    "eth0".into()
                } else {
                    ep.linux_interface_name.clone()
                },
                mac: mac.0,
                addresses: pod::addresses(state, ep),
                mtu: ep_mtu,
                routes: pod::routes(state, ep),
                configure: true,
            }),
        ));
    }
    want
}

/// Makes the namespaces of HostComputeNamespaces created without one.
pub fn ensure_namespaces(state: &State) {
    for ns in state.namespaces() {
        if !ns.linux_netns.is_empty()
            || matches!(
                ns.namespace_type,
                Some(NamespaceType::Host | NamespaceType::HostDefault)
            )
        {
            continue;
        }
        let name = format!("{NETNS_PREFIX}{}", ns.id);
        if !Netns::named(&name).exists()
            && let Err(e) = Netns::create(&name)
        {
            tracing::warn!(namespace = %ns.id, "cannot make network namespace {name}: {e}");
        }
    }
}

/// Removes the namespaces hnsd made for the HostComputeNamespaces `changes` delete. Only
/// its own deletions count: other hnsd on the machine (other nodes) make theirs too.
pub fn remove_namespaces(changes: &[hns::state::Change]) {
    for c in changes {
        if let hns::state::Change::Delete(hns::state::Kind::Namespace, id) = c {
            let name = format!("{NETNS_PREFIX}{id}");
            let ns = Netns::named(&name);
            if !ns.exists() {
                continue;
            }
            let _ = host::resolv::remove(&name);
            if let Err(e) = ns.delete() {
                tracing::warn!("cannot remove network namespace {name}: {e}");
            }
        }
    }
}

/// A Linux interface name for a host vNIC: the endpoint's name when Linux allows it, else
/// `hns-` and a hash of it.
pub fn link_name(name: &str) -> String {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
    if ok {
        return name.to_string();
    }
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("hns-{:08x}", h as u32)
}

/// Makes (or adopts) the device.
fn open(spec: &Spec) -> Result<Io, HostError> {
    match spec {
        Spec::Uplink { nic } => PacketSocket::bind(nic).map(Io::Packet),
        Spec::Tap(s) => {
            let made = match &s.netns {
                Some(path) => Netns::from_path(path).run(|| make_tap(s))?,
                None => make_tap(s)?,
            };
            if let (Some(dns), Some(name)) = (&s.dns, s.netns.as_ref().and_then(|p| p.file_name()))
            {
                let f = &dns.file;
                let written =
                    host::resolv::write(&name.to_string_lossy(), &f.servers, &f.search, &f.options);
                if let Err(e) = written {
                    made.abandon(s);
                    return Err(e);
                }
            }
            Ok(Io::Tap(made.queues))
        }
    }
}

/// A TAP `make_tap` opened, and whether it made it (rather than adopting one).
struct MadeTap {
    queues: Vec<Tap>,
    new: bool,
}

impl MadeTap {
    /// Gives up a TAP that could not be made whole: one made now is deleted, so no half-made
    /// vNIC is left; an adopted one stays as it was found. Deleted by netlink, not only by
    /// closing its queues: a process this one forks meanwhile on another thread (a `Command`)
    /// holds copies of the queues' descriptors until it execs, and the TAP would outlive the
    /// close by that long, long enough for a retry of the same endpoint to adopt it.
    fn abandon(self, s: &TapSpec) {
        if !self.new {
            return;
        }
        if let Some(first) = self.queues.first() {
            let _ = first.set_persist(false);
        }
        let delete = || {
            let mut nl = Netlink::open()?;
            match nl.link(&s.name)? {
                Some(link) => nl.delete_link(link.index),
                None => Ok(()),
            }
        };
        let _ = match &s.netns {
            Some(path) => Netns::from_path(path).run(delete),
            None => delete(),
        };
    }
}

/// In the TAP's namespace: open it (persistent) and give it its MAC, MTU, addresses and
/// routes. A TAP made here that cannot be configured is removed again.
fn make_tap(s: &TapSpec) -> Result<MadeTap, HostError> {
    let mut nl = Netlink::open()?;
    let new = nl.link(&s.name)?.is_none();
    // A queue per pump thread, so that the threads can read one vNIC's flows side by side.
    let queues = Tap::open_queues(&s.name, crate::pump::threads().min(1 << QUEUE_BITS))?;
    let made = MadeTap { queues, new };
    if let Some(first) = made.queues.first()
        && let Err(e) = first.set_persist(true)
    {
        made.abandon(s);
        return Err(e);
    }
    if !s.configure {
        return Ok(made);
    }
    match configure_tap(&mut nl, s) {
        Ok(()) => Ok(made),
        Err(e) => {
            made.abandon(s);
            Err(e)
        }
    }
}

/// Gives a TAP its MAC, MTU, addresses and routes, and brings it up.
fn configure_tap(nl: &mut Netlink, s: &TapSpec) -> Result<(), HostError> {
    let link = nl
        .link(&s.name)?
        .ok_or_else(|| HostError::NotFound(format!("TAP {} vanished after it was made", s.name)))?;
    if link.mac != Some(s.mac) {
        nl.set_mac(link.index, s.mac)?;
    }
    if link.mtu != s.mtu {
        nl.set_mtu(link.index, s.mtu)?;
    }
    nl.set_gso_max_size(link.index, GSO_MAX)?;
    if !s.addresses.iter().any(|a| a.addr().is_ipv6()) {
        // No IPv6 on this vNIC: no router solicitations or MLD reports into the switch.
        let _ = set_sysctl(&format!("net/ipv6/conf/{}/disable_ipv6", s.name), "1");
    }
    for a in &s.addresses {
        nl.add_address(link.index, *a)?;
    }
    nl.set_up(link.index, true)?;
    for (dst, via) in &s.routes {
        nl.add_route(&RouteEntry {
            destination: *dst,
            gateway: Some(*via),
            oif: Some(link.index),
            metric: None,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_tap(netns: &str, dns: bool) -> Spec {
        Spec::Tap(TapSpec {
            netns: Some(PathBuf::from(netns)),
            name: "eth0".into(),
            mac: [0, 0x15, 0x5d, 0, 0, 1],
            addresses: Vec::new(),
            mtu: 1500,
            routes: Vec::new(),
            dns: dns.then(|| {
                Box::new(crate::dns::PodDns {
                    file: crate::dns::ResolvFile {
                        servers: vec!["10.96.0.10".parse().unwrap()],
                        search: Vec::new(),
                        options: Vec::new(),
                    },
                    stub: None,
                })
            }),
            configure: true,
        })
    }

    #[test]
    fn the_dns_file_goes_with_the_last_vnic_of_its_namespace() {
        let a = pod_tap("/run/netns/pod-a", true);
        let a2 = pod_tap("/run/netns/pod-a", true);
        let b = pod_tap("/run/netns/pod-b", true);
        assert_eq!(
            dns_file_left_unused(&a, [&b].into_iter()),
            Some("pod-a".to_string())
        );
        assert_eq!(dns_file_left_unused(&a, [&a2, &b].into_iter()), None);
        // A vNIC in the namespace without DNS does not need the file.
        let a_plain = pod_tap("/run/netns/pod-a", false);
        assert_eq!(
            dns_file_left_unused(&a, [&a_plain].into_iter()),
            Some("pod-a".to_string())
        );
    }

    #[test]
    fn no_dns_file_is_removed_that_hnsd_did_not_write() {
        let none = std::iter::empty();
        // No DNS: a resolv.conf there is someone else's.
        assert_eq!(
            dns_file_left_unused(&pod_tap("/run/netns/pod-a", false), none),
            None
        );
        // A namespace by a path outside /run/netns has no /etc/netns entry.
        assert_eq!(
            dns_file_left_unused(&pod_tap("/proc/42/ns/net", true), std::iter::empty()),
            None
        );
        let uplink = Spec::Uplink { nic: "eth0".into() };
        assert_eq!(dns_file_left_unused(&uplink, std::iter::empty()), None);
    }

    #[test]
    fn hnsd_makes_namespaces_where_ip_netns_keeps_them() {
        assert_eq!(hns::state::NETNS_DIR, Netns::RUN_DIR);
    }

    /// A namespace of this test's own, removed when dropped.
    struct ScratchNetns(Netns);

    impl Drop for ScratchNetns {
        fn drop(&mut self) {
            let _ = self.0.delete();
        }
    }

    #[test]
    fn a_tap_that_cannot_be_configured_is_not_left_half_made() {
        testkit::require_root("this test makes a network namespace and a TAP");
        let ns = ScratchNetns(
            Netns::create(&format!("hnsdp-tap-{}", std::process::id())).expect("netns"),
        );
        let Spec::Tap(mut spec) = pod_tap(&ns.0.path().to_string_lossy(), false) else {
            unreachable!("pod_tap makes a TAP spec")
        };
        // The kernel takes no MTU below 68: configuring fails after the TAP exists.
        spec.mtu = 0;
        let err = open(&Spec::Tap(spec.clone()))
            .err()
            .expect("an MTU of 0 is refused");
        assert!(err.to_string().contains("MTU"), "{err}");
        let left =
            ns.0.run(|| Netlink::open()?.link("eth0"))
                .expect("look in the namespace");
        assert_eq!(left.map(|l| l.name), None, "a half-made TAP was left");
        // Made whole, it stays (persistent) after its queues are closed.
        spec.mtu = 1500;
        drop(open(&Spec::Tap(spec)).expect("a TAP"));
        let left =
            ns.0.run(|| Netlink::open()?.link("eth0"))
                .expect("look in the namespace");
        assert!(left.is_some_and(|l| l.up), "the vNIC is gone or down");
    }

    #[test]
    fn host_vnic_names_fit_linux() {
        assert_eq!(link_name("cbr0_ep"), "cbr0_ep");
        let long = link_name("vEthernet (nat)");
        assert!(long.starts_with("hns-") && long.len() <= 15, "{long}");
        assert_eq!(long, link_name("vEthernet (nat)"));
        assert_ne!(link_name("a b"), link_name("a c"));
    }
}
