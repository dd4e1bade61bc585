//! The virtio-net header, checksum completion and TCP segmentation, checked against a
//! straightforward RFC 1071 implementation and frames built by hand.

// In a module so that `cargo test -p host offload` selects these tests by name.
mod offload {
    use host::offload::{
        F_DATA_VALID, F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4,
        OffloadError, VNET_HDR_LEN, VnetHdr, checksum, complete_checksum, fold, segment_tcp, sum,
    };
    use proptest::prelude::*;

    // ---- an independent, deliberately naive RFC 1071 implementation ----

    /// Sum of big-endian 16-bit words, an odd last byte padded with zero; not folded.
    fn naive_sum(data: &[u8]) -> u64 {
        let mut s = 0u64;
        let mut i = 0;
        while i < data.len() {
            let hi = u64::from(data[i]);
            let lo = if i + 1 < data.len() {
                u64::from(data[i + 1])
            } else {
                0
            };
            s += (hi << 8) | lo;
            i += 2;
        }
        s
    }

    fn naive_fold(mut s: u64) -> u16 {
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        s as u16
    }

    /// True when `data` (checksum field included) sums to all ones, i.e. its checksum is right.
    fn naive_verify(data: &[u8]) -> bool {
        naive_fold(naive_sum(data)) == 0xFFFF
    }

    fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: usize) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.push(0);
        p.push(proto);
        p.extend_from_slice(&(len as u16).to_be_bytes());
        p
    }

    fn pseudo_v6(src: [u8; 16], dst: [u8; 16], proto: u8, len: usize) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&(len as u32).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, proto]);
        p
    }

    /// Verifies an L4 checksum: pseudo-header followed by the L4 packet must sum to all ones.
    fn naive_verify_l4(pseudo: &[u8], l4: &[u8]) -> bool {
        let mut all = pseudo.to_vec();
        all.extend_from_slice(l4);
        naive_verify(&all)
    }

    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect()
    }

    // ---- frames built by hand ----

    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0A];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0B];
    const V4_SRC: [u8; 4] = [10, 244, 1, 5];
    const V4_DST: [u8; 4] = [10, 244, 2, 7];
    const V4_OUTER_SRC: [u8; 4] = [192, 168, 0, 1];
    const V4_OUTER_DST: [u8; 4] = [192, 168, 0, 2];
    const V6_SRC: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5];
    const V6_DST: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 7];
    const V6_OUTER_SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const V6_OUTER_DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    const VXLAN_PORT: u16 = 4789;
    const SEQ: u32 = 0xFFFF_F000; // wraps during a 20,000-byte segmentation
    const ACK: u32 = 0x1234_5678;
    const IPV4_ID: u16 = 0xFFF0; // wraps too
    const OUTER_IPV4_ID: u16 = 0x7FFE;
    const TCP_HDR_LEN: usize = 32; // with a timestamp option, as Linux sends

    const FIN: u8 = 0x01;
    const PSH: u8 = 0x08;
    const ACK_FLAG: u8 = 0x10;
    const ECE: u8 = 0x40;
    const CWR: u8 = 0x80;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Family {
        V4,
        V6,
    }

    impl Family {
        fn hdr_len(self) -> usize {
            match self {
                Family::V4 => 20,
                Family::V6 => 40,
            }
        }
    }

    /// How a test frame is put together: TCP over `inner`, optionally VXLAN over `outer`.
    #[derive(Clone, Copy, Debug)]
    struct Shape {
        outer: Option<Family>,
        inner: Family,
        vlan: bool,
    }

    const PLAIN_V4: Shape = Shape {
        outer: None,
        inner: Family::V4,
        vlan: false,
    };
    const PLAIN_V6: Shape = Shape {
        outer: None,
        inner: Family::V6,
        vlan: false,
    };
    const VXLAN_V4: Shape = Shape {
        outer: Some(Family::V4),
        inner: Family::V4,
        vlan: false,
    };
    const VXLAN_V6: Shape = Shape {
        outer: Some(Family::V6),
        inner: Family::V6,
        vlan: false,
    };
    const VLAN_V4: Shape = Shape {
        outer: None,
        inner: Family::V4,
        vlan: true,
    };

    /// Byte offsets of the headers of a frame of a given shape.
    #[derive(Clone, Copy, Debug)]
    struct Offsets {
        outer_ip: usize,
        udp: usize,
        ip: usize,
        tcp: usize,
        payload: usize,
    }

    impl Shape {
        fn offsets(self) -> Offsets {
            let eth = if self.vlan { 18 } else { 14 };
            let (outer_ip, udp, ip) = match self.outer {
                None => (0, 0, eth),
                Some(f) => {
                    let udp = eth + f.hdr_len();
                    (eth, udp, udp + 8 + 8 + 14)
                }
            };
            let tcp = ip + self.inner.hdr_len();
            Offsets {
                outer_ip,
                udp,
                ip,
                tcp,
                payload: tcp + TCP_HDR_LEN,
            }
        }

        fn vxlan_port(self) -> Option<u16> {
            self.outer.map(|_| VXLAN_PORT)
        }
    }

    fn ethernet(ethertype: u16, vlan: bool) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&MAC_B);
        f.extend_from_slice(&MAC_A);
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x2A]);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    fn ipv4_header(proto: u8, payload_len: usize, id: u16, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut h = vec![0x45, 0x02]; // ECT(0)
        h.extend_from_slice(&((20 + payload_len) as u16).to_be_bytes());
        h.extend_from_slice(&id.to_be_bytes());
        h.extend_from_slice(&[0x40, 0x00, 64, proto, 0, 0]); // DF
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        let c = !naive_fold(naive_sum(&h));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    fn ipv6_header(next: u8, payload_len: usize, src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
        let mut h = vec![0x60, 0x01, 0x23, 0x45];
        h.extend_from_slice(&(payload_len as u16).to_be_bytes());
        h.extend_from_slice(&[next, 64]);
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h
    }

    /// A TCP segment with a timestamp option and a zero checksum.
    fn tcp_segment(flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend_from_slice(&40_000u16.to_be_bytes());
        t.extend_from_slice(&8080u16.to_be_bytes());
        t.extend_from_slice(&SEQ.to_be_bytes());
        t.extend_from_slice(&ACK.to_be_bytes());
        t.push(((TCP_HDR_LEN / 4) as u8) << 4);
        t.push(flags);
        t.extend_from_slice(&502u16.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
        t.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        t.extend_from_slice(payload);
        t
    }

    /// How the TCP checksum of a built frame is left.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Csum {
        /// The pseudo-header sum, as the kernel leaves it with CHECKSUM_PARTIAL.
        Partial,
        /// Correct.
        Complete,
    }

    /// An IP packet carrying `l4` with protocol `proto`, the L4 checksum field at `csum_at` in
    /// `l4` set as `csum` says.
    fn ip_packet(
        family: Family,
        outer: bool,
        proto: u8,
        mut l4: Vec<u8>,
        csum_at: usize,
        csum: Csum,
    ) -> Vec<u8> {
        let pseudo = match (family, outer) {
            (Family::V4, false) => pseudo_v4(V4_SRC, V4_DST, proto, l4.len()),
            (Family::V4, true) => pseudo_v4(V4_OUTER_SRC, V4_OUTER_DST, proto, l4.len()),
            (Family::V6, false) => pseudo_v6(V6_SRC, V6_DST, proto, l4.len()),
            (Family::V6, true) => pseudo_v6(V6_OUTER_SRC, V6_OUTER_DST, proto, l4.len()),
        };
        let p = naive_fold(naive_sum(&pseudo));
        let c = match csum {
            Csum::Partial => p,
            Csum::Complete => {
                let mut all = pseudo.clone();
                all.extend_from_slice(&l4);
                let c = !naive_fold(naive_sum(&all));
                if proto == 17 && c == 0 { 0xFFFF } else { c }
            }
        };
        l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        let mut ip = match (family, outer) {
            (Family::V4, false) => ipv4_header(proto, l4.len(), IPV4_ID, V4_SRC, V4_DST),
            (Family::V4, true) => {
                ipv4_header(proto, l4.len(), OUTER_IPV4_ID, V4_OUTER_SRC, V4_OUTER_DST)
            }
            (Family::V6, false) => ipv6_header(proto, l4.len(), V6_SRC, V6_DST),
            (Family::V6, true) => ipv6_header(proto, l4.len(), V6_OUTER_SRC, V6_OUTER_DST),
        };
        ip.extend_from_slice(&l4);
        ip
    }

    fn ethertype(family: Family) -> u16 {
        match family {
            Family::V4 => 0x0800,
            Family::V6 => 0x86DD,
        }
    }

    /// A frame of `shape` carrying `payload` with TCP `flags`; the TCP checksum as `csum` says, the
    /// outer UDP checksum 0 over IPv4 and complete over IPv6.
    fn build(shape: Shape, flags: u8, payload: &[u8], csum: Csum) -> Vec<u8> {
        let tcp = tcp_segment(flags, payload);
        let inner_ip = ip_packet(shape.inner, false, 6, tcp, 16, csum);
        let Some(outer) = shape.outer else {
            let mut f = ethernet(ethertype(shape.inner), shape.vlan);
            f.extend_from_slice(&inner_ip);
            return f;
        };
        let mut udp = Vec::new();
        udp.extend_from_slice(&51_000u16.to_be_bytes());
        udp.extend_from_slice(&VXLAN_PORT.to_be_bytes());
        let udp_len = 8 + 8 + 14 + inner_ip.len();
        udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(&[0x08, 0, 0, 0, 0, 0x10, 0x01, 0]); // VNI 4097
        udp.extend_from_slice(&ethernet(ethertype(shape.inner), false));
        udp.extend_from_slice(&inner_ip);
        let udp_csum = if outer == Family::V6 {
            Csum::Complete
        } else {
            Csum::Partial
        };
        let mut outer_ip = ip_packet(outer, true, 17, udp, 6, udp_csum);
        if outer == Family::V4 {
            // No outer UDP checksum over IPv4, as VXLAN senders usually do.
            let udp = Family::V4.hdr_len();
            outer_ip[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
        }
        let mut f = ethernet(ethertype(outer), shape.vlan);
        f.extend_from_slice(&outer_ip);
        f
    }

    fn collect(
        frame: &[u8],
        mss: usize,
        port: Option<u16>,
    ) -> (Result<usize, OffloadError>, Vec<Vec<u8>>) {
        let mut out = Vec::new();
        let r = segment_tcp(frame, mss, port, &mut |f| out.push(f.to_vec()));
        (r, out)
    }

    /// Zeroes the fields segmentation may change, so the rest of the headers can be compared.
    fn mask_headers(shape: Shape, frame: &[u8]) -> Vec<u8> {
        let o = shape.offsets();
        let mut h = frame[..o.payload].to_vec();
        let mut zero = |at: usize, n: usize| h[at..at + n].fill(0);
        match shape.inner {
            Family::V4 => {
                zero(o.ip + 2, 4); // total length, ID
                zero(o.ip + 10, 2);
            }
            Family::V6 => zero(o.ip + 4, 2),
        }
        zero(o.tcp + 4, 4);
        zero(o.tcp + 13, 1);
        zero(o.tcp + 16, 2);
        match shape.outer {
            Some(Family::V4) => {
                zero(o.outer_ip + 2, 4);
                zero(o.outer_ip + 10, 2);
            }
            Some(Family::V6) => zero(o.outer_ip + 4, 2),
            None => {}
        }
        if shape.outer.is_some() {
            zero(o.udp + 4, 4);
        }
        h
    }

    /// Checks every header and checksum of `segments` cut from `original` (built by [`build`] with
    /// `flags`) and returns their payloads concatenated.
    fn check_segments(
        shape: Shape,
        original: &[u8],
        flags: u8,
        mss: usize,
        segments: &[Vec<u8>],
    ) -> Vec<u8> {
        let o = shape.offsets();
        let n = segments.len();
        let mut payload = Vec::new();
        for (i, seg) in segments.iter().enumerate() {
            let last = i + 1 == n;
            assert!(seg.len() >= o.payload, "segment {i} too short");
            let chunk = seg.len() - o.payload;
            if !last {
                assert_eq!(chunk, mss, "segment {i} payload");
            }
            assert!(
                chunk <= mss && (chunk > 0 || n == 1),
                "segment {i} payload {chunk}"
            );
            assert_eq!(
                mask_headers(shape, seg),
                mask_headers(shape, original),
                "segment {i} headers"
            );

            // Inner IP.
            match shape.inner {
                Family::V4 => {
                    assert_eq!(
                        usize::from(be16(seg, o.ip + 2)),
                        20 + TCP_HDR_LEN + chunk,
                        "segment {i} IPv4 length"
                    );
                    assert_eq!(
                        be16(seg, o.ip + 4),
                        IPV4_ID.wrapping_add(i as u16),
                        "segment {i} IPv4 ID"
                    );
                    assert!(
                        naive_verify(&seg[o.ip..o.ip + 20]),
                        "segment {i} IPv4 header checksum"
                    );
                }
                Family::V6 => {
                    assert_eq!(
                        usize::from(be16(seg, o.ip + 4)),
                        TCP_HDR_LEN + chunk,
                        "segment {i} IPv6 length"
                    );
                }
            }

            // TCP.
            assert_eq!(
                be32(seg, o.tcp + 4),
                SEQ.wrapping_add((i * mss) as u32),
                "segment {i} seq"
            );
            assert_eq!(be32(seg, o.tcp + 8), ACK, "segment {i} ack");
            let mut want = flags & !(FIN | PSH | CWR);
            if i == 0 {
                want |= flags & CWR;
            }
            if last {
                want |= flags & (FIN | PSH);
            }
            assert_eq!(seg[o.tcp + 13], want, "segment {i} flags");
            let tcp_len = TCP_HDR_LEN + chunk;
            let pseudo = match shape.inner {
                Family::V4 => pseudo_v4(V4_SRC, V4_DST, 6, tcp_len),
                Family::V6 => pseudo_v6(V6_SRC, V6_DST, 6, tcp_len),
            };
            assert!(
                naive_verify_l4(&pseudo, &seg[o.tcp..]),
                "segment {i} TCP checksum"
            );

            // Outer IP and UDP.
            if let Some(outer) = shape.outer {
                let udp_len = seg.len() - o.udp;
                assert_eq!(
                    usize::from(be16(seg, o.udp + 4)),
                    udp_len,
                    "segment {i} UDP length"
                );
                match outer {
                    Family::V4 => {
                        assert_eq!(
                            usize::from(be16(seg, o.outer_ip + 2)),
                            seg.len() - o.outer_ip,
                            "segment {i} outer IPv4 length"
                        );
                        assert_eq!(
                            be16(seg, o.outer_ip + 4),
                            OUTER_IPV4_ID.wrapping_add(i as u16),
                            "segment {i} outer ID"
                        );
                        assert!(
                            naive_verify(&seg[o.outer_ip..o.outer_ip + 20]),
                            "segment {i} outer IPv4 header checksum"
                        );
                        assert_eq!(
                            be16(seg, o.udp + 6),
                            0,
                            "segment {i} outer UDP checksum over IPv4"
                        );
                    }
                    Family::V6 => {
                        assert_eq!(
                            usize::from(be16(seg, o.outer_ip + 4)),
                            udp_len,
                            "segment {i} outer IPv6 length"
                        );
                        assert_ne!(
                            be16(seg, o.udp + 6),
                            0,
                            "segment {i} outer UDP checksum over IPv6"
                        );
                        let pseudo = pseudo_v6(V6_OUTER_SRC, V6_OUTER_DST, 17, udp_len);
                        assert!(
                            naive_verify_l4(&pseudo, &seg[o.udp..]),
                            "segment {i} outer UDP checksum"
                        );
                    }
                }
            }
            payload.extend_from_slice(&seg[o.payload..]);
        }
        payload
    }

    // ---- the virtio-net header ----

    #[test]
    fn vnet_header_parse_emit_round_trip() {
        let wire = [
            F_NEEDS_CSUM,
            GSO_TCPV4 | GSO_ECN,
            66,
            0,
            0xA8,
            0x05,
            34,
            0,
            16,
            0,
            0xEE,
        ];
        let h = VnetHdr::parse(&wire).unwrap();
        assert_eq!(
            h,
            VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_TCPV4 | GSO_ECN,
                hdr_len: 66,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
            }
        );
        assert!(h.is_gso());
        assert!(h.needs_csum());
        assert_eq!(h.to_bytes()[..], wire[..VNET_HDR_LEN]);
        let mut out = [0xFF; VNET_HDR_LEN];
        h.emit(&mut out);
        assert_eq!(out, h.to_bytes());
        assert_eq!(VnetHdr::parse(&out).unwrap(), h);
    }

    #[test]
    fn vnet_header_gso_and_flags() {
        let ecn_only = VnetHdr {
            gso_type: GSO_NONE | GSO_ECN,
            ..VnetHdr::default()
        };
        assert!(!ecn_only.is_gso());
        assert!(!VnetHdr::default().is_gso());
        assert!(!VnetHdr::default().needs_csum());
        for t in [GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4] {
            assert!(
                VnetHdr {
                    gso_type: t,
                    ..VnetHdr::default()
                }
                .is_gso()
            );
        }
        let valid = VnetHdr {
            flags: F_DATA_VALID,
            ..VnetHdr::default()
        };
        assert!(!valid.needs_csum());
    }

    #[test]
    fn vnet_header_too_short_is_an_error() {
        assert_eq!(
            VnetHdr::parse(&[0; 9]),
            Err(OffloadError::ShortVnetHeader { len: 9 })
        );
        let msg = VnetHdr::parse(&[]).unwrap_err().to_string();
        assert!(
            msg.contains("10 bytes") && msg.contains("IFF_VNET_HDR"),
            "{msg}"
        );
    }

    // ---- the checksum ----

    #[test]
    fn checksum_matches_the_naive_one_at_every_length_and_alignment() {
        let data = pattern(70_000, 7);
        for len in (0..200).chain([1499, 1500, 9000, 65_535]) {
            for start in 0..9 {
                let d = &data[start..start + len];
                assert_eq!(
                    fold(sum(d, 0)),
                    naive_fold(naive_sum(d)),
                    "len {len} start {start}"
                );
                assert_eq!(
                    checksum(d, 0),
                    !naive_fold(naive_sum(d)),
                    "len {len} start {start}"
                );
            }
        }
        for fill in [0x00, 0xFF] {
            let d = vec![fill; 65_535];
            assert_eq!(checksum(&d, 0), !naive_fold(naive_sum(&d)), "all {fill:#x}");
        }
    }

    #[test]
    fn checksum_chains_through_initial() {
        let data = pattern(3001, 3);
        let (a, b) = data.split_at(1000); // even split point
        assert_eq!(checksum(b, sum(a, 0)), checksum(&data, 0));
        assert_eq!(fold(sum(&[], u64::MAX)), fold(0xFFFF_FFFF_FFFF_FFFF));
    }

    // ---- checksum completion ----

    /// A virtio header for a frame whose L4 header starts at `l4` with the checksum at `off`.
    fn partial(l4: usize, off: u16, gso_type: u8) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            hdr_len: 0,
            gso_size: if gso_type == GSO_NONE { 0 } else { 1448 },
            csum_start: l4 as u16,
            csum_offset: off,
        }
    }

    /// Completes and checks against the naive checksum of the same frame with a zero field.
    fn complete_and_check(frame: &mut [u8], hdr: VnetHdr, pseudo: &[u8], udp: bool) {
        let l4 = usize::from(hdr.csum_start);
        let field = l4 + usize::from(hdr.csum_offset);
        let mut zeroed = pseudo.to_vec();
        zeroed.extend_from_slice(&frame[l4..]);
        zeroed[pseudo.len() + usize::from(hdr.csum_offset)..][..2].fill(0);
        let mut want = !naive_fold(naive_sum(&zeroed));
        if udp && want == 0 {
            want = 0xFFFF;
        }

        let done = complete_checksum(&hdr, frame).unwrap();
        assert_eq!(be16(frame, field), want);
        assert!(naive_verify_l4(pseudo, &frame[l4..]));
        assert_eq!(done.flags, F_DATA_VALID);
        assert!(!done.needs_csum());
        assert_eq!(
            (done.gso_type, done.gso_size, done.hdr_len),
            (hdr.gso_type, hdr.gso_size, hdr.hdr_len)
        );
    }

    #[test]
    fn completes_partial_tcp_checksum_over_ipv4() {
        for len in [0, 1, 2, 1448, 20_001] {
            let payload = pattern(len, len as u32);
            let mut f = build(PLAIN_V4, ACK_FLAG | PSH, &payload, Csum::Partial);
            let pseudo = pseudo_v4(V4_SRC, V4_DST, 6, TCP_HDR_LEN + len);
            complete_and_check(&mut f, partial(34, 16, GSO_TCPV4), &pseudo, false);
            assert_eq!(f, build(PLAIN_V4, ACK_FLAG | PSH, &payload, Csum::Complete));
        }
    }

    #[test]
    fn completes_partial_tcp_checksum_over_ipv6() {
        let payload = pattern(9001, 1);
        let mut f = build(PLAIN_V6, ACK_FLAG, &payload, Csum::Partial);
        let pseudo = pseudo_v6(V6_SRC, V6_DST, 6, TCP_HDR_LEN + payload.len());
        complete_and_check(&mut f, partial(54, 16, GSO_TCPV6), &pseudo, false);
    }

    fn udp_frame(payload: &[u8]) -> Vec<u8> {
        let mut udp = Vec::new();
        udp.extend_from_slice(&53u16.to_be_bytes());
        udp.extend_from_slice(&5353u16.to_be_bytes());
        udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(payload);
        let mut f = ethernet(0x0800, false);
        f.extend_from_slice(&ip_packet(Family::V4, false, 17, udp, 6, Csum::Partial));
        f
    }

    #[test]
    fn completes_partial_udp_checksum() {
        for len in [0, 1, 511, 4000] {
            let payload = pattern(len, 99);
            let mut f = udp_frame(&payload);
            let pseudo = pseudo_v4(V4_SRC, V4_DST, 17, 8 + len);
            complete_and_check(&mut f, partial(34, 6, GSO_NONE), &pseudo, true);
        }
    }

    #[test]
    fn udp_checksum_that_computes_to_zero_is_sent_as_all_ones() {
        // Choose the last payload word so that the data sums to all ones: the checksum is then 0.
        let mut payload = pattern(64, 5);
        payload[62..].fill(0);
        let f = udp_frame(&payload);
        let pseudo = pseudo_v4(V4_SRC, V4_DST, 17, 8 + payload.len());
        let mut all = pseudo.clone();
        all.extend_from_slice(&f[34..]);
        all[pseudo.len() + 6..][..2].fill(0);
        let s = naive_fold(naive_sum(&all));
        payload[62..].copy_from_slice(&(0xFFFF - s).to_be_bytes());
        let mut f = udp_frame(&payload);

        complete_checksum(&partial(34, 6, GSO_NONE), &mut f).unwrap();
        assert_eq!(be16(&f, 40), 0xFFFF);
        assert!(naive_verify_l4(&pseudo, &f[34..]));
    }

    #[test]
    fn complete_checksum_without_needs_csum_changes_nothing() {
        let payload = pattern(100, 2);
        let mut f = build(PLAIN_V4, ACK_FLAG, &payload, Csum::Partial);
        let before = f.clone();
        let hdr = VnetHdr {
            flags: F_DATA_VALID,
            gso_type: GSO_TCPV4,
            csum_start: 34,
            csum_offset: 16,
            ..VnetHdr::default()
        };
        assert_eq!(complete_checksum(&hdr, &mut f), Ok(hdr));
        assert_eq!(f, before);
    }

    #[test]
    fn complete_checksum_out_of_range_is_an_error_and_leaves_the_frame() {
        let mut f = build(PLAIN_V4, ACK_FLAG, b"abc", Csum::Partial);
        let before = f.clone();
        let len = f.len();
        for (start, off) in [
            (len as u16, 0),
            (len as u16 - 1, 0),
            (34, 65_000),
            (u16::MAX, u16::MAX),
        ] {
            let err =
                complete_checksum(&partial(usize::from(start), off, GSO_NONE), &mut f).unwrap_err();
            assert_eq!(
                err,
                OffloadError::ChecksumOutOfRange {
                    csum_start: start,
                    csum_offset: off,
                    frame_len: len,
                }
            );
            let msg = err.to_string();
            assert!(
                msg.contains(&start.to_string()) && msg.contains(&off.to_string()),
                "{msg}"
            );
            assert_eq!(f, before);
        }
        // The last two bytes are a valid field.
        complete_checksum(&partial(len - 2, 0, GSO_NONE), &mut f).unwrap();
    }

    // ---- segmentation ----

    fn segment_and_check(shape: Shape, payload_len: usize, mss: usize, flags: u8, csum: Csum) {
        let payload = pattern(payload_len, payload_len as u32 ^ mss as u32);
        let frame = build(shape, flags, &payload, csum);
        let (r, segments) = collect(&frame, mss, shape.vxlan_port());
        let want = payload_len.div_ceil(mss).max(1);
        assert_eq!(r, Ok(want), "{shape:?} payload {payload_len} mss {mss}");
        assert_eq!(segments.len(), want);
        let got = check_segments(shape, &frame, flags, mss, &segments);
        assert_eq!(got, payload, "{shape:?} payload {payload_len} mss {mss}");
    }

    const ALL_FLAGS: u8 = ACK_FLAG | PSH | FIN | CWR | ECE;

    #[test]
    fn segments_20000_bytes_over_ipv4() {
        segment_and_check(PLAIN_V4, 20_000, 1448, ALL_FLAGS, Csum::Partial);
    }

    #[test]
    fn segments_20000_bytes_over_ipv6() {
        segment_and_check(PLAIN_V6, 20_000, 1448, ALL_FLAGS, Csum::Partial);
    }

    #[test]
    fn segments_20000_bytes_in_vxlan_over_ipv4() {
        segment_and_check(VXLAN_V4, 20_000, 1448, ALL_FLAGS, Csum::Partial);
    }

    #[test]
    fn segments_20000_bytes_in_vxlan_over_ipv6() {
        segment_and_check(VXLAN_V6, 20_000, 1398, ALL_FLAGS, Csum::Partial);
    }

    #[test]
    fn segments_a_vlan_tagged_frame() {
        segment_and_check(VLAN_V4, 20_000, 1448, ACK_FLAG | PSH, Csum::Complete);
    }

    #[test]
    fn segments_a_64k_frame_with_a_short_last_segment() {
        segment_and_check(
            PLAIN_V4,
            65_535 - 20 - TCP_HDR_LEN,
            1448,
            ACK_FLAG | PSH,
            Csum::Partial,
        );
        segment_and_check(VXLAN_V4, 2 * 1448 + 1, 1448, ACK_FLAG, Csum::Partial);
    }

    #[test]
    fn a_frame_that_fits_is_emitted_once_with_complete_checksums() {
        for shape in [PLAIN_V4, PLAIN_V6, VXLAN_V4, VXLAN_V6, VLAN_V4] {
            for len in [0, 1, 1448] {
                let payload = pattern(len, 11);
                let partial = build(shape, ALL_FLAGS, &payload, Csum::Partial);
                let complete = build(shape, ALL_FLAGS, &payload, Csum::Complete);
                let (r, segments) = collect(&partial, 1448, shape.vxlan_port());
                assert_eq!(r, Ok(1));
                assert_eq!(segments, vec![complete.clone()], "{shape:?} {len}");
                let (_, again) = collect(&complete, 1448, shape.vxlan_port());
                assert_eq!(again, vec![complete]);
            }
        }
    }

    #[test]
    fn ethernet_padding_is_kept_when_the_frame_fits_and_dropped_from_segments() {
        // A bare ACK padded to the 60-byte Ethernet minimum.
        let mut frame = build(PLAIN_V4, ACK_FLAG, &[], Csum::Complete);
        frame.resize(frame.len() + 6, 0);
        let (r, segments) = collect(&frame, 1448, None);
        assert_eq!(r, Ok(1));
        assert_eq!(segments, vec![frame]);

        let payload = pattern(3000, 4);
        let mut frame = build(PLAIN_V4, ACK_FLAG, &payload, Csum::Complete);
        let unpadded = frame.clone();
        frame.extend_from_slice(&[0xAA; 4]);
        let (r, segments) = collect(&frame, 1000, None);
        assert_eq!(r, Ok(3));
        assert_eq!(
            check_segments(PLAIN_V4, &unpadded, ACK_FLAG, 1000, &segments),
            payload
        );
    }

    fn assert_rejected(frame: &[u8], mss: usize, port: Option<u16>) -> OffloadError {
        let (r, segments) = collect(frame, mss, port);
        assert!(
            segments.is_empty(),
            "emitted {} frames before failing",
            segments.len()
        );
        r.unwrap_err()
    }

    #[test]
    fn bad_frames_are_rejected_without_emitting() {
        let payload = pattern(5000, 8);
        let good = build(PLAIN_V4, ACK_FLAG, &payload, Csum::Partial);

        assert_eq!(assert_rejected(&good, 0, None), OffloadError::ZeroMss);
        assert!(matches!(
            assert_rejected(&good[..10], 1448, None),
            OffloadError::Truncated {
                what: "Ethernet header",
                ..
            }
        ));
        assert!(matches!(
            assert_rejected(&good[..30], 1448, None),
            OffloadError::Truncated {
                what: "IPv4 header",
                ..
            }
        ));
        assert!(matches!(
            assert_rejected(&good[..50], 1448, None),
            OffloadError::LengthBeyondData {
                what: "IPv4 total",
                ..
            }
        ));

        let mut f = good.clone();
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            assert_rejected(&f, 1448, None),
            OffloadError::UnsupportedEtherType(0x0806)
        );

        let mut f = good.clone();
        f[14] = 0x65;
        assert_eq!(
            assert_rejected(&f, 1448, None),
            OffloadError::BadIpVersion {
                expected: 4,
                found: 6
            }
        );

        let mut f = good.clone();
        f[14] = 0x44;
        assert!(matches!(
            assert_rejected(&f, 1448, None),
            OffloadError::LengthBelowHeader {
                what: "IPv4 header",
                declared: 16,
                ..
            }
        ));

        let mut f = good.clone();
        f[16..18].copy_from_slice(&19u16.to_be_bytes());
        assert!(matches!(
            assert_rejected(&f, 1448, None),
            OffloadError::LengthBelowHeader {
                what: "IPv4 total",
                ..
            }
        ));

        let mut f = good.clone();
        f[16..18].copy_from_slice(&40u16.to_be_bytes()); // room for only 20 of the 32 TCP header bytes
        assert!(matches!(
            assert_rejected(&f, 1448, None),
            OffloadError::Truncated {
                what: "TCP header with options",
                ..
            }
        ));

        let mut f = good.clone();
        f[20] = 0x20; // more fragments
        assert_eq!(
            assert_rejected(&f, 1448, None),
            OffloadError::Fragment {
                offset: 0,
                more: true
            }
        );

        let mut f = good.clone();
        f[34 + 12] = 0x40;
        assert!(matches!(
            assert_rejected(&f, 1448, None),
            OffloadError::LengthBelowHeader {
                what: "TCP data offset",
                declared: 16,
                ..
            }
        ));

        let udp = udp_frame(&payload);
        assert_eq!(assert_rejected(&udp, 1448, None), OffloadError::NotTcp(17));
        assert_eq!(
            assert_rejected(&udp, 1448, Some(VXLAN_PORT)),
            OffloadError::NotTcp(17)
        );

        let v6 = build(PLAIN_V6, ACK_FLAG, &payload, Csum::Partial);
        let mut f = v6.clone();
        f[14 + 6] = 0; // hop-by-hop options: extension headers are not supported
        assert_eq!(assert_rejected(&f, 1448, None), OffloadError::NotTcp(0));
        let mut f = v6.clone();
        f[18..20].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(
            assert_rejected(&f, 1448, None),
            OffloadError::LengthBeyondData {
                what: "IPv6 payload",
                ..
            }
        ));

        let vx = build(VXLAN_V4, ACK_FLAG, &payload, Csum::Partial);
        // Without the VXLAN port it is plain UDP.
        assert_eq!(assert_rejected(&vx, 1448, None), OffloadError::NotTcp(17));
        assert_eq!(
            assert_rejected(&vx, 1448, Some(8472)),
            OffloadError::NotTcp(17)
        );
        let mut f = vx.clone();
        f[38..40].copy_from_slice(&7u16.to_be_bytes());
        assert!(matches!(
            assert_rejected(&f, 1448, Some(VXLAN_PORT)),
            OffloadError::LengthBelowHeader {
                what: "outer UDP",
                ..
            }
        ));
        let mut f = vx.clone();
        f[38..40].copy_from_slice(&30u16.to_be_bytes()); // the inner frame no longer fits
        assert!(matches!(
            assert_rejected(&f, 1448, Some(VXLAN_PORT)),
            OffloadError::Truncated {
                what: "IPv4 header",
                ..
            }
        ));
        let mut f = vx.clone();
        f[64 + 9] = 17; // inner UDP
        assert_eq!(
            assert_rejected(&f, 1448, Some(VXLAN_PORT)),
            OffloadError::NotTcp(17)
        );
    }

    #[test]
    fn errors_say_what_was_wrong() {
        let e = OffloadError::LengthBeyondData {
            what: "IPv4 total",
            declared: 9000,
            available: 1500,
        };
        assert_eq!(
            e.to_string(),
            "IPv4 total length 9000 exceeds the 1500 bytes present"
        );
        assert_eq!(
            OffloadError::ZeroMss.to_string(),
            "mss must be at least 1 byte"
        );
    }

    // ---- properties ----

    const SHAPES: [Shape; 5] = [PLAIN_V4, PLAIN_V6, VXLAN_V4, VXLAN_V6, VLAN_V4];

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            match VnetHdr::parse(&bytes) {
                Ok(h) => prop_assert_eq!(&h.to_bytes()[..], &bytes[..VNET_HDR_LEN]),
                Err(e) => prop_assert_eq!(e, OffloadError::ShortVnetHeader { len: bytes.len() }),
            }
        }

        #[test]
        fn checksum_equals_the_naive_one(data in proptest::collection::vec(any::<u8>(), 0..3000), initial in 0u64..=0xFFFF) {
            prop_assert_eq!(checksum(&data, initial), !naive_fold(naive_sum(&data) + initial));
        }

        #[test]
        fn complete_checksum_never_panics(
            hdr in proptest::array::uniform10(any::<u8>()),
            mut frame in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let hdr = VnetHdr::parse(&hdr).unwrap();
            let before = frame.clone();
            match complete_checksum(&hdr, &mut frame) {
                Ok(done) => prop_assert!(!done.needs_csum()),
                Err(_) => prop_assert_eq!(frame, before),
            }
        }

        #[test]
        fn segment_never_panics_on_arbitrary_bytes(
            frame in proptest::collection::vec(any::<u8>(), 0..300),
            mss in 0usize..100,
            port in proptest::option::of(any::<u16>()),
        ) {
            let (r, segments) = collect(&frame, mss, port);
            match r {
                Ok(n) => prop_assert_eq!(n, segments.len()),
                Err(_) => prop_assert!(segments.is_empty()),
            }
        }

        #[test]
        fn segment_never_panics_on_damaged_frames(
            shape in 0usize..SHAPES.len(),
            len in 0usize..3000,
            mss in 0usize..1500,
            damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let shape = SHAPES[shape];
            let mut frame = build(shape, ALL_FLAGS, &pattern(len, 1), Csum::Partial);
            // Damage the headers, where it matters.
            let headers = shape.offsets().payload;
            for (at, byte) in damage {
                let at = at.index(headers);
                frame[at] = byte;
            }
            if truncate {
                frame.truncate(cut.index(frame.len() + 1));
            }
            let (r, segments) = collect(&frame, mss, shape.vxlan_port());
            match r {
                Ok(n) => prop_assert_eq!(n, segments.len()),
                Err(_) => prop_assert!(segments.is_empty()),
            }
        }

        #[test]
        fn segments_concatenate_back_to_the_payload(
            shape in 0usize..SHAPES.len(),
            len in 0usize..5000,
            mss in 1usize..2000,
            flags in any::<u8>(),
            complete in any::<bool>(),
        ) {
            let shape = SHAPES[shape];
            let payload = pattern(len, 77);
            let csum = if complete { Csum::Complete } else { Csum::Partial };
            let frame = build(shape, flags, &payload, csum);
            let (r, segments) = collect(&frame, mss, shape.vxlan_port());
            prop_assert_eq!(r, Ok(len.div_ceil(mss).max(1)));
            let got = check_segments(shape, &frame, flags, mss, &segments);
            prop_assert_eq!(got, payload);
        }
    }
}
