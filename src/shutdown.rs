//! Shutdown: SIGTERM/SIGINT become one watch value that every loop selects on, so no
//! blocking await outlives a stop request; SIGHUP is handed to the agent as a reload
//! request. It does not decide what stopping or reloading means.

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// Fires the shutdown.
pub struct Trigger(watch::Sender<bool>);

/// Awaited by loops; cheap to clone.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

// === impl Trigger ===

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

// === impl Shutdown ===

impl Shutdown {
    /// Resolves once shutdown was requested (or the trigger is gone).
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }
}

/// The SIGHUP stream (config reload), or `None` (logged) when the handler cannot be
/// installed. Installing it replaces SIGHUP's default action, which would kill us.
pub fn hangups() -> Option<tokio::signal::unix::Signal> {
    signal(SignalKind::hangup())
        .map_err(|e| tracing::warn!(error = %e, "cannot handle SIGHUP; reload is unavailable"))
        .ok()
}

/// Waits for SIGTERM or SIGINT and names it.
pub async fn signal_received() -> std::io::Result<&'static str> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger() {
        let (trigger, shutdown) = channel();
        let mut a = shutdown.clone();
        let waiter = tokio::spawn(async move { a.requested().await });
        assert!(!shutdown.is_requested());
        trigger.fire();
        waiter.await.unwrap();
        assert!(shutdown.is_requested());
    }
}
