//! What the listener, the API handlers and the fault injector hand each other: the
//! response type, a connection's identity, the commands faults send the accept loop. Below
//! all three, so none of them imports another one back.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::Response;
use tokio::sync::oneshot;

use crate::auth;

pub type Body = BoxBody<Bytes, Infallible>;
pub type Resp = Response<Body>;

/// Per-connection facts the handlers need.
#[derive(Clone)]
pub struct ConnInfo {
    pub conn: u64,
    pub peer: auth::PeerCert,
}

/// Commands to the accept loop.
pub enum Command {
    /// Drop the listener and every connection, ack, wait, listen again.
    Outage(std::time::Duration, oneshot::Sender<()>),
    /// Drop every open connection (the listener stays), then ack.
    DropConnections(oneshot::Sender<()>),
    /// Close every open connection gracefully (HTTP/2: GOAWAY, then close once its streams
    /// are answered; HTTP/1.1: close once idle), then ack.
    GoAway(oneshot::Sender<()>),
}
