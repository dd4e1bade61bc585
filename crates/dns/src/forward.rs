//! Questions outside the cluster zone go to the upstream servers, in order, through a cache of
//! positive and negative answers (TTL-bounded, as CoreDNS's `cache 30`). An upstream that does
//! not answer costs at most [`TRY_TIMEOUT`]; all of them together at most [`TOTAL_TIMEOUT`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// How long one upstream gets to answer.
pub const TRY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a forwarded question may take in all, whatever the number of upstreams.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(4);
/// The longest an answer is kept (CoreDNS `cache 30`).
const MAX_TTL: u32 = 30;
/// A negative answer without an SOA is kept this long.
const NEGATIVE_TTL: u32 = 5;
/// Entries kept at most; past it, expired ones are dropped and new ones not kept.
const CAPACITY: usize = 10_000;
/// Questions waiting for upstreams at once; past it, SERVFAIL at once (a dead upstream under a
/// flood must not pile up sockets and tasks).
const MAX_IN_FLIGHT: usize = 1024;

/// What an upstream said about a question.
#[derive(Clone, Debug)]
pub struct Upstreamed {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

type Key = (Name, RecordType, DNSClass);

struct Entry {
    stored: Instant,
    expires: Instant,
    answer: Arc<Upstreamed>,
}

/// The upstream servers and the cache in front of them.
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    cache: Mutex<HashMap<Key, Entry>>,
    in_flight: tokio::sync::Semaphore,
}

impl Forwarder {
    /// Forwards to `upstreams`, tried in order.
    pub fn new(upstreams: Vec<SocketAddr>) -> Forwarder {
        Forwarder {
            upstreams,
            cache: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    /// The cached answer, TTLs counted down, if still fresh.
    pub fn cached(&self, name: &Name, qtype: RecordType, class: DNSClass) -> Option<Upstreamed> {
        let key = (name.to_lowercase(), qtype, class);
        let cache = self.cache.lock().ok()?;
        let entry = cache.get(&key)?;
        let now = Instant::now();
        if now >= entry.expires {
            return None;
        }
        let age = now.duration_since(entry.stored).as_secs() as u32;
        let mut answer = (*entry.answer).clone();
        for r in answer
            .answers
            .iter_mut()
            .chain(&mut answer.authorities)
            .chain(&mut answer.additionals)
        {
            r.ttl = r.ttl.saturating_sub(age);
        }
        Some(answer)
    }

    /// Asks the upstreams (no cache); `None` when none answered in time.
    pub async fn ask(&self, name: &Name, qtype: RecordType, class: DNSClass) -> Option<Upstreamed> {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            tracing::debug!(%name, "too many questions upstream already");
            return None;
        };
        let deadline = tokio::time::Instant::now() + TOTAL_TIMEOUT;
        for upstream in &self.upstreams {
            let attempt =
                tokio::time::timeout(TRY_TIMEOUT, exchange(*upstream, name, qtype, class));
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(Ok(m))) if m.metadata.response_code != ResponseCode::ServFail => {
                    let answer = Upstreamed {
                        rcode: m.metadata.response_code,
                        answers: m.answers,
                        authorities: m.authorities,
                        additionals: m.additionals,
                    };
                    self.store(name, qtype, class, &answer);
                    return Some(answer);
                }
                Ok(Ok(Ok(_))) => tracing::debug!(%upstream, %name, "upstream SERVFAIL"),
                Ok(Ok(Err(e))) => tracing::debug!(%upstream, %name, error = %e, "upstream failed"),
                Ok(Err(_)) => tracing::debug!(%upstream, %name, "upstream timed out"),
                Err(_) => break,
            }
        }
        None
    }

    fn store(&self, name: &Name, qtype: RecordType, class: DNSClass, answer: &Upstreamed) {
        let Some(ttl) = cache_ttl(answer) else { return };
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        let now = Instant::now();
        if cache.len() >= CAPACITY {
            cache.retain(|_, e| e.expires > now);
            if cache.len() >= CAPACITY {
                return;
            }
        }
        cache.insert(
            (name.to_lowercase(), qtype, class),
            Entry {
                stored: now,
                expires: now + Duration::from_secs(u64::from(ttl)),
                answer: Arc::new(answer.clone()),
            },
        );
    }
}

/// How long an answer may be kept: the smallest record TTL (positive), the SOA's negative TTL
/// (RFC 2308), capped; errors other than NXDOMAIN are not kept.
fn cache_ttl(answer: &Upstreamed) -> Option<u32> {
    let ttl = match answer.rcode {
        ResponseCode::NoError if !answer.answers.is_empty() => {
            answer.answers.iter().map(|r| r.ttl).min()?
        }
        ResponseCode::NoError | ResponseCode::NXDomain => answer
            .authorities
            .iter()
            .find_map(|r| match &r.data {
                RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
                _ => None,
            })
            .unwrap_or(NEGATIVE_TTL),
        _ => return None,
    };
    (ttl > 0).then_some(ttl.min(MAX_TTL))
}

fn query_message(name: &Name, qtype: RecordType, class: DNSClass) -> Message {
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    let mut q = Query::query(name.clone(), qtype);
    q.set_query_class(class);
    m.add_query(q);
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    m.set_edns(edns);
    m
}

fn is_reply_to(reply: &Message, query: &Message) -> bool {
    reply.metadata.id == query.metadata.id
        && reply.metadata.message_type == MessageType::Response
        && reply.queries.len() == 1
        && query.queries.first().is_some_and(|q| {
            let r = &reply.queries[0];
            r.name().to_lowercase() == q.name().to_lowercase() && r.query_type() == q.query_type()
        })
}

/// One question to one upstream: UDP, then TCP when the answer was truncated.
async fn exchange(
    upstream: SocketAddr,
    name: &Name,
    qtype: RecordType,
    class: DNSClass,
) -> Result<Message, String> {
    let query = query_message(name, qtype, class);
    let bytes = query.to_vec().map_err(|e| e.to_string())?;
    let local: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().map_err(|_| "address")?
    } else {
        "[::]:0".parse().map_err(|_| "address")?
    };
    let socket = UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
    // Connected: replies from anyone else are dropped, and "port unreachable" fails fast.
    socket.connect(upstream).await.map_err(|e| e.to_string())?;
    socket.send(&bytes).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await.map_err(|e| e.to_string())?;
        let Ok(reply) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        if !is_reply_to(&reply, &query) {
            continue;
        }
        if reply.metadata.truncation {
            return exchange_tcp(upstream, &query, &bytes).await;
        }
        return Ok(reply);
    }
}

async fn exchange_tcp(
    upstream: SocketAddr,
    query: &Message,
    bytes: &[u8],
) -> Result<Message, String> {
    let mut stream = TcpStream::connect(upstream)
        .await
        .map_err(|e| e.to_string())?;
    let len = u16::try_from(bytes.len()).map_err(|_| "query too long")?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).await.map_err(|e| e.to_string())?;
    let len = stream.read_u16().await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; usize::from(len)];
    stream
        .read_exact(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    let reply = Message::from_vec(&buf).map_err(|e| e.to_string())?;
    if !is_reply_to(&reply, query) {
        return Err("the TCP reply does not match the question".into());
    }
    Ok(reply)
}
