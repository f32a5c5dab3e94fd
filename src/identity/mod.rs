//! The node's certificates: the CSR object, the issuing pipeline, the client identity
//! (bootstrap, rotation) and the kubelet's serving certificate. Uses the API and pki
//! layers; nothing below imports it.

pub mod bootstrap;
pub mod check;
pub mod client;
pub mod csr;
pub mod issue;
pub mod pass;
pub mod rejoin;
pub mod rotation;
pub mod sans;
pub mod serving;

#[cfg(test)]
pub(crate) mod outage_tests;
