//! Profile limitations as rules: a packet the reproduced Windows build does not carry meets an
//! `Unsupported` rule whose origin names the [`Limitation`] and the object it applies to, so
//! the drop reason is typed and a trace says it in words.

use vfp::trace::LayerDecision;
use vfp::{Action, Conditions, Origin, Rule, Trace};

use hns::profile::{Limitation, Profile};

/// The owner kind of every limitation rule.
pub const KIND: &str = "Limitation";

/// The origin of a rule enforcing `l` on the object `kind` `id` (what it applies to, e.g.
/// "Endpoint OutBoundNAT", "LoadBalancer", "Network").
pub fn origin(l: Limitation, profile: Profile, kind: &str, id: &str) -> Origin {
    Origin::new(KIND, format!("{}/{id}", l.as_str()))
        .with_source(format!("{}; {kind} {id}", l.message(profile)))
}

/// A rule refusing what `conditions` match.
pub fn refuse(priority: u16, conditions: Conditions) -> Rule {
    Rule::new(priority, conditions, Action::Unsupported)
}

/// The limitation a rule origin enforces, if it is a limitation rule.
pub fn of_origin(origin: &Origin) -> Option<Limitation> {
    if origin.owner.kind != KIND {
        return None;
    }
    let name = origin.owner.id.split('/').next()?;
    Limitation::from_name(name)
}

/// The limitation that dropped a traced packet, if one did.
pub fn of_trace(trace: &Trace) -> Option<Limitation> {
    trace.steps.iter().find_map(|s| match &s.decision {
        LayerDecision::Rule {
            origin,
            action: Action::Unsupported,
            ..
        } => of_origin(origin),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_names_its_limitation_and_only_limitation_origins_do() {
        for l in Limitation::ALL {
            let o = origin(l, Profile::Ws2022, "Network", "N1");
            assert_eq!(of_origin(&o), Some(l));
            assert!(o.to_string().contains(&l.message(Profile::Ws2022)));
        }
        assert_eq!(
            of_origin(&Origin::new("LoadBalancer", "IcmpThroughOutboundNat/x")),
            None
        );
    }

    #[test]
    fn profiles_impose_what_their_build_lacks() {
        use Limitation::*;
        assert!(Profile::Ws2022.imposes(IcmpThroughOutboundNat));
        assert!(Profile::Ws2022.imposes(NodePortFromNode));
        assert!(!Profile::Ws2022.imposes(ClusterIpFromNode));
        assert!(Profile::Ws2019.imposes(ClusterIpFromNode));
        assert!(
            Limitation::ALL
                .iter()
                .all(|l| !Profile::Unrestricted.imposes(*l))
        );
    }
}
