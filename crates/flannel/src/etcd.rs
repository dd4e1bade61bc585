//! The etcd subnet manager, with flannel's etcd v3 schema: the network config at
//! `<prefix>/config`, and each node's lease at `<prefix>/subnets/10.244.1.0-24` holding
//! `{"PublicIP", "BackendType", "BackendData"}` under an etcd lease with a TTL that flanneld
//! keeps alive. A node that stops renewing loses its key when the TTL runs out.

use std::net::Ipv4Addr;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};
use ipnet::Ipv4Net;

use crate::Error;
use crate::config::NetConf;
use crate::lease::{Lease, LeaseAttrs, parse_subnet_key, subnet_key};

/// The etcd subnet manager of one node.
pub struct EtcdManager {
    client: Client,
    prefix: String,
    ttl: Duration,
    /// Our key and the etcd lease that holds it.
    mine: Option<(Ipv4Net, i64)>,
    /// The keep-alive stream of our etcd lease, kept open across renewals.
    keeper: Option<(i64, LeaseKeeper, LeaseKeepAliveStream)>,
    /// The one watch on the leases, kept open across syncs.
    watch: Option<WatchStream>,
}

impl EtcdManager {
    /// Connects to `endpoints`; an unreachable etcd is an error that names them.
    pub async fn connect(
        endpoints: &[String],
        prefix: &str,
        ttl: Duration,
    ) -> Result<EtcdManager, Error> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(5));
        let unreachable = |e: etcd_client::Error| {
            Error::Etcd(format!("cannot reach etcd at {}: {e}", endpoints.join(",")))
        };
        let mut client = Client::connect(endpoints, Some(opts))
            .await
            .map_err(unreachable)?;
        // connect() is lazy: ask for something so an unreachable etcd shows now.
        client.status().await.map_err(unreachable)?;
        Ok(EtcdManager {
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
            ttl,
            mine: None,
            keeper: None,
            watch: None,
        })
    }

    fn subnets_prefix(&self) -> String {
        format!("{}/subnets/", self.prefix)
    }

    /// The network config at `<prefix>/config`.
    pub async fn network_config(&mut self) -> Result<NetConf, Error> {
        let key = format!("{}/config", self.prefix);
        let resp = self.client.get(key.as_str(), None).await.map_err(etcd)?;
        let kv = resp.kvs().first().ok_or_else(|| {
            Error::Etcd(format!(
                "no network config at {key}; put net-conf.json there (etcdctl put {key} < net-conf.json)"
            ))
        })?;
        let text = String::from_utf8_lossy(kv.value()).into_owned();
        NetConf::parse(&text).map_err(|e| Error::Config(format!("{key}: {e}")))
    }

    /// Every lease, with the etcd lease of each key and the revision they were read at.
    async fn all(&mut self) -> Result<(Vec<(Lease, i64)>, i64), Error> {
        let prefix = self.subnets_prefix();
        let resp = self
            .client
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(etcd)?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let Some(subnet) = key.strip_prefix(&prefix).and_then(parse_subnet_key) else {
                continue;
            };
            match LeaseAttrs::from_etcd_json(kv.value()) {
                Ok(attrs) => out.push((Lease { subnet, attrs }, kv.lease())),
                Err(e) => tracing::warn!("skipping lease {key}: {e}"),
            }
        }
        Ok((out, rev))
    }

    /// Leases a subnet for `attrs`: the one already leased to this public IP, else the one of
    /// the last run (`previous`) if it is free, else the first free one. A node that loses
    /// the race for a key reads the leases again and picks at random among the first 100 free
    /// ones, as flannel always does: nodes starting together spread out instead of all racing
    /// for the next key, while nodes started one by one still get predictable subnets (the
    /// local cluster and its demo rely on that).
    pub async fn acquire(
        &mut self,
        conf: &NetConf,
        attrs: &LeaseAttrs,
        previous: Option<Ipv4Net>,
    ) -> Result<Lease, Error> {
        let (mut leases, _) = self.all().await?;
        if let Some(at) = leases
            .iter()
            .position(|(l, _)| l.attrs.public_ip == attrs.public_ip && !conf.holds(l.subnet))
        {
            // Leased under an earlier config (its Network or SubnetLen changed): given up, as
            // flannel does, for one of this config.
            let (old, _) = leases.remove(at);
            tracing::info!(
                "found lease {} for this node ({}) but it is not compatible with the current config (Network {}, SubnetLen {}); deleting it",
                old.subnet,
                attrs.public_ip,
                conf.network,
                conf.subnet_len
            );
            self.delete(old.subnet).await?;
        }
        let previous = previous.filter(|p| {
            let fits = conf.holds(*p);
            if !fits {
                tracing::warn!(
                    "subnet {p} of the last run is not compatible with the current config (Network {}, SubnetLen {}); ignoring it",
                    conf.network,
                    conf.subnet_len
                );
            }
            fits
        });
        if let Some((l, id)) = leases
            .iter()
            .find(|(l, _)| l.attrs.public_ip == attrs.public_ip)
        {
            self.mine = Some((l.subnet, *id));
            if self.renew().await.is_ok() {
                let attrs = attrs.keeping_vtep_mac_of(&l.attrs);
                if l.attrs != attrs {
                    self.publish(&attrs).await?;
                }
                return Ok(Lease {
                    subnet: l.subnet,
                    attrs,
                });
            }
        }
        if let Some(p) = previous
            && let Some((l, _)) = leases.iter().find(|(l, _)| l.subnet == p)
            && l.attrs.public_ip != attrs.public_ip
        {
            tracing::warn!(
                "subnet {p} of the last run is leased to {}; taking another",
                l.attrs.public_ip
            );
        }
        for attempt in 0..ACQUIRE_ATTEMPTS {
            let taken: Vec<Ipv4Net> = leases.iter().map(|(l, _)| l.subnet).collect();
            let rand = if attempt == 0 { 0 } else { random() };
            let Some(s) = pick_subnet(conf, &taken, previous, rand) else {
                return Err(Error::Etcd(format!(
                    "no free /{} subnet left in {}",
                    conf.subnet_len, conf.network
                )));
            };
            if self.try_create(s, attrs).await? {
                return Ok(Lease {
                    subnet: s,
                    attrs: *attrs,
                });
            }
            tracing::debug!("another node took {s} first; picking again");
            leases = self.all().await?.0;
        }
        Err(Error::Etcd(format!(
            "lost the race for a subnet {ACQUIRE_ATTEMPTS} times; is another flanneld using public IP {}?",
            attrs.public_ip
        )))
    }

    /// Creates the key for `subnet` unless someone holds it.
    async fn try_create(&mut self, subnet: Ipv4Net, attrs: &LeaseAttrs) -> Result<bool, Error> {
        let key = format!("{}{}", self.subnets_prefix(), subnet_key(subnet));
        let lease = self
            .client
            .lease_grant(self.ttl.as_secs().max(1) as i64, None)
            .await
            .map_err(etcd)?
            .id();
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                attrs.to_etcd_json(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let ok = self.client.txn(txn).await.map_err(etcd)?.succeeded();
        if ok {
            self.mine = Some((subnet, lease));
        } else {
            let _ = self.client.lease_revoke(lease).await;
        }
        Ok(ok)
    }

    /// Deletes the key of `subnet`.
    async fn delete(&mut self, subnet: Ipv4Net) -> Result<(), Error> {
        let key = format!("{}{}", self.subnets_prefix(), subnet_key(subnet));
        self.client.delete(key.as_str(), None).await.map_err(etcd)?;
        Ok(())
    }

    /// Rewrites our lease's value (the VtepMAC once the network exists).
    pub async fn publish(&mut self, attrs: &LeaseAttrs) -> Result<(), Error> {
        let Some((subnet, lease)) = self.mine else {
            return Err(Error::Etcd("no lease to publish to".into()));
        };
        let key = format!("{}{}", self.subnets_prefix(), subnet_key(subnet));
        self.client
            .put(
                key,
                attrs.to_etcd_json(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(etcd)?;
        Ok(())
    }

    /// Gives our lease back (its key goes with the etcd lease), after the node could not be
    /// built on it; failing that, the TTL removes it.
    pub async fn release(&mut self) {
        if let Some((subnet, lease)) = self.mine.take() {
            self.keeper = None;
            if let Err(e) = self.client.lease_revoke(lease).await {
                tracing::warn!("giving back the lease of {subnet}: {e}; it expires with its TTL");
            }
        }
    }

    /// Keeps our lease alive for another TTL, over one keep-alive stream kept open (opened
    /// again after it failed). A lease etcd no longer has is `Error::LeaseLost`.
    pub async fn renew(&mut self) -> Result<(), Error> {
        let Some((subnet, lease)) = self.mine else {
            return Ok(());
        };
        if !matches!(&self.keeper, Some((id, _, _)) if *id == lease) {
            let (keeper, stream) = self.client.lease_keep_alive(lease).await.map_err(etcd)?;
            self.keeper = Some((lease, keeper, stream));
        }
        let Some((_, keeper, stream)) = self.keeper.as_mut() else {
            return Ok(());
        };
        let answer = match keeper.keep_alive().await {
            Ok(()) => stream.message().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(Some(r)) if r.ttl() > 0 => Ok(()),
            Ok(None) => {
                self.keeper = None;
                Err(Error::Etcd("the lease keep-alive stream ended".into()))
            }
            Ok(Some(_)) => {
                self.keeper = None;
                Err(Error::LeaseLost(format!(
                    "etcd no longer has the lease of {subnet} (it expired or was revoked); \
                     restart flanneld to lease a subnet again"
                )))
            }
            Err(e) => {
                self.keeper = None;
                Err(etcd(e))
            }
        }
    }

    /// Every other node's lease. The first read (and the first after the watch failed) also
    /// opens the one watch on the leases, from just after what it read; later reads keep it.
    pub async fn others(&mut self, me: Ipv4Addr) -> Result<Vec<Lease>, Error> {
        let (all, rev) = self.all().await?;
        if self.watch.is_none() {
            let prefix = self.subnets_prefix();
            let stream = self
                .client
                .watch(
                    prefix.as_str(),
                    Some(
                        WatchOptions::new()
                            .with_prefix()
                            .with_start_revision(rev + 1),
                    ),
                )
                .await
                .map_err(etcd)?;
            self.watch = Some(stream);
        }
        Ok(all
            .into_iter()
            .map(|(l, _)| l)
            .filter(|l| l.attrs.public_ip != me)
            .collect())
    }

    /// Waits until a lease changes (added, changed, deleted or expired). An ended, failed,
    /// cancelled or compacted watch is dropped, to be opened again by the next read.
    pub async fn changed(&mut self) -> Result<(), Error> {
        let Some(stream) = self.watch.as_mut() else {
            return std::future::pending().await;
        };
        let why = loop {
            match stream.message().await {
                Ok(Some(r)) if r.compact_revision() > 0 => {
                    break format!(
                        "the etcd watch fell behind compaction (revision {})",
                        r.compact_revision()
                    );
                }
                Ok(Some(r)) if r.canceled() => {
                    break format!("etcd cancelled the watch: {}", r.cancel_reason());
                }
                // The watch's "created" answer (and progress notes) change no lease.
                Ok(Some(r)) if r.events().is_empty() => continue,
                Ok(Some(_)) => return Ok(()),
                Ok(None) => break "the etcd watch ended".to_string(),
                Err(e) => break e.to_string(),
            }
        };
        self.watch = None;
        Err(Error::Etcd(why))
    }
}

/// How many times a node picks again after another took its pick first.
const ACQUIRE_ATTEMPTS: usize = 50;
/// flannel picks among this many free subnets.
const PICK_AMONG: usize = 100;

/// The subnet to try next: `previous` if it is free, else the `rand`-th (modulo) of the first
/// 100 free subnets of the network after its first (which flannel leaves unused). Pure.
pub fn pick_subnet(
    conf: &NetConf,
    taken: &[Ipv4Net],
    previous: Option<Ipv4Net>,
    rand: u64,
) -> Option<Ipv4Net> {
    let free = |s: &Ipv4Net| {
        conf.network.contains(s) && !taken.iter().any(|t| t.contains(s) || s.contains(t))
    };
    if let Some(p) = previous.filter(|p| conf.holds(*p) && free(p)) {
        return Some(p);
    }
    let bag: Vec<Ipv4Net> = conf
        .network
        .subnets(conf.subnet_len)
        .into_iter()
        .flatten()
        .skip(1)
        .filter(|s| free(s))
        .take(PICK_AMONG)
        .collect();
    let n = u64::try_from(bag.len()).ok().filter(|n| *n > 0)?;
    bag.get(usize::try_from(rand % n).ok()?).copied()
}

/// A random number from the standard library's per-process hash keys (no RNG crate for one
/// pick).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

fn etcd(e: etcd_client::Error) -> Error {
    Error::Etcd(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn conf() -> NetConf {
        NetConf::parse(r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#).expect("conf")
    }

    fn net(s: &str) -> Ipv4Net {
        s.parse().expect("net")
    }

    #[test]
    fn the_last_runs_subnet_first_if_free() {
        let c = conf();
        let prev = Some(net("10.244.9.0/24"));
        assert_eq!(pick_subnet(&c, &[], prev, 7), prev);
        let p = pick_subnet(&c, &[net("10.244.9.0/24")], prev, 0);
        assert_eq!(
            p,
            Some(net("10.244.1.0/24")),
            "taken: the first free one for rand 0"
        );
    }

    #[test]
    fn a_subnet_of_another_network_or_length_is_not_held() {
        let c = conf();
        assert!(c.holds(net("10.244.1.0/24")));
        assert!(c.holds(net("10.244.255.0/24")));
        for other in [
            "10.99.1.0/24",
            "10.244.0.0/24",
            "10.244.1.0/25",
            "10.244.0.0/16",
        ] {
            assert!(!c.holds(net(other)), "{other}");
            assert_ne!(pick_subnet(&c, &[], Some(net(other)), 0), Some(net(other)));
        }
    }

    #[test]
    fn the_networks_first_subnet_is_left_unused_and_a_full_network_gives_none() {
        let c = NetConf::parse(
            r#"{"Network":"10.9.0.0/23","SubnetLen":24,"Backend":{"Type":"host-gw"}}"#,
        )
        .expect("conf");
        assert_eq!(pick_subnet(&c, &[], None, 5), Some(net("10.9.1.0/24")));
        assert_eq!(pick_subnet(&c, &[net("10.9.1.0/24")], None, 5), None);
    }

    proptest! {
        #[test]
        fn the_pick_is_free_in_the_network_and_among_the_first_hundred(
            taken in proptest::collection::vec(1u8..=255, 0..120),
            rand in any::<u64>(),
        ) {
            let c = conf();
            let taken: Vec<Ipv4Net> = taken
                .iter()
                .map(|i| Ipv4Net::new(std::net::Ipv4Addr::new(10, 244, *i, 0), 24).expect("net"))
                .collect();
            let s = pick_subnet(&c, &taken, None, rand).expect("a free subnet");
            prop_assert!(c.network.contains(&s) && !taken.contains(&s));
            prop_assert!(s.network().octets()[2] != 0, "the first subnet is left unused");
            let free_before = (1..s.network().octets()[2])
                .filter(|i| !taken.iter().any(|t| t.network().octets()[2] == *i))
                .count();
            prop_assert!(free_before < 100);
        }
    }
}
