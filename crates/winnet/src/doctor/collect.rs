//! A node's snapshot taken live: hnsd's objects and compiled switch over its socket, the
//! Kubernetes objects from the same source `winnet proxy` reads (a folder of manifests, or a
//! kube API with a kubeconfig),
//! the node's pods, the kernel side read with netlink in each namespace, and — in the local
//! cluster — flannel's leases and subnet.env and the cluster DNS's answers asked from a pod.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use doctor::snapshot::{
    ClusterFacts, DnsAnswer, DnsView, FlannelLease, FlannelView, HnsView, KernelView, KubeView,
    LinkView, NetnsView, Pod, ProfileFacts,
};
use doctor::{NodeSnapshot, node::netns_path};
use hns::Profile;
use hns_client::Client;
use ipnet::IpNet;

/// Where one node's layers are found.
#[derive(Clone, Debug)]
pub struct NodeSource {
    /// The node's name.
    pub name: String,
    /// Its hnsd.
    pub socket: PathBuf,
    /// The Kubernetes objects (kube-proxy's `--manifests`).
    pub manifests: Option<PathBuf>,
    /// Or a kube API server (kube-proxy's `--kubeconfig`), listed once.
    pub kubeconfig: Option<PathBuf>,
    /// The node's pods, when the local cluster knows them; else `None` and they are read from
    /// the Kubernetes objects (unknown when those hold no Pod).
    pub pods: Option<Vec<Pod>>,
    /// The node's own network namespace (`None`: this process's).
    pub netns: Option<String>,
    /// The hnsd of the other nodes on this machine, whose namespaces are not leaked.
    pub peers: Vec<PathBuf>,
    pub cluster: ClusterFacts,
    /// Where flanneld keeps this node's lease and subnet.env (the local cluster knows; else
    /// `None` and the flannel checks are skipped).
    pub flannel: Option<FlannelSource>,
    /// Where to ask the cluster DNS from (`None`: its checks are skipped).
    pub dns: Option<DnsSource>,
    /// How the node's NetworkPolicy agent runs, when known.
    pub agent: super::policy::AgentFacts,
}

/// Where the cluster DNS is asked from, and the cluster's domain.
#[derive(Clone, Debug)]
pub struct DnsSource {
    /// The pods' network namespaces (paths) on this node: the DNS is asked from the first
    /// that exists, as pods ask it (a pod whose namespace is gone is another finding).
    pub asked_from: Vec<String>,
    /// `cluster.local`.
    pub domain: String,
}

/// flanneld's store and this node's files.
#[derive(Clone, Debug)]
pub struct FlannelSource {
    /// flannel's etcd (client URL).
    pub etcd: String,
    /// This node's subnet.env.
    pub subnet_file: PathBuf,
    /// This node's public IP (its lease's).
    pub public_ip: IpAddr,
}

/// The sources of the local cluster's Windows nodes (all of them, or `only`).
pub fn cluster_nodes(only: Option<&str>) -> anyhow::Result<Vec<NodeSource>> {
    let dir = Path::new(crate::cluster::DIR);
    let state = crate::cluster::State::load(dir)?.with_context(|| {
        format!(
            "no local cluster runs here ({} is missing); give --hns-socket and --manifests for another node",
            crate::cluster::State::path(dir).display()
        )
    })?;
    let windows: Vec<&crate::cluster::NodeState> = state
        .nodes
        .iter()
        .filter(|n| n.os == crate::cluster::Os::Windows)
        .collect();
    if let Some(name) = only
        && !windows.iter().any(|n| n.name == name)
    {
        let names: Vec<&str> = windows.iter().map(|n| n.name.as_str()).collect();
        anyhow::bail!(
            "--node {name}: the local cluster has no Windows node of that name (it has: {})",
            names.join(", ")
        );
    }
    let cluster = ClusterFacts {
        cluster_cidr: crate::cluster::topology::CLUSTER_CIDR.parse().ok(),
        service_cidr: crate::cluster::topology::SERVICE_CIDR.parse().ok(),
    };
    let socket = |n: &str| dir.join(n).join("hns.sock");
    Ok(windows
        .iter()
        .filter(|n| only.is_none_or(|o| o == n.name))
        .map(|n| NodeSource {
            peers: windows
                .iter()
                .filter(|p| p.name != n.name)
                .map(|p| socket(&p.name))
                .collect(),
            name: n.name.clone(),
            socket: socket(&n.name),
            manifests: Some(dir.join("manifests")),
            kubeconfig: None,
            pods: Some(
                n.pods
                    .iter()
                    .map(|p| Pod {
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                        ip: Some(IpAddr::V4(p.ip)),
                        netns: Some(format!("/run/netns/{}", p.netns)),
                        ..Pod::default()
                    })
                    .collect(),
            ),
            netns: Some(n.netns.clone()),
            cluster: cluster.clone(),
            flannel: state.etcd.as_ref().map(|etcd| FlannelSource {
                etcd: etcd.clone(),
                subnet_file: dir.join(&n.name).join("subnet.env"),
                public_ip: IpAddr::V4(n.ip),
            }),
            agent: super::policy::AgentFacts {
                style: state.topology.as_ref().map(|t| t.network_policy_style),
                host_addresses: Some(vec![IpNet::from(IpAddr::V4(n.ip))]),
            },
            dns: Some(DnsSource {
                asked_from: n
                    .pods
                    .iter()
                    .filter(|p| !p.name.starts_with(crate::cluster::topology::DNS_POD_PREFIX))
                    .map(|p| format!("/run/netns/{}", p.netns))
                    .collect(),
                domain: crate::cluster::topology::CLUSTER_DOMAIN.to_string(),
            }),
        })
        .collect())
}

/// Takes the snapshot of each node.
pub fn snapshots(
    rt: &tokio::runtime::Runtime,
    sources: &[NodeSource],
) -> anyhow::Result<Vec<NodeSnapshot>> {
    let mut out = Vec::new();
    for s in sources {
        let hns = rt
            .block_on(hns_view(&Client::new(&s.socket)))
            .with_context(|| format!("node {}: hnsd at {}", s.name, s.socket.display()))?;
        // Several nodes share this machine: what their hnsd own is not leaked.
        let mut owned_elsewhere = Vec::new();
        for peer in &s.peers {
            let namespaces = rt
                .block_on(Client::new(peer).list_namespaces())
                .with_context(|| format!("the hnsd at {}", peer.display()))?;
            owned_elsewhere.extend(
                namespaces
                    .iter()
                    .map(|ns| format!("{}{}", doctor::node::NETNS_PREFIX, ns.id)),
            );
        }
        out.push(snapshot(rt, s, hns, owned_elsewhere)?);
    }
    Ok(out)
}

async fn hns_view(c: &Client) -> anyhow::Result<HnsView> {
    Ok(HnsView {
        networks: c.list_networks().await?,
        endpoints: c.list_endpoints().await?,
        namespaces: c.list_namespaces().await?,
        load_balancers: c.list_load_balancers().await?,
        routes: c.list_sdn_routes().await?,
    })
}

/// One node's snapshot, with its HNS objects already listed.
fn snapshot(
    rt: &tokio::runtime::Runtime,
    s: &NodeSource,
    hns: HnsView,
    owned_elsewhere: Vec<String>,
) -> anyhow::Result<NodeSnapshot> {
    let client = Client::new(&s.socket);
    let switch = match rt.block_on(client.switch_dump()) {
        Ok(d) => Some(d),
        // hnsd without a data plane has no switch: the other layers are still compared.
        Err(e) if e.code() == Some(hns_client::trace::NO_DATAPLANE) => None,
        Err(e) => return Err(e).context(format!("node {}: the switch dump", s.name)),
    };
    let profile: Profile = match &switch {
        Some(d) => d
            .facts
            .profile
            .parse()
            .map_err(|e: String| anyhow::anyhow!(e))?,
        None => {
            let v = rt.block_on(client.get_version())?;
            Profile::ALL
                .into_iter()
                .find(|p| p.version() == v)
                .unwrap_or_default()
        }
    };
    let objects = kube_objects_of(rt, s)?;
    let kube = kube_view(s, objects.as_ref());
    // The policy checks need NetworkPolicies and Namespaces, which only a folder gives here.
    let policy = match (&objects, &s.manifests) {
        (Some(o), Some(dir)) => super::policy::view(
            o,
            &dir.display().to_string(),
            &s.name,
            &hns.endpoints,
            &s.agent,
        )?,
        _ => None,
    };
    let dns = match &s.dns {
        Some(d) => dns_view(rt, d, &kube)?,
        None => None,
    };
    let mut kernel = kernel_view(s, &hns, profile)?;
    kernel.owned_elsewhere = owned_elsewhere;
    Ok(NodeSnapshot {
        node: s.name.clone(),
        profile: ProfileFacts {
            name: profile.as_str().to_string(),
            backend_limit: profile.max_lb_backends(),
            no_icmp_through_nat: profile.imposes(hns::profile::Limitation::IcmpThroughOutboundNat),
            acl_default_deny: profile.imposes(hns::profile::Limitation::AclDefaultDeny),
        },
        cluster: s.cluster.clone(),
        kube,
        hns,
        switch,
        kernel: Some(kernel),
        flannel: s.flannel.as_ref().map(flannel_view).transpose()?,
        dns,
        policy,
    })
}

/// When the doctor (re)sends each question to the cluster DNS and how long it waits after each
/// send: at 0, 1 and 2 s, given up at 4 s. A pod's resolver resends a lost datagram too (the
/// Windows DNS Client at 1, 2, 4 and 8 s), so one lost packet is no problem a pod would meet and
/// must not be reported as one.
const DNS_WAITS: [std::time::Duration; 3] = [
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(2),
];

/// The cluster DNS's answers, asked from a pod's namespace at the `kube-system/kube-dns`
/// ClusterIP, for each Service with a ClusterIP (A and/or AAAA, as its ClusterIPs' families);
/// `None` when there is no such Service.
fn dns_view(
    rt: &tokio::runtime::Runtime,
    d: &DnsSource,
    kube: &KubeView,
) -> anyhow::Result<Option<DnsView>> {
    use dnsclient::upstream::{Schedule, Targets, Upstream};
    use hickory_proto::rr::{Name, RData, RecordType};
    let Some(server) = kube
        .services
        .iter()
        .find(|s| s.namespace == "kube-system" && s.name == "kube-dns")
        .and_then(|s| s.cluster_ips.iter().find(|ip| ip.is_ipv4()).copied())
    else {
        return Ok(None);
    };
    let Some((asked_from, netns)) = d
        .asked_from
        .iter()
        .map(|p| (p, host::netns::Netns::from_path(p)))
        .find(|(_, n)| n.exists())
    else {
        return Ok(None);
    };
    let sockets = dnsclient::sockets::PodSockets::open(&netns)
        .with_context(|| format!("sockets in {asked_from} to ask the cluster DNS"))?;
    let upstream = Upstream::new(
        vec![std::net::SocketAddr::new(server, 53)],
        Schedule(DNS_WAITS.iter().map(|w| (Targets::One(0), *w)).collect()),
        std::sync::Arc::new(sockets),
    );
    let mut questions = Vec::new();
    for s in &kube.services {
        for (v6, qtype) in [(false, RecordType::A), (true, RecordType::AAAA)] {
            if !s.cluster_ips.iter().any(|ip| ip.is_ipv6() == v6) {
                continue;
            }
            let name = format!("{}.{}.svc.{}.", s.name, s.namespace, d.domain);
            let wire = Name::from_ascii(&name)
                .with_context(|| format!("Service {}: {name} is not a DNS name", s.key()))?;
            questions.push((s.key(), name, qtype, wire));
        }
    }
    // Asked at once: a DNS that does not answer costs one wait, not one per Service.
    let answers = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for (i, (_, _, qtype, wire)) in questions.iter().enumerate() {
            let (u, qtype, wire) = (upstream.clone(), *qtype, wire.clone());
            set.spawn(async move { (i, u.query(&wire, qtype).await) });
        }
        let mut out = vec![None; questions.len()];
        while let Some(r) = set.join_next().await {
            if let Ok((i, ex)) = r {
                out[i] = Some(ex);
            }
        }
        out
    });
    let answers = questions
        .into_iter()
        .zip(answers)
        .map(|((service, name, qtype, _), ex)| {
            let addresses: Vec<IpAddr> = ex
                .as_ref()
                .and_then(|e| e.response.as_ref())
                .map(|m| {
                    m.answers
                        .iter()
                        .filter_map(|r| match &r.data {
                            RData::A(a) if qtype == RecordType::A => Some(IpAddr::V4(a.0)),
                            RData::AAAA(a) if qtype == RecordType::AAAA => Some(IpAddr::V6(a.0)),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            let error = if addresses.is_empty() {
                Some(match ex.map(|e| e.outcome) {
                    None => "the question was not asked".to_string(),
                    Some(dnsclient::Outcome::Timeout) => "no answer (timeout)".to_string(),
                    Some(dnsclient::Outcome::NxDomain) => "NXDOMAIN".to_string(),
                    Some(dnsclient::Outcome::NoData) => "no record".to_string(),
                    Some(dnsclient::Outcome::ServFail) => "SERVFAIL".to_string(),
                    Some(dnsclient::Outcome::Rcode { rcode }) => rcode,
                    Some(dnsclient::Outcome::Unreachable { why }) => why,
                    Some(dnsclient::Outcome::Answer { .. }) => "no address".to_string(),
                })
            } else {
                None
            };
            DnsAnswer {
                service,
                name,
                qtype: qtype.to_string(),
                addresses,
                error,
            }
        })
        .collect();
    Ok(Some(DnsView {
        server: Some(server),
        asked_from: asked_from.clone(),
        answers,
    }))
}

/// The leases from flannel's etcd (parsed with flanneld's own lease code) and this node's
/// subnet.env as the flannel CNI plugin would read it.
fn flannel_view(f: &FlannelSource) -> anyhow::Result<FlannelView> {
    let leases = crate::cluster::leases::read(&f.etcd)
        .with_context(|| format!("flannel's leases in etcd at {}", f.etcd))?
        .iter()
        .map(|l| FlannelLease {
            subnet: l.subnet,
            public_ip: IpAddr::V4(l.attrs.public_ip),
            backend: l.attrs.backend_type.as_str().to_string(),
        })
        .collect();
    Ok(FlannelView {
        public_ip: Some(f.public_ip),
        leases,
        subnet_file: f.subnet_file.to_string_lossy().into_owned(),
        subnet_env: std::fs::read_to_string(&f.subnet_file).ok(),
    })
}

/// How long the doctor waits for a kube API server to list what it asked for.
const KUBE_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Services with their endpoints, read as kube-proxy reads them ([`proxy::doctor`]), and the
/// node's pods: the local cluster's, else those of the same objects.
/// The Kubernetes objects of the node's source, read once.
fn kube_objects_of(
    rt: &tokio::runtime::Runtime,
    s: &NodeSource,
) -> anyhow::Result<Option<kubesrc::Objects>> {
    Ok(match (&s.manifests, &s.kubeconfig) {
        (Some(dir), _) => Some(kubesrc::manifests::load(dir)),
        (None, Some(path)) => Some(rt.block_on(kube_objects(path))?),
        (None, None) => None,
    })
}

fn kube_view(s: &NodeSource, objects: Option<&kubesrc::Objects>) -> KubeView {
    let mut view = match objects {
        Some(o) => proxy::doctor::kube_view(&proxy::Snapshot::from_objects(o)),
        None => KubeView::default(),
    };
    let pods = s
        .pods
        .clone()
        .or_else(|| objects.and_then(|o| super::pods::of_node(o, &s.name)));
    view.pods_known = pods.is_some();
    view.pods = pods.unwrap_or_default();
    view.services.sort_by_key(|s| s.key());
    view
}

/// Services, EndpointSlices, Nodes and Pods listed once from the kube API server of the
/// kubeconfig at `path`, with the reader `winnet proxy --kubeconfig` uses.
async fn kube_objects(path: &Path) -> anyhow::Result<kubesrc::Objects> {
    let source = kubesrc::Source::Kubeconfig {
        path: path.to_path_buf(),
        settle: std::time::Duration::from_millis(100),
    };
    let kinds = kubesrc::Kinds {
        pods: true,
        ..kubesrc::Kinds::default()
    };
    let mut rx = kubesrc::watch(&source, kinds)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let listed = tokio::time::timeout(KUBE_LIST_WAIT, rx.wait_for(|o| o.synced)).await;
    match listed {
        Ok(Ok(objects)) => Ok((**objects).clone()),
        Ok(Err(_)) => anyhow::bail!("--kubeconfig {}: the watch stopped", path.display()),
        Err(_) => anyhow::bail!(
            "--kubeconfig {}: the API server did not list Services, EndpointSlices, Nodes and Pods within {} s (can this user list Pods? the log says why)",
            path.display(),
            KUBE_LIST_WAIT.as_secs()
        ),
    }
}

/// The node's namespace and those of its pod endpoints.
fn kernel_view(s: &NodeSource, hns: &HnsView, profile: Profile) -> anyhow::Result<KernelView> {
    let node = match &s.netns {
        Some(ns) => netns_view(&format!("/run/netns/{ns}"), None)?,
        None => netns_view("", None)?,
    };
    let mut pods = Vec::new();
    let mut seen = BTreeSet::new();
    for ns in &hns.namespaces {
        if matches!(
            ns.namespace_type,
            Some(hcn::NamespaceType::Host | hcn::NamespaceType::HostDefault)
        ) {
            continue;
        }
        let path = netns_path(ns);
        if !seen.insert(path.clone()) {
            continue;
        }
        let ep = hns
            .endpoints
            .iter()
            .find(|e| e.host_compute_namespace == ns.id && !e.is_remote());
        let expected = ep.and_then(|e| {
            hns_dataplane::dns::pod_dns(profile, e, Path::new(&path)).and_then(|d| {
                host::resolv::render(&d.file.servers, &d.file.search, &d.file.options).ok()
            })
        });
        pods.push(netns_view(&path, expected)?);
    }
    let mut named_netns: Vec<String> = std::fs::read_dir(host::netns::Netns::RUN_DIR)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    named_netns.sort();
    Ok(KernelView {
        node,
        pods,
        named_netns,
        owned_elsewhere: Vec::new(),
    })
}

/// One namespace, read with netlink inside it (`path` empty: this process's).
fn netns_view(path: &str, expected_resolv_conf: Option<String>) -> anyhow::Result<NetnsView> {
    let ns = if path.is_empty() {
        None
    } else {
        Some(host::netns::Netns::from_path(path))
    };
    let exists = ns.as_ref().is_none_or(|n| n.exists());
    let mut view = NetnsView {
        path: path.to_string(),
        exists,
        expected_resolv_conf,
        ..NetnsView::default()
    };
    if !exists {
        return Ok(view);
    }
    let read = |nl: &mut host::netlink::Netlink| -> Result<_, host::HostError> {
        Ok((
            nl.links()?,
            nl.addresses(None)?,
            nl.routes()?,
            nl.neighbors()?,
        ))
    };
    let (links, addresses, routes, neighbors) = match &ns {
        Some(n) => n
            .run(|| read(&mut host::netlink::Netlink::open()?))
            .with_context(|| format!("read the devices of {path}"))?,
        None => read(&mut host::netlink::Netlink::open()?)?,
    };
    let name_of = |i: u32| {
        links
            .iter()
            .find(|l| l.index == i)
            .map_or(i.to_string(), |l| l.name.clone())
    };
    view.links = links
        .iter()
        .map(|l| LinkView {
            name: l.name.clone(),
            mac: l.mac.map(|m| host::netlink::MacText(m).to_string()),
            up: l.up,
            kind: l.kind.clone(),
        })
        .collect();
    view.addresses = addresses.iter().map(|a| a.net).collect::<Vec<IpNet>>();
    view.routes = routes
        .iter()
        .map(|r| match (r.gateway, r.oif) {
            (Some(g), _) => format!("{} via {g}", r.destination),
            (None, Some(i)) => format!("{} dev {}", r.destination, name_of(i)),
            (None, None) => r.destination.to_string(),
        })
        .collect();
    view.neighbors = neighbors
        .iter()
        .filter_map(|n| n.mac.map(|m| (n.ip, host::netlink::MacText(m).to_string())))
        .collect();
    if let Some(name) = path.strip_prefix("/run/netns/") {
        view.resolv_conf = std::fs::read_to_string(
            Path::new(host::resolv::ETC_NETNS)
                .join(name)
                .join("resolv.conf"),
        )
        .ok();
        view.processes = processes_in(path);
    }
    Ok(view)
}

/// Processes whose network namespace is the one at `path` (same inode).
pub fn processes_in(path: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(target) = std::fs::metadata(path) else {
        return 0;
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::metadata(e.path().join("ns/net")).ok())
        .filter(|m| m.ino() == target.ino() && m.dev() == target.dev())
        .count()
}
