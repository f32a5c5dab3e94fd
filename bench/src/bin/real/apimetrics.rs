//! kube-apiserver's own `/metrics`, read as the admin: request counts by resource, verb and
//! code, and the Lease PUT latency histogram. A figure over a window is the difference of two
//! scrapes (the counters reset when the process restarts: scrape again after a restart).

use testplane::kube::Cluster;

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// One scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    samples: Vec<Sample>,
}

/// What a node does on the wire: non-LIST/WATCH requests on Leases and CSRs, and GETs of
/// Nodes (kube-controller-manager writes Node status itself, through its informers' LIST and
/// WATCH; it reads no Node with GET).
pub fn node_request(l: &Labels) -> bool {
    let verb = l.get("verb");
    match l.get("resource") {
        "leases" | "certificatesigningrequests" => !matches!(verb, "LIST" | "WATCH"),
        "nodes" => verb == "GET",
        _ => false,
    }
}

/// A Lease renewal: PUT of a Lease.
pub fn lease_put(l: &Labels) -> bool {
    l.get("resource") == "leases" && l.get("verb") == "PUT"
}

/// Labels of a sample.
pub struct Labels<'a>(&'a [(String, String)]);

impl Labels<'_> {
    pub fn get(&self, key: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }
}

// === impl Scrape ===

impl Scrape {
    pub async fn take(c: &Cluster) -> Result<Scrape, String> {
        match c.api("GET", "/metrics", None).await {
            Ok((200, body)) => Ok(Scrape::parse(&body)),
            Ok((code, body)) => Err(format!("GET /metrics: HTTP {code}: {body:.200}")),
            Err(e) => Err(format!("GET /metrics: {e}")),
        }
    }

    pub fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(parse_line)
            .collect();
        Scrape { samples }
    }

    /// The sum of `name` over the samples whose labels pass `pred`.
    pub fn sum(&self, name: &str, pred: impl Fn(&Labels) -> bool) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name && pred(&Labels(&s.labels)))
            .map(|s| s.value)
            .sum()
    }

    /// `NAME_bucket` summed per `le`, ascending.
    pub fn buckets(&self, name: &str, pred: impl Fn(&Labels) -> bool) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut out: Vec<(f64, f64)> = Vec::new();
        for s in self.samples.iter().filter(|s| s.name == bucket) {
            let l = Labels(&s.labels);
            if !pred(&l) {
                continue;
            }
            let le = match l.get("le") {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or(f64::INFINITY),
            };
            match out.iter_mut().find(|(b, _)| *b == le) {
                Some((_, c)) => *c += s.value,
                None => out.push((le, s.value)),
            }
        }
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

/// Cumulative buckets of a window (later − earlier).
pub fn bucket_delta(later: &[(f64, f64)], earlier: &[(f64, f64)]) -> Vec<(f64, f64)> {
    later
        .iter()
        .map(|(le, c)| {
            let before = earlier
                .iter()
                .find(|(b, _)| b == le)
                .map_or(0.0, |(_, v)| *v);
            (*le, c - before)
        })
        .collect()
}

/// The `q` quantile of cumulative buckets, linearly interpolated inside its bucket (as
/// PromQL's histogram_quantile); None without observations.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lo, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lo);
            }
            let inside = count - below;
            let frac = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lo + (le - lo) * frac);
        }
        (lo, below) = (le, count);
    }
    Some(lo)
}

fn parse_line(line: &str) -> Option<Sample> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.trim().parse().ok()?;
    let (name, labels) = match head.find('{') {
        None => (head.trim().to_string(), vec![]),
        Some(i) => (head[..i].to_string(), parse_labels(&head[i + 1..])),
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// `a="x",b="y\"z"}` → pairs.
fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim_start_matches([',', ' ']).to_string();
        if key.is_empty() || key.starts_with('}') || chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key, value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_sums_and_quantiles() {
        let text = "# HELP x\n\
            apiserver_request_total{code=\"200\",resource=\"leases\",verb=\"PUT\"} 10\n\
            apiserver_request_total{code=\"409\",resource=\"leases\",verb=\"PUT\"} 2\n\
            apiserver_request_total{code=\"200\",resource=\"nodes\",verb=\"LIST\"} 5\n\
            d_bucket{resource=\"leases\",verb=\"PUT\",le=\"0.005\"} 4\n\
            d_bucket{resource=\"leases\",verb=\"PUT\",le=\"0.01\"} 8\n\
            d_bucket{resource=\"leases\",verb=\"PUT\",le=\"+Inf\"} 8\n";
        let s = Scrape::parse(text);
        assert_eq!(s.sum("apiserver_request_total", lease_put), 12.0);
        assert_eq!(s.sum("apiserver_request_total", node_request), 12.0);
        let b = s.buckets("d", lease_put);
        assert_eq!(b.len(), 3);
        assert_eq!(quantile(&b, 0.5), Some(0.005));
        assert_eq!(quantile(&b, 0.75), Some(0.0075));
        assert_eq!(quantile(&bucket_delta(&b, &b), 0.5), None);
    }
}
