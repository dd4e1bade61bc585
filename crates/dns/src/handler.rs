//! One DNS message in, one out: decoding (malformed -> FORMERR, other opcodes -> NOTIMP, other
//! classes -> REFUSED, an EDNS version past 0 -> BADVERS), the cluster answer or the upstream
//! one, EDNS0 and truncation ([`wire`](crate::wire)). The local
//! part is synchronous and lock-free (it reads the current [`Cluster`] view); only questions
//! that need an upstream are awaited.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use hickory_proto::op::{
    Edns, Header, Message, MessageType, Metadata, OpCode, Query, ResponseCode,
};
use hickory_proto::rr::{DNSClass, Name, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::answer::{self, Outcome};
use crate::cluster::Cluster;
use crate::forward::{Forwarder, Upstreamed};
use crate::metrics::Metrics;
use crate::wire::{self, Sections};
use crate::zone::Zone;

/// The EDNS payload size we advertise and accept at most over UDP (the DNS flag day value).
const OUR_PAYLOAD: u16 = 1232;
/// The UDP size a client without EDNS can take.
const PLAIN_UDP: usize = 512;

/// How the query arrived: UDP answers are cut to the client's size, TCP ones to 65,535 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// The answer to a message: ready now, or needing the upstreams first.
pub enum Reply {
    /// Send these bytes.
    Now(Vec<u8>),
    /// Nothing to send (not a query at all).
    Drop,
    /// Finish with [`Handler::finish`].
    Upstream(Box<Pending>),
}

/// A question waiting for the upstreams.
pub struct Pending {
    request: Message,
    query: Query,
    /// The CNAME of an ExternalName Service whose out-of-zone target is being chased.
    chase: Option<(Vec<Record>, Name)>,
    transport: Transport,
    started: Instant,
}

/// Answers messages from the current cluster view, the zone and the upstreams.
pub struct Handler {
    pub zone: Zone,
    pub view: ArcSwap<Cluster>,
    pub forwarder: Forwarder,
    pub metrics: Arc<Metrics>,
}

impl Pending {
    /// What the upstreams are asked: the question, or the out-of-zone target of an
    /// ExternalName CNAME being chased.
    pub fn upstream_question(&self) -> (Name, RecordType, DNSClass) {
        let name = match &self.chase {
            Some((_, target)) => target.clone(),
            None => self.query.name().clone(),
        };
        (name, self.query.query_type(), self.query.query_class())
    }
}

impl Handler {
    /// A handler over the view `view` of the zone `zone`, forwarding to `upstreams`.
    pub fn new(zone: Zone, view: Cluster, upstreams: Vec<std::net::SocketAddr>) -> Handler {
        Handler {
            zone,
            view: ArcSwap::from_pointee(view),
            forwarder: Forwarder::new(upstreams),
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// Answers what can be answered locally; the rest is a [`Pending`].
    pub fn handle(&self, bytes: &[u8], transport: Transport) -> Reply {
        let started = Instant::now();
        let Ok(header) = Header::read(&mut BinDecoder::new(bytes)) else {
            return Reply::Drop; // not even a header: nothing to answer to
        };
        if header.metadata.message_type == MessageType::Response {
            return Reply::Drop; // never answer answers (reflection loops)
        }
        let request = match Message::from_vec(bytes) {
            Ok(m) => m,
            Err(_) => {
                return self.error(
                    &header_only(&header),
                    ResponseCode::FormErr,
                    transport,
                    started,
                );
            }
        };
        // RFC 6891 6.1.3: a version we do not implement gets BADVERS (and our version, 0).
        if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            return self.error(&request, ResponseCode::BADVERS, transport, started);
        }
        if request.metadata.op_code != OpCode::Query {
            return self.error(&request, ResponseCode::NotImp, transport, started);
        }
        let [query] = request.queries.as_slice() else {
            return self.error(&request, ResponseCode::FormErr, transport, started);
        };
        let query = query.clone();
        if query.query_type() == RecordType::OPT {
            return self.error(&request, ResponseCode::FormErr, transport, started);
        }
        if query.query_class() != DNSClass::IN {
            return self.error(&request, ResponseCode::Refused, transport, started);
        }
        let view = self.view.load();
        let outcome = answer::resolve(&view, &self.zone, query.name(), query.query_type());
        let mut meta = response_metadata(&request);
        let soa;
        let sections: Sections<'_> = match &outcome {
            Outcome::Forward => {
                return Reply::Upstream(Box::new(Pending {
                    request,
                    query,
                    chase: None,
                    transport,
                    started,
                }));
            }
            Outcome::Chase { answers, target } => {
                let chase = Some((answers.clone(), target.clone()));
                return Reply::Upstream(Box::new(Pending {
                    request,
                    query,
                    chase,
                    transport,
                    started,
                }));
            }
            Outcome::Records {
                answers,
                additionals,
            } => {
                meta.authoritative = true;
                [answers, &[], additionals]
            }
            Outcome::NoData | Outcome::NxDomain => {
                meta.authoritative = true;
                if outcome == Outcome::NxDomain {
                    meta.response_code = ResponseCode::NXDomain;
                }
                soa = [self.zone.soa(view.serial)];
                [&[], &soa, &[]]
            }
            Outcome::NotSynced => {
                meta.response_code = ResponseCode::ServFail;
                [&[], &[], &[]]
            }
            Outcome::Refused => {
                meta.response_code = ResponseCode::Refused;
                [&[], &[], &[]]
            }
        };
        self.send(meta, &request, Some(&query), sections, transport, started)
    }

    /// Answers a question that needed the upstreams (cache first).
    pub async fn finish(&self, pending: Box<Pending>) -> Vec<u8> {
        let (name, qtype, class) = pending.upstream_question();
        let upstream = self.upstream(&name, qtype, class).await;
        self.complete(pending, upstream)
    }

    /// Answers a question that needed the upstreams with what they said (`None`: none
    /// answered). [`Handler::finish`] asks them; an in-memory cluster answers for them.
    pub fn complete(&self, pending: Box<Pending>, upstream: Option<Upstreamed>) -> Vec<u8> {
        let Pending {
            request,
            query,
            chase,
            transport,
            started,
        } = *pending;
        let mut meta = response_metadata(&request);
        let (answers, authorities, additionals) = match (chase, upstream) {
            (Some((cname, _)), answer) => {
                // A CNAME of ours: authoritative, NOERROR, whatever upstream adds to it.
                meta.authoritative = true;
                let mut answers = cname;
                if let Some(a) = answer {
                    answers.extend(a.answers);
                }
                (answers, Vec::new(), Vec::new())
            }
            (None, Some(a)) => {
                meta.response_code = a.rcode;
                (a.answers, a.authorities, a.additionals)
            }
            (None, None) => {
                meta.response_code = ResponseCode::ServFail;
                Default::default()
            }
        };
        let sections = [answers.as_slice(), &authorities, &additionals];
        match self.send(meta, &request, Some(&query), sections, transport, started) {
            Reply::Now(bytes) => bytes,
            Reply::Drop | Reply::Upstream(_) => Vec::new(),
        }
    }

    async fn upstream(
        &self,
        name: &Name,
        qtype: RecordType,
        class: DNSClass,
    ) -> Option<Upstreamed> {
        if let Some(hit) = self.forwarder.cached(name, qtype, class) {
            self.metrics.cache(true);
            return Some(hit);
        }
        self.metrics.cache(false);
        self.forwarder.ask(name, qtype, class).await
    }

    fn error(
        &self,
        request: &Message,
        rcode: ResponseCode,
        transport: Transport,
        started: Instant,
    ) -> Reply {
        let mut meta =
            Message::error_msg(request.metadata.id, request.metadata.op_code, rcode).metadata;
        meta.recursion_desired = request.metadata.recursion_desired;
        // Echo the question when there is exactly one (as most servers do); never more.
        let query = match request.queries.as_slice() {
            [q] => Some(q),
            _ => None,
        };
        self.send(meta, request, query, [&[], &[], &[]], transport, started)
    }

    /// Encodes, cut to what the transport carries: the client's UDP size, or 65,535 bytes over
    /// TCP (records that do not fit are left out and TC is set, as CoreDNS does).
    fn send(
        &self,
        meta: Metadata,
        request: &Message,
        query: Option<&Query>,
        sections: Sections<'_>,
        transport: Transport,
        started: Instant,
    ) -> Reply {
        let edns = request.edns.as_ref().map(|_| {
            let mut edns = Edns::new();
            edns.set_max_payload(OUR_PAYLOAD);
            edns.set_dnssec_ok(false);
            edns
        });
        let limit = match (&request.edns, transport) {
            (_, Transport::Tcp) => usize::from(u16::MAX),
            (Some(e), Transport::Udp) => usize::from(e.max_payload().clamp(512, OUR_PAYLOAD)),
            (None, Transport::Udp) => PLAIN_UDP,
        };
        let bytes = wire::encode(meta, query, sections, edns.as_ref(), limit);
        self.metrics.answered(
            query.map(Query::query_type),
            meta.response_code,
            started.elapsed(),
        );
        match bytes {
            Some(bytes) => Reply::Now(bytes),
            None => Reply::Drop,
        }
    }
}

/// A response's header for `request`: id, opcode, RD copied, RA set (we recurse for names
/// outside the zone).
fn response_metadata(request: &Message) -> Metadata {
    let mut meta = Message::response(request.metadata.id, request.metadata.op_code).metadata;
    meta.recursion_desired = request.metadata.recursion_desired;
    meta.recursion_available = true;
    meta
}

/// A message that carries only the header of an undecodable request.
fn header_only(header: &Header) -> Message {
    let mut m = Message::new(
        header.metadata.id,
        MessageType::Query,
        header.metadata.op_code,
    );
    m.metadata.recursion_desired = header.metadata.recursion_desired;
    m
}
