//! The Lease loop's test switches, compiled only with the `test-hooks` feature and set by
//! `agent::TestHooks` from the hidden flags: a loop that wedges, and the wire format and
//! HTTP version a loop starts with. A shipped build's loop has none of them.

use std::time::Duration;

use tokio::time::Instant;

use crate::api::conn::Connection;
use crate::api::protobuf::LeaseWire;

use super::LeaseLoop;

/// What the hidden `--test-*` flags change in the Lease loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// `--test-wedge-lease-after`: the loop stops making progress after this long, so tests
    /// can prove the systemd watchdog restarts a wedged agent.
    pub wedge_after: Option<Duration>,
    /// `--test-lease-content-type`: the wire format at the start (protobuf, as in a shipped
    /// build, unless set), so tests and the bench can compare JSON with protobuf.
    pub wire: LeaseWire,
    /// `--test-lease-http1`: the loop's connections offer only HTTP/1.1 by ALPN.
    pub http1_only: bool,
}

// === impl Hooks ===

impl Hooks {
    /// `cfg` with these switches.
    pub fn apply(self, cfg: LeaseLoop) -> LeaseLoop {
        LeaseLoop { hooks: self, ..cfg }
    }

    /// `conn` as the switches want it.
    pub(super) fn connection(&self, conn: Connection) -> Connection {
        match self.http1_only {
            true => conn.offering_http1_only(),
            false => conn,
        }
    }

    /// Whether the loop that started at `start` is to stop making progress now (logged).
    pub(super) fn wedged(&self, start: Instant) -> bool {
        let wedged = self.wedge_after.is_some_and(|d| start.elapsed() >= d);
        if wedged {
            tracing::warn!(
                "lease: --test-wedge-lease-after reached; the loop stops making progress"
            );
        }
        wedged
    }
}
