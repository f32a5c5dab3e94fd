//! A real Prometheus (Debian's `prometheus`) scraping the real bootlet at 1 s against the
//! testplane, with the shipped rules loaded (bootlet's and the kubernetes-mixin's kubelet
//! certificate alerts): the TTL series is there and falls, Lease renewals count up, and
//! when the testplane stops signing rotations bootlet's alerts fire. The rules' minutes are
//! read as seconds (`for: 10m` → `for: 10s`, `[75m]` → `[75s]`), the one change made to
//! them, so the alerts fire within the test's seconds instead of an operator's minutes.

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::{Agent, NodeDir};
use testplane::{Signer, TestPlane};
use tokio::process::{Child, Command};

const NODE: &str = "n-prom";
/// Long enough for Prometheus to start and for the alerts' rescaled `for:` to elapse.
const ALERT_WAIT: Duration = Duration::from_secs(90);

async fn get(addr: SocketAddr, path_and_query: &str) -> (u16, String) {
    support::http(addr, "GET", path_and_query).await
}

/// The shipped rules with minutes read as seconds.
fn rescaled(rules: &Path) -> String {
    let text = std::fs::read_to_string(rules).unwrap();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    // `<digits>m` where the next character ends the duration (not `ms`, not a word).
    while let Some(i) = rest.find('m') {
        let (before, after) = rest.split_at(i);
        let digits = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let next = after[1..].chars().next();
        let ends = matches!(next, None | Some(']' | '\n' | ' ' | ')' | '"'));
        let starts = before[..before.len() - digits]
            .chars()
            .next_back()
            .is_some_and(|c| matches!(c, '[' | ' ' | ':'));
        out.push_str(before);
        out.push(if digits > 0 && ends && starts {
            's'
        } else {
            'm'
        });
        rest = &after[1..];
    }
    out.push_str(rest);
    out
}

struct Prometheus {
    _dir: tempfile::TempDir,
    child: Child,
    addr: SocketAddr,
}

impl Prometheus {
    /// Starts `prometheus` scraping `target` every second, with both rule files rescaled.
    async fn start(target: SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prometheus");
        let mut files = Vec::new();
        for name in ["bootlet.rules.yaml", "kubernetes-mixin-kubelet.rules.yaml"] {
            let path: PathBuf = dir.path().join(name);
            std::fs::write(&path, rescaled(&rules.join(name))).unwrap();
            files.push(format!("  - {}", path.display()));
        }
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n{}\nscrape_configs:\n  - job_name: bootlet\n    static_configs:\n      - targets: ['{target}']\n        labels:\n          node: {NODE}\n",
            files.join("\n")
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let (ok, out) = support::run(
            "promtool",
            &[
                "check",
                "config",
                dir.path().join("prometheus.yml").to_str().unwrap(),
            ],
        )
        .await;
        assert!(
            ok,
            "promtool check config (install Debian's `prometheus` package; .ci/run does):\n{out}"
        );
        let addr: SocketAddr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus (Debian's `prometheus` package; .ci/run installs it)");
        let p = Self {
            _dir: dir,
            child,
            addr,
        };
        p.until("Prometheus ready", |p| async move {
            (get(p.addr, "/-/ready").await.0 == 200).then_some(())
        })
        .await;
        p
    }

    /// The value of an instant query that returns one series, if it does yet.
    async fn value(&self, query: &str) -> Option<f64> {
        let url =
            reqwest::Url::parse_with_params("http://x/api/v1/query", [("query", query)]).unwrap();
        let (code, body) = get(
            self.addr,
            &format!("{}?{}", url.path(), url.query().unwrap()),
        )
        .await;
        if code != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        let [one] = result.as_slice() else {
            return None;
        };
        let s = one["value"][1].as_str()?;
        s.parse().ok().or(match s {
            "+Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            _ => None,
        })
    }

    /// Alerts now: (name, state, labels).
    async fn alerts(&self) -> Vec<(String, String, Value)> {
        let (_, body) = get(self.addr, "/api/v1/alerts").await;
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                    a["state"].as_str().unwrap_or("").to_string(),
                    a["labels"].clone(),
                )
            })
            .collect()
    }

    /// Poll (twice per scrape interval) until `f` answers, bounded by [`ALERT_WAIT`].
    async fn until<'a, T, F, Fut>(&'a self, what: &str, f: F) -> T
    where
        F: Fn(&'a Self) -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        tokio::time::timeout(ALERT_WAIT, async {
            loop {
                if let Some(t) = f(self).await {
                    return t;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what} within {ALERT_WAIT:?}"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

#[test]
fn minutes_become_seconds_and_nothing_else_changes() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.yaml");
    std::fs::write(
        &f,
        "expr: increase(x[5m]) > 0 and y{a=\"m\"}[75m]\nfor: 15m\nsummary: 10 minutes, 5ms\n",
    )
    .unwrap();
    assert_eq!(
        rescaled(&f),
        "expr: increase(x[5s]) > 0 and y{a=\"m\"}[75s]\nfor: 15s\nsummary: 10 minutes, 5ms\n"
    );
}

#[tokio::test]
async fn a_real_prometheus_sees_the_ttl_fall_the_lease_renew_and_alerts_fire_when_signing_stops() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(60))
        .allow_short_expiration(true)
        .backdate(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut args = node.args(NODE);
    let at = args
        .iter()
        .position(|s| s == "--metrics-bind-address")
        .unwrap();
    args[at + 1] = "127.0.0.1:0".into();
    // Rotation at 20 % of the 60 s certificate (12 s in); an unsigned CSR times out in 3 s.
    args.extend(
        [
            "--lease-renew-interval",
            "1s",
            "--lease-duration",
            "5s",
            "--rotation-fraction",
            "0.2",
            "--rotation-jitter",
            "0",
            "--csr-timeout",
            "3s",
        ]
        .map(String::from),
    );
    let agent = Agent::spawn(&args);
    let target = support::metrics_address(&agent).await;
    agent
        .wait_for_log("ready: client certificate and kubeconfig in place")
        .await;
    let prom = Prometheus::start(target).await;

    // The TTL series is there, finite, and falls from one scrape to a later one.
    let ttl = r#"kubelet_certificate_manager_client_ttl_seconds{job="bootlet",node="n-prom"}"#;
    let first = prom
        .until("the TTL series", |p| async move {
            p.value(ttl).await.filter(|v| v.is_finite())
        })
        .await;
    assert!(first > 0.0 && first <= 60.0, "ttl {first}");
    let later = prom
        .until("a lower TTL", |p| async move {
            p.value(ttl).await.filter(|v| *v < first)
        })
        .await;
    assert!(later > 0.0, "{later}");
    // Lease renewals count up.
    let renewals = r#"bootlet_lease_renewals_total{job="bootlet",result="success"}"#;
    let r1 = prom
        .until("renewals", |p| async move { p.value(renewals).await })
        .await;
    prom.until("more renewals", |p| async move {
        p.value(renewals).await.filter(|v| *v > r1)
    })
    .await;
    // The mixin's client expiry alert evaluates on bootlet's series in a real Prometheus:
    // a 60 s certificate is well under its 1-day critical threshold.
    prom.until(
        "KubeletClientCertificateExpiration firing",
        |p| async move {
            p.alerts().await.into_iter().find(|(name, state, labels)| {
                name == "KubeletClientCertificateExpiration"
                    && state == "firing"
                    && labels["severity"] == "critical"
            })
        },
    )
    .await;

    // Nothing of bootlet's own fires while rotations are signed...
    let ours = ["BootletCSRPending", "BootletCertificateRotationFailing"];
    let before = prom.alerts().await;
    assert!(
        !before.iter().any(|(n, _, _)| ours.contains(&n.as_str())),
        "{before:?}"
    );
    // ...then the testplane stops signing: the rotation's CSR is approved and never issued.
    tp.set_signer(Signer::None);
    for alert in ours {
        let labels = prom
            .until(&format!("{alert} firing"), |p| async move {
                p.alerts()
                    .await
                    .into_iter()
                    .find(|(n, state, _)| n == alert && state == "firing")
                    .map(|(_, _, labels)| labels)
            })
            .await;
        assert_eq!(labels["node"], NODE, "{labels}");
        assert_eq!(labels["profile"], "client", "{labels}");
    }
    let _ = agent.terminate().await;
}
