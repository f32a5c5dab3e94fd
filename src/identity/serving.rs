//! The kubelet's serving certificate (`--rotate-server-certificates`): the serving profile
//! through the same issuing pipeline, filed with the node's client certificate (never the
//! bootstrap token), rotated at the same fraction of its lifetime, and re-requested when
//! the node's addresses change. Serving CSRs are not auto-approved by Kubernetes: while one
//! waits, STATUS= and a warning every few minutes say how to approve it. Never gates READY.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::ApiClient;
use crate::config::Settings;
use crate::identity::issue::{IssueError, Issuer, Publish, Request};
use crate::identity::rotation::{deadline, draw_for, Retries};
use crate::identity::sans;
use crate::metrics::{Profile, METRICS};
use crate::pki::files::CertDir;
use crate::pki::verify::verify_issued;
use crate::pki::{parse_cert_chain, CertInfo, CertProfile, NodeKey, Sans};
use crate::runtime::health::{self, CertSummary, Health, State};
use crate::runtime::report;
use crate::runtime::shutdown::Shutdown;
use crate::runtime::ticker::Ticker;

/// The heartbeat name the watchdog reports.
pub const TASK: &str = "serving";
/// How long one wait for approval lasts before the warning is repeated (and the same CSR
/// adopted again); never longer than `--csr-timeout`.
const APPROVAL_NAG: Duration = Duration::from_secs(300);
/// How often the loop looks at the Node's addresses (and so notices a new one).
const ADDRESS_CHECK: Duration = Duration::from_secs(60);
/// Slack on a heartbeat bound.
const BEAT_SLACK: Duration = Duration::from_secs(60);

/// The serving-certificate loop and what it needs.
pub struct Serving {
    pub settings: Settings,
    pub health: Health,
    /// The client for the node's current client certificate (rotation publishes new ones).
    pub clients: watch::Receiver<ApiClient>,
    /// The cluster CA the serving certificate must chain to.
    pub ca_pem: Vec<u8>,
    /// The addresses of the default-route interface, looked up once at start.
    pub detected: Vec<IpAddr>,
}

// === impl Serving ===

impl Serving {
    /// Obtain and rotate the serving certificate until shutdown.
    pub async fn run(self, mut shutdown: Shutdown) {
        let dir = match CertDir::open(&self.settings.cert_dir) {
            Ok(dir) => dir.for_profile(&CertProfile::serving(
                &self.settings.node_name,
                Sans::default(),
            )),
            Err(e) => {
                tracing::error!(error = %report(&e), "the serving certificate loop cannot open the cert dir");
                return;
            }
        };
        let issuer = Issuer {
            health: self.health.clone(),
        };
        let mut current = self.installed(&dir);
        let mut retries = Retries::new(&self.settings);
        let mut not_before = Instant::now();
        let mut pending_since: Option<SystemTime> = None;
        let mut ticker = Ticker::new();
        loop {
            let client = self.clients.borrow().clone();
            let wanted = self.wanted_sans(&client).await;
            let now = SystemTime::now();
            let due = self.due(current.as_ref(), &wanted, now);
            let wait = match due {
                Some(at) if Instant::now() >= not_before => {
                    at.duration_since(now).unwrap_or_default()
                }
                Some(_) => not_before.saturating_duration_since(Instant::now()),
                None => ADDRESS_CHECK,
            }
            .min(ADDRESS_CHECK);
            if !wait.is_zero() {
                self.health.beat(TASK, wait + BEAT_SLACK);
                tokio::select! {
                    () = ticker.sleep_until(Instant::now() + wait) => {}
                    () = shutdown.requested() => return,
                }
                continue;
            }
            let profile = CertProfile::serving(&self.settings.node_name, wanted);
            // One wait lasts until the next reminder (at most half of --csr-timeout, after
            // which the CSR is given up); the same CSR is adopted again after each.
            let limit = APPROVAL_NAG
                .min(self.settings.csr_timeout / 2)
                .max(Duration::from_secs(1));
            self.health.beat(TASK, limit + BEAT_SLACK);
            let request = Request {
                profile: &profile,
                client: &client,
                ca_pem: &self.ca_pem,
                wait_limit: limit,
                not_issued_warning: self.settings.csr_not_issued_warning,
                publish: Publish::Files,
            };
            let result = tokio::select! {
                r = issuer.issue(&dir, request) => r,
                () = shutdown.requested() => return,
            };
            match result {
                Ok(issued) => {
                    tracing::info!(serial = %issued.info.serial, not_after = %health::rfc3339(issued.info.not_after), sans = ?issued.info.sans, "the kubelet serves the new certificate once it re-reads kubelet-server-current.pem (kubelet 1.31+ does so on its own; older kubelets need `systemctl restart kubelet`)");
                    if let Some(previous) = &current {
                        let lived = SystemTime::now()
                            .duration_since(previous.not_before)
                            .unwrap_or_default();
                        METRICS.serving_rotated(lived);
                    }
                    self.installed_now(&issued.info);
                    current = Some(issued.info);
                    pending_since = None;
                    retries.reset();
                    self.prune(&dir);
                }
                Err(e) if e.is_approval_timeout() => {
                    let since = *pending_since.get_or_insert(now);
                    let name = csr_name(&e);
                    tracing::warn!(csr = %name, "the serving certificate's CSR {name} is still waiting for approval: approve it with `kubectl certificate approve {name}`; Kubernetes never approves kubelet-serving CSRs on its own, so automation needs an approver such as kubelet-csr-approver");
                    if SystemTime::now().duration_since(since).unwrap_or_default()
                        >= self.settings.csr_timeout
                    {
                        tracing::warn!(csr = %name, "giving up on CSR {name} after --csr-timeout; the next one uses a fresh key");
                        if let Err(e) = dir.remove_pending_key() {
                            tracing::warn!(error = %report(&e), "cannot remove the pending serving key");
                        }
                        METRICS.csr_abandoned(Profile::Serving);
                        pending_since = None;
                    }
                }
                Err(e) => {
                    let remaining = current.as_ref().map_or(Duration::ZERO, |c| {
                        c.not_after.duration_since(now).unwrap_or_default()
                    });
                    let delay = retries.after(
                        e.is_refusal(),
                        remaining.is_zero(),
                        remaining.max(Duration::from_secs(10)),
                    );
                    pending_since = None;
                    self.report_failure(&e, delay);
                    not_before = Instant::now() + delay;
                }
            }
        }
    }

    /// When the serving certificate needs a new CSR: now when there is none or it names
    /// other addresses, else at its rotation deadline. `None` while no IP is known (the
    /// signer rejects a serving CSR without one).
    fn due(
        &self,
        current: Option<&CertInfo>,
        wanted: &Sans,
        now: SystemTime,
    ) -> Option<SystemTime> {
        if !sans::usable(wanted) {
            self.health.update(|s| {
                s.serving = Some(State::BackingOff {
                    until: now + ADDRESS_CHECK,
                    reason: "no IP address for the serving certificate yet (set --node-ip)".into(),
                    check: crate::checkid::CheckId::Node,
                })
            });
            return None;
        }
        let Some(cert) = current else {
            return Some(now);
        };
        if cert.sans != *wanted {
            tracing::info!(have = ?cert.sans, want = ?wanted, "the node's addresses changed; requesting a new serving certificate");
            return Some(now);
        }
        let s = &self.settings;
        Some(deadline(
            cert.not_before,
            cert.not_after,
            s.rotation_fraction,
            s.rotation_jitter,
            draw_for(&cert.serial),
        ))
    }

    /// The SANs to ask for: the Node's addresses once it exists, else the node name and
    /// `--node-ip` (or the default-route interface's addresses), plus `--tls-san`.
    async fn wanted_sans(&self, client: &ApiClient) -> Sans {
        let s = &self.settings;
        let node = client
            .get::<Node>(&format!("/api/v1/nodes/{}", s.node_name))
            .await;
        let from_node = match node {
            Ok(node) => sans::from_node(&node),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                tracing::debug!(error = %report(&e), "Node lookup for the serving certificate's addresses failed");
                None
            }
        };
        match from_node {
            Some(found) => sans::with_extra(found, &s.tls_sans),
            None => sans::from_settings(&s.node_name, &s.node_ips, &self.detected, &s.tls_sans),
        }
    }

    /// The installed serving certificate, if it is still ours: its key, the cluster CA, the
    /// serverAuth usage and validity now (its SANs are compared with the wanted ones later).
    fn installed(&self, dir: &CertDir) -> Option<CertInfo> {
        let (chain, key) = dir.read_current().ok()??;
        let key = NodeKey::from_pem(&key).ok()?;
        let leaf = parse_cert_chain(&chain).ok()?.into_iter().next()?.0;
        let profile = CertProfile::serving(&self.settings.node_name, leaf.sans.clone());
        match verify_issued(&chain, &key, &profile, &self.ca_pem, SystemTime::now()) {
            Ok(info) => {
                self.installed_now(&info);
                Some(info)
            }
            Err(e) => {
                tracing::info!(reason = %report(&e), "the installed serving certificate cannot be reused; requesting a new one");
                None
            }
        }
    }

    /// A cluster-issued serving certificate is in place: into the snapshot (STATUS=, and
    /// the TTL that /metrics exports).
    fn installed_now(&self, info: &CertInfo) {
        let summary = CertSummary {
            serial: info.serial.clone(),
            not_after: info.not_after,
            rotate_at: None,
        };
        self.health.update(|s| {
            s.serving = Some(State::Installed);
            s.serving_cert = Some(summary);
        });
    }

    fn report_failure(&self, e: &IssueError, delay: Duration) {
        let check = e.check();
        tracing::warn!(error = %report(e), retry_in = %health::human(delay), %check, "the serving certificate was not issued ({})", health::doctor_hint(check));
        self.health.update(|s| {
            s.serving = Some(State::BackingOff {
                until: SystemTime::now() + delay,
                reason: report(e),
                check,
            })
        });
    }

    fn prune(&self, dir: &CertDir) {
        match dir.prune(self.settings.keep_certificates) {
            Ok(removed) if !removed.is_empty() => tracing::info!(
                count = removed.len(),
                "pruned old serving certificate files"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %report(&e), "pruning old serving certificate files failed")
            }
        }
    }
}

/// How long the placeholder serving certificate is valid (the kubelet's own self-signed
/// one is valid a year too).
const PLACEHOLDER_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Before READY: when no serving certificate is installed, a self-signed one for the SANs
/// known now, so the kubelet (pointed at `kubelet-server-current.pem` by the drop-in) can
/// start while the first serving CSR waits for approval — it refuses to start without the
/// file. This is what the kubelet serves on its own without `serverTLSBootstrap`; bootlet
/// never trusts it and replaces it as soon as a signed certificate is issued.
pub fn ensure_placeholder(settings: &Settings, detected: &[IpAddr]) -> Result<(), String> {
    let profile = CertProfile::serving(
        &settings.node_name,
        sans::from_settings(
            &settings.node_name,
            &settings.node_ips,
            detected,
            &settings.tls_sans,
        ),
    );
    let dir = CertDir::open(&settings.cert_dir)
        .map_err(|e| report(&e))?
        .for_profile(&profile);
    if dir.read_current().ok().flatten().is_some() {
        return Ok(());
    }
    let key = NodeKey::generate().map_err(|e| report(&e))?;
    let now = SystemTime::now();
    let chain = crate::pki::self_signed(&key, &profile, now, PLACEHOLDER_LIFETIME)
        .map_err(|e| report(&e))?;
    let file = dir
        .install(&chain, &key.to_pem(), now)
        .map_err(|e| report(&e))?;
    tracing::info!(file = %file.display(), sans = ?profile.sans, "no serving certificate yet: wrote a self-signed one so the kubelet can start; it is replaced once a kubelet-serving CSR is approved");
    Ok(())
}

/// The CSR an approval timeout was about.
fn csr_name(e: &IssueError) -> String {
    match e {
        IssueError::Csr(crate::identity::csr::CsrError::Timeout { name, .. }) => name.clone(),
        _ => String::new(),
    }
}
