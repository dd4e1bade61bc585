//! `winnet trace`: what a node's switch does with the first packet of a connection, layer by
//! layer, with the HNS object and the Kubernetes object behind each rule (hnsd's `POST /trace`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use hns_client::{Client, TraceProtocol, TraceRequest};
use serde_json::Value;

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
    /// hnsd's socket when the node is not in the local cluster (else HNS_SOCKET, else
    /// /run/winnet/hns.sock).
    #[arg(long)]
    hns_socket: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let req = TraceRequest::new(&args.from, &args.to, args.proto).map_err(|e| flag_error(&e))?;
    let socket = socket(&args.node, args.hns_socket.as_deref())?;
    let client = Client::new(&socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let answer = rt
        .block_on(client.trace(&req))
        .with_context(|| format!("trace on node {} (hnsd at {})", args.node, socket.display()))?;
    let out = if args.json {
        serde_json::to_string_pretty(&answer)?
    } else if args.summary {
        summary(&answer)
    } else {
        detail(&answer)
    };
    println!("{}", out.trim_end());
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

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The detailed explanation: where the packet comes from, each layer with its rule, the
/// objects behind it and the rewrite, the forwarding and the disposition.
fn detail(answer: &Value) -> String {
    let t = &answer["Trace"];
    let mut out = String::new();
    let req = &t["Request"];
    let _ = writeln!(
        out,
        "# {} from {} {} to {} on node {} ({})",
        s(&req["Protocol"]),
        s(&t["From"]["Name"]),
        s(&t["From"]["Address"]),
        s(&req["To"]),
        s(&t["Node"]),
        s(&t["Profile"])
    );
    if t["NextHop"].is_object() {
        let h = &t["NextHop"];
        let _ = writeln!(
            out,
            "# next hop {} at {} ({})",
            s(&h["Address"]),
            s(&h["Mac"]),
            s(&h["How"])
        );
    }
    let _ = writeln!(
        out,
        "\ningress port {} ({})",
        t["Ingress"]["Port"],
        s(&t["Ingress"]["Name"])
    );
    let _ = writeln!(out, "  packet: {}", s(&t["Packet"]["Text"]));
    if t["FlowTable"].is_object() {
        let _ = writeln!(
            out,
            "  flow table hit ({} side of {} -> {})",
            s(&t["FlowTable"]["Side"]),
            s(&t["FlowTable"]["Original"]["Text"]),
            s(&t["FlowTable"]["Final"]["Text"])
        );
    }
    for (i, step) in steps(t).iter().enumerate() {
        let _ = writeln!(
            out,
            "\n{}. {} {}, layer {}",
            i + 1,
            s(&step["PortName"]),
            s(&step["Direction"]),
            s(&step["Layer"])
        );
        match step["Rule"].as_object() {
            Some(r) => {
                let _ = writeln!(
                    out,
                    "   rule {} (group {}, priority {}): {}",
                    r.get("Index").unwrap_or(&Value::Null),
                    r.get("Group").and_then(Value::as_str).unwrap_or_default(),
                    r.get("Priority").unwrap_or(&Value::Null),
                    s(&step["Action"])
                );
            }
            None => {
                let _ = writeln!(out, "   {}", s(&step["Action"]));
            }
        }
        origin_lines(&step["Origin"], &mut out);
        if let Some(b) = step["Backend"].as_str() {
            let _ = writeln!(out, "   backend: {b}");
        }
        let rewrites: Vec<&str> = step["Rewrite"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !rewrites.is_empty() {
            let _ = writeln!(out, "   rewrite: {}", rewrites.join("; "));
        }
    }
    out.push('\n');
    if t["Forward"].is_object() {
        let f = &t["Forward"];
        let _ = writeln!(
            out,
            "forwarded to port {} ({}): {}",
            f["Port"],
            s(&f["Name"]),
            s(&f["Reason"])
        );
    }
    if t["Output"].is_object() {
        let _ = writeln!(out, "leaves as: {}", s(&t["Output"]["Text"]));
    }
    let _ = writeln!(out, "disposition: {}", s(&answer["Disposition"]));
    for n in t["Notes"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "note: {}", s(n));
    }
    out
}

/// Who made a rule: the HNS object (kind, name, ID), the Kubernetes object behind it, and the
/// limitation it enforces.
fn origin_lines(o: &Value, out: &mut String) {
    if !o.is_object() {
        return;
    }
    let object = &o["Object"];
    let made_by = match object.as_object() {
        Some(obj) => {
            let name = obj
                .get("Name")
                .and_then(Value::as_str)
                .map(|n| format!(" {n}"))
                .unwrap_or_default();
            format!(
                "{}{name} {}",
                obj.get("Kind").and_then(Value::as_str).unwrap_or_default(),
                obj.get("Id").and_then(Value::as_str).unwrap_or_default()
            )
        }
        None => format!("{} {}", s(&o["Kind"]), s(&o["Id"])),
    };
    let _ = writeln!(out, "   made by HNS {made_by}");
    if let Some(k) = o["Kubernetes"].as_object() {
        let _ = writeln!(
            out,
            "   for Kubernetes {} {}/{} port {}",
            k.get("Kind").and_then(Value::as_str).unwrap_or_default(),
            k.get("Namespace")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            k.get("Name").and_then(Value::as_str).unwrap_or_default(),
            k.get("Port").and_then(Value::as_str).unwrap_or_default()
        );
    } else if let Some(l) = o["Limitation"].as_object() {
        let _ = writeln!(
            out,
            "   limitation {}: {}",
            l.get("Name").and_then(Value::as_str).unwrap_or_default(),
            l.get("Message").and_then(Value::as_str).unwrap_or_default()
        );
    } else if let Some(src) = o["Source"].as_str() {
        // "endpoint pa_cbr0" says nothing the line above does not.
        let echo = object.as_object().is_some_and(|obj| {
            let kind = obj.get("Kind").and_then(Value::as_str).unwrap_or_default();
            let name = obj.get("Name").and_then(Value::as_str).unwrap_or_default();
            src.eq_ignore_ascii_case(&format!("{kind} {name}"))
        });
        if !echo {
            let _ = writeln!(out, "   ({src})");
        }
    }
}

/// One line per layer, then the disposition.
fn summary(answer: &Value) -> String {
    let t = &answer["Trace"];
    let mut out = String::new();
    for step in steps(t) {
        let who = match step["Origin"].as_object() {
            Some(o) => {
                let source = o
                    .get("Source")
                    .and_then(Value::as_str)
                    .map(|src| format!(" ({src})"))
                    .unwrap_or_default();
                format!(
                    "{} {}{source}: ",
                    o.get("Kind").and_then(Value::as_str).unwrap_or_default(),
                    o.get("Id").and_then(Value::as_str).unwrap_or_default()
                )
            }
            None => String::new(),
        };
        let backend = step["Backend"]
            .as_str()
            .map(|b| format!(" -> {b}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{} {} {}: {who}{}{backend}",
            s(&step["PortName"]),
            s(&step["Direction"]),
            s(&step["Layer"]),
            s(&step["Action"])
        );
    }
    let _ = writeln!(out, "=> {}", s(&answer["Disposition"]));
    out
}

fn steps(t: &Value) -> Vec<&Value> {
    t["Steps"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}
