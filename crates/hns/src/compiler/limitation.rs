//! Profile limitations as rules: a packet the reproduced Windows build does not carry meets an
//! `Unsupported` rule whose origin names the [`Limitation`] and the object it applies to, so
//! the drop reason is typed and a trace says it in words.

use vfp::trace::LayerDecision;
use vfp::{Action, Conditions, Origin, Rule, Trace};

use crate::profile::{Limitation, Profile};

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
