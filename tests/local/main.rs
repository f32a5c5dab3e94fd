//! The integration tests that need neither root nor a cluster: the real `bootlet` binary
//! against the in-process testplane, the docs and layering checks, the fuzz harnesses.
//! One test binary with a module per area (`cargo test --test local`; one area:
//! `cargo test --test local lease::`); tests that need the `test-hooks` feature say so
//! and are ignored without it.

#[path = "../support/mod.rs"]
mod support;

mod alert_rules;
mod approval;
mod bootstrap;
mod cli;
mod connection;
mod crash;
mod docs;
mod doctor;
mod exec;
mod faults;
mod fleet;
mod fuzz;
mod hostile;
mod kubeconfig;
mod layers;
mod lease;
mod lease_proto;
mod local_input;
mod metrics;
mod notify;
mod other_ca;
mod prometheus;
mod proxy;
mod redirect;
mod rotation;
mod secrets;
mod serving;
