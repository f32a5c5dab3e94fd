//! SIGKILL through bootstrap and rotation (#14): the real binary is killed right before
//! each of its file operations (the hidden `--test-crash-at N`), its restart killed again
//! at a random operation, and more runs killed at random moments while CSRs wait for a
//! randomly delayed approval (network steps included). Each kill is followed by a restart
//! at once, and after every kill the node's files are checked: `kubelet-client-current.pem`
//! resolves to a complete certificate + key that match, the kubeconfig parses and names it,
//! temp files do not pile up, the server holds at most one CSR per key; at the end the node
//! has a valid certificate. `CRASH_KILLS=2000` runs more timed kills (bench/crash.sh).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bootlet::pki::{self, CertProfile, NodeKey, PrivateKeyPem};
use rand::Rng as _;
use support::{NodeDir, WAIT};
use testplane::{Approval, Event, TestPlane};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use x509_parser::prelude::FromDer as _;

/// Timed kills in `cargo test`; `CRASH_KILLS` raises the whole count.
const TIMED_KILLS: usize = 120;
const CRASH_PREFIX: &str = "bootlet-test-crash:";
/// Logged once the identity is in place (bootstrap, or a valid certificate reused).
const IDENTITY: &str = "node identity in place";
/// Logged once a rotation installed its certificate.
const ROTATED: &str = "client certificate rotated";

/// Certificates valid for 10 min, backdated to the test plane's start (its CA's notBefore):
/// rotating at 0.2 % ± 0.1 % of that lifetime, a restarted agent finds its certificate due
/// and rotates at once (a certificate it has just been issued itself is due in ~1 s).
async fn plane(approval: Approval) -> TestPlane {
    support::plane_approving(Duration::from_secs(600), approval).await
}

/// Where the hook kills a run: right before an operation by its label (`LABEL#N`, the Nth
/// with that label), or by its number; or nowhere, tracing every operation.
#[derive(Clone, Debug)]
enum At {
    Trace,
    Step(String),
    Op(u64),
}

fn args(node: &NodeDir, name: &str, at: &At, extra: &[&str]) -> Vec<String> {
    let crash = match at {
        At::Trace => "trace".to_string(),
        At::Step(step) => step.clone(),
        At::Op(n) => n.to_string(),
    };
    let mut a = node.args(name);
    for s in [
        "--rotation-fraction",
        "0.002",
        "--rotation-jitter",
        "0.001",
        "--renew-lease=false",
        "--keep-certificates",
        "2",
    ] {
        a.push(s.into());
    }
    // Without a crash point, every operation is still traced: a timed kill then knows
    // the last one that started.
    a.push("--test-crash-at".into());
    a.push(crash);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// How one run of the binary ended.
#[derive(Debug)]
enum End {
    /// The hook killed it before an operation (the label is returned beside).
    Hooked,
    /// The test killed it after this long.
    Timed,
    /// It logged `done` and was then killed.
    Done,
}

/// One run: how it ended, the file operations it started (`op N LABEL`, the last one the
/// one it was killed before, for `End::Hooked`), and its log.
struct Run {
    end: End,
    ops: Vec<String>,
    /// The last step it started: a file operation, or a CSR milestone from its log.
    last: Option<String>,
    log: String,
}

/// Log lines that mark a step of the pipeline between file operations.
const MILESTONES: [(&str, &str); 4] = [
    ("filed CSR", "CSR filed"),
    ("adopted the CSR", "CSR adopted"),
    ("waiting for approval", "waiting for approval"),
    ("CSR approved", "CSR approved"),
];

/// Runs bootlet until it logs `done` (then SIGKILLs it), dies by its own crash hook, or
/// `kill_after` passes (then SIGKILLs it).
async fn run(node: &NodeDir, name: &str, at: &At, kill_after: Option<Duration>, done: &str) -> Run {
    run_with(node, name, at, kill_after, done, &[]).await
}

/// [`run`] with `extra` flags.
async fn run_with(
    node: &NodeDir,
    name: &str,
    at: &At,
    kill_after: Option<Duration>,
    done: &str,
    extra: &[&str],
) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootlet"))
        .args(args(node, name, at, extra))
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .env("RUST_LOG", "bootlet=info,warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bootlet");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    let mut ops = Vec::new();
    let mut last = None;
    let timer = tokio::time::sleep(kill_after.unwrap_or(WAIT));
    tokio::pin!(timer);
    let end = tokio::time::timeout(WAIT, async {
        loop {
            tokio::select! {
                line = rx.recv() => match line {
                    Some(line) => {
                        if let Some(rest) = line.strip_prefix(CRASH_PREFIX) {
                            if let Some(label) = rest.trim().strip_prefix("SIGKILL before ") {
                                ops.push(label.to_string());
                                log.push(line);
                                // The hook kills the process right after this line.
                                let _ = child.wait().await;
                                return End::Hooked;
                            }
                            ops.push(rest.trim().to_string());
                            last = Some(step(rest.trim()));
                        }
                        if let Some((_, m)) = MILESTONES.iter().find(|(l, _)| line.contains(l)) {
                            last = Some(m.to_string());
                        }
                        let finished = line.contains(done);
                        log.push(line);
                        if finished {
                            child.kill().await.unwrap();
                            return End::Done;
                        }
                    }
                    // stderr closed: the process is gone without the hook saying so.
                    None => {
                        let status = child.wait().await.unwrap();
                        panic!("bootlet exited by itself ({status}):\n{}", log.join("\n"));
                    }
                },
                () = &mut timer, if kill_after.is_some() => {
                    child.kill().await.unwrap();
                    return End::Timed;
                }
            }
        }
    })
    .await;
    let log_text = log.join("\n");
    match end {
        Ok(end) => Run {
            end,
            ops,
            last,
            log: log_text,
        },
        Err(_) => panic!("bootlet neither finished nor died:\n{log_text}"),
    }
}

fn is_temp(name: &str) -> bool {
    name.rsplit_once(".tmp-")
        .is_some_and(|(stem, r)| stem.starts_with('.') && r.len() == 16)
}

fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_temp(n))
                .collect()
        })
        .unwrap_or_default()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The public key (SPKI DER) of every CSR on the server, in the order listed.
fn csr_keys(tp: &TestPlane) -> Vec<(String, Vec<u8>, bool)> {
    tp.csrs()
        .into_iter()
        .map(|csr| {
            let name = csr.metadata.name.clone().unwrap_or_default();
            let (_, pem) = x509_parser::pem::parse_x509_pem(&csr.spec.request.0).unwrap();
            let (_, req) = x509_parser::certification_request::X509CertificationRequest::from_der(
                &pem.contents,
            )
            .unwrap();
            let spki = req.certification_request_info.subject_pki.raw.to_vec();
            let issued = csr
                .status
                .as_ref()
                .and_then(|s| s.certificate.as_ref())
                .is_some();
            (name, spki, issued)
        })
        .collect()
}

/// What a node has installed: once there, each must stay.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Has {
    cert: bool,
    kubeconfig: bool,
}

const INSTALLED: Has = Has {
    cert: true,
    kubeconfig: true,
};

/// What a node's files and the server must show after any kill. `had` is what was
/// installed before: it must still be. Returns what is installed now.
fn check(tp: &TestPlane, node: &NodeDir, name: &str, had: Has) -> Result<Has, String> {
    let current = node.current();
    let installed = match std::fs::symlink_metadata(&current) {
        Err(_) if !had.cert => false,
        Err(e) => {
            return Err(format!(
                "{}: gone after it was installed: {e}",
                current.display()
            ))
        }
        Ok(meta) => {
            if !meta.file_type().is_symlink() {
                return Err("kubelet-client-current.pem is not a symlink".into());
            }
            let target = std::fs::read_link(&current).unwrap();
            if target.parent() != Some(node.cert_dir.as_path()) {
                return Err(format!(
                    "the symlink points outside the cert dir: {target:?}"
                ));
            }
            let text = std::fs::read_to_string(&current)
                .map_err(|e| format!("the symlink does not resolve: {e}"))?;
            let (chain, key) = pki::split_pem(&text);
            let key = key.ok_or("no private key in the current file")?;
            pki::verify::verify_issued(
                &chain,
                &NodeKey::from_pem(&key).map_err(|e| format!("key: {e}"))?,
                &CertProfile::client(name),
                tp.ca_pem().as_bytes(),
                testplane::wall_now(),
            )
            .map_err(|e| format!("the current certificate: {e}"))?;
            if mode(&target) != 0o600 {
                return Err(format!("{target:?} mode {:o}", mode(&target)));
            }
            true
        }
    };
    let kubeconfig = match kube_client::config::Kubeconfig::read_from(&node.kubeconfig) {
        Ok(kc) => {
            let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
            let want = current.to_str().unwrap();
            if user.client_certificate.as_deref() != Some(want)
                || user.client_key.as_deref() != Some(want)
            {
                return Err(format!("the kubeconfig names {user:?}"));
            }
            if !installed {
                return Err("the kubeconfig names a certificate that is not there".into());
            }
            bootlet::api::kubeconfig::read(&node.kubeconfig, false)
                .map_err(|e| format!("the kubeconfig does not load: {e}"))?;
            if mode(&node.kubeconfig) != 0o600 {
                return Err("kubeconfig mode".into());
            }
            true
        }
        Err(_) if !node.kubeconfig.exists() && !had.kubeconfig => false,
        Err(e) => return Err(format!("the kubeconfig does not parse: {e}")),
    };
    for dir in [&node.cert_dir, &node.tmp.path().to_path_buf()] {
        let t = temps(dir);
        if t.len() > 1 {
            return Err(format!("temp files pile up in {}: {t:?}", dir.display()));
        }
    }
    let pending = node.cert_dir.join("kubelet-client.key.tmp");
    if let Ok(text) = std::fs::read_to_string(&pending) {
        NodeKey::from_pem(&PrivateKeyPem::new(text))
            .map_err(|e| format!("the pending key is damaged: {e}"))?;
        if mode(&pending) != 0o600 {
            return Err("pending key mode".into());
        }
    }
    if node.cert_dir.exists() && mode(&node.cert_dir) != 0o700 {
        return Err("cert dir mode".into());
    }
    let mut per_key: BTreeMap<Vec<u8>, Vec<String>> = BTreeMap::new();
    for (csr, key, _) in csr_keys(tp) {
        per_key.entry(key).or_default().push(csr);
    }
    if let Some(names) = per_key.values().find(|n| n.len() > 1) {
        return Err(format!("more than one CSR for one key: {names:?}"));
    }
    Ok(Has {
        cert: installed,
        kubeconfig,
    })
}

/// `op N OP NAME` → `OP NAME`, the node's random temp dir named for what it holds.
fn step(label: &str) -> String {
    let rest = label.splitn(3, ' ').nth(2).unwrap_or(label);
    match rest.split_once(" .tmp") {
        Some((op, _)) => format!("{op} (kubeconfig dir)"),
        None => rest.to_string(),
    }
}

/// Kill tallies by phase.
#[derive(Default, Debug)]
struct Tally {
    kills: BTreeMap<&'static str, usize>,
    labels: BTreeMap<&'static str, BTreeMap<String, usize>>,
}

impl Tally {
    /// A kill in `phase`, before (or, for a timed kill, after) the traced operation `label`.
    fn add(&mut self, phase: &'static str, label: Option<String>) {
        *self.kills.entry(phase).or_default() += 1;
        if let Some(l) = label {
            *self.labels.entry(phase).or_default().entry(l).or_default() += 1;
        }
    }

    fn total(&self) -> usize {
        self.kills.values().sum()
    }
}

/// The final restart: it must come up with a valid certificate and leave no temp file.
/// (Without rotation: the certificate is due, and the kill after the identity line would
/// land in the middle of that rotation.)
async fn finish(tp: &TestPlane, node: &NodeDir, name: &str) {
    let no_rotation = ["--rotate-certificates=false"];
    let r = run_with(node, name, &At::Trace, None, IDENTITY, &no_rotation).await;
    assert!(matches!(r.end, End::Done), "{}", r.log);
    let has = check(tp, node, name, INSTALLED).unwrap_or_else(|e| panic!("{e}\n{}", r.log));
    assert_eq!(has, INSTALLED, "{}", r.log);
    for dir in [&node.cert_dir, &node.tmp.path().to_path_buf()] {
        assert_eq!(temps(dir), Vec::<String>::new(), "{}", r.log);
    }
}

/// `op N LABEL`s → `LABEL#K` (the Kth operation with that label), what `--test-crash-at`
/// takes; the node's random temp dir name (in a `fsync-dir` of the kubeconfig's dir) as
/// `{tmp}`.
fn steps(ops: &[String], node: &NodeDir) -> Vec<String> {
    let tmp = node.tmp.path().file_name().unwrap().to_str().unwrap();
    let mut seen = BTreeMap::<String, usize>::new();
    ops.iter()
        .map(|op| {
            let label = op.splitn(3, ' ').nth(2).unwrap().replace(tmp, "{tmp}");
            let n = seen.entry(label.clone()).or_default();
            *n += 1;
            format!("{label}#{n}")
        })
        .collect()
}

/// One kill at every file operation of a bootstrap (`fresh`: a new node for each) or of a
/// rotation (one node, clean and due before each): a traced run lists the operations;
/// then for each, a run killed right before it, checked; a restart at once, killed at a
/// random operation of its own, checked; a clean restart that completes, checked. An
/// operation a run did not make this time (a second `link` when the timestamped name was
/// taken) is retried once. Every distinct operation must have been hit.
async fn every_operation(
    tp: &TestPlane,
    name: &str,
    fresh: bool,
    done: &str,
    tally: &mut Tally,
    phase: &'static str,
) {
    let mut node = NodeDir::new(&tp.bootstrap_kubeconfig());
    if !fresh {
        // Bootstrap, then rotate twice so that each rotation also prunes (keep 2).
        for done in [IDENTITY, ROTATED, ROTATED] {
            let r = run(&node, name, &At::Trace, None, done).await;
            assert!(matches!(r.end, End::Done), "{}", r.log);
        }
    }
    let traced = run(&node, name, &At::Trace, None, done).await;
    assert!(matches!(traced.end, End::Done), "{}", traced.log);
    let all = steps(&traced.ops, &node);
    assert!(
        all.len() >= 20,
        "{phase}: only {} file operations: {all:?}",
        all.len()
    );
    let mut hit = std::collections::BTreeSet::new();
    for wanted in &all {
        for _attempt in 0..2 {
            if fresh {
                node = NodeDir::new(&tp.bootstrap_kubeconfig());
            }
            let tmp = node.tmp.path().file_name().unwrap().to_str().unwrap();
            let at = At::Step(wanted.replace("{tmp}", tmp));
            let had = if fresh { Has::default() } else { INSTALLED };
            let r = run(&node, name, &at, None, done).await;
            if !matches!(r.end, End::Hooked) {
                continue;
            }
            let label = r.ops.last().unwrap();
            tally.add(phase, Some(step(label)));
            hit.insert(wanted.split_once('#').unwrap().0.to_string());
            let has = check(tp, &node, name, had)
                .unwrap_or_else(|e| panic!("killed before {label}: {e}\n{}", r.log));
            // Restart at once, and kill that restart at a random operation of its own.
            let k = rand::rng().random_range(1..=all.len() as u64);
            let r2 = run(&node, name, &At::Op(k), None, done).await;
            if let End::Hooked = r2.end {
                let label2 = r2.ops.last().unwrap();
                tally.add("restart of a killed run", Some(step(label2)));
                check(tp, &node, name, has).unwrap_or_else(|e| {
                    panic!(
                        "killed before {label}, then {label2}: {e}\n{}\n---\n{}",
                        r.log, r2.log
                    )
                });
                let r3 = run(&node, name, &At::Trace, None, done).await;
                assert!(matches!(r3.end, End::Done), "{}", r3.log);
            }
            check(tp, &node, name, INSTALLED).unwrap_or_else(|e| panic!("after recovery: {e}"));
            break;
        }
    }
    let distinct: std::collections::BTreeSet<String> = all
        .iter()
        .map(|s| s.split_once('#').unwrap().0.to_string())
        .collect();
    assert_eq!(hit, distinct, "{phase}: operations never killed before");
    finish(tp, &node, name).await;
}

/// Approves each client CSR after a random 0-40 ms, so timed kills land while one waits.
fn delayed_approver(tp: &Arc<TestPlane>) {
    let (tp, mut events) = (tp.clone(), tp.events());
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(Event::CsrCreated { name, .. }) => {
                    let delay = rand::rng().random_range(0..40);
                    let tp = tp.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        let _ = tp.approve(&name);
                    });
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
        }
    });
}

fn report(what: &str, tally: &Tally, started: tokio::time::Instant) {
    eprintln!(
        "{what}: {} kills in {:.1} s: {:?}",
        tally.total(),
        started.elapsed().as_secs_f64(),
        tally.kills
    );
    for (phase, labels) in &tally.labels {
        eprintln!("{what}: {phase}: kills per operation: {labels:?}");
    }
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_before_any_file_operation_of_a_bootstrap_leaves_a_node_that_recovers() {
    let started = tokio::time::Instant::now();
    let tp = plane(Approval::Auto).await;
    let mut tally = Tally::default();
    every_operation(&tp, "crash-b", true, IDENTITY, &mut tally, "bootstrap").await;
    report("bootstrap", &tally, started);
    assert!(tally.kills["bootstrap"] >= 20, "{tally:?}");
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_before_any_file_operation_of_a_rotation_leaves_a_node_that_recovers() {
    let started = tokio::time::Instant::now();
    let tp = plane(Approval::Auto).await;
    let mut tally = Tally::default();
    every_operation(&tp, "crash-r", false, ROTATED, &mut tally, "rotation").await;
    report("rotation", &tally, started);
    assert!(tally.kills["rotation"] >= 20, "{tally:?}");
    // Every rotation filed one CSR; none is left waiting.
    let csrs = csr_keys(&tp);
    assert!(csrs.iter().all(|(_, _, issued)| *issued), "{csrs:?}");
}

/// Random moments, network steps included: each run is killed after a random delay up to
/// a little more than a whole bootstrap or rotation takes, restarted at once, checked.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_at_random_moments_of_bootstrap_and_rotation_leave_a_node_that_recovers() {
    let started = tokio::time::Instant::now();
    let target = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(TIMED_KILLS, |total| {
            total.saturating_sub(100).max(TIMED_KILLS)
        });
    let tp = Arc::new(plane(Approval::Manual).await);
    delayed_approver(&tp);
    let mut tally = Tally::default();
    // How long a whole bootstrap and a whole rotation take here, learnt from runs that
    // finished first; kills are drawn uniformly up to a little past that.
    let mut span = [Duration::from_millis(150); 2];
    let mut n = 0;
    while tally.total() < target {
        // A fresh node every 6 runs: its first runs are bootstraps, the rest rotations.
        n += 1;
        let name = format!("crash-t{n}");
        let node = NodeDir::new(&tp.bootstrap_kubeconfig());
        let mut has = Has::default();
        for _ in 0..6 {
            if tally.total() >= target {
                break;
            }
            let which = usize::from(has.cert);
            let max = span[which].as_micros() as u64 + 20_000;
            let delay = Duration::from_micros(rand::rng().random_range(0..max));
            let done = if has.cert { ROTATED } else { IDENTITY };
            let t0 = tokio::time::Instant::now();
            let r = run(&node, &name, &At::Trace, Some(delay), done).await;
            match r.end {
                End::Timed => {
                    let phase = ["timed, bootstrap", "timed, rotation"][which];
                    let after = r
                        .last
                        .map_or("before any step".into(), |l| format!("after {l}"));
                    tally.add(phase, Some(after));
                }
                _ => span[which] = t0.elapsed(),
            }
            has = check(&tp, &node, &name, has).unwrap_or_else(|e| panic!("{e}\n{}", r.log));
        }
        finish(&tp, &node, &name).await;
    }
    report("timed", &tally, started);
    assert!(tally.total() >= target);
}

/// A kill while a rotation rewrites the kubeconfig leaves its temp file beside the
/// kubeconfig, outside the cert dir that the start sweeps; the next start removes it too,
/// even when it writes no kubeconfig (nothing due).
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_temp_file_left_by_a_kill_is_removed_at_the_next_start() {
    let tp = plane(Approval::Auto).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let name = "crash-k";
    let r = run(&node, name, &At::Trace, None, IDENTITY).await;
    assert!(matches!(r.end, End::Done), "{}", r.log);
    let at = At::Step("write kubelet.conf.tmp-*".into());
    let r = run(&node, name, &at, None, ROTATED).await;
    assert!(matches!(r.end, End::Hooked), "{}", r.log);
    assert_eq!(temps(node.tmp.path()).len(), 1, "{}", r.log);
    let r = run_with(
        &node,
        name,
        &At::Trace,
        None,
        IDENTITY,
        &["--rotate-certificates=false"],
    )
    .await;
    assert!(matches!(r.end, End::Done), "{}", r.log);
    assert_eq!(temps(node.tmp.path()), Vec::<String>::new(), "{}", r.log);
    check(&tp, &node, name, INSTALLED).unwrap();
}
