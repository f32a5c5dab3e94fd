//! How bootlet turns a host into one TCP connection: the name resolved ([`Resolver`]: the
//! system's, or a test's fixed table), then the addresses raced RFC 8305 style
//! ([`race`]), so a dual-stack server whose IPv6 (or IPv4) path is black-holed costs
//! 250 ms, not the whole connect bound. Also the resolver the pooled client uses to send `tls-server-name` as SNI
//! ([`AliasResolver`]). It sets no socket options and knows no HTTP.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::net::TcpStream;

/// RFC 8305's "Connection Attempt Delay" (its recommended value): the next address is tried
/// when the attempts before it have neither connected nor failed within this long.
pub const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// Names to addresses: the system's resolver (`getaddrinfo`), or a fixed table (tests).
#[derive(Clone, Default)]
pub struct Resolver {
    fixed: Option<Arc<BTreeMap<String, Vec<SocketAddr>>>>,
}

/// The pooled client's resolver when it names the server by its `tls-server-name`: the
/// request URL carries that name (so that TLS sends it as SNI), and this resolves it to the
/// addresses of the kubeconfig's own host. Every other name resolves as itself.
pub struct AliasResolver {
    /// The `tls-server-name`, as it appears in the request URL.
    pub alias: String,
    /// The server URL's host (an IPv6 literal without brackets).
    pub host: String,
    pub resolver: Resolver,
}

// === impl Resolver ===

impl Resolver {
    /// The system's resolver.
    pub fn system() -> Self {
        Self::default()
    }

    /// A fixed table: each host resolves to exactly the given addresses, ports included;
    /// any other host does not resolve. For tests (a black-holed address beside a good one).
    pub fn fixed(table: impl IntoIterator<Item = (String, Vec<SocketAddr>)>) -> Self {
        Self {
            fixed: Some(Arc::new(table.into_iter().collect())),
        }
    }

    /// Whether this is a test's fixed table.
    pub fn is_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// The addresses of `host` (an IP literal is itself) on `port`, in the resolver's order
    /// of preference.
    pub async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let addrs: Vec<SocketAddr> = match &self.fixed {
            Some(table) => table.get(host).cloned().unwrap_or_default(),
            None => tokio::net::lookup_host((host, port)).await?.collect(),
        };
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{host} resolves to no address"),
            ));
        }
        Ok(addrs)
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fixed {
            None => f.write_str("Resolver(system)"),
            Some(table) => write!(f, "Resolver(fixed {:?})", table),
        }
    }
}

// === impl AliasResolver ===

impl reqwest::dns::Resolve for AliasResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = if name.as_str().eq_ignore_ascii_case(&self.alias) {
            self.host.clone()
        } else {
            name.as_str().to_string()
        };
        let resolver = self.resolver.clone();
        // Port 0: reqwest puts the URL's port in (the same for the alias and the host).
        Box::pin(async move {
            let addrs = resolver.lookup(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// `addrs` in RFC 8305 §4 order (pure): the families alternate, starting with the family of
/// the resolver's first choice, each family keeping its own order.
pub fn interleave(addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let Some(first) = addrs.first().copied() else {
        return addrs;
    };
    let (mut preferred, mut other): (Vec<_>, Vec<_>) = addrs
        .into_iter()
        .partition(|a| a.is_ipv6() == first.is_ipv6());
    preferred.reverse();
    other.reverse();
    let mut out = Vec::with_capacity(preferred.len() + other.len());
    loop {
        match (preferred.pop(), other.pop()) {
            (None, None) => return out,
            (a, b) => out.extend(a.into_iter().chain(b)),
        }
    }
}

/// Connects to the first of `addrs` (in [`interleave`] order) that accepts: each attempt
/// starts when the one before it failed, or `delay` after it started without connecting;
/// the first connection wins and every other attempt is dropped. Not bounded in time: the
/// caller bounds it (a black-holed address is one that never answers). All failing gives
/// the last failure, naming its address.
pub async fn race(addrs: Vec<SocketAddr>, delay: Duration) -> io::Result<TcpStream> {
    let mut queue = interleave(addrs).into_iter();
    let mut attempts = FuturesUnordered::new();
    let attempt = |addr: SocketAddr| async move {
        TcpStream::connect(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("{addr}: {e}")))
    };
    let mut last: Option<io::Error> = None;
    loop {
        if attempts.is_empty() {
            match queue.next() {
                Some(addr) => attempts.push(attempt(addr)),
                None => {
                    return Err(last.unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, "no address to connect to")
                    }))
                }
            }
        }
        let more = queue.len() > 0;
        tokio::select! {
            Some(result) = attempts.next() => match result {
                Ok(stream) => return Ok(stream),
                // A failure starts the next attempt at once (RFC 8305 §5).
                Err(e) => {
                    last = Some(e);
                    if let Some(addr) = queue.next() {
                        attempts.push(attempt(addr));
                    }
                }
            },
            () = tokio::time::sleep(delay), if more => {
                if let Some(addr) = queue.next() {
                    attempts.push(attempt(addr));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn families_alternate_from_the_resolvers_first_choice() {
        let got = interleave(vec![
            addr("[2001:db8::1]:1"),
            addr("[2001:db8::2]:1"),
            addr("[2001:db8::3]:1"),
            addr("192.0.2.1:1"),
            addr("192.0.2.2:1"),
        ]);
        assert_eq!(
            got,
            vec![
                addr("[2001:db8::1]:1"),
                addr("192.0.2.1:1"),
                addr("[2001:db8::2]:1"),
                addr("192.0.2.2:1"),
                addr("[2001:db8::3]:1"),
            ]
        );
        let v4_first = interleave(vec![addr("192.0.2.1:1"), addr("[2001:db8::1]:1")]);
        assert_eq!(v4_first[0], addr("192.0.2.1:1"));
        assert!(interleave(Vec::new()).is_empty());
    }

    #[tokio::test]
    async fn a_refused_address_moves_on_at_once_and_all_failing_names_the_last() {
        // A port nothing listens on: refused at once, so the next attempt starts at once.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let good = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let good_addr = good.local_addr().unwrap();
        let started = tokio::time::Instant::now();
        let stream = race(vec![closed, good_addr], ATTEMPT_DELAY).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap(), good_addr);
        assert!(started.elapsed() < ATTEMPT_DELAY, "{:?}", started.elapsed());

        let err = race(vec![closed], ATTEMPT_DELAY).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        assert!(err.to_string().starts_with(&closed.to_string()), "{err}");
        assert!(race(Vec::new(), ATTEMPT_DELAY).await.is_err());
    }

    #[tokio::test]
    async fn the_fixed_table_resolves_names_and_literals_are_themselves() {
        let r = Resolver::fixed([(
            "api.test".to_string(),
            vec![addr("[::1]:7"), addr("127.0.0.1:8")],
        )]);
        assert_eq!(
            r.lookup("api.test", 443).await.unwrap(),
            vec![addr("[::1]:7"), addr("127.0.0.1:8")]
        );
        assert_eq!(
            r.lookup("fd00::1", 6443).await.unwrap(),
            vec![addr("[fd00::1]:6443")]
        );
        let err = r.lookup("other.test", 443).await.unwrap_err();
        assert!(err.to_string().contains("other.test"), "{err}");
    }
}
