//! flanneld's life: find the node, reach the subnet manager (retrying while it is unreachable,
//! with nothing built yet), lease a subnet, build the backend's network, write subnet.env,
//! then follow the other nodes' leases until told to stop. Nothing is torn down on the way
//! out: a restarted flanneld finds its lease and its network and changes nothing.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use host::link::Netlink;

use crate::config::NetConf;
use crate::etcd::EtcdManager;
use crate::kube::KubeManager;
use crate::lease::{Lease, LeaseAttrs};
use crate::linux::LinuxBackend;
use crate::subnet_env::SubnetEnv;
use crate::windows::{self, WindowsBackend};
use crate::{Error, Node};

/// How long between attempts to reach a subnet manager or get a podCIDR.
const RETRY: Duration = Duration::from_secs(2);
/// flannel re-checks its routes every 10 s, besides reacting to lease changes.
const RESYNC: Duration = Duration::from_secs(10);

/// Which kind of node this is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Os {
    /// A Windows node: the network is made through hnsd at this socket.
    Windows { hns_socket: PathBuf },
    /// A Linux node: netlink in flanneld's namespace.
    Linux,
}

/// Where leases live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubnetSource {
    /// `--kube-subnet-mgr`: Nodes of a Kubernetes API; net-conf.json from a file.
    Kube {
        kubeconfig: Option<PathBuf>,
        node_name: String,
        net_config_path: PathBuf,
    },
    /// etcd v3 at `endpoints` under `prefix`, leases with `ttl`.
    Etcd {
        endpoints: Vec<String>,
        prefix: String,
        ttl: Duration,
    },
}

/// What `winnet flanneld` is started with.
#[derive(Clone, Debug)]
pub struct Options {
    pub os: Os,
    /// `--iface`: an interface name or one of its addresses.
    pub iface: Option<String>,
    pub public_ip: Option<Ipv4Addr>,
    pub subnet_file: PathBuf,
    pub ip_masq: bool,
    pub source: SubnetSource,
}

enum Manager {
    Kube(Box<KubeManager>),
    Etcd(Box<EtcdManager>),
}

enum Backend {
    Windows(WindowsBackend),
    Linux(LinuxBackend),
}

/// A running flanneld.
pub struct Daemon {
    opts: Options,
    conf: NetConf,
    node: Node,
    manager: Manager,
    backend: Backend,
    lease: Lease,
}

impl Daemon {
    /// Reaches the subnet manager, leases a subnet, builds the network and writes subnet.env.
    /// Waits (saying why) while the manager is unreachable or the Node has no podCIDR.
    pub async fn start(opts: Options) -> Result<Daemon, Error> {
        let node = find_node(opts.iface.as_deref(), opts.public_ip, &opts.os)?;
        let mut manager = retry("reach the subnet manager", || connect(&opts.source)).await?;
        let conf = match (&mut manager, &opts.source) {
            (Manager::Etcd(m), _) => m.network_config().await?,
            (
                Manager::Kube(_),
                SubnetSource::Kube {
                    net_config_path, ..
                },
            ) => {
                let text = std::fs::read_to_string(net_config_path).map_err(|e| {
                    Error::Config(format!(
                        "--net-config-path {}: {e}",
                        net_config_path.display()
                    ))
                })?;
                NetConf::parse(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", net_config_path.display())))?
            }
            (Manager::Kube(_), _) => {
                return Err(Error::Config("kube manager without a net-conf".into()));
            }
        };
        let mut backend = match &opts.os {
            Os::Windows { hns_socket } => {
                windows::check(&conf)?;
                let client = hns_client::Client::new(hns_socket);
                Backend::Windows(WindowsBackend::new(client, conf.clone(), node.clone()))
            }
            Os::Linux => Backend::Linux(LinuxBackend::new(conf.clone(), node.clone())),
        };
        let attrs = LeaseAttrs {
            public_ip: node.public_ip,
            backend_type: conf.backend.backend_type,
            vxlan: match &backend {
                Backend::Windows(b) => b.initial_data(),
                Backend::Linux(b) => b.initial_data(),
            },
        };
        let previous = std::fs::read_to_string(&opts.subnet_file)
            .ok()
            .and_then(|t| SubnetEnv::previous_subnet(&t));
        let mut lease = loop {
            let got = match &mut manager {
                Manager::Etcd(m) => m.acquire(&conf, &attrs, previous).await,
                Manager::Kube(m) => m.acquire(conf.network, &attrs).await,
            };
            match got {
                Ok(l) => break l,
                Err(Error::NoPodCidr(why)) => {
                    tracing::warn!("{why}; waiting for it");
                    tokio::time::sleep(RETRY).await;
                }
                Err(e) => return Err(e),
            }
        };
        tracing::info!(subnet = %lease.subnet, "leased");
        let built = build(&opts, &conf, &mut manager, &mut backend, &mut lease).await;
        if let Err(e) = built {
            // Nothing half-made: a lease without a network would route other nodes to a
            // subnet nobody serves.
            if let Manager::Etcd(m) = &mut manager {
                m.release().await;
            }
            return Err(e);
        }
        Ok(Daemon {
            opts,
            conf,
            node,
            manager,
            backend,
            lease,
        })
    }

    /// This node's lease.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The network config in force.
    pub fn net_conf(&self) -> &NetConf {
        &self.conf
    }

    /// Follows the other nodes' leases until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        tokio::pin!(shutdown);
        let ttl = match &self.opts.source {
            SubnetSource::Etcd { ttl, .. } => *ttl,
            SubnetSource::Kube { .. } => Duration::from_secs(3600),
        };
        let mut renew = tokio::time::interval((ttl / 3).max(Duration::from_secs(1)));
        let mut resync = tokio::time::interval(RESYNC);
        self.sync().await?;
        tracing::info!("routes to the other nodes' subnets in place");
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                _ = renew.tick() => {
                    if let Manager::Etcd(m) = &mut self.manager {
                        match m.renew().await {
                            Ok(()) => {}
                            // The subnet may be another node's now: stop rather than route
                            // for it (flannel shuts down too); a restart leases afresh.
                            Err(e @ Error::LeaseLost(_)) => return Err(e),
                            Err(e) => {
                                tracing::warn!("renewing the lease of {}: {e}", self.lease.subnet);
                            }
                        }
                    }
                }
                _ = resync.tick() => self.sync_logged().await,
                r = self.changed() => {
                    if let Err(e) = r {
                        tracing::warn!("{e}; reading the leases again");
                        tokio::time::sleep(RETRY).await;
                    }
                    self.sync_logged().await;
                }
            }
        }
    }

    async fn changed(&mut self) -> Result<(), Error> {
        match &mut self.manager {
            Manager::Etcd(m) => m.changed().await,
            Manager::Kube(m) => m.changed().await,
        }
    }

    async fn sync_logged(&mut self) {
        if let Err(e) = self.sync().await {
            tracing::warn!("programming the routes to other nodes: {e}");
        }
    }

    /// Reads every other node's lease and programs the backend to match.
    async fn sync(&mut self) -> Result<(), Error> {
        let me = self.node.public_ip;
        let others = match &mut self.manager {
            Manager::Etcd(m) => m.others(me).await?,
            Manager::Kube(m) => m.others(me).await?,
        };
        let others: Vec<Lease> = others
            .into_iter()
            .filter(|l| l.subnet != self.lease.subnet)
            .collect();
        match &mut self.backend {
            Backend::Windows(b) => b.reconcile(&others).await,
            Backend::Linux(b) => b.reconcile(&others),
        }
    }
}

/// Builds the backend's network for `lease`, publishes what it learnt (the VtepMAC) when the
/// lease does not say it already, sets up masquerading and writes subnet.env.
async fn build(
    opts: &Options,
    conf: &NetConf,
    manager: &mut Manager,
    backend: &mut Backend,
    lease: &mut Lease,
) -> Result<(), Error> {
    let data = match backend {
        Backend::Windows(b) => b.setup(lease).await?,
        Backend::Linux(b) => b.setup(lease)?,
    };
    if data != lease.attrs.vxlan {
        lease.attrs.vxlan = data;
        match manager {
            Manager::Etcd(m) => m.publish(&lease.attrs).await?,
            Manager::Kube(m) => m.publish(&lease.attrs).await?,
        }
    }
    if opts.ip_masq && opts.os == Os::Linux {
        crate::masq::ensure(conf.network, lease.subnet)?;
    }
    let mtu = match backend {
        Backend::Windows(b) => b.mtu(),
        Backend::Linux(b) => b.mtu(),
    };
    SubnetEnv {
        network: conf.network,
        subnet: lease.subnet,
        mtu,
        ip_masq: opts.ip_masq,
    }
    .write(&opts.subnet_file)
    .map_err(|e| Error::Node(format!("write {}: {e}", opts.subnet_file.display())))?;
    Ok(())
}

async fn connect(source: &SubnetSource) -> Result<Manager, Error> {
    match source {
        SubnetSource::Etcd {
            endpoints,
            prefix,
            ttl,
        } => Ok(Manager::Etcd(Box::new(
            EtcdManager::connect(endpoints, prefix, *ttl).await?,
        ))),
        SubnetSource::Kube {
            kubeconfig,
            node_name,
            ..
        } => Ok(Manager::Kube(Box::new(
            KubeManager::connect(kubeconfig.as_deref(), node_name).await?,
        ))),
    }
}

/// Retries `f` while it fails with an etcd or kube error, saying so each time.
async fn retry<T, F: Future<Output = Result<T, Error>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> Result<T, Error> {
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e @ (Error::Etcd(_) | Error::Kube(_))) => {
                tracing::warn!("cannot {what}: {e}; retrying in {} s", RETRY.as_secs());
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The node: `--iface` (a name or an address; else the default route's interface), its
/// address (or `--public-ip`) and MTU. On a Windows node whose NIC hnsd has taken, the
/// address is on the management vNIC.
fn find_node(iface: Option<&str>, public_ip: Option<Ipv4Addr>, os: &Os) -> Result<Node, Error> {
    let mut nl = Netlink::open()?;
    let links = nl.links()?;
    let addrs = nl.addresses(None)?;
    let v4_of = |index: u32| {
        addrs.iter().find_map(|a| match a.net.addr() {
            IpAddr::V4(ip) if a.index == index => Some(ip),
            _ => None,
        })
    };
    let link = match iface {
        Some(s) => match s.parse::<Ipv4Addr>() {
            Ok(ip) => addrs
                .iter()
                .find(|a| a.net.addr() == IpAddr::V4(ip))
                .and_then(|a| links.iter().find(|l| l.index == a.index)),
            Err(_) => links.iter().find(|l| l.name == s),
        }
        .ok_or_else(|| Error::Node(format!("--iface {s}: no such interface or address here")))?,
        None => {
            let default = nl
                .routes()?
                .into_iter()
                .find(|r| r.destination.prefix_len() == 0 && r.destination.addr().is_ipv4())
                .and_then(|r| r.oif);
            default
                .and_then(|i| links.iter().find(|l| l.index == i))
                .ok_or_else(|| {
                    Error::Node("no default route to find the interface by; pass --iface".into())
                })?
        }
    };
    let mut name = link.name.clone();
    let mut ip = v4_of(link.index);
    if let Os::Windows { .. } = os
        && let Some(nic) = name.strip_prefix("vEthernet-")
    {
        // --iface named the management vNIC: the NIC behind it is what HNS binds.
        name = nic.to_string();
    }
    if ip.is_none() && matches!(os, Os::Windows { .. }) {
        let vnic = hns_client::management_name(&name);
        ip = links
            .iter()
            .find(|l| l.name == vnic)
            .and_then(|l| v4_of(l.index));
    }
    let public_ip = public_ip.or(ip).ok_or_else(|| {
        Error::Node(format!(
            "interface {name} has no IPv4 address; pass --public-ip"
        ))
    })?;
    Ok(Node {
        iface: name,
        public_ip,
        mtu: link.mtu,
    })
}
