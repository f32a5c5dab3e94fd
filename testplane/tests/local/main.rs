//! The testplane's own integration tests, one binary with a module per area: the imitation
//! over real TLS (`api`), its fault switches (`faults`), the kubelet-serving signer
//! (`serving`) and the `bootlet-testplane serve` binary (`binary`).

#[path = "../support/mod.rs"]
mod support;

mod api;
mod binary;
mod faults;
mod serving;
