//! Frames between the switch and devices that speak the virtio-net header. A frame read with
//! a partial checksum (the sender left it to the device) keeps it partial through the switch:
//! its L4 checksum field is rewritten from the final headers on the way out, partial again
//! for a TAP, completed in software for the uplink; a large segment leaving by the uplink is
//! cut into MTU-sized packets in software (also inside VXLAN).

use host::offload::{self, F_DATA_VALID, F_NEEDS_CSUM, GSO_NONE, VNET_HDR_LEN, VnetHdr};

/// Where a frame's transport header is (inside VXLAN when the frame is encapsulated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L4At {
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the TCP/UDP header.
    pub l4: usize,
    /// IP protocol number (6 or 17).
    pub proto: u8,
    /// Offset of the checksum field within the transport header.
    pub csum: usize,
}

const ETH_LEN: usize = 14;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The IP header offset after an Ethernet header at `at` (802.1Q skipped) and its ethertype.
fn l3_after_eth(b: &[u8], at: usize) -> Option<(usize, u16)> {
    let mut t = be16(b, at + 12)?;
    let mut l3 = at + ETH_LEN;
    if t == 0x8100 {
        t = be16(b, at + 16)?;
        l3 += 4;
    }
    Some((l3, t))
}

/// The transport header after the IP header at `l3`: (offset, protocol).
fn l4_after_ip(b: &[u8], l3: usize, ethertype: u16) -> Option<(usize, u8)> {
    match ethertype {
        0x0800 => {
            let ihl = usize::from(b.get(l3)? & 0x0f) * 4;
            let frag = be16(b, l3 + 6)? & 0x3fff;
            (ihl >= 20 && frag == 0).then_some((l3 + ihl, *b.get(l3 + 9)?))
        }
        0x86dd => Some((l3 + 40, *b.get(l3 + 6)?)),
        _ => None,
    }
}

/// Finds the TCP or UDP header of `frame`, looking inside VXLAN on `vxlan_port`.
pub fn locate(frame: &[u8], vxlan_port: u16) -> Option<L4At> {
    let (l3, t) = l3_after_eth(frame, 0)?;
    let (l4, proto) = l4_after_ip(frame, l3, t)?;
    if proto == 17 && be16(frame, l4 + 2)? == vxlan_port {
        let inner = l4 + 8 + 8;
        let (il3, it) = l3_after_eth(frame, inner)?;
        let (il4, iproto) = l4_after_ip(frame, il3, it)?;
        return at(il3, il4, iproto);
    }
    at(l3, l4, proto)
}

fn at(l3: usize, l4: usize, proto: u8) -> Option<L4At> {
    let csum = match proto {
        6 => 16,
        17 => 6,
        _ => return None,
    };
    Some(L4At {
        l3,
        l4,
        proto,
        csum,
    })
}

/// Writes the pseudo-header sum (not complemented, as a sender leaving the checksum to the
/// device does) into the transport checksum field.
pub fn write_pseudo_sum(frame: &mut [u8], at: &L4At) -> Option<()> {
    let l4_len = frame.len().checked_sub(at.l4)?;
    let v4 = frame.get(at.l3)? >> 4 == 4;
    let mut sum: u64 = u64::from(at.proto);
    if v4 {
        sum += u64::from(u32::from_be_bytes(
            frame.get(at.l3 + 12..at.l3 + 16)?.try_into().ok()?,
        ));
        sum += u64::from(u32::from_be_bytes(
            frame.get(at.l3 + 16..at.l3 + 20)?.try_into().ok()?,
        ));
        // The IP length may be shorter than the frame (Ethernet padding).
        let total = usize::from(be16(frame, at.l3 + 2)?);
        let len = total.checked_sub(at.l4 - at.l3)?.min(l4_len);
        sum += len as u64;
    } else {
        for chunk in frame.get(at.l3 + 8..at.l3 + 40)?.chunks_exact(4) {
            sum += u64::from(u32::from_be_bytes(chunk.try_into().ok()?));
        }
        let payload = usize::from(be16(frame, at.l3 + 4)?);
        sum += payload.min(l4_len) as u64;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let field = at.l4 + at.csum;
    frame
        .get_mut(field..field + 2)?
        .copy_from_slice(&(sum as u16).to_be_bytes());
    Some(())
}

/// The header to write a frame to a TAP with, after the switch: a partial checksum is made
/// partial again from the final headers (the switch's incremental updates do not apply to a
/// partial sum); a complete one keeps the reader's DATA_VALID.
pub fn for_tap(read: &VnetHdr, frame: &mut [u8], vxlan_port: u16) -> [u8; VNET_HDR_LEN] {
    let mut out = VnetHdr {
        flags: read.flags & F_DATA_VALID,
        ..VnetHdr::default()
    };
    if read.needs_csum() || read.is_gso() {
        if let Some(at) = locate(frame, vxlan_port)
            && write_pseudo_sum(frame, &at).is_some()
        {
            out.flags = F_NEEDS_CSUM;
            out.csum_start = at.l4 as u16;
            out.csum_offset = at.csum as u16;
            if read.is_gso() {
                out.gso_type = read.gso_type;
                out.gso_size = read.gso_size;
                out.hdr_len = header_len(frame, &at) as u16;
            }
        } else {
            out.flags = 0;
        }
    }
    out.to_bytes()
}

fn header_len(frame: &[u8], at: &L4At) -> usize {
    match at.proto {
        6 => at.l4 + usize::from(frame.get(at.l4 + 12).map_or(5, |b| b >> 4)) * 4,
        _ => at.l4 + 8,
    }
}

/// Sends a frame out of the uplink: large segments cut in software (checksums complete),
/// partial checksums completed, everything else as it is. Returns how many packets left.
pub fn to_uplink(
    read: &VnetHdr,
    frame: &mut [u8],
    mtu: usize,
    vxlan_port: u16,
    send: &mut dyn FnMut(&[u8]),
) -> usize {
    let big = frame.len() > mtu + ETH_LEN + 4;
    if read.is_gso() && big && read.gso_size > 0 {
        let mut n = 0;
        let res = offload::segment_tcp(
            frame,
            usize::from(read.gso_size),
            Some(vxlan_port),
            &mut |seg| {
                send(seg);
                n += 1;
            },
        );
        if res.is_ok() {
            return n;
        }
        return 0;
    }
    if read.needs_csum() || read.is_gso() {
        let Some(at) = locate(frame, vxlan_port) else {
            return 0;
        };
        if write_pseudo_sum(frame, &at).is_none() {
            return 0;
        }
        let partial = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_NONE,
            csum_start: at.l4 as u16,
            csum_offset: at.csum as u16,
            ..VnetHdr::default()
        };
        if offload::complete_checksum(&partial, frame).is_err() {
            return 0;
        }
    }
    send(frame);
    1
}
