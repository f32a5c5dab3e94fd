//! A node built from an image, under a real systemd (issue 31): the Debian package installed
//! and enabled in an image build (one boot, `dpkg -i`, power off), then the image's own
//! boots into its default target (multi-user.target), as a VM booted from it does. Beside
//! bootlet: the kubelet as its package ships it (`Restart=always`, `RestartSec=10`, enabled)
//! with bootlet's drop-in linked as docs/install.md says, and a stand-in for cloud-init's final
//! stage (`After=multi-user.target`, `Type=oneshot`), where `kubeadm join` runs.
//!
//! Before the fix bootlet's READY waited for the certificate with `TimeoutStartSec=infinity`:
//! multi-user.target waited for bootlet, the final stage for multi-user.target, and the file
//! bootlet waited for could only come from the final stage. These boots never finished.

use std::path::Path;
use std::time::Duration;

use testplane::{Approval, Event, TestPlane};
use tokio::time::Instant;

use super::package::build_deb;
use super::{
    plane, setup, wait_event, Boot, Container, Image, Setup, CERT, KUBELET_STANDIN, KUBELET_UNIT,
};

const BOOTSTRAP: &str = "/etc/kubernetes/bootstrap-kubelet.conf";

/// cloud-init's final stage, as far as ordering goes: `cloud-final.service` runs `runcmd`
/// (Cluster API's `kubeadm join`) after multi-user.target.
const FINAL: &str = "[Unit]\nDescription=cloud-init final stage stand-in (runcmd: kubeadm join)\nAfter=multi-user.target\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";

/// Builds the image: the package installed (enabled, not started), the kubelet and its
/// drop-in, bootlet's config, the final-stage stand-in; `bootstrap`, when given, already
/// at its path (as cloud-init's `write_files` puts it before the final stage).
async fn build_image(name: &str, share: &Path, node: &str, bootstrap: Option<&str>) -> Image {
    let deb = build_deb(share, "0.1.0-1").await;
    let healthz = super::free_port();
    std::fs::write(share.join("kubelet-standin.py"), KUBELET_STANDIN).unwrap();
    std::fs::write(share.join("kubelet.service"), KUBELET_UNIT).unwrap();
    std::fs::write(share.join("final.service"), FINAL).unwrap();
    // The kubelet renews its own Lease beside the drop-in (docs/install.md: the kubelet opt-in).
    std::fs::write(
        share.join("bootlet.yaml"),
        format!("nodeName: {node}\nrenewLease: false\nmetricsBindAddress: \"off\"\n"),
    )
    .unwrap();
    let copy_bootstrap = match bootstrap {
        Some(text) => {
            std::fs::write(share.join("bootstrap-kubelet.conf"), text).unwrap();
            format!(
                " && mkdir -p /etc/kubernetes && cp {}/bootstrap-kubelet.conf {BOOTSTRAP}",
                share.display()
            )
        }
        None => String::new(),
    };
    let s = share.display();
    let script = format!(
        "dpkg -i {deb} \
         && printf '#!/bin/sh\\nexec /usr/bin/python3 {s}/kubelet-standin.py {healthz}\\n' >/usr/bin/kubelet && chmod 755 /usr/bin/kubelet \
         && cp {s}/kubelet.service {s}/final.service /etc/systemd/system/ \
         && mkdir -p /etc/systemd/system/kubelet.service.d \
         && ln -sf /usr/share/bootlet/kubelet.service.d/20-bootlet.conf /etc/systemd/system/kubelet.service.d/ \
         && cp {s}/bootlet.yaml /etc/bootlet/config.yaml \
         && systemctl daemon-reload && systemctl enable kubelet.service final.service{copy_bootstrap}",
        deb = deb.display(),
    );
    image_from(name, share, &script).await
}

/// An image: one boot into basic.target (nothing of the host's own services started, and
/// those masked for later boots; the default target multi-user.target), `script` run in it
/// as an image build would, bootlet checked enabled, power off.
pub(super) async fn image_from(name: &str, share: &Path, script: &str) -> Image {
    let image = Image::new(share);
    let c = Container::boot_as(
        &format!("{name}-b"),
        share,
        Boot::Image(&image, Some("basic.target")),
    )
    .await;
    // A machine image, not a Docker build: the host's policy-rc.d (exit 101) would make
    // deb-systemd-invoke skip every service action.
    let script = format!(
        "rm -f /usr/sbin/policy-rc.d \
         && for u in postgresql.service prometheus.service e2scrub_reap.service; do systemctl mask $u; done \
         && systemctl set-default multi-user.target && {script}"
    );
    let (ok, out) = c
        .exec_for(Duration::from_secs(180), &["sh", "-c", &script])
        .await;
    assert!(ok, "building the image: {out}");
    assert_eq!(
        c.exec(&["systemctl", "is-enabled", "bootlet"])
            .await
            .1
            .trim(),
        "enabled"
    );
    c.poweroff().await;
    image
}

/// The boot finished with nothing of ours holding or failing it: the state is `running`
/// (or `degraded` for units that are not ours), the final stage ran, bootlet is active.
async fn booted_cleanly(c: &Container) {
    let (_, state) = c.exec(&["systemctl", "is-system-running"]).await;
    let (_, failed) = c
        .exec(&["systemctl", "--failed", "--plain", "--no-legend"])
        .await;
    assert!(
        state.trim() == "running" || state.trim() == "degraded",
        "{state}\n{failed}"
    );
    for ours in ["bootlet", "kubelet", "final"] {
        assert!(!failed.contains(ours), "{ours} failed:\n{failed}");
    }
    assert_eq!(c.show_unit("final", "ActiveState").await, "active");
    assert_eq!(c.show_unit("final", "Result").await, "success");
    assert_eq!(c.show("ActiveState").await, "active");
    let (_, errors) = c
        .exec(&[
            "journalctl",
            "-u",
            "bootlet",
            "-p",
            "err",
            "--no-pager",
            "-o",
            "cat",
            "-b",
        ])
        .await;
    assert!(
        errors.trim().is_empty() || errors.contains("-- No entries --"),
        "bootlet logged errors at boot:\n{errors}"
    );
}

/// The kubelet's main process has not run this boot: its ExecStartPre refused it.
async fn kubelet_held(c: &Container, why: &[&str]) {
    assert_eq!(
        c.show_unit("kubelet", "ExecMainStartTimestampMonotonic")
            .await,
        "0",
        "the kubelet ran without an identity"
    );
    let journal = c
        .until(
            "the kubelet's refusal",
            Duration::from_secs(30),
            move || async move {
                let (_, j) = c
                    .exec(&[
                        "journalctl",
                        "-u",
                        "kubelet",
                        "--no-pager",
                        "-o",
                        "cat",
                        "-b",
                    ])
                    .await;
                j.contains("the kubelet waits for the identity of node")
                    .then_some(j)
            },
        )
        .await;
    for w in why {
        assert!(
            journal.contains(w),
            "the kubelet's journal lacks {w:?}:\n{journal}"
        );
    }
}

/// Waits until the kubelet's main process runs; its start time (monotonic µs).
async fn kubelet_runs(c: &Container) -> u64 {
    c.until(
        "the kubelet running",
        Duration::from_secs(40),
        move || async move {
            (c.show_unit("kubelet", "ActiveState").await == "active"
                && c.show_unit("kubelet", "SubState").await == "running")
                .then_some(())
        },
    )
    .await;
    c.show_unit("kubelet", "ExecMainStartTimestampMonotonic")
        .await
        .parse()
        .unwrap()
}

/// Waits (at most `limit`) until the client certificate is on disk.
async fn certificate_within(c: &Container, limit: Duration) {
    c.until("the certificate", limit, move || async move {
        c.read(CERT)
            .await
            .filter(|p| p.contains("BEGIN CERTIFICATE"))
    })
    .await;
}

fn csrs(tp: &TestPlane) -> usize {
    tp.csrs().len()
}

#[ignore = "needs root and systemd-nspawn: run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_boots_without_a_credential_then_joins_from_a_written_file_and_reboots() {
    let Setup {
        started,
        share,
        name,
    } = setup("ib");
    let s = share.path();
    let node = "image-node-a";
    let tp = plane(Approval::Auto).await;
    let image = build_image(&name, s, node, None).await;
    eprintln!("image built in {:?}", started.elapsed());

    // 1. First boot, no credential: the boot finishes (Container::boot_as waits at most
    // 60 s for running/degraded), the final stage ran, bootlet is active and says what it
    // waits for, the kubelet is held back, and doctor says so plainly.
    let booting = Instant::now();
    let container = Container::boot_as(&name, s, Boot::Image(&image, None)).await;
    eprintln!("first boot finished in {:?}", booting.elapsed());
    assert!(
        booting.elapsed() < Duration::from_secs(60),
        "the boot took {:?}",
        booting.elapsed()
    );
    let c = &container;
    booted_cleanly(c).await;
    assert!(
        c.show("StatusText")
            .await
            .contains("waiting for the bootstrap kubeconfig"),
        "{}",
        c.show("StatusText").await
    );
    kubelet_held(
        c,
        &["no kubeconfig", "waiting for the bootstrap kubeconfig"],
    )
    .await;
    let (ok, doctor) = c
        .exec(&["bootlet", "doctor", "--config", "/etc/bootlet/config.yaml"])
        .await;
    assert!(!ok, "{doctor}");
    assert!(
        doctor.contains("has not been given a bootstrap credential yet")
            && doctor.contains("kubeadm token create --print-join-command"),
        "{doctor}"
    );
    assert_eq!(csrs(&tp), 0);

    // 3. The bootstrap kubeconfig written as cloud-init's write_files or a script does (no
    // kubeadm, nobody runs systemctl): the certificate within 10 s, then the kubelet on it.
    std::fs::write(s.join("bootstrap-kubelet.conf"), tp.bootstrap_kubeconfig()).unwrap();
    let written = Instant::now();
    let copy = format!(
        "mkdir -p /etc/kubernetes && cp {}/bootstrap-kubelet.conf {BOOTSTRAP}",
        s.display()
    );
    let (ok, out) = c.exec(&["sh", "-c", &copy]).await;
    assert!(ok, "{out}");
    certificate_within(c, Duration::from_secs(10)).await;
    eprintln!("certificate {:?} after the file", written.elapsed());
    kubelet_runs(c).await;
    let (ok, out) = c
        .exec(&[
            "bootlet",
            "check-identity",
            "--config",
            "/etc/bootlet/config.yaml",
        ])
        .await;
    assert!(
        ok && out.contains(&format!("the identity of node {node} is in place")),
        "{out}"
    );
    assert_eq!(csrs(&tp), 1);

    // 5. Reboot: bootlet is READY from the certificate on disk before the kubelet starts,
    // and files no CSR.
    container.poweroff().await;
    let container = Container::boot_as(&format!("{name}-r"), s, Boot::Image(&image, None)).await;
    let c = &container;
    booted_cleanly(c).await;
    let kubelet_at = kubelet_runs(c).await;
    let ready_at: u64 = c
        .show("ActiveEnterTimestampMonotonic")
        .await
        .parse()
        .unwrap();
    assert!(
        ready_at > 0 && kubelet_at >= ready_at,
        "the kubelet ({kubelet_at}) started before bootlet was ready ({ready_at})"
    );
    let (_, journal) = c
        .exec(&[
            "journalctl",
            "-u",
            "bootlet",
            "--no-pager",
            "-o",
            "cat",
            "-b",
        ])
        .await;
    assert!(
        journal.contains("reusing the valid client certificate; no CSR needed"),
        "{journal}"
    );
    assert!(
        c.show("StatusText")
            .await
            .contains("client cert valid until"),
        "{}",
        c.show("StatusText").await
    );
    assert_eq!(csrs(&tp), 1, "a CSR after the reboot");
    eprintln!("done after {:?}", started.elapsed());
}

#[ignore = "needs root and systemd-nspawn: run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_approval_at_first_boot_holds_neither_the_boot_nor_the_kubelet_after_it() {
    let Setup {
        started,
        share,
        name,
    } = setup("im");
    let s = share.path();
    let node = "image-node-m";
    let tp = plane(Approval::Manual).await;
    let mut events = tp.events();
    let image = build_image(&name, s, node, Some(&tp.bootstrap_kubeconfig())).await;

    // 4. The boot completes while the CSR waits for a person; STATUS= and doctor say which
    // CSR and how to approve it; the kubelet is held and its journal says so too.
    let booting = Instant::now();
    let container = Container::boot_as(&name, s, Boot::Image(&image, None)).await;
    assert!(
        booting.elapsed() < Duration::from_secs(60),
        "the boot took {:?}",
        booting.elapsed()
    );
    let c = &container;
    booted_cleanly(c).await;
    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    let approve = format!("kubectl certificate approve {csr}");
    assert!(
        c.show("StatusText").await.contains(&approve),
        "{}",
        c.show("StatusText").await
    );
    kubelet_held(c, &["no kubeconfig", &approve]).await;
    let (_, doctor) = c
        .exec(&["bootlet", "doctor", "--config", "/etc/bootlet/config.yaml"])
        .await;
    assert!(doctor.contains(&csr), "{doctor}");
    assert_eq!(c.read(CERT).await, None);

    // Approved: the certificate, then the kubelet on it at its next start.
    tp.approve(&csr).unwrap();
    certificate_within(c, Duration::from_secs(10)).await;
    kubelet_runs(c).await;
    assert_eq!(tp.csrs().len(), 1);
    eprintln!("done after {:?}", started.elapsed());
}
