//! What bootlet's bench drivers (`bench/src/bin/`, run by `bench/*.sh`) share: reading a process
//! from /proc (`procfs`), statistics over what was read (`stats`), the tables and verdicts
//! they print (`table`), knobs from the environment (`knobs`), and one node's directory,
//! `bootlet run` command line and notify socket (`node`).
//! What each driver measures, and how it reads its figures, stays in the driver.
#![forbid(unsafe_code)]

pub mod knobs;
pub mod node;
pub mod procfs;
pub mod stats;
pub mod table;

/// Ends a driver as every one ends: exit status 0 when `result` is Ok (its report already
/// printed), 2 with the reason on stderr after `driver` when the harness could not measure
/// (a binary missing, a process that died). A missed budget is a FAIL in the report, never
/// an exit status.
pub fn exit_on_error(driver: &str, result: Result<(), String>) {
    if let Err(e) = result {
        eprintln!("{driver}: {e}");
        std::process::exit(2);
    }
}
