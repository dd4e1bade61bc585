//! `winnet vfpctrl`: Windows' `vfpctrl.exe` against a live hnsd — the switch's ports, and the
//! rules of a port's layers listed, removed or added by hand (hnsd's `POST
//! /linux/switch/rules`), with vfpctrl's words.

use crate::output::outln;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use hns_client::Client;
use hns_client::rule_spec::RuleSpec;
use hns_client::switch::{EditOp, PortRules, RuleEdit, SwitchDump};

/// The flags, with vfpctrl's words (the help text is the subcommand's, in main.rs).
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("verb").required(true).args(["list_port", "list_rule", "remove_rule", "add_rule"])))]
pub struct Args {
    /// hnsd's socket (else HNS_SOCKET, else /run/winnet/hns.sock).
    #[arg(long)]
    hns_socket: Option<PathBuf>,
    /// The port: its number, its name, or the ID of the endpoint it is the vNIC of.
    #[arg(long)]
    port: Option<String>,
    /// The layer (acl, slb, nat, route, mac); required to remove or add.
    #[arg(long)]
    layer: Option<String>,
    /// The layer's group (`default`); required to remove or add.
    #[arg(long)]
    group: Option<String>,
    /// List the switch's ports.
    #[arg(long)]
    list_port: bool,
    /// List the port's rules (of --layer and --group when given).
    #[arg(long)]
    list_rule: bool,
    /// Remove the rule of this ID (`<owner kind>:<owner id>:<n>`, as --list-rule shows it).
    #[arg(long, value_name = "ID")]
    remove_rule: Option<String>,
    /// Add a rule: `name=NAME priority=N action=allow|block [dir=in|out] [proto=tcp|udp|icmp|N]
    /// [src=CIDR,..] [dst=CIDR,..] [sport=P[-Q],..] [dport=P[-Q],..]`.
    #[arg(long, value_name = "SPEC")]
    add_rule: Option<String>,
    /// Print hnsd's answer as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::new(hns_client::socket_path(args.hns_socket.as_deref()));
    let rt = super::runtime()?;
    if args.list_port {
        let dump = rt
            .block_on(client.switch_dump())
            .with_context(|| format!("listing the ports (hnsd at {})", client.endpoint()))?;
        let out = if args.json {
            serde_json::to_string_pretty(&dump.ports)?
        } else {
            ports(&dump)
        };
        outln!("{}", out.trim_end())?;
        return Ok(());
    }
    let op = if let Some(id) = &args.remove_rule {
        EditOp::Remove(id.clone())
    } else if let Some(spec) = &args.add_rule {
        EditOp::Add(
            spec.parse::<RuleSpec>()
                .map_err(|e| anyhow!("--add-rule: {e}"))?,
        )
    } else {
        EditOp::List
    };
    let Some(port) = args.port.clone() else {
        bail!("--port: give the port (its number, name or endpoint ID; --list-port shows them)");
    };
    let edit = RuleEdit {
        port,
        layer: args.layer.clone(),
        group: args.group.clone(),
        op,
    };
    let answer = rt.block_on(client.edit_rules(&edit)).map_err(flag_error)?;
    let out = if args.json {
        serde_json::to_string_pretty(&answer)?
    } else {
        rules(&answer)
    };
    outln!("{}", out.trim_end())?;
    Ok(())
}

/// hnsd's refusal, named by the flag the user wrote: its record is HNS's text for the code,
/// then the detail, which starts with the field (`port: ...`).
fn flag_error(e: hns_client::ClientError) -> anyhow::Error {
    if let hns_client::ClientError::Hns { error, .. } = &e {
        for (field, flag) in [
            ("port: ", "--port: "),
            ("layer: ", "--layer: "),
            ("group: ", "--group: "),
            ("rule: ", "--remove-rule: "),
            ("name: ", "--add-rule: name: "),
            ("rule spec: ", "--add-rule: rule spec: "),
        ] {
            let at = if error.starts_with(field) {
                Some(0)
            } else {
                error.find(&format!(". {field}")).map(|i| i + 2)
            };
            if let Some(i) = at {
                return anyhow!("{flag}{}", &error[i + field.len()..]);
            }
        }
    }
    anyhow!("{e}")
}

fn ports(dump: &SwitchDump) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<5} {:<6} {:<38} {:<20} ENDPOINT",
        "PORT", "KIND", "NAME", "IPS"
    );
    for p in &dump.ports {
        let ips: Vec<String> = p.ips.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "{:<5} {:<6} {:<38} {:<20} {}",
            p.id,
            p.kind,
            p.name,
            ips.join(","),
            p.endpoint.as_deref().unwrap_or("-")
        );
    }
    out
}

/// Windows' names of the ACL layer and of its groups' match type.
mod vfp_acl {
    /// The switch's name of the layer endpoint ACLs are in.
    pub const LAYER: &str = "acl";
    /// Windows' name of it (`vfpctrl /layer ACL_ENDPOINT_LAYER`).
    pub const WINDOWS_LAYER: &str = "ACL_ENDPOINT_LAYER";
    /// The ACL rule's priority at which VFP decides, in vfpctrl's words.
    pub const MATCH: &str = "Priority-based match";
}

/// The ACL layer as `vfpctrl /port <p> /layer ACL_ENDPOINT_LAYER /list-rule` prints it: groups
/// per address family and direction, each rule under its friendly name (the ACL's `Id`), best
/// priority first.
fn acl_layer(out: &mut String, rules: &[hns_client::switch::RuleDump]) {
    let _ = writeln!(out, "  LAYER : {}", vfp_acl::WINDOWS_LAYER);
    let mut groups: Vec<&str> = rules.iter().map(|r| r.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        // Names end in the direction and carry the family (a tier's holds both families).
        let dir = ["IN", "OUT"]
            .into_iter()
            .find(|d| g.ends_with(&format!("_{d}")))
            .unwrap_or("");
        let family = ["IPv4", "IPv6"]
            .into_iter()
            .find(|f| g.contains(&format!("_{}_", f.to_uppercase())))
            .unwrap_or("IPv4, IPv6");
        let _ = writeln!(out, "    GROUP : {g}");
        let _ = writeln!(out, "      Friendly name : {g}");
        let _ = writeln!(out, "      Direction : {dir}");
        let _ = writeln!(out, "      Type : {family}");
        let _ = writeln!(out, "      Match type : {}", vfp_acl::MATCH);
        let mut in_group: Vec<_> = rules.iter().filter(|r| r.group == g).collect();
        in_group.sort_by_key(|r| r.priority);
        for r in in_group {
            acl_rule(out, r);
        }
    }
}

fn acl_rule(out: &mut String, r: &hns_client::switch::RuleDump) {
    let _ = writeln!(out, "      RULE : {}", r.id);
    let _ = writeln!(
        out,
        "        Friendly name : {}",
        r.name.as_deref().unwrap_or(&r.id)
    );
    let _ = writeln!(out, "        Priority : {}", r.priority);
    let _ = writeln!(out, "        Flags : terminating stateful");
    let _ = writeln!(out, "        Type : {}", r.action);
    let _ = writeln!(out, "        Conditions:");
    let list = |v: Vec<String>| v.join(", ");
    let conditions = [
        (
            "Protocols",
            list(r.protocols.iter().map(u8::to_string).collect()),
        ),
        (
            "Source IP",
            list(r.sources.iter().map(ToString::to_string).collect()),
        ),
        (
            "Destination IP",
            list(r.destinations.iter().map(ToString::to_string).collect()),
        ),
        ("Source ports", list(r.source_ports.clone())),
        ("Destination ports", list(r.destination_ports.clone())),
    ];
    let mut any = false;
    for (k, v) in conditions.iter().filter(|(_, v)| !v.is_empty()) {
        let _ = writeln!(out, "          {k} : {v}");
        any = true;
    }
    if !any {
        let _ = writeln!(out, "          <none>");
    }
    let _ = writeln!(out, "        Hits : {}", r.hits);
}

fn rules(answer: &PortRules) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "port {} {}{}",
        answer.port,
        answer.name,
        answer
            .endpoint
            .as_deref()
            .map(|e| format!(" (endpoint {e})"))
            .unwrap_or_default()
    );
    if let Some(id) = &answer.changed {
        let _ = writeln!(out, "changed: {id}");
    }
    for l in &answer.layers {
        let _ = writeln!(out, "layer {} ({} rules)", l.name, l.rules.len());
        if l.name == vfp_acl::LAYER {
            acl_layer(&mut out, &l.rules);
            continue;
        }
        for r in &l.rules {
            let mut matches: Vec<String> = r.destinations.iter().map(ToString::to_string).collect();
            if !r.destination_ports.is_empty() {
                matches.push(format!("port {}", r.destination_ports.join(",")));
            }
            let _ = writeln!(
                out,
                "  {} group={} priority={} hits={} {}{}{}",
                r.id,
                r.group,
                r.priority,
                r.hits,
                r.action,
                if matches.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", matches.join(" "))
                },
                r.source
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            );
        }
    }
    out
}
