//! The server-side request forgery guard: where a webhook may be sent.
//!
//! Invariants (by construction — the sender has no other way to open a connection):
//! - A URL is `https://host[:port]/path` with no user info and no fragment. Plain `http` is accepted
//!   only when [`Egress::allow_loopback_http`] is set (`clinic dev`, `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP`)
//!   and then only when every address of the host is loopback.
//! - The host is resolved through a [`Resolve`] at save ([`check_url`]) and again at every attempt
//!   ([`resolve_target`]); the answer is refused unless EVERY address is global unicast (an
//!   allowlist, [`forbidden`]): public IPv4, and IPv6 in `2000::/3` outside the IANA special-purpose
//!   blocks (6to4, Teredo and the rest of `2001::/23`, documentation, SRv6). IPv4 hidden in an IPv6
//!   form (mapped, SIIT, compatible, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4) is decoded.
//! - A refusal of a host name never says what the name resolved to ([`Refused::ForbiddenName`]).
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
    /// An address written in the URL: its class may be named (the caller wrote the address).
    #[error("the address is not a public unicast address ({0})")]
    Forbidden(&'static str),
    /// A host name that resolves to a forbidden address: the text says what is wrong without telling
    /// what the name resolved to (that would map an internal network); the class is kept for tests.
    #[error("the host name must resolve only to public unicast addresses")]
    ForbiddenName(&'static str),
    #[error("the host does not resolve")]
    Unresolvable,
}

impl Refused {
    pub const fn code(self) -> &'static str {
        match self {
            Refused::BadUrl => "bad_url",
            Refused::NotHttps => "not_https",
            Refused::Forbidden(_) | Refused::ForbiddenName(_) => "forbidden_address",
            Refused::Unresolvable => "unresolvable",
        }
    }
}

/// The longest endpoint URL, in bytes (a URL [`EndpointUrl::parse`] accepts is ASCII: one byte is one
/// character).
const MAX_URL_LEN: usize = 2000;
/// The shortest URL [`EndpointUrl::parse`] can accept (`http://a`); a bound for the schema only.
const MIN_URL_LEN: usize = 8;

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
        if text.len() > MAX_URL_LEN
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

// The schema of a URL field as a request states it: [`EndpointUrl::parse`]'s bounds. The addresses
// are checked when it is saved ([`check_url`]), which no schema can state.
crate::inline_schema!(EndpointUrl, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "format": "uri",
        "minLength": MIN_URL_LEN,
        "maxLength": MAX_URL_LEN,
    })
});

/// Where one attempt connects: the checked address, and the URL it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: EndpointUrl,
    pub addr: SocketAddr,
}

/// The class of a forbidden address, or `None` for a global unicast one: an allowlist. IPv4 must be
/// public; IPv6 must be in `2000::/3` outside the IANA special-purpose blocks. Every form that embeds
/// an IPv4 address (mapped, SIIT, compatible, NAT64 well-known and local-use, 6to4) is decoded and
/// answered with the embedded address's class when that one is forbidden, and refused in any case:
/// the translator or relay that would carry it is not a destination a webhook should name.
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
        // IETF protocol assignments (192.0.0.0/24), the deprecated 6to4 relay anycast, benchmarking.
        _ if a == 192 && b == 0 && c == 0 => "reserved",
        _ if (a, b, c) == (192, 88, 99) => "reserved",
        _ if a == 198 && (18..=19).contains(&b) => "reserved",
        _ if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113) => {
            "documentation"
        }
        _ => return None,
    })
}

/// The IPv4 address in the last 32 bits of `ip`.
fn low_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let [.., a, b, c, d] = ip.octets();
    Ipv4Addr::new(a, b, c, d)
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    // The embedded address's class when it is forbidden, else the form's own.
    let embedding = |v4: Ipv4Addr, form: &'static str| Some(forbidden_v4(v4).unwrap_or(form));
    match segments {
        _ if ip.is_unspecified() => Some("unspecified"),
        _ if ip.is_loopback() => Some("loopback"),
        // IPv4-mapped ::ffff:a.b.c.d and SIIT ::ffff:0:a.b.c.d (RFC 7915).
        [0, 0, 0, 0, 0, 0xffff, _, _] => embedding(low_v4(ip), "ipv4_mapped"),
        [0, 0, 0, 0, 0xffff, 0, _, _] => embedding(low_v4(ip), "ipv4_translated"),
        // IPv4-compatible (deprecated, ::a.b.c.d).
        [0, 0, 0, 0, 0, 0, _, _] => embedding(low_v4(ip), "ipv4_compatible"),
        // NAT64: the well-known prefix 64:ff9b::/96 and the local-use 64:ff9b:1::/48 (RFC 8215).
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => embedding(low_v4(ip), "nat64"),
        [0x64, 0xff9b, 1, ..] => embedding(low_v4(ip), "nat64"),
        // 6to4 (2002::/16) embeds an IPv4 address in segments 1–2.
        [0x2002, hi, lo, ..] => {
            let [a, b] = hi.to_be_bytes();
            let [c, d] = lo.to_be_bytes();
            embedding(Ipv4Addr::new(a, b, c, d), "6to4")
        }
        // Discard-only 100::/64 and the dummy prefix 100:0:0:1::/64 (RFC 6666, RFC 9780).
        [0x100, 0, 0, 0 | 1, ..] => Some("discard"),
        [first, ..] if first & 0xfe00 == 0xfc00 => Some("private"),
        [first, ..] if first & 0xffc0 == 0xfe80 => Some("link_local"),
        [first, ..] if first & 0xffc0 == 0xfec0 => Some("site_local"),
        [first, ..] if first & 0xff00 == 0xff00 => Some("multicast"),
        // Only global unicast 2000::/3 is allowed from here on.
        [first, ..] if first & 0xe000 != 0x2000 => Some("not_global_unicast"),
        // Teredo 2001::/32 inside the IETF protocol assignments 2001::/23 (benchmarking 2001:2::/48,
        // ORCHID, AMT, AS112 …): none is a webhook receiver.
        [0x2001, 0, ..] => Some("teredo"),
        [0x2001, second, ..] if second < 0x0200 => Some("reserved"),
        [0x2001, 0x0db8, ..] => Some("documentation"),
        [first, ..] if first & 0xfff0 == 0x3ff0 => Some("documentation"),
        // SRv6 segment identifiers (5f00::/16, RFC 9602).
        [0x5f00, ..] => Some("reserved"),
        _ => None,
    }
}

/// Parses and resolves `url`; every address must be allowed. Answers the address to connect to.
pub async fn resolve_target(url: &str, egress: Egress, resolver: &dyn Resolve) -> Result<Target, Refused> {
    let url = EndpointUrl::parse(url)?;
    let (addresses, literal) = match url.host.parse::<IpAddr>() {
        Ok(ip) => (vec![ip], true),
        Err(_) => (resolver.resolve(&url.host, url.port).await.map_err(|_| Refused::Unresolvable)?, false),
    };
    let first = *addresses.first().ok_or(Refused::Unresolvable)?;
    let loopback_dev = egress.allow_loopback_http && !url.https;
    for ip in &addresses {
        match forbidden(*ip) {
            None if loopback_dev => return Err(Refused::NotHttps),
            None => {}
            Some("loopback") if loopback_dev => {}
            Some(class) if literal => return Err(Refused::Forbidden(class)),
            Some(class) => return Err(Refused::ForbiddenName(class)),
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
            ("https://[::7f00:1]/", "loopback"),
            ("https://[::808:808]/", "ipv4_compatible"),
            ("https://[::ffff:0:a9fe:a9fe]/", "metadata"),
            ("https://[64:ff9b:1::a00:1]/", "private"),
            ("https://[2001::1]/", "teredo"),
            ("https://[100::1]/", "discard"),
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
        assert_eq!(check("https://internal.example.com/").await, Err(Refused::ForbiddenName("private")));
        assert_eq!(check("https://metadata.example.com/").await, Err(Refused::ForbiddenName("metadata")));
        assert_eq!(check("https://mapped.example.com/").await, Err(Refused::ForbiddenName("private")));
        assert_eq!(check("https://ula.example.com/").await, Err(Refused::ForbiddenName("private")));
        assert_eq!(check("https://cgnat.example.com/").await, Err(Refused::ForbiddenName("cgnat")));
        // One bad address among good ones is enough (DNS rebinding with several records).
        assert_eq!(check("https://rebind.example.com/").await, Err(Refused::ForbiddenName("loopback")));
        assert_eq!(check("https://localhost/").await, Err(Refused::ForbiddenName("loopback")));
        assert_eq!(check("https://nowhere.example.com/").await, Err(Refused::Unresolvable));
    }

    /// Issue 39 item 5: the forms that slipped through a denylist, and the IANA special-purpose blocks
    /// an allowlist of global unicast refuses, literal or behind a name.
    #[tokio::test]
    async fn only_global_unicast_is_allowed_with_every_ipv4_embedding_decoded() {
        for url in [
            // The five forms of the issue.
            "https://[::ffff:0:a9fe:a9fe]/",
            "https://[::ffff:0:7f00:1]/",
            "https://[64:ff9b:1::a9fe:a9fe]/",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[100::1]/",
            // More embeddings and special-purpose blocks.
            "https://[::ffff:0:808:808]/",
            "https://[64:ff9b:1:ffff::1]/",
            "https://[64:ff9b::808:808]/",
            "https://[::808:808]/",
            "https://[2002:808:808::1]/",
            "https://[2001::1]/",
            "https://[2001:2::1]/",
            "https://[2001:10::1]/",
            "https://[2001:db8::1]/",
            "https://[3fff::1]/",
            "https://[5f00::1]/",
            "https://[100:0:0:1::1]/",
            "https://[4000::1]/",
            "https://[e000::1]/",
            "https://[fec0::1]/",
            "https://192.88.99.1/",
            "https://192.0.0.9/",
            "https://198.18.0.1/",
        ] {
            let refused = check(url).await.expect_err(url);
            assert_eq!(refused.code(), "forbidden_address", "{url}");
        }
        for url in ["https://[2606:4700::1111]/", "https://[2a00:1450:4001:80b::200e]/", "https://1.1.1.1/"] {
            assert!(check(url).await.is_ok(), "{url}");
        }
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let names = Table(HashMap::from([
            ("siit.example.com", vec![ip("::ffff:0:a9fe:a9fe")]),
            ("nat64.example.com", vec![ip("64:ff9b:1::a00:1")]),
            ("teredo.example.com", vec![ip("2001:0:4136:e378:8000:63bf:3fff:fdd2")]),
            ("discard.example.com", vec![ip("100::1")]),
        ]));
        for host in ["siit.example.com", "nat64.example.com", "teredo.example.com", "discard.example.com"] {
            let url = format!("https://{host}/");
            let refused = resolve_target(&url, Egress::default(), &names).await.expect_err(host);
            assert_eq!(refused.code(), "forbidden_address", "{host}");
        }
    }

    /// A refusal of a name says what is wrong without telling what the name resolved to (no address,
    /// no class such as "private" that would map an internal network); a literal may be named.
    #[tokio::test]
    async fn a_refused_name_does_not_reveal_what_it_resolved_to() {
        for host in ["internal.example.com", "metadata.example.com", "localhost", "rebind.example.com"] {
            let refused = check(&format!("https://{host}/")).await.expect_err(host);
            let text = refused.to_string();
            for secret in ["private", "metadata", "loopback", "10.0.0.7", "169.254", "127.0.0.1"] {
                assert!(!text.contains(secret), "{host}: {text}");
            }
            assert!(text.contains("public"), "{host}: {text}");
        }
        let literal = check("https://10.0.0.7/").await.unwrap_err().to_string();
        assert!(literal.contains("private"), "{literal}");
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
