//! `winnet trace`: what a node's switch does with the first packet of a connection, layer by
//! layer, with the HNS object and the Kubernetes object behind each rule (hnsd's `POST /trace`).

use crate::output::outln;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use hns_client::trace::answer::RuleOrigin;
use hns_client::{Client, TraceAnswer, TraceProtocol, TraceRequest};

use super::trace_policy::{self, AclExplanation, PolicySource};

#[derive(clap::Args)]
pub struct Args {
    /// The node whose switch to trace: its hnsd is /run/winnet/cluster/NODE/hns.sock when the
    /// local cluster runs it, else the one at --hns-socket.
    #[arg(long)]
    node: String,
    /// Where the packet comes from: a pod's endpoint (name or ID), or an IP address (the node's,
    /// or any other, which arrives on the uplink).
    #[arg(long, value_name = "POD|IP")]
    from: String,
    /// Where it goes: IP:PORT for tcp and udp, IP for icmp.
    #[arg(long, value_name = "IP:PORT")]
    to: String,
    /// The first packet: a TCP SYN, a UDP datagram or an ICMP echo request.
    #[arg(long, default_value = "tcp", value_name = "tcp|udp|icmp")]
    proto: TraceProtocol,
    /// One line per layer instead of the detailed explanation.
    #[arg(long)]
    summary: bool,
    /// hnsd's structured answer as JSON.
    #[arg(long, conflicts_with = "summary")]
    json: bool,
    /// Replay the trace from a bundle made by `winnet collect` (no node, no root needed).
    #[arg(long, value_name = "FILE", conflicts_with = "hns_socket")]
    bundle: Option<PathBuf>,
    /// hnsd's socket when the node is not in the local cluster (else HNS_SOCKET, else
    /// /run/winnet/hns.sock).
    #[arg(long)]
    hns_socket: Option<PathBuf>,
    /// The NetworkPolicies, Pods and Namespaces the node's policy agent reads (default: the
    /// local cluster's, or the bundle's): at each ACL layer the trace names the NetworkPolicy
    /// rule behind the deciding ACL, what the agent skipped and what a Linux node decides.
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let req = TraceRequest::new(&args.from, &args.to, args.proto).map_err(|e| flag_error(&e))?;
    if let Some(path) = &args.bundle {
        let bundle = crate::doctor::bundle::Bundle::read(path)?;
        let node = bundle.node(&args.node)?;
        let answer = crate::doctor::replay::trace(node, &req).map_err(|e| {
            flag_error(&hcn::error::HnsError::new(
                hcn::error::HResult::E_INVALIDARG,
                format!("{e:#}"),
            ))
        })?;
        let source = match &args.manifests {
            Some(dir) => Some(PolicySource::from_dir(dir)?),
            None => PolicySource::from_files(&bundle.manifests),
        };
        let policy = trace_policy::explain(&answer, &node.hns.endpoints, source.as_ref());
        return print(&args, &answer, &policy);
    }
    let socket = socket(&args.node, args.hns_socket.as_deref())?;
    let client = Client::new(&socket);
    let rt = super::runtime()?;
    let on_node = || format!("trace on node {} (hnsd at {})", args.node, socket.display());
    let answer = rt.block_on(client.trace(&req)).with_context(on_node)?;
    let policy = if answer.trace.steps.iter().any(|s| s.layer == "acl") {
        let endpoints = rt.block_on(client.list_endpoints()).with_context(on_node)?;
        let source = policy_dir(args.manifests.as_deref(), &socket)
            .map(|d| PolicySource::from_dir(&d))
            .transpose()?;
        trace_policy::explain(&answer, &endpoints, source.as_ref())
    } else {
        Vec::new()
    };
    print(&args, &answer, &policy)
}

/// The objects' folder: `--manifests`, else the local cluster's when the node is one of its
/// own (its hnsd is the cluster's).
fn policy_dir(flag: Option<&Path>, socket: &Path) -> Option<PathBuf> {
    if let Some(dir) = flag {
        return Some(dir.to_path_buf());
    }
    let cluster = Path::new(crate::cluster::DIR);
    let in_cluster = cluster.join("manifests");
    (socket.starts_with(cluster) && in_cluster.is_dir()).then_some(in_cluster)
}

fn print(args: &Args, answer: &TraceAnswer, policy: &[AclExplanation]) -> anyhow::Result<()> {
    let out = if args.json {
        let mut v = serde_json::to_value(answer)?;
        if !policy.is_empty()
            && let Some(m) = v.as_object_mut()
        {
            m.insert("NetworkPolicy".into(), serde_json::to_value(policy)?);
        }
        serde_json::to_string_pretty(&v)?
    } else if args.summary {
        summary(answer, policy)
    } else {
        detail(answer, policy)
    };
    outln!("{}", out.trim_end())?;
    Ok(())
}

/// A request error from hnsd's checks, named by the flag the user wrote.
fn flag_error(e: &hcn::error::HnsError) -> anyhow::Error {
    for (field, flag) in [("From: ", "--from "), ("To: ", "--to ")] {
        if let Some(rest) = e.detail.strip_prefix(field) {
            return anyhow!("{flag}{rest}");
        }
    }
    anyhow!("{}", e.detail)
}

/// The node's socket in the local cluster if it is there, else the usual one.
fn socket(node: &str, flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if node.is_empty() || node.contains('/') || node == "." || node == ".." {
        bail!("--node \"{node}\" is not a node name; give the node's name, e.g. --node win1");
    }
    let in_cluster = Path::new(crate::cluster::DIR).join(node).join("hns.sock");
    if in_cluster.exists() {
        return Ok(in_cluster);
    }
    Ok(hns_client::socket_path(flag))
}

/// The detailed explanation: where the packet comes from, each layer with its rule, the
/// objects behind it and the rewrite, the forwarding and the disposition.
fn detail(answer: &TraceAnswer, policy: &[AclExplanation]) -> String {
    let t = &answer.trace;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {} from {} {} to {} on node {} ({})",
        t.request.protocol,
        t.from.name,
        t.from.address,
        t.request.destination(),
        t.node,
        t.profile
    );
    if let Some(h) = &t.next_hop {
        let _ = writeln!(out, "# next hop {} at {} ({})", h.address, h.mac, h.how);
    }
    let _ = writeln!(
        out,
        "\ningress port {} ({})",
        t.ingress.port, t.ingress.name
    );
    let packet = t.packet.as_ref().map_or("", |p| p.text.as_str());
    let _ = writeln!(out, "  packet: {packet}");
    if let Some(f) = &t.flow_table {
        let _ = writeln!(
            out,
            "  flow table hit ({} side of {} -> {})",
            f.side, f.original.text, f.fin.text
        );
    }
    for (i, step) in t.steps.iter().enumerate() {
        let _ = writeln!(
            out,
            "\n{}. {} {}, layer {}",
            i + 1,
            step.port_name,
            step.direction,
            step.layer
        );
        match &step.rule {
            Some(r) => {
                let _ = writeln!(
                    out,
                    "   rule {} (group {}, priority {}): {}",
                    r.index, r.group, r.priority, step.action
                );
            }
            None => {
                let _ = writeln!(out, "   {}", step.action);
            }
        }
        if let Some(o) = &step.origin {
            origin_lines(o, &mut out);
        }
        if let Some(p) = policy.iter().find(|p| p.step == i + 1) {
            for line in p.lines() {
                let _ = writeln!(out, "   {line}");
            }
        }
        if let Some(b) = step.backend {
            let _ = writeln!(out, "   backend: {b}");
        }
        if !step.rewrite.is_empty() {
            let _ = writeln!(out, "   rewrite: {}", step.rewrite.join("; "));
        }
    }
    out.push('\n');
    if let Some(f) = &t.forward {
        let _ = writeln!(
            out,
            "forwarded to port {} ({}): {}",
            f.port, f.name, f.reason
        );
    }
    if let Some(o) = &t.output {
        let _ = writeln!(out, "leaves as: {}", o.text);
    }
    let _ = writeln!(out, "disposition: {}", answer.disposition);
    for n in &t.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// Who made a rule: the HNS object (kind, name, ID), the Kubernetes object behind it, and the
/// limitation it enforces.
fn origin_lines(o: &RuleOrigin, out: &mut String) {
    let made_by = match &o.object {
        Some(obj) => {
            let name = obj
                .name
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default();
            format!("{}{name} {}", obj.kind, obj.id)
        }
        None => format!("{} {}", o.kind, o.id),
    };
    let _ = writeln!(out, "   made by HNS {made_by}");
    if let Some(k) = &o.kubernetes {
        let _ = writeln!(
            out,
            "   for Kubernetes {} {}/{} port {}",
            k.kind, k.namespace, k.name, k.port
        );
    } else if let Some(l) = &o.limitation {
        let _ = writeln!(out, "   limitation {}: {}", l.name, l.message);
    } else if let Some(src) = &o.source {
        // "endpoint pa_cbr0" says nothing the line above does not.
        let echo = o.object.as_ref().is_some_and(|obj| {
            let name = obj.name.as_deref().unwrap_or_default();
            src.eq_ignore_ascii_case(&format!("{} {name}", obj.kind))
        });
        if !echo {
            let _ = writeln!(out, "   ({src})");
        }
    }
}

/// One line per layer, then the disposition.
fn summary(answer: &TraceAnswer, policy: &[AclExplanation]) -> String {
    let mut out = String::new();
    for step in &answer.trace.steps {
        let who = match &step.origin {
            Some(o) => {
                let source = o
                    .source
                    .as_deref()
                    .map(|src| format!(" ({src})"))
                    .unwrap_or_default();
                format!("{} {}{source}: ", o.kind, o.id)
            }
            None => String::new(),
        };
        let backend = step.backend.map(|b| format!(" -> {b}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "{} {} {}: {who}{}{backend}",
            step.port_name, step.direction, step.layer, step.action
        );
    }
    for p in policy {
        let made_by = p
            .made_by
            .as_deref()
            .unwrap_or("no NetworkPolicy rule known");
        let linux = match p.linux_allows {
            Some(true) => "; a Linux node allows it",
            Some(false) => "; a Linux node blocks it",
            None => "",
        };
        let _ = writeln!(out, "{} acl: {made_by}{linux}", p.port_name);
    }
    let _ = writeln!(out, "=> {}", answer.disposition);
    out
}
