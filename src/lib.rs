//! bootlet: gives a Kubernetes worker node its identity and keeps it alive.
//!
//! TLS bootstrap from a bootstrap kubeconfig, CSR filing and approval wait, client
//! certificates in the kubelet's own layout, the node Lease heartbeat and client
//! certificate rotation. `main.rs` is a thin shell over this library; `tests/` use it too.

pub mod agent;
pub mod api;
pub mod approve;
pub mod checkid;
pub mod cli;
pub mod config;
pub mod defaults;
pub mod doctor;
pub mod error;
pub mod identity;
pub mod lease;
pub mod metrics;
pub mod pki;
pub mod purpose;
pub mod runtime;
pub mod version;
