//! The daemon (`bootlet run`): wires bootstrap, the loops, notify and shutdown together.
//! Each piece owns its own logic; this file only starts, joins and stops them.

use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use crate::apiserver::ClientOptions;
use crate::bootstrap::Bootstrap;
use crate::config::Settings;
use crate::error::Error;
use crate::health::Health;
use crate::lease::LeaseLoop;
use crate::rotation::Rotation;
use crate::{notify, shutdown};

/// Run until SIGTERM/SIGINT. Returns an error only when the agent cannot start.
pub async fn run(settings: Settings) -> Result<(), Error> {
    let health = Health::new(settings.renew_lease);
    let (trigger, shutdown) = shutdown::channel();
    let notifier = tokio::spawn(notify::run(health.subscribe(), shutdown.clone()));
    let signal = shutdown::signal_received();
    tokio::pin!(signal);

    let bootstrap = Bootstrap::new(&settings, health.clone(), ClientOptions::default());
    let span = tracing::info_span!("bootstrap", node = %settings.node_name);
    let creds = tokio::select! {
        creds = bootstrap.run().instrument(span) => creds?,
        sig = &mut signal => return stop(sig, &trigger, notifier, settings.shutdown_grace).await,
    };
    tracing::info!(
        node = %settings.node_name,
        serial = %creds.cert.serial,
        server = %creds.server,
        "node identity in place"
    );
    // Every loop uses the newest client; rotation publishes a new one here.
    let (clients_tx, clients) = watch::channel(creds.client.clone());
    let mut loops = Vec::new();
    if settings.renew_lease {
        let lease = LeaseLoop::from(&settings);
        let span = tracing::info_span!("lease", node = %settings.node_name);
        loops.push(tokio::spawn(
            lease
                .run(clients.clone(), health.clone(), shutdown.clone())
                .instrument(span),
        ));
    } else {
        tracing::info!("--renew-lease=false: the Lease is left to the kubelet");
    }
    let rotation = Rotation {
        settings: &settings,
        bootstrap: &bootstrap,
        health: health.clone(),
        clients: clients_tx,
    };
    let span = tracing::info_span!("rotation", node = %settings.node_name);
    let rotating = rotation.run(creds, shutdown.clone()).instrument(span);
    tokio::pin!(rotating);
    let sig = tokio::select! {
        sig = &mut signal => sig,
        () = &mut rotating => signal.await,
    };
    let result = stop(sig, &trigger, notifier, settings.shutdown_grace).await;
    for task in loops {
        let _ = tokio::time::timeout(settings.shutdown_grace, task).await;
    }
    result
}

async fn stop(
    sig: std::io::Result<&'static str>,
    trigger: &shutdown::Trigger,
    notifier: tokio::task::JoinHandle<()>,
    grace: Duration,
) -> Result<(), Error> {
    let why = sig.unwrap_or("signal handler failed");
    tracing::info!("received {why}; stopping");
    notify::stopping(why);
    trigger.fire();
    let _ = tokio::time::timeout(grace, notifier).await;
    Ok(())
}
