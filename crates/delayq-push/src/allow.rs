//! `push_allow`: where calls may go.
//!
//! The check is made on the addresses a name resolves to, not on the name in the URL, so a
//! name pointing at a private address is refused like the address itself (the resolver of
//! the HTTP client drops refused addresses, `AllowResolver`). A host entry allows a name
//! whatever it resolves to; a network entry allows the addresses inside it. An empty list
//! allows everything (the default).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

/// One entry of `push_allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A network (`10.0.0.0/8`) or one address (`127.0.0.1`).
    Net(IpNet),
    /// A host name (`hooks.example.com`), or every name under a domain (`*.example.com`).
    Host(String),
}

/// The parsed `push_allow` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Entry>,
}

impl AllowList {
    /// Allows every address.
    pub fn any() -> Self {
        AllowList::default()
    }

    /// Parses entries: CIDR networks, addresses, host names, `*.domain`. The error names the
    /// entry.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<AllowList, String> {
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let e = e.as_ref().trim();
            if let Ok(net) = e.parse::<IpNet>() {
                out.push(Entry::Net(net));
            } else if let Ok(ip) = e.parse::<IpAddr>() {
                out.push(Entry::Net(IpNet::from(ip)));
            } else if is_host_pattern(e) {
                out.push(Entry::Host(e.to_ascii_lowercase()));
            } else {
                return Err(format!(
                    "{e:?} is neither a network (10.0.0.0/8), an address nor a host name (hooks.example.com, *.example.com)"
                ));
            }
        }
        Ok(AllowList { entries: out })
    }

    /// Whether the list allows everything.
    pub fn is_any(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a call to `host` (as written in the URL) at `addr` is allowed.
    pub fn allows(&self, host: &str, addr: IpAddr) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.entries.iter().any(|e| match e {
            Entry::Net(net) => net.contains(&canonical(addr)),
            Entry::Host(pattern) => match pattern.strip_prefix("*.") {
                Some(domain) => host.len() > domain.len() && host.ends_with(&format!(".{domain}")),
                None => *pattern == host,
            },
        })
    }
}

/// An IPv4-mapped IPv6 address is checked as the IPv4 address it is.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn is_host_pattern(e: &str) -> bool {
    let name = e.strip_prefix("*.").unwrap_or(e);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The HTTP client's resolver: the system's, keeping only the addresses the list allows.
#[derive(Debug, Clone)]
pub(crate) struct AllowResolver {
    pub(crate) allow: Arc<AllowList>,
}

impl reqwest::dns::Resolve for AllowResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = Arc::clone(&self.allow);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| allow.allows(&host, a.ip()))
                .collect();
            if allowed.is_empty() {
                let shown: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
                return Err(format!(
                    "{host} resolves to {}, which push_allow does not allow",
                    shown.join(", ")
                )
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_or_are_named() {
        assert!(AllowList::parse::<&str>(&[]).unwrap().is_any());
        let ok = [
            "10.0.0.0/8",
            "127.0.0.1",
            "::1",
            "fd00::/8",
            "hooks.example.com",
            "*.example.org",
        ];
        assert_eq!(AllowList::parse(&ok).unwrap().entries.len(), ok.len());
        for bad in ["10.0.0.0/33", "http://x", "a b", "", "*.", "x..y"] {
            let err = AllowList::parse(&[bad]).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn allows_by_network_or_host() {
        let list = AllowList::parse(&[
            "10.0.0.0/8",
            "127.0.0.1",
            "hooks.example.com",
            "*.example.org",
        ])
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let cases: &[(&str, &str, bool)] = &[
            ("10.1.2.3", "10.1.2.3", true),
            ("a.internal", "10.200.0.1", true),
            ("a.internal", "192.168.0.1", false),
            ("127.0.0.1", "127.0.0.1", true),
            ("localhost", "127.0.0.2", false),
            ("x", "::ffff:127.0.0.1", true),
            ("hooks.example.com", "203.0.113.9", true),
            ("HOOKS.example.com.", "203.0.113.9", true),
            ("evil.hooks.example.com", "203.0.113.9", false),
            ("a.example.org", "203.0.113.9", true),
            ("example.org", "203.0.113.9", false),
        ];
        for &(host, addr, expected) in cases {
            assert_eq!(list.allows(host, ip(addr)), expected, "{host} at {addr}");
        }
        assert!(AllowList::any().allows("anything", ip("8.8.8.8")));
    }
}
