//! The server-side request forgery guard: where a webhook may be sent.
//!
//! Invariants (by construction — the sender has no other way to open a connection):
//! - A URL is `https://host[:port]/path` with no user info and no fragment. Plain `http` is accepted
//!   only when [`Egress::allow_loopback_http`] is set (`clinic dev`, `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP`)
//!   and then only when every address of the host is loopback.
//! - The host is resolved through a [`Resolve`] at save ([`check_url`]) and again at every attempt
//!   ([`resolve_target`]); the answer is refused when ANY address is loopback, private (RFC 1918, ULA),
//!   link-local (including the cloud metadata address 169.254.169.254), CGNAT (100.64.0.0/10),
//!   multicast, broadcast, reserved, documentation or unspecified — also when hidden in an IPv4-mapped,
//!   IPv4-compatible, NAT64 or 6to4 IPv6 form.
//! - The caller connects to the returned [`Target::addr`] (the address that was checked), never
//!   resolving the name a second time; the name only goes into TLS (SNI, certificate) and `Host`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Looks host names up. The system one in production; tests inject answers.
#[async_trait::async_trait]
pub trait Resolve: Send + Sync {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (`getaddrinfo` through tokio), bounded by the caller's timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.map(|addr| addr.ip()).collect())
    }
}

/// What the deployment allows beyond public https.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Egress {
    /// Plain http to loopback addresses (local development only).
    pub allow_loopback_http: bool,
}

/// Why a URL or its addresses are refused. `code` is stable; the text names no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the url is not an absolute https url without user info")]
    BadUrl,
    #[error("plain http is allowed only for loopback endpoints in local development")]
    NotHttps,
    #[error("the host resolves to a forbidden address ({0})")]
    Forbidden(&'static str),
    #[error("the host does not resolve")]
    Unresolvable,
}

impl Refused {
    pub const fn code(self) -> &'static str {
        match self {
            Refused::BadUrl => "bad_url",
            Refused::NotHttps => "not_https",
            Refused::Forbidden(_) => "forbidden_address",
            Refused::Unresolvable => "unresolvable",
        }
    }
}

/// A parsed endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, `/` at least.
    pub path: String,
}

impl EndpointUrl {
    pub fn parse(text: &str) -> Result<EndpointUrl, Refused> {
        if text.len() > 2000
            || text.chars().any(|c| c.is_whitespace() || c.is_control())
            || text.contains('#')
        {
            return Err(Refused::BadUrl);
        }
        let uri: http::Uri = text.parse().map_err(|_| Refused::BadUrl)?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Refused::BadUrl),
        };
        let authority = uri.authority().ok_or(Refused::BadUrl)?;
        if authority.as_str().contains('@') {
            return Err(Refused::BadUrl);
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        if host.is_empty() {
            return Err(Refused::BadUrl);
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/".to_owned(), |p| p.as_str().to_owned());
        Ok(EndpointUrl { https, host, port, path: if path.is_empty() { "/".into() } else { path } })
    }
}

/// Where one attempt connects: the checked address, and the URL it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: EndpointUrl,
    pub addr: SocketAddr,
}

/// The class of a forbidden address, or `None` for a public unicast one.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match () {
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => "metadata",
        _ if a == 0 => "unspecified",
        _ if a == 127 => "loopback",
        _ if a == 10 || (a == 172 && (16..=31).contains(&b)) || (a == 192 && b == 168) => "private",
        _ if a == 169 && b == 254 => "link_local",
        _ if a == 100 && (64..=127).contains(&b) => "cgnat",
        _ if (224..=239).contains(&a) => "multicast",
        _ if a >= 240 => "reserved",
        _ if a == 192 && b == 0 && c == 0 => "reserved",
        _ if a == 198 && (18..=19).contains(&b) => "reserved",
        _ if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113) => {
            "documentation"
        }
        _ => return None,
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4).or(Some("ipv4_mapped"));
    }
    Some(match segments {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        // IPv4-compatible (deprecated, ::a.b.c.d): never a real destination.
        [0, 0, 0, 0, 0, 0, _, _] => "ipv4_compatible",
        // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return forbidden_v4(embedded(hi, lo)).or(Some("nat64")),
        // 6to4 (2002::/16) embeds an IPv4 address in segments 1–2.
        [0x2002, hi, lo, ..] => return forbidden_v4(embedded(hi, lo)).or(Some("6to4")),
        [first, ..] if first & 0xfe00 == 0xfc00 => "private",
        [first, ..] if first & 0xffc0 == 0xfe80 => "link_local",
        [first, ..] if first & 0xffc0 == 0xfec0 => "site_local",
        [first, ..] if first & 0xff00 == 0xff00 => "multicast",
        [0x2001, 0x0db8, ..] => "documentation",
        _ => return None,
    })
}

/// Parses and resolves `url`; every address must be allowed. Answers the address to connect to.
pub async fn resolve_target(url: &str, egress: Egress, resolver: &dyn Resolve) -> Result<Target, Refused> {
    let url = EndpointUrl::parse(url)?;
    let addresses: Vec<IpAddr> = match url.host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => resolver.resolve(&url.host, url.port).await.map_err(|_| Refused::Unresolvable)?,
    };
    let first = *addresses.first().ok_or(Refused::Unresolvable)?;
    let loopback_dev = egress.allow_loopback_http && !url.https;
    for ip in &addresses {
        match forbidden(*ip) {
            None if loopback_dev => return Err(Refused::NotHttps),
            None => {}
            Some("loopback") if loopback_dev => {}
            Some(class) => return Err(Refused::Forbidden(class)),
        }
    }
    if !url.https && !loopback_dev {
        return Err(Refused::NotHttps);
    }
    Ok(Target { addr: SocketAddr::new(first, url.port), url })
}

/// The check at save: the same as at every attempt.
pub async fn check_url(url: &str, egress: Egress, resolver: &dyn Resolve) -> Result<(), Refused> {
    resolve_target(url, egress, resolver).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A resolver answering from a table (names absent from it do not resolve).
    struct Table(HashMap<&'static str, Vec<IpAddr>>);

    #[async_trait::async_trait]
    impl Resolve for Table {
        async fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
            self.0.get(host).cloned().ok_or_else(|| std::io::Error::other("NXDOMAIN"))
        }
    }

    fn table() -> Table {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        Table(HashMap::from([
            ("hooks.example.com", vec![ip("93.184.216.34")]),
            ("v6.example.com", vec![ip("2606:2800:220:1:248:1893:25c8:1946")]),
            ("rebind.example.com", vec![ip("93.184.216.34"), ip("127.0.0.1")]),
            ("internal.example.com", vec![ip("10.0.0.7")]),
            ("metadata.example.com", vec![ip("169.254.169.254")]),
            ("mapped.example.com", vec![ip("::ffff:192.168.1.1")]),
            ("ula.example.com", vec![ip("fd12:3456::1")]),
            ("cgnat.example.com", vec![ip("100.100.0.1")]),
            ("localhost", vec![ip("127.0.0.1"), ip("::1")]),
        ]))
    }

    async fn check(url: &str) -> Result<Target, Refused> {
        resolve_target(url, Egress::default(), &table()).await
    }

    #[tokio::test]
    async fn public_https_is_allowed_and_connects_to_the_checked_address() {
        let target = check("https://hooks.example.com/clinic?x=1").await.unwrap();
        assert_eq!(target.addr, "93.184.216.34:443".parse().unwrap());
        assert_eq!(target.url.path, "/clinic?x=1");
        assert_eq!(check("https://v6.example.com:8443/").await.unwrap().addr.port(), 8443);
        assert!(check("https://93.184.216.34/").await.is_ok());
    }

    #[tokio::test]
    async fn forbidden_literals_are_refused() {
        for (url, class) in [
            ("https://127.0.0.1/", "loopback"),
            ("https://127.1.2.3/", "loopback"),
            ("https://[::1]/", "loopback"),
            ("https://10.1.2.3/", "private"),
            ("https://172.16.0.1/", "private"),
            ("https://172.31.255.255/", "private"),
            ("https://192.168.0.10/", "private"),
            ("https://[fc00::1]/", "private"),
            ("https://[fe80::1]/", "link_local"),
            ("https://169.254.10.1/", "link_local"),
            ("https://169.254.169.254/latest/meta-data/", "metadata"),
            ("https://100.64.0.1/", "cgnat"),
            ("https://100.127.255.254/", "cgnat"),
            ("https://224.0.0.1/", "multicast"),
            ("https://[ff02::1]/", "multicast"),
            ("https://0.0.0.0/", "unspecified"),
            ("https://[::]/", "unspecified"),
            ("https://255.255.255.255/", "reserved"),
            ("https://[::ffff:127.0.0.1]/", "loopback"),
            ("https://[::ffff:169.254.169.254]/", "metadata"),
            ("https://[::ffff:8.8.8.8]/", "ipv4_mapped"),
            ("https://[64:ff9b::a00:1]/", "private"),
            ("https://[2002:c0a8:101::1]/", "private"),
            ("https://[::7f00:1]/", "ipv4_compatible"),
        ] {
            assert_eq!(check(url).await, Err(Refused::Forbidden(class)), "{url}");
        }
        // Just outside the ranges: public.
        for url in
            ["https://172.32.0.1/", "https://100.128.0.1/", "https://169.255.0.1/", "https://11.0.0.1/"]
        {
            assert!(check(url).await.is_ok(), "{url}");
        }
    }

    #[tokio::test]
    async fn names_resolving_to_forbidden_addresses_are_refused() {
        assert_eq!(check("https://internal.example.com/").await, Err(Refused::Forbidden("private")));
        assert_eq!(check("https://metadata.example.com/").await, Err(Refused::Forbidden("metadata")));
        assert_eq!(check("https://mapped.example.com/").await, Err(Refused::Forbidden("private")));
        assert_eq!(check("https://ula.example.com/").await, Err(Refused::Forbidden("private")));
        assert_eq!(check("https://cgnat.example.com/").await, Err(Refused::Forbidden("cgnat")));
        // One bad address among good ones is enough (DNS rebinding with several records).
        assert_eq!(check("https://rebind.example.com/").await, Err(Refused::Forbidden("loopback")));
        assert_eq!(check("https://localhost/").await, Err(Refused::Forbidden("loopback")));
        assert_eq!(check("https://nowhere.example.com/").await, Err(Refused::Unresolvable));
    }

    #[tokio::test]
    async fn only_https_urls_without_user_info() {
        assert_eq!(check("http://hooks.example.com/").await, Err(Refused::NotHttps));
        for url in [
            "ftp://hooks.example.com/",
            "https://user:pw@hooks.example.com/",
            "https://hooks.example.com/#frag",
            "hooks.example.com/path",
            "https:///path",
            "https://hooks.example.com/a b",
        ] {
            assert_eq!(check(url).await, Err(Refused::BadUrl), "{url}");
        }
    }

    #[tokio::test]
    async fn loopback_http_only_behind_the_dev_setting() {
        let dev = Egress { allow_loopback_http: true };
        let target = resolve_target("http://127.0.0.1:8106/hook", dev, &table()).await.unwrap();
        assert_eq!(target.addr, "127.0.0.1:8106".parse().unwrap());
        assert!(resolve_target("http://localhost:8106/", dev, &table()).await.is_ok());
        assert_eq!(check("http://127.0.0.1:8106/hook").await, Err(Refused::Forbidden("loopback")));
        // The setting opens loopback over http only: not private networks, not public http.
        assert_eq!(
            resolve_target("http://10.0.0.1/", dev, &table()).await,
            Err(Refused::Forbidden("private"))
        );
        assert_eq!(resolve_target("http://hooks.example.com/", dev, &table()).await, Err(Refused::NotHttps));
        assert_eq!(
            resolve_target("https://127.0.0.1/", dev, &table()).await,
            Err(Refused::Forbidden("loopback"))
        );
    }
}
