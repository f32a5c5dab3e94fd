//! The evidence trail: `Event`s broadcast as things happen (connections, handshakes, CSR
//! transitions, Lease writes, outages, every request) and the `RequestRecord` log entry.
//! Tests await these (`wait_for`) instead of sleeping.

use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;

/// One served request, for the evidence trail.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub at: SystemTime,
    /// Connection id (see `Event::ConnectionOpened`).
    pub conn: u64,
    /// The authenticated user name ("" when authentication failed).
    pub user: String,
    /// Kubernetes verb (get, list, watch, create, update, patch, delete) or the lower-case
    /// HTTP method for non-resource paths.
    pub verb: String,
    pub method: String,
    /// Path and query.
    pub path: String,
    pub status: u16,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    /// The request body's `Content-Type` ("" when none was sent).
    pub content_type: String,
    /// The answer's `Content-Type` ("" when none).
    pub response_type: String,
}

/// What happened, in order, for tests to await instead of sleeping.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    ConnectionOpened {
        conn: u64,
    },
    TlsHandshake {
        conn: u64,
        alpn: Option<String>,
        client_cn: Option<String>,
        /// The server name the client sent (SNI), if any.
        sni: Option<String>,
        /// The trusted client certificate's serial, lower-case hex of its DER bytes (as
        /// bootlet logs it).
        client_serial: Option<String>,
    },
    ConnectionClosed {
        conn: u64,
    },
    CsrCreated {
        name: String,
        /// The authenticated requester (`spec.username`).
        user: String,
        /// `spec.signerName`, e.g. `testplane::KUBELET_SERVING_SIGNER`.
        signer: String,
    },
    CsrApproved {
        name: String,
    },
    CsrDenied {
        name: String,
        reason: String,
    },
    CsrFailed {
        name: String,
        reason: String,
        message: String,
    },
    CsrIssued {
        name: String,
        not_after: SystemTime,
    },
    LeaseCreated {
        name: String,
        user: String,
        conn: u64,
    },
    LeaseRenewed {
        name: String,
        user: String,
        renew_time: Option<jiff::Timestamp>,
        conn: u64,
    },
    OutageStarted,
    OutageEnded,
    WatchDropped {
        conn: u64,
    },
    Request(RequestRecord),
}

/// Wait (bounded) for the first event matching `f`; `None` on timeout or a closed channel.
pub async fn wait_for<T>(
    rx: &mut broadcast::Receiver<Event>,
    within: Duration,
    mut f: impl FnMut(&Event) -> Option<T>,
) -> Option<T> {
    tokio::time::timeout(within, async {
        loop {
            match rx.recv().await {
                Ok(e) => {
                    if let Some(t) = f(&e) {
                        return Some(t);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}
