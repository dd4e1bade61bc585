//! A lab of network namespaces for the end-to-end tests: a fabric (a Linux bridge in its own
//! namespace), Windows nodes (a namespace each with a NIC on the fabric and a `winnet hnsd
//! --node-netns` process), an external host, pods; servers run inside namespaces on threads
//! of the test process (a thread that entered a namespace binds its sockets there), clients
//! are real programs (`curl`, `ping`) run with `ip netns exec`. Everything made is removed
//! when the lab is dropped, also when a test fails.
#![allow(dead_code)]

pub mod cluster;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use host::netns::Netns;
use testkit::capture::Capture;
use testkit::hnsd::{HnsdCommand, HnsdProcess};

/// Runs a command; panics with its output when it cannot start.
pub fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

/// Runs a command that must succeed; its standard output.
pub use testkit::cmd::sh as ok;

/// The lab: every namespace it made, and the hnsd processes.
pub struct Lab {
    tag: String,
    namespaces: Vec<String>,
    dir: tempfile::TempDir,
    pub hnsds: Vec<HnsdProcess>,
    fabric: Option<String>,
    stop: Arc<AtomicBool>,
}

impl Lab {
    /// An empty lab; `tag` keeps its names apart from other tests running at the same time.
    pub fn new(tag: &str) -> Lab {
        testkit::require_root("this end-to-end test makes network namespaces and devices");
        let tag = format!("{tag}{}", std::process::id() % 10_000);
        Lab {
            tag,
            namespaces: Vec::new(),
            dir: tempfile::tempdir().expect("temp dir"),
            hnsds: Vec::new(),
            fabric: None,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The full name of the lab's namespace `short`.
    pub fn ns(&self, short: &str) -> String {
        format!("wn{}-{short}", self.tag)
    }

    /// Makes namespace `short` with `lo` up.
    pub fn add_ns(&mut self, short: &str) -> String {
        let name = self.ns(short);
        let _ = run(&["ip", "netns", "del", &name]);
        ok(&["ip", "netns", "add", &name]);
        self.namespaces.push(name.clone());
        ok(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        name
    }

    /// The fabric: a Linux bridge `br0` in its own namespace.
    pub fn fabric(&mut self) -> String {
        if let Some(f) = &self.fabric {
            return f.clone();
        }
        let f = self.add_ns("fab");
        ok(&["ip", "-n", &f, "link", "add", "br0", "type", "bridge"]);
        ok(&["ip", "-n", &f, "link", "set", "br0", "up"]);
        self.fabric = Some(f.clone());
        f
    }

    /// Plugs namespace `ns` into the fabric: `eth0` there with `addr`, a default route via
    /// `gateway`; the fabric end is `port` on `br0`.
    pub fn plug(&mut self, ns: &str, port: &str, addr: &str, gateway: Option<&str>) {
        let f = self.fabric();
        ok(&[
            "ip", "-n", &f, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
            ns,
        ]);
        ok(&["ip", "-n", &f, "link", "set", port, "master", "br0", "up"]);
        ok(&["ip", "-n", ns, "addr", "add", addr, "dev", "eth0"]);
        ok(&["ip", "-n", ns, "link", "set", "eth0", "up"]);
        if let Some(gw) = gateway {
            ok(&["ip", "-n", ns, "route", "add", "default", "via", gw]);
        }
    }

    /// A Windows node: namespace `short` on the fabric at `addr` (default route via
    /// `gateway`), and its hnsd with `profile`.
    pub fn node(
        &mut self,
        short: &str,
        port: &str,
        addr: &str,
        gateway: &str,
        profile: &str,
    ) -> usize {
        let ns = self.add_ns(short);
        self.plug(&ns, port, addr, Some(gateway));
        let dir = self.dir.path().join(short);
        std::fs::create_dir_all(&dir).expect("node dir");
        let level = std::env::var("WINNET_TEST_LOG").unwrap_or_else(|_| "info".into());
        let h = HnsdCommand::new(env!("CARGO_BIN_EXE_winnet"), &dir)
            .node(&ns, "eth0")
            .profile(profile)
            .log_level(&level)
            .start();
        self.hnsds.push(h);
        self.hnsds.len() - 1
    }

    /// Every hnsd's log, for failure messages.
    pub fn logs(&self) -> String {
        self.hnsds
            .iter()
            .map(|h| format!("--- hnsd {}:\n{}", h.node().unwrap_or("?"), h.log()))
            .collect()
    }

    /// Runs `args` inside namespace `ns`.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", ns];
        full.extend_from_slice(args);
        run(&full)
    }

    /// `curl` from `ns` to `url`: the body, or the error.
    pub fn curl(&self, ns: &str, url: &str) -> Result<String, String> {
        let out = self.exec(ns, &["curl", "-sS", "--max-time", "5", url]);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "curl {url} from {ns}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// One ping from `ns` to `ip`: true when answered.
    pub fn ping(&self, ns: &str, ip: &str) -> bool {
        self.exec(ns, &["ping", "-c", "1", "-W", "2", ip])
            .status
            .success()
    }

    /// An HTTP server in `ns` on `port`: answers every request with `from <peer ip>`.
    pub fn http_server(&self, ns: &str, port: u16) {
        self.tcp_server(ns, port, answer_http);
    }

    /// [`Lab::http_server`] on `[::]:port` (IPv6, and IPv4 as `::ffff:a.b.c.d`).
    pub fn http_server_v6(&self, ns: &str, port: u16) {
        self.tcp_server_on(
            ns,
            IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED),
            port,
            answer_http,
        );
    }

    /// A TCP server in `ns` on `port`: `handle` runs on a thread of its own for each
    /// connection (blocking), until the lab is dropped.
    fn tcp_server(&self, ns: &str, port: u16, handle: fn(TcpStream, SocketAddr)) {
        self.tcp_server_on(ns, IpAddr::from([0, 0, 0, 0]), port, handle);
    }

    /// [`Lab::tcp_server`] bound to `ip`.
    fn tcp_server_on(&self, ns: &str, ip: IpAddr, port: u16, handle: fn(TcpStream, SocketAddr)) {
        let listener = in_ns(ns, move || TcpListener::bind((ip, port)));
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::clone(&self.stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, peer)) => {
                        let _ = s.set_nonblocking(false);
                        std::thread::spawn(move || handle(s, peer));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
    }

    /// A UDP echo server in `ns` on `port`: answers `echo <payload> from <peer ip>`.
    pub fn udp_echo(&self, ns: &str, port: u16) {
        let sock = in_ns(ns, move || UdpSocket::bind(("0.0.0.0", port)));
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let stop = Arc::clone(&self.stop);
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::SeqCst) {
                if let Ok((n, peer)) = sock.recv_from(&mut buf) {
                    let reply = format!(
                        "echo {} from {}",
                        String::from_utf8_lossy(&buf[..n]),
                        peer.ip()
                    );
                    let _ = sock.send_to(reply.as_bytes(), peer);
                }
            }
        });
    }

    /// A UDP exchange from `ns` to `to`: the reply, if one came within 2 s (three tries).
    pub fn udp(&self, ns: &str, to: SocketAddr, payload: &str) -> Option<String> {
        let sock = in_ns(ns, || UdpSocket::bind(("0.0.0.0", 0)));
        sock.set_read_timeout(Some(Duration::from_millis(700)))
            .expect("timeout");
        let mut buf = [0u8; 2048];
        for _ in 0..3 {
            sock.send_to(payload.as_bytes(), to).ok()?;
            if let Ok((n, _)) = sock.recv_from(&mut buf) {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        None
    }

    /// A TCP connection from `ns` to `to` (for streams that must outlive something).
    pub fn connect(&self, ns: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
        let to2 = to;
        let r = Netns::named(ns).run(move || {
            TcpStream::connect_timeout(&to2, Duration::from_secs(3))
                .map_err(|e| host::HostError::Invalid(e.to_string()))
        });
        r.map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// A TCP server in `ns` on `port` that echoes every byte back, one thread per connection.
    pub fn tcp_echo(&self, ns: &str, port: u16) {
        self.tcp_server(ns, port, |mut s, _| {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
    }

    /// Starts capturing the frames crossing fabric port `port` (a node's cable); the test
    /// then waits for the frames it expects with [`Capture::until`].
    pub fn capture(&self, port: &str) -> Capture {
        let f = self.fabric.clone().expect("capture needs the fabric");
        Capture::start(&f, &[port])
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for h in &mut self.hnsds {
            h.kill();
        }
        // Pods' TAPs, the nodes' vNICs and veth ends go with their namespaces.
        for ns in self.namespaces.iter().rev() {
            let _ = run(&["ip", "netns", "del", ns]);
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
    }
}

/// Runs `f` on a thread inside namespace `ns` (its sockets stay there).
pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> std::io::Result<T> + Send) -> T {
    Netns::named(ns)
        .run(move || f().map_err(|e| host::HostError::Invalid(e.to_string())))
        .unwrap_or_else(|e| panic!("in namespace {ns}: {e}"))
}

fn answer_http(mut s: TcpStream, peer: SocketAddr) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let body = format!("from {}", peer.ip());
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The IP of a `from <ip>` answer.
pub fn seen_from(body: &str) -> Option<IpAddr> {
    body.rsplit("from ").next()?.trim().parse().ok()
}
