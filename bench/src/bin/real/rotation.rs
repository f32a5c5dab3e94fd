//! `real rotation` (the last part of `bash bench/run.sh --real`): the cost of one client
//! certificate rotation, bootlet's and the peer's.
//!
//! A cluster of its own signs 8-minute certificates (`REAL_ROTATION_CERT_SECONDS`, 480;
//! `--cluster-signing-duration`). The real signer backdates notBefore by 5 minutes and, for a
//! duration under 8 h, sets notAfter to its signing time + the duration
//! (`pkg/controller/certificates/authority/policies.go`), so a certificate lives 480 + 300 =
//! 780 s and is signed 300 s into its life. bootlet rotates at 75 % ± 5 % of the life, i.e.
//! 0.70 × 780 − 300 = 246 s to 0.80 × 780 − 300 = 324 s after issuance; the kubelet at
//! 70–90 %, 246 s to 0.90 × 780 − 300 = 402 s. 480 is the smallest round duration whose
//! earliest rotation (246 s, either kind) leaves room for the Lease-only window below, which
//! ends 210 s after the last certificate: (SETTLE + LEASE_ONLY + 30 s) / 0.7 − 300 ≈ 472 s.
//!
//! For each kind, REAL_ROTATION_N (10) agents bootstrap together. A steady Lease-only window
//! (`LEASE_ONLY`, 120 s, from `SETTLE`, 90 s, after the last certificate: the bootstrap's tail
//! is over; the window must end before every agent's earliest possible rotation, read from
//! its certificate, and no certificate may change inside it), then a rotation window until
//! every agent has rotated (bounded by the latest possible deadline, 90 %, + `ROTATE_GRACE`)
//! and `AFTER` more (the new certificate's first Lease renewal, which opens the new
//! connection, comes up to one interval later). A rotation costs:
//!
//! - node CPU, wake-ups, requests, bytes and connections: the rotation window's less its
//!   Lease renewals at the Lease-only window's figure per renewal;
//! - kube-apiserver's CPU: it spends ~16 ms/s by itself (and ~80-130 ms more in one second
//!   every 2 minutes: Go's garbage collection, forced that often on a server this idle),
//!   while a rotation costs it some ~10 ms; over the whole window one burst more or less
//!   than in the Lease-only window moves the figure by ±80 ms ÷ N, the sign of it at N = 5.
//!   So it is read every second and summed over the seconds around each rotation only: from
//!   its CSR's creation less `LEAD` to its new certificate on disk, and the seconds up to
//!   `AFTER` later in which the relay accepted a connection (a steady Lease connection is
//!   never new); less the Lease-only window's rate for as long; its own bursts (a second over
//!   the Lease-only window's median one + `BURST_NS`) left out of both. The garbage
//!   collection a rotation's allocations bring forward is not missed there: at this load the
//!   collections are forced by time, not by the heap. (The nodes' figures are not taken that
//!   way: the peer's Go runtime pays part of a rotation later, in its own collections; both
//!   ways are reported.)

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use testplane::kube::{Cluster, Options};
use tokio::time::Instant;

use crate::agents::{Agents, Kind, Set, Stage};
use crate::pin::Split;
use crate::relay::Relay;
use crate::table::{render, Row, Unit};
use crate::window::{api_cpu_ns, between, mark, Figures};

/// The signer's backdating of notBefore.
const BACKDATE: Duration = Duration::from_secs(300);
/// `REAL_ROTATION_CERT_SECONDS`' default: see the module's comment.
const CERT_SECONDS: u64 = 480;
/// From all certificates on disk to the Lease-only window's start: past the bootstrap's tail
/// (the bootstrap connections' close, the Lease's create, the owner lookup, the approver's
/// and signer's work).
const SETTLE: Duration = Duration::from_secs(90);
/// The Lease-only window.
const LEASE_ONLY: Duration = Duration::from_secs(120);
/// The earliest and latest rotation deadline of either kind, as fractions of the life.
const EARLIEST: f64 = 0.70;
const LATEST: f64 = 0.90;
/// Past the latest possible deadline, the time a rotation may take (CSR, approval, signing).
const ROTATE_GRACE: Duration = Duration::from_secs(60);
/// After a new certificate is on disk: its first Lease renewal (within one 10 s interval)
/// opens the new connection; the poll is 1 s. The rotation window lasts this long past the
/// last rotation; around a rotation, the seconds this long after it with a new connection
/// count.
const AFTER: Duration = Duration::from_secs(11);
/// Before a rotation's CSR is created: the agent's own requests before the POST, the
/// timestamp's truncation to the second.
const LEAD: Duration = Duration::from_secs(2);
/// kube-apiserver's own bursts: a second in which it spent this much more than in the
/// Lease-only window's median second (Go's garbage collection, forced every 2 minutes, costs
/// it 80-130 ms in one second here; a rotation some 10-20 ms, spread over seconds).
const BURST_NS: f64 = 40e6;
const SECOND: Duration = Duration::from_secs(1);
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// A kind's rotation figures: per rotation.
#[derive(Debug, Default)]
struct Cost {
    rotations: usize,
    /// Over the whole rotation window, less its renewals.
    cpu_ns: f64,
    wakeups: f64,
    requests: f64,
    bytes: f64,
    conns: f64,
    /// Over the seconds around the rotations, its own bursts left out.
    api_cpu_ns: f64,
    /// The other way round, for comparison: over the seconds around the rotations, and over
    /// the whole window.
    around_cpu_ns: f64,
    around_wakeups: f64,
    whole_api_cpu_ns: f64,
    /// How long the seconds around the rotations were, and the rotation window.
    spans_secs: f64,
    window_secs: f64,
    /// The Lease-only window's end before the earliest possible rotation.
    margin: Duration,
    lease_puts: f64,
    lease_conns: u64,
    /// kube-apiserver's own bursts left out: in the Lease-only window, in the spans.
    bursts: (usize, usize),
    /// kube-apiserver's CPU per second in the Lease-only window, its bursts left out.
    api_rate: f64,
}

/// Node CPU, wake-ups and kube-apiserver's CPU at one moment.
#[derive(Debug, Clone, Copy)]
struct Tick {
    at: Instant,
    /// Connections the relay accepted so far.
    conns: u64,
    cpu_ns: u64,
    wakeups: u64,
    api_cpu_ns: u64,
}

pub async fn run() -> Result<String, String> {
    let dir = std::path::absolute("target/rotation-real-state").map_err(|e| e.to_string())?;
    let mut opts = Options::new(dir);
    opts.cert_ttl = crate::setup::secs("REAL_ROTATION_CERT_SECONDS", CERT_SECONDS);
    eprintln!(
        "rotation: starting a cluster signing {:?} certificates",
        opts.cert_ttl
    );
    let (c, split) = crate::pin::cluster(opts, Split::from_env()).await?;
    let result = measure(&c, split.as_ref()).await;
    c.shutdown().await;
    result
}

async fn measure(c: &Cluster, split: Option<&Split>) -> Result<String, String> {
    let set = Set::up(c).await?;
    let stage = set.stage(c);
    let n = crate::setup::num("REAL_ROTATION_N", 10) as usize;
    let mut costs = Vec::new();
    for kind in [Kind::Bootlet, Kind::Peer] {
        costs.push(one(stage, kind, n).await?);
    }
    let (b, p) = (&costs[0], &costs[1]);
    let row = |what: &str, unit, f: &dyn Fn(&Cost) -> f64| {
        Row::new(
            format!("one rotation: {what}"),
            unit,
            Some(f(b)),
            Some(f(p)),
        )
    };
    let rows = [
        row("rotations measured", Unit::Num(0), &|c| c.rotations as f64),
        row("node CPU", Unit::Ms, &|c| c.cpu_ns),
        row("node wake-ups", Unit::Num(0), &|c| c.wakeups),
        row("requests", Unit::Num(1), &|c| c.requests),
        row("bytes on the wire, both ways", Unit::Num(0), &|c| c.bytes),
        row("new connections (TLS handshakes)", Unit::Num(2), &|c| {
            c.conns
        }),
        row("kube-apiserver CPU", Unit::Ms, &|c| c.api_cpu_ns),
    ];
    let ttl = crate::setup::secs("REAL_ROTATION_CERT_SECONDS", CERT_SECONDS);
    let mut out = format!(
        "\n## One client certificate rotation, {n} agents of each kind ({} s certificates)\n\n",
        ttl.as_secs()
    );
    out.push_str(&render(&rows));
    let life = (ttl + BACKDATE).as_secs_f64();
    let after = |f: f64| f * life - BACKDATE.as_secs_f64();
    writeln!(
        out,
        "\n- certificates of {} s live {life:.0} s (notBefore backdated {} s): bootlet rotates \
         {:.0}–{:.0} s after issuance (75 % ± 5 %), the kubelet {:.0}–{:.0} s (70–90 %)",
        ttl.as_secs(),
        BACKDATE.as_secs(),
        after(0.70),
        after(0.80),
        after(0.70),
        after(0.90)
    )
    .ok();
    writeln!(
        out,
        "- Lease-only window: {} s from {} s after the last certificate, no certificate changed \
         in it; it ended {:.0} s (bootlet) and {:.0} s (peer) before the earliest possible \
         rotation; {:.0} and {:.0} Lease PUTs (the cluster's own included), {} and {} new \
         connections in it",
        LEASE_ONLY.as_secs(),
        SETTLE.as_secs(),
        b.margin.as_secs_f64(),
        p.margin.as_secs_f64(),
        b.lease_puts,
        p.lease_puts,
        b.lease_conns,
        p.lease_conns
    )
    .ok();
    writeln!(
        out,
        "- node CPU, wake-ups, requests, bytes, connections: the rotation window ({:.0} s \
         bootlet, {:.0} s peer, until the last rotation + {} s) less its Lease renewals at the \
         Lease-only window's figure per renewal, per rotation",
        b.window_secs,
        p.window_secs,
        AFTER.as_secs()
    )
    .ok();
    writeln!(
        out,
        "- kube-apiserver CPU (with kube-controller-manager's approval and signing): read every \
         second, over the seconds around each rotation (its CSR's creation − {} s to its \
         certificate seen on disk, 1 s polls; and, up to {} s later, the seconds in which the \
         relay accepted a connection; {:.0} s bootlet, {:.0} s peer) less the Lease-only \
         window's rate ({:.1} / {:.1} ms/s) for as long, per rotation; its own bursts, seconds \
         over the Lease-only window's median second + {:.0} ms, left out of both (bootlet: {} \
         in the Lease-only window, {} around the rotations; peer: {}, {})",
        LEAD.as_secs(),
        AFTER.as_secs(),
        b.spans_secs,
        p.spans_secs,
        b.api_rate / 1e6,
        p.api_rate / 1e6,
        BURST_NS / 1e6,
        b.bursts.0,
        b.bursts.1,
        p.bursts.0,
        p.bursts.1
    )
    .ok();
    writeln!(
        out,
        "- the other way round (bootlet / peer): kube-apiserver CPU over the whole rotation \
         window, no burst left out, {:.3} / {:.3} ms; node CPU over the seconds around the \
         rotations {:.3} / {:.3} ms, wake-ups {:.0} / {:.0}",
        b.whole_api_cpu_ns / 1e6,
        p.whole_api_cpu_ns / 1e6,
        b.around_cpu_ns / 1e6,
        p.around_cpu_ns / 1e6,
        b.around_wakeups,
        p.around_wakeups
    )
    .ok();
    writeln!(out, "- {}", crate::pin::describe(split)).ok();
    let path = "target/bench-real.md";
    let mut md = std::fs::read_to_string(path).unwrap_or_default();
    md.push_str(&out);
    std::fs::write(path, md).map_err(|e| format!("{path}: {e}"))?;
    Ok(out)
}

async fn one(stage: Stage<'_>, kind: Kind, n: usize) -> Result<Cost, String> {
    let Stage { c, relay, .. } = stage;
    let label = kind.label();
    let prefix = format!("rot-{label}");
    eprintln!("rotation: {n} {label} agents");
    let mut agents = Agents::join(stage, kind, n, &prefix).await?;
    agents.wait_certs(Duration::from_secs(120)).await?;
    let first = agents.cert_pems();
    let lives = first
        .iter()
        .map(|pem| validity(pem))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("{label}: a certificate without a readable validity"))?;
    let deadline = |f: f64| {
        move |(nb, na): &(SystemTime, SystemTime)| {
            let life = na.duration_since(*nb).unwrap_or_default();
            *nb + life.mul_f64(f)
        }
    };
    let earliest = lives.iter().map(deadline(EARLIEST)).min().unwrap_or(SYS0);
    let latest = lives.iter().map(deadline(LATEST)).max().unwrap_or(SYS0);
    let too_late = |end: SystemTime| {
        earliest.duration_since(end).map_err(|_| {
            format!(
                "{label}: the Lease-only window ends after the earliest possible rotation; \
                 raise REAL_ROTATION_CERT_SECONDS"
            )
        })
    };
    let margin = too_late(testplane::wall_now() + SETTLE + LEASE_ONLY)?;
    eprintln!(
        "rotation: {label}: a Lease-only window in {SETTLE:?} for {LEASE_ONLY:?}, ~{}s before the \
         earliest possible rotation",
        margin.as_secs()
    );

    agents.hold(SETTLE, Duration::from_secs(1)).await?;
    let a = mark(c, Some(&mut agents), relay).await?;
    let mut base = vec![tick(c, &mut agents, relay).await?];
    let end = Instant::now() + LEASE_ONLY;
    while Instant::now() < end {
        let step = end.saturating_duration_since(Instant::now()).min(SECOND);
        agents.hold(step, SECOND).await?;
        base.push(tick(c, &mut agents, relay).await?);
    }
    let b = mark(c, Some(&mut agents), relay).await?;
    let margin = too_late(testplane::wall_now())?;
    let lease = between(&a, &b);
    if agents.cert_pems() != first {
        return Err(format!("{label}: a rotation inside the Lease-only window"));
    }

    // Until every agent has rotated; each change of a certificate file, and when it was seen.
    let mut ticks = vec![tick(c, &mut agents, relay).await?];
    let mut seen = first.clone();
    let mut seen_at: Vec<Vec<Instant>> = vec![vec![]; n];
    let until = instant_of(latest) + ROTATE_GRACE;
    while seen_at.iter().any(Vec::is_empty) {
        if Instant::now() >= until {
            return Err(format!(
                "{label}: not every agent rotated by the latest possible deadline + {ROTATE_GRACE:?}"
            ));
        }
        agents.hold(SECOND, SECOND).await?;
        ticks.push(tick(c, &mut agents, relay).await?);
        rotated(&agents, &mut seen, &mut seen_at);
    }
    // The last new certificate's first renewal (and so its connection) is up to an interval
    // away.
    let last = Instant::now() + AFTER;
    while Instant::now() < last {
        agents.hold(SECOND, SECOND).await?;
        ticks.push(tick(c, &mut agents, relay).await?);
        rotated(&agents, &mut seen, &mut seen_at);
    }
    let d = mark(c, Some(&mut agents), relay).await?;
    let rot = between(&b, &d);
    let created = rotation_csrs(c, &agents).await;
    agents.stop().await;
    crate::agents::delete_nodes(c, &prefix).await?;

    // The seconds around each rotation: from its CSR's creation (or, without one, 5 s before
    // it was seen) less LEAD to its certificate seen on disk; and up to AFTER later, the
    // seconds in which the relay accepted a connection (the new certificate's; a steady
    // Lease connection is never new, see the Lease-only window).
    let mut spans = Vec::new();
    for (i, times) in seen_at.iter().enumerate() {
        let mut csrs = created.get(i).cloned().unwrap_or_default();
        csrs.sort();
        for (k, seen) in times.iter().enumerate() {
            let start = csrs
                .get(k)
                .map_or(*seen - Duration::from_secs(5), |t| instant_of(*t))
                .min(*seen)
                - LEAD;
            spans.push((start, *seen));
            for w in ticks.windows(2) {
                if w[1].conns > w[0].conns && w[1].at > start && w[0].at < *seen + AFTER {
                    spans.push((w[0].at, w[1].at));
                }
            }
        }
    }
    let rotations: usize = seen_at.iter().map(Vec::len).sum();
    Ok(cost(&lease, &rot, &base, &ticks, &spans, rotations, margin))
}

const SYS0: SystemTime = SystemTime::UNIX_EPOCH;

/// The monotonic instant of a wall-clock time.
fn instant_of(t: SystemTime) -> Instant {
    let (now, wall) = (Instant::now(), testplane::wall_now());
    match wall.duration_since(t) {
        Ok(ago) => now.checked_sub(ago).unwrap_or(now),
        Err(ahead) => now + ahead.duration(),
    }
}

async fn tick(c: &Cluster, agents: &mut Agents, relay: &Relay) -> Result<Tick, String> {
    let s = agents.sample();
    Ok(Tick {
        at: Instant::now(),
        conns: relay.snapshot().conns,
        cpu_ns: s.cpu_ns,
        wakeups: s.wakeups,
        api_cpu_ns: api_cpu_ns(c).await?,
    })
}

/// Record each agent whose certificate file changed since `seen`.
fn rotated(agents: &Agents, seen: &mut [Vec<u8>], seen_at: &mut [Vec<Instant>]) {
    for (i, pem) in agents.cert_pems().into_iter().enumerate() {
        if !pem.is_empty() && pem != seen[i] {
            seen[i] = pem;
            seen_at[i].push(Instant::now());
        }
    }
}

/// The creation times of each agent's CSRs made as its node (`system:node:NAME`: the
/// rotations, not the bootstrap), by agent.
async fn rotation_csrs(c: &Cluster, agents: &Agents) -> Vec<Vec<SystemTime>> {
    let mut out = vec![vec![]; agents.agents.len()];
    let Ok((200, body)) = c.api("GET", CSRS, None).await else {
        return out;
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    for item in v["items"].as_array().into_iter().flatten() {
        let user = item["spec"]["username"].as_str().unwrap_or_default();
        let Some(node) = user.strip_prefix("system:node:") else {
            continue;
        };
        let Some(i) = agents.agents.iter().position(|a| a.name == node) else {
            continue;
        };
        let created = item["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok());
        if let Some(t) = created {
            out[i].push(SystemTime::from(t));
        }
    }
    out
}

/// notBefore and notAfter of the first certificate in a PEM file.
fn validity(pem: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let der = testplane::pki::pem_blocks(pem, "CERTIFICATE")
        .into_iter()
        .next()?;
    let (_, x) = x509_parser::parse_x509_certificate(&der).ok()?;
    let at = |t: i64| Some(SYS0 + Duration::from_secs(u64::try_from(t).ok()?));
    let v = x.validity();
    Some((at(v.not_before.timestamp())?, at(v.not_after.timestamp())?))
}

/// One tick to the next.
struct Step {
    secs: f64,
    cpu_ns: f64,
    wakeups: f64,
    api_cpu_ns: f64,
    /// kube-apiserver's own burst (see `BURST_NS`).
    burst: bool,
}

fn steps(ticks: &[Tick]) -> Vec<(Tick, Tick, Step)> {
    ticks
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let step = Step {
                secs: (b.at - a.at).as_secs_f64().max(1e-9),
                cpu_ns: b.cpu_ns.saturating_sub(a.cpu_ns) as f64,
                wakeups: b.wakeups.saturating_sub(a.wakeups) as f64,
                api_cpu_ns: b.api_cpu_ns.saturating_sub(a.api_cpu_ns) as f64,
                burst: false,
            };
            (a, b, step)
        })
        .collect()
}

/// Sums over steps: seconds, node CPU, wake-ups; seconds and CPU of kube-apiserver over the
/// steps that are not its own bursts; how many were.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    secs: f64,
    cpu_ns: f64,
    wakeups: f64,
    api_secs: f64,
    api_cpu_ns: f64,
    bursts: usize,
}

fn sum<'a>(steps: impl Iterator<Item = &'a Step>) -> Sums {
    let mut s = Sums::default();
    for st in steps {
        s.secs += st.secs;
        s.cpu_ns += st.cpu_ns;
        s.wakeups += st.wakeups;
        if st.burst {
            s.bursts += 1;
        } else {
            s.api_secs += st.secs;
            s.api_cpu_ns += st.api_cpu_ns;
        }
    }
    s
}

/// A rotation's cost: over the rotation window less its renewals at the Lease-only window's
/// figure per renewal; kube-apiserver's CPU over the ticks that overlap a rotation's span,
/// less the Lease-only window's rate (its ticks, `base`) for as long, its own bursts left
/// out of both (the nodes' CPU and wake-ups that way too, for comparison).
#[allow(clippy::too_many_arguments)]
fn cost(
    lease: &Figures,
    rot: &Figures,
    base: &[Tick],
    ticks: &[Tick],
    spans: &[(Instant, Instant)],
    rotations: usize,
    margin: Duration,
) -> Cost {
    let per_rotation = rotations.max(1) as f64;
    let per = |f: &dyn Fn(&Figures) -> f64| {
        let unit = f(lease) / lease.lease_puts.max(1.0);
        (f(rot) - unit * rot.lease_puts) / per_rotation
    };
    let mut base = steps(base);
    let mut rates: Vec<f64> = base.iter().map(|(_, _, s)| s.api_cpu_ns / s.secs).collect();
    rates.sort_by(f64::total_cmp);
    let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
    let mut around = steps(ticks);
    for (_, _, s) in base.iter_mut().chain(around.iter_mut()) {
        s.burst = s.api_cpu_ns / s.secs > median + BURST_NS;
    }
    around.retain(|(t0, t1, _)| spans.iter().any(|(s, e)| t0.at < *e && t1.at > *s));
    let b = sum(base.iter().map(|(_, _, s)| s));
    let r = sum(around.iter().map(|(_, _, s)| s));
    let net = |x: f64, base_x: f64, base_secs: f64, secs: f64| {
        (x - base_x / base_secs.max(1e-9) * secs) / per_rotation
    };
    Cost {
        rotations,
        cpu_ns: per(&|f| f.agents_cpu_ns),
        wakeups: per(&|f| f.agents_wakeups),
        api_cpu_ns: net(r.api_cpu_ns, b.api_cpu_ns, b.api_secs, r.api_secs),
        around_cpu_ns: net(r.cpu_ns, b.cpu_ns, b.secs, r.secs),
        around_wakeups: net(r.wakeups, b.wakeups, b.secs, r.secs),
        whole_api_cpu_ns: per(&|f| f.api_cpu_ns),
        requests: per(&|f| f.node_requests),
        bytes: per(&|f| (f.relay.up + f.relay.down) as f64),
        conns: per(&|f| f.relay.conns as f64),
        spans_secs: r.secs,
        window_secs: rot.secs,
        margin,
        lease_puts: lease.lease_puts,
        lease_conns: lease.relay.conns,
        bursts: (b.bursts, r.bursts),
        api_rate: b.api_cpu_ns / b.api_secs.max(1e-9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` ticks a second apart from `t0`, kube-apiserver spending `api(i)` ms in the i-th
    /// second.
    fn ticks(t0: Instant, n: usize, api: impl Fn(usize) -> u64) -> Vec<Tick> {
        let mut total = 0;
        (0..n)
            .map(|i| {
                if i > 0 {
                    total += api(i) * 1_000_000;
                }
                Tick {
                    at: t0 + SECOND * i as u32,
                    conns: 0,
                    cpu_ns: 0,
                    wakeups: 0,
                    api_cpu_ns: total,
                }
            })
            .collect()
    }

    #[test]
    fn a_rotation_costs_the_server_what_its_seconds_spent_over_the_rate_bursts_left_out() {
        let t0 = Instant::now();
        // 16 ms/s, a 100 ms burst in the Lease-only window and one in the rotation window,
        // outside the rotation; the rotation spends 4 ms more in each of 5 seconds.
        let base = ticks(t0, 121, |i| if i == 60 { 116 } else { 16 });
        let at = t0 + SECOND * 121;
        let rot = ticks(at, 61, |i| match i {
            21..=25 => 20,
            40 => 116,
            _ => 16,
        });
        let spans = [(at + SECOND * 20, at + SECOND * 25)];
        let c = cost(
            &Figures::default(),
            &Figures::default(),
            &base,
            &rot,
            &spans,
            1,
            Duration::ZERO,
        );
        assert_eq!(c.bursts, (1, 0));
        assert!((c.api_rate - 16e6).abs() < 1e3, "{}", c.api_rate);
        assert!((c.api_cpu_ns - 20e6).abs() < 1e3, "{}", c.api_cpu_ns);
        assert!((c.spans_secs - 5.0).abs() < 1e-6, "{}", c.spans_secs);
    }

    #[test]
    fn the_default_certificate_leaves_room_for_the_lease_only_window() {
        let life = (CERT_SECONDS + BACKDATE.as_secs()) as f64;
        let earliest = EARLIEST * life - BACKDATE.as_secs_f64();
        let window_end = (SETTLE + LEASE_ONLY).as_secs_f64();
        assert!(earliest - window_end >= 30.0, "{earliest} vs {window_end}");
        assert!(LATEST * life - BACKDATE.as_secs_f64() < 420.0);
    }
}
