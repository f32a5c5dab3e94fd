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

/// SIGTERM and SIGINT, caught from the moment this is created: the handlers are installed
/// here, synchronously, so a stop request that arrives while bootstrap is still running (or
/// before the first poll) is queued instead of taking the default action and killing us.
pub struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

pub fn stop_signals() -> StopSignals {
    let install = |kind: SignalKind, name: &str| {
        signal(kind)
            .map_err(|e| tracing::warn!(error = %e, "cannot handle {name}; it will stop bootlet abruptly"))
            .ok()
    };
    StopSignals {
        term: install(SignalKind::terminate(), "SIGTERM"),
        int: install(SignalKind::interrupt(), "SIGINT"),
    }
}

impl StopSignals {
    /// The next SIGTERM or SIGINT, named.
    pub async fn recv(&mut self) -> &'static str {
        async fn next(sig: &mut Option<tokio::signal::unix::Signal>) {
            match sig {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.term) => "SIGTERM",
            () = next(&mut self.int) => "SIGINT",
        }
    }
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
