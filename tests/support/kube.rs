//! The real control plane in integration tests: one `testplane::kube::Cluster` per test
//! module, at most two at a time, on one runtime that lives as long as the binary (the component
//! processes belong to it), so `#[test]` functions run their bodies with `block_on` and
//! share their module's cluster.
//! Tests isolate themselves by node name and by a bootstrap token of their own.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use testplane::kube::{procs::Proc, Cluster, Options};
use tokio::sync::{Mutex, Notify};

use super::{Agent, NodeDir};

/// Bound on what the real components take for things that are immediate on the testplane
/// (a CSR approved, a Lease written, a Node registered).
pub const REAL_WAIT: Duration = Duration::from_secs(60);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// Run a test body on the binary's runtime. The body holds the cluster it asks for
/// (`cluster`) until it returns or panics.
pub fn block_on<F: Future>(f: F) -> F::Output {
    IN_TEST.with(|t| t.set(true));
    let _release = Release;
    runtime().block_on(f)
}

/// A cluster running in this process: its module's name, and how many running tests hold
/// it.
struct Running {
    name: String,
    cluster: &'static Cluster,
    holders: usize,
}

/// The real-cluster modules share one test binary, and libtest runs their tests in name
/// order, two at a time: at most two clusters run at once, so at a module's end the test
/// of the next one starts its cluster beside the last tests of the previous one, never a
/// third control plane on a small machine.
const MAX_RUNNING: usize = 2;

static RUNNING: Mutex<Vec<Running>> = Mutex::const_new(Vec::new());
/// Woken whenever a test lets go of a running cluster.
static RELEASED: Notify = Notify::const_new();

thread_local! {
    /// A test body runs on this thread (`block_on` runs it on the test's own thread).
    static IN_TEST: Cell<bool> = const { Cell::new(false) };
    /// The module whose cluster the test on this thread holds.
    static HELD: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Lets go of the cluster this thread's test held, when its `block_on` ends (or unwinds).
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        IN_TEST.with(|t| t.set(false));
        let Some(held) = HELD.with(|h| h.borrow_mut().take()) else {
            return;
        };
        runtime().block_on(async {
            if let Some(r) = RUNNING.lock().await.iter_mut().find(|r| r.name == held) {
                r.holders -= 1;
            }
        });
        RELEASED.notify_waiters();
    }
}

/// The cluster of the test module `name`, started on first use with the options
/// `configure` makes from the default ones (state under cargo's per-binary temp dir,
/// `name`). With [`MAX_RUNNING`] clusters of other modules running, this waits until one
/// of them is held by no test, shuts it down and starts this one. The cluster lives as
/// long as the process (leaked on purpose: tests keep `&'static` references), its
/// processes until it is shut down so, or shortly after the binary exits. Asked for
/// outside `block_on` (a task the test spawned, a `#[tokio::test]`), it holds nothing: it
/// returns the running cluster of `name`, or starts it.
pub async fn cluster(name: &str, configure: impl FnOnce(&mut Options)) -> &'static Cluster {
    if let Some(held) = HELD.with(|h| h.borrow().clone()) {
        assert_eq!(held, name, "a test asks for two modules' clusters");
    }
    // Whether this call can hold the cluster for the test on this thread.
    let holds = IN_TEST.with(|t| t.get()) && HELD.with(|h| h.borrow().is_none());
    let hold = |r: &mut Running| {
        if holds {
            r.holders += 1;
            HELD.with(|h| *h.borrow_mut() = Some(r.name.clone()));
        }
    };
    let mut configure = Some(configure);
    loop {
        let released = RELEASED.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let mut running = RUNNING.lock().await;
        if let Some(r) = running.iter_mut().find(|r| r.name == name) {
            hold(r);
            return r.cluster;
        }
        if running.len() >= MAX_RUNNING {
            let Some(idle) = running.iter().position(|r| r.holders == 0) else {
                drop(running);
                released.await;
                continue;
            };
            running.remove(idle).cluster.shutdown().await;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kube-{name}"));
        let mut opts = Options::new(dir);
        (configure.take().expect("configured once"))(&mut opts);
        let started = Cluster::start(opts)
            .await
            .unwrap_or_else(|e| panic!("start the real control plane: {e}"));
        running.push(Running {
            name: name.to_string(),
            cluster: Box::leak(Box::new(started)),
            holders: 0,
        });
        let r = running.last_mut().expect("just pushed");
        hold(r);
        return r.cluster;
    }
}

/// A node directory with a bootstrap token of its own.
pub async fn node_dir(c: &Cluster) -> (NodeDir, String) {
    let token = c
        .create_token(testplane::kube::TOKEN_TTL)
        .await
        .expect("a bootstrap token");
    (NodeDir::new(&c.kubeconfig_for_token(&token)), token)
}

/// kubectl as the admin; panics unless it succeeds; returns stdout.
pub async fn kubectl(c: &Cluster, args: &[&str]) -> String {
    let out = c.kubectl(args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// kubectl with another kubeconfig: (success, stdout + stderr).
pub async fn kubectl_as(c: &Cluster, conf: &Path, args: &[&str]) -> (bool, String) {
    let out = c.kubectl_with(conf, args).await;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `kubectl get ARGS -o json`, parsed.
pub async fn get_json(c: &Cluster, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl(c, &a).await).expect("kubectl prints JSON")
}

/// The CSRs whose requester is one of `users`, oldest first.
pub async fn csrs_of(c: &Cluster, users: &[&str]) -> Vec<Value> {
    csrs_where(c, |csr| {
        csr["spec"]["username"]
            .as_str()
            .is_some_and(|u| users.contains(&u))
    })
    .await
}

/// The CSRs `keep` accepts, oldest first.
pub async fn csrs_where(c: &Cluster, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
    let list = get_json(c, &["csr", "--sort-by=.metadata.creationTimestamp"]).await;
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|csr| keep(csr))
        .collect()
}

/// The requester a bootstrap token authenticates as.
pub fn bootstrap_user(token: &str) -> String {
    format!(
        "system:bootstrap:{}",
        token.split('.').next().unwrap_or(token)
    )
}

/// Poll `check` every 500 ms until it returns Some, bounded by `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// bootlet against the real cluster, for `node`, with extra flags.
pub fn bootlet(dir: &NodeDir, node: &str, extra: &[&str]) -> Agent {
    let mut args = dir.args(node);
    args.extend(extra.iter().map(|s| s.to_string()));
    Agent::spawn(&args)
}

/// A hollow kubelet (kubemark: the real kubelet main loop, a fake runtime) for `node`.
pub struct Hollow {
    proc: Option<Proc>,
    pub log: PathBuf,
}

/// Start a hollow kubelet with `kubeconfig`, and `extra` flags (e.g. a bootstrap
/// kubeconfig and cert dir for its own TLS bootstrap). Its log goes to `logdir`.
/// client-go re-reads the client certificate files of open connections every 10 s here
/// instead of every 5 minutes (the test certificates live minutes, not months).
pub fn hollow(c: &Cluster, logdir: &Path, node: &str, kubeconfig: &Path, extra: &[&str]) -> Hollow {
    let port = testplane::kube::procs::free_port().expect("a free port");
    let mut args = vec![
        "--morph=kubelet".to_string(),
        format!("--name={node}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--kubelet-port={port}"),
        "--kubelet-read-only-port=0".into(),
        "--use-host-image-service=false".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let proc = Proc::spawn_env(
        c.bin(),
        logdir,
        "hollow-node",
        args,
        &[("BOOTLET_CERT_RELOAD", "10s")],
    )
    .expect("start hollow-node");
    Hollow {
        log: proc.log.clone(),
        proc: Some(proc),
    }
}

impl Hollow {
    /// SIGTERM (bounded) and reap.
    pub async fn stop(mut self) {
        if let Some(p) = self.proc.take() {
            p.stop().await;
        }
    }

    /// SIGKILL: a kubelet that dies.
    pub async fn kill(mut self) {
        if let Some(p) = self.proc.take() {
            p.kill().await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The Node's Ready condition status ("True", "False", "Unknown"), None without a Node.
pub async fn node_ready(c: &Cluster, node: &str) -> Option<String> {
    let out = c
        .kubectl(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .await;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

/// The node's Lease, None while it does not exist.
pub async fn lease(c: &Cluster, node: &str) -> Option<Value> {
    let out = c
        .kubectl(&["get", "lease", "-n", "kube-node-lease", node, "-o", "json"])
        .await;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("kubectl prints JSON"))
}

/// Every renewTime the Lease of `node` takes, in order, from a watch (`kubectl get -w`):
/// no write is missed however loaded the machine is, as a poll could miss one.
pub struct LeaseWatch {
    child: std::process::Child,
    times: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl LeaseWatch {
    pub fn start(c: &Cluster, node: &str) -> LeaseWatch {
        let mut child = std::process::Command::new(c.bin())
            .arg("kubectl")
            .arg("--kubeconfig")
            .arg(c.admin_kubeconfig())
            .args([
                "get",
                "lease",
                "-n",
                "kube-node-lease",
                node,
                "-w",
                "-o",
                "json",
            ])
            .env("HOME", c.state_dir())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl get -w");
        let out = child.stdout.take().unwrap();
        let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = times.clone();
        std::thread::spawn(move || {
            for lease in serde_json::Deserializer::from_reader(out).into_iter::<Value>() {
                let Ok(lease) = lease else { return };
                let t = lease["spec"]["renewTime"].as_str().unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                if !t.is_empty() && seen.last().map(String::as_str) != Some(t) {
                    seen.push(t.to_string());
                }
            }
        });
        LeaseWatch { child, times }
    }

    /// The renewTimes seen so far, oldest first.
    pub fn renew_times(&self) -> Vec<String> {
        self.times.lock().unwrap().clone()
    }
}

impl Drop for LeaseWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `openssl ARGS`: (success, stdout + stderr).
pub async fn openssl(args: &[&str]) -> (bool, String) {
    super::run("openssl", args).await
}

/// A CSR's condition of type `kind` (Approved, Denied, Failed), if it has one.
pub fn condition<'a>(csr: &'a Value, kind: &str) -> Option<&'a Value> {
    csr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// `kubectl auth whoami` with `conf`: the user it authenticates as.
pub async fn whoami(c: &Cluster, conf: &std::path::Path) -> String {
    let (ok, out) = kubectl_as(
        c,
        conf,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    )
    .await;
    assert!(ok, "kubectl auth whoami: {out}");
    out.trim().to_string()
}

/// `name`'s value in a Prometheus text exposition (the first series that starts so).
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
