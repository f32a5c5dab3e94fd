//! How a kubeconfig says to reach its API server: the URL, the name the serving certificate
//! must carry (`tls-server-name`) and the proxy (`proxy-url`). Values only; which proxy a
//! connection really uses is `api::proxy`'s decision, and dialing is `apiserver`'s.

use std::fmt;

use http::{HeaderValue, Uri};
use hyper_util::client::proxy::matcher::Matcher;

/// The API server as a kubeconfig cluster describes it. Display is the URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// An `https://` URL.
    pub url: String,
    /// `tls-server-name`: the name to verify the serving certificate against (and send as
    /// SNI) instead of the URL's host.
    pub tls_server_name: Option<String>,
    /// `proxy-url`: every connection to this server goes through it (loopback excepted).
    pub proxy: Option<ProxyUrl>,
}

// === impl Server ===

impl Server {
    /// A server reached by its URL alone: no name override, no proxy of its own.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tls_server_name: None,
            proxy: None,
        }
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl From<&str> for Server {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

impl From<&String> for Server {
    fn from(url: &String) -> Self {
        Self::new(url.as_str())
    }
}

impl From<String> for Server {
    fn from(url: String) -> Self {
        Self::new(url)
    }
}

/// Anything that names an API server: a URL (`str`, `String`) or a kubeconfig's
/// [`Server`] with its `tls-server-name` and `proxy-url`.
pub trait ToServer {
    fn to_server(&self) -> Server;
}

impl ToServer for Server {
    fn to_server(&self) -> Server {
        self.clone()
    }
}

impl ToServer for str {
    fn to_server(&self) -> Server {
        Server::new(self)
    }
}

impl ToServer for String {
    fn to_server(&self) -> Server {
        Server::new(self.as_str())
    }
}

/// An `http://` proxy bootlet tunnels through with HTTP CONNECT; userinfo in the URL becomes
/// `Proxy-Authorization: Basic`. Display and Debug never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    /// As written (with `http://` added to a bare `host:port` from the environment); may
    /// hold credentials.
    written: String,
    /// `http://host:port`, for logs.
    shown: String,
    host: String,
    port: u16,
    auth: Option<HeaderValue>,
}

/// Why a proxy URL cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyUrlError {
    /// A scheme bootlet does not speak (socks5, https, ...).
    Unsupported { scheme: String },
    /// Not a URL with a host.
    Invalid,
}

// === impl ProxyUrl ===

impl ProxyUrl {
    /// Parses a proxy URL. `bare_is_http`: a value without `scheme://` means `http://`
    /// (as Go reads `HTTPS_PROXY`); a kubeconfig's `proxy-url` must name its scheme.
    pub fn parse(text: &str, bare_is_http: bool) -> Result<Self, ProxyUrlError> {
        let text = text.trim();
        let written = match text.split_once("://") {
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => text.to_string(),
            Some((scheme, _)) => {
                return Err(ProxyUrlError::Unsupported {
                    scheme: scheme.to_ascii_lowercase(),
                })
            }
            None if bare_is_http => format!("http://{text}"),
            None => return Err(ProxyUrlError::Invalid),
        };
        // hyper-util's matcher is what reqwest parses proxy URLs with (userinfo, percent
        // decoding, Basic encoding): asking it about any https target hands back its reading.
        let probe = Uri::from_static("https://proxy-url.check.invalid/");
        let intercept = Matcher::builder()
            .all(written.clone())
            .build()
            .intercept(&probe)
            .ok_or(ProxyUrlError::Invalid)?;
        let authority = intercept.uri().authority().ok_or(ProxyUrlError::Invalid)?;
        let host = authority.host();
        if host.is_empty() {
            return Err(ProxyUrlError::Invalid);
        }
        let port = authority.port_u16().unwrap_or(80);
        Ok(Self {
            shown: format!("http://{host}:{port}"),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            auth: intercept.basic_auth().cloned(),
            written,
        })
    }

    /// The URL as written, credentials included: for the kubelet kubeconfig (0600) and the
    /// HTTP client's proxy setting only, never for a log line.
    pub fn with_credentials(&self) -> &str {
        &self.written
    }

    /// The proxy's host (an IPv6 literal without brackets) and port.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `Basic ...` from the URL's userinfo, marked sensitive.
    pub fn basic_auth(&self) -> Option<&HeaderValue> {
        self.auth.as_ref()
    }
}

impl fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)?;
        if self.auth.is_some() {
            f.write_str(" (with credentials)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyUrl({self})")
    }
}

impl fmt::Display for ProxyUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyUrlError::Unsupported { scheme } => write!(
                f,
                "bootlet tunnels through http:// proxies (HTTP CONNECT) only, not {scheme}://"
            ),
            ProxyUrlError::Invalid => {
                f.write_str("is not a proxy URL of the form http://[user:password@]host[:port]")
            }
        }
    }
}

/// `tls-server-name` must be a DNS name or an IP address.
pub(super) fn valid_server_name(name: &str) -> bool {
    rustls::pki_types::ServerName::try_from(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_proxies_parse_with_basic_auth_from_userinfo() {
        let p = ProxyUrl::parse("http://bob:s%40cret@proxy.corp:3128", false).unwrap();
        assert_eq!((p.host(), p.port()), ("proxy.corp", 3128));
        // base64("bob:s@cret")
        assert_eq!(p.basic_auth().unwrap(), "Basic Ym9iOnNAY3JldA==");
        assert!(p.basic_auth().unwrap().is_sensitive());
        assert_eq!(p.with_credentials(), "http://bob:s%40cret@proxy.corp:3128");
        for shown in [p.to_string(), format!("{p:?}")] {
            assert!(
                !shown.contains("s%40cret") && !shown.contains("bob"),
                "{shown}"
            );
            assert!(shown.contains("http://proxy.corp:3128"), "{shown}");
        }

        let p = ProxyUrl::parse("http://[fd00::1]", false).unwrap();
        assert_eq!((p.host(), p.port()), ("fd00::1", 80));
        assert!(p.basic_auth().is_none());
    }

    #[test]
    fn bare_host_port_is_http_only_where_allowed() {
        let p = ProxyUrl::parse("proxy:3128", true).unwrap();
        assert_eq!(p.with_credentials(), "http://proxy:3128");
        assert_eq!(
            ProxyUrl::parse("proxy:3128", false),
            Err(ProxyUrlError::Invalid)
        );
    }

    #[test]
    fn other_schemes_are_refused_by_name() {
        for (url, scheme) in [
            ("socks5://proxy:1080", "socks5"),
            ("SOCKS5H://proxy:1080", "socks5h"),
            ("https://proxy:443", "https"),
        ] {
            let err = ProxyUrl::parse(url, true).unwrap_err();
            assert_eq!(
                err,
                ProxyUrlError::Unsupported {
                    scheme: scheme.into()
                }
            );
            assert!(err.to_string().contains(&format!("{scheme}://")), "{err}");
        }
        assert_eq!(
            ProxyUrl::parse("http://", true),
            Err(ProxyUrlError::Invalid)
        );
    }
}
