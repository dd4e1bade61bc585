//! The flow matrix as people read it: a header with what every row's expectation depends on
//! (the profile and its HNS, the mode, kube-proxy's DSR, dual-stack, the backend limit, the
//! profile's documented limitations), then one row a flow. By default it fits a terminal of
//! [`WIDTH`] columns: what happened goes on its own line under its flow, and a cell too long
//! for its column wraps inside it. `--markdown` keeps one table row a flow with every cell
//! whole; `--json` is the outcomes themselves.

use hns::{Limitation, Profile};

use super::check::Outcome;
use super::flows::Proto;
use super::topology::{Mode, Topology};

/// The widest line the default form prints.
pub const WIDTH: usize = 120;

/// Between two columns.
const GAP: &str = "  ";

/// Before what happened to a flow, on the line under it.
const HAPPENED: &str = "    happened: ";

/// The facts every row's expectation depends on, a line each (at most [`WIDTH`] wide).
pub fn header(t: &Topology, simulated: bool) -> Vec<String> {
    let p = t.profile;
    let hns = p.version();
    let hns = format!("HNS {}.{}", hns.major, hns.minor);
    let mode = match t.mode {
        Mode::L2bridge => "l2bridge mode (flannel host-gw)",
        Mode::Overlay => "overlay mode (flannel vxlan, VNI 4096)",
    };
    let run = if simulated {
        "simulated: Linux rows skipped"
    } else {
        "real namespaces, devices and traffic"
    };
    let dsr = match (t.dsr, p.features().dsr) {
        (true, true) => {
            format!("on, and {hns} has DSR: a ClusterIP's backend must see the client pod")
        }
        (true, false) => {
            format!("on, but {hns} has no DSR: ClusterIP rows do not check the source")
        }
        (false, _) => "off: ClusterIP rows do not check the source".to_string(),
    };
    let family = match (t.dual_stack, t.mode) {
        (false, _) => "IPv4 only".to_string(),
        (true, Mode::Overlay) if p.imposes(Limitation::Ipv6OnOverlay) => {
            "dual-stack, but no IPv6 on overlay (Ipv6OnOverlay)".to_string()
        }
        (true, _) => "dual-stack IPv4 + IPv6".to_string(),
    };
    let backends = p
        .max_lb_backends()
        .map_or("no backend limit".to_string(), |n| {
            format!("at most {n} backends a load balancer")
        });
    let affinity = if p.features().session_affinity {
        "session affinity"
    } else {
        "no session affinity"
    };
    let snat = t
        .dynamic_port_range
        .map_or("SNAT ports Windows' default".to_string(), |r| {
            format!("SNAT ports {r}")
        });
    let limitations: Vec<&str> = Limitation::ALL
        .iter()
        .filter(|l| p.imposes(**l))
        .map(|l| l.as_str())
        .collect();
    let limitations = if limitations.is_empty() {
        format!("{p} lifts every documented limitation")
    } else {
        format!(
            "documented limitations of {p} (a row they touch is expected to fail): {}",
            limitations.join(", ")
        )
    };
    let mut lines = vec![
        format!("profile {p} ({}), {mode}, {run}", describe(p, &hns)),
        format!("kube-proxy winkernel --enable-dsr {dsr}"),
        format!("{family}; {backends}; {affinity}; {snat}"),
        limitations,
    ];
    lines.extend(policy_agents(t, &hns));
    lines
        .iter()
        .flat_map(|l| indented(l, WIDTH, "", "  "))
        .collect()
}

/// Who enforces the topology's NetworkPolicies, when it has any: the style's agent on the
/// Windows nodes (or why it cannot run there), nftables on the Linux nodes.
fn policy_agents(t: &Topology, hns: &str) -> Option<String> {
    if t.network_policies.is_empty() {
        return None;
    }
    let style = t.network_policy_style;
    let windows = if style == policy::Style::Npm && !t.profile.features().set_policy {
        format!(
            "not enforced on the Windows nodes (--style npm needs SetPolicy, which {hns} lacks: NoSetPolicy)"
        )
    } else {
        format!(
            "winnet policy --style {} on the Windows nodes",
            style.name()
        )
    };
    Some(format!(
        "{} NetworkPolicies: {windows}, nftables on the Linux node",
        t.network_policies.len()
    ))
}

/// What `p` reproduces: the build and its HNS.
fn describe(p: Profile, hns: &str) -> String {
    match p {
        Profile::Unrestricted => format!("every limitation lifted, {hns}"),
        _ => format!(
            "Windows Server {}, {hns}",
            p.as_str().trim_start_matches("ws")
        ),
    }
}

/// The matrix's cells of a flow: flow, from, to, expected, happened, verdict.
type Row = [String; 6];

/// The matrix under its header: the default form (fits [`WIDTH`]) or Markdown.
pub fn render(outcomes: &[Outcome], header: &[String], markdown: bool) -> String {
    let rows: Vec<Row> = outcomes.iter().map(row).collect();
    let table = if markdown {
        self::markdown(&rows)
    } else {
        text(&rows)
    };
    if header.is_empty() {
        return table;
    }
    // In Markdown, each header line a line of its own (two spaces: a line break).
    let sep = if markdown { "  \n" } else { "\n" };
    format!("{}\n\n{table}", header.join(sep))
}

fn markdown(rows: &[Row]) -> String {
    let head = ["flow", "from", "to", "expected", "happened", "verdict"];
    let mut out = vec![
        format!("| {} |", head.join(" | ")),
        "|---|---|---|---|---|---|".to_string(),
    ];
    out.extend(rows.iter().map(|r| format!("| {} |", r.join(" | "))));
    out.join("\n")
}

/// Flow, from, to, expected and verdict as columns, each flow's "happened" on the line under
/// it; cells wrap inside their columns so that no line is wider than [`WIDTH`].
fn text(rows: &[Row]) -> String {
    const COLUMNS: [usize; 5] = [0, 1, 2, 3, 5];
    let head = ["flow", "from", "to", "expected", "verdict"];
    // The flow's name gets what the others leave: a destination or an expectation wider than
    // these wraps.
    let most = [usize::MAX, usize::MAX, 28, 24, usize::MAX];
    let natural: Vec<usize> = COLUMNS
        .iter()
        .zip(head)
        .zip(most)
        .map(|((&c, h), most)| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
                .min(most)
        })
        .collect();
    let widths = fit(&natural, WIDTH - GAP.len() * (COLUMNS.len() - 1));
    let line = |cells: &[&str]| -> Vec<String> {
        let wrapped: Vec<Vec<String>> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| wrap(c, *w))
            .collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(0);
        (0..height)
            .map(|k| {
                let parts: Vec<String> = wrapped
                    .iter()
                    .zip(&widths)
                    .map(|(cell, w)| format!("{:<w$}", cell.get(k).map_or("", String::as_str)))
                    .collect();
                parts.join(GAP).trim_end().to_string()
            })
            .collect()
    };
    let mut out = line(&head);
    for r in rows {
        out.extend(line(&COLUMNS.map(|c| r[c].as_str())));
        out.extend(indented(
            &r[4],
            WIDTH,
            HAPPENED,
            &" ".repeat(HAPPENED.len()),
        ));
    }
    out.join("\n")
}

/// `text` in lines of at most `width`: the first after `first`, the others after `rest`.
fn indented(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let lead = first.chars().count().max(rest.chars().count());
    wrap(text, width.saturating_sub(lead))
        .into_iter()
        .enumerate()
        .map(|(k, l)| format!("{}{l}", if k == 0 { first } else { rest }))
        .collect()
}

/// Widths for columns of `natural` widths within `budget`: a column that fits its share
/// keeps its width, the others share what is left equally.
fn fit(natural: &[usize], budget: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..natural.len()).collect();
    order.sort_by_key(|&i| natural[i]);
    let mut out = vec![0; natural.len()];
    let mut left = budget;
    for (k, &i) in order.iter().enumerate() {
        let share = left / (natural.len() - k);
        out[i] = natural[i].min(share).max(1);
        left = left.saturating_sub(out[i]);
    }
    out
}

/// `text` in lines of at most `width` characters, broken between words; a word wider than
/// the line breaks after its last `.`, `:`, `,`, `/` or `-` that fits, else at the width.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ') {
        let mut word = word.to_string();
        loop {
            let (cur_len, word_len) = (cur.chars().count(), word.chars().count());
            let need = if cur.is_empty() {
                word_len
            } else {
                cur_len + 1 + word_len
            };
            if need <= width {
                if !cur.is_empty() {
                    cur.push(' ');
                }
                cur.push_str(&word);
                break;
            }
            if !cur.is_empty() {
                lines.push(std::mem::take(&mut cur));
                continue;
            }
            // The word alone is wider than a line.
            let head: String = word.chars().take(width).collect();
            let cut = head
                .char_indices()
                .filter(|(_, c)| matches!(c, '.' | ':' | ',' | '/' | '-'))
                .map(|(i, c)| i + c.len_utf8())
                .next_back()
                .unwrap_or(head.len());
            lines.push(word[..cut].to_string());
            word = word[cut..].to_string();
        }
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

fn row(o: &Outcome) -> Row {
    let f = &o.flow;
    let host = match (&f.to_name, f.to) {
        (Some(name), _) => name.clone(),
        (None, std::net::IpAddr::V6(v6)) if f.proto != Proto::Icmp => format!("[{v6}]"),
        (None, ip) => ip.to_string(),
    };
    let to = match f.proto {
        Proto::Icmp => format!("{host} icmp"),
        Proto::Tcp => format!("{host}:{} tcp", f.port),
        Proto::Udp => format!("{host}:{} udp", f.port),
    };
    let expected = match (f.expect_pass, &f.limitation, f.expect_status) {
        (true, _, Some(status)) => format!("HTTP {status}"),
        // Carried where Kubernetes would not (a construct the Windows agent did not apply).
        (true, Some(l), None) => format!("works ({l})"),
        (true, None, None) => "works".to_string(),
        (false, Some(l), _) => format!("fails ({l})"),
        (false, None, _) => "fails".to_string(),
    };
    let happened = match (&o.skipped, o.passed) {
        (Some(why), _) => why.clone(),
        (None, true) => format!("works: {}", o.detail),
        (None, false) => format!("fails: {}", o.detail),
    };
    let verdict = match (&o.skipped, o.matches) {
        (Some(_), _) => "skipped",
        (None, true) => "ok",
        (None, false) => "MISMATCH",
    }
    .to_string();
    [
        f.name.clone(),
        f.from.clone(),
        to,
        expected,
        happened,
        verdict,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_between_words_and_inside_long_names() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(
            wrap("web-2.peers.default.svc.cluster.local:8080 tcp", 20),
            ["web-2.peers.default.", "svc.cluster.local:", "8080 tcp"]
        );
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("", 5), [""]);
    }

    #[test]
    fn columns_that_fit_keep_their_width_the_rest_share() {
        assert_eq!(fit(&[8, 8, 77, 46, 31], 112), [8, 8, 33, 32, 31]);
        assert_eq!(fit(&[4, 5], 20), [4, 5]);
    }

    proptest::proptest! {
        #[test]
        fn wrapped_lines_fit_and_keep_every_character(
            text in "[a-z.: -]{0,200}",
            width in 1usize..60,
        ) {
            let lines = wrap(&text, width);
            for l in &lines {
                proptest::prop_assert!(l.chars().count() <= width, "{l:?} wider than {width}");
            }
            let kept: String = lines.concat().chars().filter(|c| *c != ' ').collect();
            let given: String = text.chars().filter(|c| *c != ' ').collect();
            proptest::prop_assert_eq!(kept, given);
        }
    }
}
