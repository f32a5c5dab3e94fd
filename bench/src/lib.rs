//! What bootlet's bench drivers (`src/bin/*`, run by `bench/*.sh`) share: reading a process
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
