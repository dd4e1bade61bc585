//! flannel in the cluster: etcd on the fabric with the net-conf an admin writes, and on every
//! node `winnet flanneld` as the node starts it (a Windows node with its hnsd's socket and
//! its NIC as `--iface`, as start.ps1 does; a Linux node with its NIC), then its lease read
//! back from subnet.env. On an Overlay Windows node the source VIP is reserved with host-local
//! for kube-proxy, as start.ps1's `GetSourceVip` does.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flannel::config::BackendType;
use ipnet::{IpNet, Ipv4Net};
use lab::sim::agents::cni::reserve_source_vip;

use super::super::leases::{self, PREFIX};
use super::super::topology::{ETCD_IP, Mode, Os};
use super::Builder;

/// How long a node's flanneld may take to lease and build its network.
const LEASE_WAIT: Duration = Duration::from_secs(60);
/// How long the nodes may take to route to each other's subnets.
const ROUTES_WAIT: Duration = Duration::from_secs(30);

impl Builder {
    /// etcd on the fabric, and flannel's net-conf in `<prefix>/config`.
    pub(super) fn etcd(&mut self) -> anyhow::Result<()> {
        let data = self.dir.join("etcd");
        let args = leases::etcd_args(&data, ETCD_IP);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let fabric = format!("{}fabric", super::NS_PREFIX);
        self.spawn("etcd", &fabric, &refs, "etcd")?;
        let url = format!("http://{ETCD_IP}:2379");
        leases::wait_healthy(&url, &self.dir.join("etcd.log"))?;
        self.state.etcd = Some(url.clone());
        self.state.save(&self.dir)?;
        let conf = leases::net_conf(self.t.mode);
        leases::etcdctl(&url, &["put", &format!("{PREFIX}/config"), &conf])?;
        Ok(())
    }

    pub(super) fn subnet_file(&self, i: usize) -> PathBuf {
        self.node_dir(i).join("subnet.env")
    }

    /// Starts node `i`'s flanneld, waits for its subnet.env and records the lease.
    pub(super) fn flanneld(&mut self, i: usize) -> anyhow::Result<()> {
        std::fs::create_dir_all(self.node_dir(i))?;
        let n = self.state.nodes[i].clone();
        let url = self.state.etcd.clone().context("etcd is not up")?;
        let sf = self.subnet_file(i).to_string_lossy().into_owned();
        let sock = self.socket(i).to_string_lossy().into_owned();
        let w = self.winnet.clone();
        let mut args = vec![
            w.as_str(),
            "flanneld",
            "--iface",
            "eth0",
            "--subnet-file",
            &sf,
            "--etcd-endpoints",
            &url,
            "--ip-masq",
        ];
        if n.os == Os::Windows {
            args.extend(["--hns-socket", &sock]);
        }
        let provisioned = if self.dual_stack_wanted(i)? {
            Some(self.provision_dual_stack(i)?)
        } else {
            None
        };
        let log = format!("{}-flanneld", n.name);
        self.spawn(&format!("{} flanneld", n.name), &n.netns, &args, &log)?;
        let subnet = self.wait_lease(i, &log)?;
        if let Some(want) = provisioned
            && want != subnet
        {
            bail!(
                "flanneld on {} leased {subnet}, but the dual-stack {} was made for {want}; see {}",
                n.name,
                leases::network_name(self.t.mode),
                self.dir.join(format!("{log}.log")).display()
            );
        }
        self.state.nodes[i].subnet = Some(subnet);
        if n.os == Os::Windows && self.t.mode == Mode::Overlay {
            self.state.nodes[i].source_vip = Some(self.source_vip(i, subnet)?);
        }
        self.state.save(&self.dir)
    }

    /// Whether the operator makes Windows node `i` dual-stack (lab::dual_stack): on a
    /// `dualStack` cluster always on L2Bridge, and on Overlay where the node's HNS says it
    /// carries IPv6 there (`LinuxIPv6Overlay`); no Windows build does.
    fn dual_stack_wanted(&self, i: usize) -> anyhow::Result<bool> {
        if !self.t.dual_stack || self.state.nodes[i].os != Os::Windows {
            return Ok(false);
        }
        match self.t.mode {
            Mode::L2bridge => Ok(true),
            Mode::Overlay => {
                let client = hns_client::Client::new(self.socket(i));
                block_on(lab::dual_stack::overlay_carries_ipv6(&client))?
                    .with_context(|| format!("HNS's features on {}", self.state.nodes[i].name))
            }
        }
    }

    /// The IPv6 subnet of Windows node `i`'s pod network, when its operator made it
    /// dual-stack: what its pods' CNI config gives them an address of.
    pub(super) fn network_v6(&self, i: usize) -> anyhow::Result<Option<ipnet::Ipv6Net>> {
        if !self.t.dual_stack || self.state.nodes[i].os != Os::Windows {
            return Ok(None);
        }
        let client = hns_client::Client::new(self.socket(i));
        let name = leases::network_name(self.t.mode);
        let net = block_on(client.get_network_by_name(&name))?
            .with_context(|| format!("{name} on {}", self.state.nodes[i].name))?;
        Ok(net
            .iter()
            .flat_map(|n| n.subnets())
            .find_map(|s| match s.ip_address_prefix {
                Some(IpNet::V6(p)) => Some(p),
                _ => None,
            }))
    }

    /// What the operator of a dual-stack node does before flanneld starts
    /// ([`lab::dual_stack`]): the network with the IPv4 subnet flanneld will lease (nodes
    /// started one by one lease predictably, as the in-memory cluster computes) and the
    /// node's IPv6 prefix; on L2Bridge also the bridge endpoint with both gateways. The IPv4
    /// subnet it was made for.
    fn provision_dual_stack(&self, i: usize) -> anyhow::Result<Ipv4Net> {
        let backend = match self.t.mode {
            Mode::L2bridge => BackendType::HostGw,
            Mode::Overlay => BackendType::Vxlan,
        };
        // Every node of the topology leases, in its order.
        let all = lab::sim::agents::flannel::leases(backend, self.t.nodes.len())
            .map_err(|e| anyhow::anyhow!("{}", e.detail))?;
        let v4 = *all.get(i).context("no lease for the node")?;
        let v6 = super::super::topology::pod_prefix_v6(v4);
        let client = hns_client::Client::new(self.socket(i));
        let name = leases::network_name(self.t.mode);
        let made = match self.t.mode {
            Mode::L2bridge => block_on(lab::dual_stack::provision(&client, &name, "eth0", v4, v6))?,
            Mode::Overlay => block_on(lab::dual_stack::provision_overlay(
                &client,
                &name,
                "eth0",
                v4,
                v6,
                super::super::topology::VNI,
            ))?,
        };
        made.with_context(|| format!("the dual-stack {name} on {}", self.state.nodes[i].name))?;
        Ok(v4)
    }

    /// On a dual-stack cluster, what the operator routes on each dual-stack Windows node: the
    /// other Windows nodes' IPv6 pod prefixes (flannel routes only IPv4); on L2Bridge via
    /// their IPv6 addresses, on Overlay as `RemoteSubnetRoute`s inside the VNI to their
    /// provider addresses and DR MACs. The Linux node stays IPv4-only.
    pub(super) fn route_ipv6_pods(&self) -> anyhow::Result<()> {
        if !self.t.dual_stack {
            return Ok(());
        }
        if self.t.mode == Mode::Overlay {
            return self.route_ipv6_overlay();
        }
        let wins: Vec<_> = self
            .state
            .nodes
            .iter()
            .filter(|n| n.os == Os::Windows)
            .collect();
        for n in &wins {
            for o in wins.iter().filter(|o| o.name != n.name) {
                let Some(subnet) = o.subnet else { continue };
                let prefix = IpNet::V6(super::super::topology::pod_prefix_v6(subnet));
                let via = super::super::topology::fabric_ip_v6(o.ip);
                super::route_via(&n.netns, prefix, via)?;
            }
        }
        Ok(())
    }

    fn route_ipv6_overlay(&self) -> anyhow::Result<()> {
        let name = leases::network_name(Mode::Overlay);
        let vni = u16::try_from(super::super::topology::VNI)?;
        let mut dual = Vec::new();
        for (i, n) in self.state.nodes.iter().enumerate() {
            if self.network_v6(i)?.is_none() {
                continue;
            }
            let client = hns_client::Client::new(self.socket(i));
            let dr_mac = block_on(lab::dual_stack::dr_mac(&client, &name))??
                .with_context(|| format!("{name} on {} has no DrMacAddress", n.name))?;
            let subnet = n
                .subnet
                .with_context(|| format!("{} has no lease", n.name))?;
            let remote = lab::dual_stack::RemoteNode {
                prefix: super::super::topology::pod_prefix_v6(subnet),
                provider_address: std::net::IpAddr::V4(n.ip),
                dr_mac,
            };
            dual.push((i, client, remote));
        }
        for (i, client, _) in &dual {
            let others: Vec<_> = dual
                .iter()
                .filter(|(j, _, _)| j != i)
                .map(|(_, _, r)| *r)
                .collect();
            block_on(lab::dual_stack::route_remote_v6(
                client, &name, &others, vni,
            ))?
            .with_context(|| format!("IPv6 routes on {name} of {}", self.state.nodes[*i].name))?;
        }
        Ok(())
    }

    /// Waits for node `i`'s subnet.env and reads its subnet as the flannel CNI plugin does.
    fn wait_lease(&self, i: usize, log: &str) -> anyhow::Result<Ipv4Net> {
        let path = self.subnet_file(i);
        let log = self.dir.join(format!("{log}.log"));
        let deadline = Instant::now() + LEASE_WAIT;
        let proc_ = self.state.procs.last().cloned();
        loop {
            if path.exists() {
                let env =
                    cni::subnet_env::SubnetEnv::load(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
                return match env.subnet {
                    Some(IpNet::V4(s)) => Ok(s),
                    _ => bail!("{} has no IPv4 FLANNEL_SUBNET", path.display()),
                };
            }
            if proc_.as_ref().is_some_and(|p| !p.alive()) {
                bail!(
                    "flanneld exited before leasing a subnet; see {}",
                    log.display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "flanneld wrote no {} in {} s; see {}",
                    path.display(),
                    LEASE_WAIT.as_secs(),
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Reserves kube-proxy's source VIP in `subnet` as the in-memory cluster does
    /// ([`reserve_source_vip`]: host-local in the pods' store on the node).
    fn source_vip(&self, i: usize, subnet: Ipv4Net) -> anyhow::Result<Ipv4Addr> {
        let name = leases::network_name(Mode::Overlay);
        reserve_source_vip(&name, subnet, &self.ipam_dir(i))
            .map_err(|e| anyhow::anyhow!("{}", e.detail))
    }

    /// host-local's store on node `i` (the pods' and the source VIP's).
    pub(super) fn ipam_dir(&self, i: usize) -> PathBuf {
        self.node_dir(i).join("ipam")
    }

    /// Waits until every node routes to every other node's subnet: a kernel route on Linux
    /// nodes and on host-gw Windows nodes, a `RemoteSubnetRoute` on Overlay networks.
    pub(super) fn wait_routes(&self) -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let deadline = Instant::now() + ROUTES_WAIT;
        for (i, n) in self.state.nodes.iter().enumerate() {
            let others: Vec<Ipv4Net> = self
                .state
                .nodes
                .iter()
                .filter(|o| o.name != n.name)
                .filter_map(|o| o.subnet)
                .collect();
            loop {
                let missing = match (n.os, self.t.mode) {
                    (Os::Windows, Mode::Overlay) => rt.block_on(self.missing_rsrs(i, &others))?,
                    _ => missing_routes(&n.netns, &others)?,
                };
                if missing.is_empty() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "{} has no route to {} after {} s; see {}",
                        n.name,
                        missing.join(", "),
                        ROUTES_WAIT.as_secs(),
                        self.dir.join(format!("{}-flanneld.log", n.name)).display()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// In host-gw (l2bridge) mode pods talk to the fabric with their own addresses (the fabric
    /// is an OutBoundNAT exception), so the fabric's router — the external host — routes each
    /// node's pod subnet to that node, as a cloud's route table does for L2Bridge nodes.
    /// Overlay pods reach the fabric translated to their node's address and need no routes.
    pub(super) fn route_external_to_pods(&self) -> anyhow::Result<()> {
        if self.t.mode != Mode::L2bridge {
            return Ok(());
        }
        let ext = format!("{}external", super::NS_PREFIX);
        for n in &self.state.nodes {
            if let Some(subnet) = n.subnet {
                super::route_via(&ext, IpNet::V4(subnet), n.ip)?;
            }
        }
        Ok(())
    }

    /// The subnets of `others` that node `i`'s Overlay network has no RemoteSubnetRoute to.
    async fn missing_rsrs(&self, i: usize, others: &[Ipv4Net]) -> anyhow::Result<Vec<String>> {
        let client = hns_client::Client::new(self.socket(i));
        let name = leases::network_name(Mode::Overlay);
        let net = client.get_network_by_name(&name).await?;
        let have: Vec<IpNet> = net
            .iter()
            .flat_map(|n| n.policies.iter())
            .filter_map(|p| match p {
                hcn::NetworkPolicy::RemoteSubnetRoute(r) => Some(r.destination_prefix),
                _ => None,
            })
            .collect();
        Ok(others
            .iter()
            .filter(|s| !have.contains(&IpNet::V4(**s)))
            .map(|s| s.to_string())
            .collect())
    }
}

/// The subnets of `others` that namespace `netns` has no route to.
fn missing_routes(netns: &str, others: &[Ipv4Net]) -> anyhow::Result<Vec<String>> {
    let routes =
        host::netns::Netns::named(netns).run(|| host::netlink::Netlink::open()?.routes())?;
    Ok(others
        .iter()
        .filter(|s| !routes.iter().any(|r| r.destination == IpNet::V4(**s)))
        .map(|s| s.to_string())
        .collect())
}

/// Runs `f` to completion on a runtime of its own: the builder is synchronous and asks a
/// node's hnsd only now and then.
fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(f))
}
