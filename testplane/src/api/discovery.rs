//! Non-resource endpoints (/version, /healthz, /readyz, /livez), legacy discovery (/api,
//! `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`; aggregated discovery is declined by answering plain
//! JSON) and the SelfSubjectReview / SelfSubjectAccessReview virtual resources.

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, SelfSubjectReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReviewStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use k8s_openapi::apimachinery::pkg::version::Info;

use super::resources::body_json;
use super::{json, plain, unknown, ApiError, Ctx, Resp};
use crate::rbac::{self, Attrs, Decision};
use crate::store::Kind;

/// Groups served besides the core group, with their virtual (create-only) resources.
const GROUPS: &[(&str, &[(&str, &str)])] = &[
    ("certificates.k8s.io", &[]),
    ("coordination.k8s.io", &[]),
    ("rbac.authorization.k8s.io", &[]),
    (
        "authentication.k8s.io",
        &[("selfsubjectreviews", "SelfSubjectReview")],
    ),
    (
        "authorization.k8s.io",
        &[("selfsubjectaccessreviews", "SelfSubjectAccessReview")],
    ),
];

pub fn serve(ctx: &Ctx) -> Resp {
    let segs: Vec<&str> = ctx.path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["version"] => json(200, &version()),
        ["healthz"] | ["readyz"] | ["livez"] => plain(200, "ok"),
        ["api"] => json(
            200,
            &APIVersions {
                versions: vec!["v1".into()],
                server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
                    client_cidr: "0.0.0.0/0".into(),
                    server_address: ctx.shared.addr.to_string(),
                }],
            },
        ),
        ["api", "v1"] => json(200, &resources("", "v1")),
        ["apis"] => json(
            200,
            &APIGroupList {
                groups: GROUPS.iter().map(|(g, _)| group(g)).collect(),
            },
        ),
        ["apis", g] if GROUPS.iter().any(|(x, _)| x == g) => json(200, &group(g)),
        ["apis", g, "v1"] if GROUPS.iter().any(|(x, _)| x == g) => json(200, &resources(g, "v1")),
        ["openapi", "v3"] => json(200, &openapi_root()),
        ["openapi", "v3", "api", "v1"] => json(200, &openapi_gv("", "v1")),
        ["openapi", "v3", "apis", g, "v1"] if GROUPS.iter().any(|(x, _)| x == g) => {
            json(200, &openapi_gv(g, "v1"))
        }
        _ => unknown(ctx),
    }
}

/// `/openapi/v3`: where each group-version document lives. kubectl only reads these to learn
/// that the server validates fields itself (PATCH operations with a `fieldValidation` param).
fn openapi_root() -> serde_json::Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        serde_json::json!({"serverRelativeURL": "/openapi/v3/api/v1?hash=testplane"}),
    );
    for (g, _) in GROUPS {
        let p = format!("apis/{g}/v1");
        paths.insert(
            p.clone(),
            serde_json::json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=testplane")}),
        );
    }
    serde_json::json!({ "paths": paths })
}

/// A minimal OpenAPI v3 document for one group-version: one PATCH operation per kind,
/// tagged with its GVK and the `fieldValidation` query parameter.
fn openapi_gv(g: &str, v: &str) -> serde_json::Value {
    let mut paths = serde_json::Map::new();
    for k in Kind::ALL {
        let i = k.info();
        if i.group != g || i.version != v {
            continue;
        }
        let prefix = if g.is_empty() {
            format!("/api/{v}")
        } else {
            format!("/apis/{g}/{v}")
        };
        let ns = if i.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let path = format!("{prefix}{ns}/{}/{{name}}", i.resource);
        let gvk = serde_json::json!({"group": g, "version": v, "kind": i.kind});
        let op = serde_json::json!({
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "responses": {},
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
        });
        paths.insert(path, serde_json::json!({ "patch": op }));
    }
    serde_json::json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

fn version() -> Info {
    Info {
        major: "1".into(),
        minor: "33".into(),
        git_version: "v1.33.0-testplane".into(),
        git_commit: "0000000000000000000000000000000000000000".into(),
        git_tree_state: "clean".into(),
        build_date: "2025-04-23T00:00:00Z".into(),
        go_version: "go1.24.2".into(),
        compiler: "gc".into(),
        platform: "linux/amd64".into(),
        ..Default::default()
    }
}

fn group(g: &str) -> APIGroup {
    let v = GroupVersionForDiscovery {
        group_version: format!("{g}/v1"),
        version: "v1".into(),
    };
    APIGroup {
        name: g.into(),
        preferred_version: Some(v.clone()),
        versions: vec![v],
        ..Default::default()
    }
}

fn resources(g: &str, v: &str) -> APIResourceList {
    let mut out = vec![];
    for k in Kind::ALL {
        let i = k.info();
        if i.group != g || i.version != v {
            continue;
        }
        let res = |name: String, verbs: &[&str]| APIResource {
            name,
            singular_name: i.kind.to_ascii_lowercase(),
            namespaced: i.namespaced,
            kind: i.kind.into(),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            short_names: (!i.short_names.is_empty())
                .then(|| i.short_names.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        out.push(res(i.resource.into(), i.verbs));
        if k == Kind::Csr {
            for sub in ["approval", "status"] {
                let mut r = res(format!("{}/{sub}", i.resource), &["get", "patch", "update"]);
                r.short_names = None;
                out.push(r);
            }
        }
    }
    for (_, virt) in GROUPS.iter().filter(|(x, _)| *x == g) {
        for (name, kind) in virt.iter() {
            out.push(APIResource {
                name: name.to_string(),
                singular_name: kind.to_ascii_lowercase(),
                kind: kind.to_string(),
                verbs: vec!["create".into()],
                ..Default::default()
            });
        }
    }
    let group_version = if g.is_empty() {
        v.to_string()
    } else {
        format!("{g}/{v}")
    };
    APIResourceList {
        group_version,
        resources: out,
    }
}

/// POST selfsubjectreviews / selfsubjectaccessreviews.
pub fn review(ctx: &Ctx, resource: &str) -> Result<Resp, ApiError> {
    let u = &ctx.user;
    match resource {
        "selfsubjectreviews" => Ok(json(
            201,
            &SelfSubjectReview {
                status: Some(SelfSubjectReviewStatus {
                    user_info: Some(UserInfo {
                        username: Some(u.name.clone()),
                        uid: (!u.uid.is_empty()).then(|| u.uid.clone()),
                        groups: Some(u.groups.clone()),
                        extra: None,
                    }),
                }),
                ..Default::default()
            },
        )),
        _ => {
            let body = if ctx.content_type.contains("protobuf") {
                super::proto::decode_ssar(&ctx.body).ok_or_else(|| {
                    ApiError::bad_request("unable to decode protobuf SelfSubjectAccessReview")
                })?
            } else {
                body_json(ctx)?
            };
            let mut sar: SelfSubjectAccessReview =
                serde_json::from_value(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let attrs = if let Some(r) = &sar.spec.resource_attributes {
                let s = |o: &Option<String>| o.clone().unwrap_or_default();
                Attrs::resource(
                    &s(&r.verb),
                    &s(&r.group),
                    &s(&r.resource),
                    &s(&r.subresource),
                    &s(&r.namespace),
                    &s(&r.name),
                )
            } else if let Some(n) = &sar.spec.non_resource_attributes {
                Attrs {
                    verb: n.verb.clone().unwrap_or_default(),
                    path: n.path.clone(),
                    ..Default::default()
                }
            } else {
                return Err(ApiError::invalid(
                    Kind::Csr,
                    "",
                    vec![("spec.resourceAttributes".into(), "FieldValueRequired", "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into())],
                ));
            };
            let d = rbac::authorize(&ctx.shared.store, u, &attrs);
            sar.status = Some(SubjectAccessReviewStatus {
                allowed: d == Decision::Allow,
                reason: match &d {
                    Decision::Allow => Some("allowed by testplane RBAC".into()),
                    Decision::Deny(r) => r.clone(),
                },
                ..Default::default()
            });
            Ok(json(201, &sar))
        }
    }
}
