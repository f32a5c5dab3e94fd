//! Generic resource verbs (get, list, create, update, patch, delete) over the store, with every
//! body round-tripped through its k8s-openapi type, plus the Lease evidence events.
//! CSR-specific rules are in `csr.rs`, watches in `watch.rs`.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status, StatusDetails};
use serde_json::Value;

use super::select::{field_filter, matches};
use super::{csr, json, lease_pb, unknown, watch, ApiError, Ctx, Resp};
use crate::store::{meta_mut, meta_str, Kind};
use crate::Event;

/// Run `$body` with `$t` bound to the k8s-openapi type of `$kind`.
macro_rules! by_kind {
    ($kind:expr, $t:ident => $body:expr) => {
        match $kind {
            Kind::Csr => {
                type $t = CertificateSigningRequest;
                $body
            }
            Kind::Lease => {
                type $t = Lease;
                $body
            }
            Kind::Node => {
                type $t = Node;
                $body
            }
            Kind::Secret => {
                type $t = Secret;
                $body
            }
            Kind::Namespace => {
                type $t = Namespace;
                $body
            }
            Kind::ClusterRole => {
                type $t = ClusterRole;
                $body
            }
            Kind::ClusterRoleBinding => {
                type $t = ClusterRoleBinding;
                $body
            }
        }
    };
}

/// Which verbs each kind serves (anything else is the strict 404).
fn allowed(kind: Kind, verb: &str, sub: &str) -> bool {
    if !sub.is_empty() {
        return kind == Kind::Csr
            && matches!(sub, "approval" | "status")
            && matches!(verb, "get" | "update");
    }
    let verbs: &[&str] = match kind {
        Kind::Namespace => &["get", "list", "watch"],
        Kind::ClusterRole | Kind::ClusterRoleBinding => {
            &["get", "list", "watch", "create", "delete"]
        }
        Kind::Secret => &["get", "list", "watch", "create", "update", "delete"],
        Kind::Csr => &["get", "list", "watch", "create", "update", "delete"],
        Kind::Lease | Kind::Node => &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    };
    verbs.contains(&verb)
}

pub async fn serve(
    ctx: &Ctx,
    verb: &str,
    kind: Kind,
    ns: &str,
    name: &str,
    sub: &str,
) -> Result<Resp, ApiError> {
    if !allowed(kind, verb, sub) {
        return Ok(unknown(ctx));
    }
    // Leases speak protobuf too (the kubelet's and bootlet's format): the handlers work
    // in JSON and the answer is re-encoded when the client asks for protobuf first.
    if kind == Kind::Lease && lease_pb::wants_protobuf(ctx) && verb != "watch" {
        let resp = serve_json(ctx, verb, kind, ns, name, sub)
            .await
            .unwrap_or_else(ApiError::into_resp);
        return Ok(lease_pb::answer(resp).await);
    }
    serve_json(ctx, verb, kind, ns, name, sub).await
}

async fn serve_json(
    ctx: &Ctx,
    verb: &str,
    kind: Kind,
    ns: &str,
    name: &str,
    sub: &str,
) -> Result<Resp, ApiError> {
    match verb {
        "get" => get(ctx, kind, ns, name),
        "list" => list(ctx, kind, ns),
        "watch" => watch::serve(ctx, kind, ns, name),
        "create" => create(ctx, kind, ns),
        "update" => update(ctx, kind, ns, name, sub),
        "patch" => patch(ctx, kind, ns, name),
        "delete" => delete(ctx, kind, ns, name),
        _ => Ok(unknown(ctx)),
    }
}

/// Decode into the k8s-openapi type and back: unknown fields dropped, wrong kinds refused.
pub fn normalize(kind: Kind, v: Value) -> Result<Value, ApiError> {
    by_kind!(kind, T => serde_json::from_value::<T>(v)
        .map(|t| crate::to_value(&t))
        .map_err(|e| ApiError::bad_request(format!("request body is not a valid {}: {e}", kind.info().kind))))
}

pub fn body_json(ctx: &Ctx) -> Result<Value, ApiError> {
    if ctx.content_type.contains("protobuf") || ctx.content_type.contains("yaml") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json (got {})", ctx.content_type),
        ));
    }
    serde_json::from_slice(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))
}

fn get(ctx: &Ctx, kind: Kind, ns: &str, name: &str) -> Result<Resp, ApiError> {
    let obj = ctx
        .shared
        .store
        .get(kind, ns, name)
        .ok_or_else(|| ApiError::not_found(kind, name))?;
    // Node authorizer: a node reads only the CSRs it filed itself.
    if let (Kind::Csr, Some(_)) = (kind, ctx.user.node_name()) {
        if obj["spec"]["username"].as_str() != Some(ctx.user.name.as_str()) {
            return Err(node_forbidden(
                ctx,
                kind,
                "get",
                name,
                "can only get its own certificate signing requests",
            ));
        }
    }
    Ok(json(200, &obj))
}

fn list(ctx: &Ctx, kind: Kind, ns: &str) -> Result<Resp, ApiError> {
    let filter = field_filter(ctx)?;
    let (items, rv) = ctx.shared.store.list(kind, (!ns.is_empty()).then_some(ns));
    let items: Vec<Value> = items.into_iter().filter(|o| matches(o, &filter)).collect();
    let list = by_kind!(kind, T => crate::to_value(&k8s_openapi::List::<T> {
        items: items.into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect(),
        metadata: ListMeta { resource_version: Some(rv.to_string()), ..Default::default() },
    }));
    Ok(json(200, &list))
}

fn random_suffix() -> String {
    use rand::Rng;
    const A: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = rand::rng();
    (0..5)
        .map(|_| A[r.random_range(0..A.len())] as char)
        .collect()
}

fn check_namespace(ctx: &Ctx, kind: Kind, ns: &str, obj: &mut Value) -> Result<(), ApiError> {
    if !kind.info().namespaced {
        return Ok(());
    }
    let given = meta_str(obj, "namespace");
    if !given.is_empty() && given != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if ctx.shared.store.get(Kind::Namespace, "", ns).is_none() {
        return Err(ApiError::not_found(Kind::Namespace, ns));
    }
    meta_mut(obj).insert("namespace".into(), ns.into());
    Ok(())
}

fn create(ctx: &Ctx, kind: Kind, ns: &str) -> Result<Resp, ApiError> {
    // `kubectl create clusterrolebinding` posts protobuf (doctor's remediation for a lost
    // bootstrap binding); every other create is JSON.
    let mut obj = if kind == Kind::ClusterRoleBinding && ctx.content_type.contains("protobuf") {
        super::proto::decode_cluster_role_binding(&ctx.body)
            .ok_or_else(|| ApiError::bad_request("unable to decode protobuf ClusterRoleBinding"))?
    } else if kind == Kind::Lease && lease_pb::is_protobuf(ctx) {
        lease_pb::request_lease(ctx)?
    } else {
        body_json(ctx)?
    };
    if meta_str(&obj, "name").is_empty() {
        let gen = meta_str(&obj, "generateName").to_string();
        if gen.is_empty() {
            return Err(ApiError::invalid(
                kind,
                "",
                vec![(
                    "metadata.name".into(),
                    "FieldValueRequired",
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
        meta_mut(&mut obj).insert("name".into(), format!("{gen}{}", random_suffix()).into());
    }
    check_namespace(ctx, kind, ns, &mut obj)?;
    let name = meta_str(&obj, "name").to_string();
    // NodeRestriction: a node may create only its own Node and Lease.
    if let (Kind::Node | Kind::Lease, Some(node)) = (kind, ctx.user.node_name()) {
        if name != node {
            let why = format!(
                "node \"{node}\" is not allowed to create {} \"{name}\"",
                kind.info().resource
            );
            return Err(node_forbidden(ctx, kind, "create", &name, &why));
        }
    }
    let obj = match kind {
        Kind::Csr => csr::prepare_create(ctx, normalize(kind, obj)?)?,
        _ => normalize(kind, obj)?,
    };
    let stored = ctx
        .shared
        .store
        .create(kind, ns, obj)
        .map_err(|e| ApiError::from_store(e, kind, &name))?;
    let user = ctx.user.name.clone();
    match kind {
        Kind::Csr => {
            let signer = stored["spec"]["signerName"]
                .as_str()
                .unwrap_or("")
                .to_string();
            ctx.shared.emit(Event::CsrCreated { name, user, signer })
        }
        Kind::Lease => ctx.shared.emit(Event::LeaseCreated {
            name,
            user,
            conn: ctx.conn,
        }),
        _ => {}
    }
    Ok(json(201, &stored))
}

fn check_name(obj: &Value, name: &str) -> Result<(), ApiError> {
    let got = meta_str(obj, "name");
    if got != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({got}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

fn update(ctx: &Ctx, kind: Kind, ns: &str, name: &str, sub: &str) -> Result<Resp, ApiError> {
    let mut obj = if kind == Kind::Csr && !sub.is_empty() && ctx.content_type.contains("protobuf") {
        super::proto::decode_csr(&ctx.body).ok_or_else(|| {
            ApiError::bad_request("unable to decode protobuf CertificateSigningRequest")
        })?
    } else if kind == Kind::Lease && lease_pb::is_protobuf(ctx) {
        lease_pb::request_lease(ctx)?
    } else {
        body_json(ctx)?
    };
    check_name(&obj, name)?;
    check_namespace(ctx, kind, ns, &mut obj)?;
    let obj = normalize(kind, obj)?;
    if kind == Kind::Csr {
        return csr::update(ctx, name, sub, obj);
    }
    if kind == Kind::Lease && ctx.shared.faults.take_lease_conflict() {
        return Err(ApiError::conflict(kind, name));
    }
    // Leases allow create-on-update (leaseStrategy.AllowCreateOnUpdate is true), as
    // kube-apiserver's store does it: a UID in the body is a storage precondition, which a
    // missing object fails (409); without one the system fields (resourceVersion, UID,
    // creationTimestamp) are wiped and the object is created.
    let create = kind == Kind::Lease && ctx.shared.store.get(kind, ns, name).is_none();
    if create {
        let uid = meta_str(&obj, "uid").to_string();
        if !uid.is_empty() {
            return Err(ApiError::uid_precondition(kind, name, &uid));
        }
        let mut obj = obj;
        if let Some(meta) = obj["metadata"].as_object_mut() {
            for field in ["resourceVersion", "creationTimestamp", "generation"] {
                meta.remove(field);
            }
        }
        let stored = ctx
            .shared
            .store
            .create(kind, ns, obj)
            .map_err(|e| ApiError::from_store(e, kind, name))?;
        let (name, user, conn) = (name.to_string(), ctx.user.name.clone(), ctx.conn);
        ctx.shared.emit(Event::LeaseCreated { name, user, conn });
        return Ok(json(201, &stored));
    }
    let stored = ctx
        .shared
        .store
        .update(kind, ns, obj)
        .map_err(|e| ApiError::from_store(e, kind, name))?;
    lease_renewed(ctx, kind, name, &stored);
    Ok(json(200, &stored))
}

fn lease_renewed(ctx: &Ctx, kind: Kind, name: &str, stored: &Value) {
    if kind != Kind::Lease {
        return;
    }
    let renew_time = serde_json::from_value::<Lease>(stored.clone())
        .ok()
        .and_then(|l| l.spec?.renew_time)
        .map(|t| t.0);
    ctx.shared.emit(Event::LeaseRenewed {
        name: name.into(),
        user: ctx.user.name.clone(),
        renew_time,
        conn: ctx.conn,
    });
}

/// RFC 7386 JSON merge patch (strategic merge patches of these kinds behave the same).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let t = target.as_object_mut().expect("just made an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn patch(ctx: &Ctx, kind: Kind, ns: &str, name: &str) -> Result<Resp, ApiError> {
    if ctx.content_type.contains("json-patch+json") || ctx.content_type.contains("apply-patch") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("unsupported patch type {}", ctx.content_type),
        ));
    }
    let p = body_json(ctx)?;
    if kind == Kind::Lease && ctx.shared.faults.take_lease_conflict() {
        return Err(ApiError::conflict(kind, name));
    }
    let mut bad = None;
    let stored = ctx
        .shared
        .store
        .update_with(kind, ns, name, |old| {
            let want = meta_str(&p, "resourceVersion");
            if !want.is_empty() && want != meta_str(old, "resourceVersion") {
                return Err(crate::store::StoreError::Conflict);
            }
            let mut v = old.clone();
            merge_patch(&mut v, &p);
            for k in ["name", "namespace", "uid", "creationTimestamp"] {
                meta_mut(&mut v).insert(k.into(), old["metadata"][k].clone());
            }
            normalize(kind, v).map_err(|e| {
                bad = Some(e);
                crate::store::StoreError::Conflict
            })
        })
        .map_err(|e| {
            bad.take()
                .unwrap_or_else(|| ApiError::from_store(e, kind, name))
        })?;
    lease_renewed(ctx, kind, name, &stored);
    Ok(json(200, &stored))
}

fn delete(ctx: &Ctx, kind: Kind, ns: &str, name: &str) -> Result<Resp, ApiError> {
    let old = ctx
        .shared
        .store
        .delete(kind, ns, name)
        .map_err(|e| ApiError::from_store(e, kind, name))?;
    let i = kind.info();
    let st = Status {
        status: Some("Success".into()),
        details: Some(StatusDetails {
            name: Some(name.into()),
            group: Some(i.group.into()),
            kind: Some(i.resource.into()),
            uid: Some(meta_str(&old, "uid").into()),
            ..Default::default()
        }),
        metadata: ListMeta::default(),
        ..Default::default()
    };
    Ok(json(200, &st))
}

fn node_forbidden(ctx: &Ctx, kind: Kind, verb: &str, name: &str, why: &str) -> ApiError {
    let i = kind.info();
    let a = crate::rbac::Attrs::resource(verb, i.group, i.resource, "", "", name);
    ApiError::new(
        403,
        "Forbidden",
        format!("{}: {why}", a.forbidden_message(&ctx.user.name)),
    )
}
