//! A node joined the way operators join nodes (issue 30, and issue 31's join from the boot's
//! final stage): an unmodified `kubeadm join` against the real control plane
//! (`testplane::kube` with `Options::kubeadm`: kubeadm itself prepared it, kube-scheduler and
//! kube-controller-manager on kubeadm's ports 10259 and 10257), on a machine booted under a
//! real systemd from an image with the package installed as the README says, the kubelet
//! (`kube kubelet`: the kubelet's own command line and `Run`, fake runtime) started by
//! `kubelet.service` and kubeadm's `10-kubeadm.conf` as their packages ship them.
//!
//! One machine, one sequence, as it happens on a node: the join from cloud-init's final
//! stage; the rotation; `kubeadm reset` and a second join with `--node-name`; manual
//! approval, kubeadm timing out with the CSR named, then succeeding once it is approved;
//! the node off past its certificate's expiry and back with `bootlet rejoin`.
//! The container shares the host's network (the control plane is on its loopback), so the
//! kubelet's ports are the defaults (10248, 10250) and this is the one test that uses them.
//!
//! Preflight errors ignored, each one the container cannot meet: `SystemVerification` (the
//! host is cgroup v1, which kubeadm's validator refuses; the test kubelet needs no cgroups)
//! and `FileContent--proc-sys-net-ipv4-ip_forward` (the host's network namespace, whose
//! forwarding the test does not change). Never a FileAvailable or Port check.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use testplane::kube::{build, Cluster, ComponentPorts, JoinCommand, Kubeadm};
use tokio::time::Instant;

use super::boot::image_from;
use super::package::build_deb;
use super::support::kube::{csrs_where, kubectl, node_ready};
use super::{setup, Boot, Container, Image, Setup, CERT, KUBELET_UNIT};

const IGNORE: &str =
    "--ignore-preflight-errors=SystemVerification,FileContent--proc-sys-net-ipv4-ip_forward";

/// kubeadm's drop-in as the kubeadm package ships it (`10-kubeadm.conf`).
const KUBEADM_DROPIN: &str = "[Service]\nEnvironment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\nEnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\nEnvironmentFile=-/etc/default/kubelet\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n";

/// A CRI endpoint for kubeadm's preflight where containerd's would be (`kube fake-cri`).
fn containerd_unit(kube: &Path) -> String {
    format!("[Unit]\nDescription=container runtime stand-in (kube fake-cri)\n[Service]\nExecStart={} fake-cri --listen unix:///var/run/containerd/containerd.sock\n[Install]\nWantedBy=multi-user.target\n", kube.display())
}

/// cloud-init's final stage running `runcmd: kubeadm join …`, after multi-user.target.
fn final_unit(join: &JoinCommand) -> String {
    format!(
        "[Unit]\nDescription=cloud-init final stage stand-in (runcmd: kubeadm join)\nAfter=multi-user.target\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/bin/kubeadm {} {IGNORE}\n[Install]\nWantedBy=multi-user.target\n",
        join.args().join(" ")
    )
}

async fn cluster() -> &'static Cluster {
    super::support::kube::cluster("kubeadm-node", |o| {
        o.kubeadm = Some(Kubeadm::new(ComponentPorts::Kubeadm));
        // Rotation within the test: 3-minute certificates (the real signer backdates
        // notBefore 5 minutes), rotating 36-84 s after issuance.
        o.cert_ttl = Duration::from_secs(180);
    })
    .await
}

/// The machine image: the package as the README installs it, the kubelet and kubeadm
/// packages' units, the final stage that joins.
async fn build_image(name: &str, share: &Path, join: &JoinCommand) -> Image {
    let deb = build_deb(share, "0.1.0-1").await;
    let kube = build::binary().expect("the Kubernetes components");
    std::fs::write(share.join("kubelet.service"), KUBELET_UNIT).unwrap();
    std::fs::write(share.join("10-kubeadm.conf"), KUBEADM_DROPIN).unwrap();
    std::fs::write(share.join("containerd.service"), containerd_unit(&kube)).unwrap();
    std::fs::write(share.join("final.service"), final_unit(join)).unwrap();
    let s = share.display();
    let k = kube.display();
    let script = format!(
        "ln -sf {k} /usr/bin/kubelet && ln -sf {k} /usr/bin/kubeadm \
         && cp {s}/kubelet.service {s}/containerd.service {s}/final.service /etc/systemd/system/ \
         && mkdir -p /etc/systemd/system/kubelet.service.d && cp {s}/10-kubeadm.conf /etc/systemd/system/kubelet.service.d/ \
         && dpkg -i {deb} \
         && ln -sf /usr/share/bootlet/kubelet.service.d/20-bootlet.conf /etc/systemd/system/kubelet.service.d/ \
         && sed -i 's/^renewLease: true$/renewLease: false/' /etc/bootlet/config.yaml \
         && systemctl daemon-reload && systemctl enable kubelet.service containerd.service final.service",
        deb = deb.display(),
    );
    image_from(name, share, &script).await
}

/// Until `check` holds (every second), at most `limit`; panics naming `what`.
async fn eventually<F, Fut>(what: &str, limit: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Until the Node is Ready, at most `limit`; else a panic with what the kubelet, bootlet
/// and the Node said.
async fn ready(c: &Cluster, m: &Container, node: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while node_ready(c, node).await.as_deref() != Some("True") {
        if Instant::now() >= deadline {
            let described = c.kubectl(&["describe", "node", node]).await;
            panic!(
                "Node {node} not Ready within {limit:?}\n{}{}\nkubelet:\n{}\nbootlet:\n{}",
                String::from_utf8_lossy(&described.stdout),
                String::from_utf8_lossy(&described.stderr),
                journal(m, "kubelet")
                    .await
                    .lines()
                    .rev()
                    .take(60)
                    .collect::<Vec<_>>()
                    .join("\n"),
                journal(m, "bootlet").await
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The CSRs of the kubelet-client signer, oldest first.
async fn client_csrs(c: &Cluster) -> Vec<Value> {
    csrs_where(c, |csr| {
        csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    })
    .await
}

fn requester(csr: &Value) -> &str {
    csr["spec"]["username"].as_str().unwrap_or_default()
}

fn name_of(csr: &Value) -> String {
    csr["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The journal of `unit` this boot, as text.
async fn journal(c: &Container, unit: &str) -> String {
    c.exec(&["journalctl", "-u", unit, "--no-pager", "-o", "cat", "-b"])
        .await
        .1
}

/// The CN of the node's current client certificate.
async fn subject(c: &Container) -> String {
    let (ok, out) = c
        .exec(&["openssl", "x509", "-noout", "-subject", "-in", CERT])
        .await;
    assert!(ok, "{out}");
    out
}

#[ignore = "needs root and systemd-nspawn: run bash tests/run.sh"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_join_reset_and_manual_approval_on_a_node_under_systemd() {
    let Setup {
        started,
        share,
        name,
    } = setup("kj");
    let s = share.path();
    let c = cluster().await;
    let join = c
        .join_command(Duration::from_secs(3600))
        .await
        .expect("kubeadm token create --print-join-command");
    let token_id = join.token.split('.').next().unwrap().to_string();
    let image = build_image(&name, s, &join).await;
    eprintln!("cluster and image in {:?}", started.elapsed());

    // 1. The image boots; its final stage runs `kubeadm join`, unmodified: exit 0, one CSR
    // filed by bootlet (not the kubelet) and auto-approved, the Node Ready, the bootstrap
    // kubeconfig deleted by kubeadm, bootlet carrying on.
    let container = Container::boot_as(&name, s, Boot::Image(&image, None)).await;
    let m = &container;
    // The machine's host name (systemd sets it from the image's /etc/hostname), lower-cased:
    // what kubeadm, the kubelet and bootlet all take without --node-name.
    let node = m
        .read("/proc/sys/kernel/hostname")
        .await
        .unwrap()
        .trim()
        .to_lowercase();
    eventually(
        "the final stage to finish",
        Duration::from_secs(240),
        || async { m.show_unit("final", "ActiveState").await != "activating" },
    )
    .await;
    let joined = journal(m, "final").await;
    assert_eq!(
        m.show_unit("final", "Result").await,
        "success",
        "kubeadm join failed:\n{joined}\nkubelet:\n{}\nbootlet:\n{}",
        journal(m, "kubelet").await,
        journal(m, "bootlet").await
    );
    assert!(
        joined.contains("This node has joined the cluster"),
        "{joined}"
    );
    ready(c, m, &node, Duration::from_secs(60)).await;
    let csrs = client_csrs(c).await;
    assert_eq!(csrs.len(), 1, "{csrs:#?}");
    let first = &csrs[0];
    assert_eq!(requester(first), format!("system:bootstrap:{token_id}"));
    let approved = first["status"]["conditions"][0]["reason"].clone();
    assert_eq!(approved, "AutoApproved", "{first:#}");
    let bootlets = journal(m, "bootlet").await;
    assert!(
        bootlets.contains(&format!("filed CSR csr={}", name_of(first))),
        "the CSR is not bootlet's:\n{bootlets}"
    );
    assert_eq!(m.read("/etc/kubernetes/bootstrap-kubelet.conf").await, None);
    assert!(subject(m).await.contains(&format!("system:node:{node}")));
    let (ok, doctor) = m
        .exec(&["bootlet", "doctor", "--config", "/etc/bootlet/config.yaml"])
        .await;
    assert!(ok, "doctor on the joined node:\n{doctor}");
    let (_, status) = m
        .exec(&["systemctl", "status", "--no-pager", "bootlet"])
        .await;
    assert!(status.contains("client cert valid until"), "{status}");
    // bootlet's metrics on their default port beside kube-scheduler's 10259 and
    // kube-controller-manager's 10257 on the same loopback.
    let (ok, metrics) = m
        .exec(&["python3", "-c", "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:10271/healthz').read().decode())"])
        .await;
    assert!(ok && metrics.contains("ok"), "{metrics}");
    for (what, port) in [
        ("kube-scheduler", 10259),
        ("kube-controller-manager", 10257),
    ] {
        assert_eq!(c.component_port(what).await, Some(port));
    }
    eprintln!("joined after {:?}", started.elapsed());

    // The rotation, authenticated by bootlet's own certificate, and the kubelet follows.
    let rotated = async {
        loop {
            let csrs = client_csrs(c).await;
            if let Some(r) = csrs
                .iter()
                .find(|r| requester(r) == format!("system:node:{node}"))
            {
                return name_of(r);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    };
    let rotation = tokio::time::timeout(Duration::from_secs(150), rotated)
        .await
        .expect("no rotation CSR within 150 s");
    eventually(
        "bootlet installs the rotated certificate",
        Duration::from_secs(30),
        || async {
            journal(m, "bootlet")
                .await
                .matches("client certificate installed")
                .count()
                >= 2
        },
    )
    .await;
    ready(c, m, &node, Duration::from_secs(60)).await;
    eprintln!("rotated ({rotation}) after {:?}", started.elapsed());

    // 4 and 2. `kubeadm reset`: bootlet writes nothing back; the Node deleted; a second join,
    // with `--node-name` other than the host name: its preflight passes, bootlet's CSR and
    // certificate are for that name, and the kubelet registers it.
    let (ok, out) = m
        .exec_for(Duration::from_secs(120), &["kubeadm", "reset", "-f"])
        .await;
    assert!(ok, "kubeadm reset: {out}");
    eventually(
        "bootlet to see the reset",
        Duration::from_secs(20),
        || async {
            journal(m, "bootlet")
                .await
                .contains("the kubeconfig was removed")
        },
    )
    .await;
    kubectl(c, &["delete", "node", &node]).await;
    assert_eq!(
        m.read("/etc/kubernetes/kubelet.conf").await,
        None,
        "kubelet.conf written back"
    );
    let other = format!("{node}-x");
    let mut args = join.args();
    args.extend(["--node-name".into(), other.clone(), IGNORE.into()]);
    let mut argv = vec!["kubeadm"];
    argv.extend(args.iter().map(String::as_str));
    let (ok, out) = m.exec_for(Duration::from_secs(360), &argv).await;
    assert!(
        ok,
        "the second kubeadm join:\n{out}\nbootlet:\n{}",
        journal(m, "bootlet").await
    );
    ready(c, m, &other, Duration::from_secs(60)).await;
    assert!(subject(m).await.contains(&format!("system:node:{other}")));
    let csrs = client_csrs(c).await;
    let second = csrs.last().unwrap();
    assert_eq!(requester(second), format!("system:bootstrap:{token_id}"));
    assert!(
        journal(m, "bootlet")
            .await
            .contains(&format!("filed CSR csr={}", name_of(second))),
        "the second CSR is not bootlet's"
    );
    eprintln!("reset and joined as {other} after {:?}", started.elapsed());

    // 3. Manual approval: nothing approves bootstrap CSRs. kubeadm times out (its
    // kubeletHealthCheck, 40 s here) naming no hang, and the kubelet's status and journal it
    // points at name the pending CSR and the approve command; approved, the node joins.
    let (ok, out) = m
        .exec_for(Duration::from_secs(120), &["kubeadm", "reset", "-f"])
        .await;
    assert!(ok, "kubeadm reset: {out}");
    kubectl(c, &["delete", "node", &other]).await;
    kubectl(
        c,
        &[
            "delete",
            "clusterrolebinding",
            "kubeadm:node-autoapprove-bootstrap",
        ],
    )
    .await;
    let config = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: {}\n    token: {}\n    caCertHashes: [\"{}\"]\nnodeRegistration:\n  ignorePreflightErrors: [SystemVerification, FileContent--proc-sys-net-ipv4-ip_forward]\ntimeouts:\n  kubeletHealthCheck: 40s\n",
        join.server, join.token, join.ca_cert_hash
    );
    std::fs::write(s.join("join.yaml"), config).unwrap();
    let conf = s.join("join.yaml").display().to_string();
    let begun = Instant::now();
    let (ok, out) = m
        .exec_for(
            Duration::from_secs(300),
            &["kubeadm", "join", "--config", &conf],
        )
        .await;
    assert!(!ok, "kubeadm join succeeded without an approval:\n{out}");
    assert!(
        begun.elapsed() < Duration::from_secs(200),
        "kubeadm took {:?}",
        begun.elapsed()
    );
    let pending = client_csrs(c).await.last().cloned().unwrap();
    let csr = name_of(&pending);
    assert!(pending["status"]["conditions"].is_null(), "{pending:#}");
    let approve = format!("kubectl certificate approve {csr}");
    let (_, kubelet_status) = m
        .exec(&["systemctl", "status", "--no-pager", "-n", "20", "kubelet"])
        .await;
    let kubelet_journal = journal(m, "kubelet").await;
    assert!(
        kubelet_status.contains(&approve) || kubelet_journal.contains(&approve),
        "the kubelet's status and journal do not name the CSR:\n{kubelet_status}\n{kubelet_journal}"
    );
    assert!(m.show("StatusText").await.contains(&approve));
    kubectl(c, &["certificate", "approve", &csr]).await;
    ready(c, m, &node, Duration::from_secs(90)).await;

    // The other side: approved while kubeadm waits, kubeadm succeeds.
    let (ok, out) = m
        .exec_for(Duration::from_secs(120), &["kubeadm", "reset", "-f"])
        .await;
    assert!(ok, "kubeadm reset: {out}");
    kubectl(c, &["delete", "node", &node]).await;
    let before = client_csrs(c).await.len();
    let joining = {
        let argv: Vec<String> = std::iter::once("kubeadm".to_string())
            .chain(join.args())
            .chain([IGNORE.to_string()])
            .collect();
        let leader = m.leader;
        tokio::spawn(async move {
            let t = leader.to_string();
            let mut all = vec!["-t".to_string(), t, "-a".to_string()];
            all.extend(argv);
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            super::run_for(Duration::from_secs(300), "nsenter", &all).await
        })
    };
    let csr = loop {
        let csrs = client_csrs(c).await;
        if csrs.len() > before {
            break name_of(csrs.last().unwrap());
        }
        assert!(
            !joining.is_finished(),
            "kubeadm ended before a CSR was filed"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    kubectl(c, &["certificate", "approve", &csr]).await;
    let (ok, out) = joining.await.unwrap();
    assert!(
        ok && out.contains("This node has joined the cluster"),
        "{out}"
    );
    ready(c, m, &node, Duration::from_secs(60)).await;
    eprintln!(
        "approved while kubeadm waited, after {:?}",
        started.elapsed()
    );

    // 6. Back after a long downtime: the node off (bootlet and the kubelet stopped) past its
    // certificate's expiry, kubeadm's bootstrap kubeconfig long deleted, no CA key on the
    // node. At boot doctor names exactly that and the one fix; `bootlet rejoin` with a fresh
    // token and the CA's pin brings it back with one new CSR.
    kubectl(
        c,
        &[
            "create",
            "clusterrolebinding",
            "kubeadm:node-autoapprove-bootstrap",
            "--clusterrole=system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "--group=system:bootstrappers:kubeadm:default-node-token",
        ],
    )
    .await;
    let (ok, out) = m.exec(&["systemctl", "stop", "kubelet", "bootlet"]).await;
    assert!(ok, "{out}");
    let flags = ["--config", "/etc/bootlet/config.yaml"];
    eventually(
        "the certificate to expire",
        Duration::from_secs(240),
        || async {
            let mut argv = vec!["bootlet", "check-identity"];
            argv.extend(flags);
            let (ok, out) = m.exec(&argv).await;
            !ok && out.contains("expired")
        },
    )
    .await;
    // The boot: both start (the kubelet is refused by its check until the rejoin).
    let (ok, out) = m
        .exec(&["systemctl", "start", "--no-block", "bootlet", "kubelet"])
        .await;
    assert!(ok, "{out}");
    let mut argv = vec!["bootlet", "doctor"];
    argv.extend(flags);
    let (ok, doctor) = m.exec(&argv).await;
    assert!(
        !ok && doctor.contains("the client certificate expired at")
            && doctor.contains("no bootstrap credential")
            && doctor.contains("fix: bootlet rejoin --token"),
        "{doctor}"
    );
    let fresh = c
        .join_command(Duration::from_secs(3600))
        .await
        .expect("a fresh token");
    let before = client_csrs(c).await.len();
    let mut argv = vec![
        "bootlet",
        "rejoin",
        "--token",
        &fresh.token,
        "--discovery-token-ca-cert-hash",
        &fresh.ca_cert_hash,
    ];
    argv.extend(flags);
    let (ok, out) = m.exec_for(Duration::from_secs(360), &argv).await;
    assert!(ok && out.contains("rejoined"), "bootlet rejoin:\n{out}");
    assert!(!out.contains(&fresh.token), "the token in rejoin's output");
    ready(c, m, &node, Duration::from_secs(90)).await;
    let csrs = client_csrs(c).await;
    assert_eq!(csrs.len(), before + 1, "one new CSR for the rejoin");
    assert_eq!(
        requester(csrs.last().unwrap()),
        format!(
            "system:bootstrap:{}",
            fresh.token.split('.').next().unwrap()
        )
    );
    eprintln!(
        "rejoined after a long downtime, after {:?}",
        started.elapsed()
    );
    drop(container);
}
