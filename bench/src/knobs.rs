//! Knobs from the environment: every driver takes its settings this way (bench/README.md
//! lists them). Reading only; a knob that is unset or does not parse is its default.

use std::path::PathBuf;

/// A whole number from the environment variable `name`, or `default`.
pub fn num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A path from the environment variable `name`, or `default`, as given (not made absolute).
pub fn path(name: &str, default: &str) -> PathBuf {
    std::env::var_os(name).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// `BOOTLET_BIN`: the agent under test, target/release/bootlet as the scripts build it.
pub fn bootlet_bin() -> PathBuf {
    path("BOOTLET_BIN", "target/release/bootlet")
}

/// `FLOOR_BIN`: the bare HTTP stack (`bench/src/bin/floor.rs`), target/release/floor.
pub fn floor_bin() -> PathBuf {
    path("FLOOR_BIN", "target/release/floor")
}
