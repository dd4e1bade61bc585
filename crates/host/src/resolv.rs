//! A namespace's DNS: `/etc/netns/NAME/resolv.conf`, which `ip netns exec NAME` (and anything
//! that bind-mounts it the same way) shows the processes of namespace NAME as
//! `/etc/resolv.conf`.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::HostError;

/// Where per-namespace configuration lives, as `ip netns exec` reads it.
pub const ETC_NETNS: &str = "/etc/netns";

const FILE_NAME: &str = "resolv.conf";

/// Writes `/etc/netns/NAME/resolv.conf` for namespace `netns_name`, replacing it atomically.
pub fn write(
    netns_name: &str,
    servers: &[IpAddr],
    search: &[String],
    options: &[String],
) -> Result<(), HostError> {
    write_in(Path::new(ETC_NETNS), netns_name, servers, search, options)
}

/// Removes `/etc/netns/NAME/resolv.conf`, and the directory if nothing else is in it. Ok if
/// they are gone already.
pub fn remove(netns_name: &str) -> Result<(), HostError> {
    remove_in(Path::new(ETC_NETNS), netns_name)
}

/// As [`write`], under `base` instead of `/etc/netns`.
pub fn write_in(
    base: &Path,
    netns_name: &str,
    servers: &[IpAddr],
    search: &[String],
    options: &[String],
) -> Result<(), HostError> {
    let dir = namespace_dir(base, netns_name)?;
    let text = render(servers, search, options)?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| HostError::io(format!("create {}", dir.display()), e))?;
    let path = dir.join(FILE_NAME);
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let written = write_file(&tmp, text.as_bytes()).and_then(|()| std::fs::rename(&tmp, &path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        HostError::io(format!("write {}", path.display()), e)
    })
}

/// As [`remove`], under `base` instead of `/etc/netns`.
pub fn remove_in(base: &Path, netns_name: &str) -> Result<(), HostError> {
    let dir = namespace_dir(base, netns_name)?;
    let path = dir.join(FILE_NAME);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(HostError::io(format!("remove {}", path.display()), e)),
    }
    match std::fs::remove_dir(&dir) {
        Ok(()) => Ok(()),
        // Gone, or holding other files (hosts, nsswitch.conf) that are not ours to remove.
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.kind() == io::ErrorKind::DirectoryNotEmpty =>
        {
            Ok(())
        }
        Err(e) => Err(HostError::io(format!("remove {}", dir.display()), e)),
    }
}

/// The file's text: `nameserver` lines, then `search` and `options` when there are any;
/// an error for a word that cannot be in the file.
pub fn render(
    servers: &[IpAddr],
    search: &[String],
    options: &[String],
) -> Result<String, HostError> {
    for (what, words) in [("search domain", search), ("resolver option", options)] {
        if let Some(bad) = words
            .iter()
            .find(|w| w.is_empty() || w.chars().any(|c| c.is_whitespace() || c == '\0'))
        {
            return Err(HostError::Invalid(format!(
                "{what} {bad:?} cannot go in resolv.conf: it must be one word without \
                 whitespace"
            )));
        }
    }
    let mut text = String::new();
    for s in servers {
        let _ = writeln!(text, "nameserver {s}");
    }
    if !search.is_empty() {
        let _ = writeln!(text, "search {}", search.join(" "));
    }
    if !options.is_empty() {
        let _ = writeln!(text, "options {}", options.join(" "));
    }
    Ok(text)
}

/// `base/NAME`, for a name that is one path component.
fn namespace_dir(base: &Path, netns_name: &str) -> Result<PathBuf, HostError> {
    if netns_name.is_empty()
        || netns_name == "."
        || netns_name == ".."
        || netns_name.contains(['/', '\0'])
    {
        return Err(HostError::Invalid(format!(
            "network namespace name {netns_name:?} cannot name a directory under {}: it must \
             be a file name (not empty, not . or .., no / or NUL)",
            base.display()
        )));
    }
    Ok(base.join(netns_name))
}

/// Writes and flushes a new file readable by everyone (resolvers run as any user).
fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_file_lists_servers_then_search_then_options() {
        let base = tempfile::tempdir().expect("tempdir");
        let servers: Vec<IpAddr> = vec![
            "10.96.0.10".parse().expect("ip"),
            "fd00::a".parse().expect("ip"),
        ];
        write_in(
            base.path(),
            "pod1",
            &servers,
            &strings(&["default.svc.cluster.local", "svc.cluster.local"]),
            &strings(&["ndots:5", "edns0"]),
        )
        .expect("write");
        let text = std::fs::read_to_string(base.path().join("pod1/resolv.conf")).expect("read");
        assert_eq!(
            text,
            "nameserver 10.96.0.10\nnameserver fd00::a\n\
             search default.svc.cluster.local svc.cluster.local\noptions ndots:5 edns0\n"
        );
    }

    #[test]
    fn search_and_options_lines_are_left_out_when_empty_and_rewrites_replace() {
        let base = tempfile::tempdir().expect("tempdir");
        let one: Vec<IpAddr> = vec!["1.1.1.1".parse().expect("ip")];
        write_in(base.path(), "p", &one, &strings(&["a"]), &[]).expect("write");
        write_in(base.path(), "p", &one, &[], &[]).expect("rewrite");
        let dir = base.path().join("p");
        assert_eq!(
            std::fs::read_to_string(dir.join("resolv.conf")).expect("read"),
            "nameserver 1.1.1.1\n"
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["resolv.conf"], "no temporary file left behind");
    }

    #[test]
    fn remove_takes_the_file_and_the_empty_directory_and_is_idempotent() {
        let base = tempfile::tempdir().expect("tempdir");
        let one: Vec<IpAddr> = vec!["1.1.1.1".parse().expect("ip")];
        write_in(base.path(), "p", &one, &[], &[]).expect("write");
        remove_in(base.path(), "p").expect("remove");
        assert!(!base.path().join("p").exists());
        remove_in(base.path(), "p").expect("remove again");
    }

    #[test]
    fn remove_leaves_a_directory_with_other_files() {
        let base = tempfile::tempdir().expect("tempdir");
        let one: Vec<IpAddr> = vec!["1.1.1.1".parse().expect("ip")];
        write_in(base.path(), "p", &one, &[], &[]).expect("write");
        std::fs::write(base.path().join("p/hosts"), "").expect("hosts");
        remove_in(base.path(), "p").expect("remove");
        assert!(!base.path().join("p/resolv.conf").exists());
        assert!(base.path().join("p/hosts").exists());
    }

    #[test]
    fn bad_names_and_words_are_refused() {
        let base = tempfile::tempdir().expect("tempdir");
        for bad in ["", ".", "..", "a/b"] {
            let e = write_in(base.path(), bad, &[], &[], &[]).expect_err(bad);
            assert!(matches!(e, HostError::Invalid(_)), "{bad:?}: {e}");
            assert!(matches!(
                remove_in(base.path(), bad),
                Err(HostError::Invalid(_))
            ));
        }
        let e = write_in(base.path(), "p", &[], &strings(&["a b"]), &[]).expect_err("space");
        assert!(e.to_string().contains("search domain \"a b\""), "{e}");
        let e = write_in(base.path(), "p", &[], &[], &strings(&["x\ny"])).expect_err("newline");
        assert!(e.to_string().contains("resolver option"), "{e}");
    }
}
