//! The Debian package's whole life cycle under a real systemd, in the container
//! tests/root/systemd.rs boots: `dpkg -i`, configure, start, upgrade to a bumped version, `dpkg -r`,
//! `dpkg -P`. The packages are built by packaging/deb.sh (cargo-deb, the maintainer scripts,
//! the conffile, the man pages and completions) around this test's build of the binary.
//!
//! The upgrade is the same binary in a package with a bumped version (0.1.0-1 → 0.1.0-2):
//! what an upgrade does to the service (dpkg, the maintainer scripts, systemd) does not
//! depend on the bytes of /usr/bin/bootlet.

use std::path::{Path, PathBuf};
use std::time::Duration;

use testplane::{Approval, Event};

use super::{
    free_port, kubelet_standin, plane, run_for, setup, wait_event, write_config, Container, Setup,
    BIN, CERT, NODE,
};

const KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";
pub(super) const BOOTSTRAP: &str = "/etc/kubernetes/bootstrap-kubelet.conf";
pub(super) const CONFIG: &str = "/etc/bootlet/config.yaml";
pub(super) const DROPIN: &str = "/etc/systemd/system/kubelet.service.d/20-bootlet.conf";

/// Started from the package: bootlet active with a certificate, the kubelet started on
/// it, and the Lease written (`events` subscribed before bootlet started).
pub(super) async fn runs_beside_the_kubelet(
    c: &Container,
    events: &mut tokio::sync::broadcast::Receiver<Event>,
) {
    assert_eq!(c.show("ActiveState").await, "active");
    let cert = c.read(CERT).await.unwrap_or_default();
    assert!(
        cert.contains("BEGIN CERTIFICATE"),
        "active without a certificate"
    );
    c.systemctl(&["start", "kubelet"]).await;
    assert_eq!(c.show_unit("kubelet", "ActiveState").await, "active");
    wait_event(events, |e| match e {
        Event::LeaseRenewed { name, .. } | Event::LeaseCreated { name, .. } if name == NODE => {
            Some(())
        }
        _ => None,
    })
    .await;
}

/// What an in-place upgrade must leave alone, recorded before it: bootlet's and the
/// kubelet's processes, the identity files and bootlet's journal position.
pub(super) struct BeforeUpgrade {
    bootlet_pid: String,
    pub(super) kubelet_pid: String,
    kubelet_since: String,
    pub(super) identity: [Option<String>; 4],
    cursor: String,
}

impl BeforeUpgrade {
    pub(super) async fn record(c: &Container) -> Self {
        let bootlet_pid = c.show("MainPID").await;
        let kubelet_pid = c.show_unit("kubelet", "MainPID").await;
        let kubelet_since = c
            .show_unit("kubelet", "ActiveEnterTimestampMonotonic")
            .await;
        let before = identity(c).await;
        let (_, cursor) = c
            .exec(&[
                "journalctl",
                "-u",
                "bootlet",
                "-n",
                "1",
                "--show-cursor",
                "-o",
                "cat",
            ])
            .await;
        let cursor = cursor
            .lines()
            .find_map(|l| l.strip_prefix("-- cursor: "))
            .unwrap_or_else(|| panic!("no journal cursor in {cursor:?}"))
            .to_string();
        BeforeUpgrade {
            bootlet_pid,
            kubelet_pid,
            kubelet_since,
            identity: before,
            cursor,
        }
    }

    /// After the package manager's upgrade (the package's version checked by the caller):
    /// bootlet active and restarted exactly once, the kubelet never, the identity files
    /// unchanged, no new CSR, and the Lease renewed again (`events` subscribed before the
    /// upgrade ran).
    pub(super) async fn check(
        &self,
        c: &Container,
        tp: &testplane::TestPlane,
        events: &mut tokio::sync::broadcast::Receiver<Event>,
    ) {
        assert_eq!(c.show("ActiveState").await, "active");
        assert_ne!(
            c.show("MainPID").await,
            self.bootlet_pid,
            "bootlet was not restarted"
        );
        let (_, journal) = c
            .exec(&[
                "journalctl",
                "-u",
                "bootlet",
                "--after-cursor",
                &self.cursor,
                "-o",
                "cat",
            ])
            .await;
        let count = |what: &str| journal.lines().filter(|l| l.starts_with(what)).count();
        assert_eq!(count("Stopping bootlet.service"), 1, "{journal}");
        assert_eq!(count("Started bootlet.service"), 1, "{journal}");
        assert_eq!(
            c.show_unit("kubelet", "MainPID").await,
            self.kubelet_pid,
            "the kubelet restarted"
        );
        assert_eq!(
            c.show_unit("kubelet", "ActiveEnterTimestampMonotonic")
                .await,
            self.kubelet_since
        );
        assert_eq!(
            identity(c).await,
            self.identity,
            "the upgrade changed the identity"
        );
        assert_eq!(tp.csrs().len(), 1, "the upgrade filed a CSR");
        wait_event(events, |e| match e {
            Event::LeaseRenewed { name, .. } if name == NODE => Some(()),
            _ => None,
        })
        .await;
    }
}

/// `bash packaging/deb.sh --bin BIN --deb-version VERSION`: the .deb's path.
pub(super) async fn build_deb(out: &Path, version: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/deb.sh");
    let out_dir = out.to_str().unwrap();
    // A release build with fat LTO under a loaded suite: minutes, not seconds.
    let (ok, text) = run_for(
        Duration::from_secs(300),
        "bash",
        &[
            script.to_str().unwrap(),
            "--bin",
            BIN,
            "--deb-version",
            version,
            "--out",
            out_dir,
            "--fast",
        ],
    )
    .await;
    assert!(
        ok,
        "packaging/deb.sh (needs cargo-deb; .ci/run installs it):\n{text}"
    );
    let deb = out.join(format!("bootlet_{version}_amd64.deb"));
    assert!(deb.exists(), "no {} after:\n{text}", deb.display());
    deb
}

/// The node's identity as files: the client certificate, the kubeconfig, the bootstrap
/// kubeconfig and the list of the cert dir.
pub(super) async fn identity(c: &Container) -> [Option<String>; 4] {
    [
        c.read(CERT).await,
        c.read(KUBECONFIG).await,
        c.read(BOOTSTRAP).await,
        Some(
            c.exec(&["ls", "-l", "--time-style=+", "/var/lib/kubelet/pki"])
                .await
                .1,
        ),
    ]
}

async fn dpkg(c: &Container, args: &[&str]) -> String {
    let mut all = vec!["dpkg"];
    all.extend_from_slice(args);
    let (ok, out) = c.exec_for(std::time::Duration::from_secs(120), &all).await;
    assert!(ok, "dpkg {args:?}:\n{out}");
    out
}

pub(super) async fn exists(c: &Container, path: &str) -> bool {
    c.exec(&["test", "-e", path]).await.0 || c.exec(&["test", "-L", path]).await.0
}

#[ignore = "needs root and systemd-nspawn: run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debian_package_installs_upgrades_and_removes_under_systemd() {
    let Setup {
        started,
        share,
        name,
    } = setup("bd");
    let tp = plane(Approval::Auto).await;
    let s = share.path();
    let (first, second) = tokio::join!(build_deb(s, "0.1.0-1"), build_deb(s, "0.1.0-2"));
    eprintln!("packages built in {:?}", started.elapsed());
    std::fs::write(s.join("bootstrap-kubelet.conf"), tp.bootstrap_kubeconfig()).unwrap();
    let healthz = free_port();
    write_config(
        s,
        "1s",
        &format!("leaseHealthProbe: http://127.0.0.1:{healthz}/healthz\n"),
    );
    // Container::boot binds this over /etc/systemd/system/bootlet.service.d: empty, so the
    // packaged unit runs exactly as shipped.
    std::fs::create_dir_all(s.join("bootlet.service.d")).unwrap();
    let container = Container::boot(&name, s).await;
    let c = &container;
    let sd = s.display();
    // A node, not an image build: the host's Docker-style policy-rc.d (exit 101) would make
    // deb-systemd-invoke skip every service action. And a kubelet (the stand-in answers
    // /healthz) that runs before bootlet is installed.
    let setup_node = format!(
        "rm -f /usr/sbin/policy-rc.d && {}",
        kubelet_standin(s, healthz)
    );
    let (ok, out) = c.exec(&["sh", "-c", &setup_node]).await;
    assert!(ok, "setting up the node: {out}");

    // 1. dpkg -i: enabled, not started; the kubelet unchanged; the files in place. A unit
    // left by systemd/install.sh would shadow the package's: the postinst names it.
    let shadow = "/etc/systemd/system/bootlet.service";
    // What install.sh writes there: the same unit, ExecStart in /usr/local.
    let leftover = format!(
        "sed 's|^ExecStart=/usr/bin/|ExecStart=/usr/local/bin/|' {}/systemd/bootlet.service >{shadow}",
        env!("CARGO_MANIFEST_DIR")
    );
    let (ok, out) = c.exec(&["sh", "-c", &leftover]).await;
    assert!(ok, "{out}");
    let out = dpkg(c, &["-i", first.to_str().unwrap()]).await;
    assert!(out.contains("installed and enabled (not started)"), "{out}");
    assert!(
        out.contains(&format!("{shadow} overrides the package's unit")),
        "{out}"
    );
    let cleanup = format!("rm {shadow} && systemctl daemon-reload");
    let (ok, out) = c.exec(&["sh", "-c", &cleanup]).await;
    assert!(ok, "{out}");
    assert_eq!(
        c.exec(&["systemctl", "is-enabled", "bootlet"])
            .await
            .1
            .trim(),
        "enabled"
    );
    assert_eq!(c.show("ActiveState").await, "inactive");
    let (_, unit) = c.exec(&["systemctl", "cat", "bootlet"]).await;
    // The package's unit (in /usr/lib; systemd 252 names it by its /lib alias on a
    // merged-/usr system), with no drop-in of the test's.
    let first = unit.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("# /") && first.ends_with("lib/systemd/system/bootlet.service"),
        "{unit}"
    );
    assert!(!unit.contains("bootlet.service.d/"), "a drop-in: {unit}");
    assert!(
        unit.contains("ExecStart=/usr/bin/bootlet run --config /etc/bootlet/config.yaml"),
        "{unit}"
    );
    let kubelet =
        c.show_unit("kubelet", "Wants").await + &c.show_unit("kubelet", "DropInPaths").await;
    assert!(
        !kubelet.contains("bootlet"),
        "installing bootlet changed the kubelet: {kubelet}"
    );
    let (ok, version) = c.exec(&["/usr/bin/bootlet", "version"]).await;
    assert!(
        ok && version.starts_with("bootlet 0.1.0 (commit "),
        "{version}"
    );
    let (ok, page) = c.exec(&["man", "-w", "bootlet"]).await;
    assert!(
        ok && page.trim() == "/usr/share/man/man1/bootlet.1.gz",
        "{page}"
    );
    for f in [
        "/usr/share/bash-completion/completions/bootlet",
        "/usr/share/zsh/vendor-completions/_bootlet",
        "/usr/share/fish/vendor_completions.d/bootlet.fish",
        "/usr/share/doc/bootlet/copyright",
        "/usr/share/doc/bootlet/changelog.Debian.gz",
        "/usr/share/bootlet/kubelet.service.d/20-bootlet.conf",
    ] {
        assert!(exists(c, f).await, "{f} missing");
    }
    // The operator docs: README, CHANGELOG (changelog.gz, as Debian names it) and every
    // docs/*.md of this checkout.
    for doc in ["README.md".to_string(), "changelog.gz".to_string()]
        .into_iter()
        .chain(super::repo_docs().map(|d| format!("docs/{d}")))
    {
        let f = format!("/usr/share/doc/bootlet/{doc}");
        assert!(exists(c, &f).await, "{f} missing");
    }
    let (ok, verify) = c.exec(&["dpkg", "--verify", "bootlet"]).await;
    assert!(ok && verify.trim().is_empty(), "dpkg --verify: {verify}");

    // 2. Configure as an operator does (the conffile edited, the bootstrap kubeconfig, the
    // documented one-line kubelet opt-in), start bootlet (active once the certificate is on
    // disk), then the kubelet, whose /healthz lets the Lease be written.
    let (ok, out) = c
        .exec(&["sh", "-c", &format!(
            "cp {sd}/bootlet.yaml {CONFIG} && mkdir -p /etc/kubernetes && cp {sd}/bootstrap-kubelet.conf {BOOTSTRAP} \
             && mkdir -p /etc/systemd/system/kubelet.service.d \
             && ln -sf /usr/share/bootlet/kubelet.service.d/20-bootlet.conf /etc/systemd/system/kubelet.service.d/ \
             && systemctl daemon-reload"
        )])
        .await;
    assert!(ok, "configuring: {out}");
    let edited = c.read(CONFIG).await;
    let mut events = tp.events();
    c.systemctl(&["start", "bootlet"]).await;
    runs_beside_the_kubelet(c, &mut events).await;
    eprintln!("installed and active after {:?}", started.elapsed());

    // 3. Upgrade to the bumped version: the config edit survives, bootlet restarts once, the
    // kubelet does not, and the certificate and the Lease go on.
    let upgrade = BeforeUpgrade::record(c).await;
    let out = dpkg(c, &["-i", second.to_str().unwrap()]).await;
    let mut events = tp.events();
    let (_, installed) = c
        .exec(&["dpkg-query", "-W", "-f", "${Version}", "bootlet"])
        .await;
    assert_eq!(installed, "0.1.0-2", "{out}");
    assert_eq!(c.read(CONFIG).await, edited, "the config edit was lost");
    for stray in [".dpkg-dist", ".dpkg-new", ".dpkg-old"] {
        assert!(
            !exists(c, &format!("{CONFIG}{stray}")).await,
            "{CONFIG}{stray}"
        );
    }
    upgrade.check(c, &tp, &mut events).await;
    eprintln!("upgraded after {:?}", started.elapsed());

    // 4. dpkg -r: stopped, and masked (deb-systemd-helper's remove: the unit file is gone,
    // the enablement is kept for a reinstall); the conffile and the identity stay, the
    // kubelet runs on.
    let out = dpkg(c, &["-r", "bootlet"]).await;
    assert!(
        out.contains(&format!("{DROPIN} now points nowhere")),
        "{out}"
    );
    assert_eq!(c.show("ActiveState").await, "inactive");
    assert_eq!(
        c.exec(&["systemctl", "is-enabled", "bootlet"])
            .await
            .1
            .trim(),
        "masked"
    );
    assert!(
        !c.exec(&["systemctl", "start", "bootlet"]).await.0,
        "started after dpkg -r"
    );
    assert!(!exists(c, "/usr/bin/bootlet").await);
    assert_eq!(c.read(CONFIG).await, edited, "dpkg -r removed the conffile");
    assert_eq!(
        identity(c).await,
        upgrade.identity,
        "dpkg -r changed the identity"
    );
    assert_eq!(c.show_unit("kubelet", "MainPID").await, upgrade.kubelet_pid);

    // 5. dpkg -P: the conffile, the mask and the enablement go; the identity stays, and the
    // kubelet (restarted: the drop-in link now dangles) still authenticates with it.
    let out = dpkg(c, &["-P", "bootlet"]).await;
    assert!(out.contains("identity is kept"), "{out}");
    for gone in [
        "/etc/bootlet",
        "/etc/systemd/system/bootlet.service",
        "/etc/systemd/system/multi-user.target.wants/bootlet.service",
    ] {
        assert!(!exists(c, gone).await, "{gone} left after purge");
    }
    assert_eq!(
        identity(c).await,
        upgrade.identity,
        "dpkg -P changed the identity"
    );
    c.systemctl(&["daemon-reload"]).await;
    c.systemctl(&["restart", "kubelet"]).await;
    assert_eq!(c.show_unit("kubelet", "ActiveState").await, "active");
    let kube = testplane::kube::build::binary().expect("the Kubernetes components");
    let (ok, lease) = c
        .exec(&[
            kube.to_str().unwrap(),
            "kubectl",
            "--kubeconfig",
            KUBECONFIG,
            "get",
            "--raw",
            &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"),
        ])
        .await;
    assert!(
        ok && lease.contains(&format!("\"name\":\"{NODE}\"")),
        "{lease}"
    );
    eprintln!("package life cycle done in {:?}", started.elapsed());
    drop(container);
}
