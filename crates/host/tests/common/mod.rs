//! What the root tests share: the root check, namespaces that clean up after themselves, and
//! `ip` to check this crate's work with another tool.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use host::netns::Netns;

/// Fails the test, with what to do, unless it runs as root.
pub fn require_root() {
    testkit::require_root("this test makes network namespaces, TAPs and veth pairs");
}

/// A network namespace made for one test, named after the process and the test, deleted
/// (with its devices and its resolv.conf) when the test ends, passed or failed.
pub struct TestNs {
    pub ns: Netns,
    pub name: String,
}

impl TestNs {
    pub fn new(tag: &str) -> TestNs {
        require_root();
        let name = format!("hosttest-{}-{tag}", std::process::id());
        // A namespace of this name can only be left by an earlier process with our pid.
        let _ = Netns::named(&name).delete();
        let ns = Netns::create(&name).unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        TestNs { ns, name }
    }

    /// Runs `ip -n NAME args...` and returns its output; fails the test if `ip` fails.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = host::resolv::remove(&self.name);
        if let Err(e) = self.ns.delete() {
            eprintln!("cleanup: cannot delete namespace {}: {e}", self.name);
        }
    }
}

/// Runs `ip args...` and returns its standard output; fails the test if `ip` fails.
pub fn ip(args: &[&str]) -> String {
    testkit::cmd::ok(Command::new("ip").args(args))
}

/// Reads from `recv` until a frame satisfies `want` or `timeout` passes.
pub fn recv_matching(
    mut recv: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    want: impl Fn(&[u8]) -> bool,
    timeout: Duration,
) -> Option<Vec<u8>> {
    let end = Instant::now() + timeout;
    let mut buf = vec![0u8; 70_000];
    while Instant::now() < end {
        match recv(&mut buf) {
            Ok(n) if want(&buf[..n]) => return Some(buf[..n].to_vec()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    None
}

/// The RFC 1071 checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet frame carrying an IPv4 UDP datagram (UDP checksum 0: none).
pub fn udp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    dst_port: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dst_port.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}
