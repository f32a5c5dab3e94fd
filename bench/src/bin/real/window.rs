//! A measuring window: a mark at each end (the agents' CPU and memory, the relay's counts,
//! a scrape of kube-apiserver's /metrics and its CPU from /proc) and the differences between
//! two marks.

use bootlet_bench::procfs::with_reaped_children_ns;
use testplane::kube::Cluster;
use tokio::time::Instant;

use crate::agents::{Agents, Sample};
use crate::apimetrics::{self, bucket_delta, Scrape};
use crate::relay::{Relay, Snapshot};

const DURATION: &str = "apiserver_request_duration_seconds";
const REQUESTS: &str = "apiserver_request_total";

/// Everything read at one moment.
pub struct Mark {
    pub at: Instant,
    pub agents: Sample,
    pub relay: Snapshot,
    pub scrape: Scrape,
    pub api_cpu_ns: u64,
    /// kube-apiserver's resident memory (VmRSS), KiB.
    pub api_rss_kib: u64,
}

/// What happened between two marks.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub secs: f64,
    /// Lease PUTs the API server answered (every code).
    pub lease_puts: f64,
    /// Requests a node makes (`apimetrics::node_request`).
    pub node_requests: f64,
    /// Requests answered 429, any resource.
    pub too_many: f64,
    /// Every request, any resource.
    pub all_requests: f64,
    pub agents_cpu_ns: f64,
    pub agents_wakeups: f64,
    pub relay: Snapshot,
    pub api_cpu_ns: f64,
    /// Lease PUT latency: cumulative buckets, sum and count.
    pub lat_buckets: Vec<(f64, f64)>,
    pub lat_sum: f64,
    pub lat_count: f64,
}

async fn api_pid(c: &Cluster) -> Result<u32, String> {
    c.pid("kube-apiserver")
        .await
        .ok_or_else(|| "kube-apiserver is not running".to_string())
}

/// kube-apiserver's utime + stime so far, in ns.
pub async fn api_cpu_ns(c: &Cluster) -> Result<u64, String> {
    let pid = api_pid(c).await?;
    with_reaped_children_ns(pid).ok_or_else(|| format!("/proc/{pid}/stat unreadable"))
}

/// kube-apiserver's resident memory (VmRSS) now, KiB.
pub async fn api_rss_kib(c: &Cluster) -> Result<u64, String> {
    let pid = api_pid(c).await?;
    bootlet_bench::procfs::status_kib(pid, "VmRSS:")
        .ok_or_else(|| format!("/proc/{pid}/status unreadable"))
}

/// Read everything now (`agents` may be None: the idle cluster).
pub async fn mark(c: &Cluster, agents: Option<&mut Agents>, relay: &Relay) -> Result<Mark, String> {
    let agents = agents.map(|a| a.sample()).unwrap_or_default();
    let relay = relay.snapshot();
    let api_cpu_ns = api_cpu_ns(c).await?;
    let api_rss_kib = api_rss_kib(c).await?;
    let scrape = Scrape::take(c).await?;
    Ok(Mark {
        at: Instant::now(),
        agents,
        relay,
        scrape,
        api_cpu_ns,
        api_rss_kib,
    })
}

/// The figures of the window from `a` to `b`.
pub fn between(a: &Mark, b: &Mark) -> Figures {
    let d = |f: &dyn Fn(&Scrape) -> f64| f(&b.scrape) - f(&a.scrape);
    let lat = |s: &Scrape| s.buckets(DURATION, apimetrics::lease_put);
    Figures {
        secs: (b.at - a.at).as_secs_f64(),
        lease_puts: d(&|s| s.sum(REQUESTS, apimetrics::lease_put)),
        node_requests: d(&|s| s.sum(REQUESTS, apimetrics::node_request)),
        too_many: d(&|s| s.sum(REQUESTS, |l| l.get("code") == "429")),
        all_requests: d(&|s| s.sum(REQUESTS, |_| true)),
        agents_cpu_ns: b.agents.cpu_ns.saturating_sub(a.agents.cpu_ns) as f64,
        agents_wakeups: b.agents.wakeups.saturating_sub(a.agents.wakeups) as f64,
        relay: b.relay.since(a.relay),
        api_cpu_ns: b.api_cpu_ns.saturating_sub(a.api_cpu_ns) as f64,
        lat_buckets: bucket_delta(&lat(&b.scrape), &lat(&a.scrape)),
        lat_sum: d(&|s| s.sum(&format!("{DURATION}_sum"), apimetrics::lease_put)),
        lat_count: d(&|s| s.sum(&format!("{DURATION}_count"), apimetrics::lease_put)),
    }
}

/// The end sample of a window (memory at its end).
pub fn end_sample(m: &Mark) -> Sample {
    m.agents
}
