//! The virtio-net offload header, and the software offloads it implies.
//!
//! TAPs opened with `IFF_VNET_HDR` and AF_PACKET sockets with `PACKET_VNET_HDR` prefix every
//! frame with a 10-byte [`VnetHdr`]. With TCP offloads enabled a frame may be a TCP segment of up
//! to ~64 KB whose L4 checksum is only partial ([`F_NEEDS_CSUM`]). The switch patches checksums
//! incrementally (RFC 1624), which needs complete ones, so [`complete_checksum`] finishes them
//! first; frames that must leave as MTU-sized packets (VXLAN-encapsulated large frames) are cut
//! by [`segment_tcp`].
//!
//! Everything here is pure: no I/O, no allocation beyond one buffer per [`segment_tcp`] call.

use thiserror::Error;

/// Size of `struct virtio_net_hdr` (without `num_buffers`), as set with `TUNSETVNETHDRSZ`.
pub const VNET_HDR_LEN: usize = 10;

/// Flag: the L4 checksum is partial; the field at `csum_start + csum_offset` holds the
/// pseudo-header sum and the sum from `csum_start` to the end must be added to it.
pub const F_NEEDS_CSUM: u8 = 1;
/// Flag: the checksums of the frame are known to be good.
pub const F_DATA_VALID: u8 = 2;

/// GSO type: not a large segment.
pub const GSO_NONE: u8 = 0;
/// GSO type: TCP over IPv4, cut into `gso_size`-byte segments.
pub const GSO_TCPV4: u8 = 1;
/// GSO type: UDP fragmentation offload (UFO).
pub const GSO_UDP: u8 = 3;
/// GSO type: TCP over IPv6, cut into `gso_size`-byte segments.
pub const GSO_TCPV6: u8 = 4;
/// GSO type: UDP segmentation offload (USO).
pub const GSO_UDP_L4: u8 = 5;
/// GSO type bit: the TCP segment carries ECN (CWR must appear on the first segment only).
pub const GSO_ECN: u8 = 0x80;

/// Offset of the checksum field in a UDP header; a UDP checksum of 0 means "none".
const UDP_CSUM_OFFSET: u16 = 6;

const ETH_HDR_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const IPV4_MIN_HDR_LEN: usize = 20;
const IPV6_HDR_LEN: usize = 40;
const TCP_MIN_HDR_LEN: usize = 20;
const UDP_HDR_LEN: usize = 8;
const VXLAN_HDR_LEN: usize = 8;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
/// At most this many stacked VLAN tags (802.1ad service tag + 802.1Q customer tag).
const MAX_VLAN_TAGS: usize = 2;

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Why a virtio-net header could not be read, a checksum completed or a frame segmented.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum OffloadError {
    /// Fewer bytes than a virtio-net header.
    #[error(
        "virtio-net header needs {VNET_HDR_LEN} bytes but only {len} were given; \
         was the device opened without IFF_VNET_HDR / PACKET_VNET_HDR?"
    )]
    ShortVnetHeader {
        /// Bytes available.
        len: usize,
    },
    /// The checksum field named by the header lies outside the frame.
    #[error(
        "checksum field out of range: csum_start {csum_start} + csum_offset {csum_offset} \
         (+2 bytes) does not fit in the {frame_len}-byte frame"
    )]
    ChecksumOutOfRange {
        /// `csum_start` from the header.
        csum_start: u16,
        /// `csum_offset` from the header.
        csum_offset: u16,
        /// Length of the frame after the virtio-net header.
        frame_len: usize,
    },
    /// A header runs past the end of the frame (or of the packet that contains it).
    #[error(
        "frame truncated: the {what} at byte {offset} needs {needed} bytes but only {available} remain"
    )]
    Truncated {
        /// Which header.
        what: &'static str,
        /// Where it starts in the frame.
        offset: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left from `offset`.
        available: usize,
    },
    /// The Ethernet frame carries neither IPv4 nor IPv6.
    #[error("EtherType {0:#06x} is neither IPv4 nor IPv6; only TCP over IP can be segmented")]
    UnsupportedEtherType(u16),
    /// The IP version nibble does not match the EtherType.
    #[error("IP version {found} in a frame whose EtherType says IPv{expected}")]
    BadIpVersion {
        /// Version the EtherType announced.
        expected: u8,
        /// Version found in the header.
        found: u8,
    },
    /// A length field is smaller than the header it belongs to.
    #[error("{what} length {declared} is shorter than its {header}-byte header")]
    LengthBelowHeader {
        /// Which length field.
        what: &'static str,
        /// Value of the field, in bytes.
        declared: usize,
        /// Minimum the header requires.
        header: usize,
    },
    /// A length field claims more bytes than the frame holds.
    #[error("{what} length {declared} exceeds the {available} bytes present")]
    LengthBeyondData {
        /// Which length field.
        what: &'static str,
        /// Value of the field, in bytes.
        declared: usize,
        /// Bytes actually present.
        available: usize,
    },
    /// An IPv4 fragment, which has no complete TCP segment to cut.
    #[error(
        "IPv4 fragment (offset {offset} bytes, more fragments: {more}) cannot be segmented; \
         reassemble it first"
    )]
    Fragment {
        /// Fragment offset in bytes.
        offset: usize,
        /// The more-fragments flag.
        more: bool,
    },
    /// The (inner) IP packet is not TCP.
    #[error(
        "IP protocol {0} is not TCP (nor UDP to the VXLAN port); only TCP can be segmented, \
         and IPv6 extension headers are not supported"
    )]
    NotTcp(u8),
    /// `segment_tcp` was asked for zero-byte segments.
    #[error("mss must be at least 1 byte")]
    ZeroMss,
}

/// `struct virtio_net_hdr`: how the kernel and a TAP or packet socket tell each other about
/// offloads of one frame. All fields are little-endian on the wire (virtio 1.0, and legacy on
/// little-endian hosts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// [`F_NEEDS_CSUM`], [`F_DATA_VALID`].
    pub flags: u8,
    /// One of the `GSO_*` types, possibly with [`GSO_ECN`].
    pub gso_type: u8,
    /// Length of the headers (Ethernet to L4) copied onto each segment.
    pub hdr_len: u16,
    /// L4 payload bytes per segment.
    pub gso_size: u16,
    /// Where the partially checksummed region starts (from the Ethernet header).
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start` (16 for TCP, 6 for UDP).
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header from the first [`VNET_HDR_LEN`] bytes of `buf`; the frame follows it.
    pub fn parse(buf: &[u8]) -> Result<VnetHdr, OffloadError> {
        let b: &[u8; VNET_HDR_LEN] = buf
            .get(..VNET_HDR_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(OffloadError::ShortVnetHeader { len: buf.len() })?;
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Ok(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        })
    }

    /// Writes the header in wire format.
    pub fn emit(&self, out: &mut [u8; VNET_HDR_LEN]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }

    /// The header in wire format.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut out = [0; VNET_HDR_LEN];
        self.emit(&mut out);
        out
    }

    /// True when the frame is a large segment that the receiver must cut (ECN bit aside).
    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }

    /// True when the L4 checksum is partial and must be completed before the frame is changed
    /// or leaves through a device that will not complete it.
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }
}

/// Adds two ones'-complement partial sums (end-around carry).
#[inline]
fn add(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + u64::from(carry)
}

/// Folds a ones'-complement partial sum to 16 bits, without complementing it.
pub fn fold(sum: u64) -> u16 {
    let s = (sum & 0xFFFF_FFFF) + (sum >> 32); // < 2^33
    let s = (s & 0xFFFF) + (s >> 16); // < 2^17 + 2^16
    let s = (s & 0xFFFF) + (s >> 16); // <= 0x1_0001
    let s = (s & 0xFFFF) + (s >> 16); // <= 0xFFFF
    s as u16
}

/// The RFC 1071 ones'-complement sum of `data` (taken as big-endian 16-bit words, an odd last
/// byte padded with zero) added to `initial`, as an unfolded partial sum: pass it to [`fold`],
/// or as `initial` to the next call for data that follows at an even offset.
pub fn sum(data: &[u8], initial: u64) -> u64 {
    // The sum is byte-order independent (RFC 1071 §2(B)): add native-endian 64-bit words in
    // four independent carry chains, and swap the folded result into network order.
    let mut lanes = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for block in &mut blocks {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = add(
                *lane,
                u64::from_ne_bytes(word.try_into().unwrap_or_default()),
            );
        }
    }
    let mut native = lanes.into_iter().fold(0, add);
    let mut words = blocks.remainder().chunks_exact(8);
    for word in &mut words {
        native = add(
            native,
            u64::from_ne_bytes(word.try_into().unwrap_or_default()),
        );
    }
    let mut acc = u64::from(u16::from_be(fold(native)));
    let mut pairs = words.remainder().chunks_exact(2);
    for pair in &mut pairs {
        acc += u64::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    add(acc, initial)
}

/// The Internet checksum of `data` with `initial` (e.g. a pseudo-header sum) added: the
/// complement of the folded [`sum`], ready to be stored big-endian in a checksum field.
pub fn checksum(data: &[u8], initial: u64) -> u16 {
    !fold(sum(data, initial))
}

/// Completes a partial L4 checksum in `frame` (the Ethernet frame after the virtio-net header).
///
/// When `hdr` has [`F_NEEDS_CSUM`], the field at `csum_start + csum_offset` holds the
/// pseudo-header sum, as the kernel leaves it; the sum of `frame[csum_start..]` is folded,
/// complemented and stored there (a UDP result of 0 is stored as 0xFFFF, since 0 means "no
/// checksum"). The returned header has [`F_NEEDS_CSUM`] cleared and [`F_DATA_VALID`] set; the
/// GSO fields and the (now unused) checksum offsets are kept. Without [`F_NEEDS_CSUM`], `hdr` is
/// returned unchanged and the frame is not touched; on error neither is it.
pub fn complete_checksum(hdr: &VnetHdr, frame: &mut [u8]) -> Result<VnetHdr, OffloadError> {
    if !hdr.needs_csum() {
        return Ok(*hdr);
    }
    let start = usize::from(hdr.csum_start);
    let field = start + usize::from(hdr.csum_offset);
    if field + 2 > frame.len() {
        return Err(OffloadError::ChecksumOutOfRange {
            csum_start: hdr.csum_start,
            csum_offset: hdr.csum_offset,
            frame_len: frame.len(),
        });
    }
    let mut c = checksum(&frame[start..], 0);
    if c == 0 && hdr.csum_offset == UDP_CSUM_OFFSET {
        c = 0xFFFF;
    }
    put16(frame, field, c);
    Ok(VnetHdr {
        flags: (hdr.flags & !F_NEEDS_CSUM) | F_DATA_VALID,
        ..*hdr
    })
}

/// An IPv4 or IPv6 header found in a frame.
#[derive(Clone, Copy, Debug)]
struct IpHeader {
    /// Offset of the header in the frame.
    off: usize,
    /// Header length (40 for IPv6, no extension headers).
    len: usize,
    v6: bool,
    /// Protocol / next header.
    proto: u8,
    /// Offset just past the packet, from its length field.
    end: usize,
}

/// The outer headers of a VXLAN-encapsulated frame.
#[derive(Clone, Copy, Debug)]
struct Outer {
    ip: IpHeader,
    /// Offset of the UDP header.
    udp: usize,
    /// Offset just past the UDP datagram, from its length field.
    udp_end: usize,
}

/// Where the headers of a TCP frame (plain or VXLAN-encapsulated) lie.
#[derive(Clone, Copy, Debug)]
struct TcpLayout {
    outer: Option<Outer>,
    ip: IpHeader,
    /// Offset of the TCP header.
    tcp: usize,
    /// Offset of the TCP payload: everything before it is copied onto each segment.
    payload: usize,
}

impl TcpLayout {
    fn payload_len(&self) -> usize {
        self.ip.end - self.payload
    }
}

/// Cuts the TCP payload of `frame` into segments of at most `mss` bytes and calls `emit` with
/// each resulting Ethernet frame, in order; returns how many there were.
///
/// `frame` is an Ethernet frame (up to two VLAN tags) carrying TCP over IPv4 or IPv6 (no
/// extension headers, no fragments), or — when its UDP destination port is `vxlan_port` — a
/// VXLAN encapsulation of such a frame over IPv4 or IPv6. Its checksums may be complete,
/// partial or wrong. Each segment gets the headers copied, the IP length fields (inner and
/// outer) and the UDP length rewritten, IPv4 IDs advanced by the segment index, the sequence
/// number advanced, FIN and PSH on the last segment only and CWR on the first only, and every
/// checksum computed in full: IPv4 headers, TCP (with its pseudo-header), and the outer UDP over
/// IPv6. The outer UDP checksum over IPv4 is 0, as RFC 7348 allows for VXLAN.
///
/// A frame whose payload already fits in `mss` is emitted once as it is (Ethernet padding
/// included), with the same checksums made complete. A frame that cannot be parsed, or an `mss`
/// of 0, is an error, and `emit` is not called.
pub fn segment_tcp(
    frame: &[u8],
    mss: usize,
    vxlan_port: Option<u16>,
    emit: &mut dyn FnMut(&[u8]),
) -> Result<usize, OffloadError> {
    if mss == 0 {
        return Err(OffloadError::ZeroMss);
    }
    let layout = parse_tcp_frame(frame, vxlan_port)?;
    let payload_len = layout.payload_len();
    if payload_len <= mss {
        let mut buf = frame.to_vec();
        let udp_end = layout.outer.map_or(0, |o| o.udp_end);
        fill_checksums(&mut buf, &layout, layout.ip.end, udp_end);
        emit(&buf);
        return Ok(1);
    }
    let count = payload_len.div_ceil(mss);
    let mut buf = Vec::with_capacity(layout.payload + mss);
    for index in 0..count {
        let start = index * mss;
        let len = mss.min(payload_len - start);
        build_segment(&mut buf, frame, &layout, index, start, len);
        emit(&buf);
    }
    Ok(count)
}

/// Fills `buf` with segment `index` of `frame`: the headers, then `len` payload bytes from
/// payload offset `start`, with lengths, IDs, sequence number, flags and checksums set.
fn build_segment(
    buf: &mut Vec<u8>,
    frame: &[u8],
    l: &TcpLayout,
    index: usize,
    start: usize,
    len: usize,
) {
    let data = l.payload + start;
    buf.clear();
    buf.extend_from_slice(&frame[..l.payload]);
    buf.extend_from_slice(&frame[data..data + len]);
    let end = buf.len();
    let first = index == 0;
    let last = data + len == l.ip.end;

    set_ip_length(buf, &l.ip, end);
    advance_ipv4_id(buf, &l.ip, index);
    let seq = get32(buf, l.tcp + 4).wrapping_add(start as u32);
    buf[l.tcp + 4..l.tcp + 8].copy_from_slice(&seq.to_be_bytes());
    let flags = &mut buf[l.tcp + 13];
    if !last {
        *flags &= !(TCP_FIN | TCP_PSH);
    }
    if !first {
        *flags &= !TCP_CWR;
    }
    if let Some(o) = &l.outer {
        set_ip_length(buf, &o.ip, end);
        advance_ipv4_id(buf, &o.ip, index);
        put16(buf, o.udp + 4, (end - o.udp) as u16);
    }
    fill_checksums(buf, l, end, end);
}

/// Sets the length field of `ip` for a packet that ends at `end`.
fn set_ip_length(buf: &mut [u8], ip: &IpHeader, end: usize) {
    if ip.v6 {
        put16(buf, ip.off + 4, (end - ip.off - IPV6_HDR_LEN) as u16);
    } else {
        put16(buf, ip.off + 2, (end - ip.off) as u16);
    }
}

/// Advances the IPv4 identification by `index`, as the kernel does for TSO segments.
fn advance_ipv4_id(buf: &mut [u8], ip: &IpHeader, index: usize) {
    if !ip.v6 {
        let id = get16(buf, ip.off + 4).wrapping_add(index as u16);
        put16(buf, ip.off + 4, id);
    }
}

/// Computes every checksum of a frame laid out as `l`, whose inner IP packet ends at `ip_end`
/// and (if encapsulated) whose outer UDP datagram ends at `udp_end`. Inner first: the outer UDP
/// checksum covers the inner packet.
fn fill_checksums(buf: &mut [u8], l: &TcpLayout, ip_end: usize, udp_end: usize) {
    fill_ipv4_checksum(buf, &l.ip);
    let tcp_csum = l.tcp + 16;
    put16(buf, tcp_csum, 0);
    let pseudo = pseudo_header_sum(buf, &l.ip, PROTO_TCP, ip_end - l.tcp);
    let c = checksum(&buf[l.tcp..ip_end], pseudo);
    put16(buf, tcp_csum, c);

    if let Some(o) = &l.outer {
        fill_ipv4_checksum(buf, &o.ip);
        let udp_csum = o.udp + 6;
        put16(buf, udp_csum, 0);
        if o.ip.v6 {
            // Over IPv6 a UDP checksum is mandatory (RFC 8200 §8.1; RFC 6935 aside).
            let pseudo = pseudo_header_sum(buf, &o.ip, PROTO_UDP, udp_end - o.udp);
            let c = checksum(&buf[o.udp..udp_end], pseudo);
            put16(buf, udp_csum, if c == 0 { 0xFFFF } else { c });
        }
    }
}

/// Recomputes the header checksum of an IPv4 header; IPv6 has none.
fn fill_ipv4_checksum(buf: &mut [u8], ip: &IpHeader) {
    if !ip.v6 {
        put16(buf, ip.off + 10, 0);
        let c = checksum(&buf[ip.off..ip.off + ip.len], 0);
        put16(buf, ip.off + 10, c);
    }
}

/// The sum of the IPv4 or IPv6 pseudo-header of an upper-layer packet of `len` bytes.
fn pseudo_header_sum(buf: &[u8], ip: &IpHeader, proto: u8, len: usize) -> u64 {
    // Source and destination are adjacent: 12..20 in IPv4, 8..40 in IPv6.
    let addrs = if ip.v6 {
        &buf[ip.off + 8..ip.off + 40]
    } else {
        &buf[ip.off + 12..ip.off + 20]
    };
    sum(addrs, u64::from(proto) + len as u64)
}

/// Finds the headers of a plain or VXLAN-encapsulated TCP frame, checking every length.
fn parse_tcp_frame(frame: &[u8], vxlan_port: Option<u16>) -> Result<TcpLayout, OffloadError> {
    let ip = parse_ip(frame, 0, frame.len())?;
    let (outer, ip) = match (ip.proto, vxlan_port) {
        (PROTO_TCP, _) => (None, ip),
        (PROTO_UDP, Some(port)) => {
            let udp = ip.off + ip.len;
            need(ip.end, udp, UDP_HDR_LEN, "outer UDP header")?;
            if get16(frame, udp + 2) != port {
                return Err(OffloadError::NotTcp(PROTO_UDP));
            }
            let udp_len = usize::from(get16(frame, udp + 4));
            check_length("outer UDP", udp_len, UDP_HDR_LEN, ip.end - udp)?;
            let udp_end = udp + udp_len;
            let vxlan = udp + UDP_HDR_LEN;
            need(udp_end, vxlan, VXLAN_HDR_LEN, "VXLAN header")?;
            let inner = parse_ip(frame, vxlan + VXLAN_HDR_LEN, udp_end)?;
            if inner.proto != PROTO_TCP {
                return Err(OffloadError::NotTcp(inner.proto));
            }
            (Some(Outer { ip, udp, udp_end }), inner)
        }
        (proto, _) => return Err(OffloadError::NotTcp(proto)),
    };
    let tcp = ip.off + ip.len;
    need(ip.end, tcp, TCP_MIN_HDR_LEN, "TCP header")?;
    let data_offset = usize::from(frame[tcp + 12] >> 4) * 4;
    if data_offset < TCP_MIN_HDR_LEN {
        return Err(OffloadError::LengthBelowHeader {
            what: "TCP data offset",
            declared: data_offset,
            header: TCP_MIN_HDR_LEN,
        });
    }
    need(ip.end, tcp, data_offset, "TCP header with options")?;
    Ok(TcpLayout {
        outer,
        ip,
        tcp,
        payload: tcp + data_offset,
    })
}

/// Parses the Ethernet header (and VLAN tags) at `off`, then the IP header after it; the
/// Ethernet frame ends at `limit`.
fn parse_ip(frame: &[u8], off: usize, limit: usize) -> Result<IpHeader, OffloadError> {
    need(limit, off, ETH_HDR_LEN, "Ethernet header")?;
    let mut ethertype_at = off + 12;
    let mut ethertype = get16(frame, ethertype_at);
    for _ in 0..MAX_VLAN_TAGS {
        if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
            break;
        }
        need(limit, ethertype_at + 2, VLAN_TAG_LEN, "VLAN tag")?;
        ethertype_at += VLAN_TAG_LEN;
        ethertype = get16(frame, ethertype_at);
    }
    let ip = ethertype_at + 2;
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(frame, ip, limit),
        ETHERTYPE_IPV6 => parse_ipv6(frame, ip, limit),
        other => Err(OffloadError::UnsupportedEtherType(other)),
    }
}

fn parse_ipv4(frame: &[u8], off: usize, limit: usize) -> Result<IpHeader, OffloadError> {
    need(limit, off, IPV4_MIN_HDR_LEN, "IPv4 header")?;
    let version = frame[off] >> 4;
    if version != 4 {
        return Err(OffloadError::BadIpVersion {
            expected: 4,
            found: version,
        });
    }
    let len = usize::from(frame[off] & 0x0F) * 4;
    if len < IPV4_MIN_HDR_LEN {
        return Err(OffloadError::LengthBelowHeader {
            what: "IPv4 header",
            declared: len,
            header: IPV4_MIN_HDR_LEN,
        });
    }
    need(limit, off, len, "IPv4 header with options")?;
    let total = usize::from(get16(frame, off + 2));
    check_length("IPv4 total", total, len, limit - off)?;
    let frag = get16(frame, off + 6);
    let (more, offset) = (frag & 0x2000 != 0, usize::from(frag & 0x1FFF) * 8);
    if more || offset != 0 {
        return Err(OffloadError::Fragment { offset, more });
    }
    Ok(IpHeader {
        off,
        len,
        v6: false,
        proto: frame[off + 9],
        end: off + total,
    })
}

fn parse_ipv6(frame: &[u8], off: usize, limit: usize) -> Result<IpHeader, OffloadError> {
    need(limit, off, IPV6_HDR_LEN, "IPv6 header")?;
    let version = frame[off] >> 4;
    if version != 6 {
        return Err(OffloadError::BadIpVersion {
            expected: 6,
            found: version,
        });
    }
    let payload = usize::from(get16(frame, off + 4));
    check_length("IPv6 payload", payload, 0, limit - off - IPV6_HDR_LEN)?;
    Ok(IpHeader {
        off,
        len: IPV6_HDR_LEN,
        v6: true,
        proto: frame[off + 6],
        end: off + IPV6_HDR_LEN + payload,
    })
}

/// Checks that `needed` bytes from `off` lie before `limit`.
fn need(limit: usize, off: usize, needed: usize, what: &'static str) -> Result<(), OffloadError> {
    let available = limit.saturating_sub(off);
    if needed > available {
        return Err(OffloadError::Truncated {
            what,
            offset: off,
            needed,
            available,
        });
    }
    Ok(())
}

/// Checks a length field against its header's size and the bytes present.
fn check_length(
    what: &'static str,
    declared: usize,
    header: usize,
    available: usize,
) -> Result<(), OffloadError> {
    if declared < header {
        return Err(OffloadError::LengthBelowHeader {
            what,
            declared,
            header,
        });
    }
    if declared > available {
        return Err(OffloadError::LengthBeyondData {
            what,
            declared,
            available,
        });
    }
    Ok(())
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
