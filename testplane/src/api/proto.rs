//! Decoding of the protobuf bodies real clients send us: kubectl 1.32 `certificate
//! approve|deny` PUTs the CSR to `/approval` as `application/vnd.kubernetes.protobuf`
//! (`auth can-i` and `create clusterrolebinding` post protobuf too). Only the
//! fields the approval/status updates read are decoded (name, resourceVersion, conditions,
//! certificate); the result is the JSON the k8s-openapi type would produce. Nothing is encoded.

use serde_json::{json, Map, Value};

/// The `k8s\0` envelope magic.
const MAGIC: &[u8] = b"k8s\x00";

/// A protobuf field: number and value (varint or length-delimited bytes).
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn fields(b: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let (num, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => Field::Varint(varint(b, &mut i)?),
            2 => {
                let len = varint(b, &mut i)? as usize;
                let s = b.get(i..i.checked_add(len)?)?;
                i += len;
                Field::Bytes(s)
            }
            1 => {
                i += 8;
                continue;
            }
            5 => {
                i += 4;
                continue;
            }
            _ => return None,
        };
        out.push((num, f));
    }
    Some(out)
}

fn string(f: &Field<'_>) -> Option<String> {
    match f {
        Field::Bytes(b) => String::from_utf8(b.to_vec()).ok(),
        Field::Varint(_) => None,
    }
}

/// A metav1.Time; the zero time (what Go sends for "unset") becomes None.
fn time(b: &[u8]) -> Option<Option<Value>> {
    let mut secs = 0i64;
    for (n, f) in fields(b)? {
        if let (1, Field::Varint(v)) = (n, f) {
            secs = v as i64;
        }
    }
    if secs == 0 || secs == -62_135_596_800 {
        return Some(None);
    }
    let t = jiff::Timestamp::from_second(secs).ok()?;
    Some(Some(t.to_string().into()))
}

fn condition(b: &[u8]) -> Option<Value> {
    let mut c = Map::new();
    for (n, f) in fields(b)? {
        let key = match n {
            1 => "type",
            2 => "reason",
            3 => "message",
            6 => "status",
            4 | 5 => {
                let k = if n == 4 {
                    "lastUpdateTime"
                } else {
                    "lastTransitionTime"
                };
                if let Field::Bytes(t) = f {
                    if let Some(t) = time(t)? {
                        c.insert(k.into(), t);
                    }
                }
                continue;
            }
            _ => continue,
        };
        c.insert(key.into(), string(&f)?.into());
    }
    Some(Value::Object(c))
}

/// Decode an enveloped CertificateSigningRequest into k8s JSON (partial, see module docs).
pub fn decode_csr(body: &[u8]) -> Option<Value> {
    let env = fields(body.strip_prefix(MAGIC)?)?;
    let raw = env.iter().find_map(|(n, f)| match (n, f) {
        (2, Field::Bytes(b)) => Some(*b),
        _ => None,
    })?;
    let mut meta = Map::new();
    let mut status = Map::new();
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(m)) => {
                for (mn, mf) in fields(m)? {
                    match mn {
                        1 => meta.insert("name".into(), string(&mf)?.into()),
                        6 => meta.insert("resourceVersion".into(), string(&mf)?.into()),
                        _ => None,
                    };
                }
            }
            (3, Field::Bytes(s)) => {
                let mut conds = vec![];
                for (sn, sf) in fields(s)? {
                    match (sn, sf) {
                        (1, Field::Bytes(c)) => conds.push(condition(c)?),
                        (2, Field::Bytes(cert)) => {
                            use base64::Engine;
                            let b64 = base64::engine::general_purpose::STANDARD.encode(cert);
                            status.insert("certificate".into(), b64.into());
                        }
                        _ => {}
                    }
                }
                status.insert("conditions".into(), conds.into());
            }
            _ => {}
        }
    }
    Some(json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": meta,
        "spec": {"request": "", "signerName": ""},
        "status": status,
    }))
}

/// Decode an enveloped SelfSubjectAccessReview (what `kubectl auth can-i` sends) into JSON.
pub fn decode_ssar(body: &[u8]) -> Option<Value> {
    let env = fields(body.strip_prefix(MAGIC)?)?;
    let raw = env.iter().find_map(|(n, f)| match (n, f) {
        (2, Field::Bytes(b)) => Some(*b),
        _ => None,
    })?;
    let mut spec = Map::new();
    for (n, f) in fields(raw)? {
        let (2, Field::Bytes(s)) = (n, f) else {
            continue;
        };
        for (sn, sf) in fields(s)? {
            let Field::Bytes(attrs) = sf else { continue };
            let (key, names): (&str, &[&str]) = match sn {
                1 => (
                    "resourceAttributes",
                    &[
                        "",
                        "namespace",
                        "verb",
                        "group",
                        "version",
                        "resource",
                        "subresource",
                        "name",
                    ],
                ),
                2 => ("nonResourceAttributes", &["", "path", "verb"]),
                _ => continue,
            };
            let mut m = Map::new();
            for (an, af) in fields(attrs)? {
                if let Some(name) = names.get(an as usize).filter(|n| !n.is_empty()) {
                    if let Some(v) = string(&af) {
                        m.insert(name.to_string(), v.into());
                    }
                }
            }
            spec.insert(key.into(), Value::Object(m));
        }
    }
    Some(
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec}),
    )
}

/// Decode an enveloped ClusterRoleBinding (what `kubectl create clusterrolebinding` sends):
/// name, subjects and roleRef.
pub fn decode_cluster_role_binding(body: &[u8]) -> Option<Value> {
    let env = fields(body.strip_prefix(MAGIC)?)?;
    let raw = env.iter().find_map(|(n, f)| match (n, f) {
        (2, Field::Bytes(b)) => Some(*b),
        _ => None,
    })?;
    let strings = |b: &[u8], names: &[&str]| -> Option<Map<String, Value>> {
        let mut m = Map::new();
        for (n, f) in fields(b)? {
            if let Some(name) = names.get(n as usize).filter(|s| !s.is_empty()) {
                m.insert(name.to_string(), string(&f)?.into());
            }
        }
        Some(m)
    };
    let mut meta = Map::new();
    let mut subjects = vec![];
    let mut role_ref = Map::new();
    for (n, f) in fields(raw)? {
        let Field::Bytes(b) = f else { continue };
        match n {
            1 => {
                for (mn, mf) in fields(b)? {
                    if mn == 1 {
                        meta.insert("name".into(), string(&mf)?.into());
                    }
                }
            }
            2 => subjects.push(Value::Object(strings(
                b,
                &["", "kind", "apiGroup", "name", "namespace"],
            )?)),
            3 => role_ref = strings(b, &["", "apiGroup", "kind", "name"])?,
            _ => {}
        }
    }
    Some(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta,
        "subjects": subjects,
        "roleRef": role_ref,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_cluster_role_binding() {
        let subject = [
            ld(1, b"Group"),
            ld(2, b"rbac.authorization.k8s.io"),
            ld(3, b"g"),
        ]
        .concat();
        let role = [
            ld(1, b"rbac.authorization.k8s.io"),
            ld(2, b"ClusterRole"),
            ld(3, b"r"),
        ]
        .concat();
        let crb = [ld(1, &ld(1, b"b")), ld(2, &subject), ld(3, &role)].concat();
        let v = decode_cluster_role_binding(&[MAGIC.to_vec(), ld(2, &crb)].concat()).unwrap();
        assert_eq!(v["metadata"]["name"], "b");
        assert_eq!(v["subjects"][0]["kind"], "Group");
        assert_eq!(v["subjects"][0]["name"], "g");
        assert_eq!(v["roleRef"]["name"], "r");
        assert_eq!(v["roleRef"]["kind"], "ClusterRole");
    }

    fn ld(n: u8, b: &[u8]) -> Vec<u8> {
        let mut v = vec![(n << 3) | 2, b.len() as u8];
        v.extend_from_slice(b);
        v
    }

    #[test]
    fn decodes_an_approval() {
        let cond = [
            ld(1, b"Approved"),
            ld(6, b"True"),
            ld(2, b"KubectlApprove"),
            ld(4, &[8, 1]),
        ]
        .concat();
        let meta = [ld(1, b"csr-1"), ld(6, b"42")].concat();
        let csr = [ld(1, &meta), ld(3, &ld(1, &cond))].concat();
        let body = [MAGIC.to_vec(), ld(2, &csr)].concat();
        let v = decode_csr(&body).unwrap();
        assert_eq!(v["metadata"]["name"], "csr-1");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(v["status"]["conditions"][0]["type"], "Approved");
        assert_eq!(v["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            v["status"]["conditions"][0]["lastUpdateTime"],
            "1970-01-01T00:00:01Z"
        );
        let zero = [ld(1, b"Approved"), ld(5, &[])].concat();
        let v = decode_csr(&[MAGIC.to_vec(), ld(2, &ld(3, &ld(1, &zero)))].concat()).unwrap();
        assert!(v["status"]["conditions"][0]
            .get("lastTransitionTime")
            .is_none());
    }
}
