//! Prometheus metrics under the kubelet's own names (so kube-prometheus' certificate alerts
//! and dashboards carry over unchanged) and bootlet's own, in the text exposition format
//! through the `prometheus` crate (it keeps a counter's name as given, which the kubelet's
//! legacy `…_renew_errors` counters need, and its process collector has the Go client's
//! `process_*` names).
//!
//! Counting costs the loops nothing but atomics: counters and histograms are incremented
//! in place, no task, timer or channel. Everything that is a function of time or of the
//! health snapshot (TTLs, the Lease's last renewal, the certificate's expiry) is computed
//! when `/metrics` is scraped, as the kubelet's `GaugeFunc`s are. The listener is in
//! [`server`].

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::purpose::Purpose;
use crate::runtime::health::{PauseReason, Snapshot};

pub mod deadline;
pub mod reference;
pub mod server;

/// The kubelet's buckets for `certificate_manager_server_rotation_seconds`: a minute to
/// four years.
const ROTATION_AGE_BUCKETS: [f64; 10] = [
    60.0,
    3600.0,
    14400.0,
    86400.0,
    604800.0,
    2592000.0,
    7776000.0,
    15552000.0,
    31104000.0,
    124416000.0,
];
/// CSR approval waits: an auto-approver answers in well under a second, a human in minutes.
const CSR_WAIT_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0];
/// The approver's decision latency, CSR creationTimestamp (whole seconds) to the decision:
/// a watching approver answers within a second, one that relisted after an outage in tens.
const APPROVAL_BUCKETS: [f64; 10] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0];
/// A Lease PUT on loopback takes about a millisecond; the attempt bound is seconds.
const LEASE_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Declares every family once: its field, type, registry (`r` bootlet's and the kubelet's
/// client figures, `s` the serving certificate's, `a` `bootlet approve`'s), name, help and
/// labels. Expands to the
/// [`Metrics`] struct and its constructor; the loops update a family through a method.
macro_rules! families {
    ($r:ident, $s:ident, $a:ident, $lease:ident; $($field:ident: $ty:ty = $init:expr,)*) => {
        /// Every metric bootlet exports. One per process ([`METRICS`]); the serving
        /// certificate's families are in a registry of their own, exported only when
        /// bootlet obtains it.
        pub struct Metrics {
            registry: Registry,
            serving_registry: Registry,
            approver_registry: Registry,
            $($field: $ty,)*
        }

        impl Metrics {
            fn new() -> Self {
                let registry = Registry::new();
                let serving_registry = Registry::new();
                let approver_registry = Registry::new();
                let ($r, $s, $a) = (&registry, &serving_registry, &approver_registry);
                register_process_info($r);
                let $lease = |result: &str| lease_counter($r, result);
                let metrics = Self {
                    $($field: $init,)*
                    registry,
                    serving_registry,
                    approver_registry,
                };
                metrics.profile_series(Purpose::Client);
                metrics
            }
        }
    };
}

families! {
    r, s, a, lease;
    // The kubelet's names.
    client_ttl: Gauge = gauge(r, "kubelet_certificate_manager_client_ttl_seconds", "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF."),
    client_renew_errors: IntCounter = counter(r, "kubelet_certificate_manager_client_expiration_renew_errors", "Counter of certificate renewal errors."),
    server_ttl: Gauge = gauge(s, "kubelet_certificate_manager_server_ttl_seconds", "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF."),
    server_rotation_age: Histogram = histogram(s, HistogramOpts::new("kubelet_certificate_manager_server_rotation_seconds", "Histogram of the number of seconds the previous certificate lived before being rotated.").buckets(ROTATION_AGE_BUCKETS.to_vec())),
    server_renew_errors: IntCounter = counter(s, "kubelet_server_expiration_renew_errors", "Counter of certificate renewal errors."),
    // bootlet's own.
    client_not_after: Gauge = gauge(r, "bootlet_client_cert_not_after_timestamp_seconds", "Expiry of the client certificate in use, in Unix seconds; 0 while there is none."),
    rotations: IntCounterVec = registered(r, IntCounterVec::new(Opts::new("bootlet_rotations_total", "Issuing attempts (bootstrap, rotation, serving) by certificate profile and outcome."), &["profile", "result"]).expect("valid metric")),
    csr_wait: HistogramVec = registered(r, HistogramVec::new(HistogramOpts::new("bootlet_csr_wait_seconds", "Seconds from filing (or adopting) a CSR to its answer: issued, denied or failed.").buckets(CSR_WAIT_BUCKETS.to_vec()), &["profile"]).expect("valid metric")),
    csr_pending: IntGaugeVec = registered(r, IntGaugeVec::new(Opts::new("bootlet_csr_pending", "1 while a CSR is filed and not yet answered (it stays 1 across approval timeouts: the next attempt adopts the same CSR)."), &["profile"]).expect("valid metric")),
    lease_ok: IntCounter = lease("success"),
    lease_failed: IntCounter = lease("failure"),
    lease_duration: Histogram = histogram(r, HistogramOpts::new("bootlet_lease_renew_duration_seconds", "Seconds one Lease renewal took, successful or not.").buckets(LEASE_BUCKETS.to_vec())),
    lease_last_renew: Gauge = gauge(r, "bootlet_lease_last_renew_timestamp_seconds", "When the Lease was last renewed, in Unix seconds; 0 before the first renewal."),
    lease_duration_setting: Gauge = gauge(r, "bootlet_lease_duration_seconds", "The Lease's leaseDurationSeconds: the node is NotReady this long after the last renewal."),
    lease_protobuf: IntGauge = registered(r, IntGauge::new("bootlet_lease_protobuf", "1 while the Lease goes on the wire as protobuf, 0 as JSON (the server refused protobuf).").expect("valid metric name")),
    lease_paused: IntGaugeVec = registered(r, IntGaugeVec::new(Opts::new("bootlet_lease_paused", "1 while the Lease loop does not write the Lease, by reason: other_writer (another writer renews it: the kubelet, when it renews its own Lease, wants renewLease: false), other_writer_stopped (that writer stopped and bootlet does not take over: the node goes NotReady), health_probe (--lease-health-probe fails: the node goes NotReady); 0 otherwise."), &["reason"]).expect("valid metric")),
    api_requests: IntCounterVec = registered(r, IntCounterVec::new(Opts::new("bootlet_api_requests_total", "Requests to the API server by HTTP method and status code (<error> when no answer came)."), &["verb", "code"]).expect("valid metric")),
    // `bootlet approve`'s.
    approver_approved: IntCounter = counter(a, "bootlet_approver_approved_total", "kubelet-serving CSRs approved by bootlet approve."),
    approver_denied: IntCounterVec = registered(a, IntCounterVec::new(Opts::new("bootlet_approver_denied_total", "kubelet-serving CSRs denied by bootlet approve, by the rule that failed (the Denied condition's reason)."), &["rule"]).expect("valid metric")),
    approver_ignored: IntCounterVec = registered(a, IntCounterVec::new(Opts::new("bootlet_approver_ignored_total", "kubelet-serving CSRs that failed a rule and were left Pending (--on-mismatch ignore), by rule."), &["rule"]).expect("valid metric")),
    approver_latency: HistogramVec = registered(a, HistogramVec::new(HistogramOpts::new("bootlet_approver_decision_latency_seconds", "Seconds from a kubelet-serving CSR's creationTimestamp (whole seconds) to bootlet approve's decision, by decision (approved, denied).").buckets(APPROVAL_BUCKETS.to_vec()), &["decision"]).expect("valid metric")),
    approver_leader: IntGauge = registered(a, IntGauge::new("bootlet_approver_leader", "1 while this bootlet approve replica holds the leader Lease and acts on CSRs, else 0.").expect("valid metric name")),
}

/// The process's metrics, registered on first use.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

// === impl Metrics ===

impl Metrics {
    /// Series a profile always has (at zero before the first event), so `increase()` and
    /// `for:` see them from the first scrape.
    fn profile_series(&self, profile: Purpose) {
        let p = profile.spec().metric_label;
        for result in ["success", "failure"] {
            self.rotations.with_label_values(&[p, result]);
        }
        self.csr_pending.with_label_values(&[p]);
        self.csr_wait.with_label_values(&[p]);
    }

    /// One pass through the issuing pipeline ended: counted per profile and outcome; a
    /// failure also counts as the kubelet's renew error for that certificate.
    pub fn issued(&self, profile: Purpose, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.rotations
            .with_label_values(&[profile.spec().metric_label, result])
            .inc();
        if !ok {
            match profile {
                Purpose::Client => self.client_renew_errors.inc(),
                Purpose::Serving => self.server_renew_errors.inc(),
            }
        }
    }

    /// A CSR for `profile` is filed (or adopted) and waits for its answer.
    pub fn csr_filed(&self, profile: Purpose) {
        self.csr_pending
            .with_label_values(&[profile.spec().metric_label])
            .set(1);
    }

    /// The CSR was answered after `waited` (issued, denied or failed).
    pub fn csr_answered(&self, profile: Purpose, waited: Duration) {
        self.csr_pending
            .with_label_values(&[profile.spec().metric_label])
            .set(0);
        self.csr_wait
            .with_label_values(&[profile.spec().metric_label])
            .observe(waited.as_secs_f64());
    }

    /// The pending CSR was given up (a fresh key files a new one).
    pub fn csr_abandoned(&self, profile: Purpose) {
        self.csr_pending
            .with_label_values(&[profile.spec().metric_label])
            .set(0);
    }

    /// The serving certificate was replaced after the previous one lived `age`.
    pub fn serving_rotated(&self, age: Duration) {
        self.server_rotation_age.observe(age.as_secs_f64());
    }

    /// One Lease renewal attempt and how long it took.
    pub fn lease_renewal(&self, ok: bool, took: Duration) {
        if ok {
            &self.lease_ok
        } else {
            &self.lease_failed
        }
        .inc();
        self.lease_duration.observe(took.as_secs_f64());
    }

    /// The configured lease duration (set when the Lease loop starts or is reloaded).
    pub fn lease_duration_setting(&self, d: Duration) {
        self.lease_duration_setting.set(d.as_secs_f64());
    }

    /// Whether the Lease goes on the wire as protobuf (set at the start and on a fallback).
    pub fn lease_protobuf(&self, on: bool) {
        self.lease_protobuf.set(i64::from(on));
    }

    /// The lease duration last set (zero before the Lease loop starts).
    pub fn lease_duration(&self) -> Duration {
        Duration::try_from_secs_f64(self.lease_duration_setting.get()).unwrap_or_default()
    }

    /// The approver's labelled series at zero, so `increase()` sees them from the start.
    pub fn approver_series(&self, rules: impl IntoIterator<Item = &'static str>) {
        for rule in rules {
            self.approver_denied.with_label_values(&[rule]);
        }
        for decision in ["approved", "denied"] {
            self.approver_latency.with_label_values(&[decision]);
        }
    }

    /// The approver approved a CSR `latency` after it was created.
    pub fn approver_approved(&self, latency: Duration) {
        self.approver_approved.inc();
        self.approver_latency
            .with_label_values(&["approved"])
            .observe(latency.as_secs_f64());
    }

    /// The approver denied a CSR by `rule`, `latency` after it was created.
    pub fn approver_denied(&self, rule: &str, latency: Duration) {
        self.approver_denied.with_label_values(&[rule]).inc();
        self.approver_latency
            .with_label_values(&["denied"])
            .observe(latency.as_secs_f64());
    }

    /// The approver left a CSR failing `rule` Pending.
    pub fn approver_ignored(&self, rule: &str) {
        self.approver_ignored.with_label_values(&[rule]).inc();
    }

    /// Whether this approver replica leads.
    pub fn approver_leader(&self, on: bool) {
        self.approver_leader.set(i64::from(on));
    }

    /// `bootlet approve`'s exposition: its own families, the build info and the API
    /// request counter (the node agent's figures mean nothing there).
    pub fn render_approver(&self) -> Vec<u8> {
        let mut families = self.approver_registry.gather();
        families.extend(self.registry.gather().into_iter().filter(|f| {
            f.name() == "bootlet_build_info"
                || f.name() == "bootlet_api_requests_total"
                || f.name().starts_with("process_")
        }));
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::with_capacity(4 << 10);
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("writing to a Vec cannot fail");
        out
    }

    /// One request to the API server; `code` is `None` when no answer came.
    pub fn api_request(&self, verb: &str, code: Option<http::StatusCode>) {
        match code {
            Some(c) => self.api_requests.with_label_values(&[verb, c.as_str()]),
            None => self.api_requests.with_label_values(&[verb, "<error>"]),
        }
        .inc();
    }

    /// The exposition of every family: the values derived from `snap` at `now` first (as
    /// the kubelet computes its TTL gauges when scraped), the serving families only when
    /// `serving` (bootlet obtains the serving certificate).
    pub fn render(&self, snap: &Snapshot, now: SystemTime, serving: bool) -> Vec<u8> {
        let client = snap.cert.as_ref().map(|c| c.not_after);
        self.client_ttl.set(ttl_seconds(client, now));
        self.client_not_after.set(client.map_or(0.0, unix_seconds));
        self.lease_last_renew
            .set(snap.lease.last_renewed.map_or(0.0, unix_seconds));
        let paused = snap.lease.paused.as_ref().map(|p| p.reason);
        for reason in PauseReason::ALL {
            self.lease_paused
                .with_label_values(&[reason.label()])
                .set(i64::from(paused == Some(reason)));
        }
        let mut families = self.registry.gather();
        if !snap.lease.enabled {
            // The kubelet renews the Lease (--renew-lease=false): bootlet's Lease figures
            // would only say "never renewed" and set off the Lease alert.
            families.retain(|f| !f.name().starts_with("bootlet_lease_"));
        }
        if serving {
            self.profile_series(Purpose::Serving);
            let cert = snap.serving_cert.as_ref().map(|c| c.not_after);
            self.server_ttl.set(ttl_seconds(cert, now));
            families.extend(self.serving_registry.gather());
            families.sort_by(|a, b| a.name().cmp(b.name()));
        }
        let mut out = Vec::with_capacity(8 << 10);
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("writing to a Vec cannot fail");
        out
    }
}

/// `metric`, registered in `reg` (each family once per process).
/// `bootlet_build_info` and, on Linux, the process collector (the Go client's
/// `process_*` names).
fn register_process_info(r: &Registry) {
    let build_info = IntGauge::with_opts(
        Opts::new(
            "bootlet_build_info",
            "Always 1; the version, git commit and build date are the labels.",
        )
        .const_label("version", crate::version::VERSION)
        .const_label("git_commit", crate::version::GIT_COMMIT)
        .const_label("build_date", crate::version::BUILD_DATE),
    )
    .expect("valid metric");
    build_info.set(1);
    registered(r, build_info);
    #[cfg(target_os = "linux")]
    r.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))
    .expect("registered once");
}

/// One series of `bootlet_lease_renewals_total`, by its `result`.
fn lease_counter(r: &Registry, result: &str) -> IntCounter {
    let opts = Opts::new(
        "bootlet_lease_renewals_total",
        "Lease renewal attempts by outcome.",
    )
    .const_label("result", result);
    registered(r, IntCounter::with_opts(opts).expect("valid metric"))
}

fn gauge(reg: &Registry, name: &str, help: &str) -> Gauge {
    registered(reg, Gauge::new(name, help).expect("valid metric name"))
}

fn counter(reg: &Registry, name: &str, help: &str) -> IntCounter {
    registered(reg, IntCounter::new(name, help).expect("valid metric name"))
}

fn histogram(reg: &Registry, opts: HistogramOpts) -> Histogram {
    registered(reg, Histogram::with_opts(opts).expect("valid histogram"))
}

fn registered<C: prometheus::core::Collector + Clone + 'static>(reg: &Registry, metric: C) -> C {
    reg.register(Box::new(metric.clone()))
        .expect("registered once");
    metric
}

/// The kubelet's TTL: whole seconds until `not_after` (negative once past), +Inf without a
/// certificate.
pub fn ttl_seconds(not_after: Option<SystemTime>, now: SystemTime) -> f64 {
    match not_after {
        None => f64::INFINITY,
        Some(t) => match t.duration_since(now) {
            Ok(left) => left.as_secs() as f64,
            Err(past) => -(past.duration().as_secs() as f64),
        },
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests;
