//! What kubeadm would have made before the components start, written into the state dir:
//! the cluster CA, the API server's serving certificate, the service-account key pair, the
//! admin, controller-manager and scheduler kubeconfigs (and, with a separate kubelet-client signer, its
//! CA and the client-CA bundle the API server trusts); and the objects `kubeadm init` creates
//! that a node's join depends on (bootstrap token, the three bootstrap bindings, get-nodes,
//! cluster-info).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rcgen::KeyPair;
use serde_json::Value;

use super::{Approve, ClientSigner, KubeError};
use crate::pki::Ca;
use crate::rbac::group_binding;
use crate::{kubeconfig, DEFAULT_TOKEN_GROUP};

/// The files the components read, by path.
pub struct Files {
    pub ca_crt: PathBuf,
    pub ca_key: PathBuf,
    /// The CA kube-controller-manager signs kubelet client certificates with.
    pub kubelet_signer_crt: PathBuf,
    pub kubelet_signer_key: PathBuf,
    /// `--client-ca-file`: the cluster CA, plus the kubelet-client signer when separate.
    pub client_ca: PathBuf,
    pub apiserver_crt: PathBuf,
    pub apiserver_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    pub admin_conf: PathBuf,
    pub kcm_conf: PathBuf,
    /// kube-scheduler's kubeconfig (`system:kube-scheduler`), as kubeadm's scheduler.conf.
    pub scheduler_conf: PathBuf,
    /// The admin identity, for the setup requests (cert PEM, key PEM).
    pub admin: (String, String),
    pub ca_pem: String,
}

/// Generate every key and certificate and write them (keys 0600) under `dir`.
pub fn write_pki(dir: &Path, server: &str, signer: ClientSigner) -> Result<Files, KubeError> {
    let ca = Ca::generate("kubernetes")?;
    let p = |name: &str| dir.join(name);
    let write = |path: &Path, body: &str| kubeconfig::write(path, body).map_err(KubeError::from);
    let f = Files {
        ca_crt: p("ca.crt"),
        ca_key: p("ca.key"),
        kubelet_signer_crt: p("kubelet-client-signer.crt"),
        kubelet_signer_key: p("kubelet-client-signer.key"),
        client_ca: p("client-ca.crt"),
        apiserver_crt: p("apiserver.crt"),
        apiserver_key: p("apiserver.key"),
        sa_key: p("sa.key"),
        sa_pub: p("sa.pub"),
        admin_conf: p("admin.conf"),
        kcm_conf: p("controller-manager.conf"),
        scheduler_conf: p("scheduler.conf"),
        admin: ca.client("kubernetes-admin", &["system:masters"])?,
        ca_pem: ca.cert_pem().to_string(),
    };
    write(&f.ca_crt, ca.cert_pem())?;
    write(&f.ca_key, &ca.key_pem())?;
    let mut bundle = ca.cert_pem().to_string();
    let signer_ca = match signer {
        ClientSigner::ClusterCa => None,
        ClientSigner::Separate => Some(Ca::generate("kubelet-client-signer")?),
    };
    let (signer_crt, signer_key) = match &signer_ca {
        Some(s) => {
            bundle.push_str(s.cert_pem());
            (s.cert_pem().to_string(), s.key_pem())
        }
        None => (ca.cert_pem().to_string(), ca.key_pem()),
    };
    write(&f.kubelet_signer_crt, &signer_crt)?;
    write(&f.kubelet_signer_key, &signer_key)?;
    write(&f.client_ca, &bundle)?;
    let (crt, key) = ca.serving()?;
    write(&f.apiserver_crt, &crt)?;
    write(&f.apiserver_key, &key)?;
    let sa = KeyPair::generate()?;
    write(&f.sa_key, &sa.serialize_pem())?;
    write(&f.sa_pub, &sa.public_key_pem())?;
    let (cert, key) = &f.admin;
    write(
        &f.admin_conf,
        &kubeconfig::with_cert_in(
            server,
            ca.cert_pem(),
            "kubernetes",
            "kubernetes-admin",
            cert,
            key,
        ),
    )?;
    let (cert, key) = ca.client("system:kube-controller-manager", &[])?;
    write(
        &f.kcm_conf,
        &kubeconfig::with_cert_in(
            server,
            ca.cert_pem(),
            "kubernetes",
            "system:kube-controller-manager",
            &cert,
            &key,
        ),
    )?;
    let (cert, key) = ca.client("system:kube-scheduler", &[])?;
    write(
        &f.scheduler_conf,
        &kubeconfig::with_cert_in(
            server,
            ca.cert_pem(),
            "kubernetes",
            "system:kube-scheduler",
            &cert,
            &key,
        ),
    )?;
    Ok(f)
}

/// The objects `kubeadm init` creates for joining nodes, as (collection path, body), in
/// creation order. `approve` decides whether the two auto-approval bindings exist.
pub fn kubeadm_objects(server: &str, ca_pem: &str, approve: Approve) -> Vec<(String, Value)> {
    let crb = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let mut out = vec![
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_string(),
            obj(&ClusterRole {
                metadata: meta("kubeadm:get-nodes", None),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["nodes".into()]),
                    verbs: vec!["get".into()],
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        ),
        (
            crb.to_string(),
            obj(&group_binding(
                "kubeadm:get-nodes",
                "kubeadm:get-nodes",
                &[DEFAULT_TOKEN_GROUP],
            )),
        ),
        (
            crb.to_string(),
            obj(&group_binding(
                "kubeadm:kubelet-bootstrap",
                "system:node-bootstrapper",
                &[DEFAULT_TOKEN_GROUP],
            )),
        ),
    ];
    if approve == Approve::Auto {
        out.push((
            crb.to_string(),
            obj(&group_binding(
                "kubeadm:node-autoapprove-bootstrap",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                &[DEFAULT_TOKEN_GROUP],
            )),
        ));
        out.push((
            crb.to_string(),
            obj(&group_binding(
                "kubeadm:node-autoapprove-certificate-rotation",
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                &["system:nodes"],
            )),
        ));
    }
    // cluster-info: the CA and server for discovery, signed per token by the bootstrapsigner
    // (its JWS appearing is how we know kube-controller-manager's controllers run).
    let info = kubeconfig::cluster_only(server, ca_pem, "");
    out.push((
        "/api/v1/namespaces/kube-public/configmaps".to_string(),
        obj(&ConfigMap {
            metadata: meta("cluster-info", Some("kube-public")),
            data: Some([("kubeconfig".to_string(), info)].into()),
            ..Default::default()
        }),
    ));
    let ns_rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public";
    out.push((
        format!("{ns_rbac}/roles"),
        obj(&Role {
            metadata: meta("kubeadm:bootstrap-signer-clusterinfo", Some("kube-public")),
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["configmaps".into()]),
                resource_names: Some(vec!["cluster-info".into()]),
                verbs: vec!["get".into()],
                ..Default::default()
            }]),
        }),
    ));
    out.push((
        format!("{ns_rbac}/rolebindings"),
        obj(&RoleBinding {
            metadata: meta("kubeadm:bootstrap-signer-clusterinfo", Some("kube-public")),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: "kubeadm:bootstrap-signer-clusterinfo".into(),
            },
            subjects: Some(vec![Subject {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "User".into(),
                name: "system:anonymous".into(),
                namespace: None,
            }]),
        }),
    ));
    out
}

/// A bootstrap token Secret (kube-system), as `kubeadm token create` makes it.
pub fn token_object(id: &str, secret: &str, ttl: Duration) -> (String, Value) {
    let s = crate::faults::token_secret(id, secret, Some(ttl), &[DEFAULT_TOKEN_GROUP]);
    (
        "/api/v1/namespaces/kube-system/secrets".into(),
        crate::to_value(&s),
    )
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..Default::default()
    }
}

/// A k8s-openapi object as the JSON body of its create request (apiVersion and kind set).
fn obj<T: serde::Serialize + k8s_openapi::Resource>(t: &T) -> Value {
    let mut v = crate::to_value(t);
    v["apiVersion"] = T::API_VERSION.into();
    v["kind"] = T::KIND.into();
    v
}
