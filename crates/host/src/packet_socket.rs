//! An AF_PACKET socket bound to one interface: how a vSwitch reaches the physical adapter it
//! is bound to. It sees every frame on the wire (promiscuous) except those it sent itself, and
//! frames cross it with a virtio-net header, so TCP segments coalesced by GRO arrive whole and
//! large segments can be handed to the driver to cut.
//!
//! The kernel takes the outer VLAN tag off every frame it receives before packet sockets see
//! it, and reports the tag beside the frame (`PACKET_AUXDATA`); [`PacketSocket::recv`] puts it
//! back, so a switch reading the socket sees frames as they were on the wire.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, size_of_val};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::HostError;
use crate::frame_fd;
use crate::netlink::check_link_name;
use crate::offload::{VNET_HDR_LEN, VnetHdr};
use crate::sys;

/// Where a VLAN tag goes: after the destination and source MACs.
const VLAN_TAG_AT: usize = VNET_HDR_LEN + 12;
const VLAN_TAG_LEN: usize = 4;
/// The 802.1Q TPID, for kernels that do not report which TPID a tag had.
const TPID_8021Q: u16 = 0x8100;

/// Receive and send buffer sizes: room for a burst of 64 KB segments.
const BUFFER_BYTES: libc::c_int = 4 << 20;

/// A raw packet socket on one interface of the calling thread's network namespace.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
}

impl PacketSocket {
    /// Opens a socket that reads and writes every frame of interface `ifname`: promiscuous,
    /// with virtio-net headers, without its own sent frames, non-blocking.
    pub fn bind(ifname: &str) -> Result<PacketSocket, HostError> {
        check_link_name(ifname)?;
        let ifindex = if_index(ifname)?;
        // Protocol 0 receives nothing until bind, so no frame of another interface sneaks in.
        let fd = sys::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
        .map_err(|e| {
            HostError::io(
                format!("open a packet socket for {ifname} (this needs CAP_NET_RAW)"),
                e,
            )
        })?;
        let sock = PacketSocket {
            fd,
            ifname: ifname.to_string(),
            ifindex,
        };
        sock.set_int(
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            1,
            "PACKET_VNET_HDR",
        )?;
        sock.set_int(
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
            "PACKET_IGNORE_OUTGOING",
        )?;
        sock.set_int(libc::SOL_PACKET, libc::PACKET_AUXDATA, 1, "PACKET_AUXDATA")?;
        sock.set_buffer(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, "SO_RCVBUF")?;
        sock.set_buffer(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, "SO_SNDBUF")?;
        sock.bind_to_interface()?;
        sock.set_promiscuous()?;
        Ok(sock)
    }

    /// The interface's name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Reads one frame, starting with its virtio-net header, with the VLAN tag the kernel
    /// took off put back; `WouldBlock` when none is waiting. A frame longer than `buf` is cut.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // Room for one cmsg of tpacket_auxdata (40 bytes on 64-bit), 8-byte aligned.
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        loop {
            // SAFETY: msghdr is plain old data; all-zero is a valid (empty) value.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&control) as _;
            // SAFETY: `msg` points at one iovec over `buf` and at `control`, both live and
            // writable for the call and of the lengths given; `fd` is open.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let n = n as usize;
            return Ok(match stripped_vlan_tag(&msg) {
                Some((tpid, tci)) => reinsert_vlan_tag(buf, n, tpid, tci),
                None => n,
            });
        }
    }

    /// Sends one frame out of the interface, `buf` starting with its virtio-net header.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        frame_fd::send(self.fd.as_fd(), buf)
    }

    /// Sends the virtio-net header `hdr` and the Ethernet frame `frame` as one frame.
    pub fn send_vectored(&self, hdr: &[u8], frame: &[u8]) -> io::Result<usize> {
        frame_fd::send_vectored(self.fd.as_fd(), hdr, frame)
    }

    fn set_int(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
        what: &str,
    ) -> Result<(), HostError> {
        sys::setsockopt(&self.fd, level, name, &value).map_err(|e| {
            HostError::io(
                format!("set {what} on the packet socket of {}", self.ifname),
                e,
            )
        })
    }

    /// Sets a buffer size past `net.core.*mem_max` when allowed (CAP_NET_ADMIN), else as far
    /// as the limit allows.
    fn set_buffer(
        &self,
        force: libc::c_int,
        plain: libc::c_int,
        what: &str,
    ) -> Result<(), HostError> {
        if sys::setsockopt(&self.fd, libc::SOL_SOCKET, force, &BUFFER_BYTES).is_ok() {
            return Ok(());
        }
        self.set_int(libc::SOL_SOCKET, plain, BUFFER_BYTES, what)
    }

    fn bind_to_interface(&self) -> Result<(), HostError> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as libc::c_ushort;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = self.ifindex as libc::c_int;
        // SAFETY: `addr` is a live sockaddr_ll and the length passed is its size; the kernel
        // only reads it.
        let ret = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENODEV) {
                return Err(HostError::NotFound(format!(
                    "interface {} went away while a packet socket was being bound to it",
                    self.ifname
                )));
            }
            return Err(HostError::io(
                format!("bind a packet socket to {}", self.ifname),
                e,
            ));
        }
        Ok(())
    }

    /// Puts the interface in promiscuous mode for as long as this socket is open.
    fn set_promiscuous(&self) -> Result<(), HostError> {
        let mreq = libc::packet_mreq {
            mr_ifindex: self.ifindex as libc::c_int,
            mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        sys::setsockopt(
            &self.fd,
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
        )
        .map_err(|e| {
            HostError::io(
                format!(
                    "put {} in promiscuous mode (PACKET_MR_PROMISC)",
                    self.ifname
                ),
                e,
            )
        })
    }
}

/// The VLAN tag (TPID, TCI) the kernel took off the frame just read, from its auxiliary data.
fn stripped_vlan_tag(msg: &libc::msghdr) -> Option<(u16, u16)> {
    // SAFETY: `msg` is the msghdr recvmsg just filled in; its control buffer is live, and
    // CMSG_FIRSTHDR/CMSG_NXTHDR stay within msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null pointer from CMSG_FIRSTHDR/CMSG_NXTHDR points at a complete
        // cmsghdr inside the control buffer.
        let header = unsafe { &*cmsg };
        let want = size_of::<libc::tpacket_auxdata>() as u32;
        // SAFETY: CMSG_LEN only computes a length.
        let room = unsafe { libc::CMSG_LEN(want) } as usize;
        if header.cmsg_level == libc::SOL_PACKET
            && header.cmsg_type == libc::PACKET_AUXDATA
            && header.cmsg_len as usize >= room
        {
            // SAFETY: the cmsg holds at least a tpacket_auxdata (checked above); the data may
            // be unaligned, so it is read unaligned.
            let aux: libc::tpacket_auxdata =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            if aux.tp_status & libc::TP_STATUS_VLAN_VALID == 0 {
                return None;
            }
            let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                aux.tp_vlan_tpid
            } else {
                TPID_8021Q
            };
            return Some((tpid, aux.tp_vlan_tci));
        }
        // SAFETY: as for CMSG_FIRSTHDR above.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    None
}

/// Puts a VLAN tag back into the `len`-byte frame read into `buf` (virtio-net header first),
/// and moves the header's offsets past it; returns the new length. What no longer fits in
/// `buf` is cut, as a longer frame would have been.
fn reinsert_vlan_tag(buf: &mut [u8], len: usize, tpid: u16, tci: u16) -> usize {
    if len < VLAN_TAG_AT || buf.len() < VLAN_TAG_AT + VLAN_TAG_LEN {
        return len;
    }
    let new_len = (len + VLAN_TAG_LEN).min(buf.len());
    buf.copy_within(
        VLAN_TAG_AT..new_len - VLAN_TAG_LEN,
        VLAN_TAG_AT + VLAN_TAG_LEN,
    );
    buf[VLAN_TAG_AT..VLAN_TAG_AT + 2].copy_from_slice(&tpid.to_be_bytes());
    buf[VLAN_TAG_AT + 2..VLAN_TAG_AT + 4].copy_from_slice(&tci.to_be_bytes());
    if let Ok(mut hdr) = VnetHdr::parse(buf) {
        let shift = VLAN_TAG_LEN as u16;
        if hdr.needs_csum() {
            hdr.csum_start = hdr.csum_start.saturating_add(shift);
        }
        if hdr.hdr_len != 0 {
            hdr.hdr_len = hdr.hdr_len.saturating_add(shift);
        }
        buf[..VNET_HDR_LEN].copy_from_slice(&hdr.to_bytes());
    }
    new_len
}

/// The index of interface `name` in the calling thread's namespace.
fn if_index(name: &str) -> Result<u32, HostError> {
    let c = CString::new(name)
        .map_err(|_| HostError::Invalid(format!("interface name {name:?} contains a NUL byte")))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(HostError::NotFound(format!(
                "interface {name} does not exist in this network namespace; \
                 check the name (ip link) and the namespace"
            )));
        }
        return Err(HostError::io(format!("look up interface {name}"), e));
    }
    Ok(index)
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::F_NEEDS_CSUM;
    use proptest::prelude::*;

    #[test]
    fn the_tag_goes_back_after_the_macs_and_offsets_move_past_it() {
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: 1,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let frame: Vec<u8> = (0..80u8).collect();
        let mut buf = vec![0u8; 200];
        buf[..VNET_HDR_LEN].copy_from_slice(&hdr.to_bytes());
        buf[VNET_HDR_LEN..VNET_HDR_LEN + frame.len()].copy_from_slice(&frame);
        let n = reinsert_vlan_tag(&mut buf, VNET_HDR_LEN + frame.len(), 0x8100, 0xa00a);
        assert_eq!(n, VNET_HDR_LEN + frame.len() + 4);
        let out = &buf[VNET_HDR_LEN..n];
        assert_eq!(&out[..12], &frame[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0xa0, 0x0a]);
        assert_eq!(&out[16..], &frame[12..]);
        let moved = VnetHdr::parse(&buf).expect("header");
        assert_eq!((moved.csum_start, moved.hdr_len), (38, 70));
        assert_eq!((moved.gso_size, moved.csum_offset), (1448, 16));
    }

    #[test]
    fn a_plain_header_stays_zero_and_a_full_buffer_cuts_the_end() {
        let mut buf = vec![0u8; VNET_HDR_LEN + 20];
        for (i, b) in buf[VNET_HDR_LEN..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let n = reinsert_vlan_tag(&mut buf, VNET_HDR_LEN + 20, 0x88a8, 7);
        assert_eq!(n, VNET_HDR_LEN + 20);
        assert_eq!(&buf[..VNET_HDR_LEN], &[0; VNET_HDR_LEN]);
        assert_eq!(&buf[VLAN_TAG_AT..VLAN_TAG_AT + 4], &[0x88, 0xa8, 0, 7]);
        assert_eq!(&buf[VLAN_TAG_AT + 4..], &[12, 13, 14, 15]);
    }

    proptest! {
        #[test]
        fn reinsertion_never_panics_and_never_grows_past_the_buffer(
            size in 0usize..64,
            len in 0usize..64,
            tpid in any::<u16>(),
            tci in any::<u16>(),
        ) {
            let mut buf = vec![0xee; size];
            let len = len.min(size);
            let n = reinsert_vlan_tag(&mut buf, len, tpid, tci);
            prop_assert!(n <= size);
            prop_assert!(n == len || n == (len + 4).min(size));
        }
    }
}
