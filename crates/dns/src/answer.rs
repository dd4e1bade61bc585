//! What the cluster DNS answers for one question, with the `kubernetes` plugin's rules
//! (reference §B.1, §B.2): a pure function of the cluster view, the zone and the question.
//! The A, AAAA and SRV answers of a Service's own name are made once per view entry and shared
//! by every question for it, so a headless Service with thousands of endpoints costs a query
//! no more than what is sent ([`crate::wire`] writes only what fits).

use std::net::IpAddr;
use std::sync::Arc;

use hashbrown::HashSet;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, PTR, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::cluster::{Cluster, PortName, Shape};
use crate::names;
use crate::zone::Zone;

/// The schema version `dns-version.<zone>` TXT answers.
pub const DNS_SCHEMA_VERSION: &str = "1.1.0";

/// How many in-zone ExternalName hops are followed before giving up (a loop of CNAMEs).
const MAX_CHASE: usize = 8;

/// The verdict for a question.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// NOERROR with records (authoritative); shared with the view's cache.
    Records {
        answers: Arc<[Record]>,
        additionals: Arc<[Record]>,
    },
    /// NOERROR, no records: the name exists without this type (SOA goes in authority).
    NoData,
    /// The name does not exist (SOA goes in authority).
    NxDomain,
    /// In the zone, but the objects have not been listed yet.
    NotSynced,
    /// A CNAME out of the zone: answer `answers` plus what upstream says for `target`.
    Chase { answers: Vec<Record>, target: Name },
    /// Not ours: ask the upstreams.
    Forward,
    /// A question this server refuses (zone transfers).
    Refused,
}

/// One address (or alias) a name yields, with the port and SRV target it came with.
#[derive(Clone, Debug)]
struct Hit<'a> {
    host: Host<'a>,
    /// -1 = no port (no SRV).
    port: i32,
    target: &'a Name,
}

#[derive(Clone, Debug)]
enum Host<'a> {
    Ip(IpAddr),
    Alias(&'a Name),
}

/// Answers `qname`/`qtype` from `cluster`.
pub fn resolve(cluster: &Cluster, zone: &Zone, qname: &Name, qtype: RecordType) -> Outcome {
    resolve_depth(cluster, zone, qname, qtype, 0)
}

fn resolve_depth(
    cluster: &Cluster,
    zone: &Zone,
    qname: &Name,
    qtype: RecordType,
    depth: usize,
) -> Outcome {
    let lower = qname.to_lowercase();
    let labels: Vec<&[u8]> = lower.iter().collect();
    let Some(rest) = zone.strip(&labels) else {
        return reverse(cluster, zone, qname, qtype, &labels);
    };
    if matches!(qtype, RecordType::AXFR | RecordType::IXFR) {
        return Outcome::Refused;
    }
    if !cluster.synced {
        return Outcome::NotSynced;
    }
    if rest.is_empty() {
        return apex(cluster, zone, qtype);
    }
    if rest == [b"ns".as_slice(), b"dns".as_slice()] {
        return ns_address(cluster, zone, qname, qtype);
    }
    if qtype == RecordType::TXT && rest == [b"dns-version".as_slice()] {
        let txt = TXT::new(vec![DNS_SCHEMA_VERSION.to_string()]);
        return records(vec![Record::from_rdata(
            qname.clone(),
            28800,
            RData::TXT(txt),
        )]);
    }
    if let Some(cached) = own_name(cluster, zone, rest, qtype) {
        return cached;
    }
    let Ok(hits) = lookup(cluster, qname, rest) else {
        return Outcome::NxDomain;
    };
    match qtype {
        RecordType::A | RecordType::AAAA => addresses(cluster, zone, qname, qtype, &hits, depth),
        RecordType::SRV => srv(zone, qname, &hits),
        RecordType::CNAME => {
            let cnames: Vec<Record> = hits
                .iter()
                .filter_map(|h| match h.host {
                    Host::Alias(t) => Some(cname(qname, t, zone.ttl)),
                    Host::Ip(_) => None,
                })
                .collect();
            records(cnames)
        }
        // Every other type exists or not as the name does: the "fake A lookup" of CoreDNS.
        _ => Outcome::NoData,
    }
}

/// The answer to a Service's own name (`svc.ns.svc.zone`) for A, AAAA or SRV, from the view
/// entry's cache (made at the first question, owned by the Service's name): these depend on
/// the entry alone. `None` for other names and types, and for ExternalName Services (whose
/// answer follows another Service).
fn own_name(cluster: &Cluster, zone: &Zone, rest: &[&[u8]], qtype: RecordType) -> Option<Outcome> {
    let [name, ns, b"svc"] = rest else {
        return None;
    };
    let slot = match qtype {
        RecordType::A => 0,
        RecordType::AAAA => 1,
        RecordType::SRV => 2,
        _ => return None,
    };
    let ns = std::str::from_utf8(ns).ok()?;
    let entry = cluster.service(ns, std::str::from_utf8(name).ok()?)?;
    if matches!(entry.shape, Shape::ExternalName(_)) {
        return None;
    }
    let outcome = entry.answers[slot].get_or_init(|| {
        let rest = [name, ns.as_bytes(), b"svc".as_slice()];
        match lookup(cluster, &entry.fqdn, &rest) {
            Err(()) => Outcome::NxDomain,
            Ok(hits) if qtype == RecordType::SRV => srv(zone, &entry.fqdn, &hits),
            Ok(hits) => addresses(cluster, zone, &entry.fqdn, qtype, &hits, 0),
        }
    });
    Some(outcome.clone())
}

fn records(answers: Vec<Record>) -> Outcome {
    with_additionals(answers, Vec::new())
}

fn with_additionals(answers: Vec<Record>, additionals: Vec<Record>) -> Outcome {
    if answers.is_empty() {
        Outcome::NoData
    } else {
        Outcome::Records {
            answers: answers.into(),
            additionals: additionals.into(),
        }
    }
}

fn apex(cluster: &Cluster, zone: &Zone, qtype: RecordType) -> Outcome {
    match qtype {
        RecordType::SOA => records(vec![zone.soa(cluster.serial)]),
        RecordType::NS => {
            let additionals = kube_dns_ips(cluster)
                .map(|ip| address(&zone.ns, ip, zone.ttl))
                .collect();
            with_additionals(vec![zone.ns_record()], additionals)
        }
        _ => Outcome::NoData,
    }
}

/// The cluster DNS's own addresses: the ClusterIPs of `kube-system/kube-dns`, if it exists.
fn kube_dns_ips(cluster: &Cluster) -> impl Iterator<Item = IpAddr> + '_ {
    let ips = match cluster.service("kube-system", "kube-dns").map(|s| &s.shape) {
        Some(Shape::ClusterIp(ips)) => ips.as_slice(),
        _ => &[],
    };
    ips.iter().copied()
}

fn ns_address(cluster: &Cluster, zone: &Zone, qname: &Name, qtype: RecordType) -> Outcome {
    let answers = kube_dns_ips(cluster)
        .filter(|ip| family_matches(*ip, qtype))
        .map(|ip| address(qname, ip, zone.ttl))
        .collect();
    records(answers)
}

fn family_matches(ip: IpAddr, qtype: RecordType) -> bool {
    matches!(
        (ip, qtype),
        (IpAddr::V4(_), RecordType::A) | (IpAddr::V6(_), RecordType::AAAA)
    )
}

fn address(name: &Name, ip: IpAddr, ttl: u32) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(name.clone(), ttl, data)
}

fn cname(name: &Name, target: &Name, ttl: u32) -> Record {
    Record::from_rdata(name.clone(), ttl, RData::CNAME(CNAME(target.clone())))
}

/// The shapes of parse.go: `[_port._proto.|endpoint.]service.namespace.(svc|pod)`; `Err` is a
/// name error (NXDOMAIN), `Ok(empty)` a name that exists with nothing to answer.
fn lookup<'a>(cluster: &'a Cluster, qname: &'a Name, rest: &[&[u8]]) -> Result<Vec<Hit<'a>>, ()> {
    let n = rest.len();
    let kind = rest[n - 1];
    if kind != b"svc" && kind != b"pod" {
        return Err(());
    }
    if n == 1 {
        return Ok(Vec::new());
    }
    let ns = std::str::from_utf8(rest[n - 2]).map_err(|_| ())?;
    let services = cluster.namespaces.get(ns).ok_or(())?;
    if n == 2 {
        return Ok(Vec::new());
    }
    let name = std::str::from_utf8(rest[n - 3]).map_err(|_| ())?;
    let (endpoint, port, proto): (&[u8], &[u8], &[u8]) = match &rest[..n - 3] {
        [] => (b"", b"", b""),
        [endpoint] => (endpoint, b"", b""),
        [port, proto] => (b"", strip_underscore(port), strip_underscore(proto)),
        _ => return Err(()), // too long
    };
    if kind == b"pod" {
        // `pods insecure`: the address in the name, if the namespace exists.
        let ip = names::pod_ip(name).ok_or(())?;
        return Ok(vec![Hit {
            host: Host::Ip(ip),
            port: -1,
            target: qname,
        }]);
    }
    let svc = services.get(name).ok_or(())?;
    let mut hits = Vec::new();
    let matches = |p: &PortName| {
        (port.is_empty() || port == p.name.as_bytes())
            && (proto.is_empty() || proto == p.protocol.as_bytes())
    };
    match &svc.shape {
        Shape::ExternalName(target) => {
            let target = target.as_ref().filter(|_| endpoint.is_empty()).ok_or(())?;
            hits.push(Hit {
                host: Host::Alias(target),
                port: -1,
                target: &svc.fqdn,
            });
        }
        Shape::ClusterIp(ips) if endpoint.is_empty() => {
            let mut any_port = false;
            for p in svc.ports.iter().filter(|p| matches(p)) {
                any_port = true;
                hits.extend(ips.iter().map(|ip| Hit {
                    host: Host::Ip(*ip),
                    port: p.port,
                    target: &svc.fqdn,
                }));
            }
            if !any_port {
                return Err(());
            }
        }
        // Headless, or one endpoint of any Service: the ready endpoints.
        Shape::Headless | Shape::ClusterIp(_) => {
            for ep in &svc.endpoints {
                if !endpoint.is_empty() && endpoint != ep.label.as_bytes() {
                    continue;
                }
                for p in ep.ports.iter().filter(|p| matches(p)) {
                    hits.push(Hit {
                        host: Host::Ip(ep.ip),
                        port: p.port,
                        target: &ep.fqdn,
                    });
                }
            }
            if hits.is_empty() {
                return Err(());
            }
        }
    }
    Ok(hits)
}

fn strip_underscore(label: &[u8]) -> &[u8] {
    label.strip_prefix(b"_").unwrap_or(label)
}

fn addresses(
    cluster: &Cluster,
    zone: &Zone,
    qname: &Name,
    qtype: RecordType,
    hits: &[Hit<'_>],
    depth: usize,
) -> Outcome {
    let mut answers: Vec<Record> = Vec::new();
    let mut seen: HashSet<IpAddr> = HashSet::new();
    for hit in hits {
        match hit.host {
            Host::Ip(ip) if family_matches(ip, qtype) && seen.insert(ip) => {
                answers.push(address(qname, ip, zone.ttl));
            }
            Host::Ip(_) => {}
            Host::Alias(target) => {
                answers.push(cname(qname, target, zone.ttl));
                if !zone.name.zone_of(target) {
                    return Outcome::Chase {
                        answers,
                        target: target.clone(),
                    };
                }
                if depth < MAX_CHASE
                    && let Outcome::Records { answers: more, .. } =
                        resolve_depth(cluster, zone, target, qtype, depth + 1)
                {
                    answers.extend(more.iter().cloned());
                }
            }
        }
    }
    records(answers)
}

fn srv(zone: &Zone, qname: &Name, hits: &[Hit<'_>]) -> Outcome {
    let mut targets: Vec<(&Name, u16)> = Vec::new();
    let mut additionals: Vec<Record> = Vec::new();
    let (mut seen_targets, mut seen_extras) = (HashSet::new(), HashSet::new());
    for hit in hits {
        let Host::Ip(ip) = hit.host else { continue };
        let Ok(port) = u16::try_from(hit.port) else {
            continue;
        };
        if seen_targets.insert((hit.target, port)) {
            targets.push((hit.target, port));
        }
        if seen_extras.insert((hit.target, ip)) {
            additionals.push(address(hit.target, ip, zone.ttl));
        }
    }
    if targets.is_empty() {
        return Outcome::NoData;
    }
    let weight = (100 / targets.len()) as u16;
    let answers: Vec<Record> = targets
        .into_iter()
        .map(|(target, port)| {
            let data = RData::SRV(SRV::new(0, weight, port, target.clone()));
            Record::from_rdata(qname.clone(), zone.ttl, data)
        })
        .collect();
    with_additionals(answers, additionals)
}

/// PTR for our addresses; everything else under the reverse trees (and outside) goes upstream.
fn reverse(
    cluster: &Cluster,
    zone: &Zone,
    qname: &Name,
    qtype: RecordType,
    labels: &[&[u8]],
) -> Outcome {
    if qtype != RecordType::PTR {
        return Outcome::Forward;
    }
    let Some(targets) = names::reverse_ip(labels).and_then(|ip| cluster.ptr_targets(&ip)) else {
        return Outcome::Forward;
    };
    let answers = targets
        .iter()
        .map(|t| Record::from_rdata(qname.clone(), zone.ttl, RData::PTR(PTR(t.name().clone()))))
        .collect();
    records(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_services_own_name_is_answered_once_per_view_entry() {
        let mut objects = kubesrc::Objects::default();
        let eps: String = (0..3000)
            .map(|i| format!("- {{addresses: [10.244.{}.{}]}}\n", i / 250, i % 250 + 1))
            .collect();
        let text = format!(
            "kind: Service\napiVersion: v1\nmetadata: {{name: big}}\nspec: {{clusterIP: None}}\n---\n\
             kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: big-1, labels: {{kubernetes.io/service-name: big}}}}\n\
             addressType: IPv4\nendpoints:\n{eps}"
        );
        kubesrc::manifests::load_text(&text, "big.yaml", &mut objects);
        let zone = Zone::new("cluster.local", 30).unwrap();
        let view = Cluster::build(&objects, &zone.name);
        let ask = |name: &str| {
            let qname = Name::from_ascii(name).unwrap();
            match resolve(&view, &zone, &qname, RecordType::A) {
                Outcome::Records { answers, .. } => answers,
                other => panic!("{other:?}"),
            }
        };
        let first = ask("big.default.svc.cluster.local.");
        assert_eq!(first.len(), 3000);
        // Any spelling, any number of times: the same records, not made again.
        let again = ask("BIG.default.svc.cluster.local.");
        assert!(Arc::ptr_eq(&first, &again));
    }
}
