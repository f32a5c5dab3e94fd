//! `bootlet doctor` as a child process: the real binary with the node's flags, its JSON
//! report parsed, the exit code and the wall time kept (tests/local/doctor.rs on the testplane,
//! tests/kube/doctor.rs on the real cluster).

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::NodeDir;

/// What one doctor run printed and returned.
pub struct Run {
    pub code: Option<i32>,
    pub json: Value,
    pub took: Duration,
}

impl Run {
    /// The 11 statuses as one letter each (P W F S), in contract order.
    pub fn statuses(&self) -> String {
        self.checks()
            .iter()
            .map(|c| match c["status"].as_str().unwrap() {
                "pass" => 'P',
                "warn" => 'W',
                "fail" => 'F',
                "skip" => 'S',
                other => panic!("status {other}"),
            })
            .collect()
    }
    pub fn checks(&self) -> &Vec<Value> {
        self.json["checks"].as_array().unwrap()
    }
    pub fn check(&self, id: &str) -> &Value {
        self.checks().iter().find(|c| c["id"] == id).unwrap()
    }
    pub fn root(&self) -> Option<&str> {
        self.json["rootCause"].as_str()
    }
    /// `id`'s summary.
    pub fn summary(&self, id: &str) -> &str {
        self.check(id)["summary"].as_str().unwrap_or("")
    }
    /// `id`'s remediation, "" without one.
    pub fn fix(&self, id: &str) -> &str {
        self.check(id)["remediation"].as_str().unwrap_or("")
    }
}

/// `bootlet doctor ARGS --output OUTPUT`: (exit code, stdout, wall time).
pub async fn doctor(args: &[String], output: &str) -> (Option<i32>, String, Duration) {
    let started = tokio::time::Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_bootlet"))
        .arg("doctor")
        .args(args)
        .args(["--output", output])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let took = started.elapsed();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        took,
    )
}

/// `bootlet doctor ARGS --output json`, parsed.
pub async fn doctor_json(args: &[String]) -> Run {
    let (code, out, took) = doctor(args, "json").await;
    let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    Run { code, json, took }
}

/// The CA's kubeadm pin, computed by openssl (an independent peer).
pub fn openssl_pin(ca_pem: &str) -> String {
    let script = "openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex";
    let mut child = std::process::Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ca_pem.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", text.trim().rsplit(' ').next().unwrap())
}

/// `bootlet doctor --output json` with the node's flags (as for `run`) and `extra`; the
/// contract's 10 s bound holds on the real cluster too.
pub async fn doctor_node(dir: &NodeDir, node: &str, extra: &[&str]) -> Run {
    let mut args = dir.args(node)[1..].to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let run = doctor_json(&args).await;
    assert!(
        run.took < Duration::from_secs(10),
        "doctor took {:?}",
        run.took
    );
    run
}

/// doctor named `root` as the root cause (statuses in contract order as P W F S), its
/// summary holds every one of `summary`, its remediation holds `fix`; exit 1.
pub fn assert_root(run: &Run, statuses: &str, root: &str, summary: &[&str], fix: &str) {
    let ctx = format!("{:#}", run.json);
    assert_eq!(run.statuses(), statuses, "{ctx}");
    assert_eq!(run.root(), Some(root), "{ctx}");
    assert_eq!(run.code, Some(1), "{ctx}");
    assert_eq!(run.json["ok"], false, "{ctx}");
    for needle in summary {
        assert!(
            run.summary(root).contains(needle),
            "{root}'s summary lacks {needle:?}: {ctx}"
        );
    }
    assert!(
        run.fix(root).contains(fix),
        "{root}'s remediation lacks {fix:?}: {ctx}"
    );
}

/// Nothing failed: exit 0, rootCause null, the statuses as given.
pub fn assert_passes(run: &Run, statuses: &str) {
    let ctx = format!("{:#}", run.json);
    assert_eq!(run.root(), None, "{ctx}");
    assert_eq!(run.code, Some(0), "{ctx}");
    assert_eq!(run.json["ok"], true, "{ctx}");
    assert_eq!(run.statuses(), statuses, "{ctx}");
}
