//! bootlet: gives a Kubernetes worker node its identity and keeps it alive.
//!
//! TLS bootstrap from a bootstrap kubeconfig, CSR filing and approval wait, client
//! certificates in the kubelet's own layout, the node Lease heartbeat and client
//! certificate rotation. `main.rs` is a thin shell over this library; `tests/` use it too.

pub mod backoff;
pub mod cli;
pub mod config;
pub mod kubeconfig;
pub mod pki;
pub mod telemetry;
pub mod agent;
pub mod apiserver;
pub mod bootstrap;
pub mod csr;
pub mod error;
pub mod health;
pub mod notify;
pub mod shutdown;
pub mod lease;
pub mod rotation;
