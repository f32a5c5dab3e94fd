//! What the fleet driver learns from the testplane's event stream while the fleet runs:
//! which identity each connection authenticated as, which connections are open, when
//! certificates were issued, and when an outage ended. One task drains the stream so the
//! broadcast channel never lags behind (a lag is counted and reported, not hidden).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use testplane::{Event, TestPlane};
use tokio::sync::broadcast::error::RecvError;

#[derive(Default)]
pub struct Seen {
    /// Client certificate CN per connection (none for a bootstrap token's).
    pub cn: BTreeMap<u64, Option<String>>,
    pub open: BTreeSet<u64>,
    /// (when, notAfter) of every issued certificate.
    pub issued: Vec<(SystemTime, SystemTime)>,
    pub outage_ended: Option<SystemTime>,
    /// Events the stream dropped because this task fell behind.
    pub lagged: u64,
}

#[derive(Clone)]
pub struct Tracker(Arc<Mutex<Seen>>);

impl Tracker {
    pub fn start(tp: &TestPlane) -> Tracker {
        let mut rx = tp.events();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let into = seen.clone();
        tokio::spawn(async move {
            loop {
                let e = match rx.recv().await {
                    Ok(e) => e,
                    Err(RecvError::Lagged(n)) => {
                        lock(&into).lagged += n;
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                };
                let mut s = lock(&into);
                match e {
                    Event::ConnectionOpened { conn } => {
                        s.open.insert(conn);
                    }
                    Event::ConnectionClosed { conn } => {
                        s.open.remove(&conn);
                    }
                    Event::TlsHandshake {
                        conn, client_cn, ..
                    } => {
                        s.cn.insert(conn, client_cn);
                    }
                    Event::CsrIssued { not_after, .. } => {
                        s.issued.push((testplane::wall_now(), not_after));
                    }
                    Event::OutageEnded => s.outage_ended = Some(testplane::wall_now()),
                    _ => {}
                }
            }
        });
        Tracker(seen)
    }

    pub fn with<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&lock(&self.0))
    }

    /// Connections that authenticated with a node's client certificate.
    pub fn node_conns(&self) -> Vec<u64> {
        self.with(|s| {
            s.cn.iter()
                .filter(|(_, cn)| cn.as_deref().is_some_and(is_node))
                .map(|(c, _)| *c)
                .collect()
        })
    }

    /// Open connections: (all, those with a node's certificate).
    pub fn open(&self) -> (usize, usize) {
        self.with(|s| {
            let nodes = s
                .open
                .iter()
                .filter(|c| {
                    s.cn.get(c)
                        .and_then(|cn| cn.as_deref())
                        .is_some_and(is_node)
                })
                .count();
            (s.open.len(), nodes)
        })
    }
}

pub fn is_node(user: &str) -> bool {
    user.starts_with("system:node:")
}

fn lock(m: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
