//! The `serving-csr` verdict: is anything approving this node's kubelet-serving CSRs?
//! kube-controller-manager never does, so with serving certificates on (bootlet's
//! `rotateServerCertificates`, or the kubelet's own `serverTLSBootstrap`) an approver such
//! as `bootlet approve` must run. Pure, like the rest of checks.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::node::needs_cert;
use crate::config::Settings;
use crate::doctor::observe::Observations;
use crate::doctor::Outcome;
use crate::runtime::health::ago;
use crate::runtime::report;
use crate::runtime::text::{clip, one_line};

/// A serving CSR pending longer than this with no kubelet-serving CSR decided since it was
/// filed means no approver acts (a watching approver answers in under a second; one that
/// just started or took over the Lease, in seconds).
pub const PENDING_GRACE: Duration = Duration::from_secs(60);
const DEPLOY: &str =
    "kubectl apply -k config/approver  # bootlet approve (docs/approver.md); or once, by hand:";

fn created(c: &CertificateSigningRequest) -> Option<SystemTime> {
    c.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| SystemTime::from(t.0))
}

/// The first decision condition (type, reason, message, when) of a CSR.
fn decision(c: &CertificateSigningRequest) -> Option<(String, String, String, Option<SystemTime>)> {
    let conds = c.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|k| matches!(k.type_.as_str(), "Approved" | "Denied" | "Failed"))
        .map(|k| {
            (
                k.type_.clone(),
                k.reason.clone().unwrap_or_default(),
                k.message.clone().unwrap_or_default(),
                k.last_update_time.as_ref().map(|t| SystemTime::from(t.0)),
            )
        })
}

fn safe(s: &str) -> String {
    clip(&one_line(s), 200).into_owned()
}

pub(super) fn serving_csr(settings: &Settings, obs: &Observations, now: SystemTime) -> Outcome {
    if let Some(skip) = needs_cert(obs) {
        return skip;
    }
    let all = match &obs.net.serving_csrs {
        Some(Ok(list)) => list,
        Some(Err(e)) => {
            return Outcome::warn(
                format!("cannot list kubelet-serving CSRs: {}", report(e)),
                None,
            )
        }
        None => return Outcome::skip("skipped: the network budget ran out"),
    };
    let user = format!("system:node:{}", settings.node_name);
    let ours = all
        .iter()
        .filter(|c| c.spec.username.as_deref() == Some(user.as_str()))
        .max_by_key(|c| created(c));
    let Some(csr) = ours else {
        return Outcome::pass(if settings.rotate_server_certificates {
            "no kubelet-serving CSR filed for this node yet".to_string()
        } else {
            "serving certificates are not requested (rotateServerCertificates: false) and no kubelet-serving CSR names this node".to_string()
        });
    };
    let name = csr.metadata.name.clone().unwrap_or_default();
    let describe = format!("kubectl describe csr {name}  # bootlet files a new CSR after its back-off once the cause is fixed (docs/approver.md#rules)");
    match decision(csr) {
        Some((kind, _, _, _)) if kind == "Approved" => {
            if csr
                .status
                .as_ref()
                .and_then(|s| s.certificate.as_ref())
                .is_some()
            {
                Outcome::pass(format!("serving CSR {name} is approved and issued"))
            } else {
                Outcome::warn(
                    format!("serving CSR {name} is approved but not issued: is kube-controller-manager (the kubernetes.io/kubelet-serving signer) running?"),
                    None,
                )
            }
        }
        Some((kind, reason, message, _)) => Outcome::fail(
            format!(
                "serving CSR {name} was {}: {}: {}",
                if kind == "Denied" {
                    "denied"
                } else {
                    "failed by the signer"
                },
                safe(&reason),
                safe(&message)
            ),
            describe,
        ),
        None => pending(&name, csr, all, now),
    }
}

/// A pending CSR: fine for a moment; then, if no kubelet-serving CSR was decided since it
/// was filed, no approver acts at all; if some were, the approver leaves this one alone.
fn pending(
    name: &str,
    csr: &CertificateSigningRequest,
    all: &[CertificateSigningRequest],
    now: SystemTime,
) -> Outcome {
    let filed = created(csr).unwrap_or(now);
    let age = ago(now, filed);
    if now.duration_since(filed).unwrap_or_default() <= PENDING_GRACE {
        return Outcome::pass(format!("serving CSR {name} is pending for {age}"));
    }
    let decided_since = all.iter().any(|c| {
        c.metadata.name.as_deref() != Some(name)
            && decision(c).is_some_and(|(_, _, _, at)| at.is_some_and(|t| t >= filed))
    });
    if decided_since {
        Outcome::fail(
            format!("serving CSR {name} has been pending for {age} while other kubelet-serving CSRs were decided: the approver leaves it Pending (--on-mismatch ignore, or Node not found)"),
            format!("kubectl -n bootlet-approver logs deploy/bootlet-approver | grep {name}  # the rule it fails; or: kubectl certificate approve {name}"),
        )
    } else {
        Outcome::fail(
            format!("no approver is acting: serving CSR {name} has been pending for {age} and no kubelet-serving CSR was decided since (kube-controller-manager never approves them)"),
            format!("{DEPLOY} kubectl certificate approve {name}"),
        )
    }
}
