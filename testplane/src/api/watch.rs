//! Watches: newline-delimited WatchEvent JSON streamed in chunks, resumable from a
//! resourceVersion in the bounded history; a too-old version gets an ERROR event with a
//! 410 Expired Status (as the watch cache does), then the stream ends.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::select::{field_filter, matches};
use super::{ApiError, Ctx, Resp};
use crate::store::{Kind, StoreError, StoreEvent};
use crate::Event;

fn line(ty: &str, object: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({ "type": ty, "object": object })).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

pub fn serve(ctx: &Ctx, kind: Kind, ns: &str, name: &str) -> Result<Resp, ApiError> {
    let mut filter = field_filter(ctx)?;
    if ctx.shared.faults.watch_ignores_selectors() {
        filter.clear();
    }
    if !name.is_empty() {
        filter.push(("name".into(), name.into()));
    }
    let since = match ctx.q("resourceVersion").unwrap_or("") {
        "" | "0" => None,
        rv => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
    };
    let timeout = ctx
        .q("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let drop_after = ctx.shared.faults.take_watch_drop();
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    match ctx
        .shared
        .store
        .watch(kind, (!ns.is_empty()).then_some(ns), since)
    {
        Err(e @ StoreError::Gone { .. }) => {
            let st = ApiError::from_store(e, kind, "").status();
            let _ = tx.try_send(line("ERROR", &crate::to_value(&st)));
        }
        Err(e) => return Err(ApiError::from_store(e, kind, name)),
        Ok((backlog, live)) => {
            let shared = ctx.shared.clone();
            let conn = ctx.conn;
            let ns = (!ns.is_empty()).then(|| ns.to_string());
            tokio::spawn(async move {
                let scope = Scope { kind, ns, filter };
                let dropped = pump(tx, backlog, live, scope, timeout, drop_after).await;
                if dropped {
                    shared.emit(Event::WatchDropped { conn });
                }
            });
        }
    }
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}

/// What a watch selects and how it renders objects.
struct Scope {
    kind: Kind,
    ns: Option<String>,
    filter: Vec<(String, String)>,
}

/// Send backlog then live events until timeout, client gone, or the drop budget is spent
/// (returns true in that last case).
async fn pump(
    tx: mpsc::Sender<Bytes>,
    backlog: Vec<StoreEvent>,
    mut live: tokio::sync::broadcast::Receiver<StoreEvent>,
    scope: Scope,
    timeout: Duration,
    drop_after: Option<usize>,
) -> bool {
    let Scope { kind, ns, filter } = scope;
    let mut last_rv = 0;
    let mut sent = 0usize;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut pending = backlog.into_iter();
    loop {
        if drop_after == Some(sent) {
            return true;
        }
        let ev = match pending.next() {
            Some(ev) => ev,
            None => tokio::select! {
                _ = &mut deadline => return false,
                _ = tx.closed() => return false,
                ev = live.recv() => match ev {
                    Ok(ev) => ev,
                    // Too slow to keep up: end the stream; the client resumes from its last version.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return false,
                },
            },
        };
        if ev.kind != kind
            || ns.as_ref().is_some_and(|n| *n != ev.namespace)
            || (ev.rv <= last_rv && ev.ty != crate::store::EventType::Added)
        {
            continue;
        }
        last_rv = last_rv.max(ev.rv);
        if !matches(&ev.object, &filter) {
            continue;
        }
        if tx.send(line(ev.ty.as_str(), &ev.object)).await.is_err() {
            return false;
        }
        sent += 1;
    }
}
