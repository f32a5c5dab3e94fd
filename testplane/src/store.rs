//! The in-memory object store: objects as JSON produced from k8s-openapi types, one global
//! resourceVersion counter, a bounded event history and the watch fan-out.
//! It knows nothing of authentication, validation or HTTP.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::broadcast;

/// How many store events are kept for watch resumption.
pub const HISTORY: usize = 1000;

/// The kinds the testplane serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Csr,
    Lease,
    Node,
    Secret,
    Namespace,
    ClusterRole,
    ClusterRoleBinding,
}

/// How a kind appears on the wire.
pub struct KindInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

const RW: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

// === impl Kind ===

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Csr,
        Kind::Lease,
        Kind::Node,
        Kind::Secret,
        Kind::Namespace,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
    ];

    pub fn info(self) -> KindInfo {
        let (group, version, resource, kind, namespaced, short_names): (_, _, _, _, _, &[&str]) =
            match self {
                Kind::Csr => (
                    "certificates.k8s.io",
                    "v1",
                    "certificatesigningrequests",
                    "CertificateSigningRequest",
                    false,
                    &["csr"],
                ),
                Kind::Lease => ("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
                Kind::Node => ("", "v1", "nodes", "Node", false, &["no"]),
                Kind::Secret => ("", "v1", "secrets", "Secret", true, &[]),
                Kind::Namespace => ("", "v1", "namespaces", "Namespace", false, &["ns"]),
                Kind::ClusterRole => (
                    "rbac.authorization.k8s.io",
                    "v1",
                    "clusterroles",
                    "ClusterRole",
                    false,
                    &[],
                ),
                Kind::ClusterRoleBinding => (
                    "rbac.authorization.k8s.io",
                    "v1",
                    "clusterrolebindings",
                    "ClusterRoleBinding",
                    false,
                    &[],
                ),
            };
        KindInfo {
            group,
            version,
            resource,
            kind,
            namespaced,
            short_names,
            verbs: RW,
        }
    }

    pub fn from_resource(group: &str, version: &str, resource: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| {
            let i = k.info();
            i.group == group && i.version == version && i.resource == resource
        })
    }

    pub fn api_version(self) -> String {
        let i = self.info();
        if i.group.is_empty() {
            i.version.to_string()
        } else {
            format!("{}/{}", i.group, i.version)
        }
    }
}

/// ADDED, MODIFIED or DELETED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers see it.
#[derive(Debug, Clone)]
pub struct StoreEvent {
    pub rv: u64,
    pub kind: Kind,
    pub ty: EventType,
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StoreError {
    #[error("already exists")]
    AlreadyExists,
    #[error("not found")]
    NotFound,
    #[error("the object has been modified; please apply your changes to the latest version and try again")]
    Conflict,
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
}

type Key = (Kind, String, String);

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<StoreEvent>,
    /// Every event with rv > compacted is in `history`.
    compacted: u64,
}

pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<StoreEvent>,
}

// === impl Store ===

impl Default for Store {
    fn default() -> Self {
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                compacted: 1,
            }),
            tx: broadcast::channel(8192).0,
        }
    }
}

impl Store {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Every change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.tx.subscribe()
    }

    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(kind, ns.into(), name.into()))
            .cloned()
    }

    /// All objects of `kind` (in namespace `ns` when given) and the list resourceVersion.
    pub fn list(&self, kind: Kind, ns: Option<&str>) -> (Vec<Value>, u64) {
        let g = self.lock();
        let items = g
            .objects
            .iter()
            .filter(|((k, n, _), _)| *k == kind && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect();
        (items, g.rv)
    }

    /// Store a new object; sets resourceVersion, uid, creationTimestamp and namespace.
    pub fn create(&self, kind: Kind, ns: &str, mut obj: Value) -> Result<Value, StoreError> {
        let name = meta_str(&obj, "name").to_string();
        let mut g = self.lock();
        let key = (kind, ns.to_string(), name.clone());
        if g.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        let rv = g.rv + 1;
        let m = meta_mut(&mut obj);
        m.insert("resourceVersion".into(), rv.to_string().into());
        m.insert("uid".into(), new_uid().into());
        m.insert(
            "creationTimestamp".into(),
            jiff::Timestamp::now()
                .round(jiff::Unit::Second)
                .unwrap_or_else(|_| jiff::Timestamp::now())
                .to_string()
                .into(),
        );
        if kind.info().namespaced {
            m.insert("namespace".into(), ns.into());
        } else {
            m.remove("namespace");
        }
        g.objects.insert(key, obj.clone());
        self.commit(&mut g, rv, kind, EventType::Added, ns, &name, obj.clone());
        Ok(obj)
    }

    /// Replace an object. A non-empty metadata.resourceVersion must match (else Conflict);
    /// uid and creationTimestamp are kept from the stored object.
    pub fn update(&self, kind: Kind, ns: &str, mut obj: Value) -> Result<Value, StoreError> {
        self.update_with(
            kind,
            ns,
            meta_str(&obj, "name").to_string().as_str(),
            |old| {
                let want = meta_str(&obj, "resourceVersion");
                if !want.is_empty() && want != meta_str(old, "resourceVersion") {
                    return Err(StoreError::Conflict);
                }
                for k in ["uid", "creationTimestamp", "namespace", "generateName"] {
                    match old["metadata"].get(k) {
                        Some(v) => meta_mut(&mut obj).insert(k.into(), v.clone()),
                        None => meta_mut(&mut obj).remove(k),
                    };
                }
                Ok(obj)
            },
        )
    }

    /// Read-modify-write under the store lock; `f` returns the new object.
    pub fn update_with(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        f: impl FnOnce(&Value) -> Result<Value, StoreError>,
    ) -> Result<Value, StoreError> {
        let mut g = self.lock();
        let key = (kind, ns.to_string(), name.to_string());
        let old = g.objects.get(&key).ok_or(StoreError::NotFound)?;
        let mut obj = f(old)?;
        let rv = g.rv + 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), rv.to_string().into());
        g.objects.insert(key, obj.clone());
        self.commit(&mut g, rv, kind, EventType::Modified, ns, name, obj.clone());
        Ok(obj)
    }

    pub fn delete(&self, kind: Kind, ns: &str, name: &str) -> Result<Value, StoreError> {
        let mut g = self.lock();
        let mut obj = g
            .objects
            .remove(&(kind, ns.to_string(), name.to_string()))
            .ok_or(StoreError::NotFound)?;
        let rv = g.rv + 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), rv.to_string().into());
        self.commit(&mut g, rv, kind, EventType::Deleted, ns, name, obj.clone());
        Ok(obj)
    }

    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        g: &mut Inner,
        rv: u64,
        kind: Kind,
        ty: EventType,
        ns: &str,
        name: &str,
        object: Value,
    ) {
        g.rv = rv;
        let ev = StoreEvent {
            rv,
            kind,
            ty,
            namespace: ns.to_string(),
            name: name.to_string(),
            object,
        };
        g.history.push_back(ev.clone());
        while g.history.len() > HISTORY {
            if let Some(e) = g.history.pop_front() {
                g.compacted = e.rv;
            }
        }
        let _ = self.tx.send(ev);
    }

    /// Forget all history: any watch from an older resourceVersion now gets 410 Gone.
    pub fn compact(&self) {
        let mut g = self.lock();
        g.history.clear();
        g.compacted = g.rv;
    }

    /// Start a watch of `kind`. `since` None means "current state first" (synthetic ADDED
    /// events for every existing object); Some(rv) replays the history after rv.
    /// The receiver is subscribed under the lock, so nothing falls between backlog and live.
    pub fn watch(
        &self,
        kind: Kind,
        ns: Option<&str>,
        since: Option<u64>,
    ) -> Result<(Vec<StoreEvent>, broadcast::Receiver<StoreEvent>), StoreError> {
        let g = self.lock();
        let rx = self.tx.subscribe();
        let in_ns = |e_ns: &str| ns.is_none_or(|n| n == e_ns);
        let backlog = match since {
            None => g
                .objects
                .iter()
                .filter(|((k, n, _), _)| *k == kind && in_ns(n))
                .map(|((k, n, name), v)| StoreEvent {
                    rv: g.rv,
                    kind: *k,
                    ty: EventType::Added,
                    namespace: n.clone(),
                    name: name.clone(),
                    object: v.clone(),
                })
                .collect(),
            Some(rv) if rv < g.compacted => {
                return Err(StoreError::Gone {
                    requested: rv,
                    oldest: g.compacted + 1,
                })
            }
            Some(rv) => g
                .history
                .iter()
                .filter(|e| e.rv > rv && e.kind == kind && in_ns(&e.namespace))
                .cloned()
                .collect(),
        };
        Ok((backlog, rx))
    }
}

/// `metadata.<field>` as a string, or "".
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or("")
}

/// The metadata map, created if missing.
pub fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = Value::Object(Default::default());
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// A random RFC 4122 version-4 UID.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_conflicts_and_history() {
        let s = Store::default();
        let a = s
            .create(Kind::Lease, "ns", json!({"metadata": {"name": "a"}}))
            .unwrap();
        let rv1: u64 = meta_str(&a, "resourceVersion").parse().unwrap();
        assert_eq!(
            s.create(Kind::Lease, "ns", json!({"metadata": {"name": "a"}})),
            Err(StoreError::AlreadyExists)
        );
        let b = s.update(Kind::Lease, "ns", a.clone()).unwrap();
        assert_eq!(meta_str(&b, "uid"), meta_str(&a, "uid"));
        assert_eq!(
            s.update(Kind::Lease, "ns", a.clone()),
            Err(StoreError::Conflict)
        );
        let (ev, _) = s.watch(Kind::Lease, None, Some(rv1)).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].ty, EventType::Modified);
        s.compact();
        assert!(matches!(
            s.watch(Kind::Lease, None, Some(rv1)),
            Err(StoreError::Gone { .. })
        ));
        assert_eq!(s.watch(Kind::Lease, None, None).unwrap().0.len(), 1);
    }
}
