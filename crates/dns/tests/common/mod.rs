//! The DNS under test, started in-process on a loopback port from a manifest folder, and the
//! real clients and servers the tests use: `dig`, a hickory-proto wire client, `knotd`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::net::UdpSocket;

/// A `dns::start`ed server over a manifest folder; stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub running: dns::Running,
}

/// Manifests (YAML text) as one file each, named in order.
pub fn write_manifests(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write manifest");
    }
}

pub async fn start(files: &[(&str, &str)], ttl: u32, upstreams: Vec<SocketAddr>) -> Server {
    let dir = tempfile::Builder::new()
        .prefix("wnt-dns-")
        .tempdir()
        .expect("tempdir");
    write_manifests(dir.path(), files);
    let objects = kubesrc::manifests::watch(dir.path().to_path_buf(), dns::MANIFEST_POLL);
    let config = config(ttl, upstreams, dir.path().to_path_buf());
    let sockets = dns::Sockets::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .expect("bind loopback");
    let running = dns::start(&config, sockets, objects).expect("start");
    Server {
        addr: running.addrs[0],
        dir,
        running,
    }
}

pub fn config(ttl: u32, upstreams: Vec<SocketAddr>, dir: PathBuf) -> dns::Config {
    dns::Config {
        zone: "cluster.local".into(),
        ttl,
        listen: vec![],
        upstreams,
        source: kubesrc::Source::Manifests {
            dir,
            poll: dns::MANIFEST_POLL,
        },
        metrics_addr: None,
    }
}

/// One question over UDP with hickory-proto's wire format (EDNS with `payload` when given).
pub async fn ask_with(
    addr: SocketAddr,
    name: &str,
    qtype: RecordType,
    payload: Option<u16>,
) -> Message {
    let mut q = Message::query();
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(p) = payload {
        let mut e = Edns::new();
        e.set_max_payload(p);
        q.set_edns(e);
    }
    let reply = exchange(addr, &q.to_vec().unwrap())
        .await
        .expect("an answer");
    let m = Message::from_vec(&reply).expect("a DNS message");
    assert_eq!(m.metadata.id, q.metadata.id);
    m
}

pub async fn ask(addr: SocketAddr, name: &str, qtype: RecordType) -> Message {
    ask_with(addr, name, qtype, None).await
}

/// Sends raw bytes, returns the reply (None after 3 s of silence).
pub async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(bytes, addr).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(Duration::from_secs(3), s.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Sends one length-prefixed message over TCP, returns the reply (None after 3 s of silence
/// or if the server closes).
pub async fn exchange_tcp(addr: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let len = u16::try_from(bytes.len()).ok()?;
        s.write_all(&len.to_be_bytes()).await.ok()?;
        s.write_all(bytes).await.ok()?;
        let len = s.read_u16().await.ok()?;
        let mut buf = vec![0u8; usize::from(len)];
        s.read_exact(&mut buf).await.ok()?;
        Some(buf)
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .ok()
        .flatten()
}

/// `bytes` as one DNS message that ends where its last record ends (no record cut short, no
/// bytes after it); the error says what is wrong.
pub fn whole_message(bytes: &[u8]) -> Result<Message, String> {
    use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
    let mut decoder = BinDecoder::new(bytes);
    let m = Message::read(&mut decoder).map_err(|e| format!("not a DNS message: {e}"))?;
    match decoder.len() {
        0 => Ok(m),
        n => Err(format!("{n} bytes after the last record")),
    }
}

/// `dig @addr -p port ARGS` (the Debian client), its whole output.
pub async fn dig(addr: SocketAddr, args: &[&str]) -> String {
    let out = tokio::process::Command::new("dig")
        .arg(format!("@{}", addr.ip()))
        .args(["-p", &addr.port().to_string(), "+time=8", "+tries=1"])
        .args(args)
        .output()
        .await
        .expect("dig runs (Debian bind9-dnsutils)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (up to 10 s) until `check` holds for a fresh answer to `name`/`qtype`.
pub async fn eventually(
    addr: SocketAddr,
    name: &str,
    qtype: RecordType,
    check: impl Fn(&Message) -> bool,
) -> Message {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = ask(addr, name, qtype).await;
        if check(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{name} {qtype} never matched; last: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The answer section as `name type data` lines, lower-cased.
pub fn answers(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| format!("{} {} {}", r.name, r.record_type(), r.data).to_lowercase())
        .collect()
}

pub fn additionals(m: &Message) -> Vec<String> {
    m.additionals
        .iter()
        .map(|r| format!("{} {} {}", r.name, r.record_type(), r.data).to_lowercase())
        .collect()
}

/// A knotd serving `zone_text` for `origin` on a loopback port; killed when dropped.
pub struct Knot {
    pub addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let t = std::net::TcpListener::bind(s.local_addr().unwrap()).unwrap();
    t.local_addr().unwrap().port()
}

impl Knot {
    pub async fn start(origin: &str, zone_text: &str) -> Knot {
        let dir = tempfile::Builder::new()
            .prefix("wnt-dns-knot-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let d = dir.path().display();
        std::fs::write(dir.path().join("zone"), zone_text).unwrap();
        let conf = format!(
            "server:\n  rundir: \"{d}\"\n  listen: 127.0.0.1@{port}\n  background-workers: 1\n  udp-workers: 1\n  tcp-workers: 1\n\
             database:\n  storage: \"{d}\"\ncontrol:\n  listen: \"{d}/knot.sock\"\n\
             log:\n  - target: stderr\n    any: error\n\
             zone:\n  - domain: {origin}\n    file: \"{d}/zone\"\n    journal-content: none\n    zonefile-load: whole\n"
        );
        std::fs::write(dir.path().join("knot.conf"), conf).unwrap();
        let child = Command::new("knotd")
            .arg("-c")
            .arg(dir.path().join("knot.conf"))
            .stdout(Stdio::null())
            .spawn()
            .expect("knotd runs (Debian knot)");
        let mut knot = Knot {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut q = Message::query();
            q.add_query(Query::query(
                Name::from_ascii(origin).unwrap(),
                RecordType::SOA,
            ));
            if let Some(r) = tokio::time::timeout(
                Duration::from_millis(200),
                exchange(knot.addr, &q.to_vec().unwrap()),
            )
            .await
            .ok()
            .flatten()
                && Message::from_vec(&r).is_ok_and(|m| !m.answers.is_empty())
            {
                return knot;
            }
            if let Ok(Some(status)) = knot.child.try_wait() {
                panic!("knotd exited: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "knotd did not answer for {origin}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
