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
use crate::checkid::CheckId;
use crate::config::Settings;
use crate::identity::issue::{api_check, IssueError, Issuer, Publish, Request};
use crate::identity::pass::{self, PassError};
use crate::identity::rotation::{rotate_at, Retries};
use crate::identity::sans::{self, NodeRead};
use crate::metrics::METRICS;
use crate::pki::files::CertDir;
use crate::pki::verify::verify_issued;
use crate::pki::{parse_cert_chain, CertInfo, CertProfile, NodeKey, Sans};
use crate::purpose::Purpose;
use crate::runtime::health::{self, CertSummary, Health, State};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::ticker::Ticker;
use crate::runtime::{clock, report};

mod placeholder;

pub use placeholder::ensure_placeholder;

/// The heartbeat name the watchdog reports.
pub const TASK: &str = "serving";
/// How long one wait for approval lasts before the warning is repeated (and the same CSR
/// adopted again); never longer than `--csr-timeout`.
const APPROVAL_NAG: Duration = Duration::from_secs(300);
/// How often the loop looks at the Node's addresses (and so notices a new one).
const ADDRESS_CHECK: Duration = Duration::from_secs(60);
/// One read of the Node's addresses takes at most this long.
const NODE_READ_LIMIT: Duration = Duration::from_secs(15);
/// Slack on a heartbeat bound.
const BEAT_SLACK: Duration = Duration::from_secs(60);

/// A Node read that told nothing: why (for the log and STATUS=), and the doctor check.
struct ReadFailed {
    reason: String,
    check: CheckId,
}

/// The cluster-issued serving certificate in use, and when it is due for rotation (drawn
/// once per certificate).
struct Current {
    info: CertInfo,
    rotate_at: SystemTime,
}

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
        // The last Node read failed (one warning per streak of failures).
        let mut node_failing = false;
        let mut ticker = Ticker::for_loops();
        loop {
            let client = self.clients.borrow().clone();
            // The read is bounded, and the heartbeat covers it.
            self.health.beat(TASK, NODE_READ_LIMIT + BEAT_SLACK);
            let read = tokio::select! {
                read = self.read_node(&client) => read,
                () = shutdown.requested() => return,
            };
            let now = clock::now();
            let wanted = self.wanted(
                read,
                current.as_ref().map(|c| &c.info),
                &mut node_failing,
                now,
            );
            let plan = wanted.and_then(|w| self.due(current.as_ref(), &w, now).map(|at| (w, at)));
            let wait = match &plan {
                Some((_, at)) if Instant::now() >= not_before => {
                    at.duration_since(now).unwrap_or_default()
                }
                Some(_) => not_before.saturating_duration_since(Instant::now()),
                None => ADDRESS_CHECK,
            }
            .min(ADDRESS_CHECK);
            let Some((wanted, _)) = plan.filter(|_| wait.is_zero()) else {
                self.health.beat(TASK, wait + BEAT_SLACK);
                tokio::select! {
                    () = ticker.sleep_until(Instant::now() + wait) => {}
                    () = shutdown.requested() => return,
                }
                continue;
            };
            let profile = CertProfile::serving(&self.settings.node_name, wanted);
            // One wait lasts until the next reminder (at most half of --csr-timeout, after
            // which the CSR is given up); the same CSR is adopted again after each. The
            // whole pass, filing included, is bounded, and the heartbeat promises that.
            let limit = APPROVAL_NAG
                .min(self.settings.csr_timeout / 2)
                .max(Duration::from_secs(1));
            let request = Request {
                profile: &profile,
                client: &client,
                ca_pem: &self.ca_pem,
                wait_limit: limit,
                not_issued_warning: self.settings.csr_not_issued_warning,
                publish: Publish::Files,
            };
            let issuing = issuer.issue(&dir, request);
            let result = tokio::select! {
                r = pass::bounded(&self.health, TASK, limit, BEAT_SLACK, issuing) => r,
                () = shutdown.requested() => return,
            };
            match result {
                Ok(issued) => {
                    tracing::info!(serial = %issued.info.serial, not_after = %health::rfc3339(issued.info.not_after), sans = ?issued.info.sans, "the kubelet serves the new certificate once it re-reads kubelet-server-current.pem (kubelet 1.31+ does so on its own; older kubelets need `systemctl restart kubelet`)");
                    if let Some(previous) = &current {
                        let lived = clock::now()
                            .duration_since(previous.info.not_before)
                            .unwrap_or_default();
                        METRICS.serving_rotated(lived);
                    }
                    self.installed_now(&issued.info);
                    current = Some(self.current(issued.info, true));
                    pending_since = None;
                    retries.reset();
                    self.prune(&dir);
                }
                Err(PassError::Failed(e)) if e.is_approval_timeout() => {
                    let since = *pending_since.get_or_insert(now);
                    let name = csr_name(&e);
                    tracing::warn!(csr = %name, "the serving certificate's CSR {name} is still waiting for approval: approve it with `kubectl certificate approve {name}`; Kubernetes never approves kubelet-serving CSRs on its own, so automation needs an approver such as kubelet-csr-approver");
                    if clock::now().duration_since(since).unwrap_or_default()
                        >= self.settings.csr_timeout
                    {
                        tracing::warn!(csr = %name, "giving up on CSR {name} after --csr-timeout; the next one uses a fresh key");
                        if let Err(e) = dir.remove_pending_key() {
                            tracing::warn!(error = %report(&e), "cannot remove the pending serving key");
                        }
                        METRICS.csr_abandoned(Purpose::Serving);
                        pending_since = None;
                    }
                }
                Err(e) => {
                    let remaining = current.as_ref().map_or(Duration::ZERO, |c| {
                        c.info.not_after.duration_since(now).unwrap_or_default()
                    });
                    let refusal = e.failed().is_some_and(IssueError::is_refusal);
                    let delay = retries.after(
                        refusal,
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
    fn due(&self, current: Option<&Current>, wanted: &Sans, now: SystemTime) -> Option<SystemTime> {
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
        if cert.info.sans != *wanted {
            tracing::info!(have = ?cert.info.sans, want = ?wanted, "the node's addresses changed; requesting a new serving certificate");
            return Some(now);
        }
        Some(cert.rotate_at)
    }

    /// `info` with its rotation deadline, drawn from its serial; for one issued just now
    /// (`fresh`) whose deadline has already passed by this node's clock, counted from now,
    /// as for the client certificate (no CSR storm with a clock ahead of the signer's).
    fn current(&self, info: CertInfo, fresh: bool) -> Current {
        let s = &self.settings;
        let (at, recounted) = rotate_at(
            &info,
            s.rotation_fraction,
            s.rotation_jitter,
            fresh,
            clock::now(),
        );
        if recounted {
            tracing::warn!(serial = %info.serial, not_before = %health::rfc3339(info.not_before), "the new serving certificate's notBefore is so far behind this node's clock that its rotation deadline has passed; counting its lifetime from now");
        }
        Current {
            info,
            rotate_at: at,
        }
    }

    /// One read of the Node, from the API server's watch cache (`resourceVersion=0`: this
    /// runs every minute on every node, and an address a few seconds old is fine), bounded
    /// by [`NODE_READ_LIMIT`].
    async fn read_node(&self, client: &ApiClient) -> Result<Option<Node>, ReadFailed> {
        let path = format!(
            "/api/v1/nodes/{}?resourceVersion=0",
            self.settings.node_name
        );
        match tokio::time::timeout(NODE_READ_LIMIT, client.get::<Node>(&path)).await {
            Ok(Ok(node)) => Ok(Some(node)),
            Ok(Err(e)) if e.is_not_found() => Ok(None),
            Ok(Err(e)) => Err(ReadFailed {
                reason: report(&e),
                check: api_check(&e),
            }),
            Err(_) => Err(ReadFailed {
                reason: format!("no answer within {}", health::human(NODE_READ_LIMIT)),
                check: CheckId::ServerReachable,
            }),
        }
    }

    /// The SANs to ask for after a Node read (see [`sans::wanted`]): the Node's addresses
    /// once it exists; the node name and `--node-ip` (or the default-route interface's
    /// addresses) only while it does not; plus `--tls-san`. A failed read keeps the SANs of
    /// the certificate in use, or — with none yet — waits, saying so in STATUS=.
    fn wanted(
        &self,
        read: Result<Option<Node>, ReadFailed>,
        current: Option<&CertInfo>,
        failing: &mut bool,
        now: SystemTime,
    ) -> Option<Sans> {
        let s = &self.settings;
        let read = match read {
            Ok(Some(node)) => NodeRead::Found(sans::from_node(&node)),
            Ok(None) => NodeRead::Missing,
            Err(ReadFailed { reason, check }) => {
                let node = &s.node_name;
                tracing::debug!(error = %reason, "Node lookup for the serving certificate's addresses failed");
                if !std::mem::replace(failing, true) {
                    let keeping = match current {
                        Some(_) => "keeping the serving certificate's SANs until it can be read",
                        None => "no serving CSR until it can be read",
                    };
                    tracing::warn!(error = %reason, %check, "cannot read Node {node} for the serving certificate's addresses; {keeping}");
                }
                if current.is_none() {
                    self.health.update(|h| {
                        h.serving = Some(State::BackingOff {
                            until: now + ADDRESS_CHECK,
                            reason: format!("cannot read Node {node} for its addresses: {reason}"),
                            check,
                        })
                    });
                }
                NodeRead::Failed
            }
        };
        if !matches!(read, NodeRead::Failed) && std::mem::take(failing) {
            tracing::info!("the Node can be read again");
        }
        let settings =
            || sans::from_settings(&s.node_name, &s.node_ips, &self.detected, &s.tls_sans);
        sans::wanted(read, current.map(|c| &c.sans), settings, &s.tls_sans)
    }

    /// The installed serving certificate, if it is still ours: its key, the cluster CA, the
    /// serverAuth usage and validity now (its SANs are compared with the wanted ones later).
    fn installed(&self, dir: &CertDir) -> Option<Current> {
        let (chain, key) = dir.read_current().ok()??;
        let key = NodeKey::from_pem(&key).ok()?;
        let leaf = parse_cert_chain(&chain).ok()?.into_iter().next()?.0;
        let profile = CertProfile::serving(&self.settings.node_name, leaf.sans.clone());
        match verify_issued(&chain, &key, &profile, &self.ca_pem, clock::now()) {
            Ok(info) => {
                self.installed_now(&info);
                Some(self.current(info, false))
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

    fn report_failure(&self, e: &PassError<IssueError>, delay: Duration) {
        let check = e.check(IssueError::check);
        tracing::warn!(error = %report(e), retry_in = %health::human(delay), %check, "the serving certificate was not issued ({})", health::doctor_hint(check));
        self.health.update(|s| {
            s.serving = Some(State::BackingOff {
                until: clock::now() + delay,
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

/// The CSR an approval timeout was about.
fn csr_name(e: &IssueError) -> String {
    match e {
        IssueError::Csr(crate::identity::csr::CsrError::Timeout { name, .. }) => name.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
