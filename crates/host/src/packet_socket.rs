//! An AF_PACKET socket bound to one interface: how a vSwitch reaches the physical adapter it
//! is bound to. It sees every frame on the wire (promiscuous) except those it sent itself, and
//! frames cross it with a virtio-net header, so TCP segments coalesced by GRO arrive whole and
//! large segments can be handed to the driver to cut.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::HostError;
use crate::frame_fd;
use crate::link::check_link_name;
use crate::sys;

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
        let fd =
            sys::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, 0).map_err(|e| {
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

    /// Reads one frame, starting with its virtio-net header; `WouldBlock` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        frame_fd::recv(self.fd.as_fd(), buf)
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
