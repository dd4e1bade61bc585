//! Names in the in-memory cluster: the cluster DNS pods answer with the `dns` crate's handler
//! over the Kubernetes objects the real cluster writes (the same object makers), behind the
//! `kube-dns` Service load-balanced by the simulated switches; a Windows pod resolves with
//! the rules hnsd gives it (`pod_dns` from its endpoint's `Dns`, which the CNI config's `dns`
//! and `runtimeConfig.dns` made), each query a real DNS message in a UDP datagram through the
//! simulated cluster.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use dns::handler::{Handler, Reply, Transport};
use dns::zone::Zone;
use dnsclient::{AskedName, Rules, Walker};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hns::Profile;
use lab::{Cluster, UdpResponder, Who};

use super::PodState;
use super::build::cluster_dns::kube_dns_objects;
use super::build::services::{dns_objects, service_objects};
use super::topology::{CLUSTER_DOMAIN, DNS_SERVICE_IP, EXTERNAL_ZONE, OUTSIDE_IP, Topology};

/// The TTL `winnet dns` answers with by default (`--ttl`).
const TTL: u32 = 30;

/// The Kubernetes objects the real cluster writes for topology `t`, its `pods` (node name,
/// pod) and its DNS pods `dns_pods` (node name, pod), read as a kube API would serve them.
pub fn objects(
    t: &Topology,
    pods: &[(String, PodState)],
    dns_pods: &[(String, PodState)],
) -> anyhow::Result<kubesrc::Objects> {
    let mut lists = Vec::new();
    for (k, s) in t.services.iter().enumerate() {
        lists.push(service_objects(k, s, t.health_check_port(s), pods)?);
    }
    lists.extend(dns_objects(t, pods));
    lists.push(kube_dns_objects(dns_pods));
    let mut objects = kubesrc::Objects::default();
    for (i, l) in lists.iter().enumerate() {
        let text = serde_json::to_string(l)?;
        kubesrc::manifests::load_text(&text, &format!("simulated manifest {i}"), &mut objects);
    }
    if let Some(p) = objects.problems.first() {
        anyhow::bail!("the simulated manifests: {p}");
    }
    Ok(objects)
}

/// The cluster DNS's handler over `objects`.
pub fn handler(objects: &kubesrc::Objects) -> anyhow::Result<Handler> {
    let zone = Zone::new(CLUSTER_DOMAIN, TTL).map_err(|e| anyhow!("zone: {e}"))?;
    let view = dns::cluster::Cluster::build(objects, &zone.name);
    Ok(Handler::new(zone, view, Vec::new()))
}

/// A DNS pod's UDP port 53: the handler answers from the query's bytes; names outside the
/// cluster zone go to the [`external_zone_stand_in`] as the upstream.
pub fn responder(handler: Arc<Handler>) -> UdpResponder {
    Arc::new(
        move |query: &[u8]| match handler.handle(query, Transport::Udp) {
            Reply::Now(bytes) => Some(bytes),
            Reply::Drop => None,
            Reply::Upstream(pending) => {
                let (name, qtype, class) = pending.upstream_question();
                let answer = external_zone_stand_in(&name, qtype, class);
                Some(handler.complete(pending, answer))
            }
        },
    )
}

/// A STAND-IN for the external host's Knot DNS (the real cluster serves
/// `build::knot::zone_file()` with knotd, which the simulation cannot run): `www.<zone>` has
/// the outside address, the rest of the zone is NXDOMAIN with its SOA; names outside the zone
/// are REFUSED (knotd is authoritative only, it does not recurse).
pub fn external_zone_stand_in(
    name: &Name,
    qtype: RecordType,
    class: DNSClass,
) -> Option<dns::forward::Upstreamed> {
    let zone = Name::from_ascii(format!("{EXTERNAL_ZONE}.")).ok()?;
    let mut out = dns::forward::Upstreamed {
        rcode: ResponseCode::NoError,
        answers: Vec::new(),
        authorities: Vec::new(),
        additionals: Vec::new(),
    };
    if class != DNSClass::IN || !zone.zone_of(name) {
        out.rcode = ResponseCode::Refused;
        return Some(out);
    }
    let www = Name::from_ascii(format!("www.{EXTERNAL_ZONE}.")).ok()?;
    let soa = || {
        let ns = Name::from_ascii(format!("ns.{EXTERNAL_ZONE}.")).ok()?;
        let mail = Name::from_ascii(format!("hostmaster.{EXTERNAL_ZONE}.")).ok()?;
        let rdata = RData::SOA(SOA::new(ns, mail, 1, 3600, 600, 86400, 300));
        Some(Record::from_rdata(zone.clone(), 300, rdata))
    };
    match (*name == www, qtype) {
        (true, RecordType::A) => {
            out.answers
                .push(Record::from_rdata(www, 300, RData::A(A::from(OUTSIDE_IP))))
        }
        (true, _) => out.authorities.extend(soa()),
        (false, _) => {
            out.rcode = ResponseCode::NXDomain;
            out.authorities.extend(soa());
        }
    }
    Some(out)
}

/// The resolver rules of a pod on a Windows node with endpoint DNS `dns` under `profile`, as
/// hnsd decides them.
pub fn pod_rules(profile: Profile, pod: &str, dns: &hcn::Dns) -> anyhow::Result<Rules> {
    let ep = hcn::Endpoint {
        dns: dns.clone(),
        ..hcn::Endpoint::default()
    };
    let netns = Path::new(host::netns::Netns::RUN_DIR).join(pod);
    hns_dataplane::dns::pod_dns(profile, &ep, &netns)
        .and_then(|d| d.rules())
        .with_context(|| format!("{pod}: no DNS client"))
}

/// What a pod's resolver did with a name: the walk, and the first address it got.
pub struct Resolved {
    pub walk: dnsclient::Walk,
    pub address: Option<Ipv4Addr>,
}

/// Resolves `name` (A) from pod `from` under `rules`: every query the walker asks is a DNS
/// message carried in a UDP datagram to the `kube-dns` Service through the simulated cluster.
pub fn resolve(c: &mut Cluster, from: Who, rules: &Rules, name: &str) -> anyhow::Result<Resolved> {
    let asked = AskedName::parse(name).map_err(|e| anyhow!("{name}: {e}"))?;
    let server = IpAddr::V4(DNS_SERVICE_IP);
    let mut walker = Walker::new(rules, &asked);
    let mut address = None;
    while let Some((name, _)) = walker.next() {
        let request = dnsclient::upstream::request(&name.to_wire(), RecordType::A);
        let bytes = request.to_vec().context("encode the query")?;
        let ex = c.udp_exchange(from, server, 53, &bytes);
        let answer = ex
            .reply_payload()
            .and_then(|b| Message::from_vec(b).ok())
            .filter(|m| dnsclient::upstream::matches_request(&request, m));
        let outcome = match &answer {
            Some(m) => dnsclient::upstream::outcome(m, RecordType::A),
            None => dnsclient::Outcome::Timeout,
        };
        if outcome.is_answer() {
            address = answer
                .iter()
                .flat_map(|m| m.answers.iter())
                .find_map(|r| match r.data {
                    RData::A(a) => Some(a.0),
                    _ => None,
                });
        }
        walker.record(outcome, Some(format!("{server}:53")), 1);
    }
    Ok(Resolved {
        walk: walker.finish("A"),
        address,
    })
}
