//! The verdicts: one pure function per check over what observe.rs saw, with the observed
//! value in the summary and the fixing command in the remediation. No IO, no clock.
//! Who-may-do-what verdicts live in `checks/access.rs`, the Node and Lease in `checks/node.rs`.

use std::time::SystemTime;

use crate::api;
use crate::api::kubeconfig::exec::ExecError;
use crate::api::kubeconfig::{ClusterAccess, Credential, KubeconfigError};
use crate::config::{ConfigError, Settings};
use crate::identity::bootstrap::InstalledError;
use crate::pki::verify::VerifyError;
use crate::runtime::health::rfc3339;
use crate::runtime::report;

use super::observe::{CertObs, ExecIssued, HttpFailure, Observations, TlsFailure, Using};
use super::{CheckId, Outcome};

mod access;
mod node;
mod serving;

/// Skew beyond this is a warning: fresh certificates look not yet valid, rotation drifts.
pub const SKEW_WARN_SECS: u64 = 30;
/// Skew beyond this fails: the contract's 5 minutes (verify's notBefore tolerance too).
pub const SKEW_FAIL_SECS: u64 = 300;
const NEW_TOKEN: &str = "kubeadm token create --print-join-command";
/// The one command that brings back a node whose certificate expired after kubeadm deleted
/// its bootstrap kubeconfig (`bootlet rejoin`).
const REJOIN: &str = "bootlet rejoin --token TOKEN --discovery-token-ca-cert-hash sha256:HASH  # TOKEN and HASH as `kubeadm token create --print-join-command` prints them on a control-plane host";

/// The outcome of check `id`; called only when its dependencies passed or warned.
pub fn verdict(id: CheckId, obs: &Observations, now: SystemTime) -> Outcome {
    let settings = match &obs.settings {
        Some(Ok(s)) => s,
        other => return config(other.as_ref()),
    };
    match id {
        CheckId::Config => config_with_kubelet(settings, obs),
        CheckId::BootstrapKubeconfig => bootstrap_kubeconfig(obs),
        CheckId::ServerReachable => server_reachable(obs),
        CheckId::CaTrust => ca_trust(obs),
        CheckId::ClockSkew => clock_skew(obs, now),
        CheckId::Authentication => access::authentication(settings, obs),
        CheckId::Authorization => access::authorization(settings, obs),
        CheckId::Csr => access::csr(settings, obs, now),
        CheckId::ClientCertificate => access::client_certificate(settings, obs, now),
        CheckId::Node => node::node(settings, obs),
        CheckId::Lease => node::lease(settings, obs, now),
        CheckId::ServingCsr => serving::serving_csr(settings, obs, now),
    }
}

/// The drop-in bootlet's package ships, to link when the kubelet's unit lacks it.
const LINK_DROPIN: &str = "mkdir -p /etc/systemd/system/kubelet.service.d && ln -sf /usr/share/bootlet/kubelet.service.d/20-bootlet.conf /etc/systemd/system/kubelet.service.d/ && systemctl daemon-reload && systemctl restart kubelet";

/// The settings, and a warning when the kubelet's unit would make it a second
/// bootstrapper (`--bootstrap-kubeconfig`: two CSRs, two keys, a race on
/// kubelet-client-current.pem) or a second rotator (`rotateCertificates: true` in its
/// config file without the drop-in's `--rotate-certificates=false`).
fn config_with_kubelet(settings: &Settings, obs: &Observations) -> Outcome {
    let summary = format!(
        "node {}, cert dir {}, bootstrap kubeconfig {}",
        settings.node_name,
        settings.cert_dir.display(),
        settings.bootstrap_kubeconfig.display()
    );
    let Some(kubelet) = &obs.kubelet else {
        return Outcome::pass(summary);
    };
    use super::observe::kubelet::flag;
    if let Some(file) = flag(&kubelet.argv, "bootstrap-kubeconfig").filter(|f| !f.is_empty()) {
        return Outcome::warn(
            format!("{summary}; but kubelet.service passes --bootstrap-kubeconfig={file}: the kubelet would bootstrap too (a second CSR and key beside bootlet's); bootlet's kubelet drop-in is not in effect"),
            Some(LINK_DROPIN.into()),
        );
    }
    let rotates_flag = flag(&kubelet.argv, "rotate-certificates").map(|v| v != "false");
    if rotates_flag.unwrap_or(kubelet.rotate_in_config == Some(true)) {
        return Outcome::warn(
            format!("{summary}; but the kubelet would also rotate its client certificate (rotateCertificates: true in its config, and no --rotate-certificates=false on its command line): two rotators"),
            Some(LINK_DROPIN.into()),
        );
    }
    Outcome::pass(summary)
}

fn config(loaded: Option<&Result<Settings, ConfigError>>) -> Outcome {
    match loaded {
        Some(Err(e @ ConfigError::Hostname { .. })) => Outcome::fail(
            report(e),
            "bootlet doctor --node-name \"$(hostname | tr A-Z a-z)\"",
        ),
        Some(Err(e)) => Outcome::fail(
            report(e),
            "fix the file or flag named above, then rerun: bootlet doctor",
        ),
        _ => Outcome::fail("the configuration was not loaded", "bootlet doctor --help"),
    }
}

fn bootstrap_kubeconfig(obs: &Observations) -> Outcome {
    let cert_valid = matches!(obs.using, Using::ClientCert { .. });
    let problem = match bootstrap_credential(obs, cert_valid) {
        Ok(outcome) => return outcome,
        Err(problem) => problem,
    };
    if cert_valid {
        Outcome::warn(
            format!("{problem}; not needed while the client certificate is valid, only to re-join"),
            Some(NEW_TOKEN.into()),
        )
    } else {
        cannot_join(obs, &problem)
    }
}

/// The verdict on the bootstrap kubeconfig's credential: an outcome, or the problem that
/// makes it unusable for a join (a warning only while the client certificate is valid).
fn bootstrap_credential(obs: &Observations, cert_valid: bool) -> Result<Outcome, String> {
    let b = match &obs.bootstrap {
        Some(Ok(b)) => b,
        Some(Err(e)) => return Err(report(e)),
        None => return Err("not read".into()),
    };
    match &b.credential {
        Credential::Token(t) if t.is_bootstrap_token() => Ok(Outcome::pass(format!(
            "{}: server {}, bootstrap token {}",
            b.path.display(),
            b.server,
            t.id()
        ))),
        Credential::Token(_) => Err(format!(
            "{}: the token is not a bootstrap token ([a-z0-9]{{6}}.[a-z0-9]{{16}})",
            b.path.display()
        )),
        Credential::ClientCert { .. } => Ok(Outcome::warn(
            format!(
                "{}: authenticates with a client certificate, not a bootstrap token",
                b.path.display()
            ),
            None,
        )),
        Credential::Exec(plugin) => exec_credential(b, plugin.command(), obs, cert_valid),
        Credential::None => Err(format!("{}: the user has no token", b.path.display())),
    }
}

/// With no usable bootstrap credential and no valid client certificate the node cannot
/// join; two common cases get their own words and fix: the certificate expired after
/// kubeadm deleted the bootstrap kubeconfig, and a node never given one.
fn cannot_join(obs: &Observations, problem: &str) -> Outcome {
    if let (
        Some(Err(KubeconfigError::Missing { path })),
        CertObs::Checked {
            verdict: Err(InstalledError::Verify(VerifyError::Expired { not_after })),
            ..
        },
    ) = (&obs.bootstrap, &obs.cert)
    {
        // Back after a long downtime: the certificate expired while the node was off, and
        // kubeadm deleted the bootstrap kubeconfig after the join. kubelet.conf still names
        // the cluster, so a fresh token is all it takes.
        Outcome::fail(
            format!(
                "the client certificate expired at {} and there is no bootstrap credential ({} was deleted after the join, as kubeadm does): this node cannot authenticate on its own",
                rfc3339(*not_after),
                path.display()
            ),
            REJOIN,
        )
    } else if let (Some(Err(KubeconfigError::Missing { path })), CertObs::Absent) =
        (&obs.bootstrap, &obs.cert)
    {
        // A node nobody has joined yet (an image's first boot before cloud-init's
        // `kubeadm join`): nothing is broken, it has simply not been given a credential.
        Outcome::fail(
            format!(
                "this node has not been given a bootstrap credential yet: no {} and no client certificate; bootlet waits for the file and joins within seconds of it appearing",
                path.display()
            ),
            format!(
                "on a control-plane host: {NEW_TOKEN}; then run the printed `kubeadm join …` on this node (it writes {}), or write a bootstrap kubeconfig there yourself",
                path.display()
            ),
        )
    } else {
        Outcome::fail(
            format!("{problem}; no valid client certificate either, so this node cannot join"),
            NEW_TOKEN,
        )
    }
}

/// The verdict on a bootstrap kubeconfig whose user is exec plugin `command`: an outcome,
/// or (with a valid client certificate, which makes it unneeded) the problem to warn of.
fn exec_credential(
    b: &ClusterAccess,
    command: &str,
    obs: &Observations,
    cert_valid: bool,
) -> Result<Outcome, String> {
    let (path, server) = (b.path.display(), &b.server);
    match &obs.exec {
        Some(Ok(issued)) => {
            let what = match issued {
                ExecIssued::Token { id } if id != "<opaque>" => format!("bootstrap token {id}"),
                ExecIssued::Token { .. } => "a token".to_string(),
                ExecIssued::ClientCert { subject } => {
                    format!("a client certificate for {subject}")
                }
            };
            Ok(Outcome::pass(format!(
                "{path}: server {server}, exec plugin {command} handed out {what}"
            )))
        }
        Some(Err(e)) if !cert_valid => Ok(Outcome::fail(
            format!("{path}: bootstrap credential: {}", report(e)),
            exec_fix(e, command),
        )),
        Some(Err(e)) => Err(format!("{path}: bootstrap credential: {}", report(e))),
        None => Ok(Outcome::pass(format!(
            "{path}: server {server}, exec plugin {command} (not run: the client certificate is valid)"
        ))),
    }
}

/// The fix for an exec plugin that handed out nothing: its install hint when it is not
/// installed, else running it by hand.
fn exec_fix(e: &ExecError, command: &str) -> String {
    match e {
        ExecError::NotFound {
            install_hint: Some(hint),
            ..
        } => crate::runtime::text::one_line(hint).into_owned(),
        ExecError::NotFound { .. } => {
            format!("install {command}, or fix the exec command in the bootstrap kubeconfig")
        }
        _ => format!(
            "{command}  # run the plugin by hand (with its args and env from the bootstrap kubeconfig) to see why; bootlet gives it no stdin"
        ),
    }
}

fn server(obs: &Observations) -> String {
    obs.cluster
        .as_ref()
        .map_or_else(|| "the API server".into(), |c| c.server.url.clone())
}

fn curl(obs: &Observations) -> String {
    format!(
        "curl -sk {}/healthz  # from this node: is kube-apiserver up, and the route/firewall open?",
        server(obs)
    )
}

fn budget(obs: &Observations, what: &str) -> Outcome {
    if obs.net.budget_exceeded {
        Outcome::fail(
            format!(
                "{}: {what}: no answer within doctor's time budget",
                server(obs)
            ),
            curl(obs),
        )
    } else {
        Outcome::fail(format!("{}: {what}: not observed", server(obs)), curl(obs))
    }
}

fn server_reachable(obs: &Observations) -> Outcome {
    let s = server(obs);
    match (&obs.net.tcp, &obs.net.tls) {
        (Some(Err(e)), _) => Outcome::fail(format!("{s}: {e}"), curl(obs)),
        (None, _) => budget(obs, "TCP connect"),
        (_, Some(Err(TlsFailure::Timeout { after }))) => Outcome::fail(
            format!(
                "{s} accepts TCP connections but did not answer the TLS handshake within {after:?}"
            ),
            curl(obs),
        ),
        (_, Some(Err(TlsFailure::Protocol { detail }))) => {
            Outcome::fail(format!("{s}: TLS handshake failed: {detail}"), curl(obs))
        }
        (_, None) => budget(obs, "TLS handshake"),
        // Not a session we trust: ca-trust names that, and no request was sent.
        (_, Some(Err(_))) => Outcome::pass(format!("{s} answers TCP and TLS")),
        (_, Some(Ok(()))) => round_trip(obs, &s),
    }
}

/// The HTTP part of server-reachable: its own `GET /livez` on the verified session.
fn round_trip(obs: &Observations, s: &str) -> Outcome {
    let path = super::observe::LIVEZ;
    match &obs.net.http {
        Some(Ok(code)) if *code >= 500 => Outcome::warn(
            format!("{s} answers TCP, TLS and HTTP, but GET {path} says {code}: the API server reports itself unhealthy"),
            Some(curl(obs)),
        ),
        Some(Ok(code)) => Outcome::pass(format!(
            "{s} answers TCP, TLS and HTTP (GET {path}: {code})"
        )),
        Some(Err(HttpFailure::Timeout { after })) => Outcome::fail(
            format!("{s} completes TCP and TLS but did not answer GET {path} within {after:?}: the server is hung or overloaded"),
            curl(obs),
        ),
        Some(Err(HttpFailure::Failed { detail })) => Outcome::fail(
            format!("{s} completes TCP and TLS but gave no HTTP answer to GET {path}: {detail}"),
            curl(obs),
        ),
        None => budget(obs, &format!("GET {path}")),
    }
}

fn ca_trust(obs: &Observations) -> Outcome {
    let file = obs
        .cluster
        .as_ref()
        .map_or_else(String::new, |c| c.path.display().to_string());
    match &obs.net.tls {
        Some(Err(TlsFailure::UnknownCa {
            kubeconfig_pins,
            kubeconfig_cas,
            server_ca_pins,
            server_issuer,
            server_issuer_key_id,
        })) => {
            // What this endpoint presents is unverified (it may be an impostor, or another
            // cluster): shown to compare, never offered as the pin to trust. The cluster's own
            // pin comes from the control plane, in the join command kubeadm prints there.
            // Names alone do not tell two kubeadm CAs apart (both `CN=kubernetes`): key ids do.
            let signer = match server_issuer_key_id {
                Some(id) => format!("{server_issuer}, key id {id}"),
                None => server_issuer.clone(),
            };
            let theirs = if server_ca_pins.is_empty() {
                format!("a certificate issued by {signer} (the server sent no CA certificate)")
            } else {
                format!(
                    "CA {} (information only: an unverified endpoint's CA, not a pin to trust)",
                    server_ca_pins.join(", ")
                )
            };
            let ours = if kubeconfig_cas.is_empty() {
                String::new()
            } else {
                format!(" ({})", kubeconfig_cas.join("; "))
            };
            Outcome::fail(
                format!(
                    "x509: certificate signed by unknown authority: the server presents {theirs}, but {file} trusts CA {}{ours}",
                    kubeconfig_pins.join(", ")
                ),
                format!("{NEW_TOKEN}  # on a control-plane node: join again with the command it prints (its --discovery-token-ca-cert-hash is the cluster CA's pin) to rewrite {file}"),
            )
        }
        Some(Err(TlsFailure::BadCertificate { detail })) => Outcome::fail(
            format!("{}: the server certificate chains to the CA in {file} but is unusable: {detail}", server(obs)),
            format!("openssl s_client -connect {} </dev/null | openssl x509 -noout -text  # check its SANs and dates", host_port(&server(obs))),
        ),
        Some(Ok(())) => Outcome::pass(format!("the server certificate chains to the CA in {file}")),
        _ => budget(obs, "TLS handshake"),
    }
}

fn host_port(server: &str) -> String {
    server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

fn clock_skew(obs: &Observations, now: SystemTime) -> Outcome {
    const SYNC: &str = "timedatectl set-ntp true  # then check: timedatectl timesync-status";
    if let CertObs::Checked {
        path,
        verdict: Err(InstalledError::Verify(VerifyError::NotYetValid { not_before })),
        ..
    } = &obs.cert
    {
        let ahead = not_before.duration_since(now).unwrap_or_default();
        return Outcome::fail(
            format!(
                "{} is not valid before {}, {} ahead of this node's clock: the clock is behind",
                path.display(),
                rfc3339(*not_before),
                crate::runtime::health::human(ahead)
            ),
            SYNC,
        );
    }
    match &obs.net.skew {
        Some(Ok(skew)) => {
            let abs = skew.unsigned_abs();
            let side = if *skew > 0 { "ahead of" } else { "behind" };
            let text = format!("the server's Date is {abs}s {side} this node's clock");
            if abs > SKEW_FAIL_SECS {
                Outcome::fail(format!("{text} (more than 5 minutes)"), SYNC)
            } else if abs > SKEW_WARN_SECS {
                Outcome::warn(format!("{text} (more than 30 s)"), Some(SYNC.into()))
            } else {
                Outcome::pass(format!("within {abs}s of the server's Date"))
            }
        }
        Some(Err(e)) => Outcome::fail(format!("GET /version: {}", report(e)), curl(obs)),
        None => budget(obs, "GET /version"),
    }
}

/// Whether an API error is the authorizer's refusal.
fn forbidden(r: &Option<Result<impl Sized, api::Error>>) -> Option<&api::Error> {
    match r {
        Some(Err(e)) if e.is_forbidden() => Some(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
