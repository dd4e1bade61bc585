//! `GET /linux/metrics`: what `winnet doctor` finds on this node from hnsd's own knowledge —
//! its HNS objects against its compiled switch (Kubernetes is kube-proxy's to compare, and it
//! exports the same gauge) — as Prometheus gauges, one per problem kind, zero included, so
//! that a cluster can alert on them.

use std::fmt::Write as _;

use doctor::snapshot::{HnsView, ProfileFacts};
use doctor::{NodeSnapshot, ProblemKind};

use crate::Service;

/// The route.
pub const PATH: &str = "/linux/metrics";

/// The gauge's name (the same in `winnet proxy`'s metrics).
pub const GAUGE: &str = "winnet_doctor_problems";

/// The doctor's counts for `svc`'s node, in the text exposition format.
pub fn render(svc: &Service) -> String {
    let hns = svc.read(|s| HnsView {
        networks: s.networks().cloned().collect(),
        endpoints: s.endpoints().cloned().collect(),
        namespaces: s.namespaces().cloned().collect(),
        load_balancers: s.load_balancers().cloned().collect(),
        routes: s.routes().cloned().collect(),
    });
    // Without a data plane there is no switch; the other checks still count.
    let switch = svc.switch_dump().ok();
    let profile = svc.profile();
    let snap = NodeSnapshot {
        node: switch.as_ref().map(|s| s.node.clone()).unwrap_or_default(),
        profile: ProfileFacts {
            name: profile.as_str().to_string(),
            backend_limit: profile.max_lb_backends(),
            no_icmp_through_nat: profile
                .imposes(crate::profile::Limitation::IcmpThroughOutboundNat),
            acl_default_deny: profile.imposes(crate::profile::Limitation::AclDefaultDeny),
        },
        hns,
        switch,
        ..NodeSnapshot::default()
    };
    text(&doctor::counts(&doctor::diagnose(&snap)))
}

/// `counts` as one gauge with a `kind` label.
pub fn text(counts: &[(ProblemKind, usize)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {GAUGE} Problems winnet doctor finds comparing HNS with the switch, by kind."
    );
    let _ = writeln!(out, "# TYPE {GAUGE} gauge");
    for (kind, n) in counts {
        let _ = writeln!(out, "{GAUGE}{{kind=\"{kind}\"}} {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::{Profile, Service};

    #[test]
    fn every_kind_is_a_gauge_and_a_node_without_objects_has_no_problem() {
        let svc =
            Service::start(Store::in_memory().expect("store"), Profile::Ws2022).expect("service");
        let text = render(&svc);
        assert!(
            text.contains("# TYPE winnet_doctor_problems gauge"),
            "{text}"
        );
        for kind in ProblemKind::ALL {
            let line = format!("winnet_doctor_problems{{kind=\"{kind}\"}} 0");
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
