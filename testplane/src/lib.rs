//! bootlet-testplane: a scripted imitation of kube-apiserver over real TLS on loopback, with
//! the csrapproving controller, the kubelet-client and kubelet-serving signers, scripted
//! faults and an evidence trail; and the real cluster's launcher (`kube`), the referee on
//! what Kubernetes accepts (README.md: what the imitation is for, and what it is not).
//! This file owns the public Rust API (`TestPlane`, its builder, modes and errors) only.
//!
//! Where it deliberately behaves like kube-apiserver rather than the simplest thing:
//! - A client certificate from an unknown CA does not fail the TLS handshake: the server
//!   requests certificates, verifies them per request against the cluster CA and a second
//!   client CA (the `--client-ca-file` bundle of a cluster whose kubelet-client signer has its
//!   own CA; `Signer::SecondCa` signs with it), and answers 401.
//! - A watch from a compacted resourceVersion is HTTP 200 with one `ERROR` event carrying a
//!   410 `Expired` Status, then the stream ends (the watch cache's behaviour).
//! - `Approval::Auto` approves only valid kubelet-client CSRs whose requester passes the
//!   SubjectAccessReview (`.../nodeclient`, or `.../selfnodeclient` for a node renewing its own
//!   cert); others stay Pending. Approved-but-invalid requests are Failed by the signer with
//!   reason `SignerValidationFailure`.
//! - `kubernetes.io/kubelet-serving` CSRs are never approved by csrapproving (it handles only
//!   kubelet-client), so by default they stay Pending until `approve` or `kubectl certificate
//!   approve`; `serving_approval(Approval::Auto)` stands for an installed approver like
//!   kubelet-csr-approver (approve when the requester is `system:node:*`, equals the CN and at
//!   least one DNS/IP SAN is requested; deny otherwise). The signer applies upstream's
//!   `ValidateKubeletServingCSR` in its order and words (O exactly `[system:nodes]`, a DNS or
//!   IP SAN, no email or URI SANs, usages {digital signature, server auth} plus optionally key
//!   encipherment, CN prefix `system:node:`) and issues from the cluster CA with the requested
//!   DNS/IP SANs, serverAuth, the requested key usages and CA:FALSE, with the same lifetime
//!   rules as client certs. A usage outside the signer's set is accepted at the API (as upstream)
//!   and Failed by the signer.
//! - NodeRestriction on CSRs (upstream since 1.31): a node creating a kubelet-client or
//!   kubelet-serving CSR whose CN is not `system:node:<itself>` gets 403 `can only create a
//!   node CSR with CN=system:node:<node>`.
//! - Signer lifetime = min(expirationSeconds, max_cert_ttl or cert_ttl); notBefore is now -
//!   `backdate` (5 min default), never before the CA's notBefore (a fresh CA starts at
//!   `start()`); notAfter is now + lifetime, minus the backdate for lifetimes >= 8 h.
//! - Deviation (stricter): the serving signer also Fails a CSR whose `spec.username` is not
//!   its CN (e.g. filed with a bootstrap token), even when approved by hand; upstream leaves
//!   that check to the approver. So a client that files its serving CSR with the wrong
//!   credential can never get a serving certificate here.
//! - Deviations: no admission chain beyond NodeRestriction for Nodes/Leases/CSRs; a node may
//!   `get` only CSRs it filed itself (list/watch are not filtered); only JSON bodies, except the
//!   protobuf CSR that kubectl PUTs to `/approval`; no server-side apply or JSON patch.
#![forbid(unsafe_code)]

mod api;
pub mod auth;
pub mod client;
mod controllers;
mod events;
mod faults;
pub mod kube;
mod kubeconfig;
pub mod pki;
pub mod proxy;
pub mod rbac;
pub mod sched;
mod server;
mod signers;
pub mod stats;
pub mod store;
pub mod stub;
mod types;
mod wire;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use tokio::sync::broadcast;

pub use events::{wait_for, Event, RequestRecord};
pub use faults::{AcceptMode, Answer, AnswerRule, FaultRequest, Faults};
use store::{Kind, Store};
pub use wire::WireBytes;

/// The real wall clock, never stepped: the imitated API server's and a test's own. The
/// agent reads only `bootlet::runtime::clock::now()` (`clippy.toml` bans
/// `SystemTime::now` everywhere else), which tests can step.
#[allow(clippy::disallowed_methods)]
pub fn wall_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// The group kubeadm's default bootstrap tokens carry (`auth-extra-groups`).
pub const DEFAULT_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The kubelet client signer.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The kubelet serving signer (never auto-approved by kube-controller-manager).
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// kube-controller-manager's default `--cluster-signing-duration` (one year).
pub const DEFAULT_CERT_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// The request log keeps at most this many records (the oldest tenth is dropped when full),
/// so a long-running `serve` does not grow without bound.
pub const MAX_REQUEST_LOG: usize = 200_000;
/// Lifetime of tokens made by `bootstrap_kubeconfig` (kubeadm's default).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// How CSRs get approved. `approval` governs kubelet-client CSRs (default `Auto`),
/// `serving_approval` kubelet-serving CSRs (default `Manual`: nothing in a stock cluster
/// approves them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// kubelet-client: like kube-controller-manager's csrapproving, approve when RBAC lets the
    /// requester create `certificatesigningrequests/nodeclient` (or `/selfnodeclient` for
    /// renewals). kubelet-serving: an approver like kubelet-csr-approver is installed; it
    /// approves when the requester is the node named in the CN and a DNS/IP SAN is requested,
    /// and denies otherwise (reason `kubelet-serving cert denied`).
    Auto,
    /// Leave CSRs pending until `approve`/`deny` or `kubectl certificate approve`.
    Manual,
    /// Deny every new CSR of that signer with this reason.
    Deny { reason: String },
}

/// How the kubelet signers (client and serving alike) behave once a CSR is approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// Sign correctly.
    Normal,
    /// Approved CSRs are never issued.
    None,
    /// Issue a certificate for a different public key.
    WrongKey,
    /// Issue a certificate for `system:node:wrong-node` (subject CN; the serving signer keeps
    /// the requested SANs).
    WrongNode,
    /// Issue a certificate signed by a CA nobody trusts.
    WrongCa,
    /// Issue a correct certificate signed by a second CA, not the cluster CA that the
    /// kubeconfigs carry, which the API server trusts for client certificates as well
    /// (kube-controller-manager with `--cluster-signing-kubelet-client-{cert,key}-file`, as
    /// k3s, RKE2 and Gardener run it, or a CA rotation in progress). `chain`: the second
    /// CA's certificate follows the leaf in `status.certificate`.
    SecondCa { chain: bool },
    /// Issue a certificate that expired an hour ago.
    Expired,
    /// Issue a certificate valid from an hour from now (beyond any clock-skew tolerance).
    NotYetValid,
    /// Issue the leaf without the extended key usage its profile needs (serverAuth instead
    /// of clientAuth for a client certificate, clientAuth instead of serverAuth for a
    /// serving one).
    WrongUsage,
    /// Issue a correct leaf followed by copies of the CA certificate, this many
    /// certificates in all (10,000 is far over any client's body cap).
    LongChain(usize),
    /// Issue a correct leaf cut off half-way through its PEM (no END line).
    TruncatedPem,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pki: {0}")]
    Pki(#[from] pki::PkiError),
    #[error("tls config: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
}

/// Mutable knobs of the controllers.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub approval: Approval,
    pub serving_approval: Approval,
    pub signer: Signer,
    pub cert_ttl: Duration,
    pub max_cert_ttl: Option<Duration>,
    pub allow_short_expiration: bool,
    pub backdate: Duration,
}

/// State shared by the listener, the handlers, the controllers and `TestPlane`.
pub(crate) struct Shared {
    pub store: Store,
    pub ca: pki::Ca,
    /// A CA nobody trusts, for `Signer::WrongCa`.
    pub rogue_ca: pki::Ca,
    /// A second CA the server trusts for client certificates, for `Signer::SecondCa`.
    pub second_ca: pki::Ca,
    pub settings: Mutex<Settings>,
    pub events: broadcast::Sender<Event>,
    pub requests: Mutex<Vec<RequestRecord>>,
    /// Requests answered with the strict 404 (unknown path or method).
    pub unexpected: Mutex<Vec<RequestRecord>>,
    pub faults: faults::FaultState,
    pub verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    pub next_conn: AtomicU64,
    /// Bytes on the wire per connection.
    pub wire: wire::Table,
    pub addr: SocketAddr,
    pub admin: (String, String),
}

impl Shared {
    pub fn emit(&self, e: Event) {
        let _ = self.events.send(e);
    }

    pub fn settings(&self) -> Settings {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Builder for a `TestPlane`.
#[derive(Debug, Clone)]
pub struct Builder {
    settings: Settings,
    state_dir: Option<PathBuf>,
    listen: SocketAddr,
}

/// A running control plane. Dropping it stops the listener; prefer `shutdown().await`.
pub struct TestPlane {
    shared: Arc<Shared>,
    server: server::Handle,
}

// === impl Builder ===

impl Builder {
    /// The signer's default lifetime (`--cluster-signing-duration`); also the cap on
    /// `expirationSeconds` unless `max_cert_ttl` is set.
    pub fn cert_ttl(mut self, ttl: Duration) -> Self {
        self.settings.cert_ttl = ttl;
        self
    }

    /// Cap on a requested `expirationSeconds` (defaults to `cert_ttl`).
    pub fn max_cert_ttl(mut self, ttl: Duration) -> Self {
        self.settings.max_cert_ttl = Some(ttl);
        self
    }

    pub fn approval(mut self, a: Approval) -> Self {
        self.settings.approval = a;
        self
    }

    /// Who approves kubelet-serving CSRs (default `Manual`, as in a stock cluster); `Auto`
    /// models an installed approver like kubelet-csr-approver.
    pub fn serving_approval(mut self, a: Approval) -> Self {
        self.settings.serving_approval = a;
        self
    }

    pub fn signer(mut self, s: Signer) -> Self {
        self.settings.signer = s;
        self
    }

    /// Accept `expirationSeconds` below 600 (the real API rejects them with 422).
    pub fn allow_short_expiration(mut self, yes: bool) -> Self {
        self.settings.allow_short_expiration = yes;
        self
    }

    /// How far issued certificates' notBefore is backdated (default 5 min like
    /// kube-controller-manager; always clamped to the CA's notBefore, which for a fresh CA is
    /// the start time). Zero makes short-lived test certificates' windows exact.
    pub fn backdate(mut self, d: Duration) -> Self {
        self.settings.backdate = d;
        self
    }

    /// Load the CA from (or write it to) `dir/ca.crt` + `dir/ca.key`.
    pub fn state_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.state_dir = dir;
        self
    }

    /// Listen address; default 127.0.0.1:0.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Generate or load the CA, seed the store, bind and start serving.
    pub async fn start(self) -> Result<TestPlane, Error> {
        let ca = match &self.state_dir {
            Some(d) => pki::Ca::load_or_create(d)?,
            None => pki::Ca::generate("kubernetes")?,
        };
        let rogue_ca = pki::Ca::generate("rogue-ca")?;
        let second_ca = pki::Ca::generate("kubelet-client-ca")?;
        let admin = ca.client("kubernetes-admin", &["system:masters"])?;
        let tls = server::tls_config(&ca, &second_ca)?;
        let listener = server::bind(self.listen)
            .await
            .map_err(|source| Error::Io {
                path: self.listen.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Io {
            path: self.listen.to_string(),
            source,
        })?;
        let shared = Arc::new(Shared {
            store: Store::default(),
            ca,
            rogue_ca,
            second_ca,
            settings: Mutex::new(self.settings),
            events: broadcast::channel(65536).0,
            requests: Mutex::new(Vec::new()),
            unexpected: Mutex::new(Vec::new()),
            faults: faults::FaultState::default(),
            verifier: tls.1,
            next_conn: AtomicU64::new(1),
            wire: wire::Table::default(),
            addr,
            admin,
        });
        seed(&shared.store);
        controllers::spawn(shared.clone());
        let server = server::spawn(shared.clone(), listener, tls.0);
        Ok(TestPlane { shared, server })
    }
}

fn seed(store: &Store) {
    let (roles, bindings) = rbac::default_roles();
    for r in roles {
        let _ = store.create(Kind::ClusterRole, "", to_value(&r));
    }
    for b in bindings {
        let _ = store.create(Kind::ClusterRoleBinding, "", to_value(&b));
    }
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let n = k8s_openapi::api::core::v1::Namespace {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = store.create(Kind::Namespace, "", to_value(&n));
    }
}

pub(crate) fn to_value<T: serde::Serialize>(t: &T) -> serde_json::Value {
    serde_json::to_value(t).expect("k8s-openapi types serialize")
}

// === impl TestPlane ===

impl TestPlane {
    pub fn builder() -> Builder {
        Builder {
            settings: Settings {
                approval: Approval::Auto,
                serving_approval: Approval::Manual,
                signer: Signer::Normal,
                cert_ttl: DEFAULT_CERT_TTL,
                max_cert_ttl: None,
                allow_short_expiration: false,
                backdate: pki::BACKDATE,
            },
            state_dir: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// The TLS config this plane serves with (its CA's serving certificate), for helper
    /// servers the same clients must trust, e.g. [`stub::Stub`].
    pub fn serving_tls(&self) -> Result<Arc<rustls::ServerConfig>, Error> {
        Ok(server::tls_config(&self.shared.ca, &self.shared.second_ca)?.0)
    }

    /// "https://127.0.0.1:PORT"
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.shared.ca.cert_pem().to_string()
    }

    /// The second CA's certificate (PEM): `Signer::SecondCa` signs with it, and the server
    /// trusts client certificates from it besides the cluster CA's.
    pub fn second_ca_pem(&self) -> String {
        self.shared.second_ca.cert_pem().to_string()
    }

    /// Create a bootstrap-token Secret (auth-extra-groups = kubeadm's default-node-token
    /// group); `ttl` None means no expiration. Returns "id.secret".
    pub fn create_token(&self, ttl: Option<Duration>) -> String {
        faults::create_token(&self.shared.store, ttl, &[DEFAULT_TOKEN_GROUP])
    }

    /// Like `create_token` with explicit extra groups.
    pub fn create_token_with_groups(&self, ttl: Option<Duration>, groups: &[&str]) -> String {
        faults::create_token(&self.shared.store, ttl, groups)
    }

    /// A bootstrap kubeconfig (YAML) with a fresh token valid for 24 h and the CA embedded.
    pub fn bootstrap_kubeconfig(&self) -> String {
        let t = self.create_token(Some(DEFAULT_TOKEN_TTL));
        self.kubeconfig_for_token(&t)
    }

    pub fn kubeconfig_for_token(&self, token: &str) -> String {
        kubeconfig::with_token(
            &self.url(),
            self.shared.ca.cert_pem(),
            "kubelet-bootstrap",
            token,
        )
    }

    /// kubeconfig for `kubernetes-admin` (O system:masters), client cert and key embedded.
    pub fn admin_kubeconfig(&self) -> String {
        let (c, k) = &self.shared.admin;
        kubeconfig::with_cert(
            &self.url(),
            self.shared.ca.cert_pem(),
            "kubernetes-admin",
            c,
            k,
        )
    }

    /// The admin client certificate and key (PEM), as embedded in `admin_kubeconfig`.
    pub fn admin_credentials(&self) -> (String, String) {
        self.shared.admin.clone()
    }

    /// A client certificate from the cluster CA for any identity: (cert PEM, key PEM).
    pub fn client_cert(&self, cn: &str, groups: &[&str]) -> Result<(String, String), Error> {
        Ok(self.shared.ca.client(cn, groups)?)
    }

    /// Write `admin.conf` and `bootstrap-kubelet.conf` (fresh token) into `dir` (0600).
    pub fn write_state(&self, dir: &Path) -> Result<(), Error> {
        kubeconfig::write(&dir.join("admin.conf"), &self.admin_kubeconfig())?;
        kubeconfig::write(
            &dir.join("bootstrap-kubelet.conf"),
            &self.bootstrap_kubeconfig(),
        )
    }

    /// Set the token's expiration to now: it fails authentication from the next request on.
    pub fn expire_token(&self, id: &str) -> Result<(), Error> {
        faults::expire_token(&self.shared.store, id)
    }

    pub fn delete_token(&self, id: &str) -> Result<(), Error> {
        faults::delete_token(&self.shared.store, id)
    }

    pub fn set_approval(&self, a: Approval) {
        self.shared
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .approval = a;
        controllers::resync(&self.shared);
    }

    /// Change who approves kubelet-serving CSRs; pending ones are reconsidered at once.
    pub fn set_serving_approval(&self, a: Approval) {
        self.shared
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .serving_approval = a;
        controllers::resync(&self.shared);
    }

    pub fn set_signer(&self, s: Signer) {
        self.shared
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .signer = s;
        controllers::resync(&self.shared);
    }

    /// Approve a CSR as an administrator would.
    pub fn approve(&self, name: &str) -> Result<(), Error> {
        controllers::set_condition(
            &self.shared,
            name,
            "Approved",
            "TestPlaneApprove",
            "approved by the test",
        )
    }

    pub fn deny(&self, name: &str, reason: &str) -> Result<(), Error> {
        self.deny_with_message(name, reason, "denied by the test")
    }

    /// Deny with a message of the test's choosing (an approver's free text: it may hold
    /// anything, newlines included).
    pub fn deny_with_message(&self, name: &str, reason: &str, message: &str) -> Result<(), Error> {
        controllers::set_condition(&self.shared, name, "Denied", reason, message)
    }

    pub fn csrs(&self) -> Vec<CertificateSigningRequest> {
        self.typed_list(Kind::Csr, None)
    }

    pub fn csr(&self, name: &str) -> Option<CertificateSigningRequest> {
        let v = self.shared.store.get(Kind::Csr, "", name)?;
        serde_json::from_value(v).ok()
    }

    pub fn lease(&self, ns: &str, name: &str) -> Option<Lease> {
        serde_json::from_value(self.shared.store.get(Kind::Lease, ns, name)?).ok()
    }

    pub fn leases(&self, ns: &str) -> Vec<Lease> {
        self.typed_list(Kind::Lease, Some(ns))
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        serde_json::from_value(self.shared.store.get(Kind::Node, "", name)?).ok()
    }

    /// Create a Node object; returns its uid.
    pub fn create_node(&self, name: &str) -> String {
        let n = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let v = self
            .shared
            .store
            .create(Kind::Node, "", to_value(&n))
            .or_else(|_| self.shared.store.get(Kind::Node, "", name).ok_or(()))
            .unwrap_or_default();
        store::meta_str(&v, "uid").to_string()
    }

    /// A static token (like kube-apiserver's `--token-auth-file`) that authenticates as
    /// `user` in `groups` (plus `system:authenticated`). `token` must have the bootstrap-token
    /// shape `[a-z0-9]{6}.[a-z0-9]{16}`; a bootstrap-token Secret with the same id wins.
    pub fn add_static_token(&self, token: &str, user: &str, groups: &[&str]) {
        faults::add_static_token(&self.shared.store, token, user, groups)
    }

    /// Store `node` as given, status included (creating or replacing it), as if the kubelet
    /// and the controllers had written it.
    pub fn put_node(&self, node: &Node) {
        self.put(Kind::Node, "", to_value(node));
    }

    /// Store `lease` in its namespace as given (creating or replacing it).
    pub fn put_lease(&self, lease: &Lease) {
        let ns = lease.metadata.namespace.clone().unwrap_or_default();
        self.put(Kind::Lease, &ns, to_value(lease));
    }

    fn put(&self, kind: Kind, ns: &str, mut v: serde_json::Value) {
        store::meta_mut(&mut v).remove("resourceVersion");
        if self.shared.store.create(kind, ns, v.clone()).is_err() {
            let _ = self.shared.store.update(kind, ns, v);
        }
    }

    /// Sign `spki_der` (a public key) as a client certificate for `cn` in `orgs`, valid from
    /// `not_before` to `not_after`, with the cluster CA, or with a CA nobody trusts when
    /// `rogue`. Returns the certificate PEM.
    pub fn sign_client_cert(
        &self,
        spki_der: &[u8],
        cn: &str,
        orgs: &[&str],
        not_before: std::time::SystemTime,
        not_after: std::time::SystemTime,
        rogue: bool,
    ) -> Result<String, Error> {
        let ca = if rogue {
            &self.shared.rogue_ca
        } else {
            &self.shared.ca
        };
        let orgs = orgs.iter().map(|s| s.to_string()).collect();
        let spec = pki::LeafSpec::client(cn, orgs, not_before, not_after);
        Ok(ca.issue(spki_der, &spec)?)
    }

    /// Delete a Lease (as `kubectl delete lease` or the garbage collector would).
    pub fn delete_lease(&self, ns: &str, name: &str) -> Result<(), Error> {
        self.shared
            .store
            .delete(Kind::Lease, ns, name)
            .map(drop)
            .map_err(|_| Error::NotFound {
                kind: "Lease",
                name: name.into(),
            })
    }

    /// Delete a ClusterRoleBinding (as `kubectl delete clusterrolebinding` would).
    pub fn delete_cluster_role_binding(&self, name: &str) -> Result<(), Error> {
        self.shared
            .store
            .delete(Kind::ClusterRoleBinding, "", name)
            .map(drop)
            .map_err(|_| Error::NotFound {
                kind: "ClusterRoleBinding",
                name: name.into(),
            })
    }

    /// Forget the watch history: a watch from any older resourceVersion gets 410 Expired.
    pub fn compact(&self) {
        self.shared.store.compact();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Subscribe to events from now on.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// Every request served so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Bytes connection `conn` (see `Event::ConnectionOpened`) carried so far, TLS records
    /// included: live while it is open, final once closed (the newest 65,536 closed
    /// connections are kept). `None` for an unknown id.
    pub fn wire_bytes(&self, conn: u64) -> Option<WireBytes> {
        self.shared.wire.get(conn)
    }

    /// Requests the strict fake did not recognise (answered 404 naming method and path).
    /// Tests end with `assert!(tp.unexpected_requests().is_empty())`.
    pub fn unexpected_requests(&self) -> Vec<RequestRecord> {
        self.shared
            .unexpected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn faults(&self) -> Faults {
        Faults::new(self.shared.clone())
    }

    /// Stop listening and drop every connection.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }

    fn typed_list<T: serde::de::DeserializeOwned>(&self, kind: Kind, ns: Option<&str>) -> Vec<T> {
        let (items, _) = self.shared.store.list(kind, ns);
        items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }
}
