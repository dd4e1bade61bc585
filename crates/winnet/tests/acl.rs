//! HNS ACLs on a real node: hnsd with its data plane in a namespace, pods whose vNICs are TAPs,
//! ACLs applied as an agent applies them (`hns_client::Client::set_endpoint_acls`), and real
//! TCP between the pods. A Block drops the connection it names and the trace names the ACL
//! that decided; the reply of a connection the ACLs allow passes although a Block In names its
//! source (the rules are stateful); `winnet vfpctrl` lists the ACL layer as Windows prints it;
//! under ws2025 a lone Block makes the endpoint default-deny, under ws2022 it blocks only what
//! it names. Run as root (CI is).

mod lab;

use std::process::Output;

use hcn::Guid;
use hcn::policy::AclPolicySetting;
use lab::cluster::{Cluster, Mode, decode};
use serde_json::{Value, json};

const PA: &str = "10.244.1.10";
const PB: &str = "10.244.1.11";

fn winnet(c: &Cluster, verb: &str, args: &[&str]) -> Output {
    let h = &c.lab.hnsds[0];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_winnet"));
    cmd.arg(verb);
    if verb == "trace" {
        cmd.args(["--node", h.node().expect("a node's hnsd")]);
    }
    cmd.arg("--hns-socket")
        .arg(h.socket())
        .args(args)
        .env_remove("HNS_SOCKET")
        .output()
        .expect("run winnet")
}

fn stdout_ok(c: &Cluster, verb: &str, args: &[&str]) -> String {
    let out = winnet(c, verb, args);
    assert!(
        out.status.success(),
        "winnet {verb} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.lab.logs()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn acl(doc: Value) -> AclPolicySetting {
    decode::<hcn::modify::PolicyRequest<hcn::EndpointPolicy>>(
        json!({"Policies": [{"Type": "ACL", "Settings": doc}]}),
    )
    .policies
    .into_iter()
    .find_map(|p| match p {
        hcn::EndpointPolicy::Acl(a) => Some(a),
        _ => None,
    })
    .expect("an ACL")
}

fn set_acls(c: &Cluster, ep: Guid, acls: Vec<AclPolicySetting>) {
    c.rt.block_on(c.client(0).set_endpoint_acls(ep, acls))
        .unwrap_or_else(|e| panic!("apply the ACLs: {e}"));
}

/// The ACL layer's step of a trace on port `port`.
fn acl_step<'a>(answer: &'a Value, port: &str) -> &'a Value {
    answer["Trace"]["Steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["Layer"] == "acl" && s["PortName"] == port)
        .unwrap_or_else(|| panic!("no acl step on {port}: {answer:#}"))
}

fn connects(c: &Cluster, from: &str, to: &str, port: u16) -> bool {
    c.lab.connect(from, c.addr(to, port)).is_ok()
}

#[test]
fn a_block_acl_drops_tcp_names_itself_in_the_trace_and_lets_replies_of_allowed_connections_pass() {
    let mut c = Cluster::new("acl", 1, Mode::L2Bridge, "ws2022");
    let (a, _) = c.pod_with_id(0, "pa", 10);
    let (b, b_ep) = c.pod_with_id(0, "pb", 11);
    c.lab.tcp_echo(&b, 8080);
    c.lab.tcp_echo(&a, 9090);
    assert!(
        connects(&c, &a, PB, 8080),
        "before any ACL\n{}",
        c.lab.logs()
    );

    // What NPM or felix would send for "nothing from pa into pb over TCP".
    let deny = acl(
        json!({"Id": "deny-pa-into-pb", "Protocols": "6", "Action": "Block",
        "Direction": "In", "RemoteAddresses": PA, "RuleType": "Switch", "Priority": 200}),
    );
    set_acls(&c, b_ep, vec![deny]);
    assert!(!connects(&c, &a, PB, 8080), "pa -> pb:8080 is blocked");

    // The trace says which ACL decided, where, and how.
    let answer: Value = serde_json::from_str(&stdout_ok(
        &c,
        "trace",
        &["--from", "pa", "--to", &format!("{PB}:8080"), "--json"],
    ))
    .expect("trace --json");
    let step = acl_step(&answer, "pb_cbr0");
    assert_eq!(step["Direction"], "in", "{step:#}");
    assert_eq!(step["Origin"]["Kind"], "Endpoint/ACL", "{step:#}");
    assert_eq!(step["Origin"]["Name"], "deny-pa-into-pb", "{step:#}");
    let source = step["Origin"]["Source"].as_str().unwrap_or_default();
    for want in ["\"deny-pa-into-pb\"", "pb_cbr0", "Block In priority 200"] {
        assert!(source.contains(want), "no {want} in {source}");
    }
    assert_eq!(step["Rule"]["Priority"], 200);
    assert_eq!(step["Rule"]["Group"], "ACL_ENDPOINT_GROUP_IPV4_IN");
    assert_eq!(
        answer["Trace"]["Disposition"]["Verdict"], "Drop",
        "{answer:#}"
    );

    // pb's own connection to pa: its replies come in from pa, which the Block names, and pass.
    let mut s = c
        .lab
        .connect(&b, c.addr(PA, 9090))
        .unwrap_or_else(|e| panic!("pb -> pa:9090 ({e})\n{}", c.lab.logs()));
    use std::io::{Read, Write};
    s.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .expect("timeout");
    s.write_all(b"stateful").expect("send");
    let mut buf = [0u8; 8];
    s.read_exact(&mut buf)
        .expect("the reply of an allowed connection");
    assert_eq!(&buf, b"stateful");

    // vfpctrl's view of the layer, in Windows' words.
    let listed = stdout_ok(
        &c,
        "vfpctrl",
        &["--port", "pb_cbr0", "--list-rule", "--layer", "acl"],
    );
    for want in [
        "LAYER : ACL_ENDPOINT_LAYER",
        "GROUP : ACL_ENDPOINT_GROUP_IPV4_IN",
        "Match type : Priority-based match",
        "Friendly name : deny-pa-into-pb",
        "Priority : 200",
        &format!("Source IP : {PA}/32"),
    ] {
        assert!(listed.contains(want), "no \"{want}\" in:\n{listed}");
    }

    // The ACLs gone, pa reaches pb again.
    set_acls(&c, b_ep, vec![]);
    assert!(connects(&c, &a, PB, 8080), "after the ACLs are removed");
}

/// A lone Block on a port nobody uses: ws2022 lets the rest through, ws2025 (after its April
/// 2026 updates) blocks everything, and the trace says that default-deny decided.
#[test]
fn a_lone_block_blocks_everything_on_ws2025_only() {
    for (profile, blocks_all) in [("ws2022", false), ("ws2025", true)] {
        let tag = format!("lb{}", &profile[4..]);
        let mut c = Cluster::new(&tag, 1, Mode::L2Bridge, profile);
        let (a, _) = c.pod_with_id(0, "pa", 10);
        let (b, b_ep) = c.pod_with_id(0, "pb", 11);
        c.lab.tcp_echo(&b, 8080);
        let lone = acl(
            json!({"Id": "block-9999", "Protocols": "6", "Action": "Block",
            "Direction": "In", "LocalPorts": "9999", "Priority": 100}),
        );
        set_acls(&c, b_ep, vec![lone]);
        assert_eq!(
            connects(&c, &a, PB, 8080),
            !blocks_all,
            "{profile}: pa -> pb:8080 beside a lone Block of 9999"
        );
        let text = stdout_ok(
            &c,
            "trace",
            &["--from", "pa", "--to", &format!("{PB}:8080")],
        );
        assert_eq!(
            text.contains("default-deny"),
            blocks_all,
            "{profile}:\n{text}"
        );
    }
}

/// Applying the same ACLs again: on ws2022 a live TCP connection through the endpoint is reset
/// (calico#10199), under `unrestricted` it carries on (its flow is re-evaluated, not flushed).
#[test]
fn applying_the_same_acls_again_resets_live_connections_on_ws2022_only() {
    use std::io::{Read, Write};
    for (profile, resets) in [("ws2022", true), ("unrestricted", false)] {
        let tag = format!("rs{}", &profile[..2]);
        let mut c = Cluster::new(&tag, 1, Mode::L2Bridge, profile);
        let (a, _) = c.pod_with_id(0, "pa", 10);
        let (b, b_ep) = c.pod_with_id(0, "pb", 11);
        c.lab.tcp_echo(&b, 8080);
        let allow = || {
            acl(
                json!({"Id": "allow-8080", "Protocols": "6", "Action": "Allow", "Direction": "In",
                "LocalPorts": "8080", "Priority": 100}),
            )
        };
        set_acls(&c, b_ep, vec![allow()]);
        let mut s = c
            .lab
            .connect(&a, c.addr(PB, 8080))
            .unwrap_or_else(|e| panic!("{profile}: pa -> pb:8080 ({e})\n{}", c.lab.logs()));
        s.set_read_timeout(Some(std::time::Duration::from_secs(3)))
            .expect("timeout");
        let echo = |s: &mut std::net::TcpStream| -> std::io::Result<()> {
            s.write_all(b"ping")?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf)
        };
        echo(&mut s).unwrap_or_else(|e| panic!("{profile}: the first echo ({e})"));
        set_acls(&c, b_ep, vec![allow()]);
        let after = echo(&mut s);
        if resets {
            let e = after.expect_err("the connection was reset");
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset,
                "{profile}: {e}"
            );
        } else {
            after.unwrap_or_else(|e| panic!("{profile}: kept ({e})"));
        }
        // A new connection is allowed either way.
        assert!(connects(&c, &a, PB, 8080), "{profile}: a new connection");
    }
}
