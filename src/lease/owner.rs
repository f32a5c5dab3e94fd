//! The Lease's owner reference: what the loop believes the Node's UID is, when it may look
//! the Node up again, and which reference a Lease read from the server already carries.
//! The belief is dropped when the Lease is gone (404: the garbage collector deletes a Lease
//! whose Node was deleted) or names another Node UID; the Lease's own Node reference always
//! wins over the belief. Looking up is the loop's (IO); this is the bookkeeping (pure).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tokio::time::Instant;

/// The loop's belief about the Lease's Node owner.
#[derive(Debug)]
pub(super) struct Owner {
    node: String,
    belief: Option<OwnerReference>,
    /// No lookup before this (at most one per `every`, never one per renewal).
    next_lookup: Instant,
    every: Duration,
}

// === impl Owner ===

impl Owner {
    /// No belief yet; the first lookup is due at once.
    pub(super) fn new(node: &str, every: Duration, now: Instant) -> Self {
        Self {
            node: node.to_string(),
            belief: None,
            next_lookup: now,
            every,
        }
    }

    /// The reference to give a Lease that has no Node reference of its own.
    pub(super) fn belief(&self) -> Option<&OwnerReference> {
        self.belief.as_ref()
    }

    /// Whether to look the Node up now: nothing is believed, and the last lookup was at
    /// least `every` ago.
    pub(super) fn lookup_due(&self, now: Instant) -> bool {
        self.belief.is_none() && now >= self.next_lookup
    }

    /// A lookup is being made at `now`; the next one waits `every`.
    pub(super) fn looking_up(&mut self, now: Instant) {
        self.next_lookup = now + self.every;
    }

    /// The lookup found the Node with `uid`.
    pub(super) fn found(&mut self, uid: String) {
        self.belief = Some(node_ref(&self.node, uid));
    }

    /// The Lease is gone: the Node it belonged to may be gone too (its deletion is what
    /// makes the garbage collector delete the Lease). Looked up again before a create,
    /// when the lookup interval allows.
    pub(super) fn forget(&mut self) {
        self.belief = None;
    }

    /// A Lease read from the server (a GET, a write's answer): when it names our Node by
    /// another UID than the one we believe, that reference stays, and our belief is dropped
    /// to be looked up again (the Node was deleted and re-registered, and someone who knows
    /// its new UID wrote it, or the Lease still names the old one and will be collected).
    /// Returns whether the belief was dropped.
    pub(super) fn observe(&mut self, lease: &Lease) -> bool {
        let theirs = lease
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.kind == "Node" && r.name == self.node);
        match (&self.belief, theirs) {
            (Some(ours), Some(theirs)) if ours.uid != theirs.uid => {
                self.belief = None;
                true
            }
            _ => false,
        }
    }
}

/// The owner reference for Node `name` with `uid`.
fn node_ref(name: &str, uid: String) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.to_string(),
        uid,
        ..OwnerReference::default()
    }
}
