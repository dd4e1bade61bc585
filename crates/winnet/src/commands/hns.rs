//! `winnet hns`: hnsd's objects from the command line, as tables or JSON.

use crate::output::outln;
use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, bail};
use hns_client::{Client, Kind, Method};
use serde_json::{Map, Value};

#[derive(clap::Args)]
pub struct Args {
    /// hnsd's socket (else HNS_SOCKET, else /run/winnet/hns.sock).
    #[arg(long, global = true)]
    hns_socket: Option<PathBuf>,
    /// Output: table, json, or id (the IDs only).
    #[arg(short, long, global = true, default_value = "table")]
    output: Output,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Table,
    Json,
    Id,
}

#[derive(clap::Subcommand)]
enum Verb {
    /// List objects of a kind (networks, endpoints, namespaces, loadbalancers, routes).
    List {
        kind: Kind,
        /// Only objects matching this JSON filter, e.g. '{"Name":"cbr0"}'.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Show one object.
    Get { kind: Kind, id: String },
    /// Create an object from an HNS v2 JSON document.
    Create {
        kind: Kind,
        /// The document ("-" for standard input).
        #[arg(short, long)]
        file: PathBuf,
        /// Set a top-level field: KEY=VALUE, VALUE as JSON or else as a string.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Modify an object: a modify request (or, for a load balancer, the whole object).
    Modify {
        kind: Kind,
        id: String,
        #[arg(short, long)]
        file: PathBuf,
    },
    /// Delete an object.
    Delete { kind: Kind, id: String },
    /// The whole state as one sorted JSON document (two dumps diff cleanly).
    Dump,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::new(hns_client::socket_path(args.hns_socket.as_deref()));
    let rt = super::runtime()?;
    rt.block_on(verb(&client, args.verb, args.output))
}

async fn verb(client: &Client, verb: Verb, output: Output) -> anyhow::Result<()> {
    match verb {
        Verb::List { kind, filter } => {
            let filter = filter
                .map(|f| {
                    serde_json::from_str::<Value>(&f)
                        .context("--filter is not JSON; write e.g. '{\"Name\":\"cbr0\"}'")
                })
                .transpose()?;
            let items = client.list_raw(kind, filter.as_ref()).await?;
            print(kind, &items, output)?;
        }
        Verb::Get { kind, id } => {
            let v = client
                .call(Method::GET, &format!("/{kind}/{id}"), None)
                .await?;
            print(kind, &[v], output)?;
        }
        Verb::Create { kind, file, set } => {
            let mut doc = read_doc(&file)?;
            for kv in &set {
                apply_set(&mut doc, kv)?;
            }
            let v = client
                .call(
                    Method::POST,
                    &format!("/{kind}"),
                    Some(serde_json::to_vec(&doc)?),
                )
                .await?;
            print(kind, &[v], output)?;
        }
        Verb::Modify { kind, id, file } => {
            let doc = read_doc(&file)?;
            let v = client
                .call(
                    Method::PATCH,
                    &format!("/{kind}/{id}"),
                    Some(serde_json::to_vec(&doc)?),
                )
                .await?;
            print(kind, &[v], output)?;
        }
        Verb::Delete { kind, id } => {
            client
                .call(Method::DELETE, &format!("/{kind}/{id}"), None)
                .await?;
        }
        Verb::Dump => {
            let mut all = Map::new();
            for kind in Kind::ALL {
                let mut items = client.list_raw(kind, None).await?;
                items.sort_by_key(|o| {
                    o.get("ID")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                });
                all.insert(kind.plural().into(), Value::Array(items));
            }
            outln!(
                "{}",
                serde_json::to_string_pretty(&sorted(Value::Object(all)))?
            )?;
        }
    }
    Ok(())
}

fn read_doc(file: &PathBuf) -> anyhow::Result<Value> {
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))
}

fn apply_set(doc: &mut Value, kv: &str) -> anyhow::Result<()> {
    let Some((key, value)) = kv.split_once('=') else {
        bail!("--set {kv}: write KEY=VALUE, e.g. --set HostComputeNetwork=<id>");
    };
    let Some(obj) = doc.as_object_mut() else {
        bail!("--set needs the document to be a JSON object")
    };
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    obj.insert(key.to_string(), value);
    Ok(())
}

/// Sorts object keys recursively, so that dumps are canonical.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> =
                m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn print(kind: Kind, items: &[Value], output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => {
            let doc = if items.len() == 1 {
                items[0].clone()
            } else {
                Value::Array(items.to_vec())
            };
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default())?;
        }
        Output::Id => {
            for o in items {
                outln!("{}", str_at(o, "ID"))?;
            }
        }
        Output::Table => print_table(kind, items)?,
    }
    Ok(())
}

fn str_at(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn joined(v: &Value, key: &str, field: Option<&str>) -> String {
    let items = v
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .map(|i| match field {
            Some(f) => str_at(i, f),
            None => i
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| i.to_string()),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn print_table(kind: Kind, items: &[Value]) -> anyhow::Result<()> {
    let (header, rows): (&[&str], Vec<Vec<String>>) = match kind {
        Kind::Network => (
            &["ID", "NAME", "TYPE", "SUBNETS"],
            items
                .iter()
                .map(|n| {
                    let subnets: Vec<String> = n["Ipams"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|i| joined(i, "Subnets", Some("IpAddressPrefix")))
                        .collect();
                    let ty = str_at(n, "Type");
                    vec![
                        str_at(n, "ID"),
                        str_at(n, "Name"),
                        if ty.is_empty() { "NAT".into() } else { ty },
                        subnets.join(","),
                    ]
                })
                .collect(),
        ),
        Kind::Endpoint => (
            &["ID", "NAME", "IP", "MAC", "REMOTE", "NAMESPACE"],
            items
                .iter()
                .map(|e| {
                    let remote = e["Flags"].as_u64().unwrap_or(0) & 1 == 1;
                    vec![
                        str_at(e, "ID"),
                        str_at(e, "Name"),
                        joined(e, "IpConfigurations", Some("IpAddress")),
                        str_at(e, "MacAddress"),
                        if remote { "yes".into() } else { "no".into() },
                        str_at(e, "HostComputeNamespace"),
                    ]
                })
                .collect(),
        ),
        Kind::Namespace => (
            &["ID", "COMPARTMENT", "ENDPOINTS"],
            items
                .iter()
                .map(|n| {
                    let eps: Vec<String> = n["Resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| str_at(&r["Data"], "ID"))
                        .collect();
                    vec![str_at(n, "ID"), str_at(n, "NamespaceId"), eps.join(",")]
                })
                .collect(),
        ),
        Kind::LoadBalancer => (
            &["ID", "FRONTEND", "PORTS", "BACKENDS", "FLAGS"],
            items
                .iter()
                .map(|lb| {
                    let vips = joined(lb, "FrontendVIPs", None);
                    let ports: Vec<String> = lb["PortMappings"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| {
                            format!(
                                "{}/{}->{}",
                                proto(&p["Protocol"]),
                                str_at(p, "ExternalPort"),
                                str_at(p, "InternalPort")
                            )
                        })
                        .collect();
                    let backends = lb["HostComputeEndpoints"].as_array().map_or(0, Vec::len);
                    vec![
                        str_at(lb, "ID"),
                        if vips.is_empty() {
                            "(node addresses)".into()
                        } else {
                            vips
                        },
                        ports.join(","),
                        backends.to_string(),
                        str_at(lb, "Flags"),
                    ]
                })
                .collect(),
        ),
        Kind::Route => (
            &["ID", "ENDPOINTS", "DESTINATIONS"],
            items
                .iter()
                .map(|r| {
                    vec![
                        str_at(r, "ID"),
                        joined(r, "HostComputeEndpoints", None),
                        joined(r, "Setting", Some("DestinationPrefix")),
                    ]
                })
                .collect(),
        ),
    };
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Padded by hand: a format width stops at 65,535 and a cell (a network's subnets, say) can
    // be longer.
    let line = |cells: Vec<String>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count());
            text.extend(std::iter::repeat_n(' ', pad));
        }
        outln!("{}", text.trim_end())
    };
    line(header.iter().map(|h| h.to_string()).collect())?;
    for row in rows {
        line(row)?;
    }
    Ok(())
}

fn proto(v: &Value) -> String {
    match v.as_u64() {
        Some(6) => "TCP".into(),
        Some(17) => "UDP".into(),
        Some(n) => n.to_string(),
        None => "?".into(),
    }
}
