//! The RPM's whole life cycle under a real systemd, in the same container as the .deb's
//! (package.rs): `rpm -i`, configure, start, upgrade to a bumped release keeping an edited
//! config, `rpm -e`. The packages are built by packaging/rpm.sh (cargo-generate-rpm, the
//! scriptlets, `%config(noreplace)`, the man pages, completions and docs) around this
//! test's build of the binary; the upgrade is the same binary at release 2, as for the .deb.
//!
//! The container is this Debian host's root, so its rpm is Debian's: `--force-debian` (it
//! refuses to install otherwise) and `--nodeps` (its database knows none of the host's
//! packages, so /bin/sh, systemd and glibc look missing; the test reads the requirements
//! from the package instead). The database is `--dbpath /var/lib/rpm` inside the container,
//! as on an RPM-based node (Debian's rpm would use ~/.rpmdb).

use std::path::{Path, PathBuf};
use std::time::Duration;

use testplane::Approval;

use super::package::{
    exists, identity, runs_beside_the_kubelet, BeforeUpgrade, BOOTSTRAP, CONFIG, DROPIN,
};
use super::{
    free_port, kubelet_standin, plane, repo_docs, run_for, setup, write_config, Container, Setup,
    BIN,
};

const DB: &str = "/var/lib/rpm";

/// `bash packaging/rpm.sh --bin BIN --release RELEASE --out OUT`: the .rpm's path.
async fn build_rpm(out: &Path, release: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/rpm.sh");
    let out = out.join(format!("rpm-{release}"));
    let (ok, text) = run_for(
        Duration::from_secs(300),
        "bash",
        &[
            script.to_str().unwrap(),
            "--bin",
            BIN,
            "--release",
            release,
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        ok,
        "packaging/rpm.sh (needs cargo-generate-rpm; tests/run.sh --install-only installs it):\n{text}"
    );
    let rpm = PathBuf::from(text.lines().last().unwrap_or_default().trim());
    let want = format!("bootlet-{}-{release}.x86_64.rpm", env!("CARGO_PKG_VERSION"));
    assert!(
        rpm.exists() && rpm.file_name().is_some_and(|n| n == want.as_str()),
        "no {want} after:\n{text}"
    );
    rpm
}

/// `rpm --dbpath DB ARGS` in the container; its output, failing the test on an error.
async fn rpm(c: &Container, args: &[&str]) -> String {
    let mut all = vec!["rpm", "--dbpath", DB];
    all.extend_from_slice(args);
    let (ok, out) = c.exec_for(Duration::from_secs(120), &all).await;
    assert!(ok, "rpm {args:?}:\n{out}");
    out
}

#[ignore = "needs root and systemd-nspawn: run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rpm_installs_upgrades_and_erases_under_systemd() {
    let Setup {
        started,
        share,
        name,
    } = setup("br");
    let tp = plane(Approval::Auto).await;
    let s = share.path();
    let (first, second) = tokio::join!(build_rpm(s, "1"), build_rpm(s, "2"));
    eprintln!("packages built in {:?}", started.elapsed());
    let (first, second) = (first.to_str().unwrap(), second.to_str().unwrap());
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
    let (ok, out) = c
        .exec(&[
            "sh",
            "-c",
            &format!("mkdir -p {DB} && {}", kubelet_standin(s, healthz)),
        ])
        .await;
    assert!(ok, "setting up the node: {out}");

    // 0. What the package says of itself: what it needs, its config and docs, and that it
    // owns nothing of the kubelet's.
    let requires = rpm(c, &["-qp", "--requires", first]).await;
    for need in ["/bin/sh", "systemd", "libc.so.6"] {
        assert!(requires.contains(need), "{need} not required:\n{requires}");
    }
    let config = rpm(c, &["-qp", "--configfiles", first]).await;
    assert_eq!(config.trim(), CONFIG, "%config files");
    let (_, flags) = c
        .exec(&[
            "rpm",
            "-qp",
            "--qf",
            "[%{FILEFLAGS:fflags} %{FILENAMES}\n]",
            first,
        ])
        .await;
    assert!(
        flags.lines().any(|l| l == format!("cn {CONFIG}")),
        "{CONFIG} is not %config(noreplace):\n{flags}"
    );
    let files = rpm(c, &["-qpl", first]).await;
    assert!(
        !files.contains("/etc/systemd"),
        "the package owns something under /etc/systemd:\n{files}"
    );
    let docs = rpm(c, &["-qpd", first]).await;
    let mut shipped = vec![
        "/usr/share/doc/bootlet/README.md".to_string(),
        "/usr/share/doc/bootlet/CHANGELOG.md".to_string(),
    ];
    shipped.extend(repo_docs().map(|d| format!("/usr/share/doc/bootlet/docs/{d}")));
    for doc in &shipped {
        assert!(docs.lines().any(|l| l == doc), "{doc} not %doc:\n{docs}");
    }

    // 1. rpm -i: enabled, not started; the kubelet unchanged; the files in place.
    let out = rpm(c, &["--force-debian", "--nodeps", "-i", first]).await;
    assert!(out.contains("installed and enabled (not started)"), "{out}");
    assert_eq!(
        c.exec(&["systemctl", "is-enabled", "bootlet"])
            .await
            .1
            .trim(),
        "enabled"
    );
    assert_eq!(c.show("ActiveState").await, "inactive");
    let (_, unit) = c.exec(&["systemctl", "cat", "bootlet"]).await;
    let head = unit.lines().next().unwrap_or_default();
    assert!(
        head.starts_with("# /") && head.ends_with("lib/systemd/system/bootlet.service"),
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
        ok && version.starts_with(&format!("bootlet {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let (ok, page) = c.exec(&["man", "-w", "bootlet"]).await;
    assert!(
        ok && page.trim() == "/usr/share/man/man1/bootlet.1.gz",
        "{page}"
    );
    for f in [
        "/usr/share/bash-completion/completions/bootlet",
        "/usr/share/zsh/site-functions/_bootlet",
        "/usr/share/fish/vendor_completions.d/bootlet.fish",
        "/usr/share/bootlet/kubelet.service.d/20-bootlet.conf",
        "/usr/share/bootlet/kubelet.service.d/30-bootlet-serving.conf",
        "/usr/share/bootlet/prometheus/bootlet.rules.yaml",
        "/usr/share/licenses/bootlet/LICENSE",
    ]
    .into_iter()
    .chain(shipped.iter().map(String::as_str))
    {
        assert!(exists(c, f).await, "{f} missing");
    }
    let verify = rpm(c, &["-V", "--nodeps", "bootlet"]).await;
    assert!(verify.trim().is_empty(), "rpm -V: {verify}");

    // 2. Configure as an operator does, start bootlet, then the kubelet.
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

    // 3. rpm -U to release 2: the config edit survives with no .rpmnew beside it (the
    // packaged file did not change), bootlet restarts once, the kubelet does not, and the
    // certificate and the Lease go on.
    let upgrade = BeforeUpgrade::record(c).await;
    let out = rpm(c, &["--force-debian", "--nodeps", "-U", second]).await;
    assert!(!out.contains("installed and enabled"), "{out}");
    let mut events = tp.events();
    let installed = rpm(c, &["-q", "--qf", "%{VERSION}-%{RELEASE}", "bootlet"]).await;
    assert_eq!(
        installed,
        format!("{}-2", env!("CARGO_PKG_VERSION")),
        "{out}"
    );
    assert_eq!(c.read(CONFIG).await, edited, "the config edit was lost");
    for stray in [".rpmnew", ".rpmsave", ".rpmorig"] {
        assert!(
            !exists(c, &format!("{CONFIG}{stray}")).await,
            "{CONFIG}{stray}"
        );
    }
    upgrade.check(c, &tp, &mut events).await;
    eprintln!("upgraded after {:?}", started.elapsed());

    // 4. rpm -e: stopped and disabled; the edited config kept as .rpmsave, the package's
    // directories gone, the identity kept, the kubelet running on.
    let out = rpm(c, &["--nodeps", "-e", "bootlet"]).await;
    assert!(
        out.contains(&format!("{DROPIN} now points nowhere")),
        "{out}"
    );
    assert!(out.contains("identity is kept"), "{out}");
    assert_eq!(c.show("ActiveState").await, "inactive");
    assert!(
        !c.exec(&["systemctl", "start", "bootlet"]).await.0,
        "started after rpm -e"
    );
    for gone in [
        "/usr/bin/bootlet",
        "/usr/lib/systemd/system/bootlet.service",
        "/etc/systemd/system/multi-user.target.wants/bootlet.service",
        "/usr/share/bootlet",
        "/usr/share/doc/bootlet",
        "/usr/share/licenses/bootlet",
        CONFIG,
    ] {
        assert!(!exists(c, gone).await, "{gone} left after rpm -e");
    }
    assert_eq!(
        c.read(&format!("{CONFIG}.rpmsave")).await,
        edited,
        "the edited config was not kept as .rpmsave"
    );
    assert_eq!(
        identity(c).await,
        upgrade.identity,
        "rpm -e changed the identity"
    );
    assert_eq!(c.show_unit("kubelet", "MainPID").await, upgrade.kubelet_pid);
    eprintln!("RPM life cycle done in {:?}", started.elapsed());
    drop(container);
}
