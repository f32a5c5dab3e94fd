//! The one proxy policy every connection bootlet opens follows (the API client, the Lease
//! loop's own connection, the Lease health probe), as the kubelet's client-go does: a
//! kubeconfig `proxy-url` if set, else `HTTPS_PROXY`/`HTTP_PROXY` from the environment
//! honouring `NO_PROXY`, and never a proxy for a loopback target. It decides; it does not dial.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use http::Uri;
use hyper_util::client::proxy::matcher::Matcher;

use crate::api::kubeconfig::ProxyUrl;

/// The proxy variables of an environment, read once (see [`ProxyEnv::process`]).
pub struct ProxyEnv {
    /// `(variable, its proxy)` for https targets, from `HTTPS_PROXY` or `https_proxy`.
    https: Option<(&'static str, Result<ProxyUrl, String>)>,
    /// The same for http targets (the health probe), from `HTTP_PROXY` or `http_proxy`.
    http: Option<(&'static str, Result<ProxyUrl, String>)>,
    /// `NO_PROXY`/`no_proxy` as hyper-util (and so reqwest) reads it: comma-separated
    /// domains (matching subdomains too), IPs, CIDRs, or `*`.
    no_proxy: Matcher,
    no_proxy_text: String,
}

/// The policy for connections to one place: an explicit proxy (the kubeconfig's
/// `proxy-url`) or none, over the environment's.
#[derive(Clone, Debug)]
pub struct ProxyPolicy {
    explicit: Option<ProxyUrl>,
    env: Arc<ProxyEnv>,
}

// === impl ProxyEnv ===

impl ProxyEnv {
    /// This process's environment, read on first use and kept: proxies do not change
    /// under a running daemon, and nothing here ever writes the environment.
    pub fn process() -> Arc<ProxyEnv> {
        static ENV: OnceLock<Arc<ProxyEnv>> = OnceLock::new();
        ENV.get_or_init(|| Arc::new(ProxyEnv::from_vars(|k| std::env::var(k).ok())))
            .clone()
    }

    /// The variables as `lookup` reports them (upper case first, like Go; empty is unset).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let first = |names: [&'static str; 2]| {
            names
                .into_iter()
                .find_map(|n| lookup(n).filter(|v| !v.trim().is_empty()).map(|v| (n, v)))
        };
        let proxy = |names| {
            first(names).map(|(name, value)| {
                let parsed = ProxyUrl::parse(&value, true).map_err(|e| match e {
                    crate::api::kubeconfig::ProxyUrlError::Invalid => format!("{name} {e}"),
                    unsupported => format!("{name} is not supported: {unsupported}"),
                });
                (name, parsed)
            })
        };
        let no_proxy_text = first(["NO_PROXY", "no_proxy"])
            .map(|(_, v)| v)
            .unwrap_or_default();
        Self {
            https: proxy(["HTTPS_PROXY", "https_proxy"]),
            http: proxy(["HTTP_PROXY", "http_proxy"]),
            // The placeholder proxy only lets the matcher answer one question: is the
            // target excluded by NO_PROXY? The real proxies are parsed above, with errors.
            no_proxy: Matcher::builder()
                .all("http://no-proxy.check.invalid")
                .no(no_proxy_text.clone())
                .build(),
            no_proxy_text,
        }
    }

    /// No proxy variables at all.
    pub fn none() -> Self {
        Self::from_vars(|_| None)
    }

    fn excluded(&self, target: &Uri) -> bool {
        self.no_proxy.intercept(target).is_none()
    }
}

impl fmt::Debug for ProxyEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<(&'static str, Result<ProxyUrl, String>)>| match v {
            None => "unset".to_string(),
            Some((name, Ok(p))) => format!("{name}={p}"),
            Some((name, Err(_))) => format!("{name}=<unusable>"),
        };
        f.debug_struct("ProxyEnv")
            .field("https", &show(&self.https))
            .field("http", &show(&self.http))
            .field("no_proxy", &self.no_proxy_text)
            .finish()
    }
}

// === impl ProxyPolicy ===

impl ProxyPolicy {
    pub fn new(explicit: Option<ProxyUrl>, env: Arc<ProxyEnv>) -> Self {
        Self { explicit, env }
    }

    /// The process environment's policy, with no explicit proxy (the health probe's).
    pub fn from_env() -> Self {
        Self::new(None, ProxyEnv::process())
    }

    /// The proxy a connection to `url` goes through, or `None` to dial it directly.
    /// In order: a loopback target (`localhost`, 127.0.0.0/8, ::1) never uses a proxy;
    /// else the explicit proxy; else the environment's for the URL's scheme unless
    /// `NO_PROXY` excludes the host. An environment proxy bootlet cannot use is an error
    /// naming the variable, not a silent direct connection.
    pub fn proxy_for(&self, url: &str) -> Result<Option<ProxyUrl>, String> {
        let target: Uri = url
            .parse()
            .map_err(|e| format!("cannot decide a proxy for {url:?}: {e}"))?;
        let Some(host) = target.host() else {
            return Ok(None);
        };
        if is_loopback(host) {
            return Ok(None);
        }
        if let Some(explicit) = &self.explicit {
            return Ok(Some(explicit.clone()));
        }
        let from_env = match target.scheme_str() {
            Some("https") => &self.env.https,
            Some("http") => &self.env.http,
            _ => &None,
        };
        match from_env {
            None => Ok(None),
            Some(_) if self.env.excluded(&target) => Ok(None),
            Some((_, Ok(proxy))) => Ok(Some(proxy.clone())),
            Some((_, Err(reason))) => Err(reason.clone()),
        }
    }
}

/// `localhost` or a loopback address, bracketed IPv6 and IPv4-mapped forms included (the
/// hosts Go's `ProxyFromEnvironment` never proxies).
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Arc<ProxyEnv> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Arc::new(ProxyEnv::from_vars(move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        }))
    }

    fn shown(p: Result<Option<ProxyUrl>, String>) -> String {
        match p {
            Ok(Some(p)) => p.to_string(),
            Ok(None) => "direct".into(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn environment_proxies_by_scheme_honouring_no_proxy() {
        let policy = ProxyPolicy::new(
            None,
            env(&[
                ("HTTPS_PROXY", "http://secure:3128"),
                ("https_proxy", "http://ignored-lower-case:1"),
                ("http_proxy", "plain:8080"),
                ("NO_PROXY", "corp.example, 10.0.0.0/8 ,fd00::1"),
            ]),
        );
        let cases = [
            ("https://api.example.com:6443", "http://secure:3128"),
            ("http://api.example.com:10248/healthz", "http://plain:8080"),
            ("https://corp.example", "direct"),
            ("https://api.corp.example:6443", "direct"),
            ("https://notcorp.example", "http://secure:3128"),
            ("https://10.1.2.3:6443", "direct"),
            ("https://11.1.2.3:6443", "http://secure:3128"),
            ("https://[fd00::1]:6443", "direct"),
            // Loopback is never proxied, whatever the environment says.
            ("https://127.0.0.1:6443", "direct"),
            ("http://127.0.0.1:10248/healthz", "direct"),
            ("https://127.3.2.1", "direct"),
            ("https://[::1]:6443", "direct"),
            ("https://[::ffff:127.0.0.1]:6443", "direct"),
            ("http://LOCALHOST:10248", "direct"),
        ];
        for (url, want) in cases {
            assert_eq!(shown(policy.proxy_for(url)), want, "{url}");
        }
    }

    #[test]
    fn the_explicit_proxy_wins_over_the_environment_but_not_over_loopback() {
        let explicit = ProxyUrl::parse("http://u:p@kubeconfig-proxy:3128", false).unwrap();
        let policy = ProxyPolicy::new(
            Some(explicit),
            env(&[("HTTPS_PROXY", "http://env:1"), ("NO_PROXY", "*")]),
        );
        assert_eq!(
            shown(policy.proxy_for("https://api.example.com")),
            "http://kubeconfig-proxy:3128 (with credentials)"
        );
        assert_eq!(shown(policy.proxy_for("https://127.0.0.1:6443")), "direct");
    }

    #[test]
    fn no_variables_means_direct_and_star_excludes_everything() {
        let none = ProxyPolicy::new(None, Arc::new(ProxyEnv::none()));
        assert_eq!(shown(none.proxy_for("https://api.example.com")), "direct");
        let star = ProxyPolicy::new(
            None,
            env(&[("HTTPS_PROXY", "http://p:1"), ("no_proxy", "*")]),
        );
        assert_eq!(shown(star.proxy_for("https://api.example.com")), "direct");
    }

    #[test]
    fn an_unusable_environment_proxy_is_an_error_naming_the_variable() {
        let policy = ProxyPolicy::new(
            None,
            env(&[
                ("https_proxy", "socks5://p:1080"),
                ("HTTP_PROXY", "http://"),
                ("NO_PROXY", "skip.example"),
            ]),
        );
        let err = shown(policy.proxy_for("https://api.example.com"));
        assert!(
            err.starts_with("error: https_proxy is not supported: bootlet tunnels through http:// proxies (HTTP CONNECT) only, not socks5://"),
            "{err}"
        );
        let err = shown(policy.proxy_for("http://api.example.com/healthz"));
        assert!(
            err.starts_with("error: HTTP_PROXY is not a proxy URL"),
            "{err}"
        );
        // Excluded or loopback targets never reach the bad value.
        assert_eq!(shown(policy.proxy_for("https://skip.example")), "direct");
        assert_eq!(shown(policy.proxy_for("https://127.0.0.1")), "direct");
    }

    #[test]
    fn debug_never_shows_proxy_credentials() {
        let e = env(&[("HTTPS_PROXY", "http://user:hunter2@p:1")]);
        let text = format!("{:?}", ProxyPolicy::new(None, e));
        assert!(
            !text.contains("hunter2") && !text.contains("user"),
            "{text}"
        );
        assert!(
            text.contains("HTTPS_PROXY=http://p:1 (with credentials)"),
            "{text}"
        );
    }
}
