//! The flow matrix on in-memory wires: `winnet demo` without root (or with `--simulate`).
//! The topology's Windows nodes are built in the in-memory cluster (`lab`) by the same
//! components as the real cluster — flanneld's Windows backend on the leases flannel's
//! allocator gives nodes started in the topology's order, the Windows CNI plugin for every pod
//! in the real order (the topology's pods, then the cluster DNS's), kube-proxy on the objects
//! the real cluster writes — so every address is the real cluster's. Then the one matrix
//! ([`flows::matrix`]) runs flow by flow: a TCP SYN, a UDP exchange or an echo request through
//! the simulated switches, a name first through the pod's resolver (hnsd's Windows DNS client
//! rules) and the cluster DNS pods, judged as the real run judges ([`check::judge`]). Linux
//! nodes are the Linux kernel's, which only exists for real: their rows are marked skipped.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use flannel::config::BackendType;
use lab::sim::agents::cni::FIRST_POD;
use lab::sim::agents::flannel::{leases, nth};
use lab::workloads::PodSpec;
use lab::{Cluster, Exchange, PodOptions, Who};

use hcn::policy::AclPolicySetting;
use hns_client::acl::endpoint_acls;
use lab::Packet;
use lab::sim::node::block_on;

use super::check::{self, Outcome};
use super::flows::{self, Flow, Proto};
use super::policy_rows::{self, Step};
use super::sim_dns;
use super::topology::{
    DNS_POD_PREFIX, DNS_PODS, HTTP_PORT, Mode, NAMESPACE, Os, Topology, node_ip,
};
use super::{NS_PREFIX, NodeState, PodState, State};

/// Why the Linux rows are not run.
pub const LINUX_KERNEL: &str = "not simulated (a Linux node is the Linux kernel)";

/// The in-memory cluster of a topology, and who is who in it.
pub struct SimCluster {
    pub cluster: Cluster,
    /// The cluster as the real one records it: nodes, pods and their addresses.
    pub state: State,
    /// Each simulated sender by the name a flow gives it.
    who: BTreeMap<String, Who>,
    /// The Windows pods' resolver rules, by pod.
    rules: BTreeMap<String, dnsclient::Rules>,
    /// What HNS answered kube-proxy for a Service it refused, by the Service's ClusterIP.
    refusals: BTreeMap<IpAddr, String>,
    /// Why a node's NetworkPolicy agent does not run, by node.
    agents: BTreeMap<String, String>,
    /// The Pods, Namespaces and NetworkPolicies the agents read.
    policy_objects: kubesrc::Objects,
}

/// Builds `t` in memory.
pub fn build(t: &Topology) -> anyhow::Result<SimCluster> {
    build_with(t, PodOptions::cluster())
}

/// Builds `t` in memory, its pods' CNI config made with `opts`.
fn build_with(t: &Topology, opts: PodOptions) -> anyhow::Result<SimCluster> {
    let hns = |what: String| move |e: hcn::HnsError| anyhow!("{what}: {}", e.detail);
    let backend = match t.mode {
        Mode::L2bridge => BackendType::HostGw,
        Mode::Overlay => BackendType::Vxlan,
    };
    // Every node's lease, in the order the real cluster starts its flanneld.
    let subnets = leases(backend, t.nodes.len()).map_err(hns("flannel".into()))?;
    let wins: Vec<usize> = (0..t.nodes.len())
        .filter(|i| t.nodes[*i].os == Os::Windows)
        .collect();
    let names: Vec<String> = wins.iter().map(|i| t.nodes[*i].name.clone()).collect();
    let mut c = if t.dual_stack {
        Cluster::dual_stack(&names, t.profile)
    } else {
        Cluster::with_nodes(&names, t.profile)
    }
    .map_err(hns("cluster".into()))?;
    let win_subnets: Vec<_> = wins.iter().map(|i| subnets[*i]).collect();
    // The operator's dual-stack network, which flanneld then keeps (lab::dual_stack): cbr0,
    // or on Overlay flannel.4096 where HNS carries IPv6 there.
    let dual_overlay = match (t.dual_stack, t.mode) {
        (true, Mode::L2bridge) => {
            c.provision_dual_stack(&win_subnets)
                .map_err(hns("dual-stack provisioning".into()))?;
            false
        }
        (true, Mode::Overlay) => c
            .provision_dual_stack_overlay(&win_subnets)
            .map_err(hns("dual-stack provisioning".into()))?,
        (false, _) => false,
    };
    c.flannel(backend, &win_subnets)
        .map_err(hns("flannel".into()))?;
    if dual_overlay {
        c.route_ipv6_overlay(&win_subnets)
            .map_err(hns("IPv6 routes on overlay".into()))?;
    }
    let mut who = BTreeMap::from([("external".to_string(), Who::External)]);
    let mut state = State {
        topology: Some(t.clone()),
        ..State::default()
    };
    let (mut win, mut lin) = (0, 0);
    for (i, n) in t.nodes.iter().enumerate() {
        let nth_of_os = match n.os {
            Os::Windows => &mut win,
            Os::Linux => &mut lin,
        };
        let ip = node_ip(n.os, *nth_of_os);
        *nth_of_os += 1;
        if n.os == Os::Windows {
            who.insert(n.name.clone(), Who::Node(*nth_of_os - 1));
        }
        state.nodes.push(NodeState {
            name: n.name.clone(),
            os: n.os,
            netns: format!("{NS_PREFIX}{}", n.name),
            ip,
            mac: String::new(),
            subnet: Some(subnets[i]),
            source_vip: None,
            pods: Vec::new(),
        });
    }
    // The pods in the real order: the topology's, node by node; then the DNS pods.
    let mut order: Vec<(usize, PodSpec)> = t
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.pods.iter().map(move |p| (i, p.clone())))
        .collect();
    order.extend(
        wins.iter()
            .take(DNS_PODS)
            .enumerate()
            .map(|(k, i)| (*i, PodSpec::plain(&format!("{DNS_POD_PREFIX}{}", k + 1)))),
    );
    for (i, spec) in order {
        let pod = spec.stem();
        let mut ip6 = None;
        let ip = match t.nodes[i].os {
            Os::Windows => {
                let sim_node = wins
                    .iter()
                    .position(|w| *w == i)
                    .context("a Windows node")?;
                let w = c
                    .add_pod(sim_node, &pod, opts.clone())
                    .map_err(hns(format!("pod {pod}")))?;
                who.insert(pod.clone(), w);
                // A pod of another namespace is shown as `namespace/name`; it answers on the
                // ports it serves, as the real pod's server does.
                who.insert(spec.key(), w);
                if let Some(stack) = c.stack_mut(w) {
                    for p in spec.ports() {
                        match p.protocol {
                            lab::workloads::Protocol::Tcp => stack.tcp_listen.insert(p.port),
                            lab::workloads::Protocol::Udp => stack.udp_listen.insert(p.port),
                        };
                    }
                }
                ip6 = c.stack(w).and_then(|s| {
                    s.addresses().find_map(|a| match a {
                        IpAddr::V6(v6) => Some(v6),
                        IpAddr::V4(_) => None,
                    })
                });
                match c.ip_of(w) {
                    Some(IpAddr::V4(ip)) => ip,
                    other => bail!("pod {pod}: no IPv4 address ({other:?})"),
                }
            }
            // What host-local would give it on the node's lease.
            Os::Linux => {
                let k = state.nodes[i].pods.len() as u8;
                match nth(ipnet::IpNet::V4(subnets[i]), FIRST_POD.saturating_add(k)) {
                    IpAddr::V4(ip) => ip,
                    IpAddr::V6(_) => bail!("pod {pod}: the pod network is IPv4"),
                }
            }
        };
        let node = &mut state.nodes[i];
        let netns = format!("{NS_PREFIX}{}-{pod}", node.name);
        node.pods.push(PodState::new(&spec, netns, ip, ip6));
    }
    // The Kubernetes objects the real cluster writes, over the pods that exist here.
    let simulated: Vec<(String, PodState)> = state
        .nodes
        .iter()
        .filter(|n| n.os == Os::Windows)
        .flat_map(|n| n.pods.iter().map(move |p| (n.name.clone(), p.clone())))
        .collect();
    let (pods, dns_pods): (Vec<_>, Vec<_>) = simulated
        .into_iter()
        .partition(|(_, p)| !p.name.starts_with(DNS_POD_PREFIX));
    let objects = sim_dns::objects(t, &pods, &dns_pods)?;
    let handler = Arc::new(sim_dns::handler(&objects)?);
    let sim = |p: &PodState| who.get(&format!("{}/{}", p.namespace, p.name)).copied();
    for (_, p) in &dns_pods {
        if let Some(s) = sim(p).and_then(|w| c.stack_mut(w)) {
            s.udp_responders
                .insert(53, sim_dns::responder(Arc::clone(&handler)));
        }
    }
    // A preserve-destination Service's backends hold its ingress address, as the real
    // cluster's pods do on their loopback.
    for s in t.services.iter().filter(|s| s.preserve_destination) {
        let Some(lb) = s.load_balancer_ip else {
            continue;
        };
        for (_, p) in pods.iter().filter(|(_, p)| p.name.starts_with(&s.selector)) {
            if let Some(stack) = sim(p).and_then(|w| c.stack_mut(w)) {
                stack.extra_addresses.push(IpAddr::V4(lb));
            }
        }
    }
    c.set_proxy_dsr(t.dsr);
    c.set_objects(objects).map_err(hns("kube-proxy".into()))?;
    let policy_objects = super::policy_rows::objects(&state)?;
    let agents = sync_policies(&mut c, t, &policy_objects)?;
    // The Service past the backend limit: kube-proxy asks for its load balancer and hnsd
    // refuses it where the build has a limit (kube-proxy reports the refusal; the matrix's
    // row shows what the pod then gets); the external host answers on every backend address.
    let n = flows::backends_past_limit(t.profile);
    let backends: Vec<(String, IpAddr, String)> = (0..n)
        .map(|k| {
            let ip = IpAddr::V4(flows::backend_past_limit(k));
            (
                format!("{}-{k}", flows::BACKEND_LIMIT_SERVICE),
                ip,
                "outside".to_string(),
            )
        })
        .collect();
    let big = lab::sim::agents::proxy::Service::tcp(
        &format!("{NAMESPACE}/{}", flows::BACKEND_LIMIT_SERVICE),
        IpAddr::V4(flows::BACKEND_LIMIT_VIP),
        flows::HTTP_SERVICE_PORT,
        HTTP_PORT,
        Vec::new(),
    );
    let mut refusals = BTreeMap::new();
    match c.add_service_over(&big, &backends) {
        Ok(()) => {}
        // kube-proxy's report carries HNS's refusal (E_INVALIDARG) in its words.
        Err(e)
            if t.profile.max_lb_backends().is_some()
                && e.detail.contains(&hcn::HResult::E_INVALIDARG.to_string()) =>
        {
            let hns = e.detail.rsplit_once("hns: ").map_or(&*e.detail, |(_, h)| h);
            refusals.insert(IpAddr::V4(flows::BACKEND_LIMIT_VIP), hns.to_string());
        }
        Err(e) => bail!(
            "kube-proxy, Service {}: {}",
            flows::BACKEND_LIMIT_SERVICE,
            e.detail
        ),
    }
    c.external
        .extra_addresses
        .extend(backends.iter().map(|(_, ip, _)| *ip));
    // The external load balancer hands each ingress address to the first Windows node.
    for s in &t.services {
        if let Some(lb) = s.load_balancer_ip {
            c.external_route(
                ipnet::IpNet::from(IpAddr::V4(lb)),
                lab::sim::cluster::addr::node(0),
            );
        }
    }
    // The resolver hnsd gives each pod, from the DNS the plugin put on its endpoint.
    let mut rules = BTreeMap::new();
    for (_, p) in &pods {
        let key = format!("{}/{}", p.namespace, p.name);
        let Some(Who::Pod(n, ep)) = who.get(&key).copied() else {
            bail!("{key}: not a simulated pod");
        };
        let dns = c.nodes[n]
            .read(|s| s.endpoint(ep).map(|e| e.dns.clone()))
            .with_context(|| format!("{}: no HNS endpoint", p.name))?;
        rules.insert(
            super::policy_rows::shown(p),
            sim_dns::pod_rules(t.profile, &p.name, &dns)?,
        );
    }
    Ok(SimCluster {
        cluster: c,
        state,
        who,
        rules,
        refusals,
        agents,
        policy_objects,
    })
}

/// Every Windows node's NetworkPolicy agent of the topology's style over the objects the real
/// cluster writes; what each says of itself when it does not run (npm without SetPolicy), by
/// node. An agent that runs and fails to program is an error: the real one would retry.
fn sync_policies(
    c: &mut Cluster,
    t: &Topology,
    objects: &kubesrc::Objects,
) -> anyhow::Result<BTreeMap<String, String>> {
    let reports = c
        .sync_policies(t.network_policy_style, objects)
        .map_err(|e| anyhow!("NetworkPolicy agents: {}", e.detail))?;
    let mut refused = BTreeMap::new();
    for (node, r) in c.nodes.iter().zip(reports) {
        match r {
            Ok(errors) if errors.is_empty() => {}
            Ok(errors) => bail!(
                "{}: the NetworkPolicy agent: {}",
                node.name,
                errors.join("; ")
            ),
            Err(why) => {
                refused.insert(node.name.clone(), why);
            }
        }
    }
    Ok(refused)
}

impl SimCluster {
    /// Runs flow `f`, or says why it cannot run here.
    pub fn run(&mut self, f: &Flow) -> anyhow::Result<Outcome> {
        let Some(from) = self.who.get(&f.from).copied() else {
            return Ok(Outcome::skipped(f, LINUX_KERNEL));
        };
        if self.on_linux(f.to) {
            return Ok(Outcome::skipped(f, LINUX_KERNEL));
        }
        let (to, named) = match &f.to_name {
            None => (f.to, None),
            Some(name) => {
                let rules = self
                    .rules
                    .get(&f.from)
                    .with_context(|| format!("{}: not a pod with a resolver", f.from))?;
                let r = sim_dns::resolve(&mut self.cluster, from, rules, name)?;
                let Some(ip) = r.address else {
                    let queries = r.walk.steps.len();
                    let detail = format!(
                        "not resolved: {} after {queries} quer{} ({})",
                        r.walk.result,
                        if queries == 1 { "y" } else { "ies" },
                        r.walk.end
                    );
                    return Ok(check::judge(f, false, detail));
                };
                (IpAddr::V4(ip), Some(format!("({name} -> {ip})")))
            }
        };
        if let Some(step) = &f.step {
            let (passed, detail) = self.run_step(f, from, step)?;
            return Ok(check::judge(f, passed, self.with_agents(f, detail)));
        }
        let c = &mut self.cluster;
        if let Some(n) = f.connections {
            let mut reached = Vec::new();
            for _ in 0..n {
                let e = c.tcp_syn(from, to, f.port);
                match (e.ok(), e.seen()) {
                    (true, Some(p)) => reached.push(p.dst.to_string()),
                    _ => {
                        let (_, d) = describe(&e, f.proto);
                        return Ok(check::judge(f, false, format!("a connection failed: {d}")));
                    }
                }
            }
            let (passed, detail) = check::one_backend(&reached);
            return Ok(check::judge(f, passed, detail));
        }
        let e = match f.proto {
            Proto::Tcp => c.tcp_syn(from, to, f.port),
            Proto::Udp => c.udp(from, to, f.port),
            Proto::Icmp => c.ping(from, to),
        };
        let (passed, mut detail) = describe(&e, f.proto);
        if let Some(n) = named {
            detail = format!("{detail} {n}");
        }
        if let Some(refused) = self.refusals.get(&to) {
            detail = format!("{detail}; HNS refused kube-proxy's load balancer: {refused}");
        }
        if passed && f.expect_status.is_some() {
            detail = format!("{detail}; {}", self.health_answer(to, f.port));
        }
        Ok(check::judge(f, passed, self.with_agents(f, detail)))
    }

    /// Runs `f` with its step ([`Step`]), as the real run does: the lone Block through the
    /// destination node's hnsd, the ACL update through the nodes' agents.
    fn run_step(&mut self, f: &Flow, from: Who, step: &Step) -> anyhow::Result<(bool, String)> {
        let Some(Who::Pod(n, ep)) = self.pod_at(f.to) else {
            bail!("{}: not a simulated pod", f.to);
        };
        let hns = |e: hcn::HnsError| anyhow!("{}", e.detail);
        let said = |e: hns_client::ClientError| anyhow!("HNS: {e}");
        let client = self.cluster.nodes[n].hns.clone();
        match step {
            Step::LoneBlock { .. } => {
                let held: Vec<AclPolicySetting> = block_on(client.get_endpoint_by_id(ep))
                    .map_err(hns)?
                    .map(|e| endpoint_acls(&e).into_iter().cloned().collect())
                    .map_err(said)?;
                let block = policy_rows::lone_block()?;
                block_on(client.set_endpoint_acls(ep, vec![block]))
                    .map_err(hns)?
                    .map_err(said)?;
                let e = self.cluster.tcp_syn(from, f.to, f.port);
                block_on(client.set_endpoint_acls(ep, held))
                    .map_err(hns)?
                    .map_err(said)?;
                Ok(describe(&e, f.proto))
            }
            Step::AclUpdate => {
                let syn = self.cluster.tcp_syn(from, f.to, f.port);
                if !syn.ok() || syn.refused() {
                    let (_, d) = describe(&syn, f.proto);
                    return Ok((false, format!("the connection did not open: {d}")));
                }
                let sport = syn.reply.as_ref().map(Packet::dst_port).unwrap_or_default();
                let to = self.pod_state(f.to).context("the destination pod")?;
                let mut changed = self.policy_objects.clone();
                let update = serde_json::to_string(&policy_rows::update_policy(&to))?;
                kubesrc::manifests::load_text(&update, "the ACL update", &mut changed);
                self.sync_agents(&changed)?;
                let data = self.cluster.tcp_data(from, sport, f.to, f.port);
                let objects = self.policy_objects.clone();
                self.sync_agents(&objects)?;
                Ok(match &data.reply {
                    Some(r) if data.refused() => (
                        false,
                        format!("connection reset (RST from {}) after the ACL update", r.src),
                    ),
                    Some(_) => (
                        true,
                        "data acknowledged on the connection opened before (after the ACL update)"
                            .into(),
                    ),
                    None => describe(&data, f.proto),
                })
            }
        }
    }

    /// `detail` of a NetworkPolicy row, with why the agents do not run where they do not.
    fn with_agents(&self, f: &Flow, detail: String) -> String {
        let policy_row = f.step.is_some() || f.name.starts_with("NetworkPolicy");
        match self.agents.iter().next() {
            Some((node, why)) if policy_row => format!("{detail}; {node}'s agent: {why}"),
            _ => detail,
        }
    }

    /// Every node's agent over `objects`; an agent that runs and fails is an error.
    fn sync_agents(&mut self, objects: &kubesrc::Objects) -> anyhow::Result<()> {
        let style = self
            .state
            .topology
            .as_ref()
            .map(|t| t.network_policy_style)
            .unwrap_or(policy::Style::Calico);
        let reports = self
            .cluster
            .sync_policies(style, objects)
            .map_err(|e| anyhow!("NetworkPolicy agents: {}", e.detail))?;
        for errors in reports.into_iter().flatten() {
            if !errors.is_empty() {
                bail!("a NetworkPolicy agent: {}", errors.join("; "));
            }
        }
        Ok(())
    }

    /// The pod at `ip`, as recorded.
    fn pod_state(&self, ip: IpAddr) -> Option<PodState> {
        self.state
            .nodes
            .iter()
            .flat_map(|n| &n.pods)
            .find(|p| IpAddr::V4(p.ip) == ip)
            .cloned()
    }

    /// The simulated pod at `ip`.
    fn pod_at(&self, ip: IpAddr) -> Option<Who> {
        let p = self.pod_state(ip)?;
        self.who
            .get(&format!("{}/{}", p.namespace, p.name))
            .copied()
    }

    /// What the kube-proxy of the node at `ip` answers on health check node port `port`, in the
    /// words the real run uses (`HTTP <status> <body>`).
    fn health_answer(&self, ip: IpAddr, port: u16) -> String {
        let node = self
            .state
            .nodes
            .iter()
            .find(|n| IpAddr::V4(n.ip) == ip)
            .and_then(|n| self.who.get(&n.name));
        let answer = match node {
            Some(Who::Node(i)) => self.cluster.health_check(*i, port),
            _ => None,
        };
        match answer {
            Some((status, body)) => format!("HTTP {status} {body}"),
            None => format!("no health check on port {port} at {ip}"),
        }
    }

    /// True when `ip` is a Linux node's or one of its pods'.
    fn on_linux(&self, ip: IpAddr) -> bool {
        self.state
            .nodes
            .iter()
            .filter(|n| n.os == Os::Linux)
            .any(|n| {
                IpAddr::V4(n.ip) == ip
                    || n.subnet.is_some_and(|s| ipnet::IpNet::V4(s).contains(&ip))
            })
    }
}

/// What the client of an exchange saw, in the words the real run uses: `from <source>` as the
/// receiver saw it, or where it was dropped and why.
fn describe(e: &Exchange, proto: Proto) -> (bool, String) {
    let what = match proto {
        Proto::Tcp => "SYN-ACK",
        Proto::Udp => "UDP answer",
        Proto::Icmp => "echo reply",
    };
    if let Some(r) = e.reply.as_ref().filter(|_| e.refused()) {
        return (false, format!("connection refused (RST from {})", r.src));
    }
    match (e.ok(), e.seen()) {
        (true, Some(p)) => (
            true,
            format!("{what}; the receiver saw it from {} to {}", p.src, p.dst),
        ),
        (true, None) => (true, what.to_string()),
        (false, _) => (
            false,
            e.drops
                .first()
                .map(|d| format!("dropped at {}: {}", d.node, d.reason))
                .or_else(|| e.stack_drops.first().map(|d| format!("dropped by {d}")))
                .unwrap_or_else(|| format!("no {what}")),
        ),
    }
}

/// Builds `t` in memory and runs the matrix.
pub fn outcomes(t: &Topology) -> anyhow::Result<Vec<Outcome>> {
    let mut sim = build(t)?;
    let matrix = flows::matrix(&sim.state, t.profile);
    matrix.iter().map(|f| sim.run(f)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(mode: &str) -> Topology {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster.yaml"),
        )
        .expect("examples/cluster.yaml");
        let mut t = Topology::parse(&text, "examples/cluster.yaml").expect("topology");
        t.mode = mode.parse().expect("mode");
        t
    }

    fn mismatched(sim: &mut SimCluster, t: &Topology) -> Vec<String> {
        flows::matrix(&sim.state, t.profile)
            .iter()
            .map(|f| sim.run(f).expect("a flow runs"))
            .filter(|o| !o.matches)
            .map(|o| format!("{}: {}", o.flow.name, o.detail))
            .collect()
    }

    /// internalTrafficPolicy Local and endpoints that are not ready, in memory as for real:
    /// the same kube-proxy code on the same objects, every profile and mode, each row run and
    /// as expected (carried or refused for Kubernetes' and winkernel's reasons).
    #[test]
    fn the_traffic_policy_and_endpoint_condition_rows_match_in_memory_under_every_profile() {
        let expected = [
            ("internalTrafficPolicy Local (itp-local), from win-1", true),
            ("internalTrafficPolicy Local (itp-local), from win-2", false),
            (
                "every endpoint terminating, with an ingress IP (draining)",
                true,
            ),
            (
                "LoadBalancer ingress IP, every endpoint terminating (draining)",
                true,
            ),
            ("every endpoint terminating (drain-plain)", false),
            ("no endpoint serving (stopped)", false),
        ];
        for mode in ["l2bridge", "overlay"] {
            for profile in hns::Profile::ALL {
                let t = Topology {
                    profile,
                    ..topology(mode)
                };
                let all = outcomes(&t).expect("the simulated matrix");
                for (row, carried) in expected {
                    let o = all
                        .iter()
                        .find(|o| o.flow.name.ends_with(row))
                        .unwrap_or_else(|| panic!("{mode} {profile}: no row {row}"));
                    assert_eq!(o.skipped, None, "{mode} {profile}: {row}");
                    assert!(o.matches, "{mode} {profile}: {row}: {}", o.detail);
                    assert_eq!(o.passed, carried, "{mode} {profile}: {row}: {}", o.detail);
                }
            }
        }
    }

    /// The policy rows of examples/cluster.yaml in memory, as for real: every profile, both
    /// modes, both styles, each Windows row run (not skipped) and as expected; the rows are
    /// the agents' doing: with the agents handed no NetworkPolicy, the default-deny row is
    /// carried and mismatches.
    #[test]
    fn the_policy_rows_match_in_memory_under_every_profile_mode_and_style() {
        let policy_row =
            |o: &&Outcome| o.flow.step.is_some() || o.flow.name.starts_with("NetworkPolicy");
        for style in [policy::Style::Calico, policy::Style::Npm] {
            for mode in ["l2bridge", "overlay"] {
                for profile in hns::Profile::ALL {
                    let t = Topology {
                        profile,
                        network_policy_style: style,
                        ..topology(mode)
                    };
                    let what = format!("{} {mode} {profile}", style.name());
                    let all = outcomes(&t).expect("the simulated matrix");
                    let rows: Vec<&Outcome> = all.iter().filter(policy_row).collect();
                    assert_eq!(rows.len(), 10, "{what}");
                    for o in rows {
                        let linux = o.flow.name.ends_with("Linux pod");
                        assert_eq!(o.skipped.is_some(), linux, "{what}: {}", o.flow.name);
                        assert!(o.matches, "{what}: {}: {}", o.flow.name, o.detail);
                    }
                }
            }
        }
        let t = topology("l2bridge");
        let mut sim = build(&t).expect("cluster");
        let mut none = sim.policy_objects.clone();
        none.network_policies.clear();
        sim.sync_agents(&none).expect("the agents sync");
        let deny = flows::matrix(&sim.state, t.profile)
            .into_iter()
            .find(|f| f.name == "NetworkPolicy: default-deny ingress")
            .expect("the row");
        let o = sim.run(&deny).expect("runs");
        assert!(o.passed && !o.matches, "{}", o.detail);
    }

    /// The dual-stack rows in memory, as for real: on Overlay under `unrestricted` the
    /// operator's dual-stack network, sdnoverlay's IPv6 pods and kube-proxy's IPv6 ClusterIP
    /// carry all three (the pods hold an IPv6 address); under ws2025 the pods stay
    /// single-stack and the rows fail as Ipv6OnOverlay; every cell as expected.
    #[test]
    fn the_ipv6_rows_on_overlay_work_in_memory_only_where_the_profile_lifts_the_limit() {
        for profile in [hns::Profile::Ws2025, hns::Profile::Unrestricted] {
            let t = Topology {
                profile,
                ..topology("overlay")
            };
            assert!(t.dual_stack, "examples/cluster.yaml is dual-stack");
            let sim = build(&t).expect("cluster");
            let lifted = profile == hns::Profile::Unrestricted;
            let win_pods = sim
                .state
                .nodes
                .iter()
                .filter(|n| n.os == Os::Windows)
                .flat_map(|n| n.pods.iter());
            for p in win_pods {
                assert_eq!(
                    p.ip6.is_some(),
                    lifted,
                    "{profile}: pod {} {:?}",
                    p.name,
                    p.ip6
                );
            }
            let all = outcomes(&t).expect("the simulated matrix");
            let v6: Vec<_> = all
                .iter()
                .filter(|o| o.flow.name.starts_with("IPv6"))
                .collect();
            assert_eq!(v6.len(), 3, "{profile}");
            for o in v6 {
                assert!(o.matches, "{profile}: {}: {}", o.flow.name, o.detail);
                assert_eq!(o.passed, lifted, "{profile}: {}: {}", o.flow.name, o.detail);
                if !lifted {
                    assert_eq!(o.flow.limitation.as_deref(), Some("Ipv6OnOverlay"));
                }
            }
        }
    }

    /// Connects from `client` to its own Service `web` (the first, at `vip`) until the load
    /// balancer has sent it back to itself three times, every other connection by the
    /// Service's FQDN through the pod's resolver; the first connection that was not answered.
    fn hairpin(sim: &mut SimCluster, client: &str, vip: IpAddr) -> Result<(), String> {
        let fqdn = "web.default.svc.cluster.local";
        let from = sim.who[client];
        let (mut itself, mut tries) = (0, 0);
        while itself < 3 {
            tries += 1;
            if tries > 60 {
                return Err(format!("{tries} connections, none back to {client}"));
            }
            let to = if tries % 2 == 0 {
                let r = sim_dns::resolve(&mut sim.cluster, from, &sim.rules[client], fqdn)
                    .map_err(|e| format!("{fqdn}: {e}"))?;
                IpAddr::V4(r.address.ok_or(format!("{fqdn}: not resolved"))?)
            } else {
                vip
            };
            let e = sim.cluster.tcp_syn(from, to, 80);
            let (ok, detail) = describe(&e, Proto::Tcp);
            if !ok || to != vip {
                return Err(format!("connection {tries} to {to}: {detail}"));
            }
            if e.receiver() == Some(from) {
                itself += 1;
            }
        }
        Ok(())
    }

    /// A pod that is one of its own Service's backends (`web-client` among `web`'s pods)
    /// reaches itself through the Service: connections to the ClusterIP and to the Service's
    /// FQDN are all answered, several of them by the pod itself, in both modes, single- and
    /// dual-stack (win-bridge / win-overlay, sdnbridge), with DSR and without; and the
    /// cluster's flow matrix matches.
    #[test]
    fn a_pod_reaches_itself_through_its_own_service_in_memory() {
        let vip = IpAddr::V4(lab::topology::cluster_ip(0).expect("a ClusterIP"));
        let mut failed = Vec::new();
        for mode in ["l2bridge", "overlay"] {
            for dual in [false, true] {
                for dsr in [true, false] {
                    let text = format!(
                        "mode: {mode}\nprofile: ws2025\ndsr: {dsr}\ndualStack: {dual}\nnodes:\n\
                         - {{name: win-1, os: windows, pods: [web-1, web-client]}}\n\
                         - {{name: win-2, os: windows, pods: [web-2]}}\n\
                         services:\n\
                         - {{name: web, selector: web, port: 80, targetPort: 8080}}\n"
                    );
                    let t = Topology::parse(&text, "hairpin").expect("topology");
                    let mut sim = build(&t).expect("cluster");
                    let what = format!("{mode}, dual-stack {dual}, DSR {dsr}");
                    // The matrix of such a cluster holds (run first, as `winnet demo` runs it: its
                    // ClusterIP row may be the hairpin, which comes from the node's address).
                    failed.extend(
                        mismatched(&mut sim, &t)
                            .iter()
                            .map(|m| format!("{what}: {m}")),
                    );
                    if let Err(e) = hairpin(&mut sim, "web-client", vip) {
                        failed.push(format!("{what}: {e}"));
                    }
                }
            }
        }
        assert_eq!(failed, Vec::<String>::new());
    }

    /// The simulated matrix is the CNI plugin's doing: the same pods with the plugin's
    /// OutBoundNAT policy left out of its output leave with their own address, which the
    /// outside cannot answer, and the matrix's rows to the outside fail.
    #[test]
    fn a_plugin_without_its_outbound_nat_policy_fails_the_simulated_matrix() {
        for mode in ["l2bridge", "overlay"] {
            let t = topology(mode);
            let mut sim = build(&t).expect("cluster");
            assert_eq!(mismatched(&mut sim, &t), Vec::<String>::new(), "{mode}");
            let opts = PodOptions {
                no_outbound_nat: true,
                ..PodOptions::cluster()
            };
            let mut broken = build_with(&t, opts).expect("cluster");
            let bad = mismatched(&mut broken, &t);
            for row in ["pod -> external by IP (TCP)", "pod -> external by DNS name"] {
                assert!(
                    bad.iter().any(|b| b.starts_with(row)),
                    "{mode}: {row} should fail: {bad:?}"
                );
            }
        }
    }
}
