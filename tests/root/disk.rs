//! The disk under a running agent (#14), on real filesystems: a tmpfs filled up (nothing
//! fits; or only the pending key fits, so the CSR is issued and the install fails), the
//! tmpfs remounted read-only, the cert dir deleted. Each time: an error naming the path,
//! the current certificate untouched and still used (the Lease renews with it), retries
//! at most about once a second (counted in a window), no CSR piling up, and the rotation
//! completing once the fault is fixed. Needs root (mount): without it each test fails
//! saying so, never passes unseen; the project's tests run as root (`bash tests/run.sh`).

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{Agent, NodeDir};
use testplane::{Event, TestPlane};
use tokio::sync::broadcast;

/// Logged each time a rotation attempt fails.
const FAILED: &str = "rotation failed";
/// How long retries are counted under the fault.
const WINDOW: Duration = Duration::from_millis(2500);

/// A small tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
                p(at),
            ],
        );
        Tmpfs(at.to_path_buf())
    }

    fn remount(&self, how: &str) {
        sh("mount", &["-o", &format!("remount,{how}"), p(&self.0)]);
    }

    /// Bytes still free for an unprivileged write (tmpfs keeps no root reserve).
    fn free(&self) -> u64 {
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%a %S", p(&self.0)])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (blocks, size) = text.trim().split_once(' ').unwrap();
        blocks.parse::<u64>().unwrap() * size.parse::<u64>().unwrap()
    }

    /// Fills the tmpfs with `filler` until `leave` bytes are free.
    fn fill(&self, leave: u64) -> PathBuf {
        let filler = self.0.join("filler");
        let n = self.free().saturating_sub(leave);
        std::fs::write(&filler, vec![0u8; n as usize]).unwrap();
        assert_eq!(self.free(), leave, "the filler did not leave {leave} bytes");
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l", p(&self.0)])
            .status();
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn sh(cmd: &str, args: &[&str]) {
    let out = std::process::Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fail loudly without root: a test that returned early would pass having shown nothing.
fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test mounts a tmpfs, which needs root: run it as root (bash tests/run.sh does)"
    );
}

/// What to do to the disk, and how to fix it.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Not a byte fits: the pending key cannot be stored, so no CSR is filed.
    Full,
    /// One page fits: the pending key is stored, the CSR issued, the install fails.
    FullAfterCsr,
    /// The filesystem is remounted read-only.
    ReadOnly,
    /// `rm -rf` of the cert dir.
    Deleted,
}

/// A node whose cert dir and kubeconfig live on their own 256 KiB tmpfs, bootstrapped with
/// 12 s certificates it rotates at a third of their lifetime (4 s).
struct Scene {
    // Unmounted before the node's temp dir is removed (fields drop in order).
    fs: Option<Tmpfs>,
    tp: TestPlane,
    node: NodeDir,
    name: String,
}

async fn scene(name: &str, on_tmpfs: bool) -> Scene {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(12))
        .allow_short_expiration(true)
        .backdate(Duration::ZERO)
        .start()
        .await
        .expect("start testplane");
    let mut node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let fs = on_tmpfs.then(|| {
        let mnt = node.tmp.path().join("mnt");
        let fs = Tmpfs::mount(&mnt, "256k");
        node.cert_dir = mnt.join("pki");
        node.kubeconfig = mnt.join("kubelet.conf");
        fs
    });
    Scene {
        tp,
        node,
        fs,
        name: name.to_string(),
    }
}

fn args(s: &Scene) -> Vec<String> {
    let mut a = s.node.args(&s.name);
    a.extend(
        [
            "--rotation-fraction",
            "0.34",
            "--rotation-jitter",
            "0",
            "--test-short-lease-interval",
            "--lease-renew-interval",
            "250ms",
            "--lease-duration",
            "2s",
        ]
        .map(String::from),
    );
    a
}

/// Counts the events `pick` chooses for `window`.
async fn count(
    mut rx: broadcast::Receiver<Event>,
    window: Duration,
    pick: impl Fn(&Event) -> bool,
) -> usize {
    let deadline = tokio::time::Instant::now() + window;
    let mut n = 0;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(e)) if pick(&e) => n += 1,
            Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(_)) | Err(_) => return n,
        }
    }
}

async fn under(fault: Fault) -> String {
    let s = scene(
        &format!("disk-{}", format!("{fault:?}").to_lowercase()),
        !matches!(fault, Fault::Deleted),
    )
    .await;
    let agent = Agent::spawn(&args(&s));
    // The rotation loop is up (it opens, and would recreate, the cert dir when it starts).
    agent
        .wait_for_log("client certificate rotation scheduled")
        .await;
    let current = s.node.current();
    let before = std::fs::read(&current).unwrap();
    let pki = s.node.cert_dir.clone();

    let mut filler = None;
    match fault {
        Fault::Full => filler = s.fs.as_ref().map(|fs| fs.fill(0)),
        Fault::FullAfterCsr => filler = s.fs.as_ref().map(|fs| fs.fill(4096)),
        Fault::ReadOnly => s.fs.as_ref().unwrap().remount("ro"),
        Fault::Deleted => std::fs::remove_dir_all(&pki).unwrap(),
    }

    // The first failed attempt, at the rotation deadline: one line naming the path.
    let line = agent.wait_for_log(FAILED).await;
    let (path, why) = match fault {
        Fault::Full => (
            pki.join("kubelet-client.key.tmp"),
            "No space left on device".to_string(),
        ),
        Fault::FullAfterCsr => (
            pki.join("kubelet-client-"),
            "No space left on device".into(),
        ),
        Fault::ReadOnly => (
            pki.join("kubelet-client.key.tmp"),
            "Read-only file system".into(),
        ),
        Fault::Deleted => (
            pki.join("kubelet-client.key.tmp"),
            format!("the directory {} is gone", pki.display()),
        ),
    };
    assert!(
        line.contains(&format!("{}", path.display())) && line.contains(&why),
        "{fault:?}: {line}"
    );

    // The window: retries about once a second, the Lease still renewed with the current
    // certificate, the certificate file untouched, no CSR filed or piling up.
    let user = format!("system:node:{}", s.name);
    let csrs_before = s.tp.csrs().len();
    let failed_before = agent.log().matches(FAILED).count();
    // Lines above debug (each Lease renewal is a debug line).
    let loud = |log: String| log.lines().filter(|l| !l.contains(" DEBUG ")).count();
    let lines_before = loud(agent.log());
    let renewed = count(
        s.tp.events(),
        WINDOW,
        |e| matches!(e, Event::LeaseRenewed { user: u, .. } if *u == user),
    )
    .await;
    let retries = agent.log().matches(FAILED).count() - failed_before;
    let lines = loud(agent.log()) - lines_before;
    assert!(
        (1..=4).contains(&retries),
        "{fault:?}: {retries} retries in {WINDOW:?}\n{}",
        agent.log()
    );
    assert!(
        lines <= 6 * retries + 2,
        "{fault:?}: {lines} log lines for {retries} retries"
    );
    assert!(
        renewed >= 3,
        "{fault:?}: {renewed} Lease renewals in {WINDOW:?}"
    );
    let csrs = s.tp.csrs().len();
    let want_csrs = match fault {
        Fault::FullAfterCsr => 2,
        _ => 1,
    };
    assert_eq!(
        csrs, want_csrs,
        "{fault:?}: CSRs on the server under the fault"
    );
    assert_eq!(csrs, csrs_before, "{fault:?}: CSRs filed during the window");
    if !matches!(fault, Fault::Deleted) {
        assert_eq!(
            std::fs::read(&current).unwrap(),
            before,
            "{fault:?}: the current file changed"
        );
    }

    // Fixed: the next attempt rotates.
    match fault {
        Fault::Full | Fault::FullAfterCsr => std::fs::remove_file(filler.unwrap()).unwrap(),
        Fault::ReadOnly => s.fs.as_ref().unwrap().remount("rw"),
        Fault::Deleted => {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new().mode(0o700).create(&pki).unwrap();
        }
    }
    agent.wait_for_log("client certificate rotated").await;
    let after = std::fs::read(&current).unwrap();
    assert_ne!(after, before);
    assert_eq!(
        s.tp.csrs().len(),
        2,
        "{fault:?}: bootstrap + one rotation CSR"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&pki)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{fault:?}: {leftovers:?}");
    bootlet::api::kubeconfig::read(&s.node.kubeconfig, false).unwrap();
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    format!("{fault:?}: first error: {line}\n  {retries} retries and {lines} log lines in {WINDOW:?}, {renewed} Lease renewals with the current certificate")
}

#[ignore = "needs root (tmpfs mounts): run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_read_only_or_deleted_cert_dir_keeps_the_identity_and_recovers() {
    require_root();
    let (a, b, c, d) = tokio::join!(
        under(Fault::Full),
        under(Fault::FullAfterCsr),
        under(Fault::ReadOnly),
        under(Fault::Deleted)
    );
    for r in [a, b, c, d] {
        eprintln!("{r}");
    }
}

/// A bootstrap whose certificate is installed but whose kubeconfig cannot be written (its
/// directory's filesystem is full, the cert dir's is not): each retry publishes the
/// certificate already installed instead of filing a new CSR for a new key, and once
/// there is room the node comes up with that one certificate.
#[ignore = "needs root (tmpfs mounts): run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_that_cannot_be_written_at_bootstrap_costs_one_csr_not_one_per_retry() {
    require_root();
    let mut s = scene("disk-kubeconfig", false).await;
    let mnt = s.node.tmp.path().join("etc");
    let fs = Tmpfs::mount(&mnt, "64k");
    s.node.kubeconfig = mnt.join("kubelet.conf");
    let filler = fs.fill(0);
    let mut a = s.node.args(&s.name);
    a.extend(["--csr-backoff-min", "200ms", "--csr-backoff-max", "400ms"].map(String::from));
    let agent = Agent::spawn(&a);
    let line = agent.wait_for_log("bootstrap attempt failed").await;
    let want = format!(
        "{}: cannot write: No space left on device",
        s.node.kubeconfig.display()
    );
    assert!(line.contains(&want), "{line}");
    // Three more retries, each after at least the 200 ms floor.
    agent
        .wait_for_log_count("bootstrap attempt failed", 4)
        .await;
    assert_eq!(
        s.tp.csrs().len(),
        1,
        "one CSR, whatever the retries\n{}",
        agent.log()
    );
    std::fs::remove_file(filler).unwrap();
    agent.wait_for_log("node identity in place").await;
    assert_eq!(s.tp.csrs().len(), 1);
    let pems = std::fs::read_dir(&s.node.cert_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pem"))
        .count();
    assert_eq!(pems, 2, "one certificate file and the current symlink");
    bootlet::api::kubeconfig::read(&s.node.kubeconfig, false).unwrap();
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    drop(fs);
}
