//! flannel in the local cluster: the etcd it keeps its leases in (Debian's `etcd`, on the
//! fabric as a cluster's etcd would be on the network between nodes), the net-conf an admin
//! writes to `<prefix>/config`, and the leases as `cluster status` shows them — read from etcd
//! with `etcdctl`, parsed with flanneld's own lease code.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flannel::Lease;
use flannel::lease::{LeaseAttrs, parse_subnet_key};

use super::{NS_PREFIX, sh_in};

/// flannel's etcd key prefix (flanneld's default).
pub const PREFIX: &str = "/coreos.com/network";
pub use super::topology::{net_conf, network_name};

/// The fabric's namespace, where etcd runs.
fn fabric() -> String {
    format!("{NS_PREFIX}fabric")
}

/// Runs `etcdctl ARGS` against `url` from the fabric.
pub fn etcdctl(url: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut a = vec!["etcdctl", "--endpoints", url];
    a.extend_from_slice(args);
    sh_in(&fabric(), &a)
}

/// The arguments that start etcd with its data in `data` and clients on `ip`.
pub fn etcd_args(data: &Path, ip: Ipv4Addr) -> Vec<String> {
    let client = format!("http://{ip}:2379");
    let peer = format!("http://{ip}:2380");
    [
        "etcd",
        "--name",
        "fabric",
        "--data-dir",
        &data.to_string_lossy(),
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        &format!("fabric={peer}"),
    ]
    .map(String::from)
    .to_vec()
}

/// Waits until etcd at `url` reports healthy, or 30 s.
pub fn wait_healthy(url: &str, log: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while etcdctl(url, &["endpoint", "health"]).is_err() {
        if Instant::now() > deadline {
            bail!("etcd did not become healthy in 30 s; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Every lease in etcd at `url`, by subnet.
pub fn read(url: &str) -> anyhow::Result<Vec<Lease>> {
    let out = etcdctl(url, &["get", "--prefix", &format!("{PREFIX}/subnets/")])?;
    parse(&out)
}

/// Parses `etcdctl get` output: a key line, then its value line.
fn parse(out: &str) -> anyhow::Result<Vec<Lease>> {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut leases = Vec::new();
    for pair in lines.chunks(2) {
        let [key, value] = pair else {
            bail!("etcdctl printed a key without a value: {pair:?}");
        };
        let subnet = key
            .rsplit('/')
            .next()
            .and_then(parse_subnet_key)
            .with_context(|| format!("{key}: not a flannel subnet key"))?;
        let attrs = LeaseAttrs::from_etcd_json(value.as_bytes())
            .map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
        leases.push(Lease { subnet, attrs });
    }
    leases.sort_by_key(|l| l.subnet);
    Ok(leases)
}

/// A lease as `cluster status` prints it.
pub fn describe(l: &Lease) -> String {
    let mut s = format!(
        "lease {} public IP {} backend {}",
        l.subnet,
        l.attrs.public_ip,
        l.attrs.backend_type.as_str()
    );
    if let Some(v) = l.attrs.vxlan {
        s.push_str(&format!(" VNI {}", v.vni));
        match v.vtep_mac {
            Some(m) => s.push_str(&format!(" VtepMAC {m}")),
            None => s.push_str(" VtepMAC (not yet)"),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::{CLUSTER_CIDR, Mode};

    #[test]
    fn etcdctl_output_reads_as_leases() {
        let out = "/coreos.com/network/subnets/10.244.2.0-24\n\
                   {\"PublicIP\":\"192.168.77.12\",\"BackendType\":\"vxlan\",\"BackendData\":{\"VNI\":4096,\"VtepMAC\":\"00:15:5d:aa:bb:cc\"}}\n\
                   /coreos.com/network/subnets/10.244.1.0-24\n\
                   {\"PublicIP\":\"192.168.77.11\",\"BackendType\":\"host-gw\"}\n";
        let leases = parse(out).expect("leases");
        assert_eq!(leases.len(), 2);
        assert_eq!(leases[0].subnet.to_string(), "10.244.1.0/24");
        let d = describe(&leases[1]);
        assert!(d.contains("192.168.77.12"), "{d}");
        assert!(d.contains("VNI 4096"), "{d}");
        assert!(d.to_lowercase().contains("00:15:5d:aa:bb:cc"), "{d}");
        assert!(parse("/coreos.com/network/subnets/x\n{}\n").is_err());
        assert!(parse("/coreos.com/network/subnets/10.244.1.0-24\n").is_err());
    }

    #[test]
    fn net_conf_is_what_flanneld_parses() {
        for mode in [Mode::L2bridge, Mode::Overlay] {
            let c = flannel::NetConf::parse(&net_conf(mode)).expect("flannel reads it");
            assert_eq!(c.network.to_string(), CLUSTER_CIDR);
            flannel::windows::check(&c).expect("Windows nodes take it");
        }
    }
}
