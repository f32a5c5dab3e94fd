//! bootlet against the real Kubernetes built from upstream (`testplane::kube`): one module
//! per area, each with a cluster of its own (`support::kube::cluster`), at most two running
//! at a time. Every test is ignored by a plain `cargo test` (it needs the Kubernetes build):
//! `bash tests/run.sh` builds it and runs them; by hand, after `cargo run -p
//! bootlet-testplane -- kube-build` (and `kube-build --release oldest` for `oldest::`):
//! `cargo test --features bootlet/test-hooks --test kube -- --include-ignored [MODULE::]`.

#[path = "../support/mod.rs"]
mod support;

mod approve;
mod doctor;
mod exec;
mod join;
mod kubeadm;
mod oldest;
mod proto;
mod restore;
mod signer;
