//! `winnet serve`: the small servers every pod, node and the external host run in the local
//! cluster: HTTP on a TCP port answering `from <client address> to <server address>`, and a
//! UDP echo answering `<payload> from <client address>`, so a client sees the source address
//! the server saw (and, over TCP, which server it reached at which address). A pod of a
//! NetworkPolicy lab serves several ports of each (TCP and UDP 80 and 81).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::Context;

/// Serves every port of `tcp` and `udp` until killed.
pub fn serve(tcp: &[u16], udp: &[u16]) -> anyhow::Result<()> {
    let mut threads = Vec::new();
    if !udp.is_empty() {
        // One socket per local address, so that each answer leaves from the address its
        // request was sent to (a socket on 0.0.0.0 answers from the route's source address,
        // which a client behind NAT would not recognise).
        let mut nl = host::netlink::Netlink::open()?;
        let addrs: Vec<std::net::IpAddr> = nl
            .addresses(None)?
            .into_iter()
            .map(|a| a.net.addr())
            .filter(|a| a.is_ipv4())
            .collect();
        for &port in udp {
            for &a in &addrs {
                let sock = UdpSocket::bind((a, port))
                    .with_context(|| format!("cannot listen on UDP {a}:{port}"))?;
                threads.push(std::thread::spawn(move || echo(&sock)));
            }
        }
    }
    let v6 = !tcp.is_empty() && has_ipv6()?;
    for &port in tcp {
        let listener = TcpListener::bind(("0.0.0.0", port))
            .with_context(|| format!("cannot listen on TCP port {port}"))?;
        threads.push(std::thread::spawn(move || accept(&listener)));
        if v6 {
            // A dual-stack pod answers on its IPv6 address too; an IPv6-only socket keeps
            // IPv4 clients shown as IPv4 addresses (not ::ffff:a.b.c.d).
            let v6 = listen_v6_only(port)?;
            threads.push(std::thread::spawn(move || accept(&v6)));
        }
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn accept(listener: &TcpListener) {
    for conn in listener.incoming() {
        match conn {
            Ok(s) => {
                std::thread::spawn(move || http(s));
            }
            Err(e) => tracing::warn!("accept: {e}"),
        }
    }
}

/// True when this namespace has an IPv6 address beyond loopback and link-local ones.
fn has_ipv6() -> anyhow::Result<bool> {
    let mut nl = host::netlink::Netlink::open()?;
    Ok(nl.addresses(None)?.into_iter().any(|a| match a.net.addr() {
        std::net::IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
        std::net::IpAddr::V4(_) => false,
    }))
}

/// A TCP listener on `[::]:port` for IPv6 only (`IPV6_V6ONLY`), beside the IPv4 one.
fn listen_v6_only(port: u16) -> anyhow::Result<TcpListener> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrIn6, bind, listen, setsockopt, socket,
        sockopt,
    };
    let what = || format!("cannot listen on TCP [::]:{port}");
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .with_context(what)?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &true).with_context(what)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true).with_context(what)?;
    let any = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, port, 0, 0);
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn6::from(any),
    )
    .with_context(what)?;
    listen(&fd, Backlog::new(128).with_context(what)?).with_context(what)?;
    Ok(TcpListener::from(fd))
}

fn echo(sock: &UdpSocket) {
    let mut buf = [0u8; 2048];
    loop {
        if let Ok((n, peer)) = sock.recv_from(&mut buf) {
            let reply = format!("{} from {}", String::from_utf8_lossy(&buf[..n]), peer.ip());
            let _ = sock.send_to(reply.as_bytes(), peer);
        }
    }
}

fn http(mut s: TcpStream) {
    let peer: Option<SocketAddr> = s.peer_addr().ok();
    let local: Option<SocketAddr> = s.local_addr().ok();
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let body = format!(
        "from {} to {}\n",
        peer.map(|p| p.ip().to_string()).unwrap_or_default(),
        local.map(|l| l.ip().to_string()).unwrap_or_default()
    );
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
