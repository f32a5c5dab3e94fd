//! The CPU floor under bootlet's per-renewal cost on this machine, measured without the
//! agent: (1) one timer wake-up on a current-thread tokio runtime, with tokio's own sleep
//! and with bootlet's timerfd `Ticker`; (2) a bare reqwest PUT of a Lease every interval
//! over one keep-alive mTLS connection, HTTP/2 and HTTP/1.1 — the stack bootlet is built on
//! (reqwest + rustls/ring + hyper/h2 + tokio) with none of bootlet's code around it — and
//! the HTTP/2 one again in a child process (as bench/agent.sh runs bootlet); (3) bootlet's
//! own Lease loop in this process. Each runs on its own thread and reads only that thread's
//! CPU time and wake-up count (/proc/thread-self/schedstat), so the in-process testplane
//! is not counted.
//! Run it with `bench/floor.sh`.

use std::time::Duration;

use bootlet::runtime::ticker::Ticker;
use bootlet_bench::knobs;
use serde_json::Value;
use testplane::client::{lease_json, resource_version};
use testplane::TestPlane;
use tokio::time::Instant;

/// `FLOOR_INTERVAL_MS` (default 100) and `FLOOR_ROUNDS` (default 200).
#[derive(Clone, Copy)]
struct Pace {
    interval: Duration,
    rounds: u32,
}

fn pace() -> Pace {
    Pace {
        interval: Duration::from_millis(knobs::num("FLOOR_INTERVAL_MS", 100)),
        rounds: u32::try_from(knobs::num("FLOOR_ROUNDS", 200)).unwrap_or(200),
    }
}

/// This thread's (CPU nanoseconds, times scheduled in).
fn thread_sched() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    testplane::sched::schedstat(&s)
}

/// CPU ms and wake-ups per round since `from`.
struct PerRound {
    cpu_ms: f64,
    wakeups: f64,
}

fn per_round(from: (u64, u64), p: Pace) -> PerRound {
    let to = thread_sched();
    PerRound {
        cpu_ms: (to.0 - from.0) as f64 / f64::from(p.rounds) / 1e6,
        wakeups: (to.1 - from.1) as f64 / f64::from(p.rounds),
    }
}

/// Runs `f` on a fresh thread with a current-thread runtime (as bootlet does). The four
/// measurements run side by side: each sleeps almost all the time, and each counts only
/// its own thread.
fn on_own_thread<F, Fut>(f: F) -> std::thread::JoinHandle<PerRound>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = PerRound>,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f())
    })
}

async fn tokio_timer(p: Pace) -> PerRound {
    let mut at = Instant::now() + p.interval;
    tokio::time::sleep_until(at).await;
    let from = thread_sched();
    for _ in 0..p.rounds {
        at += p.interval;
        tokio::time::sleep_until(at).await;
    }
    per_round(from, p)
}

async fn ticker(p: Pace) -> PerRound {
    let mut ticker = Ticker::new();
    assert!(ticker.is_exact(), "no timerfd here");
    let mut at = Instant::now() + p.interval;
    ticker.sleep_until(at).await;
    let from = thread_sched();
    for _ in 0..p.rounds {
        at += p.interval;
        ticker.sleep_until(at).await;
    }
    per_round(from, p)
}

async fn put_loop(
    url: String,
    cfg: rustls::ClientConfig,
    h2: bool,
    name: String,
    p: Pace,
) -> PerRound {
    let mut builder = reqwest::Client::builder().use_preconfigured_tls(cfg);
    if h2 {
        builder = builder.http2_prior_knowledge();
    } else {
        builder = builder.http1_only();
    }
    let client = builder.build().expect("client");
    let path =
        format!("{url}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}");
    let list = format!("{url}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases");
    let created = answer(client.post(&list).json(&lease_json(&name, None)), "create").await;
    let mut rv = resource_version(&created);
    let mut ticker = Ticker::new();
    let mut at = Instant::now() + p.interval;
    ticker.sleep_until(at).await;
    let from = thread_sched();
    for _ in 0..p.rounds {
        at += p.interval;
        ticker.sleep_until(at).await;
        let resp = answer(client.put(&path).json(&lease_json(&name, Some(&rv))), "put").await;
        rv = resource_version(&resp);
    }
    per_round(from, p)
}

/// The JSON body of a 2xx answer to `req`; anything else ends the measurement with the
/// status and body (a real kube-apiserver says why in a Status object).
async fn answer(req: reqwest::RequestBuilder, what: &str) -> Value {
    let resp = req.send().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = resp.status();
    let body = resp.bytes().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = || {
        String::from_utf8_lossy(&body)
            .chars()
            .take(300)
            .collect::<String>()
    };
    if !status.is_success() {
        panic!("{what}: HTTP {status}: {}", text());
    }
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{what}: {e}: {}", text()))
}

/// bootlet's own Lease loop (`LeaseLoop::run`, the agent's code path and client) on this
/// thread, against the same in-process server: what the agent costs without a second
/// process to switch to.
async fn lease_loop(url: String, ca: Vec<u8>, cert: String, key: String, p: Pace) -> PerRound {
    use bootlet::api::kubeconfig::Credential;
    use bootlet::api::{ApiClient, ClientOptions};
    use bootlet::pki::PrivateKeyPem;
    let credential = Credential::ClientCert {
        chain_pem: cert,
        key: PrivateKeyPem::new(key),
    };
    let client = ApiClient::new(&url, &ca, &credential, ClientOptions::default()).expect("client");
    let (_clients_tx, clients) = tokio::sync::watch::channel(client);
    let health = bootlet::runtime::health::Health::new(true);
    let (stop, shutdown) = bootlet::runtime::shutdown::channel();
    // As shipped: protobuf (the bare PUTs above are JSON), HTTP/2, no test switch.
    let mut cfg = bootlet::lease::LeaseLoop::new("floor-loop", p.interval, Duration::from_secs(40));
    cfg.owner_lookup = Duration::from_secs(3600);
    let mut renewals = health.subscribe();
    let run = tokio::spawn(cfg.run(clients, health.clone(), shutdown));
    // Measure from the first renewal (the connection and the Lease exist) for p.rounds more.
    let mut from = None;
    let mut seen = 0;
    while seen < p.rounds {
        renewals.changed().await.expect("lease loop alive");
        let renewed = renewals.borrow_and_update().lease.last_renewed;
        if renewed.is_none() {
            continue;
        }
        match from {
            None => from = Some((thread_sched(), renewed)),
            Some((_, last)) if renewed != last => {
                seen += 1;
                from = from.map(|(f, _)| (f, renewed));
            }
            Some(_) => {}
        }
    }
    let r = per_round(from.expect("renewed").0, p);
    stop.fire();
    run.await.expect("lease loop");
    r
}

/// The bare HTTP/2 PUT loop again, in a child process of its own: bench/agent.sh measures
/// bootlet as a separate process, and switching between two processes costs more than
/// between two threads of one (on this VM, markedly).
async fn put_loop_in_child(
    url: String,
    ca: String,
    cert: String,
    key: String,
    p: Pace,
) -> PerRound {
    let dir = tempfile::tempdir().expect("temp dir");
    for (file, text) in [
        ("url", &url),
        ("ca.pem", &ca),
        ("cert.pem", &cert),
        ("key.pem", &key),
    ] {
        std::fs::write(dir.path().join(file), text).expect("write");
    }
    let out = tokio::process::Command::new(std::env::current_exe().expect("own path"))
        .env(CHILD, dir.path())
        .env("FLOOR_INTERVAL_MS", p.interval.as_millis().to_string())
        .env("FLOOR_ROUNDS", p.rounds.to_string())
        .output()
        .await
        .expect("run the child");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut f = text
        .split_whitespace()
        .filter_map(|v| v.parse::<f64>().ok());
    match (f.next(), f.next()) {
        (Some(cpu_ms), Some(wakeups)) => PerRound { cpu_ms, wakeups },
        _ => panic!(
            "child said {text:?}, {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Names the directory a child reads its server, CA and identity from (and, optionally, the
/// Lease name from a file `name`; default `floor-child`).
const CHILD: &str = "FLOOR_CHILD";
/// `1.1` makes the child speak HTTP/1.1 (bench/run.sh's in-process floor uses it); anything
/// else, HTTP/2 (`run.sh --real`'s floor: bootlet's Lease connection speaks HTTP/2 to
/// kube-apiserver, chosen by ALPN).
const CHILD_HTTP: &str = "FLOOR_CHILD_HTTP";

/// The child's side of [`put_loop_in_child`] (and bench/run.sh's floor, and one node of
/// `run.sh --real`'s, which reaches a real kube-apiserver through the bench's relay and is
/// stopped before it prints): one measurement, printed as two numbers.
fn child(dir: &std::path::Path) {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("read");
    let h2 = std::env::var(CHILD_HTTP).map_or(true, |v| v != "1.1");
    let cfg = testplane::client::client_tls(
        &read("ca.pem"),
        Some((&read("cert.pem"), &read("key.pem"))),
        &[if h2 { "h2" } else { "http/1.1" }],
    );
    let name = std::fs::read_to_string(dir.join("name")).unwrap_or_else(|_| "floor-child".into());
    let (url, p) = (read("url"), pace());
    let r = on_own_thread(move || put_loop(url, cfg, h2, name, p))
        .join()
        .expect("measurement thread");
    println!("{} {}", r.cpu_ms, r.wakeups);
}

fn main() {
    match std::env::var_os(CHILD) {
        Some(dir) => child(std::path::Path::new(&dir)),
        None => parent(),
    }
}

#[tokio::main]
async fn parent() {
    let tp = TestPlane::builder().start().await.expect("testplane");
    let p = pace();
    let mut runs = vec![
        (
            "tokio sleep_until, nothing else".to_string(),
            on_own_thread(move || tokio_timer(p)),
        ),
        (
            "timerfd Ticker, nothing else".to_string(),
            on_own_thread(move || ticker(p)),
        ),
    ];
    for (h2, label) in [(true, "HTTP/2"), (false, "HTTP/1.1")] {
        let name = format!("floor-{}", if h2 { "h2" } else { "h1" });
        let (cert, key) = tp
            .client_cert(&format!("system:node:{name}"), &["system:nodes"])
            .expect("client cert");
        let alpn = if h2 { "h2" } else { "http/1.1" };
        let cfg = testplane::client::client_tls(&tp.ca_pem(), Some((&cert, &key)), &[alpn]);
        let url = tp.url();
        runs.push((
            format!("bare reqwest PUT of a Lease over {label} + mTLS, Ticker wake-up"),
            on_own_thread(move || put_loop(url, cfg, h2, name, p)),
        ));
    }
    let (cert, key) = tp
        .client_cert("system:node:floor-child", &["system:nodes"])
        .expect("client cert");
    let (url, ca) = (tp.url(), tp.ca_pem());
    runs.push((
        "bare reqwest PUT of a Lease over HTTP/2 + mTLS, Ticker wake-up, in a child process"
            .to_string(),
        on_own_thread(move || put_loop_in_child(url, ca, cert, key, p)),
    ));
    let (cert, key) = tp
        .client_cert("system:node:floor-loop", &["system:nodes"])
        .expect("client cert");
    let (url, ca) = (tp.url(), tp.ca_pem().into_bytes());
    runs.push((
        "bootlet's Lease loop (LeaseLoop::run) in this process".to_string(),
        on_own_thread(move || lease_loop(url, ca, cert, key, p)),
    ));
    for (what, run) in runs {
        let r = run.join().expect("measurement thread");
        println!(
            "floor: {what}: {:.3} ms CPU, {:.1} wake-ups per round ({} rounds, every {} ms)",
            r.cpu_ms,
            r.wakeups,
            p.rounds,
            p.interval.as_millis()
        );
    }
}
