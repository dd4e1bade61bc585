//! The Internet checksum (RFC 1071), its pseudo-headers, and incremental updates (RFC 1624).
//!
//! Sums are kept as unfolded `u32` one's-complement accumulators so that a caller can add the
//! pseudo-header and the payload separately and fold once.

use std::net::IpAddr;

/// Adds `data` to a one's-complement accumulator, as big-endian 16-bit words (odd tail padded).
/// Sums 32-bit words into a 64-bit accumulator, which cannot overflow for any real packet, and
/// folds once at the end (one's-complement sums are independent of word size).
#[inline]
pub fn sum(acc: u32, data: &[u8]) -> u32 {
    let mut wide = u64::from(acc);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        wide += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    wide += u64::from(u32::from_be_bytes(tail));
    // Fold 64 -> 32 bits twice (the first fold can carry once more).
    wide = (wide & 0xffff_ffff) + (wide >> 32);
    wide = (wide & 0xffff_ffff) + (wide >> 32);
    let v = wide as u32;
    (v & 0xffff) + (v >> 16)
}

/// Folds an accumulator to 16 bits (two folds suffice for any `u32`).
#[inline(always)]
pub fn fold(acc: u32) -> u16 {
    let acc = (acc & 0xffff) + (acc >> 16);
    ((acc & 0xffff) + (acc >> 16)) as u16
}

/// The checksum field value for data whose accumulated sum is `acc`.
pub fn finish(acc: u32) -> u16 {
    !fold(acc)
}

/// The checksum of a buffer with its checksum field zeroed (e.g. an IPv4 header).
#[inline]
pub fn compute(data: &[u8]) -> u16 {
    finish(sum(0, data))
}

/// Sum of the TCP/UDP/ICMPv6 pseudo-header (RFC 793, RFC 768, RFC 8200 §8.1).
pub fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: u32) -> u32 {
    let mut acc = 0;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum(acc, &s.octets());
            acc = sum(acc, &d.octets());
            acc = acc.wrapping_add(u32::from(proto));
            acc = acc.wrapping_add(len & 0xffff);
        }
        _ => {
            acc = sum(acc, &ip_octets(src));
            acc = sum(acc, &ip_octets(dst));
            acc = acc.wrapping_add(len >> 16).wrapping_add(len & 0xffff);
            acc = acc.wrapping_add(u32::from(proto));
        }
    }
    acc
}

/// The checksum of an L4 segment (TCP, UDP, ICMPv6) over its pseudo-header; the segment's own
/// checksum field must be zero.
pub fn l4(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> u16 {
    finish(sum(
        pseudo_header(src, dst, proto, segment.len() as u32),
        segment,
    ))
}

/// 16 bytes of an address; IPv4 addresses are not mapped, callers only use this for IPv6 sums.
fn ip_octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the covered data changed.
#[inline(always)]
pub fn update_word(check: u16, old: u16, new: u16) -> u16 {
    let acc = u32::from(!check) + u32::from(!old) + u32::from(new);
    !fold(acc)
}

/// RFC 1624 for a changed run of bytes (an address): `old` and `new` have the same even length.
#[inline(always)]
pub fn update_bytes(check: u16, old: &[u8], new: &[u8]) -> u16 {
    let mut acc = u32::from(!check);
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += u32::from(!u16::from_be_bytes([o[0], o[1]]));
        acc += u32::from(u16::from_be_bytes([n[0], n[1]]));
    }
    !fold(acc)
}

/// The one's-complement difference that turns a sum over `old` into a sum over `new`, to apply
/// the same change to several checksums (IPv4 header and L4) with one computation.
#[inline(always)]
pub fn delta(old: &[u8], new: &[u8]) -> u32 {
    let mut acc = 0u32;
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += u32::from(!u16::from_be_bytes([o[0], o[1]]));
        acc += u32::from(u16::from_be_bytes([n[0], n[1]]));
    }
    acc
}

/// `delta` for one changed 16-bit word.
#[inline(always)]
pub fn delta16(old: u16, new: u16) -> u32 {
    u32::from(!old) + u32::from(new)
}

/// `delta` for a changed IPv4 address, without a loop.
#[inline(always)]
pub fn delta_v4(old: [u8; 4], new: [u8; 4]) -> u32 {
    let (o, n) = (u32::from_be_bytes(old), u32::from_be_bytes(new));
    delta16((o >> 16) as u16, (n >> 16) as u16) + delta16(o as u16, n as u16)
}

/// Applies a `delta` to a checksum field value.
#[inline(always)]
pub fn apply_delta(check: u16, delta: u32) -> u16 {
    !fold(u32::from(!check) + fold(delta) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example_sums_to_known_value() {
        // RFC 1071 §3 example: the words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &data)), 0xddf2);
        assert_eq!(compute(&data), !0xddf2);
    }

    #[test]
    fn incremental_update_matches_recomputation() {
        let mut data = [
            0x45u8, 0, 0, 40, 1, 2, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let before = compute(&data);
        let old = [10, 0, 0, 2];
        let new = [192, 168, 7, 9];
        data[16..20].copy_from_slice(&new);
        assert_eq!(update_bytes(before, &old, &new), compute(&data));
        assert_eq!(apply_delta(before, delta(&old, &new)), compute(&data));
        let w_old = u16::from_be_bytes([data[4], data[5]]);
        data[4..6].copy_from_slice(&0xbeefu16.to_be_bytes());
        let after_addr = update_bytes(before, &old, &new);
        assert_eq!(update_word(after_addr, w_old, 0xbeef), compute(&data));
    }
}
