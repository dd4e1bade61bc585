//! The fast path proper, for the frames nearly all traffic is: a plain frame (`parse::Plain`:
//! untagged Ethernet to a unicast MAC, IPv4 that is not a fragment, TCP or UDP that is not
//! VXLAN) of a cached, fresh connection in mid-stream (no SYN, FIN or RST: those change its
//! phase, and are few). Such a frame is read once, looked up once and rewritten in place, and
//! counted as the general path counts it. Any other frame, and a plain one of an unknown,
//! stale or idle connection, is left untouched for the general path, which handles it as it
//! handles every frame; the test `the_fast_path_agrees_with_the_general_path` holds the two
//! together.

use super::{Switch, evaluated_at, idle_out};
use crate::disposition::{Disposition, DropReason};
use crate::frame::Frame;
use crate::parse::{self, PlainL4};
use crate::port::{Port, PortId, PortKind};
use crate::tcp_state::FlowSide;
use crate::time::Timestamp;
use crate::transform::{self, Checksum, Offsets};
use crate::wire::TcpFlags;

/// Ports `a` and `b`, both writable; `None` if either is gone, or if they are one port (a
/// connection looping back to its own port is left to the general path).
#[inline(always)]
fn two(ports: &mut [Option<Port>], a: PortId, b: PortId) -> Option<(&mut Port, &mut Port)> {
    let (a, b) = (usize::from(a), usize::from(b));
    if a < b {
        let (low, high) = ports.split_at_mut_checked(b)?;
        Some((low.get_mut(a)?.as_mut()?, high.first_mut()?.as_mut()?))
    } else if b < a {
        let (low, high) = ports.split_at_mut_checked(a)?;
        Some((high.first_mut()?.as_mut()?, low.get_mut(b)?.as_mut()?))
    } else {
        None
    }
}

/// TCP flags that move a connection's phase (`TcpTracker`), or reopen a closed one.
const PHASE_FLAGS: u8 = TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST;

impl Switch {
    /// Processes `frame` if it is a plain frame of a cached, fresh connection in mid-stream;
    /// `None`, with nothing read beyond the frame and nothing changed, for any other.
    #[inline(always)]
    pub(super) fn fast_path(
        &mut self,
        from: PortId,
        frame: &mut Frame,
        now: Timestamp,
    ) -> Option<Disposition> {
        let b = frame.data_mut();
        let x = parse::plain(b, self.config.vxlan_port)?;
        let flags = x.tcp_flags();
        if x.dst_mac.is_group() || flags & PHASE_FLAGS != 0 {
            return None;
        }
        let hash = self.flows.hash_plain(from, x.proto, x.addrs, x.ports);
        let (slot, side) = self
            .flows
            .find_plain(from, x.proto, x.addrs, x.ports, hash)?;
        let r = self.flows.get_mut(slot)?;
        let (pa, pb) = two(&mut self.ports, r.port_a, r.port_b)?;
        let timeouts = &self.config.timeouts;
        if idle_out(timeouts, self.min_timeout_nanos, r, now)
            || !evaluated_at(r, [Some(pa.generation), Some(pb.generation)], self.topo_gen)
        {
            return None;
        }
        // From here on the frame is this path's.
        let rx = b.len();
        r.last_seen = now;
        r.packets += 1;
        r.bytes += rx as u64;
        // A forward segment without SYN, FIN or RST tells the tracker nothing (`observe`
        // records only those on that side); the general path observes every segment.
        if flags != 0 && side == FlowSide::Reverse {
            r.tcp.observe(side, flags);
        }
        let (ingress, egress, to, outer) = match side {
            FlowSide::Forward => (pa, pb, r.port_b, r.fin_outer.as_ref()),
            FlowSide::Reverse => (pb, pa, r.port_a, r.rev_outer.as_ref()),
        };
        // The counters `process_general` keeps (`fast`, `out_disposition`, `account`).
        self.counters.hits += 1;
        ingress.counters.rx_packets += 1;
        ingress.counters.rx_bytes += rx as u64;
        ingress.counters.fast_path += 1;
        // The rewrite `transform::rewrite` would work out, kept in the record (`plain_write`).
        let sum = match x.l4_kind {
            PlainL4::Tcp { .. } => Checksum::Tcp,
            PlainL4::Udp { checksum: true } => Checksum::Udp,
            PlainL4::Udp { checksum: false } => Checksum::None,
        };
        let at = Offsets {
            eth: 0,
            l3: 14,
            l4: x.l4,
        };
        let res = transform::write_v4(b, at, &r.plain_write(side), sum);
        let res = match (res, outer) {
            (Ok(()), Some(e)) => self.outers.push(frame, e, r.entropy),
            (res, _) => res,
        }
        .map(|()| to);
        Some(match res {
            Ok(to) => {
                egress.counters.tx_packets += 1;
                egress.counters.tx_bytes += frame.len() as u64;
                match egress.kind() {
                    PortKind::Uplink => Disposition::Uplink(to),
                    _ => Disposition::Deliver(to),
                }
            }
            Err(_) => {
                let why = DropReason::RewriteFailed;
                ingress.counters.drops[why.idx()] += 1;
                Disposition::Drop(why)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::layer::{ACL, NAT, ROUTE, SLB};
    use crate::packet::{L4, Packet};
    use crate::wire::{MacAddr, TcpFlags, proto};
    use crate::*;
    use std::net::IpAddr;
    use std::sync::Arc;

    fn mac(n: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, n])
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    /// A node as kube-proxy programs one: a client pod, two local backends, the host and the
    /// uplink; load balancers with local and remote (VXLAN) backends for TCP and UDP, a
    /// stateless ACL rule, OutboundNAT to a small SNAT pool, a remote subnet route.
    fn node() -> (Switch, [PortId; 5]) {
        let mut sw = Switch::new(SwitchConfig::default());
        let client = sw
            .add_port(PortConfig::pod("client", mac(10), vec![ip("10.244.1.10")]))
            .expect("a port");
        let web: Vec<PortId> = (0..2u8)
            .map(|i| {
                let a = ip(&format!("10.244.1.{}", 11 + i));
                sw.add_port(PortConfig::pod(&format!("web-{i}"), mac(11 + i), vec![a]))
                    .expect("a port")
            })
            .collect();
        let host = sw
            .add_port(PortConfig::host("host", mac(20), vec![ip("192.168.1.5")]))
            .expect("a port");
        let uplink = sw.add_port(PortConfig::uplink("eth0")).expect("a port");
        sw.own_address(ip("10.244.1.1"), mac(1));
        let pool = sw.add_snat_pool(ip("192.168.1.5"), 40_000, 40_063);
        let outer = Arc::new(Encap {
            vni: 4096,
            src_mac: mac(20),
            dst_mac: mac(32),
            src_ip: ip("192.168.1.5"),
            dst_ip: ip("192.168.1.2"),
            udp_port: 4789,
        });
        let port = sw.port_mut(client).expect("the client port");
        port.layer_mut(ACL).expect("ACL").set_rules(
            Origin::new("ACL", "ep"),
            vec![
                Rule::new(
                    100,
                    Conditions::any().protocol(proto::TCP).dst_port(7000),
                    Action::Allow,
                )
                .stateless(),
                Rule::new(
                    101,
                    Conditions::any().protocol(proto::TCP).dst_port(9000),
                    Action::Block,
                ),
            ],
        );
        let slb = port.layer_mut(SLB).expect("SLB");
        for i in 0..4u8 {
            let local = |k: u8| Backend {
                ip: ip(&format!("10.244.1.{}", 11 + (i + k) % 2)),
                port: Some(8080),
                mac: Some(mac(11 + (i + k) % 2)),
            };
            let remote = Backend {
                ip: ip(&format!("10.244.2.{}", 2 + i)),
                port: Some(8080),
                mac: None,
            };
            let lb = Arc::new(LoadBalancer::new(vec![local(0), local(1), remote]));
            let rules = [proto::TCP, proto::UDP]
                .map(|p| {
                    let c = Conditions::any()
                        .protocol(p)
                        .dst_ip(ip(&format!("10.96.0.{i}")))
                        .dst_port(80);
                    Rule::new(1, c, Action::LoadBalance(lb.clone()))
                })
                .to_vec();
            slb.set_rules(Origin::new("LoadBalancer", i.to_string()), rules);
        }
        let cluster = Conditions::any()
            .direction(Direction::Out)
            .dst_net("10.0.0.0/8".parse().expect("a prefix"));
        port.layer_mut(NAT).expect("NAT").set_rules(
            Origin::new("OutBoundNAT", "ep"),
            vec![
                Rule::new(1, cluster, Action::Allow),
                Rule::new(
                    2,
                    Conditions::any().direction(Direction::Out),
                    Action::Snat { pool },
                ),
            ],
        );
        port.layer_mut(ROUTE).expect("ROUTE").set_rules(
            Origin::new("RemoteSubnetRoute", "all"),
            vec![Rule::route(
                "10.244.2.0/24".parse().expect("a prefix"),
                Action::Encap {
                    outer,
                    inner_dst_mac: Some(mac(40)),
                },
            )],
        );
        (sw, [client, web[0], web[1], host, uplink])
    }

    /// xorshift64: a fixed, repeatable stream of choices.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A segment's flags: mostly mid-stream, sometimes opening, closing or resetting.
    fn flags(rng: &mut Rng) -> u8 {
        const F: [u8; 14] = [
            TcpFlags::ACK,
            TcpFlags::ACK | TcpFlags::PSH,
            TcpFlags::ACK,
            TcpFlags::ACK | TcpFlags::PSH,
            TcpFlags::ACK,
            TcpFlags::ACK | TcpFlags::PSH,
            TcpFlags::ACK,
            TcpFlags::ACK | TcpFlags::PSH,
            TcpFlags::SYN,
            TcpFlags::SYN | TcpFlags::ACK,
            TcpFlags::FIN | TcpFlags::ACK,
            TcpFlags::RST,
            0,
            TcpFlags::ACK | 0x20,
        ];
        F[rng.below(F.len() as u64) as usize]
    }

    /// A new frame from the client pod: to a VIP, the pod network, a remote pod or outside.
    fn from_client(rng: &mut Rng) -> Vec<u8> {
        let dst = match rng.below(5) {
            0 | 1 => ip(&format!("10.96.0.{}", rng.below(5))),
            2 => ip("10.244.1.11"),
            3 => ip("10.244.2.9"),
            _ => ip("8.8.8.8"),
        };
        let sport = 1024 + rng.below(6) as u16;
        let dport = [80, 80, 443, 7000, 9000][rng.below(5) as usize];
        let l4 = if rng.below(4) == 0 {
            L4::Udp {
                src_port: sport,
                dst_port: dport,
                payload: vec![1, 2, 3],
            }
        } else {
            L4::Tcp {
                src_port: sport,
                dst_port: dport,
                flags: flags(rng),
                seq: rng.next() as u32,
                ack: 0,
                payload: vec![0; rng.below(3) as usize * 7],
            }
        };
        let gateway = if rng.below(16) == 0 {
            MacAddr::BROADCAST
        } else {
            mac(1)
        };
        Packet::new(ip("10.244.1.10"), dst, l4)
            .frame(mac(10), gateway)
            .expect("a frame of one address family")
    }

    /// The reply to a frame the switch sent: addresses and ports swapped (which keeps the
    /// checksums right), new TCP flags.
    fn reply(out: &[u8], rng: &mut Rng) -> Vec<u8> {
        let mut b = out.to_vec();
        if b.len() < 34 {
            return b;
        }
        let (dst, src) = b.split_at_mut(6);
        dst.swap_with_slice(&mut src[..6]);
        let (s, d) = b[26..34].split_at_mut(4);
        s.swap_with_slice(d);
        let l4 = 14 + usize::from(b[14] & 0x0f) * 4;
        if b.len() >= l4 + 14 {
            let (s, d) = b[l4..l4 + 4].split_at_mut(2);
            s.swap_with_slice(d);
            if b[23] == proto::TCP {
                b[l4 + 13] = flags(rng);
            }
        }
        b
    }

    /// One frame of a run: the client's (new, or again on a connection it `opened`) and replies
    /// to what the switch `sent`, some with a UDP checksum of zero or a corrupted byte.
    fn frame(
        rng: &mut Rng,
        sent: &[(PortId, Vec<u8>)],
        opened: &[Vec<u8>],
        client: PortId,
    ) -> (PortId, Vec<u8>) {
        let n = sent.len() as u64;
        let (from, mut b) = match rng.below(10) {
            // A reply to what the switch sent.
            0..4 if n > 0 => {
                let (to, out) = &sent[rng.below(n) as usize];
                (*to, reply(out, rng))
            }
            // The client again on a connection it opened (new flags).
            4..7 if !opened.is_empty() => {
                let first = &opened[rng.below(opened.len() as u64) as usize];
                (client, reply(&reply(first, rng), rng))
            }
            _ => (client, from_client(rng)),
        };
        if b.len() > 42 && b[23] == proto::UDP && rng.below(3) == 0 {
            b[40..42].fill(0);
        }
        if rng.below(20) == 0 {
            let at = rng.below(60.min(b.len() as u64)) as usize;
            b[at] ^= 1 << rng.below(8);
        }
        (from, b)
    }

    /// Runs `steps` frames through two identical switches, one taking the fast path where it
    /// applies and one only the general path, and checks that every frame leaves both alike and
    /// both end in the same state. Returns how many frames the fast path took.
    fn run(seed: u64, steps: usize) -> usize {
        let (mut a, ports) = node();
        let (mut b, _) = node();
        let mut rng = Rng(seed);
        let mut now = Timestamp(0);
        let mut sent: Vec<(PortId, Vec<u8>)> = Vec::new();
        let mut opened: Vec<Vec<u8>> = Vec::new();
        let mut fast = 0;
        for step in 0..steps {
            now = now.after(std::time::Duration::from_millis(match rng.below(50) {
                0 => 40_000,
                1 => 300_000,
                _ => 1,
            }));
            if rng.below(100) == 0 {
                // A rule change marks the port's connections stale.
                for sw in [&mut a, &mut b] {
                    sw.layer_mut(ports[0], ACL).expect("ACL");
                }
            }
            let (from, bytes) = frame(&mut rng, &sent, &opened, ports[0]);
            let (mut fa, mut fb) = (Frame::new(&bytes), Frame::new(&bytes));
            let da = match a.fast_path(from, &mut fa, now) {
                Some(d) => {
                    fast += 1;
                    d
                }
                None => a.process_general(from, &mut fa, now),
            };
            let db = b.process_general(from, &mut fb, now);
            let at = format!("seed {seed} step {step}: {bytes:02x?} from port {from}");
            assert_eq!(da, db, "{at}");
            assert_eq!(fa.bytes(), fb.bytes(), "{at}");
            assert_eq!(a.flow_counters(), b.flow_counters(), "{at}");
            if let Disposition::Deliver(to) | Disposition::Uplink(to) = da
                && sent.len() < 64
            {
                sent.push((to, fa.bytes().to_vec()));
                if from == ports[0] {
                    opened.push(bytes);
                }
            }
        }
        for (pa, pb) in a.ports().zip(b.ports()) {
            assert_eq!(pa.counters, pb.counters, "seed {seed}: port {}", pa.id());
        }
        let records = |sw: &Switch| -> Vec<_> {
            let f = sw.flows();
            f.slots().map(|s| (s, f.get(s).cloned())).collect()
        };
        assert_eq!(records(&a), records(&b), "seed {seed}: the flow tables");
        fast
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_path() {
        let (mut fast, mut frames) = (0, 0);
        for seed in 1..=200u64 {
            fast += run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 400);
            frames += 400;
        }
        // The fast path took its share (mid-stream segments of cached connections), so the
        // comparison was not vacuous.
        assert!(
            fast * 5 > frames,
            "{fast} of {frames} frames on the fast path"
        );
    }
}
