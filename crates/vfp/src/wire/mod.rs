//! Wire formats: typed views over byte buffers, in the style of smoltcp's `wire` module.
//!
//! Why hand-written views and not `etherparse`: the engine rewrites addresses and ports in place
//! and patches checksums incrementally (RFC 1624), so it needs to know the exact byte offset of
//! every field and write through `&mut [u8]` without copying headers into structs and back.
//! etherparse is built around slicing and re-serialising whole headers, which costs a copy per
//! rewrite on the fast path. These views are a few accessors each, never panic on short input
//! (`new_checked` validates lengths once, accessors then index within the checked bounds), and
//! each has a `Repr` with `parse`/`emit` for building and testing frames.

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod vxlan;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
pub use icmpv4::{Icmpv4Packet, Icmpv4Repr};
pub use icmpv6::{Icmpv6Packet, Icmpv6Repr};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use tcp::{TcpFlags, TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};
pub use vxlan::{VXLAN_PORT, VxlanPacket, VxlanRepr};

use std::fmt;

/// IP protocol numbers the engine knows by name (IANA "Assigned Internet Protocol Numbers").
pub mod proto {
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// IGMP.
    pub const IGMP: u8 = 2;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 hop-by-hop options extension header.
    pub const HOP_BY_HOP: u8 = 0;
    /// IPv6 routing extension header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment extension header.
    pub const FRAGMENT: u8 = 44;
    /// IPv6 destination options extension header.
    pub const DEST_OPTS: u8 = 60;
    /// IPv6 authentication header (its length is counted in 4-octet units).
    pub const AUTH: u8 = 51;
    /// "No next header" (IPv6).
    pub const NO_NEXT: u8 = 59;
}

/// Why a buffer could not be read as the header that was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The buffer ends before the header (or a length it declares) does.
    Truncated,
    /// A field holds a value the format does not allow (version, header length, ...).
    Malformed,
    /// The header is well formed but of a kind this parser does not handle.
    Unsupported,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "truncated: the buffer ends inside a header",
            WireError::Malformed => "malformed: a header field holds an impossible value",
            WireError::Unsupported => "unsupported header kind",
        })
    }
}

impl std::error::Error for WireError {}

/// Reads a big-endian u16 at `off`; callers have checked the bounds in `new_checked`.
#[inline(always)]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Reads a big-endian u32 at `off`; callers have checked the bounds in `new_checked`.
#[inline(always)]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Writes a big-endian u16 at `off`.
#[inline(always)]
pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32 at `off`.
#[inline(always)]
pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Returns `Truncated` unless `buf` holds at least `len` bytes.
#[inline(always)]
pub(crate) fn need(buf: &[u8], len: usize) -> Result<(), WireError> {
    if buf.len() < len {
        Err(WireError::Truncated)
    } else {
        Ok(())
    }
}
