//! The daemon (`bootlet run`): wires bootstrap, the loops, notify, shutdown and reload
//! (SIGHUP) together. Each piece owns its own logic; this file only starts, joins, restarts
//! and stops them, and decides which reloaded settings apply live.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::api::kubeconfig::KubeconfigError;
use crate::api::{ApiClient, ClientOptions};
use crate::cli::{self, Command};
use crate::config::reload::{self, Reload};
use crate::config::KubeletFiles;
use crate::config::{format_duration, ConfigError, Settings};
use crate::error::Error;
use crate::identity::bootstrap::{Bootstrap, BootstrapError};
use crate::identity::rotation::Rotation;
use crate::identity::sans;
use crate::identity::serving::{self, Serving};
use crate::lease::{self, LeaseLoop};
use crate::metrics::{server, METRICS};
use crate::runtime::health::Health;
use crate::runtime::health::State;
use crate::runtime::report;
use crate::runtime::{notify, shutdown, telemetry};

#[cfg(feature = "test-hooks")]
mod hooks;
#[cfg(feature = "test-hooks")]
pub use hooks::TestHooks;

/// The Lease loop's test switches: [`lease::Hooks`] with the `test-hooks` feature.
#[cfg(feature = "test-hooks")]
use crate::lease::Hooks as LeaseHooks;

/// A shipped build's Lease loop has no test switches: nothing to pass.
#[cfg(not(feature = "test-hooks"))]
#[derive(Debug, Clone, Copy, Default)]
struct LeaseHooks;

#[cfg(not(feature = "test-hooks"))]
impl LeaseHooks {
    fn apply(self, cfg: LeaseLoop) -> LeaseLoop {
        cfg
    }
}

/// Run until SIGTERM/SIGINT. Returns an error only when the agent cannot start.
pub async fn run(settings: Settings) -> Result<(), Error> {
    // A unit struct in a shipped build; the switches' defaults (all off) with `test-hooks`.
    #[allow(clippy::default_constructed_unit_structs)]
    let off = LeaseHooks::default();
    start(settings, off).await
}

/// [`run`] with the test switches (`test-hooks` feature only).
#[cfg(feature = "test-hooks")]
pub async fn run_with_hooks(settings: Settings, hooks: TestHooks) -> Result<(), Error> {
    start(settings, hooks.install()).await
}

async fn start(settings: Settings, hooks: LeaseHooks) -> Result<(), Error> {
    let health = Health::new(settings.renew_lease);
    let (trigger, shutdown) = shutdown::channel();
    let notifier = tokio::spawn(notify::run(health.clone(), shutdown.clone()));
    // Up before bootstrap: /readyz says why the node is not ready yet.
    if let Some(listener) = settings.metrics_bind_address.and_then(server::bind) {
        let endpoints = server::Endpoints {
            health: health.clone(),
            serving: settings.rotate_server_certificates,
            approver: false,
        };
        tokio::spawn(server::serve(listener, endpoints, shutdown.clone()));
    }
    // Installed before bootstrap so an early signal is queued, not fatal.
    let (signals, hangups) = (shutdown::stop_signals(), shutdown::hangups());
    let detected = serving_placeholder(&settings);
    let mut lives = Lives {
        settings: &settings,
        health: &health,
        hooks,
        detected: &detected,
        trigger: &trigger,
        signals,
        hangups,
        // Under systemd (NOTIFY_SOCKET), a bootstrap kubeconfig that is not there yet is
        // waited for; by hand, its absence is the contract's one-line error and a non-zero
        // exit.
        under_systemd: std::env::var_os("NOTIFY_SOCKET").is_some(),
        live: settings.clone(),
        wait_for_file: None,
    };
    let deadline = loop {
        if let Some(deadline) = lives.step().await? {
            break deadline;
        }
    };
    let _ = tokio::time::timeout_at(deadline, notifier).await;
    Ok(())
}

/// The kubelet may start as soon as READY=1 is sent: with the serving drop-in it needs a
/// serving certificate file by then, signed or not. Returns the addresses detected for it
/// (none unless serving certificates are on and `--node-ip` is not given).
fn serving_placeholder(settings: &Settings) -> Vec<std::net::IpAddr> {
    let detected = if settings.rotate_server_certificates && settings.node_ips.is_empty() {
        sans::default_route_addresses()
    } else {
        Vec::new()
    };
    if settings.rotate_server_certificates {
        if let Err(e) = serving::ensure_placeholder(settings, &detected) {
            tracing::warn!(error = %e, "cannot write a placeholder serving certificate; the kubelet may not start until the first one is issued");
        }
    }
    detected
}

/// The lives of the node's identity, one after another (a `kubeadm reset` ends one), until
/// a stop signal: the state [`start`] steps through.
struct Lives<'a> {
    /// The settings as started: each life begins from them.
    settings: &'a Settings,
    health: &'a Health,
    hooks: LeaseHooks,
    detected: &'a [std::net::IpAddr],
    trigger: &'a shutdown::Trigger,
    signals: shutdown::StopSignals,
    hangups: Option<tokio::signal::unix::Signal>,
    under_systemd: bool,
    /// The settings running now: a life's, as SIGHUP changed them.
    live: Settings,
    /// Why the next life waits before bootstrapping: a missing bootstrap kubeconfig
    /// (`Some(None)`), or one older than a `kubeadm reset` (the old join's).
    wait_for_file: Option<Option<SystemTime>>,
}

// === impl Lives ===

impl Lives<'_> {
    /// One life: its settings, bootstrap, then [`Life::serve`] until it ends. `Some` is the
    /// deadline for in-flight work after a stop signal; `None`, that another life follows.
    async fn step(&mut self) -> Result<Option<Instant>, Error> {
        let life_settings = match self.next_settings().await {
            Ok(settings) => settings,
            Err(deadline) => return Ok(Some(deadline)),
        };
        let api = ClientOptions {
            exec_timeout: life_settings.exec_plugin_timeout,
            ..ClientOptions::default()
        };
        let bootstrap = Bootstrap::new(&life_settings, self.health.clone(), api);
        let span = tracing::info_span!("bootstrap", node = %life_settings.node_name);
        let creds = tokio::select! {
            creds = bootstrap.run().instrument(span) => creds,
            sig = self.signals.recv() => return Ok(Some(self.stopping(sig))),
        };
        let creds = match creds {
            Ok(creds) => creds,
            Err(BootstrapError::NoBootstrap {
                source: KubeconfigError::Missing { .. },
                ..
            }) if self.under_systemd && self.wait_for_file.is_none() => {
                self.wait_for_file = Some(None);
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        self.live = life_settings.clone();
        let life = Life {
            settings: &life_settings,
            bootstrap: &bootstrap,
            health: self.health,
            hooks: self.hooks,
            detected: self.detected,
        };
        let (live, signals, hangups) = (&mut self.live, &mut self.signals, &mut self.hangups);
        match life
            .serve(creds, live, signals, hangups, self.trigger)
            .await
        {
            Ended::Stopped(deadline) => Ok(Some(deadline)),
            // Compared with the next bootstrap kubeconfig's mtime, which the kernel
            // stamps from the system clock: not the (test-steppable) wall clock.
            #[allow(clippy::disallowed_methods)]
            Ended::Reset => {
                self.wait_for_file = Some(Some(SystemTime::now()));
                Ok(None)
            }
        }
    }

    /// The next life's settings: as started, or, once the awaited bootstrap kubeconfig is
    /// there, with the keys shared with the kubelet read again (a join just wrote them).
    /// `Err` is the stop deadline when a signal comes first.
    async fn next_settings(&mut self) -> Result<Settings, Instant> {
        let Some(newer_than) = self.wait_for_file else {
            return Ok(self.settings.clone());
        };
        let (settings, health) = (self.settings, self.health);
        let waited = async {
            await_bootstrap(&settings.bootstrap_kubeconfig, newer_than, health).await;
            await_kubeadm_flags(&settings.bootstrap_kubeconfig).await;
        };
        tokio::select! {
            () = waited => {},
            sig = self.signals.recv() => return Err(self.stopping(sig)),
        }
        Ok(with_kubelet_view(settings))
    }

    /// [`stopping`] with the running grace period.
    fn stopping(&self, why: &'static str) -> Instant {
        stopping(why, self.trigger, self.live.shutdown_grace)
    }
}

/// `settings` with the keys it shares with the kubelet read again from the kubelet's files
/// (`config::kubelet`): what a join just wrote (kubeadm's `--hostname-override`, the
/// kubelet-config ConfigMap's `serverTLSBootstrap`) applies to the identity it starts.
fn with_kubelet_view(settings: &Settings) -> Settings {
    match reread() {
        Ok(fresh) => {
            if fresh.node_name != settings.node_name {
                tracing::info!(node = %fresh.node_name, was = %settings.node_name, "the node name follows the kubelet's --hostname-override");
            }
            Settings {
                node_name: fresh.node_name,
                rotate_certificates: fresh.rotate_certificates,
                rotate_server_certificates: fresh.rotate_server_certificates,
                ..settings.clone()
            }
        }
        Err(e) => {
            tracing::warn!(error = %report(&e), "cannot read the configuration again; the node keeps the settings it started with");
            settings.clone()
        }
    }
}

/// One life of the node's identity: from its certificate in place until a stop signal or
/// until `kubeadm reset` (kubelet.conf removed) ends it.
struct Life<'a> {
    settings: &'a Settings,
    bootstrap: &'a Bootstrap<'a>,
    health: &'a Health,
    hooks: LeaseHooks,
    detected: &'a [std::net::IpAddr],
}

/// How a [`Life`] ended.
enum Ended {
    /// A stop signal: in-flight work has until this deadline.
    Stopped(Instant),
    /// The kubeconfig was removed: the loops are stopped, the identity dropped.
    Reset,
}

impl Life<'_> {
    /// Runs the Lease, serving and rotation loops and answers SIGHUP, until a stop signal
    /// or the kubeconfig's removal. A removed kubelet.conf is `kubeadm reset` (or an
    /// operator undoing the join): bootlet must not write it back from memory, or the next
    /// `kubeadm join` fails its FileAvailable--etc-kubernetes-kubelet.conf preflight.
    async fn serve(
        self,
        creds: crate::identity::bootstrap::Credentials,
        live: &mut Settings,
        signals: &mut shutdown::StopSignals,
        hangups: &mut Option<tokio::signal::unix::Signal>,
        trigger: &shutdown::Trigger,
    ) -> Ended {
        let (settings, health) = (self.settings, self.health);
        tracing::info!(
            node = %settings.node_name,
            serial = %creds.cert.serial,
            server = %creds.server,
            "node identity in place"
        );
        // This life's loops stop on its own switch: a reset ends them, not the process.
        let (end, ending) = shutdown::channel();
        // Every loop uses the newest client; rotation publishes a new one here.
        let (clients_tx, clients) = watch::channel(creds.client.clone());
        let mut lease = LeaseTask::start(live, &clients, health, self.hooks);
        let ca_pem = &creds.ca_pem;
        let serving = spawn_serving(settings, health, &clients, ca_pem, self.detected, &ending);
        let rotation = Rotation {
            settings,
            bootstrap: self.bootstrap,
            health: health.clone(),
            clients: clients_tx,
        };
        let span = tracing::info_span!("rotation", node = %settings.node_name);
        let rotating = rotation.run(creds, ending.clone()).instrument(span);
        tokio::pin!(rotating);
        let mut rotation_done = false;
        let reset = crate::runtime::gone::removed(&settings.kubeconfig);
        tokio::pin!(reset);
        let ended = loop {
            tokio::select! {
                sig = signals.recv() => break Ended::Stopped(stopping(sig, trigger, live.shutdown_grace)),
                () = &mut reset => {
                    tracing::warn!(kubeconfig = %settings.kubeconfig.display(), "the kubeconfig was removed (kubeadm reset?): this node's identity is dropped and not written back; waiting for a new bootstrap kubeconfig");
                    break Ended::Reset;
                }
                () = &mut rotating, if !rotation_done => rotation_done = true,
                Some(()) = recv(hangups) => lease = reload(live, lease, &clients, health, self.hooks).await,
            }
        };
        // In-flight work (a Lease write, a certificate install) finishes within the grace
        // period; the Lease itself is left alone.
        end.fire();
        let deadline = match ended {
            Ended::Stopped(deadline) => deadline,
            Ended::Reset => Instant::now() + live.shutdown_grace,
        };
        let rotating = (!rotation_done).then_some(rotating);
        wind_down(deadline, lease, serving, rotating, health).await;
        if let Ended::Reset = ended {
            drop_identity(health);
        }
        ended
    }
}

/// The serving certificate: its own loop, filed with the client certificate; never part of
/// readiness. `None` unless `--rotate-server-certificates`.
fn spawn_serving(
    settings: &Settings,
    health: &Health,
    clients: &watch::Receiver<ApiClient>,
    ca_pem: &[u8],
    detected: &[std::net::IpAddr],
    ending: &shutdown::Shutdown,
) -> Option<tokio::task::JoinHandle<()>> {
    settings.rotate_server_certificates.then(|| {
        let span = tracing::info_span!("serving", node = %settings.node_name);
        tokio::spawn(
            Serving {
                settings: settings.clone(),
                health: health.clone(),
                clients: clients.clone(),
                ca_pem: ca_pem.to_vec(),
                detected: detected.to_vec(),
            }
            .run(ending.clone())
            .instrument(span),
        )
    })
}

/// Each of this life's loops finishes its in-flight work by `deadline` or is stopped
/// anyway, with a warning.
async fn wind_down<F: std::future::Future<Output = ()>>(
    deadline: Instant,
    lease: Option<LeaseTask>,
    serving: Option<tokio::task::JoinHandle<()>>,
    rotating: Option<std::pin::Pin<&mut F>>,
    health: &Health,
) {
    if let Some(task) = lease {
        task.stop(deadline, health).await;
    }
    if let Some(task) = serving {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!(
                "the serving certificate loop still busy after the grace period; stopping anyway"
            );
            abort.abort();
        }
    }
    if let Some(rotating) = rotating {
        if tokio::time::timeout_at(deadline, rotating).await.is_err() {
            tracing::warn!("rotation still busy after the grace period; stopping anyway");
        }
    }
}

/// After a reset: the identity is gone from the health snapshot (STATUS=, /readyz,
/// metrics) and its loops' heartbeats are no longer expected.
fn drop_identity(health: &Health) {
    health.retire(crate::identity::rotation::TASK);
    health.retire(crate::identity::serving::TASK);
    health.update(|s| {
        s.cert = None;
        s.serving_cert = None;
    });
}

/// Until the bootstrap kubeconfig is there (`newer_than` a reset: one that survived it is
/// the old join's, and using it would write kubelet.conf before the next `kubeadm join`
/// runs its preflight). One `stat` every [`BOOTSTRAP_POLL`]; STATUS= says what it waits for.
async fn await_bootstrap(path: &std::path::Path, newer_than: Option<SystemTime>, health: &Health) {
    let here = || match newer_than {
        None => path.exists(),
        Some(reset) => std::fs::metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at >= reset),
    };
    if here() {
        return;
    }
    // Not a fault: a node built from an image has no credential until cloud-init's
    // `kubeadm join` (after the boot) or `write_files` gives it one.
    match newer_than {
        None => {
            tracing::info!(path = %path.display(), "no valid client certificate and no bootstrap kubeconfig yet; waiting for the file")
        }
        Some(_) => {
            tracing::info!(path = %path.display(), "waiting for a bootstrap kubeconfig written after the reset (the next join's)")
        }
    }
    health.set_bootstrap(State::AwaitingBootstrapKubeconfig {
        path: path.to_path_buf(),
    });
    while !here() {
        tokio::time::sleep(BOOTSTRAP_POLL).await;
    }
    tracing::info!(path = %path.display(), "the bootstrap kubeconfig appeared");
}

/// How often a missing bootstrap kubeconfig is looked for (one `stat`).
const BOOTSTRAP_POLL: Duration = Duration::from_secs(2);

/// `kubeadm join` writes the bootstrap kubeconfig first and kubeadm-flags.env (with
/// `--hostname-override` for `--node-name`) only after a Node lookup and `systemctl stop
/// kubelet`: a bootstrap kubeconfig of kubeadm's (its user `tls-bootstrap-token-user`)
/// is followed, within [`KUBEADM_FLAGS_WAIT`], by a kubeadm-flags.env at least as new,
/// written just before kubeadm restarts the kubelet. Reading the name earlier would file
/// the CSR for the host name while the kubelet registers the other.
async fn await_kubeadm_flags(bootstrap: &std::path::Path) {
    let files = KubeletFiles::default();
    let kubeadms = std::fs::read_to_string(bootstrap)
        .is_ok_and(|text| text.contains("tls-bootstrap-token-user"));
    let Some(written) = kubeadms
        .then(|| std::fs::metadata(bootstrap).and_then(|m| m.modified()).ok())
        .flatten()
    else {
        return;
    };
    let flags_new = || {
        std::fs::metadata(&files.kubeadm_flags)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at >= written)
    };
    let deadline = Instant::now() + KUBEADM_FLAGS_WAIT;
    if !flags_new() {
        tracing::info!(flags = %files.kubeadm_flags.display(), "a kubeadm join is under way; waiting for it to write the kubelet's flags");
    }
    while !flags_new() {
        if Instant::now() >= deadline {
            tracing::warn!(flags = %files.kubeadm_flags.display(), "kubeadm wrote no kubelet flags after the bootstrap kubeconfig; going on with the node name as configured");
            return;
        }
        tokio::time::sleep(KUBEADM_FLAGS_POLL).await;
    }
}

/// How long a join may take between its two writes (a Node lookup and stopping the
/// kubelet lie between them), and how often to look.
const KUBEADM_FLAGS_WAIT: Duration = Duration::from_secs(60);
const KUBEADM_FLAGS_POLL: Duration = Duration::from_millis(200);

/// STOPPING=1, fire the shutdown, and return the deadline for in-flight work.
fn stopping(why: &'static str, trigger: &shutdown::Trigger, grace: std::time::Duration) -> Instant {
    tracing::info!("received {why}; stopping");
    notify::stopping(why);
    trigger.fire();
    Instant::now() + grace
}

/// The next SIGHUP, or never when the handler could not be installed.
async fn recv(hangups: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match hangups {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

/// A running Lease loop with its own stop switch, so reload can replace it.
struct LeaseTask {
    stop: shutdown::Trigger,
    handle: JoinHandle<()>,
}

// === impl LeaseTask ===

impl LeaseTask {
    /// Starts the loop when `--renew-lease` is on.
    fn start(
        settings: &Settings,
        clients: &watch::Receiver<ApiClient>,
        health: &Health,
        hooks: LeaseHooks,
    ) -> Option<LeaseTask> {
        health.update(|s| s.lease.enabled = settings.renew_lease);
        METRICS.lease_duration_setting(settings.lease_duration);
        if !settings.renew_lease {
            tracing::info!("--renew-lease=false: the Lease is left to the kubelet");
            return None;
        }
        let (stop, shutdown) = shutdown::channel();
        let span = tracing::info_span!("lease", node = %settings.node_name);
        let handle = tokio::spawn(
            hooks
                .apply(LeaseLoop::from(settings))
                .run(clients.clone(), health.clone(), shutdown)
                .instrument(span),
        );
        Some(LeaseTask { stop, handle })
    }

    /// Asks the loop to stop; a renewal in flight finishes first, until `deadline`.
    async fn stop(self, deadline: Instant, health: &Health) {
        self.stop.fire();
        let abort = self.handle.abort_handle();
        if tokio::time::timeout_at(deadline, self.handle)
            .await
            .is_err()
        {
            tracing::warn!("the Lease loop did not stop within the grace period; aborting it");
            abort.abort();
        }
        health.retire(lease::TASK);
    }
}

/// Why a reload was refused; the running configuration stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// Cannot happen in practice: the same argv parsed at start.
    #[error("re-reading the command line")]
    CommandLine(#[source] clap::Error),
    #[error("the command line is not `bootlet run`")]
    NotRun,
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Re-reads the configuration the way it was first read: the same command line (so flags
/// still override the file) over the current content of `--config`.
fn reread() -> Result<Settings, ReloadError> {
    match cli::parse_from(std::env::args_os()).map_err(ReloadError::CommandLine)? {
        Command::Run(flags) => Ok(Settings::load(&flags)?),
        _ => Err(ReloadError::NotRun),
    }
}

/// Applies a reloaded configuration by each setting's policy in `config::reload::TABLE`:
/// `Live` ones at once (the log level, shutdownGrace), `LeaseLoop` ones by restarting the
/// Lease loop with them, `Restart` ones logged as needing a restart and kept as they run,
/// in the restarted Lease loop too (it is built from the running settings plus the
/// reloadable changes, never from the new file as read).
/// SIGHUP: the config file read again and applied (RELOADING=1 meanwhile), or the
/// running configuration kept when it does not load.
async fn reload(
    live: &mut Settings,
    lease: Option<LeaseTask>,
    clients: &watch::Receiver<ApiClient>,
    health: &Health,
    hooks: LeaseHooks,
) -> Option<LeaseTask> {
    notify::reloading();
    let lease = match reread() {
        Ok(new) => apply(live, new, lease, clients, health, hooks).await,
        Err(e) => {
            tracing::error!(error = %report(&e), "reload failed; keeping the running configuration");
            lease
        }
    };
    notify::reloaded(health);
    lease
}

/// One reload's changes applied, by [`reload`]'s policy; returns the Lease loop that runs
/// from now on.
async fn apply(
    live: &mut Settings,
    new: Settings,
    lease: Option<LeaseTask>,
    clients: &watch::Receiver<ApiClient>,
    health: &Health,
    hooks: LeaseHooks,
) -> Option<LeaseTask> {
    let mut applied = apply_live(live, &new);
    let changed = reload::changed(live, &new);
    // What runs from now on: the running settings with only the reloadable changes. A
    // restart-only key (nodeName, certDir, ...) keeps its running value everywhere, the
    // restarted Lease loop included: a new nodeName must not make the loop renew another
    // node's Lease with this node's certificate.
    let mut new = new;
    reload::keep_restart_only(&mut new, live);
    let lease_changed = changed.iter().any(|(_, p)| *p == Reload::LeaseLoop);
    let lease = if lease_changed {
        applied.push(format!(
            "renewLease={} leaseRenewInterval={} leaseDuration={} leaseHealthProbe={}",
            new.renew_lease,
            format_duration(new.lease_renew_interval),
            format_duration(new.lease_duration),
            new.lease_health_probe.as_deref().unwrap_or("none")
        ));
        if let Some(task) = lease {
            task.stop(Instant::now() + live.lease_renew_interval, health)
                .await;
        }
        LeaseTask::start(&new, clients, health, hooks)
    } else {
        lease
    };
    warn_restart_only(&changed);
    let applied = if applied.is_empty() {
        "nothing".to_string()
    } else {
        applied.join(", ")
    };
    tracing::info!(%applied, "configuration reloaded");
    // The settings that need a restart stay as they run, so the warning repeats until then.
    *live = new;
    lease
}

/// The `Live` changes from `live` to `new`, applied at once (the log level; shutdownGrace
/// is read where it is used), in words for the reload's log line.
fn apply_live(live: &Settings, new: &Settings) -> Vec<String> {
    let mut applied = Vec::new();
    if new.verbosity != live.verbosity {
        if telemetry::set_verbosity(new.verbosity) {
            applied.push(format!("verbosity={}", new.verbosity));
        } else {
            tracing::warn!("verbosity changed, but RUST_LOG sets the log level; unchanged");
        }
    }
    if new.shutdown_grace != live.shutdown_grace {
        applied.push(format!(
            "shutdownGrace={}",
            format_duration(new.shutdown_grace)
        ));
    }
    applied
}

/// Warns of the `changed` keys that apply only after a restart: they keep running as they
/// are, so the warning repeats on every reload until then.
fn warn_restart_only(changed: &[(&'static str, Reload)]) {
    let restart: Vec<&str> = changed
        .iter()
        .filter(|(_, p)| *p == Reload::Restart)
        .map(|(key, _)| *key)
        .collect();
    if !restart.is_empty() {
        tracing::warn!(
            keys = %restart.join(", "),
            "changed in the configuration but only applied after a restart (systemctl restart bootlet)"
        );
    }
}
