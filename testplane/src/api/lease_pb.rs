//! Leases as protobuf, both ways, as the kubelet and bootlet send them: a PUT/POST body in
//! the `k8s\0` + `runtime.Unknown` envelope decoded to the JSON the store keeps, and the
//! answer (the Lease, or the Status of an error) encoded as protobuf when the request's
//! `Accept` puts protobuf first. The `refuseProtobuf` fault answers such a body with 415
//! instead, as a server without protobuf for the type does. Written from the Go types
//! (k8s-pb's messages), not from bootlet's conversion.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use k8s_pb::api::coordination::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{json, Map, Value};

use super::{ApiError, Ctx, Resp};

const MAGIC: &[u8] = b"k8s\x00";
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The request body is a protobuf one.
pub fn is_protobuf(ctx: &Ctx) -> bool {
    ctx.content_type.starts_with(MEDIA_TYPE)
}

/// The client asks for protobuf before anything else (client-go:
/// `application/vnd.kubernetes.protobuf, application/json`), and `refuseProtobuf` is off
/// (a server without protobuf for the type answers the JSON the `Accept` also allows).
pub fn wants_protobuf(ctx: &Ctx) -> bool {
    ctx.accept.trim_start().starts_with(MEDIA_TYPE) && !ctx.shared.faults.refuses_protobuf()
}

/// A protobuf Lease body as the JSON the store keeps, or the 415 of `refuseProtobuf`.
pub fn request_lease(ctx: &Ctx) -> Result<Value, ApiError> {
    if ctx.shared.faults.refuses_protobuf() {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {})", ctx.content_type),
        ));
    }
    decode_lease(&ctx.body).ok_or_else(|| {
        ApiError::bad_request("unable to decode protobuf Lease in a runtime.Unknown envelope")
    })
}

fn unwrap(body: &[u8], kind: &str) -> Option<Vec<u8>> {
    let unknown = Unknown::decode(body.strip_prefix(MAGIC)?).ok()?;
    (unknown.type_meta?.kind? == kind).then_some(())?;
    unknown.raw
}

fn wrap(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC, &unknown.encode_to_vec()].concat()
}

/// RFC 3339 at microseconds (a MicroTime), or seconds (a Time); the zero time is unset.
fn time(seconds: Option<i64>, nanos: Option<i32>, micros: bool) -> Option<Value> {
    let (s, n) = (seconds.unwrap_or(0), nanos.unwrap_or(0));
    if s == 0 && n == 0 {
        return None;
    }
    let t = jiff::Timestamp::new(s, n).ok()?;
    let f = if micros {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Some(t.strftime(f).to_string().into())
}

fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    match v {
        Some(Value::String(s)) if s.is_empty() => {}
        Some(v) => {
            m.insert(k.into(), v);
        }
        None => {}
    }
}

/// A protobuf Lease as JSON; `None` when it is not one.
pub fn decode_lease(body: &[u8]) -> Option<Value> {
    let lease = pb::Lease::decode(unwrap(body, "Lease")?.as_slice()).ok()?;
    let m = lease.metadata.unwrap_or_default();
    let mut md = Map::new();
    put(&mut md, "name", m.name.map(Value::from));
    put(&mut md, "namespace", m.namespace.map(Value::from));
    put(&mut md, "uid", m.uid.map(Value::from));
    put(
        &mut md,
        "resourceVersion",
        m.resource_version.map(Value::from),
    );
    let ts = m.creation_timestamp.unwrap_or_default();
    put(
        &mut md,
        "creationTimestamp",
        time(ts.seconds, ts.nanos, false),
    );
    if !m.labels.is_empty() {
        md.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        md.insert("annotations".into(), json!(m.annotations));
    }
    let refs: Vec<Value> = m
        .owner_references
        .into_iter()
        .map(|r| {
            let mut o = Map::new();
            put(&mut o, "apiVersion", r.api_version.map(Value::from));
            put(&mut o, "kind", r.kind.map(Value::from));
            put(&mut o, "name", r.name.map(Value::from));
            put(&mut o, "uid", r.uid.map(Value::from));
            put(&mut o, "controller", r.controller.map(Value::from));
            put(
                &mut o,
                "blockOwnerDeletion",
                r.block_owner_deletion.map(Value::from),
            );
            Value::Object(o)
        })
        .collect();
    if !refs.is_empty() {
        md.insert("ownerReferences".into(), refs.into());
    }
    let mut spec = Map::new();
    if let Some(s) = lease.spec {
        put(
            &mut spec,
            "holderIdentity",
            s.holder_identity.map(Value::from),
        );
        put(
            &mut spec,
            "leaseDurationSeconds",
            s.lease_duration_seconds.map(Value::from),
        );
        let t = |t: Option<meta::MicroTime>| t.and_then(|t| time(t.seconds, t.nanos, true));
        put(&mut spec, "acquireTime", t(s.acquire_time));
        put(&mut spec, "renewTime", t(s.renew_time));
        put(
            &mut spec,
            "leaseTransitions",
            s.lease_transitions.map(Value::from),
        );
        put(&mut spec, "strategy", s.strategy.map(Value::from));
        put(
            &mut spec,
            "preferredHolder",
            s.preferred_holder.map(Value::from),
        );
    }
    Some(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": md,
        "spec": spec,
    }))
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn int(v: &Value) -> Option<i32> {
    v.as_i64().and_then(|i| i32::try_from(i).ok())
}

fn stamp(v: &Value) -> Option<(i64, i32)> {
    let t: jiff::Timestamp = v.as_str()?.parse().ok()?;
    Some((t.as_second(), t.subsec_nanosecond()))
}

/// The stored Lease (JSON) as protobuf, written as Go writes it.
pub fn encode_lease(v: &Value) -> Vec<u8> {
    let md = &v["metadata"];
    let strings = |k: &str| -> std::collections::BTreeMap<String, String> {
        serde_json::from_value(md[k].clone()).unwrap_or_default()
    };
    let created = stamp(&md["creationTimestamp"]);
    let metadata = meta::ObjectMeta {
        name: Some(text(&md["name"]).unwrap_or_default()),
        generate_name: Some(String::new()),
        namespace: Some(text(&md["namespace"]).unwrap_or_default()),
        self_link: Some(String::new()),
        uid: Some(text(&md["uid"]).unwrap_or_default()),
        resource_version: Some(text(&md["resourceVersion"]).unwrap_or_default()),
        generation: Some(0),
        creation_timestamp: Some(meta::Time {
            seconds: created.map(|c| c.0),
            nanos: created.map(|c| c.1),
        }),
        labels: strings("labels"),
        annotations: strings("annotations"),
        owner_references: md["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| meta::OwnerReference {
                api_version: text(&r["apiVersion"]),
                kind: text(&r["kind"]),
                name: text(&r["name"]),
                uid: text(&r["uid"]),
                controller: r["controller"].as_bool(),
                block_owner_deletion: r["blockOwnerDeletion"].as_bool(),
            })
            .collect(),
        ..Default::default()
    };
    let s = &v["spec"];
    let micro = |k: &str| {
        stamp(&s[k]).map(|(seconds, nanos)| meta::MicroTime {
            seconds: Some(seconds),
            nanos: Some(nanos),
        })
    };
    let spec = pb::LeaseSpec {
        holder_identity: text(&s["holderIdentity"]),
        lease_duration_seconds: int(&s["leaseDurationSeconds"]),
        acquire_time: micro("acquireTime"),
        renew_time: micro("renewTime"),
        lease_transitions: int(&s["leaseTransitions"]),
        strategy: text(&s["strategy"]),
        preferred_holder: text(&s["preferredHolder"]),
    };
    let lease = pb::Lease {
        metadata: Some(metadata),
        spec: Some(spec),
    };
    wrap("coordination.k8s.io/v1", "Lease", lease.encode_to_vec())
}

/// A metav1.Status (JSON) as protobuf.
pub fn encode_status(v: &Value) -> Vec<u8> {
    let d = &v["details"];
    let details = d.is_object().then(|| meta::StatusDetails {
        name: text(&d["name"]),
        group: text(&d["group"]),
        kind: text(&d["kind"]),
        uid: text(&d["uid"]),
        retry_after_seconds: int(&d["retryAfterSeconds"]),
        causes: d["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| meta::StatusCause {
                reason: text(&c["reason"]),
                message: text(&c["message"]),
                field: text(&c["field"]),
            })
            .collect(),
    });
    let status = meta::Status {
        metadata: Some(Default::default()),
        status: text(&v["status"]),
        message: text(&v["message"]),
        reason: text(&v["reason"]),
        details,
        code: int(&v["code"]),
    };
    wrap("v1", "Status", status.encode_to_vec())
}

/// A Lease answer (JSON from the handlers) re-encoded as protobuf: the Lease on 2xx, the
/// Status otherwise. Status code and headers stay.
pub async fn answer(resp: Resp) -> Resp {
    let (mut head, body) = resp.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
        return hyper::Response::from_parts(head, Full::new(bytes).boxed());
    };
    let out = if head.status.is_success() && v["kind"] == "Lease" {
        encode_lease(&v)
    } else if v["kind"] == "Status" {
        encode_status(&v)
    } else {
        return hyper::Response::from_parts(head, Full::new(bytes).boxed());
    };
    head.headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
    head.headers.remove(hyper::header::CONTENT_LENGTH);
    hyper::Response::from_parts(head, Full::new(Bytes::from(out)).boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_round_trips_through_the_go_types() {
        let stored = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "n1", "namespace": "kube-node-lease", "uid": "u-1",
                "resourceVersion": "7", "creationTimestamp": "2026-12-01T10:00:00Z",
                "labels": {"a": "b"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "n-1"}],
            },
            "spec": {
                "holderIdentity": "n1", "leaseDurationSeconds": 40,
                "renewTime": "2026-12-01T10:05:07.123456Z",
            },
        });
        let bytes = encode_lease(&stored);
        assert_eq!(&bytes[..4], b"k8s\x00");
        assert_eq!(decode_lease(&bytes).unwrap(), stored);
        assert!(decode_lease(b"{}").is_none());
        assert!(decode_lease(&encode_status(&json!({"kind": "Status"}))).is_none());
    }
}
