//! systemd notification: turns the `Health` snapshot into READY=1 and STATUS= lines over
//! `NOTIFY_SOCKET`, and says STOPPING=1. A no-op without `NOTIFY_SOCKET`. No decisions here.

use std::time::{Duration, SystemTime};

use sd_notify::NotifyState;
use tokio::sync::watch;

use crate::health::Snapshot;
use crate::shutdown::Shutdown;

/// How often STATUS= is refreshed when nothing changed (its "renewed 2s ago" ages).
const STATUS_REFRESH: Duration = Duration::from_secs(5);

/// Follow `health` until shutdown: STATUS= on every change and periodically, READY=1 once.
pub async fn run(mut health: watch::Receiver<Snapshot>, mut shutdown: Shutdown) {
    let mut ready_sent = false;
    let mut last_status = String::new();
    loop {
        let snap = health.borrow_and_update().clone();
        let status = snap.status_line(SystemTime::now());
        if status != last_status {
            send(&[NotifyState::Status(&status)]);
            last_status = status;
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
        tokio::select! {
            changed = health.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(STATUS_REFRESH) => {}
            () = shutdown.requested() => return,
        }
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
