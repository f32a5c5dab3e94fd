//! The controllers kube-controller-manager would run: csrapproving (SubjectAccessReview on
//! `certificatesigningrequests/nodeclient` or `/selfnodeclient`) and the kubelet-client and
//! kubelet-serving signers, an optional kubelet-serving approver (like kubelet-csr-approver),
//! plus the CSR transition events (Approved/Denied/Failed/Issued) derived from store changes.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::UserInfo;
use crate::pki;
use crate::rbac::{self, Attrs, Decision};
use crate::signers::{self, Kubelet};
use crate::store::{EventType, Kind, StoreError};
use crate::{Approval, Error, Event, Shared, Signer};

/// Run the controllers until the testplane is dropped.
pub fn spawn(shared: Arc<Shared>) {
    let mut rx = shared.store.subscribe();
    let weak: Weak<Shared> = Arc::downgrade(&shared);
    drop(shared);
    tokio::spawn(async move {
        let mut seen: HashMap<String, Flags> = HashMap::new();
        loop {
            let ev = rx.recv().await;
            let Some(shared) = weak.upgrade() else { return };
            match ev {
                Ok(ev) if ev.kind == Kind::Csr => {
                    if ev.ty == EventType::Deleted {
                        seen.remove(&ev.name);
                        continue;
                    }
                    if let Ok(csr) = serde_json::from_value::<CertificateSigningRequest>(ev.object)
                    {
                        report(&shared, &mut seen, &ev.name, &csr);
                    }
                    reconcile(&shared, &ev.name);
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => resync(&shared),
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Reconcile every CSR now (after a mode change).
pub fn resync(shared: &Shared) {
    let (items, _) = shared.store.list(Kind::Csr, None);
    for v in items {
        reconcile(shared, crate::store::meta_str(&v, "name"));
    }
}

#[derive(Default, Clone, Copy, PartialEq)]
struct Flags {
    approved: bool,
    denied: bool,
    failed: bool,
    issued: bool,
}

fn condition<'a>(
    csr: &'a CertificateSigningRequest,
    ty: &str,
) -> Option<&'a CertificateSigningRequestCondition> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty && c.status == "True")
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

fn report(
    shared: &Shared,
    seen: &mut HashMap<String, Flags>,
    name: &str,
    csr: &CertificateSigningRequest,
) {
    let now = Flags {
        approved: condition(csr, "Approved").is_some(),
        denied: condition(csr, "Denied").is_some(),
        failed: condition(csr, "Failed").is_some(),
        issued: issued(csr),
    };
    let was = seen.insert(name.to_string(), now).unwrap_or_default();
    let name = name.to_string();
    let text = |ty: &str, f: fn(&CertificateSigningRequestCondition) -> &Option<String>| {
        condition(csr, ty)
            .and_then(|c| f(c).clone())
            .unwrap_or_default()
    };
    if now.approved && !was.approved {
        shared.emit(Event::CsrApproved { name: name.clone() });
    }
    if now.denied && !was.denied {
        shared.emit(Event::CsrDenied {
            name: name.clone(),
            reason: text("Denied", |c| &c.reason),
        });
    }
    if now.failed && !was.failed {
        shared.emit(Event::CsrFailed {
            name: name.clone(),
            reason: text("Failed", |c| &c.reason),
            message: text("Failed", |c| &c.message),
        });
    }
    if now.issued && !was.issued {
        let not_after = csr
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .and_then(|c| pki::pem_blocks(&c.0, "CERTIFICATE").into_iter().next())
            .and_then(|der| {
                let (_, x) = x509_parser::parse_x509_certificate(&der).ok()?;
                let t = x.validity().not_after.timestamp();
                Some(SystemTime::UNIX_EPOCH + Duration::from_secs(t.max(0) as u64))
            })
            .unwrap_or(SystemTime::UNIX_EPOCH);
        shared.emit(Event::CsrIssued { name, not_after });
    }
}

fn new_condition(ty: &str, reason: &str, message: &str) -> CertificateSigningRequestCondition {
    let now = Time(jiff::Timestamp::now());
    CertificateSigningRequestCondition {
        type_: ty.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Apply `f` to the typed CSR under the store lock; `f` returns false to leave it unchanged.
fn modify(
    shared: &Shared,
    name: &str,
    f: impl FnOnce(&mut CertificateSigningRequest) -> bool,
) -> Result<(), StoreError> {
    shared
        .store
        .update_with(Kind::Csr, "", name, |old| {
            let mut csr: CertificateSigningRequest =
                serde_json::from_value(old.clone()).map_err(|_| StoreError::Conflict)?;
            if f(&mut csr) {
                Ok(crate::to_value(&csr))
            } else {
                Err(StoreError::Conflict)
            }
        })
        .map(drop)
}

fn push_condition(csr: &mut CertificateSigningRequest, c: CertificateSigningRequestCondition) {
    csr.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(c);
}

/// Add an Approved or Denied condition unless the CSR already has one.
pub fn set_condition(
    shared: &Shared,
    name: &str,
    ty: &str,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    if shared.store.get(Kind::Csr, "", name).is_none() {
        return Err(Error::NotFound {
            kind: "CertificateSigningRequest",
            name: name.into(),
        });
    }
    let _ = modify(shared, name, |csr| {
        if condition(csr, "Approved").is_some() || condition(csr, "Denied").is_some() {
            return false;
        }
        push_condition(csr, new_condition(ty, reason, message));
        true
    });
    Ok(())
}

/// One reconcile pass for CSR `name`: approve (per mode), then sign.
pub fn reconcile(shared: &Shared, name: &str) {
    let settings = shared.settings();
    let Some(current) = shared
        .store
        .get(Kind::Csr, "", name)
        .and_then(|v| serde_json::from_value::<CertificateSigningRequest>(v).ok())
    else {
        return;
    };
    let Some(kubelet) = Kubelet::from_name(&current.spec.signer_name) else {
        return;
    };
    let pending =
        condition(&current, "Approved").is_none() && condition(&current, "Denied").is_none();
    let mode = match kubelet {
        Kubelet::Client => &settings.approval,
        Kubelet::Serving => &settings.serving_approval,
    };
    // Decide outside the store lock (the SubjectAccessReview reads the store), then apply
    // only if nobody decided in between.
    let decision = match mode {
        _ if !pending => None,
        Approval::Manual => None,
        Approval::Deny { reason } => Some(new_condition(
            "Denied",
            reason,
            "denied by the testplane approval mode",
        )),
        Approval::Auto if kubelet == Kubelet::Serving => serving_approval(&current),
        Approval::Auto => auto_approval(shared, &current)
            .map(|msg| new_condition("Approved", "AutoApproved", msg)),
    };
    if let Some(c) = decision {
        let _ = modify(shared, name, |csr| {
            if condition(csr, "Approved").is_some() || condition(csr, "Denied").is_some() {
                return false;
            }
            push_condition(csr, c);
            true
        });
    }
    let _ = modify(shared, name, |csr| {
        if condition(csr, "Approved").is_none()
            || condition(csr, "Denied").is_some()
            || condition(csr, "Failed").is_some()
            || issued(csr)
            || settings.signer == Signer::None
        {
            return false;
        }
        match sign(shared, kubelet, csr, &settings) {
            Ok(pem) => {
                csr.status.get_or_insert_with(Default::default).certificate =
                    Some(ByteString(pem.into_bytes()))
            }
            Err(msg) => push_condition(
                csr,
                new_condition("Failed", "SignerValidationFailure", &msg),
            ),
        }
        true
    });
}

/// csrapproving's recognizers: the approval message when RBAC allows it, else None.
fn auto_approval(shared: &Shared, csr: &CertificateSigningRequest) -> Option<&'static str> {
    let parsed = pki::parse_csr(&csr.spec.request.0).ok()?;
    let usages = csr.spec.usages.clone().unwrap_or_default();
    signers::validate_kubelet_client(&parsed, &usages).ok()?;
    let user = UserInfo {
        name: csr.spec.username.clone().unwrap_or_default(),
        uid: csr.spec.uid.clone().unwrap_or_default(),
        groups: csr.spec.groups.clone().unwrap_or_default(),
    };
    let sar = |sub: &str| {
        let a = Attrs::resource(
            "create",
            "certificates.k8s.io",
            "certificatesigningrequests",
            sub,
            "",
            "",
        );
        rbac::authorize(&shared.store, &user, &a) == Decision::Allow
    };
    if parsed.cn == user.name && sar("selfnodeclient") {
        return Some("Auto approving self kubelet client certificate after SubjectAccessReview.");
    }
    if sar("nodeclient") {
        return Some("Auto approving kubelet client certificate after SubjectAccessReview.");
    }
    None
}

/// An approver like kubelet-csr-approver, for kubelet-serving CSRs: always decides.
fn serving_approval(csr: &CertificateSigningRequest) -> Option<CertificateSigningRequestCondition> {
    let user = csr.spec.username.as_deref().unwrap_or_default();
    let verdict = pki::parse_csr(&csr.spec.request.0)
        .and_then(|parsed| signers::serving_approver(&parsed, user));
    Some(match verdict {
        Ok(()) => new_condition(
            "Approved",
            "kubelet-serving cert validated",
            "approved by the testplane's kubelet-serving approver",
        ),
        Err(why) => new_condition(
            "Denied",
            "kubelet-serving cert denied",
            &format!("denied by the testplane's kubelet-serving approver: {why}"),
        ),
    })
}

/// The kubelet signers: validate, then issue per the signer mode. Err is the Failed message.
fn sign(
    shared: &Shared,
    kubelet: Kubelet,
    csr: &CertificateSigningRequest,
    s: &crate::Settings,
) -> Result<String, String> {
    let parsed = pki::parse_csr(&csr.spec.request.0)?;
    let usages = csr.spec.usages.as_deref().unwrap_or_default();
    kubelet.validate(&parsed, usages)?;
    if kubelet == Kubelet::Serving {
        let user = csr.spec.username.as_deref().unwrap_or_default();
        signers::check_serving_requester(&parsed, user)?;
    }
    let cap = s.max_cert_ttl.unwrap_or(s.cert_ttl);
    let lifetime = match csr.spec.expiration_seconds {
        Some(e) => Duration::from_secs(e.max(0) as u64).min(cap),
        None => s.cert_ttl.min(cap),
    };
    let window = signers::Window {
        lifetime,
        backdate: s.backdate,
        now: crate::wall_now(),
    };
    signers::issue(
        s.signer,
        kubelet,
        [&shared.ca, &shared.rogue_ca, &shared.second_ca],
        &parsed,
        usages,
        window,
    )
}
