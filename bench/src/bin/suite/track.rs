//! Follows one measured process through the testplane's event stream: which connections are
//! its own (by the TLS handshake's client identity), its handshakes, its Lease writes, and a
//! `Sample` half an interval after each write (CPU, RSS, bytes on its connections), when it
//! sleeps between renewals. Windows over those samples are `stats`'.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bootlet_bench::procfs::{self, status_kib, ThreadLedger};
use testplane::{Event, TestPlane, WireBytes};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

/// Where a process's CPU time is read from.
pub enum CpuSource {
    /// Every thread of a Rust process (nanoseconds, with wake-ups).
    Threads(ThreadLedger),
    /// A shell plus the children it has reaped (10 ms ticks, no wake-ups).
    Shell(u32),
}

impl CpuSource {
    fn read(&mut self) -> (Option<u64>, Option<u64>) {
        match self {
            CpuSource::Threads(l) => {
                let c = l.refresh();
                (Some(c.ns), Some(c.wakeups))
            }
            CpuSource::Shell(pid) => (procfs::with_reaped_children_ns(*pid), None),
        }
    }
}

/// The state of the measured process half an interval after its `writes`-th Lease write.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: SystemTime,
    /// Lease writes (create or update) so far.
    pub writes: u64,
    pub cpu_ns: u64,
    pub wakeups: Option<u64>,
    pub rss_kib: Option<u64>,
    /// Summed over the process's connections so far (closed ones included).
    pub wire: WireBytes,
}

/// What a `Track` has seen so far.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub conns: BTreeSet<u64>,
    pub handshakes: Vec<SystemTime>,
    pub samples: Vec<Sample>,
}

pub struct Track {
    seen: Arc<Mutex<Seen>>,
    count: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

/// Whose connections are the process's: given the handshake's client certificate CN (None
/// for a token or anonymous client).
pub type Owns = Box<dyn Fn(Option<&str>) -> bool + Send>;

// === impl Track ===

impl Track {
    /// Follows `events` (subscribed before the process was started, so its first handshake
    /// is in them) for the process `pid` renewing Lease `lease` every `interval`.
    pub fn start(
        tp: Arc<TestPlane>,
        events: broadcast::Receiver<Event>,
        mut cpu: CpuSource,
        pid: u32,
        lease: &str,
        owns: Owns,
        interval: Duration,
    ) -> Track {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (count_tx, count) = watch::channel(0);
        let (lease, state) = (lease.to_string(), seen.clone());
        let task = tokio::spawn(async move {
            let mut events = events;
            let mut writes = 0u64;
            let mut next_sample: Option<Instant> = None;
            // Keeps the thread ledger current between samples (see ThreadLedger).
            let mut ledger_tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                let sample_at = next_sample.unwrap_or_else(|| Instant::now() + interval);
                tokio::select! {
                    ev = events.recv() => match ev {
                        Ok(Event::TlsHandshake { conn, client_cn, .. }) if owns(client_cn.as_deref()) => {
                            let mut s = lock(&state);
                            s.conns.insert(conn);
                            s.handshakes.push(testplane::wall_now());
                        }
                        Ok(Event::LeaseCreated { name, .. } | Event::LeaseRenewed { name, .. }) if name == lease => {
                            writes += 1;
                            next_sample = Some(Instant::now() + interval / 2);
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tokio::time::sleep_until(sample_at), if next_sample.is_some() => {
                        next_sample = None;
                        let (cpu_ns, wakeups) = cpu.read();
                        let Some(cpu_ns) = cpu_ns else { return };
                        let mut s = lock(&state);
                        let wire = s.conns.iter().filter_map(|c| tp.wire_bytes(*c)).fold(
                            WireBytes::default(),
                            |a, b| WireBytes {
                                from_client: a.from_client + b.from_client,
                                to_client: a.to_client + b.to_client,
                            },
                        );
                        s.samples.push(Sample {
                            at: testplane::wall_now(),
                            writes,
                            cpu_ns,
                            wakeups,
                            rss_kib: status_kib(pid, "VmRSS:"),
                            wire,
                        });
                        let _ = count_tx.send(s.samples.len());
                    }
                    _ = ledger_tick.tick() => {
                        if let CpuSource::Threads(l) = &mut cpu {
                            l.refresh();
                        }
                    }
                }
            }
        });
        Track { seen, count, task }
    }

    /// Waits until `n` samples exist; an error names what was awaited when `within` passes
    /// first (the process died or stopped renewing).
    pub async fn samples(&mut self, n: usize, within: Duration, what: &str) -> Result<(), String> {
        let reached = tokio::time::timeout(within, self.count.wait_for(|c| *c >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        if reached {
            return Ok(());
        }
        Err(format!(
            "{what}: {} of {n} samples after {} s (did it stop renewing its Lease?)",
            *self.count.borrow(),
            within.as_secs()
        ))
    }

    pub fn seen(&self) -> Seen {
        lock(&self.seen).clone()
    }

    pub fn stop(self) -> Seen {
        self.task.abort();
        self.seen()
    }
}

fn lock(m: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
