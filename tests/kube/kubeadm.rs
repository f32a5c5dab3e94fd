//! The Kubernetes side of the kubeadm tests, without systemd: a control plane prepared for
//! `kubeadm join` by the pinned release's kubeadm itself (`Options::kubeadm`: upload-config,
//! bootstrap-token, kube-scheduler beside kube-controller-manager), `kubeadm token create
//! --print-join-command`, and the test kubelet (`kube kubelet`, testplane/kube/kubelet.go:
//! the kubelet's own command line, config file and run, with a fake runtime, cAdvisor and
//! container manager) started with the command line kubeadm's drop-ins build and the
//! KubeletConfiguration kubeadm uploaded, as `kubeadm join` writes it to config.yaml.
//!
//! The kubelets here serve on free ports (`healthzPort`, `port` in their config.yaml), so
//! that they run beside the rest of the suite; the nspawn tests use the defaults.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine;

use support::kube::{
    block_on, bootlet, bootstrap_user, csrs_of, eventually, get_json, kubectl, kubectl_as, lease,
    node_dir, node_ready, REAL_WAIT,
};
use support::{path, NodeDir};
use testplane::kube::procs::{free_port, Proc};
use testplane::kube::{Cluster, ComponentPorts, Kubeadm};
use testplane::pki::{Ca, LeafSpec};

async fn cluster() -> &'static Cluster {
    support::kube::cluster("kubeadm", |o| {
        o.kubeadm = Some(Kubeadm::new(ComponentPorts::Free))
    })
    .await
}

/// `openssl`'s sha256 of the CA's SubjectPublicKeyInfo, as kubeadm's hash (`sha256:HEX`).
async fn ca_hash(ca: &Path) -> String {
    let script = format!(
        "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -hex",
        ca.display()
    );
    let (ok, out) = support::run("sh", &["-c", &script]).await;
    assert!(ok, "openssl: {out}");
    format!("sha256:{}", out.split_whitespace().last().unwrap())
}

/// The KubeletConfiguration kubeadm uploaded (what `kubeadm join` writes to
/// /var/lib/kubelet/config.yaml), for a kubelet in `dir` serving /healthz on `healthz` and
/// its API on `port`: top-level keys replaced, the client CA at the cluster's.
async fn config_yaml(c: &Cluster, dir: &Path, healthz: u16, port: u16) -> PathBuf {
    let kubeadms = kubectl(
        c,
        &[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "kubelet-config",
            "-o",
            "jsonpath={.data.kubelet}",
        ],
    )
    .await;
    assert!(
        kubeadms.contains("clientCAFile: /etc/kubernetes/pki/ca.crt"),
        "{kubeadms}"
    );
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let set = [
        ("healthzPort", healthz.to_string()),
        ("port", port.to_string()),
        ("staticPodPath", path(&manifests)),
    ];
    let mut yaml: String = kubeadms
        .lines()
        .filter(|l| !set.iter().any(|(k, _)| l.starts_with(&format!("{k}:"))))
        .map(|l| format!("{l}\n"))
        .collect();
    for (k, v) in &set {
        yaml.push_str(&format!("{k}: {v}\n"));
    }
    let yaml = yaml.replace(
        "clientCAFile: /etc/kubernetes/pki/ca.crt",
        &format!("clientCAFile: {}", path(&c.files().ca_crt)),
    );
    let file = dir.join("config.yaml");
    std::fs::write(&file, yaml).unwrap();
    file
}

/// The test kubelet with `args`, its log in `dir/logs/kubelet.log`; client-go re-reads
/// certificate files of open connections every 10 s (BOOTLET_CERT_RELOAD).
fn kubelet(c: &Cluster, dir: &Path, args: Vec<String>) -> Proc {
    Proc::spawn_env(
        c.bin(),
        dir,
        "kubelet",
        args,
        &[("BOOTLET_CERT_RELOAD", "10s")],
    )
    .expect("start the kubelet")
}

/// What every kubelet here is started with besides kubeadm's drop-in flags: where its
/// files go (a node directory instead of /var/lib/kubelet) and its address.
fn node_flags(dir: &NodeDir) -> Vec<String> {
    vec![
        format!("--root-dir={}", path(&dir.tmp.path().join("kubelet"))),
        format!("--cert-dir={}", path(&dir.cert_dir)),
        "--node-ip=127.0.0.1".into(),
    ]
}

async fn healthz(port: u16) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match support::http(addr, "GET", "/healthz").await {
        (200, body) => Some(body),
        _ => None,
    }
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn kubeadm_prepares_the_cluster_and_prints_a_join_command() {
    block_on(async {
        let c = cluster().await;
        let join = c
            .join_command(Duration::from_secs(3600))
            .await
            .expect("kubeadm token create --print-join-command");
        assert_eq!(join.server, c.addr().to_string(), "{}", join.line);
        assert!(
            join.line.starts_with("kubeadm join "),
            "kubeadm's own line: {}",
            join.line
        );
        assert_eq!(join.ca_cert_hash, ca_hash(&c.files().ca_crt).await);

        // What kubeadm join reads, read with the new token as join reads it.
        let tmp = tempfile::tempdir().unwrap();
        let conf = tmp.path().join("bootstrap-kubelet.conf");
        std::fs::write(&conf, c.kubeconfig_for_token(&join.token)).unwrap();
        let get = |ns: &'static str, cm: &'static str, key: &'static str| {
            let conf = conf.clone();
            async move {
                let jsonpath = format!("jsonpath={{.data.{key}}}");
                let (ok, out) = kubectl_as(
                    c,
                    &conf,
                    &["get", "configmap", "-n", ns, cm, "-o", &jsonpath],
                )
                .await;
                assert!(ok, "{ns}/{cm} as the bootstrap token: {out}");
                out
            }
        };
        let cluster_config = get("kube-system", "kubeadm-config", "ClusterConfiguration").await;
        for want in [
            "apiVersion: kubeadm.k8s.io/v1beta4".to_string(),
            format!("controlPlaneEndpoint: {}", c.addr()),
            format!("kubernetesVersion: {}", c.release()),
        ] {
            assert!(cluster_config.contains(&want), "{want}: {cluster_config}");
        }
        let kubelet_config = get("kube-system", "kubelet-config", "kubelet").await;
        for want in [
            "cgroupsPerQOS: false",
            "failSwapOn: false",
            "rotateCertificates: true",
            "healthzPort: 10248",
        ] {
            assert!(kubelet_config.contains(want), "{want}: {kubelet_config}");
        }
        let id = join.token.split('.').next().unwrap();
        let jws = format!("jws-kubeconfig-{id}");
        let info = get_json(c, &["configmap", "-n", "kube-public", "cluster-info"]).await;
        assert!(
            info["data"][&jws].is_string(),
            "signed by the bootstrapsigner: {info:#}"
        );
        // kubeadm:get-nodes: a missing Node is NotFound, not Forbidden.
        let (ok, out) = kubectl_as(c, &conf, &["get", "node", "no-such-node"]).await;
        assert!(!ok && out.contains("NotFound"), "{out}");
        let secret = get_json(
            c,
            &[
                "secret",
                "-n",
                "kube-system",
                &format!("bootstrap-token-{id}"),
            ],
        )
        .await;
        assert_eq!(secret["data"]["usage-bootstrap-signing"], "dHJ1ZQ==");
        assert_eq!(secret["data"]["usage-bootstrap-authentication"], "dHJ1ZQ==");
        let expiration = secret["data"]["expiration"].as_str().unwrap();
        let out = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(expiration)
                .unwrap(),
        )
        .unwrap();
        let expires: jiff::Timestamp = out.trim().parse().unwrap();
        let left = (expires - jiff::Timestamp::now())
            .total(jiff::Unit::Second)
            .unwrap();
        assert!((3000.0..=3600.0).contains(&left), "the TTL given: {out}");

        // kube-scheduler runs and serves; kube-controller-manager runs kubeadm's controllers.
        let port = c.component_port("kube-scheduler").await.expect("a port");
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok());
        let kcm = c.component_args("kube-controller-manager").await.unwrap();
        assert!(
            kcm.contains(&"--controllers=*,bootstrapsigner,tokencleaner".to_string()),
            "{kcm:?}"
        );
    })
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn the_kubelet_answers_its_version_and_fails_without_credentials() {
    block_on(async {
        let c = cluster().await;
        // kubeadm's KubeletVersion preflight runs `kubelet --version`: a link named kubelet.
        let link = testplane::kube::build::link("kubelet").unwrap();
        let out = tokio::process::Command::new(&link)
            .arg("--version")
            .output()
            .await
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("Kubernetes {}\n", c.release())
        );
        let out = c.kubeadm(&["version", "-o", "short"]).await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            c.release(),
            "{out:?}"
        );

        // No kubelet.conf and no bootstrap kubeconfig: the kubelet's own error, exit 1 (and
        // systemd's Restart=always RestartSec=10 tries again), with rotation on (the
        // config's default) and off (bootlet's drop-in).
        for (drop_in, error) in [
            (None, "unable to load kubeconfig"),
            (Some("--rotate-certificates=false"), "invalid kubeconfig"),
        ] {
            let (dir, _) = node_dir(c).await;
            let config = config_yaml(
                c,
                dir.tmp.path(),
                free_port().unwrap(),
                free_port().unwrap(),
            )
            .await;
            let mut args = vec![format!("--kubeconfig={}", path(&dir.kubeconfig))];
            args.extend(drop_in.map(String::from));
            args.push(format!("--config={}", path(&config)));
            args.push("--hostname-override=kubeadm-nocreds".into());
            args.extend(node_flags(&dir));
            let mut p = kubelet(c, dir.tmp.path(), args);
            let status = eventually(REAL_WAIT, "the kubelet to exit", || {
                let s = p.exited();
                async move { s }
            })
            .await;
            let log = p.tail(20);
            assert_eq!(status.code(), Some(1), "{log}");
            assert!(log.contains(error), "{error}: {log}");
        }
    })
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn the_kubelet_with_kubeadms_flags_registers_on_bootlets_identity() {
    block_on(async {
        let c = cluster().await;
        let node = "kubeadm-bootlet";
        let (dir, token) = node_dir(c).await;
        let agent = bootlet(&dir, node, &[]);
        agent
            .wait_for_log("ready: client certificate and kubeconfig in place")
            .await;
        let (healthz_port, port) = (free_port().unwrap(), free_port().unwrap());
        let config = config_yaml(c, dir.tmp.path(), healthz_port, port).await;
        // 10-kubeadm.conf with bootlet's drop-in (KUBELET_KUBECONFIG_ARGS replaced), the
        // config kubeadm wrote, kubeadm-flags.env (a --node-name unlike the host name, taints).
        let mut args = vec![
            format!("--kubeconfig={}", path(&dir.kubeconfig)),
            "--rotate-certificates=false".into(),
            format!("--config={}", path(&config)),
            format!("--hostname-override={}", node.to_uppercase()),
            "--register-with-taints=bootlet.dev/kubeadm=test:NoSchedule".into(),
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock".into(),
        ];
        args.extend(node_flags(&dir));
        let k = kubelet(c, dir.tmp.path(), args);
        eventually(REAL_WAIT, "the kubelet's Node Ready", || async {
            (node_ready(c, node).await.as_deref() == Some("True")).then_some(())
        })
        .await;
        assert_eq!(healthz(healthz_port).await.as_deref(), Some("ok"));
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok());
        let n = get_json(c, &["node", node, "--show-managed-fields"]).await;
        assert_eq!(
            n["spec"]["taints"][0]["key"], "bootlet.dev/kubeadm",
            "{n:#}"
        );
        assert!(
            n["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["manager"] == "kubelet"),
            "registered by the kubelet's code: {n:#}"
        );
        assert_eq!(
            n["metadata"]["labels"]["kubernetes.io/hostname"], node,
            "--hostname-override lower-cased"
        );
        let l = eventually(REAL_WAIT, "the kubelet's Lease", || lease(c, node)).await;
        assert_eq!(l["spec"]["holderIdentity"], node);
        // One CSR, bootlet's: the kubelet neither bootstrapped nor rotated.
        assert_eq!(csrs_of(c, &[&bootstrap_user(&token)]).await.len(), 1);
        assert!(
            csrs_of(c, &[&format!("system:node:{node}")])
                .await
                .iter()
                .all(|r| r["spec"]["signerName"] != "kubernetes.io/kube-apiserver-client-kubelet"),
            "no client rotation by the kubelet"
        );
        k.stop().await;
        agent.terminate().await;
    })
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn without_bootlet_the_kubelet_bootstraps_itself() {
    block_on(async {
        let c = cluster().await;
        let node = "kubeadm-own";
        let (dir, token) = node_dir(c).await;
        let (healthz_port, port) = (free_port().unwrap(), free_port().unwrap());
        let config = config_yaml(c, dir.tmp.path(), healthz_port, port).await;
        // 10-kubeadm.conf as the kubeadm package ships it.
        let mut args = vec![
            format!("--bootstrap-kubeconfig={}", path(&dir.bootstrap)),
            format!("--kubeconfig={}", path(&dir.kubeconfig)),
            format!("--config={}", path(&config)),
            format!("--hostname-override={node}"),
        ];
        args.extend(node_flags(&dir));
        let k = kubelet(c, dir.tmp.path(), args);
        eventually(
            REAL_WAIT,
            "the kubelet's own TLS bootstrap and Node Ready",
            || async {
                (dir.kubeconfig.exists()
                    && dir.current().exists()
                    && node_ready(c, node).await.as_deref() == Some("True"))
                .then_some(())
            },
        )
        .await;
        assert_eq!(healthz(healthz_port).await.as_deref(), Some("ok"));
        let csrs = csrs_of(c, &[&bootstrap_user(&token)]).await;
        assert_eq!(csrs.len(), 1, "{csrs:#?}");
        let conf = std::fs::read_to_string(&dir.kubeconfig).unwrap();
        assert!(
            conf.contains(&path(&dir.current())),
            "kubelet.conf names the cert store: {conf}"
        );
        k.stop().await;
    })
}

/// A client certificate for `node` signed by the cluster CA, valid from a minute back to
/// `ahead` forward, written atomically as the kubelet's cert store writes it (cert, key).
fn node_cert(c: &Cluster, node: &str, pem: &Path, ahead: Duration) -> SystemTime {
    let ca = Ca::load_or_create(c.state_dir()).unwrap();
    let now = testplane::wall_now();
    let not_after = now + ahead;
    let spec = LeafSpec::client(
        &format!("system:node:{node}"),
        vec!["system:nodes".into()],
        now - Duration::from_secs(60),
        not_after,
    );
    let (cert, key) = ca.issue_with_new_key(&spec).unwrap();
    let tmp = pem.with_extension("tmp");
    std::fs::write(&tmp, format!("{cert}{key}")).unwrap();
    std::fs::rename(&tmp, pem).unwrap();
    not_after
}

/// The Lease's renewTime.
async fn renewed(c: &Cluster, node: &str) -> Option<jiff::Timestamp> {
    lease(c, node).await?["spec"]["renewTime"]
        .as_str()?
        .parse()
        .ok()
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn the_kubelet_follows_a_rotated_client_certificate() {
    block_on(async {
        let c = cluster().await;
        let node = "kubeadm-rotated";
        let tmp = tempfile::tempdir().unwrap();
        let pki = tmp.path().join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let pem = pki.join("kubelet-client-current.pem");
        // kubelet.conf as the kubelet's TLS bootstrap writes it: the pair by file name.
        let conf = tmp.path().join("kubelet.conf");
        std::fs::write(
            &conf,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    \
                 server: {}\n    certificate-authority: {}\nusers:\n- name: default-auth\n  \
                 user:\n    client-certificate: {pem}\n    client-key: {pem}\ncontexts:\n\
                 - name: default-context\n  context:\n    cluster: default-cluster\n    \
                 user: default-auth\ncurrent-context: default-context\n",
                c.url(),
                path(&c.files().ca_crt),
                pem = path(&pem),
            ),
        )
        .unwrap();
        let first = node_cert(c, node, &pem, Duration::from_secs(45));
        let (healthz_port, port) = (free_port().unwrap(), free_port().unwrap());
        let config = config_yaml(c, tmp.path(), healthz_port, port).await;
        let k = kubelet(
            c,
            tmp.path(),
            vec![
                format!("--kubeconfig={}", path(&conf)),
                "--rotate-certificates=false".into(),
                format!("--config={}", path(&config)),
                format!("--hostname-override={node}"),
                format!("--root-dir={}", path(&tmp.path().join("kubelet"))),
                format!("--cert-dir={}", path(&pki)),
                "--node-ip=127.0.0.1".into(),
            ],
        );
        eventually(REAL_WAIT, "the kubelet's Node Ready and Lease", || async {
            (node_ready(c, node).await.as_deref() == Some("True")
                && renewed(c, node).await.is_some())
            .then_some(())
        })
        .await;
        // Rotated (as bootlet does: a new pair renamed into place); the first then expires.
        node_cert(c, node, &pem, Duration::from_secs(3600));
        let expired = jiff::Timestamp::try_from(first).unwrap();
        let wait = first
            .duration_since(testplane::wall_now())
            .unwrap_or_default();
        tokio::time::sleep(wait).await;
        // Renewals after the first certificate's end: the kubelet uses the new one (open
        // connections re-read the files every 10 s here).
        let after = expired + jiff::SignedDuration::from_secs(11);
        eventually(
            REAL_WAIT,
            "a Lease renewal on the new certificate",
            || async { renewed(c, node).await.filter(|t| *t > after) },
        )
        .await;
        assert_eq!(node_ready(c, node).await.as_deref(), Some("True"));
        k.stop().await;
    })
}

/// kubeadm's own preflight, in a network namespace of its own (the host's loopback has
/// the test clusters' ports on it), with bootlet running from a config that names no
/// address: `kubeadm init phase preflight` for a control-plane node binds every port it
/// checks (6443, 10259, 10257, 10250, 2379, 2380), so bootlet's default port must be
/// none of them. The control: bootlet on kube-scheduler's 10259, its default until
/// 2026-12, makes the same preflight name `Port-10259`.
#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn kubeadms_port_preflight_passes_with_bootlet_on_its_default_port() {
    let kube = testplane::kube::build::binary().expect("the kube binary");
    let release = testplane::kube::build::release().expect("the pinned release");
    let run = |metrics: Option<&str>| {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let mut config = format!(
            "bootstrapKubeconfig: {0}/bootstrap-kubelet.conf\nkubeconfig: {0}/kubelet.conf\n\
             certDir: {0}/pki\nnodeName: preflight\n",
            d.display()
        );
        if let Some(addr) = metrics {
            config.push_str(&format!("metricsBindAddress: \"{addr}\"\n"));
        }
        std::fs::write(d.join("config.yaml"), config).unwrap();
        // One namespace for the three: the CRI stand-in kubeadm's CRI checks and image
        // pulls talk to, bootlet (waiting for a bootstrap kubeconfig that never comes,
        // its metrics listener bound from the start), and the preflight once bootlet
        // listens (its socket in /proc/net/tcp, state 0A).
        let script = r#"
set -eu
ip link set lo up
# kubeadm takes its API server address from the default route's interface and refuses
# loopback; a bridge is an interface the namespace may create without kernel modules.
ip link add node0 type bridge
ip addr add 10.254.0.1/24 dev node0
ip link set node0 up
ip route add default via 10.254.0.254 dev node0
"$KUBE" fake-cri --listen "unix://$D/cri.sock" >"$D/cri.log" 2>&1 &
# A NOTIFY_SOCKET, as under systemd: bootlet waits for the bootstrap kubeconfig instead
# of exiting (nobody listens there; a notification that fails is a debug line).
NOTIFY_SOCKET="$D/notify" "$BOOTLET" --config "$D/config.yaml" >"$D/bootlet.log" 2>&1 &
bootlet=$!
port=$(printf '%04X' "$PORT")
i=0
until grep -q ":$port 00000000:0000 0A" /proc/net/tcp && [ -S "$D/cri.sock" ]; do
  i=$((i+1)); [ $i -lt 400 ] || { echo "bootlet never listened on $PORT"; cat "$D/bootlet.log"; exit 3; }
  kill -0 $bootlet || { cat "$D/bootlet.log"; exit 4; }
  sleep 0.05
done
echo "bootlet listens on $PORT"
cat >"$D/kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
nodeRegistration:
  criSocket: unix://$D/cri.sock
  ignorePreflightErrors: [all]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $RELEASE
EOF
"$KUBE" kubeadm init phase preflight --config "$D/kubeadm.yaml" 2>&1
"#;
        let port = metrics
            .unwrap_or(bootlet::defaults::DEFAULT_METRICS_BIND_ADDRESS)
            .rsplit(':')
            .next()
            .unwrap()
            .to_string();
        let out = std::process::Command::new("unshare")
            // A PID namespace too: when the script ends, the kernel kills what it left
            // running (the CRI stand-in, bootlet), which would otherwise hold the pipes.
            .args([
                "--user",
                "--map-root-user",
                "--net",
                "--pid",
                "--fork",
                "--kill-child",
                "sh",
                "-c",
                script,
            ])
            .env("KUBE", &kube)
            .env("BOOTLET", env!("CARGO_BIN_EXE_bootlet"))
            .env("D", d)
            .env("PORT", &port)
            .env("RELEASE", &release)
            .output()
            .expect("unshare");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "preflight in a namespace:\n{text}");
        text
    };

    let ours = run(None);
    // The checks ran: kubeadm's header, and the warnings of the checks this host fails
    // (no kubelet unit, not a real node): "all" turns every error into a warning.
    assert!(ours.contains("bootlet listens on 10271"), "{ours}");
    assert!(
        ours.contains("[preflight] Running pre-flight checks"),
        "{ours}"
    );
    assert!(ours.contains("[WARNING"), "{ours}");
    assert!(
        !ours.contains("[WARNING Port-"),
        "a port kubeadm needs is taken:\n{ours}"
    );

    let scheduler = run(Some("127.0.0.1:10259"));
    assert!(
        scheduler.contains("[WARNING Port-10259]: Port 10259 is in use"),
        "the control did not collide:\n{scheduler}"
    );
}
