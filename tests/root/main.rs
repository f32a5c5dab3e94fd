//! The tests that need root: the shipped units and packages under a real systemd in
//! systemd-nspawn machines (`systemd::`), and a node's disk failing under bootlet (`disk::`:
//! tmpfs mounts). Ignored by a plain `cargo test`; `bash tests/run.sh`
//! (as root) runs them.

#[path = "../support/mod.rs"]
mod support;

mod disk;
mod systemd;
