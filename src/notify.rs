//! systemd notification: turns the `Health` snapshot into READY=1, STATUS=, WATCHDOG=1,
//! RELOADING=1 and STOPPING=1 over `NOTIFY_SOCKET`. A no-op without `NOTIFY_SOCKET`. It
//! decides nothing about the agent's state; it only reports it (and withholds pings).

use std::time::{Duration, SystemTime};

use sd_notify::NotifyState;
use tokio::time::{Instant, MissedTickBehavior};

use crate::health::{self, Health, Stalled};
use crate::shutdown::Shutdown;

/// How often STATUS= is refreshed when nothing changed (its "renewed 2s ago" ages).
const STATUS_REFRESH: Duration = Duration::from_secs(5);

/// The ping period for a `WATCHDOG_USEC` of `usec`: half of it, as sd_watchdog_enabled(3)
/// recommends, so one late tick never costs a restart. At least 1 ms.
pub fn watchdog_period(usec: Duration) -> Duration {
    (usec / 2).max(Duration::from_millis(1))
}

/// Follow `health` until shutdown: STATUS= on every change and periodically, READY=1 once,
/// and — when systemd set `WATCHDOG_USEC` for us — WATCHDOG=1 every half period while no
/// loop is past its heartbeat deadline ([`Health::stalled`]). Without `NOTIFY_SOCKET`
/// nobody listens: it only logs readiness once and then sleeps until shutdown, so a
/// renewal costs no status line.
pub async fn run(health: Health, mut shutdown: Shutdown) {
    let listening = std::env::var_os("NOTIFY_SOCKET").is_some();
    let mut snapshots = health.subscribe();
    let mut watchdog = sd_notify::watchdog_enabled().map(|usec| {
        let period = watchdog_period(usec);
        tracing::debug!(period = ?period, "systemd watchdog enabled");
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick
    });
    let mut ready_sent = false;
    let mut last_status = String::new();
    let mut stalled_logged: Option<&'static str> = None;
    loop {
        let snap = snapshots.borrow_and_update().clone();
        if listening {
            let status = snap.status_line(SystemTime::now());
            if status != last_status {
                send(&[NotifyState::Status(&status)]);
                last_status = status;
            }
        }
        if !ready_sent && snap.ready() {
            send(&[NotifyState::Ready]);
            tracing::info!(
                "ready: client certificate in place{}",
                if snap.lease.enabled {
                    " and the Lease written"
                } else {
                    ""
                }
            );
            ready_sent = true;
        }
        if !listening && ready_sent {
            shutdown.requested().await;
            return;
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(STATUS_REFRESH), if listening => {}
            Some(_) = tick(&mut watchdog) => {
                ping_unless_stalled(&health, &mut stalled_logged);
            }
            () = shutdown.requested() => return,
        }
    }
}

/// The next watchdog tick, or never when the watchdog is off.
async fn tick(watchdog: &mut Option<tokio::time::Interval>) -> Option<Instant> {
    match watchdog {
        Some(interval) => Some(interval.tick().await),
        None => std::future::pending().await,
    }
}

/// WATCHDOG=1, unless a loop is wedged: then log it once and let systemd restart us.
fn ping_unless_stalled(health: &Health, logged: &mut Option<&'static str>) {
    match health.stalled(Instant::now()) {
        None => {
            if let Some(task) = logged.take() {
                tracing::info!(task, "the loop made progress again; watchdog pings resumed");
            }
            send(&[NotifyState::Watchdog]);
        }
        Some(Stalled { task, overdue }) => {
            if logged.replace(task) != Some(task) {
                tracing::error!(
                    task,
                    overdue = %health::human(overdue),
                    "the {task} loop has made no progress past its deadline; withholding watchdog pings so systemd restarts the agent"
                );
            }
        }
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
    let status = snap.status_line(SystemTime::now());
    if snap.ready() {
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

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut logged = None;
        health.beat("lease", Duration::from_secs(1));
        ping_unless_stalled(&health, &mut logged);
        assert_eq!(logged, None);
        tokio::time::advance(Duration::from_secs(2)).await;
        ping_unless_stalled(&health, &mut logged);
        assert_eq!(logged, Some("lease"));
        health.beat("lease", Duration::from_secs(1));
        ping_unless_stalled(&health, &mut logged);
        assert_eq!(logged, None);
    }
}
