//! The DNS Client service of one pod's compartment: a stub resolver on 127.0.0.53:53 (UDP and
//! TCP) inside the pod's network namespace. The pod's resolv.conf names it with no search
//! line, so glibc sends it exactly the name the application asked for (reference §C.3); the
//! stub applies its [`Rules`] and forwards to the endpoint's DNS servers from the pod's
//! namespace. A single label answered under a suffix comes back as `CNAME label. -> fqdn`
//! and the records, as the Windows DNS Client and CoreDNS's autopath show it.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::CNAME;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use host::HostError;
use host::netns::Netns;
use socket2::{Domain, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::name::AskedName;
use crate::resolve;
use crate::rules::Rules;
use crate::sockets::PodSockets;
use crate::upstream::{Schedule, Upstream};
use crate::walk::{End, Outcome, Walk};

/// Where the stub listens in the pod (systemd-resolved's stub address).
pub const ADDRESS: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 53), 53);
/// The largest UDP answer to a client that offers no EDNS (RFC 1035).
const PLAIN_UDP: usize = 512;
/// A TCP client idle this long is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// The TTL of the synthesized CNAME when the answer carries none.
const CNAME_TTL: u32 = 5;

/// What a stub is started with.
#[derive(Clone, Debug)]
pub struct StubConfig {
    /// The pod's network namespace.
    pub netns: Netns,
    pub rules: Rules,
    /// The endpoint's DNS servers (port 53).
    pub servers: Vec<SocketAddr>,
    pub schedule: Schedule,
}

/// Why a stub could not start.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    #[error("DNS client stub: {0}")]
    Host(#[from] HostError),
    #[error("DNS client stub: bind {what} {ADDRESS} in {netns}: {source}")]
    Bind {
        what: &'static str,
        netns: String,
        source: std::io::Error,
    },
}

/// What the serving tasks share.
struct Resolver {
    rules: Rules,
    upstream: Upstream,
}

/// A running stub; dropping it stops it and closes its sockets.
pub struct Stub {
    config: StubConfig,
    resolver: Arc<Resolver>,
    tasks: Vec<JoinHandle<()>>,
}

impl Stub {
    /// Binds 127.0.0.53:53 (UDP and TCP, SO_REUSEADDR) in the pod's namespace, with `lo` up
    /// there, and serves on `runtime`. Blocks the calling thread briefly (not an async task).
    pub fn start(config: StubConfig, runtime: &Handle) -> Result<Stub, StubError> {
        let netns = config.netns.clone();
        let sockets = Arc::new(PodSockets::open(&netns)?);
        let bind_err = |what, source| StubError::Bind {
            what,
            netns: netns.path().display().to_string(),
            source,
        };
        let addr = SocketAddr::V4(ADDRESS);
        let _entered = runtime.enter();
        let udp = sockets
            .socket_blocking(Domain::IPV4, Type::DGRAM, Some(addr))
            .and_then(|s| UdpSocket::from_std(s.into()))
            .map_err(|e| bind_err("UDP", e))?;
        let tcp = sockets
            .socket_blocking(Domain::IPV4, Type::STREAM, Some(addr))
            .and_then(|s| {
                s.listen(128)?;
                TcpListener::from_std(s.into())
            })
            .map_err(|e| bind_err("TCP", e))?;
        let resolver = Arc::new(Resolver {
            rules: config.rules.clone(),
            upstream: Upstream::new(config.servers.clone(), config.schedule.clone(), sockets),
        });
        let tasks = vec![
            runtime.spawn(serve_udp(Arc::new(udp), Arc::clone(&resolver))),
            runtime.spawn(serve_tcp(tcp, Arc::clone(&resolver))),
        ];
        Ok(Stub {
            config,
            resolver,
            tasks,
        })
    }

    /// What it was started with (a changed config means a new stub).
    pub fn config(&self) -> &StubConfig {
        &self.config
    }

    /// Walks `asked` `qtype` as a query from the pod would, and returns the walk.
    pub async fn explain(&self, asked: &AskedName, qtype: RecordType) -> Walk {
        let r = &self.resolver;
        resolve::walk(&r.rules, asked, qtype, &r.upstream).await.0
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn serve_udp(socket: Arc<UdpSocket>, resolver: Arc<Resolver>) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (socket, resolver) = (Arc::clone(&socket), Arc::clone(&resolver));
        tokio::spawn(async move {
            if let Some(reply) = answer(&resolver, &query, Transport::Udp).await {
                let _ = socket.send_to(&reply, from).await;
            }
        });
    }
}

async fn serve_tcp(listener: TcpListener, resolver: Arc<Resolver>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(serve_connection(stream, Arc::clone(&resolver)));
    }
}

async fn serve_connection(mut stream: TcpStream, resolver: Arc<Resolver>) {
    loop {
        let mut len = [0u8; 2];
        let read = tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)).await;
        if !matches!(read, Ok(Ok(_))) {
            return;
        }
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if stream.read_exact(&mut query).await.is_err() {
            return;
        }
        let Some(reply) = answer(&resolver, &query, Transport::Tcp).await else {
            return;
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        if stream.write_all(&len.to_be_bytes()).await.is_err()
            || stream.write_all(&reply).await.is_err()
        {
            return;
        }
    }
}

/// How the query came (UDP answers are truncated to what the client can take).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
}

/// What to do with the bytes of one datagram or TCP message.
enum Triage {
    /// Not a query (a response, or too short to carry an ID): no reply.
    Ignore,
    /// Answered at once, without a walk (FORMERR, NOTIMP, REFUSED).
    Reply(Message),
    /// A query to walk.
    Walk(Message, AskedName, RecordType),
}

/// Reads a query and decides what it gets; never fails, whatever the bytes.
fn triage(bytes: &[u8]) -> Triage {
    let request = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(_) => return formerr(bytes).map_or(Triage::Ignore, Triage::Reply),
    };
    if request.metadata.message_type != MessageType::Query {
        return Triage::Ignore;
    }
    match check(&request) {
        Err(rcode) => Triage::Reply(error_reply(&request, rcode)),
        Ok((asked, qtype)) => Triage::Walk(request, asked, qtype),
    }
}

/// The reply to one query, or `None` when it is not a query worth answering.
async fn answer(resolver: &Resolver, bytes: &[u8], transport: Transport) -> Option<Vec<u8>> {
    match triage(bytes) {
        Triage::Ignore => None,
        Triage::Reply(m) => m.to_vec().ok(),
        Triage::Walk(request, asked, qtype) => {
            let (walk, last) =
                resolve::walk(&resolver.rules, &asked, qtype, &resolver.upstream).await;
            let reply = reply(&request, &asked, &walk, last);
            encode(&request, reply, transport)
        }
    }
}

/// The asked name and type, or the rcode that refuses the query.
fn check(request: &Message) -> Result<(AskedName, RecordType), ResponseCode> {
    if request.metadata.op_code != OpCode::Query {
        return Err(ResponseCode::NotImp);
    }
    let [q] = request.queries.as_slice() else {
        return Err(ResponseCode::FormErr);
    };
    if q.query_class() != DNSClass::IN {
        return Err(ResponseCode::NotImp);
    }
    if matches!(q.query_type(), RecordType::AXFR | RecordType::IXFR) {
        return Err(ResponseCode::Refused);
    }
    let asked = AskedName::from_wire(q.name()).map_err(|_| ResponseCode::Refused)?;
    Ok((asked, q.query_type()))
}

/// A FORMERR for bytes that do not decode, when they carry an ID and are not a response.
fn formerr(bytes: &[u8]) -> Option<Message> {
    let [hi, lo, flags, ..] = bytes else {
        return None;
    };
    if flags & 0x80 != 0 {
        return None; // a response: never answer those
    }
    let id = u16::from_be_bytes([*hi, *lo]);
    Some(Message::error_msg(id, OpCode::Query, ResponseCode::FormErr))
}

fn error_reply(request: &Message, rcode: ResponseCode) -> Message {
    let mut m = Message::error_msg(request.metadata.id, request.metadata.op_code, rcode);
    m.queries = request.queries.clone();
    m
}

/// The answer to the application: the final upstream answer, behind a CNAME from the asked
/// name when a suffix was appended.
fn reply(request: &Message, asked: &AskedName, walk: &Walk, last: Option<Message>) -> Message {
    let mut m = Message::response(request.metadata.id, OpCode::Query);
    m.metadata.recursion_desired = request.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.queries = request.queries.clone();
    let final_name = walk.steps.last().map(|s| s.name.as_str());
    let renamed = final_name.is_some_and(|n| !n.eq_ignore_ascii_case(&asked.fqdn()));
    match (&walk.result, last) {
        (Outcome::Answer { .. }, Some(up)) => {
            if renamed && let Some(target) = up.queries.first().map(|q| q.name().clone()) {
                let ttl = up.answers.iter().map(|r| r.ttl).min().unwrap_or(CNAME_TTL);
                let cname = Record::from_rdata(asked.to_wire(), ttl, RData::CNAME(CNAME(target)));
                m.add_answer(cname);
            }
            m.add_answers(up.answers);
        }
        (Outcome::NoData, last) | (Outcome::NxDomain, last) => {
            m.metadata.response_code = if walk.result == Outcome::NxDomain {
                ResponseCode::NXDomain
            } else {
                ResponseCode::NoError
            };
            // The negative-caching SOA belongs to the asked name only when it was queried as is.
            if let Some(up) = last.filter(|_| !renamed) {
                m.add_authorities(up.authorities);
            }
        }
        (Outcome::Rcode { .. }, Some(up)) if walk.end != End::Answered => {
            m.metadata.response_code = up.metadata.response_code;
        }
        _ => m.metadata.response_code = ResponseCode::ServFail,
    }
    m
}

/// The reply's bytes, truncated (TC, no records) when it is too big for the client's UDP.
fn encode(request: &Message, mut reply: Message, transport: Transport) -> Option<Vec<u8>> {
    let limit = match (&request.edns, transport) {
        (_, Transport::Tcp) => usize::from(u16::MAX),
        (Some(e), Transport::Udp) => usize::from(e.max_payload()).max(PLAIN_UDP),
        (None, Transport::Udp) => PLAIN_UDP,
    };
    if let Some(e) = &request.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(e.max_payload().max(PLAIN_UDP as u16));
        reply.set_edns(edns);
    }
    let bytes = reply.to_vec().ok()?;
    if bytes.len() <= limit {
        return Some(bytes);
    }
    reply.truncate().to_vec().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use proptest::prelude::*;

    fn query(name: &str, qtype: RecordType) -> Message {
        let mut m = Message::query();
        m.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
        m
    }

    fn rcode(t: Triage) -> Option<ResponseCode> {
        match t {
            Triage::Reply(m) => Some(m.metadata.response_code),
            _ => None,
        }
    }

    #[test]
    fn queries_are_walked_and_the_rest_refused_as_a_server_refuses_them() {
        let bytes = query("web.", RecordType::A).to_vec().expect("bytes");
        assert!(
            matches!(triage(&bytes), Triage::Walk(_, ref n, RecordType::A) if n.to_string() == "web")
        );
        let mut two = query("a.", RecordType::A);
        two.add_query(Query::query(
            Name::from_ascii("b.").expect("name"),
            RecordType::A,
        ));
        assert_eq!(
            rcode(triage(&two.to_vec().expect("bytes"))),
            Some(ResponseCode::FormErr)
        );
        let axfr = query("cluster.local.", RecordType::AXFR)
            .to_vec()
            .expect("bytes");
        assert_eq!(rcode(triage(&axfr)), Some(ResponseCode::Refused));
        let root = query(".", RecordType::NS).to_vec().expect("bytes");
        assert_eq!(rcode(triage(&root)), Some(ResponseCode::Refused));
        let mut update = query("a.", RecordType::A);
        update.metadata.op_code = OpCode::Update;
        assert_eq!(
            rcode(triage(&update.to_vec().expect("bytes"))),
            Some(ResponseCode::NotImp)
        );
        assert_eq!(
            rcode(triage(&[0x12, 0x34, 0x01, 0x00, 0xff])),
            Some(ResponseCode::FormErr)
        );
        assert!(matches!(triage(&[0x12]), Triage::Ignore));
        let response = Message::response(7, OpCode::Query).to_vec().expect("bytes");
        assert!(matches!(triage(&response), Triage::Ignore));
    }

    proptest! {
        #[test]
        fn any_bytes_are_triaged_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let t = triage(&bytes);
            if let Triage::Reply(m) = t {
                prop_assert_eq!(m.metadata.message_type, MessageType::Response);
                prop_assert!(m.to_vec().is_ok());
            }
        }

        #[test]
        fn a_mangled_query_never_panics(cut in 0usize..40, flip in any::<(usize, u8)>()) {
            let mut bytes = query("web.default.svc.cluster.local.", RecordType::AAAA)
                .to_vec()
                .expect("bytes");
            let i = flip.0 % bytes.len();
            bytes[i] ^= flip.1;
            bytes.truncate(bytes.len().saturating_sub(cut));
            let _ = triage(&bytes);
        }
    }
}
