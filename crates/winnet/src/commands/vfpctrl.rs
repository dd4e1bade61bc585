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
