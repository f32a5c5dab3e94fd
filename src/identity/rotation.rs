//! Client-certificate rotation: the deadline (pure, from the certificate itself), and the
//! loop that renews through the current certificate at that deadline, adopts outside
//! replacements, prunes old files and falls back to bootstrap once the certificate expired.
//! When it acts is `schedule`'s (wall-clock deadlines, monotonic back-off).

mod schedule;

pub use schedule::{Next, Schedule};

use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::ApiClient;
use crate::config::Settings;
use crate::identity::bootstrap::{
    check_installed, doctor_hint, Bootstrap, BootstrapError, Credentials, Installed, State,
};
use crate::identity::pass::{self, PassError};
use crate::pki::files::CertDir;
use crate::pki::CertInfo;
use crate::runtime::backoff::Backoff;
use crate::runtime::health::{self, CertSummary, Health};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::ticker::Ticker;
use crate::runtime::{clock, report};

/// Retries of a rotation that failed on the way (a 5xx, a dropped connection, an approval
/// timeout) start here and double up to `MAX_RETRY`, and are never later than a tenth of
/// the remaining lifetime, nor sooner than `MIN_RETRY`. Refusals (Denied, Failed, a
/// certificate we refused) and every attempt after expiry use the contract's CSR back-off
/// instead (`Settings::csr_backoff`: at least 1 min, doubling, capped at 1 h).
const MIN_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// Without rotation, warn once this much of the lifetime has passed.
const WARN_FRACTION: f64 = 0.9;
/// The heartbeat name the watchdog reports (health.rs `beat`).
pub const TASK: &str = "rotation";
/// Slack on a heartbeat bound, for a busy runtime and the work around each wait.
const BEAT_SLACK: Duration = Duration::from_secs(60);

/// When to rotate: `not_before + F × lifetime`, F = `fraction + jitter × (2·draw − 1)`, so F
/// is uniform in `[fraction − jitter, fraction + jitter]` for a uniform `draw` in [0, 1).
pub fn deadline(
    not_before: SystemTime,
    not_after: SystemTime,
    fraction: f64,
    jitter: f64,
    draw: f64,
) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    let f = (fraction + jitter * (2.0 * draw.clamp(0.0, 1.0) - 1.0)).clamp(0.0, 1.0);
    not_before + lifetime.mul_f64(f)
}

/// When to rotate `cert`: its [`deadline`]; but for a certificate issued just now
/// (`fresh`) whose deadline has already passed at `now` — a signer that backdates notBefore
/// far, or this node's clock ahead of the signer's — counted from `now` instead, or every
/// new certificate would be rotated at once (a CSR storm). `true` when it was recounted.
pub fn rotate_at(
    cert: &CertInfo,
    fraction: f64,
    jitter: f64,
    fresh: bool,
    now: SystemTime,
) -> (SystemTime, bool) {
    let from = |start| {
        deadline(
            start,
            cert.not_after,
            fraction,
            jitter,
            draw_for(&cert.serial),
        )
    };
    let at = from(cert.not_before);
    if fresh && at <= now {
        (from(now.max(cert.not_before)), true)
    } else {
        (at, false)
    }
}

/// The jitter draw for a certificate: a hash of its serial mapped to [0, 1), so the
/// deadline is spread across a fleet yet the same after a restart.
pub fn draw_for(serial: &str) -> f64 {
    let digest = Sha256::digest(serial.as_bytes());
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(word) >> 11) as f64 / (1u64 << 53) as f64
}

/// How often the loop wakes to look for outside changes: a twentieth of the lifetime,
/// between 1 s and 1 min.
fn check_every(creds: &Credentials) -> Duration {
    let lifetime = creds
        .cert
        .not_after
        .duration_since(creds.cert.not_before)
        .unwrap_or_default();
    (lifetime / 20).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// The two back-offs of a certificate loop after a failed attempt.
pub struct Retries {
    on_the_way: Backoff,
    refusals: Backoff,
}

// === impl Retries ===

impl Retries {
    pub fn new(settings: &Settings) -> Self {
        Self {
            on_the_way: Backoff::new(MIN_RETRY, MAX_RETRY, 0.2).expect("constant bounds"),
            refusals: settings.csr_backoff(),
        }
    }

    /// The wait before the next attempt: the contract's CSR back-off after a refusal or
    /// once the certificate has expired; else 1 s doubling to 5 min, never later than a
    /// tenth of the `remaining` lifetime and never sooner than 1 s.
    pub fn after(&mut self, refusal: bool, expired: bool, remaining: Duration) -> Duration {
        if refusal || expired {
            self.refusals.next_delay()
        } else {
            self.on_the_way
                .next_delay()
                .min(remaining / 10)
                .max(MIN_RETRY)
        }
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.on_the_way.reset();
        self.refusals.reset();
    }
}

/// What the rotation loop carries from one wake-up to the next.
struct Progress {
    creds: Credentials,
    plan: Schedule,
    retries: Retries,
    /// A rotation CSR timed out and its pending key was kept for the next rotation.
    rotation_key_left: bool,
    /// The expiry warning with rotation off was logged.
    warned: bool,
    /// The digest of the certificate file last seen (outside changes are adopted).
    seen: Option<[u8; 32]>,
}

/// Which pass is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Rotate with the current certificate.
    Rotate,
    /// It expired: bootstrap again with the bootstrap kubeconfig.
    FallBack,
}

/// The rotation loop and what it needs.
pub struct Rotation<'a> {
    pub settings: &'a Settings,
    pub bootstrap: &'a Bootstrap<'a>,
    pub health: Health,
    pub clients: watch::Sender<ApiClient>,
}

// === impl Rotation ===

impl Rotation<'_> {
    /// The deadline of `creds`' certificate, recorded in health. For a certificate issued
    /// just now (`creds.fresh`): if the signer's backdated notBefore already puts the deadline in the
    /// past, count the lifetime from now instead, or every new certificate would be rotated
    /// at once (a CSR pile-up).
    fn schedule(&self, creds: &Credentials) -> Option<SystemTime> {
        let s = self.settings;
        let cert = &creds.cert;
        let now = clock::now();
        let at = s.rotate_certificates.then(|| {
            let (at, recounted) = rotate_at(cert, s.rotation_fraction, s.rotation_jitter, creds.fresh, now);
            if recounted {
                tracing::warn!(serial = %cert.serial, not_before = %health::rfc3339(cert.not_before), "the new certificate's notBefore is so far behind this node's clock (backdated, or the clock is ahead) that its rotation deadline has passed; counting its lifetime from now");
            }
            at
        });
        let summary = CertSummary {
            serial: cert.serial.clone(),
            not_after: cert.not_after,
            rotate_at: at,
        };
        self.health.update(|h| h.cert = Some(summary));
        match at {
            Some(at) => {
                tracing::info!(serial = %cert.serial, not_after = %health::rfc3339(cert.not_after), rotate_at = %health::rfc3339(at), "client certificate rotation scheduled")
            }
            None => {
                tracing::info!(serial = %cert.serial, not_after = %health::rfc3339(cert.not_after), "--rotate-certificates=false: the certificate will not be rotated")
            }
        }
        at
    }

    /// Publish new credentials to every loop and reschedule.
    fn publish(&self, creds: &Credentials) {
        self.clients.send_replace(creds.client.clone());
        self.health.set_bootstrap(State::Installed);
    }

    /// Rotate until shutdown. `creds` is the identity in use now.
    pub async fn run(self, creds: Credentials, mut shutdown: Shutdown) {
        let dir = match CertDir::open(&self.settings.cert_dir) {
            Ok(dir) => dir,
            Err(e) => {
                tracing::error!(error = %report(&e), "rotation cannot open the cert dir; not rotating");
                return;
            }
        };
        let mut state = Progress {
            plan: Schedule::new(self.schedule(&creds), creds.cert.not_after),
            creds,
            retries: Retries::new(self.settings),
            rotation_key_left: false,
            warned: false,
            seen: None,
        };
        let mut ticker = Ticker::for_loops();
        loop {
            // Wake at what is due, and at least every check_every: the deadlines are read
            // against the wall clock again then, so a clock step counts within that.
            let wake = match state.plan.next(clock::now(), Instant::now()) {
                Next::Wait(wait) => wait,
                Next::Rotate | Next::FallBack => Duration::ZERO,
            }
            .min(check_every(&state.creds));
            self.health.beat(TASK, wake + BEAT_SLACK);
            tokio::select! {
                () = ticker.sleep_until(Instant::now() + wake) => {}
                () = shutdown.requested() => return,
            }
            let now = clock::now();
            let Some(pass) = self.due(&mut state, &dir, now) else {
                continue;
            };
            let result = self.pass(&mut state, &dir, pass, now).await;
            self.settle(&mut state, &dir, result, pass, now);
        }
    }

    /// The step after a wake-up: adopt a certificate written from outside; with rotation
    /// off, only warn as expiry nears; else whether a pass is due now, and which. No IO
    /// but reading the cert dir.
    fn due(&self, state: &mut Progress, dir: &CertDir, now: SystemTime) -> Option<Pass> {
        if let Some(adopted) = self.adopt_outside_change(dir, &state.creds, &mut state.seen) {
            self.publish(&adopted);
            self.renewed(state, adopted);
            return None;
        }
        if state.plan.at.is_none() {
            self.without_rotation(&state.creds, now, &mut state.warned);
            return None;
        }
        if state.plan.observe(now) {
            tracing::info!(serial = %state.creds.cert.serial, not_after = %health::rfc3339(state.creds.cert.not_after), "the clock says the client certificate is valid again (it had been set ahead); rotating it at its deadline instead of bootstrapping");
            self.health.set_bootstrap(State::Installed);
        }
        match state.plan.next(now, Instant::now()) {
            Next::Wait(_) => None,
            Next::Rotate => Some(Pass::Rotate),
            Next::FallBack => Some(Pass::FallBack),
        }
    }

    /// One pass, filing and the approval wait, bounded as a whole; the heartbeat covers
    /// it (see `pass::bounded`): a rotation with the current certificate, or, once it has
    /// expired, a bootstrap with the bootstrap kubeconfig.
    async fn pass(
        &self,
        state: &mut Progress,
        dir: &CertDir,
        pass: Pass,
        now: SystemTime,
    ) -> Result<Credentials, PassError<BootstrapError>> {
        let creds = &state.creds;
        if pass == Pass::Rotate {
            tracing::info!(serial = %creds.cert.serial, "rotating the client certificate");
            // Waiting past expiry is pointless: the fallback to bootstrap takes over then.
            let remaining = creds.cert.not_after.duration_since(now).unwrap_or_default();
            let limit = self
                .settings
                .csr_timeout
                .min(remaining.max(Duration::from_secs(1)));
            let obtain = self.bootstrap.client.obtain(
                dir,
                &creds.client,
                &creds.server,
                &creds.ca_pem,
                limit,
            );
            return pass::bounded(&self.health, TASK, limit, BEAT_SLACK, obtain).await;
        }
        if !state.plan.fell_back() {
            tracing::error!(serial = %creds.cert.serial, "the client certificate expired before it was rotated; falling back to the bootstrap kubeconfig");
        }
        state.plan.fell_back_now();
        if std::mem::take(&mut state.rotation_key_left) {
            // That CSR was filed by the node and may never be approved (no
            // selfnodeclient approval): the token files a fresh one.
            if let Err(e) = dir.remove_pending_key() {
                tracing::warn!(error = %report(&e), "cannot remove the pending rotation key");
            }
            crate::metrics::METRICS.csr_abandoned(crate::purpose::Purpose::Client);
        }
        let limit = self.settings.csr_timeout;
        let attempt = self.bootstrap.attempt(dir);
        pass::bounded(&self.health, TASK, limit, BEAT_SLACK, attempt).await
    }

    /// The step after a pass: the new certificate in use and a new schedule, or a
    /// back-off (remembering a pending rotation key the pass left).
    fn settle(
        &self,
        state: &mut Progress,
        dir: &CertDir,
        result: Result<Credentials, PassError<BootstrapError>>,
        pass: Pass,
        now: SystemTime,
    ) {
        let expired = pass == Pass::FallBack;
        match result {
            Ok(new) => {
                tracing::info!(old = %state.creds.cert.serial, new = %new.cert.serial, "client certificate rotated");
                self.publish(&new);
                self.prune(dir);
                self.renewed(state, new);
            }
            Err(e) => {
                // A pass cut short, like an approval timeout, leaves its pending key.
                let key_left = e.failed().is_none_or(BootstrapError::is_approval_timeout);
                state.rotation_key_left |= !expired && key_left;
                let remaining = state
                    .creds
                    .cert
                    .not_after
                    .duration_since(now)
                    .unwrap_or_default();
                let refusal = e.failed().is_some_and(BootstrapError::is_refusal);
                let delay = state.retries.after(refusal, expired, remaining);
                self.report_failure(&e, expired, delay);
                state.plan.failed(Instant::now(), delay);
            }
        }
    }

    /// `creds` are the identity now (published already): a fresh schedule and back-off.
    fn renewed(&self, state: &mut Progress, creds: Credentials) {
        state.plan = Schedule::new(self.schedule(&creds), creds.cert.not_after);
        state.creds = creds;
        state.retries.reset();
        state.rotation_key_left = false;
    }

    fn report_failure(&self, e: &PassError<BootstrapError>, expired: bool, delay: Duration) {
        let until = clock::now() + delay;
        let check = e.check(BootstrapError::check);
        let hint = doctor_hint(check);
        if expired {
            tracing::error!(error = %report(e), retry_in = %health::human(delay), %check, "no usable identity: the client certificate expired and bootstrap failed ({hint})");
        } else {
            tracing::warn!(error = %report(e), retry_in = %health::human(delay), %check, "rotation failed; the current certificate stays in use ({hint})");
        }
        self.health.set_bootstrap(State::BackingOff {
            until,
            reason: format!("rotation failed: {}", report(e)),
            check,
        });
    }

    /// A `kubelet-client-current.pem` someone else installed, if it is valid for us.
    /// `seen` fingerprints the file's text once it has been judged valid (no second copy
    /// of the key is kept): an unchanged valid file is not parsed and verified again, which
    /// would cost an EC point multiplication every minute. An invalid one (say, not valid
    /// yet by our clock) is looked at again next time.
    fn adopt_outside_change(
        &self,
        dir: &CertDir,
        creds: &Credentials,
        seen: &mut Option<[u8; 32]>,
    ) -> Option<Credentials> {
        let (chain_pem, key_pem) = dir.read_current().ok()??;
        let fingerprint: [u8; 32] = Sha256::new()
            .chain_update(&chain_pem)
            .chain_update(key_pem.as_str())
            .finalize()
            .into();
        if *seen == Some(fingerprint) {
            return None;
        }
        let Installed {
            chain_pem,
            key_pem,
            info,
        } = check_installed(chain_pem, key_pem, &self.settings.node_name, &creds.ca_pem).ok()?;
        *seen = Some(fingerprint);
        if info.serial == creds.cert.serial {
            return None;
        }
        tracing::info!(old = %creds.cert.serial, new = %info.serial, "adopting a client certificate installed outside bootlet");
        self.bootstrap
            .client
            .credentials(&creds.server, &creds.ca_pem, chain_pem, key_pem, info)
            .map_err(|e| tracing::warn!(error = %report(&e), "cannot use the outside certificate"))
            .ok()
    }

    /// With `--rotate-certificates=false`: warn at 90 % of the lifetime, error at expiry.
    fn without_rotation(&self, creds: &Credentials, now: SystemTime, warned: &mut bool) {
        let cert = &creds.cert;
        let warn_at = deadline(cert.not_before, cert.not_after, WARN_FRACTION, 0.0, 0.5);
        if now >= cert.not_after {
            tracing::error!(serial = %cert.serial, not_after = %health::rfc3339(cert.not_after), "the client certificate has expired and rotation is off (--rotate-certificates=false)");
        } else if now >= warn_at && !*warned {
            *warned = true;
            tracing::warn!(serial = %cert.serial, not_after = %health::rfc3339(cert.not_after), "the client certificate is past 90 % of its lifetime and rotation is off");
        }
    }

    fn prune(&self, dir: &CertDir) {
        match dir.prune(self.settings.keep_certificates) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(count = removed.len(), "pruned old client certificate files")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %report(&e), "pruning old certificate files failed"),
        }
    }
}

#[cfg(test)]
mod tests;
