//! A real Kubernetes control plane for bootlet's tests, benches and demo: etcd,
//! kube-apiserver and kube-controller-manager (and kube-scheduler, prepared by kubeadm
//! itself: `Options::kubeadm`, see `kubeadm.rs`) built from upstream (`testplane/kube`, see
//! `build`), one process each, configured the way kubeadm configures them where it matters
//! to a joining node, on loopback. `bootlet-testplane kube` is this in one command; tests
//! hold a `Cluster` per test binary. Unlike `TestPlane`, nothing here is imitated: what this
//! cluster says about Kubernetes is true.

pub mod build;
mod http;
mod kubeadm;
pub mod procs;
mod setup;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

pub use http::Auth;
pub use kubeadm::{ComponentPorts, JoinCommand, Kubeadm, KCM_PORT, SCHEDULER_PORT};
use procs::{free_port, Proc};
pub use setup::Files;

/// How long the API server may take to answer `/readyz` ok after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// How long kube-controller-manager may take to start its controllers.
const CONTROLLERS_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a new bootstrap token may take to authenticate (the token authenticator reads
/// Secrets through an informer).
const TOKEN_TIMEOUT: Duration = Duration::from_secs(60);
/// Poll period of those waits.
const POLL: Duration = Duration::from_millis(200);
/// Lifetime of the bootstrap tokens made here (kubeadm's default).
pub const TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("building the Kubernetes components: {0}")]
    Build(String),
    #[error("pki: {0}")]
    Pki(#[from] crate::pki::PkiError),
    #[error(transparent)]
    Testplane(#[from] crate::Error),
    #[error("rcgen: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{request}: {what}")]
    Http { request: String, what: String },
    #[error("{name} {why}; the last lines of {log}:\n{tail}")]
    Component {
        name: String,
        why: String,
        log: String,
        tail: String,
    },
    #[error("{0}")]
    Timeout(String),
}

/// Who approves kubelet-client CSRs: kube-controller-manager's csrapproving controller
/// (`Auto`: kubeadm's two auto-approve bindings exist) or nobody (`Manual`: they do not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approve {
    Auto,
    Manual,
}

/// Which CA kube-controller-manager signs kubelet client certificates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientSigner {
    /// The cluster CA, which also signed the API server's serving certificate (kubeadm).
    ClusterCa,
    /// A CA of its own (`--cluster-signing-kubelet-client-{cert,key}-file`), trusted by the
    /// API server beside the cluster CA through `--client-ca-file` (k3s, RKE2, Gardener).
    Separate,
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// The API server's address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Everything is written here, fresh at each start.
    pub state_dir: PathBuf,
    /// `--cluster-signing-duration`.
    pub cert_ttl: Duration,
    pub approve: Approve,
    pub client_signer: ClientSigner,
    /// kube-controller-manager's `--node-monitor-grace-period` (its default when None).
    pub node_monitor_grace_period: Option<Duration>,
    /// More kube-apiserver flags (e.g. `--max-requests-inflight=20` for the fleet bench).
    pub apiserver_args: Vec<String>,
    /// Prepare the cluster for `kubeadm join` by kubeadm itself and run kube-scheduler
    /// (see `kubeadm.rs`); None: the launcher creates kubeadm's objects itself.
    pub kubeadm: Option<Kubeadm>,
    /// Which pinned release runs the cluster: the newest (the default) or the oldest
    /// supported (the core set only: no kube-scheduler, so no `kubeadm` either).
    pub module: build::Module,
}

impl Options {
    pub fn new(state_dir: impl Into<PathBuf>) -> Options {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            state_dir: state_dir.into(),
            cert_ttl: crate::DEFAULT_CERT_TTL,
            approve: Approve::Auto,
            client_signer: ClientSigner::ClusterCa,
            node_monitor_grace_period: None,
            apiserver_args: vec![],
            kubeadm: None,
            module: build::Module::Newest,
        }
    }
}

/// A running cluster. Its processes stop with `shutdown`, or by themselves shortly after
/// this process exits.
pub struct Cluster {
    opts: Options,
    bin: PathBuf,
    release: String,
    addr: SocketAddr,
    files: Files,
    token: String,
    /// The components in start order (etcd, kube-apiserver, kube-controller-manager, and
    /// kube-scheduler with `Options::kubeadm`).
    components: Mutex<Vec<Component>>,
}

/// A component's flags, kept to start it again, and its process while it runs.
struct Component {
    name: &'static str,
    args: Vec<String>,
    proc: Option<Proc>,
}

// === impl Cluster ===

impl Cluster {
    /// Build the components if needed, start them, create kubeadm's objects and a bootstrap
    /// token, and return once `/readyz` is ok, the controllers run and the token authenticates.
    pub async fn start(opts: Options) -> Result<Cluster, KubeError> {
        let module = opts.module;
        if module == build::Module::Oldest && opts.kubeadm.is_some() {
            return Err(KubeError::Build(format!(
                "{}: the oldest release's module has no kubeadm or kube-scheduler",
                module.source_dir().display()
            )));
        }
        let bin = tokio::task::spawn_blocking(move || module.binary())
            .await
            .map_err(|e| KubeError::Build(e.to_string()))??;
        let release = module.release()?;
        let dir = opts.state_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|source| KubeError::Io {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let port = match opts.listen.port() {
            0 => free_port()?,
            p => p,
        };
        let addr = SocketAddr::new(opts.listen.ip(), port);
        let server = format!("https://{addr}");
        let files = setup::write_pki(&dir, &server, opts.client_signer)?;
        let (id, secret) = crate::faults::random_token();
        let cluster = Cluster {
            token: format!("{id}.{secret}"),
            opts,
            bin,
            release,
            addr,
            files,
            components: Mutex::new(Vec::new()),
        };
        let (etcd_client, etcd_peer) = (free_port()?, free_port()?);
        let etcd = vec![
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            "--unsafe-no-fsync".into(),
        ];
        cluster.add("etcd", etcd).await?;
        cluster
            .add("kube-apiserver", cluster.apiserver_args(etcd_client))
            .await?;
        cluster.wait_ready().await?;
        if cluster.opts.kubeadm.is_some() {
            cluster.kubeadm_prepare().await?;
        } else {
            let ca = cluster.files.ca_pem.clone();
            let mut objects = setup::kubeadm_objects(&server, &ca, cluster.opts.approve);
            objects.push(setup::token_object(&id, &secret, TOKEN_TTL));
            for (path, body) in objects {
                cluster.create(&path, &body).await?;
            }
        }
        cluster
            .add(
                "kube-controller-manager",
                cluster.controller_manager_args()?,
            )
            .await?;
        if let Some(args) = cluster.scheduler_args()? {
            cluster.add("kube-scheduler", args).await?;
        }
        cluster.wait_controllers(&id).await?;
        cluster.wait_token(&cluster.token).await?;
        cluster.wait_serving().await?;
        let conf = cluster.kubeconfig_for_token(&cluster.token);
        kubeconfig_write(&cluster.bootstrap_kubeconfig(), &conf)?;
        Ok(cluster)
    }

    fn apiserver_args(&self, etcd_client: u16) -> Vec<String> {
        let f = &self.files;
        let p = |p: &Path| p.display().to_string();
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            format!("--bind-address={}", self.addr.ip()),
            format!("--advertise-address={}", self.addr.ip()),
            format!("--secure-port={}", self.addr.port()),
            // A loopback advertise address cannot be an endpoint of the kubernetes Service.
            "--endpoint-reconciler-type=none".into(),
            format!("--tls-cert-file={}", p(&f.apiserver_crt)),
            format!("--tls-private-key-file={}", p(&f.apiserver_key)),
            format!("--client-ca-file={}", p(&f.client_ca)),
            "--enable-bootstrap-token-auth=true".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            format!("--service-account-key-file={}", p(&f.sa_pub)),
            format!("--service-account-signing-key-file={}", p(&f.sa_key)),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.96.0.0/12".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
        ];
        args.extend(self.opts.apiserver_args.iter().cloned());
        args
    }

    fn controller_manager_args(&self) -> Result<Vec<String>, KubeError> {
        let f = &self.files;
        let p = |p: &Path| p.display().to_string();
        let ca = (p(&f.ca_crt), p(&f.ca_key));
        let client = (p(&f.kubelet_signer_crt), p(&f.kubelet_signer_key));
        let mut args = vec![
            format!("--kubeconfig={}", p(&f.kcm_conf)),
            // No serving endpoint: nothing here scrapes it, and tests run several clusters.
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", p(&f.sa_key)),
            format!("--root-ca-file={}", p(&f.ca_crt)),
            // One flag pair per signer: the single --cluster-signing-{cert,key}-file cannot be
            // combined with a separate kubelet-client signer.
            format!("--cluster-signing-kubelet-client-cert-file={}", client.0),
            format!("--cluster-signing-kubelet-client-key-file={}", client.1),
            format!("--cluster-signing-kubelet-serving-cert-file={}", ca.0),
            format!("--cluster-signing-kubelet-serving-key-file={}", ca.1),
            format!("--cluster-signing-kube-apiserver-client-cert-file={}", ca.0),
            format!("--cluster-signing-kube-apiserver-client-key-file={}", ca.1),
            format!("--cluster-signing-legacy-unknown-cert-file={}", ca.0),
            format!("--cluster-signing-legacy-unknown-key-file={}", ca.1),
            format!(
                "--cluster-signing-duration={}s",
                self.opts.cert_ttl.as_secs().max(1)
            ),
            [
                "--controllers=certificatesigningrequest-approving-controller",
                "certificatesigningrequest-signing-controller",
                "certificatesigningrequest-cleaner-controller",
                "bootstrap-signer-controller",
                "token-cleaner-controller",
                "node-lifecycle-controller",
                "garbage-collector-controller",
                "serviceaccount-token-controller",
            ]
            .join(","),
        ];
        if let Some(g) = self.opts.node_monitor_grace_period {
            args.push(format!("--node-monitor-grace-period={}s", g.as_secs()));
        }
        if let Some(k) = &self.opts.kubeadm {
            self.kubeadm_controller_manager_args(k, &mut args)?;
        }
        Ok(args)
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Kubernetes release the components were built from (e.g. `v1.37.2`).
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The multi-call binary (`BIN kubectl ...`, `BIN hollow-node ...`).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn state_dir(&self) -> &Path {
        &self.opts.state_dir
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The cluster CA (PEM), which signed the API server's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.files.ca_pem
    }

    pub fn files(&self) -> &Files {
        &self.files
    }

    /// `DIR/admin.conf` (system:masters).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.files.admin_conf.clone()
    }

    /// `DIR/bootstrap-kubelet.conf`: kubeadm's shape, with the cluster's first token.
    pub fn bootstrap_kubeconfig(&self) -> PathBuf {
        self.opts.state_dir.join("bootstrap-kubelet.conf")
    }

    /// The first bootstrap token (`id.secret`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A bootstrap kubeconfig for `token`, as `kubeadm join` writes it.
    pub fn kubeconfig_for_token(&self, token: &str) -> String {
        self.kubeconfig_for_token_at(&self.url(), token)
    }

    /// `kubeconfig_for_token` naming another server address (a relay in front of this
    /// API server, as the benches put one to count a subject's bytes and connections).
    pub fn kubeconfig_for_token_at(&self, server: &str, token: &str) -> String {
        crate::kubeconfig::with_token_in(
            server,
            self.ca_pem(),
            "kubernetes",
            "tls-bootstrap-token-user",
            token,
        )
    }

    /// A new bootstrap token (kubeadm's groups, valid for `ttl`), once it authenticates.
    pub async fn create_token(&self, ttl: Duration) -> Result<String, KubeError> {
        let (id, secret) = crate::faults::random_token();
        let (path, body) = setup::token_object(&id, &secret, ttl);
        self.create(&path, &body).await?;
        let token = format!("{id}.{secret}");
        self.wait_token(&token).await?;
        Ok(token)
    }

    /// One request as the admin; returns (status, body).
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), KubeError> {
        let (cert, key) = &self.files.admin;
        http::request(
            self.addr,
            self.ca_pem(),
            Auth::Cert(cert, key),
            method,
            path,
            body,
        )
        .await
    }

    /// One request with other credentials.
    pub async fn api_as(
        &self,
        auth: Auth<'_>,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), KubeError> {
        http::request(self.addr, self.ca_pem(), auth, method, path, body).await
    }

    /// POST `body` to `path` as the admin; an existing object is fine.
    async fn create(&self, path: &str, body: &Value) -> Result<(), KubeError> {
        match self.api("POST", path, Some(body)).await? {
            (201 | 409, _) => Ok(()),
            (code, text) => Err(KubeError::Http {
                request: format!("POST {path}"),
                what: format!("HTTP {code}: {text}"),
            }),
        }
    }

    /// `kubectl --kubeconfig admin.conf ARGS` with the kubectl of the same release.
    pub async fn kubectl(&self, args: &[&str]) -> std::process::Output {
        let conf = self.admin_kubeconfig();
        self.kubectl_with(&conf, args).await
    }

    /// `kubectl --kubeconfig CONF ARGS`.
    pub async fn kubectl_with(&self, conf: &Path, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new(&self.bin)
            .arg("kubectl")
            .arg("--kubeconfig")
            .arg(conf)
            .args(args)
            .env("HOME", &self.opts.state_dir)
            .output()
            .await
            .expect("run kubectl")
    }

    /// Start a component and remember its flags.
    async fn add(&self, name: &'static str, args: Vec<String>) -> Result<(), KubeError> {
        let proc = Proc::spawn(&self.bin, self.state_dir(), name, args.clone())?;
        self.components.lock().await.push(Component {
            name,
            args,
            proc: Some(proc),
        });
        Ok(())
    }

    /// Stop one component (SIGTERM, bounded, then SIGKILL). `start_component` starts it
    /// again with the same flags: for the API server that is a new process, as an upgrade
    /// restarts it. Returns false for an unknown or stopped component.
    pub async fn stop_component(&self, name: &str) -> bool {
        let Some(proc) = self.take(name).await else {
            return false;
        };
        proc.stop().await;
        true
    }

    /// SIGKILL one component (a crash).
    pub async fn kill_component(&self, name: &str) -> bool {
        let Some(proc) = self.take(name).await else {
            return false;
        };
        proc.kill().await;
        true
    }

    /// Send a signal to a running component without stopping it (STOP: it accepts
    /// connections and never answers; CONT: it goes on).
    pub async fn signal_component(&self, name: &str, sig: &str) -> bool {
        let components = self.components.lock().await;
        match components
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.proc.as_ref())
        {
            Some(p) => {
                p.signal(sig);
                true
            }
            None => false,
        }
    }

    /// The flags a component starts with.
    pub async fn component_args(&self, name: &str) -> Option<Vec<String>> {
        let components = self.components.lock().await;
        Some(components.iter().find(|c| c.name == name)?.args.clone())
    }

    /// Replace the flags a component starts with next (`start_component`): kube-apiserver
    /// with a lower `--max-requests-inflight`, say, as a reconfiguration restarts it.
    /// Returns false for an unknown component.
    pub async fn set_component_args(&self, name: &str, args: Vec<String>) -> bool {
        let mut components = self.components.lock().await;
        match components.iter_mut().find(|c| c.name == name) {
            Some(c) => {
                c.args = args;
                true
            }
            None => false,
        }
    }

    async fn take(&self, name: &str) -> Option<Proc> {
        let mut components = self.components.lock().await;
        components.iter_mut().find(|c| c.name == name)?.proc.take()
    }

    /// Start a stopped component again; for the API server, wait until `/readyz` is ok.
    pub async fn start_component(&self, name: &str) -> Result<(), KubeError> {
        {
            let mut components = self.components.lock().await;
            let c = components
                .iter_mut()
                .find(|c| c.name == name)
                .ok_or_else(|| KubeError::Timeout(format!("no component {name}")))?;
            if c.proc.is_none() {
                c.proc = Some(Proc::spawn(
                    &self.bin,
                    &self.opts.state_dir,
                    c.name,
                    c.args.clone(),
                )?);
            }
        }
        if name == "kube-apiserver" {
            self.wait_ready().await?;
        }
        Ok(())
    }

    /// The PID of a running component.
    pub async fn pid(&self, name: &str) -> Option<u32> {
        let components = self.components.lock().await;
        components
            .iter()
            .find(|c| c.name == name)?
            .proc
            .as_ref()?
            .pid()
    }

    /// Stop every component, the last started first.
    pub async fn shutdown(&self) {
        let procs: Vec<Proc> = {
            let mut components = self.components.lock().await;
            components
                .iter_mut()
                .rev()
                .filter_map(|c| c.proc.take())
                .collect()
        };
        for p in procs {
            p.stop().await;
        }
    }

    /// A component that should run and has exited, as an error naming it.
    async fn check_running(&self) -> Result<(), KubeError> {
        let mut components = self.components.lock().await;
        for c in components.iter_mut() {
            if let Some(p) = c.proc.as_mut() {
                if let Some(status) = p.exited() {
                    return Err(KubeError::Component {
                        name: c.name.to_string(),
                        why: format!("exited ({status})"),
                        log: p.log.display().to_string(),
                        tail: p.tail(30),
                    });
                }
            }
        }
        Ok(())
    }

    /// Until the API server answers `/readyz` with `ok`.
    async fn wait_ready(&self) -> Result<(), KubeError> {
        poll(READY_TIMEOUT, "kube-apiserver /readyz ok", || async {
            self.check_running().await?;
            Ok(match self.api("GET", "/readyz", None).await {
                Ok((200, body)) if body.trim() == "ok" => Some(()),
                _ => None,
            })
        })
        .await
    }

    /// Until kube-controller-manager's bootstrapsigner has signed cluster-info for the
    /// token `id`: its controllers run and see the token.
    async fn wait_controllers(&self, id: &str) -> Result<(), KubeError> {
        let key = format!("jws-kubeconfig-{id}");
        let path = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
        poll(
            CONTROLLERS_TIMEOUT,
            "kube-controller-manager's controllers to run",
            || async {
                self.check_running().await?;
                let (code, body) = self.api("GET", path, None).await?;
                let cm: Value = serde_json::from_str(&body).unwrap_or_default();
                Ok((code == 200 && cm["data"].get(&key).is_some()).then_some(()))
            },
        )
        .await
    }

    /// Until `token` authenticates (a SelfSubjectReview answers `system:bootstrap:ID`).
    async fn wait_token(&self, token: &str) -> Result<(), KubeError> {
        let id = token.split('.').next().unwrap_or_default();
        let want = format!("system:bootstrap:{id}");
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
        poll(
            TOKEN_TIMEOUT,
            "the bootstrap token to authenticate",
            || async {
                let (code, body) = self
                    .api_as(Auth::Token(token), "POST", path, Some(&review))
                    .await?;
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                Ok(
                    (code == 201 && v["status"]["userInfo"]["username"] == want.as_str())
                        .then_some(()),
                )
            },
        )
        .await
    }
}

fn kubeconfig_write(path: &Path, body: &str) -> Result<(), KubeError> {
    crate::kubeconfig::write(path, body).map_err(KubeError::from)
}

/// Poll `check` every `POLL` until it returns Some, or fail with `what` after `limit`.
async fn poll<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<T, KubeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, KubeError>>,
{
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() >= until {
            return Err(KubeError::Timeout(format!("{what} within {limit:?}")));
        }
        tokio::time::sleep(POLL).await;
    }
}
