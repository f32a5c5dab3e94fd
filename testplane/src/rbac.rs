//! Authorization: the Node authorizer for `system:node:X`, then RBAC evaluated from the
//! ClusterRoles and ClusterRoleBindings in the store (seeded with kubeadm's defaults), so a
//! binding deleted through the API changes decisions at once. Messages read like the real ones.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::auth::UserInfo;
use crate::store::{Kind, Store};

/// What a request wants to do, in authorizer terms.
#[derive(Debug, Clone, Default)]
pub struct Attrs {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Set for non-resource requests (`/version`, `/api`...).
    pub path: Option<String>,
}

impl Attrs {
    pub fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attrs {
        Attrs {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: None,
        }
    }

    /// The RBAC-style Forbidden message.
    pub fn forbidden_message(&self, user: &str) -> String {
        if let Some(p) = &self.path {
            return format!(
                "forbidden: User \"{user}\" cannot {} path \"{p}\"",
                self.verb
            );
        }
        let gr = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let named = if self.name.is_empty() {
            String::new()
        } else {
            format!(" \"{}\"", self.name)
        };
        let res = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        format!(
            "{gr}{named} is forbidden: User \"{user}\" cannot {} resource \"{res}\" in API group \"{}\" {scope}",
            self.verb, self.group
        )
    }
}

/// The decision, with the node authorizer's reason when it denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(Option<String>),
}

/// Node authorizer, then RBAC. `system:masters` may do anything.
pub fn authorize(store: &Store, user: &UserInfo, a: &Attrs) -> Decision {
    if user.in_group("system:masters") {
        return Decision::Allow;
    }
    if let Some(node) = user.node_name() {
        if let Some(d) = node_authorizer(node, a) {
            return d;
        }
    }
    if rbac_allows(store, user, a) {
        Decision::Allow
    } else {
        Decision::Deny(None)
    }
}

/// The Node authorizer: `Some` when it has an opinion, `None` to defer to RBAC.
fn node_authorizer(node: &str, a: &Attrs) -> Option<Decision> {
    let deny = |why: String| Some(Decision::Deny(Some(why)));
    match (a.group.as_str(), a.resource.as_str()) {
        ("", "nodes") => {
            if a.name.is_empty() && !matches!(a.verb.as_str(), "create" | "list" | "watch") {
                return deny(format!("node '{node}' cannot {} all nodes", a.verb));
            }
            if !a.name.is_empty() && a.name != node {
                return deny(format!("node '{node}' cannot {} node '{}'", a.verb, a.name));
            }
            Some(Decision::Allow)
        }
        ("coordination.k8s.io", "leases") => {
            let verb_ok = matches!(
                a.verb.as_str(),
                "get" | "create" | "update" | "patch" | "delete"
            );
            if a.namespace != "kube-node-lease"
                || !verb_ok
                || (a.verb != "create" && a.name != node)
            {
                return deny(
                    "can only access node lease with the same name as the requesting node".into(),
                );
            }
            Some(Decision::Allow)
        }
        ("certificates.k8s.io", "certificatesigningrequests") if a.subresource.is_empty() => {
            matches!(a.verb.as_str(), "create" | "get" | "list" | "watch")
                .then_some(Decision::Allow)
        }
        _ => None,
    }
}

fn rbac_allows(store: &Store, user: &UserInfo, a: &Attrs) -> bool {
    let (bindings, _) = store.list(Kind::ClusterRoleBinding, None);
    for b in bindings {
        let Ok(b) = serde_json::from_value::<ClusterRoleBinding>(b) else {
            continue;
        };
        let applies = b.subjects.iter().flatten().any(|s| match s.kind.as_str() {
            "User" => s.name == user.name,
            "Group" => user.in_group(&s.name),
            _ => false,
        });
        if !applies || b.role_ref.kind != "ClusterRole" {
            continue;
        }
        let Some(role) = store.get(Kind::ClusterRole, "", &b.role_ref.name) else {
            continue;
        };
        let Ok(role) = serde_json::from_value::<ClusterRole>(role) else {
            continue;
        };
        if role.rules.iter().flatten().any(|r| rule_allows(r, a)) {
            return true;
        }
    }
    false
}

fn rule_allows(r: &PolicyRule, a: &Attrs) -> bool {
    let has = |v: &Option<Vec<String>>, x: &str| v.iter().flatten().any(|s| s == "*" || s == x);
    if !r.verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    if let Some(p) = &a.path {
        return r.non_resource_urls.iter().flatten().any(|u| {
            u == p || u == "*" || u.strip_suffix('*').is_some_and(|pre| p.starts_with(pre))
        });
    }
    let res = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    has(&r.api_groups, &a.group)
        && has(&r.resources, &res)
        && (r.resource_names.as_ref().is_none_or(|n| n.is_empty())
            || has(&r.resource_names, &a.name))
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |x: &[&str]| Some(x.iter().map(|s| s.to_string()).collect());
    PolicyRule {
        api_groups: v(groups),
        resources: v(resources),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn urls(paths: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        non_resource_urls: Some(paths.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// The kubeadm/bootstrap-policy defaults the approver and the tests depend on.
pub fn default_roles() -> (Vec<ClusterRole>, Vec<ClusterRoleBinding>) {
    let csr = "certificates.k8s.io";
    let role = |name: &str, rules: Vec<PolicyRule>| ClusterRole {
        metadata: meta(name),
        rules: Some(rules),
        ..Default::default()
    };
    let roles = vec![
        role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        role(
            "system:node-bootstrapper",
            vec![rule(
                &[csr],
                &["certificatesigningrequests"],
                &["create", "get", "list", "watch"],
            )],
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(
                &[csr],
                &["certificatesigningrequests/nodeclient"],
                &["create"],
            )],
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(
                &[csr],
                &["certificatesigningrequests/selfnodeclient"],
                &["create"],
            )],
        ),
        role(
            "system:basic-user",
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        role(
            "system:discovery",
            vec![urls(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        role(
            "system:public-info-viewer",
            vec![urls(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
    ];
    let binding = group_binding;
    let token_group = crate::DEFAULT_TOKEN_GROUP;
    let bindings = vec![
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding(
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            &[token_group],
        ),
        binding(
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[token_group],
        ),
        binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &["system:nodes"],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ];
    (roles, bindings)
}

/// A ClusterRoleBinding `name` of ClusterRole `role` to `groups`.
pub fn group_binding(name: &str, role: &str, groups: &[&str]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(
            groups
                .iter()
                .map(|g| Subject {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Group".into(),
                    name: g.to_string(),
                    namespace: None,
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded() -> Store {
        let s = Store::default();
        let (roles, bindings) = default_roles();
        for r in roles {
            s.create(Kind::ClusterRole, "", serde_json::to_value(r).unwrap())
                .unwrap();
        }
        for b in bindings {
            s.create(
                Kind::ClusterRoleBinding,
                "",
                serde_json::to_value(b).unwrap(),
            )
            .unwrap();
        }
        s
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn bootstrapper_and_node_rules() {
        let s = seeded();
        let boot = user(
            "system:bootstrap:abcdef",
            &[
                "system:bootstrappers",
                crate::DEFAULT_TOKEN_GROUP,
                "system:authenticated",
            ],
        );
        let create = Attrs::resource(
            "create",
            "certificates.k8s.io",
            "certificatesigningrequests",
            "",
            "",
            "",
        );
        assert_eq!(authorize(&s, &boot, &create), Decision::Allow);
        let lease = Attrs::resource(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "kube-node-lease",
            "n1",
        );
        assert_eq!(authorize(&s, &boot, &lease), Decision::Deny(None));
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        assert_eq!(authorize(&s, &node, &lease), Decision::Allow);
        let other = Attrs::resource(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "kube-node-lease",
            "n2",
        );
        assert!(matches!(
            authorize(&s, &node, &other),
            Decision::Deny(Some(_))
        ));
        s.delete(Kind::ClusterRoleBinding, "", "kubeadm:kubelet-bootstrap")
            .unwrap();
        assert_eq!(authorize(&s, &boot, &create), Decision::Deny(None));
        assert_eq!(
            create.forbidden_message("system:bootstrap:abcdef"),
            "certificatesigningrequests.certificates.k8s.io is forbidden: User \"system:bootstrap:abcdef\" cannot create resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope"
        );
    }
}
