//! An operator's hand edits of the live switch (`winnet vfpctrl`, Windows' `vfpctrl /port P
//! /layer L /group G /list-rule | /remove-rule | /add-rule`): rules listed, removed or added on
//! one port without touching HNS objects. As on Windows, the compiler does not know of them:
//! the next recompile of a removed rule's owner puts its rules back, and hand-added rules stay
//! until their port is made again or hnsd restarts. `winnet doctor` finds both (it compares the
//! switch with what the compiler placed).

use hcn::error::{HResult, HnsError};
use hns_client::rule_spec::{RuleSpec, SpecAction, SpecDirection};
use hns_client::switch::{EditOp, OPERATOR, PortRules, RuleEdit, parse_rule_id, rule_id};
use vfp::rule::{Conditions, PortRange, Rule};
use vfp::{Action, Direction, Origin, Owner, PortId};

use crate::Compiler;
use crate::dump::layer_dump;

fn invalid(message: String) -> HnsError {
    HnsError::new(HResult::E_INVALIDARG, message)
}

fn not_found(message: String) -> HnsError {
    HnsError::new(HResult::ERROR_NOT_FOUND, message)
}

/// Carries out `edit` on the compiler's switch and answers the port's rules after it.
pub fn edit_rules(c: &mut Compiler, edit: &RuleEdit) -> Result<PortRules, HnsError> {
    let port = find_port(c, &edit.port)?;
    let changed = match &edit.op {
        EditOp::List => {
            if let Some(layer) = &edit.layer {
                check_layer(c, port, layer)?;
            }
            None
        }
        EditOp::Remove(id) => Some(remove(c, port, edit, id)?),
        EditOp::Add(spec) => Some(add(c, port, edit, spec)?),
    };
    answer(c, port, edit, changed)
}

/// The port named by its number, its name, or the endpoint it is the vNIC of.
fn find_port(c: &Compiler, name: &str) -> Result<PortId, HnsError> {
    let sw = c.switch();
    if let Ok(n) = name.parse::<PortId>()
        && sw.port(n).is_some()
    {
        return Ok(n);
    }
    if let Some(p) = sw.ports().find(|p| p.name() == name) {
        return Ok(p.id());
    }
    if let Ok(ep) = name.parse::<hcn::Guid>()
        && let Some(p) = c.endpoint_port(ep)
    {
        return Ok(p);
    }
    Err(not_found(format!(
        "port: no switch port is \"{name}\" (by number, name or endpoint ID); list them with `winnet vfpctrl --list-port`"
    )))
}

fn check_layer(c: &Compiler, port: PortId, layer: &str) -> Result<(), HnsError> {
    let p = c
        .switch()
        .port(port)
        .ok_or_else(|| not_found(format!("port: no port {port}")))?;
    if p.layer(layer).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = p.layers().iter().map(|l| l.name()).collect();
    Err(not_found(format!(
        "layer: port {} has no layer \"{layer}\" (it has {})",
        p.name(),
        names.join(", ")
    )))
}

/// The layer and group an edit names, both required to change rules.
fn layer_and_group<'a>(
    c: &Compiler,
    port: PortId,
    edit: &'a RuleEdit,
) -> Result<(&'a str, &'a str), HnsError> {
    let layer = edit.layer.as_deref().ok_or_else(|| {
        invalid("layer: give the layer to change (--layer; --list-rule shows them)".into())
    })?;
    check_layer(c, port, layer)?;
    let group = edit.group.as_deref().ok_or_else(|| {
        invalid("group: give the group to change (--group; --list-rule shows them)".into())
    })?;
    let l = c
        .switch()
        .port(port)
        .and_then(|p| p.layer(layer))
        .ok_or_else(|| not_found(format!("layer: no layer \"{layer}\"")))?;
    if !l.groups().iter().any(|g| g.name() == group) {
        let names: Vec<&str> = l.groups().iter().map(|g| g.name()).collect();
        return Err(not_found(format!(
            "group: layer {layer} has no group \"{group}\" (it has {})",
            names.join(", ")
        )));
    }
    Ok((layer, group))
}

/// An owner's rules in one group, in their owner's order, and the origin they share.
fn owner_rules(
    c: &Compiler,
    port: PortId,
    layer: &str,
    group: &str,
    owner: &Owner,
) -> Option<(Origin, Vec<(u32, Rule)>)> {
    let l = c.switch().port(port)?.layer(layer)?;
    let g = l.groups().iter().find(|g| g.name() == group)?;
    let mut origin = None;
    let mut rules: Vec<(u32, Rule)> = g
        .rules()
        .filter(|r| r.origin.owner == *owner)
        .map(|r| {
            origin.get_or_insert_with(|| (*r.origin).clone());
            (r.index, r.rule.clone())
        })
        .collect();
    rules.sort_by_key(|(i, _)| *i);
    Some((origin?, rules))
}

fn remove(c: &mut Compiler, port: PortId, edit: &RuleEdit, id: &str) -> Result<String, HnsError> {
    let (layer, group) = layer_and_group(c, port, edit)?;
    let (kind, owner_id, index) = parse_rule_id(id).ok_or_else(|| {
        invalid(format!(
            "rule: \"{id}\" is not a rule ID (<owner kind>:<owner id>:<n>, as --list-rule shows)"
        ))
    })?;
    let owner = Owner::new(kind, owner_id);
    let found = owner_rules(c, port, layer, group, &owner)
        .filter(|(_, rules)| rules.iter().any(|(i, _)| *i == index));
    let Some((origin, rules)) = found else {
        return Err(not_found(format!(
            "rule: no rule {id} in port {port} layer {layer} group {group}; --list-rule shows them"
        )));
    };
    // The switch replaces an owner's rules as a whole: the others are put back renumbered,
    // their hit counters started again.
    let keep: Vec<Rule> = rules
        .into_iter()
        .filter(|(i, _)| *i != index)
        .map(|(_, r)| r)
        .collect();
    set_rules(c, port, layer, group, origin, keep)?;
    Ok(id.to_string())
}

fn add(
    c: &mut Compiler,
    port: PortId,
    edit: &RuleEdit,
    spec: &RuleSpec,
) -> Result<String, HnsError> {
    spec.check().map_err(|e| invalid(e.to_string()))?;
    let (layer, group) = layer_and_group(c, port, edit)?;
    let owner = Owner::new(OPERATOR, spec.name.clone());
    if owner_rules(c, port, layer, group, &owner).is_some() {
        return Err(HnsError::new(
            HResult::ERROR_ALREADY_EXISTS,
            format!(
                "name: group {group} of layer {layer} already has a rule named {}; remove it first",
                spec.name
            ),
        ));
    }
    let origin = Origin::new(OPERATOR, spec.name.clone()).with_source("added by hand (vfpctrl)");
    set_rules(c, port, layer, group, origin, vec![rule(spec)])?;
    Ok(rule_id(OPERATOR, &spec.name, 0))
}

fn set_rules(
    c: &mut Compiler,
    port: PortId,
    layer: &str,
    group: &str,
    origin: Origin,
    rules: Vec<Rule>,
) -> Result<(), HnsError> {
    c.switch_mut()
        .layer_mut(port, layer)
        .and_then(|l| l.set_group_rules(group, origin, rules))
        .map_err(|e| not_found(format!("layer: {e}")))
}

/// The switch rule of a spec.
pub fn rule(spec: &RuleSpec) -> Rule {
    let nets = |v: &[ipnet::IpNet]| (!v.is_empty()).then(|| v.to_vec());
    let ranges = |v: &[(u16, u16)]| {
        (!v.is_empty()).then(|| {
            v.iter()
                .map(|(first, last)| PortRange {
                    first: *first,
                    last: *last,
                })
                .collect()
        })
    };
    let conditions = Conditions {
        direction: spec.direction.map(|d| match d {
            SpecDirection::In => Direction::In,
            SpecDirection::Out => Direction::Out,
        }),
        protocols: spec.protocol.map(|p| vec![p]),
        src: nets(&spec.sources),
        dst: nets(&spec.destinations),
        src_ports: ranges(&spec.source_ports),
        dst_ports: ranges(&spec.destination_ports),
        ..Conditions::any()
    };
    let action = match spec.action {
        SpecAction::Allow => Action::Allow,
        SpecAction::Block => Action::Block,
    };
    Rule::new(spec.priority, conditions, action)
}

fn answer(
    c: &Compiler,
    port: PortId,
    edit: &RuleEdit,
    changed: Option<String>,
) -> Result<PortRules, HnsError> {
    let p = c
        .switch()
        .port(port)
        .ok_or_else(|| not_found(format!("port: no port {port}")))?;
    let endpoint = c
        .endpoint_ports
        .iter()
        .find(|(_, id)| **id == port)
        .map(|(ep, _)| ep.to_string());
    let layers = p
        .layers()
        .iter()
        .filter(|l| edit.layer.as_deref().is_none_or(|want| l.name() == want))
        .map(|l| {
            let mut d = layer_dump(l);
            if let Some(g) = &edit.group {
                d.rules.retain(|r| r.group == *g);
            }
            d.rules
                .sort_by(|a, b| (&a.group, a.priority, &a.id).cmp(&(&b.group, b.priority, &b.id)));
            d
        })
        .collect();
    Ok(PortRules {
        port,
        name: p.name().to_string(),
        endpoint,
        layers,
        changed,
    })
}
