//! systemd notification: turns the `Health` snapshot into READY=1, STATUS=, WATCHDOG=1,
//! RELOADING=1 and STOPPING=1 over `NOTIFY_SOCKET`. A no-op without `NOTIFY_SOCKET`. It
//! decides nothing about the agent's state; it only reports it (and withholds pings).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::os::unix::net::UnixDatagram;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use sd_notify::NotifyState;
use tokio::time::Instant;

use crate::runtime::clock;
use crate::runtime::health::{self, Health, Snapshot, Stalled};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::ticker::Ticker;

/// How often STATUS= is refreshed while it shows an age ("failing for 25s", "waiting for
/// approval … for 3m12s"); a line that does not age is sent only when it changes.
const STATUS_REFRESH: Duration = Duration::from_secs(5);

/// How long after the client certificate's notAfter STATUS= is re-evaluated (timers fire
/// on the monotonic clock, the expiry is wall-clock time: a little late, never early).
const EXPIRY_MARGIN: Duration = Duration::from_millis(50);

/// The ping period for a `WATCHDOG_USEC` of `usec`: half of it, as sd_watchdog_enabled(3)
/// recommends, so one late tick never costs a restart. At least 1 ms.
pub fn watchdog_period(usec: Duration) -> Duration {
    (usec / 2).max(Duration::from_millis(1))
}

/// Follow `health` until shutdown: STATUS= when the line changes (and every
/// `STATUS_REFRESH` while it shows an age), READY=1 once, and — when systemd set
/// `WATCHDOG_USEC` for us — WATCHDOG=1 at least every half period while no loop is past its
/// heartbeat deadline ([`Health::stalled`]).
///
/// It adds no wake-up of its own while the agent is healthy: it runs when a loop reports
/// (every Lease renewal does), and pings then if half a ping period has passed, in the same
/// datagram as the status line; only when nothing reported for a whole ping period does a
/// `timerfd` wake it to ping (or withhold the ping). Without `NOTIFY_SOCKET` nobody
/// listens: it only logs readiness once and then sleeps until shutdown.
pub async fn run(health: Health, mut shutdown: Shutdown) {
    let mut snapshots = health.subscribe();
    let mut n = Notifier::new();
    loop {
        let snap = snapshots.borrow_and_update().clone();
        let wake = n.step(&snap, &health, clock::now());
        if !n.listening && n.ready_sent {
            shutdown.requested().await;
            return;
        }
        let expiry = wake.expiry.unwrap_or_default() + EXPIRY_MARGIN;
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(STATUS_REFRESH), if wake.ages => {}
            () = tokio::time::sleep(expiry), if n.listening && wake.expiry.is_some() => {}
            () = deadline(&mut n.watchdog) => {}
            () = shutdown.requested() => return,
        }
    }
}

/// What [`run`] keeps from one wake-up to the next.
struct Notifier {
    /// `NOTIFY_SOCKET` is set: systemd listens for STATUS= and READY=1.
    listening: bool,
    /// On when systemd set `WATCHDOG_USEC` for us.
    watchdog: Option<Watchdog>,
    ready_sent: bool,
    /// The STATUS= line last sent: a line is sent again only when it changes.
    last_status: String,
}

/// When [`run`] must wake besides a new snapshot, a watchdog deadline or shutdown.
struct Wake {
    /// The status line shows an age: refresh it within [`STATUS_REFRESH`].
    ages: bool,
    /// Until the client certificate expires, which changes the line on its own.
    expiry: Option<Duration>,
}

// === impl Notifier ===

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC` once, at start.
    fn new() -> Self {
        let listening = std::env::var_os("NOTIFY_SOCKET").is_some();
        let watchdog = sd_notify::watchdog_enabled().map(|usec| {
            let period = watchdog_period(usec);
            tracing::debug!(period = ?period, "systemd watchdog enabled");
            Watchdog::new(period)
        });
        Notifier {
            listening,
            watchdog,
            ready_sent: false,
            last_status: String::new(),
        }
    }

    /// One wake-up: sends what `snap` changed (STATUS=, READY=1 once, WATCHDOG=1 if due)
    /// in one datagram, and says when the next wake-up is needed.
    fn step(&mut self, snap: &Snapshot, health: &Health, now: SystemTime) -> Wake {
        let status = self.listening.then(|| snap.status_line(now));
        let ages = status
            .as_ref()
            .is_some_and(|line| *line != snap.status_line(now + STATUS_REFRESH));
        let mut states = Vec::new();
        if let Some(line) = status.as_deref().filter(|line| *line != self.last_status) {
            states.push(NotifyState::Status(line));
        }
        // Under systemd, READY=1 also once the identity waits on others (see
        // `Snapshot::started`); by hand there is no start job to end, only the log line.
        let ready_now = !self.ready_sent
            && if self.listening {
                snap.started(now)
            } else {
                snap.ready()
            };
        if ready_now {
            states.push(NotifyState::Ready);
        }
        if let Some(w) = &mut self.watchdog {
            if w.due(Instant::now()) && w.ping_unless_stalled(health) {
                states.push(NotifyState::Watchdog);
            }
        }
        if !states.is_empty() {
            send(&states);
        }
        if let Some(line) = status {
            self.last_status = line;
        }
        if ready_now {
            log_ready(snap, now);
            self.ready_sent = true;
        }
        // The line also changes on its own when the certificate expires: be awake then, so
        // STATUS= says "expired" at the expiry, not at some later wake-up.
        let expiry = snap
            .cert
            .as_ref()
            .and_then(|c| c.not_after.duration_since(now).ok())
            .filter(|left| !left.is_zero());
        Wake { ages, expiry }
    }
}

/// The log line for READY=1 (or, by hand, for what would have been it).
fn log_ready(snap: &Snapshot, now: SystemTime) {
    if snap.ready() {
        tracing::info!("ready: client certificate and kubeconfig in place");
    } else {
        // Not the identity: the boot goes on, and the kubelet (its ExecStartPre
        // `bootlet check-identity`) waits for the identity, not the boot for us.
        tracing::info!(
            waiting_for = %snap.status_line(now),
            "started: the node's identity waits on something outside bootlet; systemd may go on booting"
        );
    }
}

/// The watchdog's own schedule: pings ride on the wake-ups the loops cause anyway, and a
/// timerfd armed for the latest moment a ping may come is the fallback.
struct Watchdog {
    period: Duration,
    /// The next ping is owed by then (one period after the last ping or withheld ping).
    owed_by: Instant,
    ticker: Ticker,
    /// The loop whose stall is withholding pings, logged once.
    stalled: Option<&'static str>,
}

impl Watchdog {
    fn new(period: Duration) -> Self {
        Self {
            period,
            owed_by: Instant::now(),
            ticker: Ticker::new(),
            stalled: None,
        }
    }

    /// Half a period since the last ping: ping on this wake-up rather than wake up later.
    fn due(&self, now: Instant) -> bool {
        now + self.period / 2 >= self.owed_by
    }

    /// Whether to send WATCHDOG=1 now: yes unless a loop is wedged; then log it once and
    /// withhold pings so systemd restarts us. Either way the next one is owed a period on.
    fn ping_unless_stalled(&mut self, health: &Health) -> bool {
        let now = Instant::now();
        self.owed_by = now + self.period;
        match health.stalled(now) {
            None => {
                if let Some(task) = self.stalled.take() {
                    tracing::info!(task, "the loop made progress again; watchdog pings resumed");
                }
                true
            }
            Some(Stalled { task, overdue }) => {
                if self.stalled.replace(task) != Some(task) {
                    tracing::error!(
                        task,
                        overdue = %health::human(overdue),
                        "the {task} loop has made no progress past its deadline; withholding watchdog pings so systemd restarts the agent"
                    );
                }
                false
            }
        }
    }
}

/// When the watchdog needs this task at the latest, or never when it is off.
async fn deadline(watchdog: &mut Option<Watchdog>) {
    match watchdog {
        Some(w) => w.ticker.sleep_until(w.owed_by).await,
        None => std::future::pending().await,
    }
}

/// RELOADING=1 with the MONOTONIC_USEC systemd requires to order it against READY=1.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[
            NotifyState::Reloading,
            now,
            NotifyState::Status("reloading the configuration"),
        ]),
        Err(e) => {
            tracing::debug!(error = %e, "no monotonic clock for MONOTONIC_USEC");
            send(&[NotifyState::Reloading]);
        }
    }
}

/// The end of a reload: READY=1 again (only if the agent was ready; otherwise the first
/// READY=1 still comes from [`run`]) and the current status line.
pub fn reloaded(health: &Health) {
    let snap = health.snapshot();
    let status = snap.status_line(clock::now());
    if snap.started(clock::now()) {
        send(&[NotifyState::Ready, NotifyState::Status(&status)]);
    } else {
        send(&[NotifyState::Status(&status)]);
    }
}

/// STOPPING=1 with a last status line.
pub fn stopping(why: &str) {
    let status = format!("stopping ({why})");
    send(&[NotifyState::Stopping, NotifyState::Status(&status)]);
}

/// One datagram with `states` (formatted by sd-notify's `NotifyState`) on a socket
/// connected once to `NOTIFY_SOCKET` and kept: `sd_notify::notify` opens, connects and
/// closes a socket per message, which is most of a watchdog ping's cost when one rides on
/// every Lease renewal. Paths and abstract names (`@…`) both work; without
/// `NOTIFY_SOCKET` this does nothing.
fn send(states: &[NotifyState<'_>]) {
    static SOCKET: Mutex<Option<UnixDatagram>> = Mutex::new(None);
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let mut socket = SOCKET.lock().unwrap_or_else(|e| e.into_inner());
    deliver(&mut socket, &path, states);
}

/// Send `states` in one datagram on `socket` (connected to `path` on first use). When that
/// fails and it carried `WATCHDOG=1` with other lines (a datagram too large for the socket,
/// say), the ping goes again alone: whatever a status line holds, it never costs the
/// watchdog ping that systemd kills us without.
fn deliver(socket: &mut Option<UnixDatagram>, path: &std::ffi::OsStr, states: &[NotifyState<'_>]) {
    let msg = message(states);
    let Err(e) = send_datagram(socket, path, msg.as_bytes()) else {
        return;
    };
    let ping = states.iter().any(|s| matches!(s, NotifyState::Watchdog));
    if !ping || states.len() == 1 {
        tracing::debug!(error = %e, "sd_notify failed");
        return;
    }
    tracing::warn!(error = %e, bytes = msg.len(), "notify message not sent; sending the watchdog ping alone");
    if let Err(e) = send_datagram(socket, path, message(&[NotifyState::Watchdog]).as_bytes()) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// One datagram on `socket`; a failed send on a kept socket reconnects once (systemd
/// re-created the socket).
fn send_datagram(
    socket: &mut Option<UnixDatagram>,
    path: &std::ffi::OsStr,
    msg: &[u8],
) -> std::io::Result<()> {
    let reused = socket.is_some();
    match send_once(socket, path, msg) {
        Err(e) if reused => {
            tracing::debug!(error = %e, "notify socket send failed; reconnecting");
            *socket = None;
            send_once(socket, path, msg)
        }
        sent => sent,
    }
}

fn send_once(
    socket: &mut Option<UnixDatagram>,
    path: &std::ffi::OsStr,
    msg: &[u8],
) -> std::io::Result<()> {
    match socket.as_ref() {
        Some(s) => s.send(msg).map(drop),
        None => {
            let s = connect(path)?;
            s.send(msg)?;
            *socket = Some(s);
            Ok(())
        }
    }
}

/// The datagram for `states`: one `KEY=value` line each. Each line is made safe on its own
/// (`text::one_line`), so no value, however it was built, can add an assignment of its
/// own (`STATUS=…\nREADY=1`): the sink is the last line of defence, not the only one.
fn message(states: &[NotifyState<'_>]) -> String {
    let mut msg = String::new();
    for state in states {
        // Formatted in place; only a line that needs escaping is copied (one per renewal
        // rides here under systemd, so the clean case allocates nothing extra).
        let start = msg.len();
        let _ = write!(msg, "{state}");
        if let Cow::Owned(safe) = crate::runtime::text::one_line(&msg[start..]) {
            msg.truncate(start);
            msg.push_str(&safe);
        }
        msg.push('\n');
    }
    msg
}

fn connect(path: &std::ffi::OsStr) -> std::io::Result<UnixDatagram> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    match path.as_bytes().strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            socket.connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)?
        }
        None => socket.connect(path)?,
    }
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_value_cannot_smuggle_another_assignment() {
        let msg = message(&[
            NotifyState::Status("denied: no\nREADY=1\nWATCHDOG_USEC=1"),
            NotifyState::Watchdog,
        ]);
        assert_eq!(
            msg,
            "STATUS=denied: no\\nREADY=1\\nWATCHDOG_USEC=1\nWATCHDOG=1\n"
        );
    }

    #[test]
    fn a_status_too_large_for_a_datagram_does_not_cost_the_watchdog_ping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd.set_nonblocking(true).unwrap();
        // Over any datagram limit (net.core.wmem_max is ~208 KiB by default).
        let huge = "x".repeat(8 << 20);
        let mut socket = None;
        deliver(
            &mut socket,
            path.as_os_str(),
            &[NotifyState::Status(&huge), NotifyState::Watchdog],
        );
        let mut buf = [0u8; 64];
        let n = systemd
            .recv(&mut buf)
            .expect("a datagram reached the socket");
        assert_eq!(&buf[..n], b"WATCHDOG=1\n");
    }

    #[test]
    fn pings_at_half_the_watchdog_interval() {
        assert_eq!(
            watchdog_period(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(
            watchdog_period(Duration::from_micros(1)),
            Duration::from_millis(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_loop_is_logged_once_and_a_recovery_resumes() {
        let health = Health::new(true);
        let mut w = Watchdog::new(Duration::from_secs(10));
        health.beat("lease", Duration::from_secs(1));
        assert!(w.ping_unless_stalled(&health));
        assert_eq!(w.stalled, None);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!w.ping_unless_stalled(&health), "pinged for a stalled loop");
        assert_eq!(w.stalled, Some("lease"));
        health.beat("lease", Duration::from_secs(1));
        assert!(w.ping_unless_stalled(&health));
        assert_eq!(w.stalled, None);
    }

    #[tokio::test(start_paused = true)]
    async fn pings_ride_on_wake_ups_after_half_a_period() {
        let health = Health::new(true);
        let mut w = Watchdog::new(Duration::from_secs(10));
        let start = Instant::now();
        assert!(w.due(start), "the first ping is due at once");
        assert!(w.ping_unless_stalled(&health));
        assert_eq!(w.owed_by, start + Duration::from_secs(10));
        // A loop reporting 2 s later: too early to ping again.
        assert!(!w.due(start + Duration::from_secs(2)));
        // From half a period on, a wake-up pings instead of the fallback timer.
        assert!(w.due(start + Duration::from_secs(5)));
    }

    #[test]
    fn a_step_by_hand_marks_ready_once_and_wakes_at_the_expiry() {
        // By hand (no NOTIFY_SOCKET): no STATUS= line, so nothing ages; READY only logs.
        let health = Health::new(true);
        let mut n = Notifier {
            listening: false,
            watchdog: None,
            ready_sent: false,
            last_status: String::new(),
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut snap = health.subscribe().borrow().clone();
        let wake = n.step(&snap, &health, now);
        assert!(!n.ready_sent, "ready without a certificate");
        assert!(!wake.ages);
        assert_eq!(wake.expiry, None);
        snap.cert = Some(health::CertSummary {
            serial: "01".into(),
            not_after: now + Duration::from_secs(3600),
            rotate_at: None,
        });
        let wake = n.step(&snap, &health, now);
        assert!(n.ready_sent);
        assert_eq!(wake.expiry, Some(Duration::from_secs(3600)));
        assert_eq!(
            n.last_status, "",
            "a STATUS= line kept with nobody listening"
        );
    }
}
