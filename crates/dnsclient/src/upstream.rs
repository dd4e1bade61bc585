//! One query to a pod's DNS servers, from a socket in the pod's namespace (so it leaves through
//! the pod's vNIC and crosses the switch), resent on a retry schedule; a truncated answer is
//! asked again over TCP.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use socket2::{Domain, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, timeout_at};

use crate::sockets::PodSockets;
use crate::walk::Outcome;

/// The EDNS payload size our queries offer (the DNS flag day 2020 value).
const PAYLOAD: u16 = 1232;
/// How long a TCP retry of a truncated answer may take.
const TCP_TIMEOUT: Duration = Duration::from_secs(5);
/// The receive buffer: room for any answer to our EDNS payload; a server that ignores it and
/// sends more is read truncated, fails to decode and is waited past.
const RECEIVE: usize = 4096;
/// Idle UDP sockets kept for the next queries (making one is a round trip to the pod's
/// namespace thread). A late answer left on a reused socket is skipped by ID and question.
const POOL: usize = 64;

/// Who gets a (re)send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Targets {
    /// The preferred (first) server.
    First,
    /// One server, by index.
    One(usize),
    /// Every server.
    All,
}

/// When a query is (re)sent and to whom: each entry sends, then waits that long for an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule(pub Vec<(Targets, Duration)>);

impl Schedule {
    /// The Windows DNS Client (KB2834226): sent at 0 s to the preferred server, resent to
    /// every server at 1, 2, 4 and 8 s, given up at 10 s.
    pub fn windows() -> Schedule {
        let s = Duration::from_secs;
        Schedule(vec![
            (Targets::First, s(1)),
            (Targets::All, s(1)),
            (Targets::All, s(2)),
            (Targets::All, s(4)),
            (Targets::All, s(2)),
        ])
    }

    /// glibc's `res_send`: `attempts` rounds over the servers in order, each try waiting
    /// `timeout << round` divided among the servers (at least 1 s).
    pub fn glibc(servers: usize, timeout: Duration, attempts: u32) -> Schedule {
        let n = servers.max(1);
        let mut steps = Vec::new();
        for round in 0..attempts.max(1) {
            let wait = (timeout * (1 << round) / n as u32).max(Duration::from_secs(1));
            steps.extend((0..n).map(|i| (Targets::One(i), wait)));
        }
        Schedule(steps)
    }

    /// Every wait scaled to `1/divisor` (tests that need a timeout to happen quickly).
    pub fn scaled_down(&self, divisor: u32) -> Schedule {
        Schedule(
            self.0
                .iter()
                .map(|(t, d)| (*t, *d / divisor.max(1)))
                .collect(),
        )
    }
}

/// What one query got.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub outcome: Outcome,
    /// The server that answered, or the last one asked.
    pub server: Option<SocketAddr>,
    /// How many datagrams were sent.
    pub sent: u32,
    /// The answer itself, when one came.
    pub response: Option<Message>,
}

/// A pod's DNS servers, asked from the pod's namespace.
#[derive(Clone)]
pub struct Upstream {
    pub servers: Vec<SocketAddr>,
    pub schedule: Schedule,
    sockets: Arc<PodSockets>,
    idle: Arc<Mutex<Vec<UdpSocket>>>,
}

impl Upstream {
    /// Servers `servers` asked on `schedule` from sockets made by `sockets`.
    pub fn new(servers: Vec<SocketAddr>, schedule: Schedule, sockets: Arc<PodSockets>) -> Self {
        Upstream {
            servers,
            schedule,
            sockets,
            idle: Arc::default(),
        }
    }

    /// Asks `name` `qtype` (recursion desired) and waits for the first matching answer.
    pub async fn query(&self, name: &Name, qtype: RecordType) -> Exchange {
        let mut ex = Exchange {
            outcome: Outcome::Timeout,
            server: None,
            sent: 0,
            response: None,
        };
        if self.servers.is_empty() {
            ex.outcome = Outcome::Unreachable {
                why: "the endpoint has no DNS server (Dns.ServerList is empty)".into(),
            };
            return ex;
        }
        let request = request(name, qtype);
        let socket = match self.udp_socket().await {
            Ok(s) => s,
            Err(e) => {
                ex.outcome = Outcome::Unreachable {
                    why: format!("cannot make a socket in the pod's namespace: {e}"),
                };
                return ex;
            }
        };
        let Ok(bytes) = request.to_vec() else {
            ex.outcome = Outcome::Unreachable {
                why: format!("cannot encode a query for {name}"),
            };
            return ex;
        };
        let ex = self.exchange(&socket, &request, &bytes, qtype, ex).await;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOL {
            idle.push(socket);
        }
        ex
    }

    /// Sends on the schedule until an answer comes.
    async fn exchange(
        &self,
        socket: &UdpSocket,
        request: &Message,
        bytes: &[u8],
        qtype: RecordType,
        mut ex: Exchange,
    ) -> Exchange {
        for (targets, wait) in &self.schedule.0 {
            for server in self.targets(*targets) {
                ex.server = Some(server);
                match socket.send_to(bytes, server).await {
                    Ok(_) => ex.sent += 1,
                    Err(e) => {
                        ex.outcome = Outcome::Unreachable {
                            why: format!("send to {server}: {e}"),
                        };
                    }
                }
            }
            if let Some((from, response)) = self.receive(socket, request, *wait).await {
                ex.server = Some(from);
                let response = if response.metadata.truncation {
                    self.over_tcp(from, bytes).await.unwrap_or(response)
                } else {
                    response
                };
                ex.outcome = outcome(&response, qtype);
                ex.response = Some(response);
                return ex;
            }
        }
        if ex.sent > 0 {
            ex.outcome = Outcome::Timeout;
        }
        ex
    }

    fn targets(&self, t: Targets) -> Vec<SocketAddr> {
        match t {
            Targets::First => self.servers.iter().take(1).copied().collect(),
            Targets::One(i) => self.servers.get(i).copied().into_iter().collect(),
            Targets::All => self.servers.clone(),
        }
    }

    async fn udp_socket(&self) -> std::io::Result<UdpSocket> {
        let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some(s) = reused {
            return Ok(s);
        }
        let v6 = self.servers.first().is_some_and(SocketAddr::is_ipv6);
        let (domain, any): (Domain, SocketAddr) = if v6 {
            (
                Domain::IPV6,
                "[::]:0".parse().map_err(std::io::Error::other)?,
            )
        } else {
            (
                Domain::IPV4,
                "0.0.0.0:0".parse().map_err(std::io::Error::other)?,
            )
        };
        let s = self.sockets.socket(domain, Type::DGRAM, Some(any)).await?;
        UdpSocket::from_std(s.into())
    }

    /// The first answer from one of the servers to this request within `wait`.
    async fn receive(
        &self,
        socket: &UdpSocket,
        request: &Message,
        wait: Duration,
    ) -> Option<(SocketAddr, Message)> {
        let deadline = Instant::now() + wait;
        let mut buf = vec![0u8; RECEIVE];
        loop {
            let (n, from) = timeout_at(deadline, socket.recv_from(&mut buf))
                .await
                .ok()?
                .ok()?;
            if !self.servers.contains(&from) {
                continue;
            }
            let Ok(m) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if matches_request(request, &m) {
                return Some((from, m));
            }
        }
    }

    async fn over_tcp(&self, server: SocketAddr, bytes: &[u8]) -> Option<Message> {
        let domain = if server.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let s = self.sockets.socket(domain, Type::STREAM, None).await.ok()?;
        let socket = tokio::net::TcpSocket::from_std_stream(s.into());
        let exchange = async {
            let mut stream: TcpStream = socket.connect(server).await.ok()?;
            exchange_tcp(&mut stream, bytes).await
        };
        tokio::time::timeout(TCP_TIMEOUT, exchange).await.ok()?
    }
}

/// One length-prefixed DNS exchange on a TCP stream.
pub async fn exchange_tcp(stream: &mut TcpStream, bytes: &[u8]) -> Option<Message> {
    let len = u16::try_from(bytes.len()).ok()?;
    stream.write_all(&len.to_be_bytes()).await.ok()?;
    stream.write_all(bytes).await.ok()?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.ok()?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await.ok()?;
    Message::from_vec(&buf).ok()
}

/// A recursive query for `name` `qtype` with EDNS: what a pod's resolver sends.
pub fn request(name: &Name, qtype: RecordType) -> Message {
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name.clone(), qtype));
    let mut edns = Edns::new();
    edns.set_max_payload(PAYLOAD);
    m.set_edns(edns);
    m
}

/// True when `m` answers `request`: same ID, a response, the same question.
pub fn matches_request(request: &Message, m: &Message) -> bool {
    m.metadata.id == request.metadata.id
        && m.metadata.message_type == MessageType::Response
        && m.metadata.op_code == OpCode::Query
        && m.queries.len() == 1
        && request.queries.first().is_some_and(|q| {
            let a = &m.queries[0];
            a.query_type() == q.query_type() && a.name().eq_ignore_root_case(q.name())
        })
}

/// What an answer means for the walk.
pub fn outcome(m: &Message, qtype: RecordType) -> Outcome {
    match m.metadata.response_code {
        ResponseCode::NoError => {
            let has = m.answers.iter().any(|r| r.record_type() == qtype);
            if has || (qtype == RecordType::CNAME && !m.answers.is_empty()) {
                Outcome::Answer {
                    records: m.answers.iter().map(ToString::to_string).collect(),
                }
            } else {
                Outcome::NoData
            }
        }
        ResponseCode::NXDomain => Outcome::NxDomain,
        ResponseCode::ServFail => Outcome::ServFail,
        rc => Outcome::Rcode {
            rcode: rc.to_string(),
        },
    }
}
