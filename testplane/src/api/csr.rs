//! CertificateSigningRequest API semantics: create-time validation (422 with causes), the
//! server-set requester identity, NodeRestriction, and the main/approval/status updates.
//! Approval and signing decisions are the controllers'.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use serde_json::Value;

use super::{json, ApiError, Ctx, Resp};
use crate::store::{Kind, StoreError};
use crate::{pki, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};

const KNOWN_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// Usages each built-in client signer accepts at the API (a testplane shortcut for the
/// client signers). kubelet-serving is not listed: upstream accepts any known usage at the
/// API and its signer Fails the CSR, which is what the serving tests exercise.
fn signer_usages(signer: &str) -> Option<&'static [&'static str]> {
    match signer {
        KUBELET_CLIENT_SIGNER | "kubernetes.io/kube-apiserver-client" => {
            Some(&["client auth", "digital signature", "key encipherment"])
        }
        _ => None,
    }
}

fn quoted(v: &[&str]) -> String {
    v.iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Validate a new CSR and stamp spec.username/uid/groups from the authenticated user.
pub fn prepare_create(ctx: &Ctx, v: Value) -> Result<Value, ApiError> {
    let mut csr: CertificateSigningRequest =
        serde_json::from_value(v).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let name = csr.metadata.name.clone().unwrap_or_default();
    let mut causes: Vec<(String, &'static str, String)> = vec![];
    let signer = csr.spec.signer_name.clone();
    if signer.is_empty() {
        causes.push((
            "spec.signerName".into(),
            "FieldValueRequired",
            "Required value".into(),
        ));
    } else if !signer.contains('/') || signer.starts_with('/') || signer.ends_with('/') {
        causes.push((
            "spec.signerName".into(),
            "FieldValueInvalid",
            format!("Invalid value: \"{signer}\": must be a fully qualified domain and path of the form 'example.com/signer-name'"),
        ));
    }
    let parsed = pki::parse_csr(&csr.spec.request.0);
    if let Err(e) = &parsed {
        causes.push((
            "spec.request".into(),
            "FieldValueInvalid",
            format!("Invalid value: []byte{{...}}: {e}"),
        ));
    }
    let usages = csr.spec.usages.clone().unwrap_or_default();
    if usages.is_empty() {
        causes.push((
            "spec.usages".into(),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    let allowed = signer_usages(&signer);
    for (i, u) in usages.iter().enumerate() {
        let field = format!("spec.usages[{i}]");
        if usages[..i].contains(u) {
            causes.push((
                field,
                "FieldValueDuplicate",
                format!("Duplicate value: \"{u}\""),
            ));
        } else if !KNOWN_USAGES.contains(&u.as_str()) {
            causes.push((
                field,
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{u}\": supported values: {}",
                    quoted(KNOWN_USAGES)
                ),
            ));
        } else if let Some(a) = allowed.filter(|a| !a.contains(&u.as_str())) {
            causes.push((
                field,
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{u}\": supported values: {}",
                    quoted(a)
                ),
            ));
        }
    }
    if let Some(e) = csr.spec.expiration_seconds {
        if e < 600 && !ctx.shared.settings().allow_short_expiration {
            causes.push((
                "spec.expirationSeconds".into(),
                "FieldValueInvalid",
                format!("Invalid value: {e}: may not specify a duration less than 600 seconds (10 minutes)"),
            ));
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(Kind::Csr, &name, causes));
    }
    // NodeRestriction (upstream since 1.31): a node may only request kubelet client and
    // serving certificates for itself.
    if let (Some(node), Ok(p)) = (ctx.user.node_name(), &parsed) {
        let kubelet = signer == KUBELET_CLIENT_SIGNER || signer == KUBELET_SERVING_SIGNER;
        if kubelet && p.cn != format!("system:node:{node}") {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "certificatesigningrequests.certificates.k8s.io \"{name}\" is forbidden: can only create a node CSR with CN=system:node:{node}"
                ),
            ));
        }
    }
    csr.status = None;
    csr.spec.username = Some(ctx.user.name.clone());
    csr.spec.uid = (!ctx.user.uid.is_empty()).then(|| ctx.user.uid.clone());
    csr.spec.groups = Some(ctx.user.groups.clone());
    csr.spec.extra = None;
    Ok(crate::to_value(&csr))
}

/// PUT on the object (metadata only), `/approval` (conditions) or `/status` (conditions and
/// certificate). The stored spec always wins; resourceVersion must match when given.
pub fn update(ctx: &Ctx, name: &str, sub: &str, body: Value) -> Result<Resp, ApiError> {
    let new: CertificateSigningRequest =
        serde_json::from_value(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut invalid = None;
    let stored = ctx
        .shared
        .store
        .update_with(Kind::Csr, "", name, |old| {
            let mut cur: CertificateSigningRequest =
                serde_json::from_value(old.clone()).map_err(|_| StoreError::NotFound)?;
            let want = new.metadata.resource_version.clone().unwrap_or_default();
            if !want.is_empty() && Some(&want) != cur.metadata.resource_version.as_ref() {
                return Err(StoreError::Conflict);
            }
            match sub {
                "approval" | "status" => {
                    let conds = new.status.as_ref().and_then(|s| s.conditions.clone());
                    if let Some(e) = check_conditions(conds.as_deref().unwrap_or_default()) {
                        invalid = Some(e);
                        return Err(StoreError::Conflict);
                    }
                    let st = cur.status.get_or_insert_with(Default::default);
                    st.conditions = conds.map(stamp_conditions);
                    if sub == "status" {
                        st.certificate = new.status.as_ref().and_then(|s| s.certificate.clone());
                    }
                }
                _ => {
                    cur.metadata.labels = new.metadata.labels.clone();
                    cur.metadata.annotations = new.metadata.annotations.clone();
                }
            }
            Ok(crate::to_value(&cur))
        })
        .map_err(|e| match invalid.take() {
            Some(msg) => ApiError::invalid(
                Kind::Csr,
                name,
                vec![("status.conditions".into(), "FieldValueForbidden", msg)],
            ),
            None => ApiError::from_store(e, Kind::Csr, name),
        })?;
    Ok(json(200, &stored))
}

fn check_conditions(
    c: &[k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition],
) -> Option<String> {
    let has = |t: &str| c.iter().any(|x| x.type_ == t && x.status == "True");
    if has("Approved") && has("Denied") {
        return Some("Forbidden: Approved and Denied conditions are mutually exclusive".into());
    }
    None
}

/// Like the CSR status strategy: unset condition timestamps become now.
fn stamp_conditions(
    mut c: Vec<k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition>,
) -> Vec<k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition> {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    for x in &mut c {
        x.last_update_time.get_or_insert_with(|| now.clone());
        x.last_transition_time.get_or_insert_with(|| now.clone());
    }
    c
}
