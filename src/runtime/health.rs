//! The agent's health: one `Snapshot` on a watch channel that every loop updates and that
//! `notify` (READY/STATUS/WATCHDOG) and metrics read. Pure data and formatting; no IO.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

mod state;

pub use state::{doctor_hint, State};

/// The longest status line, in characters (at most 32 KiB; a notify datagram may hold
/// about 208 KiB): a backstop, the server text in it is clipped shorter where it is built.
const MAX_STATUS: usize = 8192;

/// The client certificate in use, as logged (never its body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSummary {
    pub serial: String,
    pub not_after: SystemTime,
    /// When rotation is due, if rotation is on.
    pub rotate_at: Option<SystemTime>,
}

/// The Lease loop's view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseState {
    /// `--renew-lease`: false means the Lease is someone else's job.
    pub enabled: bool,
    /// The last successful create or update.
    pub last_renewed: Option<SystemTime>,
    /// Set while renewals fail; cleared by the next success.
    pub failing_since: Option<SystemTime>,
    /// Why the loop does not write (health probe down, another writer).
    pub paused: Option<Paused>,
    /// The Lease goes on the wire as JSON, not protobuf: the API server refused protobuf
    /// (406/415), or a test build's `--test-lease-content-type json`. Kept for the life of
    /// the process, so a Lease loop restarted by a reload does not ask a refusing server
    /// again.
    pub json: bool,
}

/// Why the Lease loop does not write the Lease: what `STATUS=` and `/readyz?verbose` say
/// (`why`) and the `reason` label of `bootlet_lease_paused`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paused {
    pub reason: PauseReason,
    pub why: String,
}

/// The kinds of [`Paused`], each a value of the metric's `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseReason {
    /// Another writer renews the Lease (or renewed it last, before this process's first
    /// write): bootlet stands aside, the node is Ready on the other writer's renewals.
    OtherWriter,
    /// The other writer stopped renewing and bootlet does not take over (no health probe):
    /// the node goes NotReady.
    OtherWriterStopped,
    /// `--lease-health-probe` fails: the node agent is down, the node goes NotReady.
    HealthProbe,
}

// === impl PauseReason ===

impl PauseReason {
    pub const ALL: [PauseReason; 3] = [
        PauseReason::OtherWriter,
        PauseReason::OtherWriterStopped,
        PauseReason::HealthProbe,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            PauseReason::OtherWriter => "other_writer",
            PauseReason::OtherWriterStopped => "other_writer_stopped",
            PauseReason::HealthProbe => "health_probe",
        }
    }
}

/// Everything `STATUS=` and readiness are derived from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub bootstrap: State,
    /// The serving certificate's issuance, when bootlet obtains one (never gates READY).
    pub serving: Option<State>,
    pub cert: Option<CertSummary>,
    /// The cluster-issued serving certificate in use (not the self-signed placeholder).
    pub serving_cert: Option<CertSummary>,
    pub lease: LeaseState,
}

// === impl Snapshot ===

impl Snapshot {
    /// READY=1: a valid client certificate and the kubeconfig are on disk, which is all the
    /// kubelet needs to start. The Lease never gates readiness: its first write may wait for
    /// the kubelet's health or for an API server the kubelet itself runs (a static pod), and
    /// an API outage at boot must not keep the kubelet down. It shows in the status line.
    pub fn ready(&self) -> bool {
        self.cert.is_some()
    }

    /// READY=1 for systemd: the identity is in place ([`Snapshot::ready`]), or issuing it
    /// waits on something outside bootlet ([`State::waits_on_others`]). bootlet's start job
    /// is then over, so nothing ordered after it (the boot, `multi-user.target`, cloud-init's
    /// final stage that runs `kubeadm join`) waits for a person or a later boot stage.
    pub fn started(&self, now: SystemTime) -> bool {
        self.ready() || self.bootstrap.waits_on_others(now)
    }

    /// Whether the client certificate in use has expired at `now`: it stays in the snapshot
    /// until a replacement is installed, so readers compare it with the clock.
    pub fn cert_expired(&self, now: SystemTime) -> bool {
        self.cert.as_ref().is_some_and(|c| now >= c.not_after)
    }

    /// One line for `systemctl status`, saying what the agent waits for or does next. Server
    /// text in it (a deny message, a `Status.message`) has its controls escaped: the line is
    /// sent as `STATUS=` and must never carry a second notify assignment. Server text is
    /// clipped where the line is built, and the whole line is bounded by `MAX_STATUS`: it
    /// shares a datagram with `WATCHDOG=1`.
    pub fn status_line(&self, now: SystemTime) -> String {
        let line = crate::runtime::text::one_line(&self.status_text(now)).into_owned();
        match crate::runtime::text::clip(&line, MAX_STATUS) {
            Cow::Borrowed(_) => line,
            Cow::Owned(clipped) => clipped,
        }
    }

    fn status_text(&self, now: SystemTime) -> String {
        let Some(cert) = &self.cert else {
            return self.bootstrap.status_line(now);
        };
        let mut line = if self.cert_expired(now) {
            format!("client cert expired at {}", rfc3339(cert.not_after))
        } else {
            let mut valid = format!("client cert valid until {}", rfc3339(cert.not_after));
            if let Some(at) = cert.rotate_at {
                valid.push_str(&format!(", rotates at {}", rfc3339(at)));
            }
            valid
        };
        if !matches!(self.bootstrap, State::Installed) {
            line.push_str("; ");
            line.push_str(&self.bootstrap.status_line(now));
        }
        if let Some(serving) = self.serving.as_ref().filter(|s| **s != State::Installed) {
            line.push_str("; serving cert: ");
            line.push_str(&serving.status_line(now));
        }
        if !self.lease.enabled {
            return line;
        }
        match (
            &self.lease.paused,
            self.lease.failing_since,
            self.lease.last_renewed,
        ) {
            (Some(p), _, _) => line.push_str(&format!("; lease not renewed: {}", p.why)),
            (None, Some(since), _) => {
                line.push_str(&format!("; lease renewal failing for {}", ago(now, since)))
            }
            // A time, not an age: the line never needs a refresh between renewals, and
            // under systemd it rides in the datagram of the watchdog ping each renewal sends.
            (None, None, Some(at)) => line.push_str(&format!("; lease renewed at {}", rfc3339(at))),
            (None, None, None) => line.push_str("; waiting for the first lease renewal"),
        }
        line
    }
}

/// A shared handle: loops write, readers subscribe.
#[derive(Clone)]
pub struct Health {
    tx: Arc<watch::Sender<Snapshot>>,
    /// Per loop, the instant by which it promised its next heartbeat (see [`Health::beat`]).
    beats: Arc<Mutex<BTreeMap<&'static str, Instant>>>,
}

/// A loop that missed its own heartbeat deadline: the watchdog stops pinging for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stalled {
    pub task: &'static str,
    /// How long past its promised next heartbeat.
    pub overdue: Duration,
}

// === impl Health ===

impl Health {
    pub fn new(lease_enabled: bool) -> Self {
        let (tx, _) = watch::channel(Snapshot {
            bootstrap: State::Starting,
            serving: None,
            cert: None,
            serving_cert: None,
            lease: LeaseState {
                enabled: lease_enabled,
                ..LeaseState::default()
            },
        });
        Self {
            tx: Arc::new(tx),
            beats: Arc::default(),
        }
    }

    /// A loop's heartbeat: "`task` made progress now and will beat again within
    /// `next_within`". Loops beat before each bounded wait with that wait's bound, so a
    /// loop stuck anywhere else is noticed within its own bound (see [`Health::stalled`]).
    pub fn beat(&self, task: &'static str, next_within: Duration) {
        let due = Instant::now() + next_within;
        self.lock_beats().insert(task, due);
    }

    /// `task` ended on purpose (shutdown, reload): it no longer owes heartbeats.
    pub fn retire(&self, task: &'static str) {
        self.lock_beats().remove(task);
    }

    /// The loop most overdue at `now`, if any is past its promised heartbeat.
    pub fn stalled(&self, now: Instant) -> Option<Stalled> {
        self.lock_beats()
            .iter()
            .filter(|(_, due)| now > **due)
            .map(|(task, due)| Stalled {
                task,
                overdue: now - *due,
            })
            .max_by_key(|s| s.overdue)
    }

    fn lock_beats(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Instant>> {
        // A panic while holding this lock leaves a plain map behind: still usable.
        self.beats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Change the snapshot; subscribers wake only when it really changed.
    pub fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        self.tx.send_if_modified(|snap| {
            let before = snap.clone();
            f(snap);
            *snap != before
        });
    }

    pub fn set_bootstrap(&self, state: State) {
        self.update(|s| s.bootstrap = state);
    }

    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.tx.subscribe()
    }

    pub fn snapshot(&self) -> Snapshot {
        self.tx.borrow().clone()
    }
}

/// `2026-11-30T21:13:00Z`, for status lines.
pub fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.round(jiff::Unit::Second).unwrap_or(ts).to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `3m12s`, for status lines; zero if `since` is in the future.
pub fn ago(now: SystemTime, since: SystemTime) -> String {
    let d = now.duration_since(since).unwrap_or_default();
    human(Duration::from_secs(d.as_secs()))
}

/// A duration as `1h2m3s` / `3m12s` / `5s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    #[test]
    fn ready_needs_the_cert_and_never_the_lease() {
        let health = Health::new(true);
        assert!(!health.snapshot().ready());
        health.update(|s| {
            s.cert = Some(CertSummary {
                serial: "01".into(),
                not_after: t(3600),
                rotate_at: None,
            })
        });
        assert!(
            health.snapshot().ready(),
            "the Lease must not gate READY (it may wait for the kubelet)"
        );
        assert!(health
            .snapshot()
            .status_line(t(1))
            .ends_with("; waiting for the first lease renewal"));
        health.update(|s| s.lease.failing_since = Some(t(1)));
        assert!(health.snapshot().ready(), "a failing Lease keeps READY");

        let no_lease = Health::new(false);
        no_lease.update(|s| {
            s.cert = Some(CertSummary {
                serial: "01".into(),
                not_after: t(3600),
                rotate_at: None,
            })
        });
        assert!(no_lease.snapshot().ready());
    }

    #[test]
    fn status_lines_say_what_happens_next() {
        let mut snap = Health::new(true).snapshot();
        snap.bootstrap = State::WaitingApproval {
            csr: "node-csr-abc".into(),
            since: t(0),
        };
        let line = snap.status_line(t(192));
        assert_eq!(
            line,
            "waiting for approval of CSR node-csr-abc for 3m12s — approve with: kubectl certificate approve node-csr-abc"
        );
        snap.bootstrap = State::Installed;
        snap.cert = Some(CertSummary {
            serial: "0a".into(),
            not_after: t(3600),
            rotate_at: Some(t(2700)),
        });
        snap.lease.last_renewed = Some(t(190));
        let healthy = "client cert valid until 2027-01-15T09:00:00Z, rotates at 2027-01-15T08:45:00Z; lease renewed at 2027-01-15T08:03:10Z";
        assert_eq!(snap.status_line(t(192)), healthy);
        // A healthy line does not age, so nothing re-sends it between renewals.
        assert_eq!(snap.status_line(t(197)), healthy);
        snap.lease.failing_since = Some(t(185));
        assert_ne!(snap.status_line(t(192)), snap.status_line(t(197)));
    }

    #[test]
    fn an_expired_certificate_says_so_by_the_clock() {
        let mut snap = Health::new(false).snapshot();
        snap.cert = Some(CertSummary {
            serial: "0a".into(),
            not_after: t(3600),
            rotate_at: Some(t(2700)),
        });
        snap.bootstrap = State::WaitingApproval {
            csr: "node-csr-r".into(),
            since: t(2700),
        };
        assert!(!snap.cert_expired(t(3599)));
        assert!(snap
            .status_line(t(3599))
            .starts_with("client cert valid until 2027-01-15T09:00:00Z, rotates at"));
        assert!(snap.cert_expired(t(3600)));
        assert_eq!(
            snap.status_line(t(3601)),
            "client cert expired at 2027-01-15T09:00:00Z; waiting for approval of CSR node-csr-r for 15m1s — approve with: kubectl certificate approve node-csr-r"
        );
    }

    #[test]
    fn server_text_cannot_add_lines_to_the_status() {
        let mut snap = Health::new(true).snapshot();
        snap.bootstrap = State::BackingOff {
            until: t(60),
            reason: "CSR x was denied (Policy: policy says no\nREADY=1\nMAINPID=1)".into(),
            check: crate::checkid::CheckId::Csr,
        };
        let line = snap.status_line(t(0));
        assert_eq!(line.lines().count(), 1, "{line:?}");
        assert!(
            line.contains("policy says no\\nREADY=1\\nMAINPID=1"),
            "{line}"
        );
        assert!(
            line.ends_with("(doctor check csr: run 'bootlet doctor' for the full chain)"),
            "{line}"
        );
    }

    #[test]
    fn unchanged_updates_do_not_wake_subscribers() {
        let health = Health::new(true);
        let mut rx = health.subscribe();
        rx.mark_unchanged();
        health.set_bootstrap(State::Starting);
        assert!(!rx.has_changed().unwrap());
        health.set_bootstrap(State::Installed);
        assert!(rx.has_changed().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_past_its_promised_beat_is_stalled() {
        let health = Health::new(true);
        assert_eq!(health.stalled(Instant::now()), None, "no loops yet");
        health.beat("lease", Duration::from_secs(3));
        health.beat("rotation", Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(health.stalled(Instant::now()), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            health.stalled(Instant::now()),
            Some(Stalled {
                task: "lease",
                overdue: Duration::from_secs(1)
            })
        );
        health.beat("lease", Duration::from_secs(3));
        assert_eq!(health.stalled(Instant::now()), None, "a new beat clears it");
        tokio::time::advance(Duration::from_secs(20)).await;
        health.retire("lease");
        assert_eq!(
            health.stalled(Instant::now()).map(|s| s.task),
            Some("rotation")
        );
        health.retire("rotation");
        assert_eq!(
            health.stalled(Instant::now()),
            None,
            "retired loops owe nothing"
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(5)), "5s");
        assert_eq!(human(Duration::from_secs(192)), "3m12s");
        assert_eq!(human(Duration::from_secs(3723)), "1h2m3s");
    }
}
