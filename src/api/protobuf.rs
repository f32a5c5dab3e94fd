//! The Kubernetes protobuf wire format for the Lease loop's objects (pure): the `k8s\0`
//! envelope around a `runtime.Unknown`, and the conversion between the k8s-openapi types the
//! rest of bootlet uses (Lease, Status) and k8s-pb's generated messages. No IO, no clock.
//!
//! Fields Go writes even when empty (the non-pointer strings of ObjectMeta, its generation
//! and creationTimestamp, the envelope's contentEncoding/contentType) are written the same
//! way, so a Lease encodes to the bytes client-go would send; read back, an empty one is
//! `None`, as the JSON the server would have sent omits it. managedFields are neither sent
//! nor read: on an update the server keeps the ones it has.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    MicroTime, ObjectMeta, OwnerReference, Status, StatusCause, StatusDetails, Time,
};
use k8s_pb::api::coordination::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;

/// The 4 bytes before every protobuf body the API server reads or writes.
pub const MAGIC: &[u8; 4] = b"k8s\0";
/// The media type of such a body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";

/// Why a body is not the protobuf we expected.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("the body does not start with the k8s\\0 protobuf magic")]
    NoMagic,
    #[error("the envelope is not a runtime.Unknown")]
    Envelope(#[source] prost::DecodeError),
    #[error("the envelope holds {got}, not {want}")]
    Kind { want: &'static str, got: String },
    #[error("the envelope's {0} body is not protobuf")]
    Encoding(String),
    #[error("the {kind} in the envelope does not decode")]
    Body {
        kind: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    #[error("{field} is not a valid time")]
    Time { field: &'static str },
}

/// How the Lease goes on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeaseWire {
    /// `application/vnd.kubernetes.protobuf`, as the kubelet sends it (the default).
    #[default]
    Protobuf,
    /// `application/json`: what a connection falls back to once a server refuses protobuf
    /// (406/415); a test build can start with it (`--test-lease-content-type json`).
    Json,
}

// === impl LeaseWire ===

/// `--test-lease-content-type` (`cli/hooks.rs`).
#[cfg(feature = "test-hooks")]
impl std::str::FromStr for LeaseWire {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "protobuf" => Ok(LeaseWire::Protobuf),
            "json" => Ok(LeaseWire::Json),
            _ => Err(format!("{s:?}: expected json or protobuf")),
        }
    }
}

/// `k8s\0` + `runtime.Unknown{typeMeta, raw, contentEncoding: "", contentType: ""}`.
pub fn wrap(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    unknown.encode(&mut out).expect("a Vec grows as needed");
    out
}

/// The `kind` and raw bytes inside an envelope.
pub fn unwrap(bytes: &[u8]) -> Result<(String, Vec<u8>), ProtoError> {
    let body = bytes.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let unknown = Unknown::decode(body).map_err(ProtoError::Envelope)?;
    let encoding = unknown.content_encoding.unwrap_or_default();
    let inner = unknown.content_type.unwrap_or_default();
    if !encoding.is_empty() || !(inner.is_empty() || inner == MEDIA_TYPE) {
        return Err(ProtoError::Encoding(format!("{inner}{encoding}")));
    }
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw.unwrap_or_default()))
}

/// A Lease as the API server reads it.
pub fn encode_lease(lease: &Lease) -> Vec<u8> {
    wrap(
        LEASE_API_VERSION,
        "Lease",
        lease_to_pb(lease).encode_to_vec(),
    )
}

/// A Lease the API server wrote.
pub fn decode_lease(bytes: &[u8]) -> Result<Lease, ProtoError> {
    let (kind, raw) = unwrap(bytes)?;
    if kind != "Lease" {
        return Err(ProtoError::Kind {
            want: "Lease",
            got: kind,
        });
    }
    let lease = pb::Lease::decode(raw.as_slice()).map_err(|source| ProtoError::Body {
        kind: "Lease",
        source,
    })?;
    lease_from_pb(lease)
}

/// An error answer (a `Status` in the envelope) as the type the typed errors keep.
pub fn decode_status(bytes: &[u8]) -> Result<Status, ProtoError> {
    let (kind, raw) = unwrap(bytes)?;
    if kind != "Status" {
        return Err(ProtoError::Kind {
            want: "Status",
            got: kind,
        });
    }
    let s = pbmeta::Status::decode(raw.as_slice()).map_err(|source| ProtoError::Body {
        kind: "Status",
        source,
    })?;
    Ok(Status {
        code: s.code,
        message: s.message,
        reason: s.reason,
        status: s.status,
        details: s.details.map(|d| StatusDetails {
            name: d.name.filter(|s| !s.is_empty()),
            group: d.group.filter(|s| !s.is_empty()),
            kind: d.kind.filter(|s| !s.is_empty()),
            uid: d.uid.filter(|s| !s.is_empty()),
            retry_after_seconds: d.retry_after_seconds.filter(|&s| s != 0),
            causes: some_vec(
                d.causes
                    .into_iter()
                    .map(|c| StatusCause {
                        reason: c.reason.filter(|s| !s.is_empty()),
                        message: c.message.filter(|s| !s.is_empty()),
                        field: c.field.filter(|s| !s.is_empty()),
                    })
                    .collect(),
            ),
        }),
        metadata: Default::default(),
    })
}

fn lease_to_pb(lease: &Lease) -> pb::Lease {
    let m = &lease.metadata;
    let text = |s: &Option<String>| Some(s.clone().unwrap_or_default());
    let metadata = pbmeta::ObjectMeta {
        name: text(&m.name),
        generate_name: text(&m.generate_name),
        namespace: text(&m.namespace),
        self_link: text(&m.self_link),
        uid: text(&m.uid),
        resource_version: text(&m.resource_version),
        generation: Some(m.generation.unwrap_or_default()),
        creation_timestamp: Some(m.creation_timestamp.as_ref().map_or_else(
            pbmeta::Time::default,
            |t| pbmeta::Time {
                seconds: Some(t.0.as_second()),
                nanos: Some(t.0.subsec_nanosecond()),
            },
        )),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| pbmeta::Time {
            seconds: Some(t.0.as_second()),
            nanos: Some(t.0.subsec_nanosecond()),
        }),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        owner_references: m
            .owner_references
            .iter()
            .flatten()
            .map(|r| pbmeta::OwnerReference {
                api_version: Some(r.api_version.clone()),
                kind: Some(r.kind.clone()),
                name: Some(r.name.clone()),
                uid: Some(r.uid.clone()),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
        managed_fields: Vec::new(),
    };
    let spec = lease.spec.as_ref().map(|s| pb::LeaseSpec {
        holder_identity: s.holder_identity.clone(),
        lease_duration_seconds: s.lease_duration_seconds,
        acquire_time: s.acquire_time.as_ref().map(|t| micro(t.0)),
        renew_time: s.renew_time.as_ref().map(|t| micro(t.0)),
        lease_transitions: s.lease_transitions,
        strategy: s.strategy.clone(),
        preferred_holder: s.preferred_holder.clone(),
    });
    pb::Lease {
        metadata: Some(metadata),
        // Go writes the spec even when it is empty.
        spec: Some(spec.unwrap_or_default()),
    }
}

/// A MicroTime at microsecond precision, as Go's `ProtoMicroTime` truncates it.
fn micro(t: jiff::Timestamp) -> pbmeta::MicroTime {
    pbmeta::MicroTime {
        seconds: Some(t.as_second()),
        nanos: Some(t.subsec_nanosecond() / 1000 * 1000),
    }
}

/// A timestamp that Go sent; the empty message (the zero time) is "unset".
fn timestamp(
    seconds: Option<i64>,
    nanos: Option<i32>,
    field: &'static str,
) -> Result<Option<jiff::Timestamp>, ProtoError> {
    match (seconds.unwrap_or(0), nanos.unwrap_or(0)) {
        (0, 0) => Ok(None),
        (s, n) => jiff::Timestamp::new(s, n)
            .map(Some)
            .map_err(|_| ProtoError::Time { field }),
    }
}

fn lease_from_pb(lease: pb::Lease) -> Result<Lease, ProtoError> {
    let m = lease.metadata.unwrap_or_default();
    let text = |s: Option<String>| s.filter(|s| !s.is_empty());
    let time = |t: Option<pbmeta::Time>, field| match t {
        Some(t) => timestamp(t.seconds, t.nanos, field).map(|t| t.map(Time)),
        None => Ok(None),
    };
    let metadata = ObjectMeta {
        name: text(m.name),
        generate_name: text(m.generate_name),
        namespace: text(m.namespace),
        self_link: text(m.self_link),
        uid: text(m.uid),
        resource_version: text(m.resource_version),
        generation: m.generation.filter(|&g| g != 0),
        creation_timestamp: time(m.creation_timestamp, "metadata.creationTimestamp")?,
        deletion_timestamp: time(m.deletion_timestamp, "metadata.deletionTimestamp")?,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: some_map(m.labels),
        annotations: some_map(m.annotations),
        owner_references: some_vec(
            m.owner_references
                .into_iter()
                .map(|r| OwnerReference {
                    api_version: r.api_version.unwrap_or_default(),
                    kind: r.kind.unwrap_or_default(),
                    name: r.name.unwrap_or_default(),
                    uid: r.uid.unwrap_or_default(),
                    controller: r.controller,
                    block_owner_deletion: r.block_owner_deletion,
                })
                .collect(),
        ),
        finalizers: some_vec(m.finalizers),
        managed_fields: None,
    };
    let micro = |t: Option<pbmeta::MicroTime>, field| match t {
        Some(t) => timestamp(t.seconds, t.nanos, field).map(|t| t.map(MicroTime)),
        None => Ok(None),
    };
    let spec = match lease.spec {
        Some(s) => Some(LeaseSpec {
            holder_identity: s.holder_identity,
            lease_duration_seconds: s.lease_duration_seconds,
            acquire_time: micro(s.acquire_time, "spec.acquireTime")?,
            renew_time: micro(s.renew_time, "spec.renewTime")?,
            lease_transitions: s.lease_transitions,
            strategy: s.strategy,
            preferred_holder: s.preferred_holder,
        }),
        None => None,
    };
    Ok(Lease { metadata, spec })
}

fn some_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn some_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

#[cfg(test)]
mod tests;
