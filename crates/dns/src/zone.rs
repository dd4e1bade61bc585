//! The cluster zone's fixed records: its SOA and NS (CoreDNS's values, reference §B.1).

use hickory_proto::rr::rdata::{NS, SOA};
use hickory_proto::rr::{Name, RData, Record};

use crate::names;

/// The zone served with `kubernetes` semantics, and the TTL of its records.
#[derive(Clone, Debug)]
pub struct Zone {
    /// Lower-case, absolute.
    pub name: Name,
    /// The zone's labels, lower-case, leaf first.
    pub labels: Vec<Vec<u8>>,
    pub ttl: u32,
    /// `ns.dns.<zone>`.
    pub ns: Name,
    /// `hostmaster.<zone>`.
    pub mbox: Name,
}

impl Zone {
    /// The zone `name` (e.g. `cluster.local`) answering with `ttl`.
    pub fn new(name: &str, ttl: u32) -> Result<Zone, String> {
        let zone = names::absolute(name)
            .map_err(|e| format!("--zone: {e}"))?
            .to_lowercase();
        let labels = zone.iter().map(<[u8]>::to_vec).collect();
        let ns = names::child("ns", &names::child("dns", &zone)?)?;
        let mbox = names::child("hostmaster", &zone)?;
        Ok(Zone {
            name: zone,
            labels,
            ttl,
            ns,
            mbox,
        })
    }

    /// The SOA record: refresh 7200, retry 1800, expire 86400, minimum = the TTL; its own TTL
    /// min(ttl, 300).
    pub fn soa(&self, serial: u32) -> Record {
        let soa = SOA::new(
            self.ns.clone(),
            self.mbox.clone(),
            serial,
            7200,
            1800,
            86400,
            self.ttl,
        );
        Record::from_rdata(self.name.clone(), self.ttl.min(300), RData::SOA(soa))
    }

    /// The apex NS record.
    pub fn ns_record(&self) -> Record {
        Record::from_rdata(self.name.clone(), self.ttl, RData::NS(NS(self.ns.clone())))
    }

    /// The labels of `qname` (lower-case, leaf first) left of the zone, if it is in the zone.
    pub fn strip<'a>(&self, labels: &'a [&'a [u8]]) -> Option<&'a [&'a [u8]]> {
        let n = self.labels.len();
        if labels.len() < n {
            return None;
        }
        let (rest, tail) = labels.split_at(labels.len() - n);
        tail.iter()
            .zip(&self.labels)
            .all(|(a, b)| *a == b.as_slice())
            .then_some(rest)
    }
}
