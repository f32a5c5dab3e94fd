//! Process plumbing every other layer uses: logging, systemd notification, shutdown,
//! exact timers, the wall clock, the health snapshot, back-off, durations and one-line text. A leaf
//! layer: nothing here imports the API, identity, Lease or doctor layers.

pub mod backoff;
pub mod clock;
pub mod duration;
pub mod gone;
pub mod health;
pub mod notify;
pub mod report;
pub mod shutdown;
pub mod systemctl;
pub mod telemetry;
pub mod text;
pub mod ticker;

pub use self::report::report;
