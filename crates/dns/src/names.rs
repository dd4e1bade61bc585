//! Names as the cluster DNS builds and reads them: label checks for names taken from manifests,
//! the dashed-IP endpoint label, and the address inside a reverse (`in-addr.arpa`/`ip6.arpa`)
//! name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

/// Checks an RFC 1123 label as Kubernetes names are: 1-63 of `a-z0-9-`, no `-` at either end.
pub fn label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS label (1-63 letters, digits or '-', not starting or ending with '-')"
        ))
    }
}

/// `label.parent`, failing on an invalid label or a name past 255 octets.
pub fn child(label: &str, parent: &Name) -> Result<Name, String> {
    self::label(label)?;
    Name::from_ascii(label)
        .and_then(|l| l.append_domain(parent))
        .map_err(|e| format!("{label}.{parent}: {e}"))
}

/// `<svc>.<ns>.svc.<zone>`.
pub fn service_fqdn(svc: &str, ns: &str, zone: &Name) -> Result<Name, String> {
    let svc_zone = child("svc", zone)?;
    child(svc, &child(ns, &svc_zone)?)
}

/// A name from a manifest (e.g. `externalName`), made absolute; an error says what is wrong.
pub fn absolute(s: &str) -> Result<Name, String> {
    let trimmed = s.trim_end_matches('.');
    if trimmed.is_empty() {
        return Err(format!("{s:?} is not a domain name"));
    }
    for l in trimmed.split('.') {
        // Underscores appear in real names (e.g. _service labels); everything else must be a label.
        if l.is_empty()
            || l.len() > 63
            || !l
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("{s:?} is not a domain name (label {l:?})"));
        }
    }
    let mut name = Name::from_ascii(trimmed).map_err(|e| format!("{s:?}: {e}"))?;
    name.set_fqdn(true);
    Ok(name)
}

/// The endpoint label CoreDNS derives from an IP: `10-1-2-3`; IPv6 `:` -> `-`, a trailing `-`
/// gets a `0`.
pub fn dashed_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => {
            let dashed = v6.to_string().replace(':', "-");
            if dashed.ends_with('-') {
                dashed + "0"
            } else {
                dashed
            }
        }
    }
}

/// The IP of a pod-record label: `1-2-3-4` (exactly three dashes, none doubled) is IPv4,
/// anything else is read as IPv6 with `-` for `:`.
pub fn pod_ip(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label
            .replace('-', ".")
            .parse::<Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    } else {
        label
            .replace('-', ":")
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}

/// Which reverse tree a name is under, from its labels (lower-case, leaf first).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReverseZone {
    V4,
    V6,
}

/// The reverse tree `labels` (lower-case, leaf first) end in, if any.
pub fn reverse_zone(labels: &[&[u8]]) -> Option<ReverseZone> {
    match labels {
        [.., b"in-addr", b"arpa"] => Some(ReverseZone::V4),
        [.., b"ip6", b"arpa"] => Some(ReverseZone::V6),
        _ => None,
    }
}

/// The address a full reverse name stands for (`4.3.2.1.in-addr.arpa` -> 1.2.3.4; 32 nibbles
/// under `ip6.arpa`); `None` for a partial or malformed one.
pub fn reverse_ip(labels: &[&[u8]]) -> Option<IpAddr> {
    match reverse_zone(labels)? {
        ReverseZone::V4 => {
            let octets = &labels[..labels.len() - 2];
            if octets.len() != 4 {
                return None;
            }
            let mut ip = [0u8; 4];
            for (i, l) in octets.iter().enumerate() {
                let s = std::str::from_utf8(l).ok()?;
                // "01" is not how a reverse name writes 1.
                if s.is_empty() || (s.len() > 1 && s.starts_with('0')) {
                    return None;
                }
                ip[3 - i] = s.parse().ok()?;
            }
            Some(IpAddr::V4(Ipv4Addr::from(ip)))
        }
        ReverseZone::V6 => {
            let nibbles = &labels[..labels.len() - 2];
            if nibbles.len() != 32 {
                return None;
            }
            let mut bits: u128 = 0;
            for (i, l) in nibbles.iter().enumerate() {
                let [c] = l else { return None };
                let v = (*c as char).to_digit(16)?;
                bits |= u128::from(v) << (4 * i);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bits)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &str) -> Vec<&[u8]> {
        s.split('.').map(str::as_bytes).collect()
    }

    #[test]
    fn reverse_names_read_back_to_their_address() {
        assert_eq!(
            reverse_ip(&labels("10.0.96.10.in-addr.arpa")),
            Some("10.96.0.10".parse().unwrap())
        );
        let v6: IpAddr = "fd00::a".parse().unwrap();
        let name = "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
        assert_eq!(reverse_ip(&labels(name)), Some(v6));
        assert_eq!(reverse_ip(&labels("0.96.10.in-addr.arpa")), None);
        assert_eq!(reverse_ip(&labels("010.0.96.10.in-addr.arpa")), None);
    }

    #[test]
    fn dashed_ips_follow_coredns() {
        assert_eq!(dashed_ip("10.1.2.3".parse().unwrap()), "10-1-2-3");
        assert_eq!(dashed_ip("fd00::".parse().unwrap()), "fd00--0");
        assert_eq!(pod_ip("10-1-2-3"), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(pod_ip("fd00--1"), Some("fd00::1".parse().unwrap()));
        assert_eq!(pod_ip("web"), None);
    }
}
