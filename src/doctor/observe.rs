//! doctor's IO shell: everything it looks at, gathered once — settings, both kubeconfigs,
//! the cert dir, TCP, TLS and one HTTP round trip to the server, the daemon's proof of a
//! certificate from another CA, its `Date`, SelfSubjectReview/AccessReview, our CSR, the
//! Node and the Lease. Each step has its own timeout; it judges nothing (checks.rs does).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use tokio::time::timeout;

use crate::api::kubeconfig::exec::{ExecError, Issued};
use crate::api::kubeconfig::{self, ClusterAccess, Credential, KubeconfigError};
use crate::api::{self, ApiClient, ClientOptions};
use crate::cli::Flags;
use crate::config::{ConfigError, Settings};
use crate::identity::bootstrap::{check_installed_offline, InstalledError};
use crate::identity::issue::proof::{self, Patience};
use crate::pki::files::CertDir;
use crate::pki::verify::Anchor;
use crate::pki::{self, CertInfo, CertProfile};
use crate::runtime::clock;
use crate::runtime::report;

mod csr;
mod http;
pub mod kubelet;
mod tls;

pub use crate::pki::spki_pin;
pub use http::{HttpFailure, PATH as LIVEZ};
pub use tls::TlsFailure;

/// Bound on DNS + TCP connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on server-reachable's one HTTP round trip (`GET /livez`) on doctor's own session.
pub const ROUND_TRIP_TIMEOUT: Duration = Duration::from_millis(1500);
/// Bound on each API request (they run concurrently after the round trip).
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(2500);
/// Bound on the whole network part: connect + handshake + round trip + one round of
/// requests ≤ 8 s, and this belt keeps the run under the contract's 10 s whatever happens.
pub const NETWORK_BUDGET: Duration = Duration::from_secs(8);

/// Everything doctor saw. `None` means "not looked at" (a prerequisite was missing).
#[derive(Debug, Default)]
pub struct Observations {
    pub settings: Option<Result<Settings, ConfigError>>,
    pub bootstrap: Option<Result<ClusterAccess, KubeconfigError>>,
    pub cert: CertObs,
    /// The credential doctor tests: the installed certificate when it is valid.
    pub using: Using,
    /// Server and CA doctor talks to, and the kubeconfig they came from.
    pub cluster: Option<ClusterAccess>,
    pub net: Net,
    /// kubelet.service's command line as systemd would start it (`None` without systemd or
    /// the unit), and the kubelet's own `rotateCertificates` (its `--config` file).
    pub kubelet: Option<KubeletObs>,
    /// `/etc/machine-id` of this host, for the stale-Node check.
    pub machine_id: Option<String>,
    /// The bootstrap kubeconfig's exec plugin, run once when it is the credential doctor
    /// tests: what it handed out, or why it did not.
    pub exec: Option<Result<ExecIssued, ExecError>>,
}

/// What an exec plugin handed out, as doctor shows it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecIssued {
    /// A bootstrap token (its id) or another token (`<opaque>`).
    Token {
        id: String,
    },
    ClientCert {
        subject: String,
    },
}

/// The most doctor waits for an exec plugin, whatever the daemon's timeout: the contract
/// bounds the whole run to 10 s.
pub const EXEC_BUDGET: Duration = Duration::from_secs(5);

/// The installed client certificate.
#[derive(Debug, Default)]
pub enum CertObs {
    /// Nothing at `CERT_DIR/kubelet-client-current.pem`.
    #[default]
    Absent,
    /// The file is there but unusable; `detail` names it and says why.
    Unreadable { path: PathBuf, detail: String },
    /// Checked with the daemon's own `check_installed_offline`; `info` is the leaf when it
    /// parses. A certificate the API server refused to vouch for is
    /// `Err(InstalledError::Unaccepted)`.
    Checked {
        path: PathBuf,
        info: Option<Box<CertInfo>>,
        verdict: Result<(), InstalledError>,
        /// `Some` for a certificate that passed every offline check but chains to another CA
        /// than the kubeconfig's (a kubelet-client signer with its own CA): what the daemon's
        /// proof said of it.
        other_ca: Option<OtherCa>,
    },
}

/// A client certificate from another CA than the kubeconfig's, and the daemon's proof of
/// it (`identity::issue::proof`: a SelfSubjectReview with it over a fresh connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherCa {
    /// The DN of the CA that signed the top of its chain.
    pub issuer: String,
    pub proof: Proof,
}

/// What the API server said when asked to vouch for a certificate from another CA (a
/// refusal is no `Proof`: the certificate's verdict is `InstalledError::Unaccepted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Not asked: the network part stopped before it.
    NotAsked,
    /// The server vouched for it (see `proof::Vouched`: the review answered this node's
    /// user and group, or answered as only an authenticated request is answered).
    Accepted(proof::Vouched),
    /// No answer in time (or a 5xx): the daemon uses it all the same at start.
    Unanswered { reason: String },
}

/// Which credential doctor uses, as the daemon would.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum Using {
    #[default]
    Nothing,
    ClientCert {
        subject: String,
        serial: String,
    },
    BootstrapToken {
        id: String,
        file: PathBuf,
    },
    /// The bootstrap kubeconfig's user is an exec credential plugin.
    BootstrapExec {
        command: String,
        file: PathBuf,
    },
    /// The bootstrap kubeconfig's user has a client certificate or no credential at all.
    BootstrapOther {
        file: PathBuf,
    },
}

/// What the network told us.
#[derive(Debug, Default)]
pub struct Net {
    pub tcp: Option<Result<(), String>>,
    pub tls: Option<Result<(), TlsFailure>>,
    /// The HTTP status of an anonymous `GET /livez` on the verified session.
    pub http: Option<Result<u16, HttpFailure>>,
    /// Server clock minus ours, seconds, from a response's `Date`.
    pub skew: Option<Result<i64, api::Error>>,
    pub review: Option<Result<UserInfo, api::Error>>,
    /// With a valid certificate, the bootstrap token is reviewed too (a warning at most).
    pub token_review: Option<Result<UserInfo, api::Error>>,
    pub can_create_csr: Option<Result<Sar, api::Error>>,
    /// `certificatesigningrequests/nodeclient` (token) or `/selfnodeclient` (certificate).
    pub can_autoapprove: Option<Result<Sar, api::Error>>,
    pub csr: Option<Result<CsrObs, api::Error>>,
    pub node: Option<Result<Node, api::Error>>,
    pub lease: Option<Result<Lease, api::Error>>,
    /// Every `kubernetes.io/kubelet-serving` CSR (the `serving-csr` check), with a valid
    /// client certificate.
    pub serving_csrs: Option<Result<Vec<CertificateSigningRequest>, api::Error>>,
    /// The network part hit [`NETWORK_BUDGET`].
    pub budget_exceeded: bool,
}

/// A SelfSubjectAccessReview answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sar {
    pub allowed: bool,
    pub reason: String,
}

/// Our CSR, if any: the one for the pending key, else the newest for this node.
#[derive(Debug, Clone)]
pub enum CsrObs {
    None,
    /// The pending key names a CSR the server does not have.
    Missing {
        name: String,
    },
    Found(Box<CertificateSigningRequest>),
}

/// Load settings, read the files, pick the credential, then gather the network part.
pub async fn gather(flags: &Flags) -> Observations {
    let mut obs = Observations {
        settings: Some(Settings::load(flags)),
        ..Observations::default()
    };
    let Some(Ok(settings)) = &obs.settings else {
        return obs;
    };
    let settings = settings.clone();
    local(&settings, &mut obs);
    exec(&settings, &mut obs).await;
    if let Some(cluster) = obs.cluster.clone() {
        let work = network(&settings, &cluster, &mut obs);
        let exceeded = timeout(NETWORK_BUDGET, work).await.is_err();
        obs.net.budget_exceeded = exceeded;
    }
    obs
}

/// Run the bootstrap kubeconfig's exec plugin once when it is the credential the daemon
/// would use (a valid certificate makes it unneeded: doctor does not mint a credential it
/// does not test). A failure leaves no cluster to talk to: the checks after are skipped.
async fn exec(s: &Settings, obs: &mut Observations) {
    let Some(Ok(ClusterAccess {
        credential: Credential::Exec(plugin),
        ..
    })) = &obs.bootstrap
    else {
        return;
    };
    if !matches!(obs.using, Using::BootstrapExec { .. }) {
        return;
    }
    let budget = s.exec_plugin_timeout.min(EXEC_BUDGET);
    let ran = plugin
        .credential(budget)
        .await
        .map(|fresh| match fresh.issued {
            Issued::Token(token) => ExecIssued::Token {
                id: token.id().to_string(),
            },
            Issued::ClientCert { chain_pem, .. } => ExecIssued::ClientCert {
                subject: pki::parse_cert_chain(&chain_pem)
                    .ok()
                    .and_then(|c| c.into_iter().next())
                    .map_or_else(|| "<unparsed>".into(), |(info, _)| info.subject_cn),
            },
        });
    if ran.is_err() {
        obs.cluster = None;
    }
    obs.exec = Some(ran);
}

/// What the kubelet's unit would start, for the two-bootstrappers and two-rotators warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletObs {
    pub argv: Vec<String>,
    /// `rotateCertificates` in the file the kubelet's `--config` names.
    pub rotate_in_config: Option<bool>,
}

/// The files: bootstrap kubeconfig, installed certificate, kubelet kubeconfig, machine id,
/// the kubelet's unit.
fn local(s: &Settings, obs: &mut Observations) {
    obs.kubelet = kubelet_unit();
    let bootstrap = kubeconfig::read(&s.bootstrap_kubeconfig, s.allow_insecure_kubeconfig);
    let kubelet = kubeconfig::read(&s.kubeconfig, s.allow_insecure_kubeconfig).ok();
    let own_cluster = kubelet.or_else(|| bootstrap.as_ref().ok().cloned());
    obs.machine_id = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    obs.cert = installed_cert(s, own_cluster.as_ref());
    let cert_ok = matches!(
        obs.cert,
        CertObs::Checked {
            verdict: Ok(()),
            ..
        }
    );
    if let (true, Some(cluster), CertObs::Checked { info: Some(i), .. }) =
        (cert_ok, &own_cluster, &obs.cert)
    {
        obs.using = Using::ClientCert {
            subject: i.subject_cn.clone(),
            serial: i.serial.clone(),
        };
        obs.cluster = Some(cluster.clone());
    } else if let Ok(b) = &bootstrap {
        use_bootstrap(obs, b);
    }
    obs.bootstrap = Some(bootstrap);
}

/// What `kubelet.service` would start, with `rotateCertificates` from the file its
/// `--config` names (or the standard one).
fn kubelet_unit() -> Option<KubeletObs> {
    kubelet::command_line().map(|argv| {
        let mut files = crate::config::KubeletFiles::default();
        if let Some(config) = kubelet::flag(&argv, "config").filter(|c| !c.is_empty()) {
            files.config = config.into();
        }
        KubeletObs {
            rotate_in_config: files.view().rotate_certificates,
            argv,
        }
    })
}

/// The installed certificate, checked offline as the daemon checks it at start against
/// the CA of `own_cluster` (the kubelet kubeconfig's, else the bootstrap one's).
fn installed_cert(s: &Settings, own_cluster: Option<&ClusterAccess>) -> CertObs {
    let dir = CertDir::peek(&s.cert_dir);
    let path = dir.current_path();
    match dir.read_current() {
        Ok(None) => CertObs::Absent,
        Err(e) => CertObs::Unreadable {
            path,
            detail: report(&e),
        },
        Ok(Some((chain, key))) => {
            let info = pki::parse_cert_chain(&chain)
                .ok()
                .and_then(|c| c.into_iter().next().map(|(i, _)| Box::new(i)));
            let ca = own_cluster.map(|c| c.ca_pem.clone());
            let checked =
                check_installed_offline(chain, key, &s.node_name, &ca.unwrap_or_default());
            let (verdict, other_ca) = match checked {
                Ok((_, Anchor::ClusterCa)) => (Ok(()), None),
                Ok((_, Anchor::Other { issuer })) => (
                    Ok(()),
                    Some(OtherCa {
                        issuer,
                        proof: Proof::NotAsked,
                    }),
                ),
                Err(e) => (Err(e), None),
            };
            CertObs::Checked {
                path,
                info,
                verdict,
                other_ca,
            }
        }
    }
}

/// The bootstrap kubeconfig's credential and cluster, as the daemon falls back to them.
fn use_bootstrap(obs: &mut Observations, b: &ClusterAccess) {
    obs.using = match &b.credential {
        Credential::Token(t) => Using::BootstrapToken {
            id: t.id().to_string(),
            file: b.path.clone(),
        },
        Credential::Exec(plugin) => Using::BootstrapExec {
            command: plugin.command().to_string(),
            file: b.path.clone(),
        },
        _ => Using::BootstrapOther {
            file: b.path.clone(),
        },
    };
    obs.cluster = Some(b.clone());
}

/// A certificate from another CA, vouched for as the daemon does it at start
/// (`proof::prove`, one request): accepted or unanswered, it stays the credential (the
/// daemon uses it either way); refused, it is `Unaccepted` and the bootstrap kubeconfig's
/// credential is tested instead, as the daemon would bootstrap with it.
async fn vouch(s: &Settings, cluster: &ClusterAccess, api: &ClientOptions, obs: &mut Observations) {
    let CertObs::Checked {
        verdict: verdict @ Ok(()),
        other_ca: other_ca @ Some(_),
        ..
    } = &mut obs.cert
    else {
        return;
    };
    let Ok(Some((chain_pem, key))) = CertDir::peek(&s.cert_dir).read_current() else {
        return;
    };
    let at = proof::Cluster {
        server: &cluster.server,
        ca_pem: &cluster.ca_pem,
        api,
    };
    let profile = CertProfile::client(&s.node_name);
    let answer = proof::prove(
        &at,
        &chain_pem,
        &key,
        &profile,
        Patience::Once(REQUEST_TIMEOUT),
    )
    .await;
    let Some(other) = other_ca.as_mut() else {
        return;
    };
    match answer {
        Ok(vouched) => other.proof = Proof::Accepted(vouched),
        Err(e) if e.is_refusal() => {
            *verdict = Err(InstalledError::Unaccepted {
                issuer: other.issuer.clone(),
                source: e,
            });
            *other_ca = None;
            match obs
                .bootstrap
                .as_ref()
                .and_then(|b| b.as_ref().ok())
                .cloned()
            {
                Some(b) => use_bootstrap(obs, &b),
                None => obs.using = Using::Nothing,
            }
        }
        Err(e) => other.proof = Proof::Unanswered { reason: report(&e) },
    }
}

/// The credential for `obs.using` (the installed cert's chain and key, or the bootstrap one).
fn credential_for(s: &Settings, obs: &Observations) -> Credential {
    if matches!(obs.using, Using::ClientCert { .. }) {
        if let Ok(Some((chain_pem, key))) = CertDir::peek(&s.cert_dir).read_current() {
            return Credential::ClientCert { chain_pem, key };
        }
    }
    match &obs.bootstrap {
        Some(Ok(b)) => b.credential.clone(),
        _ => Credential::None,
    }
}

/// TCP, TLS, the proof of a certificate from another CA, then every API observation
/// concurrently, each bounded by its own timeout.
async fn network(s: &Settings, cluster: &ClusterAccess, obs: &mut Observations) {
    if !reach(cluster, &mut obs.net).await {
        return;
    }
    let opts = ClientOptions {
        request_timeout: REQUEST_TIMEOUT,
        connect_timeout: CONNECT_TIMEOUT,
        exec_timeout: s.exec_plugin_timeout.min(EXEC_BUDGET),
        ..ClientOptions::default()
    };
    vouch(s, cluster, &opts, obs).await;
    let credential = credential_for(s, obs);
    let cert = matches!(obs.using, Using::ClientCert { .. });
    let bootstrap = match &obs.bootstrap {
        Some(Ok(b)) if cert && matches!(b.credential, Credential::Token(_)) => Some(b.clone()),
        _ => None,
    };
    // The cluster of the credential tested: the bootstrap kubeconfig's after a refusal.
    let Some(cluster) = obs.cluster.clone() else {
        return;
    };
    // kube-apiserver answers a 401 over HTTP/2 with `Connection: close` and a GOAWAY (its
    // UnauthenticatedHTTP2DOSMitigation): a request sent on that connection just after it
    // fails. With a dead token every request is a 401, so the two answers that decide checks
    // before authentication does — the `Date` for clock-skew and the SelfSubjectReview —
    // each get a client of their own (a connection pool of their own).
    let new = || ApiClient::new(&cluster.server, &cluster.ca_pem, &credential, opts.clone());
    let (Ok(main), Ok(clock), Ok(reviewer)) = (new(), new(), new()) else {
        return;
    };
    let token =
        bootstrap.and_then(|b| ApiClient::new(&b.server, &b.ca_pem, &b.credential, opts).ok());
    let clients = Clients {
        main,
        clock,
        reviewer,
        token,
    };
    ask(s, &clients, cert, &mut obs.net).await;
}

/// TCP, TLS and one HTTP round trip to the server, each recorded in `net`; true when all
/// three worked. The round trip comes before any API request: a server that completes TLS
/// and then hangs is named here, and the requests that would only hang too are not sent.
async fn reach(cluster: &ClusterAccess, net: &mut Net) -> bool {
    let stream = match tls::connect(&cluster.server, CONNECT_TIMEOUT).await {
        Ok(stream) => {
            net.tcp = Some(Ok(()));
            stream
        }
        Err(e) => {
            net.tcp = Some(Err(e));
            return false;
        }
    };
    let session =
        match tls::handshake(stream, &cluster.server, &cluster.ca_pem, HANDSHAKE_TIMEOUT).await {
            Ok(session) => {
                net.tls = Some(Ok(()));
                session
            }
            Err(e) => {
                net.tls = Some(Err(e));
                return false;
            }
        };
    let answered = http::livez(session, &cluster.server.url, ROUND_TRIP_TIMEOUT).await;
    let answered_ok = answered.is_ok();
    net.http = Some(answered);
    answered_ok
}

/// The API clients of one run (see [`network`] for why three for one credential).
struct Clients {
    /// The credential under test: access reviews, our CSR, the Node and the Lease.
    main: ApiClient,
    /// The same credential on a pool of its own, for the server's `Date`.
    clock: ApiClient,
    /// The same credential on a pool of its own, for the SelfSubjectReview.
    reviewer: ApiClient,
    /// The bootstrap token's, when a certificate is tested and a token stands behind it.
    token: Option<ApiClient>,
}

/// Every API observation at once, recorded in `net`: the clock skew, who the server says
/// we are (and who the bootstrap token is), what we may do with CSRs, our pending CSR, and,
/// with a certificate (`cert`), our Node and Lease.
async fn ask(s: &Settings, c: &Clients, cert: bool, net: &mut Net) {
    let node = s.node_name.as_str();
    let sub = if cert { "selfnodeclient" } else { "nodeclient" };
    let pending = csr::pending_name(s);
    let node_path = format!("/api/v1/nodes/{node}");
    let lease_path =
        format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}");
    let serving_path = format!(
        "{}?fieldSelector=spec.signerName%3Dkubernetes.io%2Fkubelet-serving",
        crate::identity::csr::CSR_PATH
    );
    let (skew, review, token_review, create, approve, csr, node_obj, lease, serving) = tokio::join!(
        async {
            match c.clock.get::<serde_json::Value>("/version").await {
                Err(e) if !matches!(e, api::Error::Api { .. }) => Err(e),
                _ => Ok(c.clock.clock_skew_secs()),
            }
        },
        self_review(&c.reviewer),
        async {
            match &c.token {
                Some(t) => Some(self_review(t).await),
                None => None,
            }
        },
        access_review(&c.main, "create", ""),
        access_review(&c.main, "create", sub),
        csr::find(&c.main, node, pending),
        when(cert, c.main.get::<Node>(&node_path)),
        when(cert, c.main.get::<Lease>(&lease_path)),
        when(
            cert,
            c.main
                .get::<k8s_openapi::List<CertificateSigningRequest>>(&serving_path),
        ),
    );
    net.skew = Some(skew);
    net.review = Some(review);
    net.token_review = token_review;
    net.can_create_csr = Some(create);
    net.can_autoapprove = Some(approve);
    net.csr = Some(csr);
    net.node = node_obj;
    net.lease = lease;
    net.serving_csrs = serving.map(|list| list.map(|l| l.items));
}

/// `work`'s answer if `yes`; otherwise `None`, and `work` (lazy) never runs.
async fn when<T>(yes: bool, work: impl std::future::Future<Output = T>) -> Option<T> {
    match yes {
        true => Some(work.await),
        false => None,
    }
}

async fn self_review(client: &ApiClient) -> Result<UserInfo, api::Error> {
    let review: SelfSubjectReview = client
        .create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &SelfSubjectReview::default(),
        )
        .await?;
    Ok(review.status.and_then(|s| s.user_info).unwrap_or_default())
}

/// May we `verb` CSRs (or their `subresource`) at the cluster scope?
async fn access_review(
    client: &ApiClient,
    verb: &str,
    subresource: &str,
) -> Result<Sar, api::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: (!subresource.is_empty()).then(|| subresource.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer: SelfSubjectAccessReview = client
        .create(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &review,
        )
        .await?;
    let status = answer.status.unwrap_or_default();
    Ok(Sar {
        allowed: status.allowed,
        reason: status.reason.unwrap_or_default(),
    })
}

/// Now, for the verdicts (the one clock read of a run).
pub fn now() -> SystemTime {
    clock::now()
}
