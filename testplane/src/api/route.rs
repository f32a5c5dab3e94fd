//! URL parsing: path to `Route` (resource, non-resource, review, admin, unknown), the
//! Kubernetes verb of a request, and query-string decoding. No IO.

use std::collections::HashMap;

use hyper::Method;

use crate::store::Kind;

/// The parsed target of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    NonResource,
    Resource {
        kind: Kind,
        ns: String,
        name: String,
        sub: String,
    },
    /// POST-only review resources: (group, resource).
    Review(&'static str, &'static str),
    Admin(String),
    Unknown,
}

pub fn parse_route(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["testplane", rest @ ..] => return Route::Admin(rest.join("/")),
        ["api"] | ["apis"] | ["version"] | ["healthz"] | ["readyz"] | ["livez"] => {
            return Route::NonResource
        }
        ["api", "v1"] | ["apis", _] | ["apis", _, _] | ["openapi", ..] => {
            return Route::NonResource
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Unknown,
    };
    match (group, version, rest) {
        ("authentication.k8s.io", "v1", ["selfsubjectreviews"]) => {
            return Route::Review("authentication.k8s.io", "selfsubjectreviews")
        }
        ("authorization.k8s.io", "v1", ["selfsubjectaccessreviews"]) => {
            return Route::Review("authorization.k8s.io", "selfsubjectaccessreviews")
        }
        _ => {}
    }
    let (ns, res, name, sub) = match rest {
        ["namespaces", ns, res, tail @ ..]
            if tail.len() <= 2 && !(group.is_empty() && tail.is_empty() && *res == "status") =>
        {
            (*ns, *res, tail.first().copied(), tail.get(1).copied())
        }
        [res, tail @ ..] if tail.len() <= 2 => {
            ("", *res, tail.first().copied(), tail.get(1).copied())
        }
        _ => return Route::Unknown,
    };
    let Some(kind) = Kind::from_resource(group, version, res) else {
        return Route::Unknown;
    };
    if !ns.is_empty() && !kind.info().namespaced {
        return Route::Unknown;
    }
    Route::Resource {
        kind,
        ns: ns.to_string(),
        name: name.unwrap_or("").to_string(),
        sub: sub.unwrap_or("").to_string(),
    }
}

pub fn verb_for(method: &Method, route: &Route, query: &HashMap<String, String>) -> String {
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    match (method, route) {
        (&Method::GET, Route::Resource { name, .. }) if name.is_empty() => {
            if watch { "watch" } else { "list" }.into()
        }
        (&Method::GET, Route::Resource { .. }) => if watch { "watch" } else { "get" }.into(),
        (&Method::POST, Route::Resource { .. } | Route::Review(..)) => "create".into(),
        (&Method::PUT, _) => "update".into(),
        (&Method::PATCH, _) => "patch".into(),
        (&Method::DELETE, Route::Resource { name, .. }) if name.is_empty() => {
            "deletecollection".into()
        }
        (&Method::DELETE, _) => "delete".into(),
        (m, _) => m.as_str().to_ascii_lowercase(),
    }
}

pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(pct_decode(k), pct_decode(v));
    }
    out
}

pub fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            parse_route("/apis/certificates.k8s.io/v1/certificatesigningrequests/x/approval"),
            Route::Resource {
                kind: Kind::Csr,
                ns: "".into(),
                name: "x".into(),
                sub: "approval".into()
            }
        );
        assert_eq!(
            parse_route("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
            Route::Resource {
                kind: Kind::Lease,
                ns: "kube-node-lease".into(),
                name: "n1".into(),
                sub: "".into()
            }
        );
        assert_eq!(
            parse_route("/api/v1/namespaces/kube-system"),
            Route::Resource {
                kind: Kind::Namespace,
                ns: "".into(),
                name: "kube-system".into(),
                sub: "".into()
            }
        );
        assert_eq!(parse_route("/api/v1/namespaces/x/nodes"), Route::Unknown);
        assert_eq!(parse_route("/apis/foo/v1/bars"), Route::Unknown);
        assert_eq!(parse_route("/version"), Route::NonResource);
        assert_eq!(pct_decode("metadata.name%3Dabc"), "metadata.name=abc");
    }
}
