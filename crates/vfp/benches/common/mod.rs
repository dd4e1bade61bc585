//! What the switch's benches share.

use std::net::{IpAddr, Ipv4Addr};
use vfp::packet::{L4, Packet};
use vfp::wire::MacAddr;

pub fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

pub fn v4(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

/// A bare TCP segment (sequence and acknowledgement numbers 0) in an Ethernet frame.
pub fn tcp_frame(
    (src, src_port): (IpAddr, u16),
    (dst, dst_port): (IpAddr, u16),
    flags: u8,
    (src_mac, dst_mac): (MacAddr, MacAddr),
) -> Vec<u8> {
    let l4 = L4::Tcp {
        src_port,
        dst_port,
        flags,
        seq: 0,
        ack: 0,
        payload: vec![],
    };
    Packet::new(src, dst, l4)
        .frame(src_mac, dst_mac)
        .expect("a TCP segment between two addresses of one family")
}

/// `n` numbers below `modulo` from a fixed pseudo-random walk (xorshift), so that batches touch
/// flows all over the table (cache misses included), the same every run.
pub fn pick(n: usize, modulo: u32) -> Vec<u32> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(modulo)) as u32
        })
        .collect()
}
