//! Fragment tracking. Later fragments of a datagram carry no L4 header, so their own headers
//! cannot name their connection. When a first fragment goes through a connection, its datagram
//! (ingress port, VNI, addresses, protocol, identification) is remembered with that connection,
//! and the later fragments replay the connection's rewrite of addresses, MACs and encapsulation
//! (not of ports: they have none).

use crate::flow_table::FlowTable;
use crate::headers::FlowKey;
use crate::parse::Parsed;
use crate::tcp_state::FlowSide;
use crate::time::Timestamp;
use hashbrown::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// How long a datagram's fragments are followed (Linux `ipfrag_time` is 30 s).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Datagrams followed at once; past this, new ones are not followed (their later fragments
/// take the slow path on their own headers, as untracked fragments do).
const LIMIT: usize = 4096;

/// Identifies a fragmented datagram where it enters the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DatagramKey {
    port: u16,
    vni: u32,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    ident: u32,
}

impl DatagramKey {
    fn of(port: u16, p: &Parsed, ident: u32) -> DatagramKey {
        DatagramKey {
            port,
            vni: p.vni(),
            src: p.headers.src_ip,
            dst: p.headers.dst_ip,
            proto: p.headers.proto,
            ident,
        }
    }
}

/// A followed datagram: the connection (checked again by key on use, as slots are reused).
#[derive(Debug, Clone, Copy)]
struct Followed {
    slot: u32,
    side: FlowSide,
    key: FlowKey,
    since: Timestamp,
}

/// Datagrams whose first fragment has been seen.
#[derive(Debug, Default)]
pub(crate) struct Fragments {
    map: HashMap<DatagramKey, Followed>,
}

impl Fragments {
    /// Remembers that the first fragment of `p`'s datagram belongs to `slot`'s `side`.
    pub(crate) fn first(
        &mut self,
        port: u16,
        p: &Parsed,
        slot: u32,
        side: FlowSide,
        now: Timestamp,
    ) {
        let Some(f) = p.fragment.filter(|f| !f.later) else {
            return;
        };
        if self.map.len() >= LIMIT {
            self.expire(now);
            if self.map.len() >= LIMIT {
                return;
            }
        }
        let key = p.flow_key(port);
        let followed = Followed {
            slot,
            side,
            key,
            since: now,
        };
        self.map.insert(DatagramKey::of(port, p, f.ident), followed);
    }

    /// The connection a later fragment belongs to, if its first fragment was seen recently
    /// and the connection is still there.
    pub(crate) fn later(
        &self,
        port: u16,
        p: &Parsed,
        flows: &FlowTable,
        now: Timestamp,
    ) -> Option<(u32, FlowSide)> {
        let f = p.fragment.filter(|f| f.later)?;
        let d = self.map.get(&DatagramKey::of(port, p, f.ident))?;
        let alive = now.since(d.since) <= TIMEOUT
            && flows.get(d.slot).is_some_and(|r| r.key(d.side) == d.key);
        alive.then_some((d.slot, d.side))
    }

    /// Forgets datagrams older than the timeout.
    pub(crate) fn expire(&mut self, now: Timestamp) {
        self.map.retain(|_, d| now.since(d.since) <= TIMEOUT);
    }
}
