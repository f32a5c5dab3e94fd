//! Shared harness for integration tests: a node directory, the real `bootlet` binary as a
//! child process with its log captured line by line, and waits on events with timeouts.
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod doctor;
pub mod kube;

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;
use testplane::{Event, TestPlane};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::broadcast;

/// Generous bound for anything a test waits for; a healthy run takes milliseconds.
pub const WAIT: Duration = Duration::from_secs(20);

/// A node's files in a temp dir: bootstrap kubeconfig in, cert dir and kubeconfig out.
pub struct NodeDir {
    pub tmp: TempDir,
    pub bootstrap: PathBuf,
    pub kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
}

impl NodeDir {
    pub fn new(bootstrap_kubeconfig: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let bootstrap = tmp.path().join("bootstrap-kubelet.conf");
        std::fs::write(&bootstrap, bootstrap_kubeconfig).unwrap();
        Self {
            kubeconfig: tmp.path().join("kubelet.conf"),
            cert_dir: tmp.path().join("pki"),
            bootstrap,
            tmp,
        }
    }

    pub fn current(&self) -> PathBuf {
        self.cert_dir.join("kubelet-client-current.pem")
    }

    /// The flags every test passes: this node's paths, a fixed node name, no metrics port.
    pub fn args(&self, node: &str) -> Vec<String> {
        vec![
            "run".into(),
            "--bootstrap-kubeconfig".into(),
            path(&self.bootstrap),
            "--kubeconfig".into(),
            path(&self.kubeconfig),
            "--cert-dir".into(),
            path(&self.cert_dir),
            "--node-name".into(),
            node.into(),
            "--metrics-bind-address".into(),
            "off".into(),
        ]
    }
}

pub fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The real binary under test, with stderr captured.
pub struct Agent {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    tx: broadcast::Sender<String>,
}

impl Agent {
    pub fn spawn(args: &[String]) -> Self {
        Self::spawn_env(args, &[])
    }

    pub fn spawn_env(args: &[String], env: &[(&str, &str)]) -> Self {
        Self::spawn_bin_env(Path::new(env!("CARGO_BIN_EXE_bootlet")), args, env)
    }

    /// [`Agent::spawn`] of another `bootlet` binary (e.g. the release build).
    pub fn spawn_bin(bin: &Path, args: &[String]) -> Self {
        Self::spawn_bin_env(bin, args, &[])
    }

    fn spawn_bin_env(bin: &Path, args: &[String], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .env_remove("WATCHDOG_USEC")
            .env("RUST_LOG", "bootlet=debug,info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn bootlet");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, _) = broadcast::channel(1024);
        let (store, sender) = (lines.clone(), tx.clone());
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if std::env::var_os("BOOTLET_TEST_ECHO").is_some() {
                    eprintln!("[bootlet] {line}");
                }
                let mut stored = store.lock().unwrap();
                stored.push(line.clone());
                let _ = sender.send(line);
            }
        });
        Self { child, lines, tx }
    }

    /// Every stderr line so far.
    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Wait until a stderr line contains `needle`; return that line.
    pub async fn wait_for_log(&self, needle: &str) -> String {
        self.wait_for_log_count(needle, 1).await
    }

    /// Wait until `n` stderr lines contain `needle`; return the `n`th.
    pub async fn wait_for_log_count(&self, needle: &str, n: usize) -> String {
        self.wait_for_log_within(needle, n, WAIT).await
    }

    /// `wait_for_log_count` bounded by `limit` instead of `WAIT`.
    pub async fn wait_for_log_within(&self, needle: &str, n: usize, limit: Duration) -> String {
        let found = tokio::time::timeout(limit, async {
            // The reader stores and broadcasts each line under this lock, so a line is
            // either already stored here or arrives on `rx`, never both.
            let (mut seen, mut rx) = {
                let lines = self.lines.lock().unwrap();
                let hits: Vec<&String> = lines.iter().filter(|l| l.contains(needle)).collect();
                if hits.len() >= n {
                    return hits[n - 1].clone();
                }
                (hits.len(), self.tx.subscribe())
            };
            loop {
                match rx.recv().await {
                    Ok(line) if line.contains(needle) => {
                        seen += 1;
                        if seen >= n {
                            return line;
                        }
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return String::new(),
                }
            }
        })
        .await;
        match found {
            Ok(line) if !line.is_empty() => line,
            _ => panic!(
                "no {n} log lines containing {needle:?} within {limit:?}; log:\n{}",
                self.log()
            ),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// SIGTERM and wait for the exit status (bounded).
    pub async fn terminate(mut self) -> (ExitStatus, String) {
        signal(self.pid(), "TERM");
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("bootlet exits after SIGTERM")
            .unwrap();
        // Let the reader drain the last lines.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let log = self.log();
        (status, log)
    }

    /// SIGKILL: a crash at an arbitrary point.
    pub async fn kill(mut self) -> String {
        self.child.kill().await.unwrap();
        self.log()
    }

    /// Wait for the process to exit on its own (bounded).
    pub async fn exit(mut self) -> (ExitStatus, String) {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("bootlet exits")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let log = self.log();
        (status, log)
    }
}

pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Wait for the first event matching `pick`, bounded by `WAIT`.
pub async fn wait_event<T>(
    events: &mut broadcast::Receiver<Event>,
    mut pick: impl FnMut(&Event) -> Option<T>,
) -> T {
    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(ev) => {
                    if let Some(v) = pick(&ev) {
                        return v;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event stream ended: {e}"),
            }
        }
    })
    .await
    .expect("timed out waiting for a testplane event")
}

/// Run a real command (kubectl, openssl) and return (success, stdout+stderr). `kubectl` is
/// the one built from the pinned Kubernetes release (`testplane::kube::build`).
pub async fn run(program: &str, args: &[&str]) -> (bool, String) {
    let program = match program {
        "kubectl" => testplane::kube::build::kubectl().expect("the Kubernetes components"),
        other => std::path::PathBuf::from(other),
    };
    let out = Command::new(&program)
        .args(args)
        .env("HOME", std::env::temp_dir())
        .output()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A test plane with an approver that answers at once and certificates of `ttl`.
pub async fn plane(ttl: Duration) -> TestPlane {
    TestPlane::builder()
        .cert_ttl(ttl)
        .start()
        .await
        .expect("start testplane")
}

/// A test plane with certificates of `ttl` and the given approver (`Manual`: CSRs wait for
/// `approve`/`deny`).
pub async fn plane_approving(ttl: Duration, approval: testplane::Approval) -> TestPlane {
    TestPlane::builder()
        .cert_ttl(ttl)
        .approval(approval)
        .start()
        .await
        .expect("start testplane")
}

/// Compare with `tests/snapshots/NAME`; `UPDATE_SNAPSHOTS=1` rewrites it.
pub fn snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        actual, expected,
        "{name} changed; rerun with UPDATE_SNAPSHOTS=1 if intended"
    );
}

/// The address the agent says its /metrics listener is bound to (port 0 in the tests).
pub async fn metrics_address(agent: &Agent) -> std::net::SocketAddr {
    let line = agent
        .wait_for_log("serving /metrics, /healthz and /readyz")
        .await;
    let at = line.find("address=").expect("address field") + "address=".len();
    line[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_matches('"')
        .parse()
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// One HTTP/1.1 request on loopback, `Connection: close`; (status, body), a chunked body
/// de-chunked. Status 0 when nothing listens or the answer has no HTTP head.
pub async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    http_within(addr, method, path, WAIT).await
}

/// [`http`], with the answer awaited for `limit` instead of `WAIT`.
pub async fn http_within(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    limit: Duration,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(limit, s.read_to_end(&mut raw))
        .await
        .expect("an answer in time")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        return (0, raw);
    };
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        code,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    )
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// A loopback listener (IPv6 if the host has it) whose accept queue is full and never
/// drained: the kernel drops further SYNs, so a connection to it neither succeeds nor
/// fails — a black-holed path. Keep the returned listener and socket alive.
pub async fn black_hole() -> (
    std::net::SocketAddr,
    tokio::net::TcpListener,
    tokio::net::TcpStream,
) {
    let v6 = tokio::net::TcpSocket::new_v6()
        .and_then(|s| s.bind("[::1]:0".parse().unwrap()).map(|()| s));
    let socket = v6.unwrap_or_else(|_| {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        s
    });
    // Backlog 0 still queues one connection: fill it.
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::net::TcpStream::connect(addr).await.unwrap();
    let probe = tokio::time::timeout(
        Duration::from_millis(300),
        tokio::net::TcpStream::connect(addr),
    )
    .await;
    assert!(probe.is_err(), "{addr} answers: no black hole on this host");
    (addr, listener, held)
}

/// Every request `node` made about its Lease (reads and writes), in order.
pub fn lease_requests(tp: &TestPlane, node: &str) -> Vec<testplane::RequestRecord> {
    let user = format!("system:node:{node}");
    tp.requests()
        .into_iter()
        .filter(|r| r.user == user && r.path.contains("/leases"))
        .collect()
}

/// Wait for `n` Lease writes by `node` that the testplane applied (create or update).
pub async fn lease_writes(events: &mut broadcast::Receiver<Event>, node: &str, n: usize) {
    for _ in 0..n {
        wait_event(events, |e| match e {
            Event::LeaseRenewed { name, .. } | Event::LeaseCreated { name, .. } if name == node => {
                Some(())
            }
            _ => None,
        })
        .await;
    }
}
