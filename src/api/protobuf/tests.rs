use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use prost::Message;

use super::*;

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

/// A Lease as bootlet holds one after a read: every field the conversion carries set.
fn full() -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            namespace: Some("kube-node-lease".into()),
            uid: Some("6f1c0a4e-1b7e-4c55-9d0a-3a3c2f1e9b10".into()),
            resource_version: Some("4711".into()),
            creation_timestamp: Some(Time(ts("2026-12-01T10:00:00Z"))),
            labels: Some(BTreeMap::from([("a".into(), "b".into())])),
            annotations: Some(BTreeMap::from([("note".into(), "x".into())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "n1".into(),
                uid: "0d4c1a2b-0000-4000-8000-000000000001".into(),
                controller: None,
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("n1".into()),
            lease_duration_seconds: Some(40),
            acquire_time: Some(MicroTime(ts("2026-12-01T10:00:00.5Z"))),
            renew_time: Some(MicroTime(ts("2026-12-01T10:05:07.123456Z"))),
            lease_transitions: Some(2),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn the_envelope_is_the_magic_then_a_runtime_unknown() {
    let bytes = wrap("coordination.k8s.io/v1", "Lease", vec![1, 2]);
    let mut want = vec![0x6b, 0x38, 0x73, 0x00];
    // typeMeta (field 1, 31 bytes): apiVersion (1), kind (2)
    want.extend([0x0a, 0x1f, 0x0a, 0x16]);
    want.extend(b"coordination.k8s.io/v1");
    want.extend([0x12, 0x05]);
    want.extend(b"Lease");
    // raw (2), then contentEncoding (3) and contentType (4) empty, as Go writes them
    want.extend([0x12, 0x02, 1, 2, 0x1a, 0x00, 0x22, 0x00]);
    assert_eq!(bytes, want);
    assert_eq!(unwrap(&bytes).unwrap(), ("Lease".to_string(), vec![1, 2]));
}

#[test]
fn a_lease_round_trips() {
    let lease = full();
    let bytes = encode_lease(&lease);
    assert!(bytes.starts_with(b"k8s\0"));
    assert_eq!(decode_lease(&bytes).unwrap(), lease);
}

#[test]
fn renew_time_keeps_microseconds_and_drops_what_go_drops() {
    let mut lease = full();
    let spec = lease.spec.as_mut().unwrap();
    spec.renew_time = Some(MicroTime(ts("2026-12-01T10:05:07.123456789Z")));
    let back = decode_lease(&encode_lease(&lease)).unwrap();
    let renew = back.spec.unwrap().renew_time.unwrap().0;
    assert_eq!(renew, ts("2026-12-01T10:05:07.123456Z"));
}

#[test]
fn what_go_writes_for_unset_reads_back_as_unset() {
    // The Lease bootlet creates: name, namespace and spec only. Go (and we) write the
    // empty strings, generation 0 and an empty creationTimestamp; none of it comes back.
    let new = Lease {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            namespace: Some("kube-node-lease".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("n1".into()),
            ..LeaseSpec::default()
        }),
    };
    let bytes = encode_lease(&new);
    let (_, raw) = unwrap(&bytes).unwrap();
    let pb = k8s_pb::api::coordination::v1::Lease::decode(raw.as_slice()).unwrap();
    let meta = pb.metadata.as_ref().unwrap();
    assert_eq!(meta.uid.as_deref(), Some(""));
    assert_eq!(meta.generation, Some(0));
    assert_eq!(meta.creation_timestamp, Some(pbmeta::Time::default()));
    assert_eq!(decode_lease(&bytes).unwrap(), new);
}

#[test]
fn managed_fields_are_not_sent() {
    let mut lease = full();
    lease.metadata.managed_fields = Some(vec![Default::default()]);
    let back = decode_lease(&encode_lease(&lease)).unwrap();
    assert_eq!(back.metadata.managed_fields, None);
    assert_eq!(back, full());
}

#[test]
fn a_protobuf_status_keeps_what_the_typed_errors_read() {
    let status = pbmeta::Status {
        status: Some("Failure".into()),
        message: Some("Precondition failed: UID in precondition: x, UID in object meta: ".into()),
        reason: Some("Conflict".into()),
        code: Some(409),
        details: Some(pbmeta::StatusDetails {
            name: Some("n1".into()),
            group: Some("coordination.k8s.io".into()),
            kind: Some("leases".into()),
            uid: Some(String::new()),
            retry_after_seconds: Some(0),
            causes: vec![],
        }),
        metadata: Some(Default::default()),
    };
    let bytes = wrap("v1", "Status", status.encode_to_vec());
    let s = decode_status(&bytes).unwrap();
    assert_eq!(s.code, Some(409));
    assert_eq!(s.reason.as_deref(), Some("Conflict"));
    assert!(s.message.unwrap().starts_with("Precondition failed"));
    let d = s.details.unwrap();
    assert_eq!(d.name.as_deref(), Some("n1"));
    assert_eq!((d.uid, d.retry_after_seconds, d.causes), (None, None, None));

    let throttled = pbmeta::Status {
        code: Some(429),
        details: Some(pbmeta::StatusDetails {
            retry_after_seconds: Some(3),
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = decode_status(&wrap("v1", "Status", throttled.encode_to_vec())).unwrap();
    assert_eq!(s.details.unwrap().retry_after_seconds, Some(3));
}

#[test]
fn wrong_bodies_are_refused_with_a_reason() {
    assert!(matches!(decode_lease(b"{}"), Err(ProtoError::NoMagic)));
    let status = wrap("v1", "Status", vec![]);
    assert!(matches!(
        decode_lease(&status),
        Err(ProtoError::Kind { want: "Lease", .. })
    ));
    let garbage = wrap("coordination.k8s.io/v1", "Lease", vec![0xff, 0xff]);
    assert!(matches!(
        decode_lease(&garbage),
        Err(ProtoError::Body { kind: "Lease", .. })
    ));
    let mut truncated = encode_lease(&full());
    truncated.truncate(20);
    assert!(decode_lease(&truncated).is_err());
}

#[cfg(feature = "test-hooks")]
#[test]
fn the_wire_flag_values() {
    assert_eq!("json".parse::<LeaseWire>(), Ok(LeaseWire::Json));
    assert_eq!("protobuf".parse::<LeaseWire>(), Ok(LeaseWire::Protobuf));
    assert!("yaml".parse::<LeaseWire>().is_err());
    assert_eq!(LeaseWire::default(), LeaseWire::Protobuf);
}

/// A Lease as kube-apiserver v1.37.2 encodes it (Go's generated marshallers), answering
/// `Accept: application/vnd.kubernetes.protobuf` for a Lease bootlet had created and
/// renewed once in protobuf (saved by tests/kube/proto.rs with `BOOTLET_PROTO_GOLDEN`).
const GO_LEASE: &[&str] = &[
    "6b3873000a1f0a16636f6f7264696e6174696f6e2e6b38732e696f2f763112054c65617365128f020aee010a0a726561",
    "6c2d70726f746f12001a0f6b7562652d6e6f64652d6c6561736522002a2434373266653639312d383435332d34303637",
    "2d623463352d3661383066623365656465633203323332380042080893f2bed80610008a0192010a07626f6f746c6574",
    "12065570646174651a16636f6f7264696e6174696f6e2e6b38732e696f2f763122080894f2bed806100032084669656c",
    "647356313a510a4f7b22663a73706563223a7b22663a686f6c6465724964656e74697479223a7b7d2c22663a6c656173",
    "654475726174696f6e5365636f6e6473223a7b7d2c22663a72656e657754696d65223a7b7d7d7d4200121c0a0a726561",
    "6c2d70726f746f1028220c0894f2bed80610e8e580b5021a002200",
];

fn go_lease() -> Vec<u8> {
    let hex = GO_LEASE.concat();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_lease_go_encoded_decodes_to_what_the_server_holds() {
    let lease = decode_lease(&go_lease()).unwrap();
    let want = Lease {
        metadata: ObjectMeta {
            name: Some("real-proto".into()),
            namespace: Some("kube-node-lease".into()),
            uid: Some("472fe691-8453-4067-b4c5-6a80fb3eedec".into()),
            resource_version: Some("232".into()),
            creation_timestamp: Some(Time(jiff::Timestamp::from_second(1_796_192_531).unwrap())),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("real-proto".into()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(
                jiff::Timestamp::new(1_796_192_532, 648_033_000).unwrap(),
            )),
            ..LeaseSpec::default()
        }),
    };
    assert_eq!(lease, want);
}

#[test]
fn we_write_the_fields_go_writes() {
    // Go's message (managedFields aside, which bootlet never sends) and ours for the same
    // Lease are the same message, field presence included: prost encodes both the same way.
    let go = go_lease();
    let (kind, raw) = unwrap(&go).unwrap();
    assert_eq!(kind, "Lease");
    let mut theirs = k8s_pb::api::coordination::v1::Lease::decode(raw.as_slice()).unwrap();
    theirs.metadata.as_mut().unwrap().managed_fields.clear();
    let ours = encode_lease(&decode_lease(&go).unwrap());
    let (_, our_raw) = unwrap(&ours).unwrap();
    assert_eq!(our_raw, theirs.encode_to_vec());
    // The envelope around it is byte for byte Go's: the same head (magic, typeMeta, the raw
    // field's tag) and the same empty contentEncoding and contentType at the end.
    assert_eq!(ours[..0x25], go[..0x25]);
    assert_eq!(ours[ours.len() - 4..], go[go.len() - 4..]);
}
