//! The name an application asks for, as its resolver sees it: labels, and whether it was
//! written with a trailing dot. Both rule sets decide on these two facts alone (how many dots,
//! rooted or not), so they are kept apart from the wire form.

use std::fmt;

use hickory_proto::rr::Name;

/// Longest label (RFC 1035 §2.3.4).
const MAX_LABEL: usize = 63;
/// Longest name on the wire, length bytes and root included (RFC 1035 §3.1).
const MAX_WIRE: usize = 255;

/// A name an application resolves: `web`, `web.default`, `kubernetes.default.svc.cluster.local.`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskedName {
    labels: Vec<String>,
    rooted: bool,
}

/// Why a text is not a name a resolver can ask for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("the name is empty; give a host name such as web or web.default.svc.cluster.local")]
    Empty,
    #[error("the name {0:?} is the root alone; give a host name such as web")]
    Root(String),
    #[error(
        "the name {name:?} has an empty label (two dots in a row, or a leading dot); remove the extra dot"
    )]
    EmptyLabel { name: String },
    #[error("label {label:?} of {name:?} is {len} bytes; a DNS label has at most 63")]
    LongLabel {
        name: String,
        label: String,
        len: usize,
    },
    #[error("the name {name:?} is {len} bytes on the wire; a DNS name has at most 255")]
    LongName { name: String, len: usize },
    #[error(
        "the name {name:?} holds {ch:?}; use letters, digits, '-', '_' and dots (no spaces, escapes or control characters)"
    )]
    BadChar { name: String, ch: char },
}

impl AskedName {
    /// Reads the name as an application writes it.
    pub fn parse(text: &str) -> Result<AskedName, NameError> {
        if text.is_empty() {
            return Err(NameError::Empty);
        }
        if text == "." {
            return Err(NameError::Root(text.into()));
        }
        if let Some(ch) = text.chars().find(|c| !c.is_ascii_graphic() || *c == '\\') {
            return Err(NameError::BadChar {
                name: text.into(),
                ch,
            });
        }
        let rooted = text.ends_with('.');
        let body = text.strip_suffix('.').unwrap_or(text);
        let labels: Vec<String> = body.split('.').map(str::to_string).collect();
        Self::checked(labels, rooted, text)
    }

    /// The name a query carries on the wire. A query cannot say whether the application wrote
    /// a trailing dot, so the name counts as written without one.
    pub fn from_wire(name: &Name) -> Result<AskedName, NameError> {
        let text = name.to_ascii();
        let labels: Vec<String> = name
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        if labels.is_empty() {
            return Err(NameError::Root(text));
        }
        Self::checked(labels, false, &text)
    }

    fn checked(labels: Vec<String>, rooted: bool, text: &str) -> Result<AskedName, NameError> {
        if labels.iter().any(String::is_empty) {
            return Err(NameError::EmptyLabel { name: text.into() });
        }
        if let Some(l) = labels.iter().find(|l| l.len() > MAX_LABEL) {
            return Err(NameError::LongLabel {
                name: text.into(),
                label: l.clone(),
                len: l.len(),
            });
        }
        let name = AskedName { labels, rooted };
        let len = name.wire_len();
        if len > MAX_WIRE {
            return Err(NameError::LongName {
                name: text.into(),
                len,
            });
        }
        Ok(name)
    }

    /// The labels, leftmost first.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// True when written with a trailing dot (fully qualified).
    pub fn rooted(&self) -> bool {
        self.rooted
    }

    /// The dots inside the name, the trailing one not counted: what `ndots` is compared with.
    pub fn dots(&self) -> usize {
        self.labels.len() - 1
    }

    /// True for a single-label name without a trailing dot (`web`).
    pub fn is_single_label(&self) -> bool {
        self.labels.len() == 1 && !self.rooted
    }

    /// This name with `suffix` appended: `web` + `default.svc.cluster.local`. None when the
    /// result would be too long for DNS.
    pub fn with_suffix(&self, suffix: &AskedName) -> Option<AskedName> {
        let mut labels = self.labels.clone();
        labels.extend(suffix.labels.iter().cloned());
        let name = AskedName {
            labels,
            rooted: true,
        };
        (name.wire_len() <= MAX_WIRE).then_some(name)
    }

    /// The name as it is, fully qualified.
    pub fn qualified(&self) -> AskedName {
        AskedName {
            labels: self.labels.clone(),
            rooted: true,
        }
    }

    /// The fully qualified wire name.
    pub fn to_wire(&self) -> Name {
        let mut name = Name::from_labels(self.labels.iter().map(|l| l.as_bytes()))
            .unwrap_or_else(|_| Name::root());
        name.set_fqdn(true);
        name
    }

    /// The name as the answer shows it, always with the trailing dot.
    pub fn fqdn(&self) -> String {
        format!("{}.", self.labels.join("."))
    }

    fn wire_len(&self) -> usize {
        self.labels.iter().map(|l| l.len() + 1).sum::<usize>() + 1
    }
}

impl fmt::Display for AskedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.labels.join("."))?;
        if self.rooted {
            f.write_str(".")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dots_and_roots_are_counted_as_resolvers_count_them() {
        let n = AskedName::parse("web").expect("name");
        assert!(n.is_single_label() && n.dots() == 0 && !n.rooted());
        let n = AskedName::parse("web-0.web").expect("name");
        assert!(!n.is_single_label() && n.dots() == 1);
        let n = AskedName::parse("web.").expect("name");
        assert!(!n.is_single_label() && n.rooted() && n.dots() == 0);
        assert_eq!(n.to_string(), "web.");
        let s = AskedName::parse("default.svc.cluster.local").expect("suffix");
        let full = AskedName::parse("web")
            .expect("web")
            .with_suffix(&s)
            .expect("fits");
        assert_eq!(full.fqdn(), "web.default.svc.cluster.local.");
        assert_eq!(full.to_wire().to_ascii(), "web.default.svc.cluster.local.");
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        for (bad, needle) in [
            ("", "empty"),
            (".", "root"),
            ("a..b", "empty label"),
            (".a", "empty label"),
            ("a b", "' '"),
            ("a\\.b", "'\\\\'"),
        ] {
            let e = AskedName::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
        let long = "x".repeat(64);
        assert!(matches!(
            AskedName::parse(&long),
            Err(NameError::LongLabel { len: 64, .. })
        ));
        let huge = vec!["abcdefgh"; 30].join(".");
        assert!(matches!(
            AskedName::parse(&huge),
            Err(NameError::LongName { .. })
        ));
    }

    #[test]
    fn a_suffix_that_would_overflow_the_name_is_refused() {
        let big = AskedName::parse(&vec!["a".repeat(60); 4].join(".")).expect("fits alone");
        let s = AskedName::parse("default.svc.cluster.local").expect("suffix");
        assert_eq!(big.with_suffix(&s), None);
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z0-9_-]{1,63}"
    }

    proptest! {
        #[test]
        fn any_text_parses_or_errs_without_panic(text in "\\PC{0,300}") {
            let _ = AskedName::parse(&text);
        }

        #[test]
        fn valid_names_keep_their_labels_and_go_through_the_wire(
            labels in proptest::collection::vec(label(), 1..5),
            rooted in any::<bool>(),
        ) {
            let text = format!("{}{}", labels.join("."), if rooted { "." } else { "" });
            let n = AskedName::parse(&text).expect("valid");
            prop_assert_eq!(n.labels(), &labels[..]);
            prop_assert_eq!(n.dots(), labels.len() - 1);
            prop_assert_eq!(n.to_string(), text);
            let back = AskedName::from_wire(&n.to_wire()).expect("wire");
            prop_assert_eq!(back.labels(), &labels[..]);
        }
    }
}
