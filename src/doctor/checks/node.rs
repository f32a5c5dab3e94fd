//! The `node` and `lease` verdicts: what the cluster thinks of this node once it has its
//! identity (Node authorizer, stale or unready Node, cloud/CNI initialisation, Lease age and
//! holder). Pure, like the rest of checks.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;

use super::forbidden;
use crate::config::Settings;
use crate::doctor::observe::{Observations, Using};
use crate::doctor::Outcome;
use crate::runtime::health::{ago, rfc3339};
use crate::runtime::report;

const RESTART_KUBELET: &str = "systemctl restart kubelet  # it registers its Node at start";
const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const WANTED_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "node.kubernetes.io/instance-type",
];

pub(super) fn needs_cert(obs: &Observations) -> Option<Outcome> {
    (!matches!(obs.using, Using::ClientCert { .. }))
        .then(|| Outcome::skip("skipped: needs a valid client certificate"))
}

pub(super) fn node(settings: &Settings, obs: &Observations) -> Outcome {
    if let Some(skip) = needs_cert(obs) {
        return skip;
    }
    let name = &settings.node_name;
    let refused = forbidden(&obs.net.node).or_else(|| forbidden(&obs.net.lease));
    if let Some(e) = refused {
        let message = match e {
            crate::api::Error::Api { status, .. } => status.message.clone().unwrap_or_default(),
            _ => String::new(),
        };
        return Outcome::fail(
            format!("the Node authorizer refuses system:node:{name} its own Node or Lease: {message}"),
            format!("kubectl auth can-i get nodes/{name} --as=system:node:{name} --as-group=system:nodes  # kube-apiserver needs --authorization-mode=Node,RBAC"),
        );
    }
    let node = match &obs.net.node {
        Some(Ok(n)) => n,
        // Not a failure: a node that just joined looks the same until its kubelet starts.
        // But the kubelet registers its Node only when it starts: one deleted under a running
        // kubelet stays gone (kube-apiserver v1.37: the kubelet logs "Error updating node
        // status" and never registers again), so the fix is a restart, not a wait.
        Some(Err(e)) if e.is_not_found() => {
            return Outcome::warn(
                format!(
                    "Node {name} is not registered: the kubelet registers its Node only when it starts, so one deleted under a running kubelet stays gone"
                ),
                Some(RESTART_KUBELET.into()),
            )
        }
        Some(Err(e)) => {
            return Outcome::fail(
                format!("GET Node {name}: {}", report(e)),
                "systemctl status kubelet".to_string(),
            )
        }
        None => return super::budget(obs, "GET Node"),
    };
    judge_node(name, node, obs.machine_id.as_deref())
}

/// Weigh a Node as an operator would: what keeps pods off it fails, what degrades it warns.
pub(super) fn judge_node(name: &str, node: &Node, machine_id: Option<&str>) -> Outcome {
    if let Some(failed) = node_failure(name, node, machine_id) {
        return failed;
    }
    let (warnings, fix) = node_warnings(name, node);
    if warnings.is_empty() {
        let spec = node.spec.clone().unwrap_or_default();
        Outcome::pass(format!(
            "Node {name} is Ready, podCIDR {}",
            spec.pod_cidr.unwrap_or_default()
        ))
    } else {
        Outcome::warn(
            format!("Node {name} is Ready, but {}", warnings.join("; ")),
            fix,
        )
    }
}

/// The fail of `node`, if any: registered by another machine, not Ready, or its network
/// not configured.
fn node_failure(name: &str, node: &Node, machine_id: Option<&str>) -> Option<Outcome> {
    let status = node.status.clone().unwrap_or_default();
    let registered_by = status
        .node_info
        .as_ref()
        .map(|i| i.machine_id.as_str())
        .unwrap_or("");
    if let Some(ours) = machine_id {
        if !registered_by.is_empty() && registered_by != ours {
            return Some(Outcome::fail(
                format!("Node {name} was registered by another machine (machineID {registered_by}, this host {ours}): a stale Node left from a reinstall"),
                format!("kubectl delete node {name}  # the kubelet registers it again"),
            ));
        }
    }
    let conditions = status.conditions.unwrap_or_default();
    let cond = |t: &str| conditions.iter().find(|c| c.type_ == t);
    match cond("Ready") {
        Some(c) if c.status == "True" => {}
        Some(c) => {
            return Some(Outcome::fail(
                format!(
                    "Node {name} is NotReady ({}: {})",
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default()
                ),
                "journalctl -u kubelet -n 50  # the kubelet says why",
            ))
        }
        None => {
            return Some(Outcome::fail(
                format!(
                    "Node {name} has no Ready condition: the kubelet has not posted its status"
                ),
                "journalctl -u kubelet -n 50",
            ))
        }
    }
    if let Some(c) = cond("NetworkUnavailable").filter(|c| c.status == "True") {
        return Some(Outcome::fail(
            format!("Node {name} has NetworkUnavailable=True ({}): the CNI plugin has not configured it", c.reason.clone().unwrap_or_default()),
            format!("kubectl -n kube-system get pods -o wide --field-selector spec.nodeName={name}  # is the CNI pod running?"),
        ));
    }
    None
}

/// What a Ready `node` still lacks (taint, podCIDR, topology labels), and the command for
/// the first of them.
fn node_warnings(name: &str, node: &Node) -> (Vec<String>, Option<String>) {
    let spec = node.spec.clone().unwrap_or_default();
    let mut warnings = Vec::new();
    let mut fix = None;
    if spec
        .taints
        .iter()
        .flatten()
        .any(|t| t.key == UNINITIALIZED_TAINT)
    {
        warnings.push(format!("taint {UNINITIALIZED_TAINT} is still set (the cloud-controller-manager has not initialised it)"));
        fix.get_or_insert(
            "kubectl -n kube-system logs -l component=cloud-controller-manager --tail=50"
                .to_string(),
        );
    }
    if spec.pod_cidr.as_deref().unwrap_or("").is_empty() {
        warnings
            .push("no spec.podCIDR (per-node CIDR CNIs cannot give pods addresses)".to_string());
        fix.get_or_insert("kubectl -n kube-system logs -l component=kube-controller-manager --tail=50 | grep -i cidr  # --allocate-node-cidrs?".to_string());
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let missing: Vec<&str> = WANTED_LABELS
        .iter()
        .copied()
        .filter(|l| !labels.contains_key(*l))
        .collect();
    if !missing.is_empty() {
        warnings.push(format!(
            "labels {} missing (zone/instance-type affinity will not match)",
            missing.join(", ")
        ));
        fix.get_or_insert(format!("kubectl label node {name} topology.kubernetes.io/zone=ZONE node.kubernetes.io/instance-type=TYPE"));
    }
    (warnings, fix)
}

fn node_missing(obs: &Observations) -> bool {
    matches!(&obs.net.node, Some(Err(e)) if e.is_not_found())
}

pub(super) fn lease(settings: &Settings, obs: &Observations, now: SystemTime) -> Outcome {
    if let Some(skip) = needs_cert(obs) {
        return skip;
    }
    let name = &settings.node_name;
    let writer = if settings.renew_lease {
        "bootlet"
    } else {
        "kubelet"
    };
    match &obs.net.lease {
        Some(Ok(lease)) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.unwrap_or_default();
            if holder != *name {
                return Outcome::fail(
                    format!("Lease kube-node-lease/{name} is held by {holder:?}, not {name}"),
                    format!("kubectl -n kube-node-lease delete lease {name}  # {writer} creates it again"),
                );
            }
            let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            let Some(renewed) = spec.renew_time.map(|t| SystemTime::from(t.0)) else {
                return Outcome::fail(format!("Lease kube-node-lease/{name} was never renewed"), format!("systemctl restart {writer}"));
            };
            if now.duration_since(renewed).unwrap_or_default() > duration {
                return Outcome::fail(
                    format!("Lease kube-node-lease/{name} was last renewed {} ago ({}), longer than its {}s duration: nothing renews it", ago(now, renewed), rfc3339(renewed), duration.as_secs()),
                    format!("systemctl restart {writer}"),
                );
            }
            Outcome::pass(format!("Lease kube-node-lease/{name} renewed {} ago by {holder}", ago(now, renewed)))
        }
        Some(Err(e)) if e.is_forbidden() => Outcome::fail(
            format!("GET Lease kube-node-lease/{name}: {}", report(e)),
            format!("kubectl auth can-i get leases/{name} -n kube-node-lease --as=system:node:{name} --as-group=system:nodes"),
        ),
        // The kubelet's lease controller writes no Lease while its Node is missing ("Failed
        // to prepare lease": it sets the Node as the owner first).
        Some(Err(e)) if e.is_not_found() && !settings.renew_lease && node_missing(obs) => Outcome::warn(
            format!("no Lease kube-node-lease/{name}: the kubelet writes it only while its Node exists"),
            Some(RESTART_KUBELET.into()),
        ),
        Some(Err(e)) if e.is_not_found() => Outcome::warn(
            format!("no Lease kube-node-lease/{name} yet: {writer} creates it"),
            Some(format!("systemctl start {writer}")),
        ),
        Some(Err(e)) => Outcome::fail(format!("GET Lease kube-node-lease/{name}: {}", report(e)), format!("systemctl status {writer}")),
        None => super::budget(obs, "GET Lease"),
    }
}
