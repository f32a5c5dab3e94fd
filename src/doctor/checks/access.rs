//! The verdicts on the identity itself: authentication (SelfSubjectReview), authorization
//! (SelfSubjectAccessReview), our CSR, and the installed client certificate. Pure.

use std::path::Path;
use std::time::SystemTime;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::{budget, curl, NEW_TOKEN};
use crate::config::Settings;
use crate::doctor::observe::{CertObs, CsrObs, Observations, OtherCa, Proof, Using};
use crate::doctor::Outcome;
use crate::identity::bootstrap::InstalledError;
use crate::identity::csr::{self, Verdict};
use crate::pki::verify::VerifyError;
use crate::pki::{CertInfo, CertProfile};
use crate::runtime::health::{ago, rfc3339};
use crate::runtime::report;

/// With rotation off, warn once this fraction of the lifetime has passed.
pub const EXPIRY_WARN_FRACTION: f64 = 0.9;

const BOOTSTRAP_BINDING: &str = "kubeadm:kubelet-bootstrap";
const APPROVE_BINDING: &str = "kubeadm:node-autoapprove-bootstrap";
const ROTATE_BINDING: &str = "kubeadm:node-autoapprove-certificate-rotation";
const NODECLIENT_ROLE: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
const SELFNODECLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";

/// Who we should be, as SelfSubjectReview names it.
fn expected_user(settings: &Settings, using: &Using) -> String {
    match using {
        Using::ClientCert { .. } => format!("system:node:{}", settings.node_name),
        Using::BootstrapToken { id, .. } => format!("system:bootstrap:{id}"),
        _ => "system:bootstrap:<token id>".into(),
    }
}

fn credential_text(using: &Using) -> String {
    match using {
        Using::ClientCert { subject, serial } => {
            format!("the client certificate {subject} (serial {serial})")
        }
        Using::BootstrapToken { id, file } => {
            format!("bootstrap token {id} from {}", file.display())
        }
        Using::BootstrapExec { command, file } => {
            format!(
                "the credential of exec plugin {command} in {}",
                file.display()
            )
        }
        Using::BootstrapOther { file } => format!("the credential in {}", file.display()),
        Using::Nothing => "no credential".into(),
    }
}

/// The fix when the credential itself is rejected.
fn credential_fix(settings: &Settings, using: &Using) -> String {
    match using {
        Using::ClientCert { .. } => format!(
            "rm {} && systemctl restart bootlet  # re-join with the bootstrap token",
            settings
                .cert_dir
                .join("kubelet-client-current.pem")
                .display()
        ),
        Using::BootstrapExec { command, .. } => format!(
            "{command}  # run the plugin by hand (with its args and env from the bootstrap kubeconfig): what does it hand out, and for which cluster?"
        ),
        _ => NEW_TOKEN.into(),
    }
}

pub(super) fn authentication(settings: &Settings, obs: &Observations) -> Outcome {
    let using = &obs.using;
    let expected = expected_user(settings, using);
    match &obs.net.review {
        Some(Ok(user)) => {
            let name = user.username.clone().unwrap_or_default();
            let ok = match using {
                Using::BootstrapOther { .. } => name.starts_with("system:bootstrap:"),
                // A plugin may hand out any identity the cluster lets file a node CSR
                // (GKE's TPM-attested certificate is not a bootstrap token).
                Using::BootstrapExec { .. } => !name.is_empty() && name != "system:anonymous",
                _ => name == expected,
            };
            if !ok {
                let groups = user.groups.clone().unwrap_or_default().join(",");
                return Outcome::fail(
                    format!(
                        "{} authenticates as {name:?} (groups {groups}), not {expected}",
                        credential_text(using)
                    ),
                    credential_fix(settings, using),
                );
            }
            let summary = format!("{} authenticates as {name}", credential_text(using));
            match &obs.net.token_review {
                Some(Err(e)) if e.is_unauthorized() => Outcome::warn(
                    format!("{summary}; but the bootstrap token is expired or deleted (401): needed only to re-join"),
                    Some(NEW_TOKEN.into()),
                ),
                _ => Outcome::pass(summary),
            }
        }
        Some(Err(e)) if e.is_unauthorized() => {
            let summary = match using {
                Using::BootstrapToken { id, .. } => {
                    format!("bootstrap token {id} is expired or deleted (401)")
                }
                _ => format!("{} is not accepted (401)", credential_text(using)),
            };
            Outcome::fail(summary, credential_fix(settings, using))
        }
        Some(Err(e)) if matches!(e.code(), Some(403 | 404)) => Outcome::warn(
            format!(
                "SelfSubjectReview answered HTTP {}: cannot confirm {} authenticates as {expected}",
                e.code().unwrap_or_default(),
                credential_text(using)
            ),
            None,
        ),
        Some(Err(e)) => Outcome::fail(format!("SelfSubjectReview: {}", report(e)), curl(obs)),
        None => budget(obs, "SelfSubjectReview"),
    }
}

/// The bootstrap token's kubeadm group (`system:bootstrappers:...`), as reviewed.
fn token_group(obs: &Observations) -> String {
    let groups = match &obs.net.review {
        Some(Ok(u)) => u.groups.clone().unwrap_or_default(),
        _ => vec![],
    };
    groups
        .iter()
        .find(|g| g.starts_with("system:bootstrappers:"))
        .or_else(|| groups.iter().find(|g| *g == "system:bootstrappers"))
        .cloned()
        .unwrap_or_else(|| "system:bootstrappers:kubeadm:default-node-token".into())
}

/// `kubectl` commands that (re)create a binding, whether it is missing or was overwritten.
fn restore_binding(name: &str, role: &str, group: &str) -> String {
    format!(
        "kubectl delete clusterrolebinding {name} --ignore-not-found && kubectl create clusterrolebinding {name} --clusterrole={role} --group={group}"
    )
}

pub(super) fn authorization(settings: &Settings, obs: &Observations) -> Outcome {
    let cert = matches!(obs.using, Using::ClientCert { .. });
    let who = expected_user(settings, &obs.using);
    match &obs.net.can_create_csr {
        Some(Ok(sar)) if sar.allowed => {
            Outcome::pass(format!("{who} may create CertificateSigningRequests"))
        }
        Some(Ok(sar)) if cert => Outcome::fail(
            format!(
                "{who} may not create CertificateSigningRequests, so rotation cannot work{}",
                // kube-apiserver gives a denial no reason (RBAC explains only an allow).
                if sar.reason.is_empty() { String::new() } else { format!(" ({})", sar.reason) }
            ),
            format!("kubectl auth can-i create certificatesigningrequests --as={who} --as-group=system:nodes"),
        ),
        Some(Ok(_)) => {
            let group = token_group(obs);
            Outcome::fail(
                format!("{who} may not create CertificateSigningRequests: ClusterRoleBinding {BOOTSTRAP_BINDING} (system:node-bootstrapper for {group}) is missing or was overwritten"),
                restore_binding(BOOTSTRAP_BINDING, "system:node-bootstrapper", &group),
            )
        }
        Some(Err(e)) => Outcome::fail(format!("SelfSubjectAccessReview: {}", report(e)), curl(obs)),
        None => budget(obs, "SelfSubjectAccessReview"),
    }
}

fn auto_approves(obs: &Observations) -> Option<bool> {
    match &obs.net.can_autoapprove {
        Some(Ok(sar)) => Some(sar.allowed),
        _ => None,
    }
}

/// How long `found` has existed, for a pending CSR's line ("3m12s").
fn pending_for(found: &CertificateSigningRequest, now: SystemTime) -> String {
    found
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| ago(now, SystemTime::from(t.0)))
        .unwrap_or_else(|| "?".into())
}

/// With a valid client certificate, the CSR in question is a rotation's: a pending one is
/// named with how long it has waited and the line that approves it, as the daemon's STATUS=
/// says it; otherwise only whether a rotation CSR would be approved.
fn rotation_csr(settings: &Settings, obs: &Observations, now: SystemTime) -> Outcome {
    let no_approver = settings.rotate_certificates && auto_approves(obs) == Some(false);
    let restore = restore_binding(ROTATE_BINDING, SELFNODECLIENT_ROLE, "system:nodes");
    if let Some(Ok(CsrObs::Found(found))) = &obs.net.csr {
        if let (None, false) = csr::verdict(found) {
            let name = found.metadata.name.clone().unwrap_or_default();
            let why = if no_approver {
                format!(", and nothing approves it: ClusterRoleBinding {ROTATE_BINDING} is missing (restore: {restore})")
            } else if auto_approves(obs) == Some(true) {
                ", although system:nodes may be auto-approved: is kube-controller-manager's csrapproving controller running?".into()
            } else {
                String::new()
            };
            return Outcome::warn(
                format!(
                    "rotation CSR {name} has been waiting for approval for {}{why}; the current certificate stays in use meanwhile",
                    pending_for(found, now)
                ),
                Some(format!("kubectl certificate approve {name}")),
            );
        }
    }
    if no_approver {
        return Outcome::warn(
            format!("no CSR needed now, but rotation CSRs will wait for a human: ClusterRoleBinding {ROTATE_BINDING} is missing"),
            Some(restore),
        );
    }
    Outcome::pass("no CSR needed: the client certificate is valid")
}

pub(super) fn csr(settings: &Settings, obs: &Observations, now: SystemTime) -> Outcome {
    if matches!(obs.using, Using::ClientCert { .. }) {
        return rotation_csr(settings, obs, now);
    }
    let group = token_group(obs);
    let approver = format!("ClusterRoleBinding {APPROVE_BINDING} ({NODECLIENT_ROLE} for {group})");
    let found = match filed_csr(obs, &approver, &group) {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let name = found.metadata.name.clone().unwrap_or_default();
    let describe = format!("kubectl describe csr {name}  # who decided and why; bootlet files a new CSR after its back-off");
    match csr::verdict(found) {
        (Some(Verdict::Issued { .. }), _) => {
            Outcome::pass(format!("CSR {name} is approved and issued"))
        }
        (Some(Verdict::Denied { reason, message }), _) => {
            Outcome::fail(format!("CSR {name} was denied: {reason}: {message}"), describe)
        }
        (Some(Verdict::Failed { reason, message }), _) => Outcome::fail(
            format!("CSR {name} failed: {reason}: {message} (the signer refused it)"),
            describe,
        ),
        (None, true) => Outcome::fail(
            format!("CSR {name} is approved but no certificate was issued: no signer for kubernetes.io/kube-apiserver-client-kubelet is running"),
            "kubectl -n kube-system get pods -l component=kube-controller-manager  # it signs with --cluster-signing-cert-file/--cluster-signing-key-file",
        ),
        (None, false) => {
            let age = pending_for(found, now);
            let why = if auto_approves(obs) == Some(true) {
                format!("although {group} may be auto-approved: is kube-controller-manager's csrapproving controller running?")
            } else {
                format!(
                    "and nothing approves it: {approver} is missing (restore: {})",
                    restore_binding(APPROVE_BINDING, NODECLIENT_ROLE, &group)
                )
            };
            Outcome::fail(
                format!("CSR {name} has been pending for {age} {why}"),
                format!("kubectl certificate approve {name}"),
            )
        }
    }
}

/// The bootstrap CSR to judge, or the outcome when there is none to judge: none filed yet,
/// gone from the server, or unreadable.
fn filed_csr<'a>(
    obs: &'a Observations,
    approver: &str,
    group: &str,
) -> Result<&'a CertificateSigningRequest, Outcome> {
    match &obs.net.csr {
        Some(Ok(CsrObs::Found(c))) => Ok(c),
        Some(Ok(CsrObs::None)) if auto_approves(obs) == Some(false) => Err(Outcome::warn(
            format!("no CSR filed yet, and none would be auto-approved: {approver} is missing"),
            Some(restore_binding(APPROVE_BINDING, NODECLIENT_ROLE, group)),
        )),
        Some(Ok(CsrObs::None)) => Err(Outcome::pass(
            "no CSR filed yet; a new one would be auto-approved",
        )),
        Some(Ok(CsrObs::Missing { name })) => Err(Outcome::warn(
            format!(
                "CSR {name} (of the pending key) is gone from the server; bootlet files a new one"
            ),
            None,
        )),
        Some(Err(e)) => Err(Outcome::warn(
            format!("cannot read CertificateSigningRequests: {}", report(e)),
            None,
        )),
        None => Err(budget(obs, "GET CertificateSigningRequests")),
    }
}

pub(super) fn client_certificate(
    settings: &Settings,
    obs: &Observations,
    now: SystemTime,
) -> Outcome {
    let (path, info, verdict, other_ca) = match &obs.cert {
        CertObs::Absent => {
            return Outcome::warn(
                format!(
                    "no client certificate in {} yet: bootlet obtains one with the bootstrap token",
                    settings.cert_dir.display()
                ),
                Some("systemctl start bootlet".into()),
            )
        }
        CertObs::Unreadable { path, detail } => return Outcome::fail(detail.clone(), rejoin(path)),
        CertObs::Checked {
            path,
            info,
            verdict,
            other_ca,
        } => (path, info, verdict, other_ca),
    };
    match verdict {
        Ok(()) => valid_certificate(settings, obs, now, path, info.as_deref(), other_ca.as_ref()),
        Err(e) => refused_certificate(settings, path, e),
    }
}

/// The fix for an installed certificate bootlet will not use: drop it and join again.
fn rejoin(path: &Path) -> String {
    format!(
        "rm {} && systemctl restart bootlet  # re-join with the bootstrap token",
        path.display()
    )
}

/// A certificate that passed every offline check: pass, unless another CA's certificate went
/// unvouched or it nears its end with rotation off.
fn valid_certificate(
    settings: &Settings,
    obs: &Observations,
    now: SystemTime,
    path: &Path,
    info: Option<&CertInfo>,
    other_ca: Option<&OtherCa>,
) -> Outcome {
    let p = path.display();
    let Some(i) = info else {
        return Outcome::pass(format!("{p} is valid"));
    };
    let life = i.not_after.duration_since(i.not_before).unwrap_or_default();
    let warn_at = i.not_before + life.mul_f64(EXPIRY_WARN_FRACTION);
    let mut text = format!(
        "{} (serial {}) valid until {}",
        i.subject_cn,
        i.serial,
        rfc3339(i.not_after)
    );
    if let Some(other) = other_ca {
        let node = &settings.node_name;
        match vouched(other, node) {
            Ok(accepted) => text.push_str(&accepted),
            Err(doubt) => return Outcome::warn(format!("{text}, {doubt}"), Some(curl(obs))),
        }
    }
    if !settings.rotate_certificates && now >= warn_at {
        Outcome::warn(
            format!("{text}: past 90 % of its lifetime and rotation is off"),
            Some("set --rotate-certificates=true (rotateCertificates: true), then systemctl restart bootlet".into()),
        )
    } else {
        let rotation = if settings.rotate_certificates {
            "on"
        } else {
            "off"
        };
        Outcome::pass(format!("{text}, rotation {rotation}"))
    }
}

/// A certificate the daemon's own check refuses: say which check and how to re-join.
fn refused_certificate(settings: &Settings, path: &Path, e: &InstalledError) -> Outcome {
    let p = path.display();
    match e {
        InstalledError::Verify(VerifyError::WrongSubject { expected, got }) => {
            let old = got
                .split(',')
                .next()
                .and_then(|cn| cn.trim().strip_prefix("CN=system:node:"))
                .unwrap_or("OLD");
            Outcome::fail(
                format!("{p} is for {got}, but this node is {expected} (--node-name {}): did the host name change? To keep the old identity run with --node-name {old}", settings.node_name),
                rejoin(path),
            )
        }
        InstalledError::Verify(VerifyError::Expired { not_after }) => Outcome::fail(
            format!("{p} expired at {}", rfc3339(*not_after)),
            rejoin(path),
        ),
        InstalledError::Verify(VerifyError::UntrustedIssuer { issuer }) => Outcome::fail(
            format!("{p} was issued by {issuer:?}, not by the cluster CA: a certificate left from a previous install"),
            rejoin(path),
        ),
        InstalledError::Unaccepted { issuer, source } => Outcome::fail(
            format!("{p} was issued by {issuer:?}, not by the cluster CA, and the API server does not vouch for it ({}): a certificate left from a previous install", report(source)),
            rejoin(path),
        ),
        e => Outcome::fail(format!("{p}: {}", report(e)), rejoin(path)),
    }
}

/// What the proof said of a certificate from another CA than the kubeconfig's: the text to
/// add to a pass, or the doubt that makes it a warning (the daemon uses it all the same).
fn vouched(other: &OtherCa, node: &str) -> Result<String, String> {
    let issuer = &other.issuer;
    match &other.proof {
        Proof::Accepted(vouched) => Ok(format!(", issued by {issuer:?} (not the kubeconfig's CA) and accepted by the API server: {}", vouched.evidence(&CertProfile::client(node)))),
        Proof::Unanswered { reason } => Err(format!("issued by {issuer:?}, not the kubeconfig's CA, and the API server could not be asked whether it accepts it ({reason}); bootlet uses it all the same")),
        Proof::NotAsked => Err(format!("issued by {issuer:?}, not the kubeconfig's CA; whether the API server accepts it was not asked")),
    }
}
