//! Both certificate loops through long API outages, against the in-process testplane on
//! tokio's paused clock (two hours take a second or two): the heartbeat each loop promises
//! must hold throughout (`Health::stalled` stays `None`, so the watchdog keeps pinging and
//! `/healthz` stays 200), with requests and log lines counted per simulated minute. The
//! wall clock the loops read is stepped with `runtime::clock` (a paused tokio clock does
//! not move `SystemTime`), to put a rotation deadline or the expiry inside the outage.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use testplane::{RequestRecord, TestPlane};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::api::kubeconfig::Credential;
use crate::api::{ApiClient, ClientOptions};
use crate::config::Settings;
use crate::pki::PrivateKeyPem;
use crate::runtime::clock;
use crate::runtime::health::{Health, Stalled};

pub(crate) const MINUTE: Duration = Duration::from_secs(60);
pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// The log lines of this thread's loops (bootlet's own targets), in tracing's plain format.
#[derive(Clone, Default)]
pub(crate) struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if std::env::var_os("BOOTLET_TEST_ECHO").is_some() {
            eprint!("[{:?}] {}", Instant::now(), String::from_utf8_lossy(bytes));
        }
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Lines {
    type Writer = Lines;
    fn make_writer(&'w self) -> Lines {
        self.clone()
    }
}

impl Lines {
    /// Capture this thread's events (every task of a current-thread test runs on it).
    pub(crate) fn capture() -> (Lines, tracing::subscriber::DefaultGuard) {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "off,bootlet=debug,bootlet_testplane=off",
            ))
            .with_writer(lines.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (lines, guard)
    }

    pub(crate) fn all(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(String::from)
            .collect()
    }

    /// Warning and error lines after the first `from` lines.
    pub(crate) fn loud_since(&self, from: usize) -> Vec<String> {
        self.all()
            .into_iter()
            .skip(from)
            .filter(|l| l.contains(" WARN ") || l.contains("ERROR "))
            .collect()
    }
}

/// Keeps tokio's auto-advance of the paused clock to steps of at most 20 ms: a loopback
/// round trip to the in-process testplane then costs a few of them, never a request
/// timeout.
pub(crate) fn metronome() -> JoinHandle<()> {
    tokio::spawn(async {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// An API client for `node`'s own client certificate, issued by the testplane's CA.
pub(crate) fn node_client(tp: &TestPlane, node: &str) -> ApiClient {
    let (chain_pem, key) = tp
        .client_cert(&format!("system:node:{node}"), &["system:nodes"])
        .unwrap();
    let credential = Credential::ClientCert {
        chain_pem,
        key: PrivateKeyPem::new(key),
    };
    ApiClient::new(
        &tp.url(),
        tp.ca_pem().as_bytes(),
        &credential,
        ClientOptions::default(),
    )
    .unwrap()
}

/// A Node as the kubelet and the node controller write it, with these addresses.
pub(crate) fn node_with(name: &str, ips: &[&str]) -> Node {
    let mut addresses = vec![NodeAddress {
        type_: "Hostname".into(),
        address: name.into(),
    }];
    addresses.extend(ips.iter().map(|ip| NodeAddress {
        type_: "InternalIP".into(),
        address: (*ip).into(),
    }));
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(addresses),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

/// Default settings for `node` with its files under `dir`.
pub(crate) fn settings_in(dir: &std::path::Path, node: &str) -> Settings {
    let flags = match crate::cli::parse_from(["bootlet", "--node-name", node]) {
        Ok(crate::cli::Command::Run(flags)) => flags,
        _ => unreachable!("a run command line"),
    };
    let mut s = Settings::from_parts(None, &flags).unwrap();
    s.cert_dir = dir.join("pki");
    s.kubeconfig = dir.join("kubelet.conf");
    s.bootstrap_kubeconfig = dir.join("bootstrap-kubelet.conf");
    s.metrics_bind_address = None;
    s
}

pub(crate) fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// Wait (on the paused clock) until `done` holds, checking every 100 ms, at most `limit`.
pub(crate) async fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < end, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a stretch of simulated time looked like from outside.
#[derive(Debug, Default)]
pub(crate) struct Window {
    /// The first loop past its promised heartbeat, and when.
    pub stalled: Option<(Duration, Stalled)>,
    /// Matching requests in each simulated minute.
    pub per_minute: Vec<usize>,
    /// The longest stretch with no matching request.
    pub longest_quiet: Duration,
}

/// Run for `length` of simulated time, checking the heartbeats every 250 ms (the watchdog
/// checks at half of `WatchdogSec`) and counting the requests `pick` selects.
pub(crate) async fn watch_window(
    tp: &TestPlane,
    health: &Health,
    length: Duration,
    pick: impl Fn(&RequestRecord) -> bool,
) -> Window {
    let start = Instant::now();
    let seen_before = tp.requests().len();
    let mut window = Window::default();
    let (mut counted, mut last_request) = (0usize, start);
    while start.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(s) = health.stalled(Instant::now()) {
            window.stalled = Some((start.elapsed(), s));
            return window;
        }
        let now_counted = tp
            .requests()
            .iter()
            .skip(seen_before)
            .filter(|r| pick(r))
            .count();
        let minute = (start.elapsed().as_secs() / 60) as usize;
        if window.per_minute.len() <= minute {
            window.per_minute.resize(minute + 1, 0);
        }
        window.per_minute[minute] += now_counted - counted;
        if now_counted > counted {
            last_request = Instant::now();
        }
        window.longest_quiet = window.longest_quiet.max(last_request.elapsed());
        counted = now_counted;
    }
    window
}

/// This thread's loops read the system clock moved by `by` (`clock::step_for_tests`).
pub(crate) fn step_clock(by: Duration, forward: bool) {
    let secs = by.as_secs() as i64;
    clock::step_for_tests(if forward { secs } else { -secs });
}

fn is_csr_post(r: &RequestRecord) -> bool {
    r.method == "POST" && r.path.contains("certificatesigningrequests")
}

/// Requests in the log from `from` on, by what they were.
fn tally(tp: &TestPlane, from: usize) -> (usize, usize, usize) {
    let window: Vec<RequestRecord> = tp.requests().into_iter().skip(from).collect();
    let posts = window.iter().filter(|r| is_csr_post(r)).count();
    let nodes = window
        .iter()
        .filter(|r| r.path.starts_with("/api/v1/nodes/"))
        .count();
    (window.len(), posts, nodes)
}

/// (b): a serving rotation due in the middle of a two-hour outage. Before, filing retried
/// 5xx forever inside one pass while the loop had promised a heartbeat within the wait
/// limit + 60 s: at 6 min the loop was stalled, the watchdog stopped pinging and systemd
/// killed bootlet (every ~6.5 min for the whole outage, on every node at once).
#[tokio::test(start_paused = true)]
async fn the_serving_loop_keeps_its_heartbeat_through_a_two_hour_outage() {
    use crate::identity::serving::Serving;
    clock::step_for_tests(0);
    let (lines, _guard) = Lines::capture();
    let _tick = metronome();
    let tp = TestPlane::builder()
        .cert_ttl(HOUR)
        .serving_approval(testplane::Approval::Auto)
        .start()
        .await
        .unwrap();
    tp.put_node(&node_with("srv-out", &["127.0.0.1"]));
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings_in(dir.path(), "srv-out");
    settings.rotate_server_certificates = true;
    settings.node_ips = vec![ip("127.0.0.1")];
    let health = Health::new(false);
    let (_clients_tx, clients) = tokio::sync::watch::channel(node_client(&tp, "srv-out"));
    let (trigger, shutdown) = crate::runtime::shutdown::channel();
    let serving = tokio::spawn(
        Serving {
            settings,
            health: health.clone(),
            clients,
            ca_pem: tp.ca_pem().into_bytes(),
            detected: Vec::new(),
        }
        .run(shutdown),
    );
    until(5 * MINUTE, "the first serving certificate", || {
        health.snapshot().serving_cert.is_some()
    })
    .await;
    let first = health.snapshot().serving_cert.unwrap().serial;

    // Every request answered 503 for two hours, and the clock past the rotation deadline
    // (75 % ± 5 % of the 65 min lifetime) but 10 min before expiry.
    tp.faults().fail_always(Some(503));
    step_clock(50 * MINUTE, true);
    let (requests, logged) = (tp.requests().len(), lines.all().len());
    let window = watch_window(&tp, &health, 2 * HOUR, is_csr_post).await;
    let (total, posts, nodes) = tally(&tp, requests);
    let loud = lines.loud_since(logged);
    eprintln!(
        "serving, 2 h outage: stalled {:?}; {total} requests ({posts} CSR POSTs, {nodes} Node GETs); CSR POSTs per minute at most {}; longest without one {:?}; {} warning/error lines",
        window.stalled,
        window.per_minute.iter().max().unwrap_or(&0),
        window.longest_quiet,
        loud.len()
    );
    assert_eq!(
        window.stalled, None,
        "the serving loop broke its heartbeat promise during the outage"
    );
    // Bounded: the pipeline retries a 503 from 0.5 s doubling to 30 s (a pass starts with 8
    // tries in its first 50 s, then 2 a minute), and between passes the loop waits at most
    // a tenth of the remaining lifetime (1 min here). A loop would be thousands.
    let busiest = *window.per_minute.iter().max().unwrap_or(&0);
    assert!(busiest <= 10, "{busiest} CSR POSTs in one minute");
    assert!(posts <= 420, "{posts} CSR POSTs in 2 h (3.5 a minute)");
    assert!(total <= 540, "{total} requests in 2 h");
    assert!(
        window.longest_quiet <= 2 * MINUTE,
        "no CSR attempt for {:?}: a retry past its cap",
        window.longest_quiet
    );
    assert!(
        loud.len() <= 480,
        "{} warning/error lines in 2 h (4 a minute)",
        loud.len()
    );

    // The API is back: the overdue rotation completes at the next attempt.
    tp.faults().fail_always(None);
    until(
        10 * MINUTE,
        "the serving certificate rotated after the outage",
        || health.snapshot().serving_cert.map(|c| c.serial) != Some(first.clone()),
    )
    .await;
    trigger.fire();
    serving.await.unwrap();
}

/// M1: client rotation due in a two-hour outage, then the expiry fallback (bootstrap with
/// the token) in another. Before, each pass filed forever while the loop had promised a
/// heartbeat within --csr-timeout + 2 min: the watchdog killed bootlet at 62 min.
#[tokio::test(start_paused = true)]
async fn the_rotation_loop_keeps_its_heartbeat_through_outages_over_its_deadline_and_its_expiry() {
    use crate::identity::bootstrap::Bootstrap;
    use crate::identity::rotation::Rotation;
    clock::step_for_tests(0);
    let (lines, _guard) = Lines::capture();
    let _tick = metronome();
    let tp = TestPlane::builder().cert_ttl(HOUR).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = settings_in(dir.path(), "rot-out");
    std::fs::write(&settings.bootstrap_kubeconfig, tp.bootstrap_kubeconfig()).unwrap();
    let health = Health::new(false);
    let bootstrap = Bootstrap::new(&settings, health.clone(), ClientOptions::default());
    let creds = bootstrap.run().await.unwrap();
    let first = creds.cert.serial.clone();
    let (clients, _rx) = tokio::sync::watch::channel(creds.client.clone());
    let rotation = Rotation {
        settings: &settings,
        bootstrap: &bootstrap,
        health: health.clone(),
        clients,
    };
    let (trigger, shutdown) = crate::runtime::shutdown::channel();
    let outside = async {
        until(MINUTE, "the rotation scheduled", || {
            health.snapshot().cert.and_then(|c| c.rotate_at).is_some()
        })
        .await;
        tp.faults().fail_always(Some(503));
        let mut report = Vec::new();
        // Past the deadline (40-47 min from issue), 10 min before expiry; then past expiry.
        for (what, step) in [("deadline", 50 * MINUTE), ("expiry", 2 * HOUR)] {
            step_clock(step, true);
            let (requests, logged) = (tp.requests().len(), lines.all().len());
            let window = watch_window(&tp, &health, 2 * HOUR, is_csr_post).await;
            let (total, posts, _) = tally(&tp, requests);
            let loud = lines.loud_since(logged).len();
            eprintln!(
                "rotation, 2 h outage over its {what}: stalled {:?}; {total} requests ({posts} CSR POSTs); CSR POSTs per minute at most {}; longest without one {:?}; {loud} warning/error lines",
                window.stalled,
                window.per_minute.iter().max().unwrap_or(&0),
                window.longest_quiet,
            );
            report.push((what, window, total, posts, loud));
            if report.last().unwrap().1.stalled.is_some() {
                break;
            }
        }
        // The API and the clock are back: rotation completes.
        tp.faults().fail_always(None);
        step_clock(50 * MINUTE, true);
        let rotated = tokio::time::timeout(
            2 * HOUR,
            until(2 * HOUR, "rotated", || {
                health.snapshot().cert.map(|c| c.serial) != Some(first.clone())
            }),
        );
        let rotated = report.iter().all(|r| r.1.stalled.is_none()) && rotated.await.is_ok();
        trigger.fire();
        (report, rotated)
    };
    let ((report, rotated), ()) = tokio::join!(outside, rotation.run(creds, shutdown));
    for (what, window, total, posts, loud) in &report {
        assert_eq!(
            window.stalled, None,
            "the rotation loop broke its heartbeat promise in the outage over its {what}"
        );
        let busiest = *window.per_minute.iter().max().unwrap_or(&0);
        assert!(busiest <= 10, "{what}: {busiest} CSR POSTs in one minute");
        assert!(*posts <= 420, "{what}: {posts} CSR POSTs in 2 h");
        assert!(*total <= 540, "{what}: {total} requests in 2 h");
        assert!(*loud <= 480, "{what}: {loud} warning/error lines in 2 h");
        // The 30 s retry cap, then the pause between passes: a tenth of the remaining
        // lifetime before expiry (1 min), the contract's back-off (1 min, doubling) after.
        assert!(
            window.longest_quiet <= 4 * MINUTE,
            "{what}: no CSR attempt for {:?}",
            window.longest_quiet
        );
    }
    assert!(rotated, "no rotation after the outage");
}
