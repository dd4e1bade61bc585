//! `winnet demo` without root: the topology's Windows nodes on the in-memory cluster
//! (`hns::sim`: each node's hnsd objects compiled into its switch, real frames on virtual
//! wires), the same flows as the real matrix, and the same verdicts. Linux nodes are not
//! simulated (they are the Linux kernel's, which only exists for real); their rows say so.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use hns::Limitation;
use lab::{Cluster, Exchange, PodOptions, Service, Who};

use super::PodState;
use super::sim_dns;
use super::topology::{
    CLUSTER_DOMAIN, DNS_POD_PREFIX, DNS_PODS, DNS_SERVICE, DNS_SERVICE_IP, EXTERNAL_NAME_SERVICE,
    EXTERNAL_ZONE, HEADLESS_SERVICE, HTTP_PORT, Mode, NAMESPACE, OUTSIDE_IP, Os, Topology,
    cluster_ip,
};

struct Row {
    name: String,
    from: String,
    to: String,
    expect_pass: bool,
    limitation: Option<Limitation>,
    result: Option<(bool, String)>,
    /// Why a row without a result is not simulated.
    skipped: &'static str,
}

/// Why the Linux rows are not simulated.
const LINUX_KERNEL: &str = "not simulated (a Linux node is the Linux kernel)";

/// Runs the simulated demo and prints its matrix.
pub fn run(t: &Topology, markdown: bool) -> anyhow::Result<()> {
    println!(
        "SIMULATED: not root, so no namespaces or devices are made; the cluster runs in memory\n\
         (each Windows node's HNS objects compiled into its VFP switch, real frames on virtual wires).\n\
         Run as root for the real cluster.\n"
    );
    let wins: Vec<_> = t.nodes.iter().filter(|n| n.os == Os::Windows).collect();
    let mut c = Cluster::new(wins.len(), t.profile)
        .map_err(|e| anyhow::anyhow!("cluster: {}", e.detail))?;
    match t.mode {
        Mode::L2bridge => c.flannel_host_gw(),
        Mode::Overlay => c.flannel_vxlan(),
    }
    .map_err(|e| anyhow::anyhow!("flannel: {}", e.detail))?;
    let opts = PodOptions {
        dns: sim_dns::endpoint_dns()?,
        ..PodOptions::default()
    };
    let mut pods: Vec<Vec<(String, Who)>> = Vec::new();
    for (i, n) in wins.iter().enumerate() {
        let mut v = Vec::new();
        for p in &n.pods {
            let who = c
                .add_pod(i, p, opts.clone())
                .map_err(|e| anyhow::anyhow!("pod {p}: {}", e.detail))?;
            v.push((p.clone(), who));
        }
        pods.push(v);
    }
    cluster_dns(&mut c, t, &wins, &pods, &opts)?;
    let Some((p1_name, p1)) = pods.first().and_then(|v| v.first()).cloned() else {
        bail!("the first Windows node has no pod");
    };
    let ip = |c: &Cluster, w: Who| c.ip_of(w).context("no address");
    let node_ip = |i: usize| lab::sim::cluster::addr::node(i);
    let mut rows: Vec<Row> = Vec::new();
    let mut add = |name: &str,
                   from: &str,
                   to: String,
                   limit: Option<Limitation>,
                   r: Option<(bool, String)>| {
        let lim = limit.filter(|l| t.profile.imposes(*l));
        rows.push(Row {
            name: name.into(),
            from: from.into(),
            to,
            expect_pass: lim.is_none(),
            limitation: lim,
            result: r,
            skipped: LINUX_KERNEL,
        });
    };
    let show = show_exchange;
    if let Some((q_name, q)) = pods[0].get(1).cloned() {
        let to = ip(&c, p1)?;
        let e = c.tcp_syn(q, to, 8080);
        add(
            "pod -> pod, same node",
            &q_name,
            format!("{to}:8080 tcp"),
            None,
            Some(show(&e)),
        );
    }
    if let Some((_, p2)) = pods.get(1).and_then(|v| v.first()).cloned() {
        let to = ip(&c, p2)?;
        let e = c.tcp_syn(p1, to, 8080);
        add(
            "pod -> pod, across Windows nodes",
            &p1_name,
            format!("{to}:8080 tcp"),
            None,
            Some(show(&e)),
        );
    }
    if t.nodes.iter().any(|n| n.os == Os::Linux) {
        add("Windows pod -> Linux pod", &p1_name, "-".into(), None, None);
        add("Linux pod -> Windows pod", "-", "-".into(), None, None);
    }
    if let Some(s) = t.services.first() {
        let backends: Vec<Who> = pods
            .iter()
            .flatten()
            .filter(|(n, _)| n.starts_with(&s.selector))
            .map(|(_, w)| *w)
            .collect();
        let vip = cluster_ip(0).context("the first Service's ClusterIP")?;
        let mut svc = Service::tcp(
            &format!("default/{}", s.name),
            IpAddr::V4(vip),
            s.port,
            s.target_port,
            backends,
        );
        svc.node_port = s.node_port;
        svc.ingress_ip = s.load_balancer_ip.map(IpAddr::V4);
        c.add_service(&svc)
            .map_err(|e| anyhow::anyhow!("Service {}: {}", s.name, e.detail))?;
        let client = pods[0].get(1).cloned().unwrap_or((p1_name.clone(), p1));
        let e = c.tcp_syn(client.1, svc.cluster_ip, s.port);
        add(
            "pod -> ClusterIP",
            &client.0,
            format!("{}:{} tcp", svc.cluster_ip, s.port),
            None,
            Some(show(&e)),
        );
        if t.nodes.iter().any(|n| n.os == Os::Linux) {
            add("Linux pod -> ClusterIP", "-", "-".into(), None, None);
        }
        if let Some(np) = s.node_port {
            for (i, n) in wins.iter().enumerate() {
                let e = c.tcp_syn(Who::External, node_ip(i), np);
                add(
                    &format!("external -> NodePort on {}", n.name),
                    "external",
                    format!("{}:{np} tcp", node_ip(i)),
                    None,
                    Some(show(&e)),
                );
            }
            let e = c.tcp_syn(Who::Node(0), node_ip(0), np);
            add(
                "node -> NodePort on itself",
                &wins[0].name,
                format!("{}:{np} tcp", node_ip(0)),
                Some(Limitation::NodePortFromNode),
                Some(show(&e)),
            );
        }
        if let Some(lb) = svc.ingress_ip {
            // The external load balancer hands its address to the first node.
            c.external_route(ipnet::IpNet::from(lb), node_ip(0));
            let e = c.tcp_syn(Who::External, lb, s.port);
            add(
                "external -> LoadBalancer ingress IP",
                "external",
                format!("{lb}:{} tcp", s.port),
                None,
                Some(show(&e)),
            );
        }
        let e = c.tcp_syn(Who::Node(0), svc.cluster_ip, s.port);
        add(
            "node -> ClusterIP",
            &wins[0].name,
            format!("{}:{} tcp", svc.cluster_ip, s.port),
            Some(Limitation::ClusterIpFromNode),
            Some(show(&e)),
        );
    }
    let internet: IpAddr = lab::sim::cluster::addr::INTERNET
        .parse()
        .context("address")?;
    let e = c.tcp_syn(p1, internet, 80);
    add(
        "pod -> external by IP (TCP)",
        &p1_name,
        format!("{internet}:80 tcp"),
        None,
        Some(show(&e)),
    );
    let e = c.udp(p1, internet, 53);
    add(
        "pod -> external by IP (UDP)",
        &p1_name,
        format!("{internet}:53 udp"),
        None,
        Some(show(&e)),
    );
    let e = c.ping(p1, internet);
    add(
        "pod -> external by IP (ICMP)",
        &p1_name,
        format!("{internet} icmp"),
        Some(Limitation::IcmpThroughOutboundNat),
        Some(show(&e)),
    );
    let to = ip(&c, p1)?;
    let e = c.tcp_syn(Who::Node(0), to, 8080);
    add(
        "node -> pod on this node",
        &wins[0].name,
        format!("{to}:8080 tcp"),
        None,
        Some(show(&e)),
    );
    if let Some((_, p2)) = pods.get(1).and_then(|v| v.first()).cloned() {
        let to = ip(&c, p2)?;
        let e = c.tcp_syn(Who::Node(0), to, 8080);
        add(
            "node -> pod on another node",
            &wins[0].name,
            format!("{to}:8080 tcp"),
            (t.mode == Mode::Overlay).then_some(Limitation::RemotePodFromNodeOnOverlay),
            Some(show(&e)),
        );
    }
    let e = c.tcp_syn(p1, node_ip(0), 10250);
    add(
        "pod -> node",
        &p1_name,
        format!("{}:10250 tcp", node_ip(0)),
        None,
        Some(show(&e)),
    );
    // The real matrix's client for names: the first Windows node's second pod, if any.
    let (client_name, client) = pods[0].get(1).cloned().unwrap_or((p1_name, p1));
    rows.extend(name_rows(&mut c, t, (&client_name, client), &opts.dns)?);

    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let expected = match r.limitation {
                Some(l) => format!("fails ({})", l.as_str()),
                None => "works".into(),
            };
            let (happened, verdict) = match &r.result {
                None => (r.skipped.to_string(), "skipped".to_string()),
                Some((ok, d)) => (
                    format!("{}: {d}", if *ok { "works" } else { "fails" }),
                    if *ok == r.expect_pass {
                        "ok"
                    } else {
                        "MISMATCH"
                    }
                    .to_string(),
                ),
            };
            [
                r.name.clone(),
                r.from.clone(),
                r.to.clone(),
                expected,
                happened,
                verdict,
            ]
        })
        .collect();
    println!("{}", super::check::render_rows(&cells, markdown));
    let bad = cells.iter().filter(|r| r[5] == "MISMATCH").count();
    eprintln!(
        "{} flows simulated ({} mode, profile {}): {bad} mismatched",
        rows.iter().filter(|r| r.result.is_some()).count(),
        t.mode,
        t.profile
    );
    if bad > 0 {
        bail!("some simulated flows did not behave as the profile says (see MISMATCH above)");
    }
    Ok(())
}

/// The cluster DNS of the simulation: `coredns-N` pods on the first Windows nodes, each
/// answering UDP 53 with the `dns` crate's handler over the objects the real cluster writes
/// for these pods, behind the `kube-dns` Service; the external host serves the outside
/// address. Returns the DNS pods.
fn cluster_dns(
    c: &mut Cluster,
    t: &Topology,
    wins: &[&super::topology::NodeSpec],
    pods: &[Vec<(String, Who)>],
    opts: &PodOptions,
) -> anyhow::Result<Vec<Who>> {
    let state = |c: &Cluster, name: &str, w: Who| -> anyhow::Result<PodState> {
        let ip = match c.ip_of(w) {
            Some(IpAddr::V4(ip)) => ip,
            other => bail!("{name}: no IPv4 address ({other:?})"),
        };
        Ok(PodState {
            name: name.to_string(),
            netns: String::new(),
            ip,
        })
    };
    let mut dns = Vec::new();
    let mut dns_named = Vec::new();
    for (i, n) in wins.iter().enumerate().take(DNS_PODS) {
        let name = format!("{DNS_POD_PREFIX}{}", i + 1);
        let who = c
            .add_pod(i, &name, opts.clone())
            .map_err(|e| anyhow::anyhow!("pod {name}: {}", e.detail))?;
        dns_named.push((n.name.clone(), state(c, &name, who)?));
        dns.push(who);
    }
    let mut named = Vec::new();
    for (n, v) in wins.iter().zip(pods) {
        for (p, w) in v {
            named.push((n.name.clone(), state(c, p, *w)?));
        }
    }
    let handler = Arc::new(sim_dns::handler(t, &named, &dns_named)?);
    for w in &dns {
        if let Some(s) = c.stack_mut(*w) {
            s.udp_responders
                .insert(53, sim_dns::responder(Arc::clone(&handler)));
        }
    }
    let svc = Service::udp(
        &format!("kube-system/{DNS_SERVICE}"),
        IpAddr::V4(DNS_SERVICE_IP),
        53,
        53,
        dns.clone(),
    );
    c.add_service(&svc)
        .map_err(|e| anyhow::anyhow!("Service {DNS_SERVICE}: {}", e.detail))?;
    c.external.extra_addresses.push(IpAddr::V4(OUTSIDE_IP));
    c.external.tcp_listen.insert(HTTP_PORT);
    Ok(dns)
}

/// The rows by name of the real matrix from the first Windows pod: its resolver (the Windows
/// DNS Client's rules, or glibc's under `unrestricted`, as hnsd decides) asks the cluster DNS
/// through the `kube-dns` Service, then a SYN goes to the address it got. From the Linux pod:
/// not simulated.
fn name_rows(
    c: &mut Cluster,
    t: &Topology,
    (windows_pod, client): (&str, Who),
    dns: &hcn::Dns,
) -> anyhow::Result<Vec<Row>> {
    let Some(s) = t.services.first() else {
        return Ok(Vec::new());
    };
    // The headless name's pod: one of the Service's pods, on the second Windows node if any.
    let mut ours = t
        .nodes
        .iter()
        .filter(|n| n.os == Os::Windows)
        .flat_map(|n| {
            let sel = s.selector.clone();
            n.pods
                .iter()
                .filter(move |p| p.starts_with(&sel))
                .map(move |p| (n.name.clone(), p.clone()))
        });
    let Some(first) = ours.next() else {
        return Ok(Vec::new());
    };
    let pod = ours.find(|(n, _)| *n != first.0).unwrap_or(first).1;
    let peer = format!("{pod}.{HEADLESS_SERVICE}");
    let names = [
        (
            "pod by name (FQDN)",
            format!("{peer}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"),
            false,
            HTTP_PORT,
        ),
        ("pod by name (host.svc)", peer.clone(), true, HTTP_PORT),
        (
            "Service by single-label name",
            s.name.clone(),
            false,
            s.port,
        ),
        (
            "Service by svc.namespace",
            format!("{}.{NAMESPACE}", s.name),
            true,
            s.port,
        ),
        (
            "Service by FQDN",
            format!("{}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}", s.name),
            false,
            s.port,
        ),
        (
            "external by DNS name",
            format!("www.{EXTERNAL_ZONE}"),
            false,
            HTTP_PORT,
        ),
        (
            "ExternalName Service",
            EXTERNAL_NAME_SERVICE.to_string(),
            false,
            HTTP_PORT,
        ),
    ];
    let rules = sim_dns::pod_rules(t.profile, windows_pod, dns)?;
    let mut out = Vec::new();
    for (what, name, dotted, port) in &names {
        let lim = dotted
            .then_some(Limitation::WindowsDnsClient)
            .filter(|l| t.profile.imposes(*l));
        let r = sim_dns::resolve(c, client, &rules, name)?;
        let queries = r.walk.steps.len();
        let result = match r.address {
            None => (
                false,
                format!(
                    "not resolved: {} after {queries} quer{} ({})",
                    r.walk.result,
                    if queries == 1 { "y" } else { "ies" },
                    r.walk.end
                ),
            ),
            Some(ip) => {
                let e = c.tcp_syn(client, IpAddr::V4(ip), *port);
                let (ok, d) = show_exchange(&e);
                (ok, format!("resolved to {ip}; {ip}:{port} tcp {d}"))
            }
        };
        out.push(Row {
            name: format!("pod -> {what}"),
            from: windows_pod.to_string(),
            to: name.clone(),
            expect_pass: lim.is_none(),
            limitation: lim,
            result: Some(result),
            skipped: LINUX_KERNEL,
        });
    }
    if t.nodes.iter().any(|n| n.os == Os::Linux) {
        for (what, name, _, _) in &names {
            out.push(Row {
                name: format!("Linux pod -> {what}"),
                from: "-".into(),
                to: name.clone(),
                expect_pass: true,
                limitation: None,
                result: None,
                skipped: LINUX_KERNEL,
            });
        }
    }
    Ok(out)
}

/// A TCP exchange in words: whether it was answered, and where it was dropped if not.
fn show_exchange(e: &Exchange) -> (bool, String) {
    match (e.ok(), e.seen()) {
        (true, Some(p)) => (
            true,
            format!("answered; the receiver saw the source {}", p.src),
        ),
        (true, None) => (true, "answered".into()),
        (false, _) => (
            false,
            e.drops
                .first()
                .map(|d| format!("dropped at {}: {}", d.node, d.reason))
                .unwrap_or_else(|| "no answer".into()),
        ),
    }
}
